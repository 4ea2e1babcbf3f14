//! What can go wrong when building a tokenizer or decoding ids.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenizerError {
    /// `token_types` does not have one entry per token.
    TypeCountMismatch { tokens: usize, types: usize },
    /// More tokens than a `u32` id can address.
    TooManyTokens(usize),
    /// A merge rule is not two tokens separated by one space.
    MalformedMerge { rank: usize, merge: String },
    /// A merge rule names a token that is not in the vocabulary.
    MergeTokenUnknown { rank: usize, token: String },
    /// Byte-level BPE needs a token for every single byte.
    MissingByteToken(u8),
    /// A byte-level token holds a character outside GPT-2's byte alphabet.
    NotByteLevel { id: u32, token: String },
    /// A BOS/EOS/... id from the metadata is not in the vocabulary.
    SpecialIdOutOfRange { name: &'static str, id: u32, n_vocab: usize },
    /// An id given to decode is not in the vocabulary.
    UnknownId { id: u32, n_vocab: usize },
    /// A metadata key the tokenizer needs is absent.
    MissingKey(&'static str),
    /// A metadata key has another type than the tokenizer needs.
    WrongType { key: &'static str, expected: &'static str },
    /// `tokenizer.ggml.model` / `tokenizer.ggml.pre` name a tokenizer this one is not.
    Unsupported { key: &'static str, value: String },
}

impl fmt::Display for TokenizerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TypeCountMismatch { tokens, types } => {
                write!(f, "{tokens} tokens but {types} token types")
            }
            Self::TooManyTokens(n) => write!(f, "{n} tokens: too many for u32 ids"),
            Self::MalformedMerge { rank, merge } => {
                write!(f, "merge {rank} {merge:?} is not two tokens separated by a space")
            }
            Self::MergeTokenUnknown { rank, token } => {
                write!(f, "merge {rank} uses {token:?}, which is not in the vocabulary")
            }
            Self::MissingByteToken(b) => write!(f, "no token for byte 0x{b:02x}"),
            Self::NotByteLevel { id, token } => {
                write!(f, "token {id} {token:?} is not in GPT-2's byte-level alphabet")
            }
            Self::SpecialIdOutOfRange { name, id, n_vocab } => {
                write!(f, "{name} token id {id} is outside the vocabulary of {n_vocab}")
            }
            Self::UnknownId { id, n_vocab } => {
                write!(f, "token id {id} is outside the vocabulary of {n_vocab}")
            }
            Self::MissingKey(key) => write!(f, "GGUF metadata has no {key}"),
            Self::WrongType { key, expected } => write!(f, "GGUF metadata {key} is not {expected}"),
            Self::Unsupported { key, value } => write!(f, "{key} = {value:?} is not supported"),
        }
    }
}

impl std::error::Error for TokenizerError {}
