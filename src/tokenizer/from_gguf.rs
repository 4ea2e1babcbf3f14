//! Building the tokenizer from a GGUF file's `tokenizer.ggml.*` metadata.

use crate::gguf::{GgufFile, Value};

use super::{Tokenizer, TokenizerError};

const MODEL: &str = "tokenizer.ggml.model";
const PRE: &str = "tokenizer.ggml.pre";
const TOKENS: &str = "tokenizer.ggml.tokens";
const TOKEN_TYPES: &str = "tokenizer.ggml.token_type";
const MERGES: &str = "tokenizer.ggml.merges";
const BOS: &str = "tokenizer.ggml.bos_token_id";
const EOS: &str = "tokenizer.ggml.eos_token_id";
/// Further ids that end a generation, where the metadata names them.
const EOG_KEYS: [&str; 2] = ["tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"];

impl Tokenizer {
    /// The tokenizer described by `file`'s metadata: byte-level BPE (`model` "gpt2") with the
    /// Qwen2 pre-tokenizer (`pre` "qwen2"), the only kind implemented here.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, TokenizerError> {
        expect_str(file, MODEL, "gpt2")?;
        expect_str(file, PRE, "qwen2")?;
        let tokens = array(file, TOKENS, "an array of strings", |v| v.as_str().map(str::to_owned))?;
        let types = array(file, TOKEN_TYPES, "an array of i32", |v| v.as_i64().and_then(|t| i32::try_from(t).ok()))?;
        let merges = array(file, MERGES, "an array of strings", Value::as_str)?;
        let mut tokenizer = Tokenizer::new(tokens, types, &merges, id(file, BOS)?, id(file, EOS)?)?;
        for key in EOG_KEYS {
            if let Some(eog) = id(file, key)? {
                let n_vocab = tokenizer.n_vocab();
                if usize::try_from(eog).map_or(true, |i| i >= n_vocab) {
                    return Err(TokenizerError::SpecialIdOutOfRange { name: key, id: eog, n_vocab });
                }
                if !tokenizer.eog.contains(&eog) {
                    tokenizer.eog.push(eog);
                }
            }
        }
        // Like llama.cpp, also end at control tokens whose text says so (Qwen's generation
        // config lists <|endoftext|> beside <|im_end|>; the GGUF has one EOS id).
        for text in EOG_TEXTS {
            if let Some(id) = tokenizer.token_id(text).filter(|&id| tokenizer.is_control(id)) {
                if !tokenizer.eog.contains(&id) {
                    tokenizer.eog.push(id);
                }
            }
        }
        Ok(tokenizer)
    }
}

/// Control tokens that end a generation wherever they appear.
const EOG_TEXTS: [&str; 2] = ["<|endoftext|>", "<|im_end|>"];

fn get<'f>(file: &'f GgufFile, key: &'static str) -> Result<&'f Value, TokenizerError> {
    file.get(key).ok_or(TokenizerError::MissingKey(key))
}

fn expect_str(file: &GgufFile, key: &'static str, want: &str) -> Result<(), TokenizerError> {
    let value = get(file, key)?.as_str().ok_or(TokenizerError::WrongType { key, expected: "a string" })?;
    if value != want {
        return Err(TokenizerError::Unsupported { key, value: value.to_owned() });
    }
    Ok(())
}

/// Every element of the array at `key`, converted by `elem`.
fn array<'f, T>(
    file: &'f GgufFile,
    key: &'static str,
    expected: &'static str,
    elem: impl Fn(&'f Value) -> Option<T>,
) -> Result<Vec<T>, TokenizerError> {
    let wrong = || TokenizerError::WrongType { key, expected };
    get(file, key)?.as_array().ok_or_else(wrong)?.iter().map(|v| elem(v).ok_or_else(wrong)).collect()
}

/// An optional token id.
fn id(file: &GgufFile, key: &'static str) -> Result<Option<u32>, TokenizerError> {
    file.get(key).map(|v| v.as_u32().ok_or(TokenizerError::WrongType { key, expected: "a u32 token id" })).transpose()
}
