//! Qwen's tokenizer: byte-level BPE with the Qwen2 pre-tokenizer, NFC normalisation as the HF
//! tokenizer does it, added tokens (`<|im_start|>`, ...) and streaming decoding.
//!
//! Encoding: text -> split at added tokens (only when asked) -> NFC -> pre-tokenizer pieces
//! -> byte-level BPE per piece. The vocabulary, merges and token kinds all come from the GGUF
//! metadata; the pre-tokenizer is the one its `tokenizer.ggml.pre` = "qwen2" names.

mod bpe;
mod byte_level;
mod char_class;
mod decode;
mod error;
mod from_gguf;
mod nfc;
mod nfc_tables;
mod pretokenize;
mod ranges;
mod special;
pub mod trie;
mod unicode_tables;

use std::collections::HashMap;
use std::sync::OnceLock;

use bpe::Bpe;
use byte_level::ByteAlphabet;
use decode::TokenBytes;
use special::{AddedTokens, Segment};
use trie::VocabTrie;

pub use decode::StreamDecoder;
pub use error::TokenizerError;

/// GGUF token types (llama.cpp's `llama_token_type`) other than normal (1).
const TYPE_CONTROL: i32 = 3;
const TYPE_USER_DEFINED: i32 = 4;
/// Vocabulary padding (Qwen's `[PAD151669]`...): decodes to nothing, as in HF and llama.cpp.
const TYPE_UNUSED: i32 = 5;

/// Added tokens are matched whole in the text and decode to their own text.
fn is_added(token_type: i32) -> bool {
    token_type == TYPE_CONTROL || token_type == TYPE_USER_DEFINED
}

pub struct Tokenizer {
    tokens: Vec<String>,
    types: Vec<i32>,
    ids: HashMap<String, u32>,
    bpe: Bpe,
    added: AddedTokens,
    bytes: TokenBytes,
    bos: Option<u32>,
    eos: Option<u32>,
    /// Ids that end a generation.
    eog: Vec<u32>,
    nfc: bool,
    /// Built on first use (constrained decoding): tens of milliseconds, not every run needs it.
    trie: OnceLock<VocabTrie>,
    /// The bytes of the longest token: a text of n bytes is at least n / longest tokens.
    longest: usize,
}

/// Bounds on counting an untrusted text (a server's request): the most tokens it may be (a
/// text whose bytes alone make more is not counted), and the longest pre-token (a run of
/// letters, say) BPE is run on.
#[derive(Clone, Copy, Debug)]
pub struct Within {
    pub tokens: usize,
    pub piece_bytes: usize,
}

/// Why a text was not counted within its bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Beyond {
    /// Its bytes alone make at least this many tokens (with those before it), over the bound.
    Tokens { at_least: usize },
    /// It has a pre-token of this many bytes.
    Piece(usize),
}

/// The 256 single-byte tokens of the byte-level alphabet, in byte order (the smallest
/// vocabulary a byte-level BPE tokenizer can have; `hrx synth` builds on it).
pub fn byte_tokens() -> Vec<String> {
    let alphabet = ByteAlphabet::new();
    (0..=255u8).map(|b| alphabet.char_of(b).to_string()).collect()
}

impl Tokenizer {
    /// A tokenizer from the GGUF vocabulary: `tokens` (byte-level strings), their
    /// `token_types` (1 normal, 3 control, 4 user-defined, ...), `merges` ("left right", best
    /// first) and the BOS/EOS ids. NFC normalisation is on.
    pub fn new(
        tokens: Vec<String>,
        token_types: Vec<i32>,
        merges: &[impl AsRef<str>],
        bos: Option<u32>,
        eos: Option<u32>,
    ) -> Result<Self, TokenizerError> {
        let n_vocab = tokens.len();
        if token_types.len() != n_vocab {
            return Err(TokenizerError::TypeCountMismatch { tokens: n_vocab, types: token_types.len() });
        }
        if u32::try_from(n_vocab).is_err() {
            return Err(TokenizerError::TooManyTokens(n_vocab));
        }
        for (name, id) in [("BOS", bos), ("EOS", eos)] {
            if let Some(id) = id.filter(|&id| usize::try_from(id).map_or(true, |i| i >= n_vocab)) {
                return Err(TokenizerError::SpecialIdOutOfRange { name, id, n_vocab });
            }
        }
        let mut ids = HashMap::with_capacity(n_vocab);
        for (token, id) in tokens.iter().zip(0u32..) {
            // A repeated string keeps its first id.
            ids.entry(token.clone()).or_insert(id);
        }
        let alphabet = ByteAlphabet::new();
        let bpe = Bpe::new(&ids, merges, &alphabet)?;
        let added = AddedTokens::new(
            tokens
                .iter()
                .zip(&token_types)
                .zip(0u32..)
                .filter(|&((_, &ty), _)| is_added(ty))
                .map(|((token, _), id)| (token.clone(), id)),
        );
        let bytes = TokenBytes::new(&tokens, &token_types, &alphabet)?;
        let longest = (0..n_vocab as u32).filter_map(|id| bytes.get(id)).map(<[u8]>::len).max().unwrap_or(1);
        Ok(Tokenizer {
            tokens,
            types: token_types,
            ids,
            bpe,
            added,
            bytes,
            bos,
            eos,
            eog: eos.into_iter().collect(),
            nfc: true,
            trie: OnceLock::new(),
            longest: longest.max(1),
        })
    }

    /// Turns NFC normalisation on (the default, as the HF tokenizer does) or off (as llama.cpp).
    pub fn with_nfc(mut self, nfc: bool) -> Self {
        self.nfc = nfc;
        self
    }

    /// The ids of `text`. With `parse_special`, added tokens written in the text (chat template
    /// markers such as `<|im_start|>`) become their ids; without, they are tokenized as text.
    /// No BOS/EOS is added.
    pub fn encode(&self, text: &str, parse_special: bool) -> Vec<u32> {
        let mut ids = Vec::new();
        if !parse_special {
            // Unbounded: nothing is beyond.
            let _ = self.encode_text(text, None, &mut ids);
            return ids;
        }
        for segment in self.added.split(text) {
            match segment {
                Segment::Text(t) => {
                    let _ = self.encode_text(t, None, &mut ids);
                }
                Segment::Token(id) => ids.push(id),
            }
        }
        ids
    }

    /// Appends the ids of `text` (added tokens as text) to `ids` `within` its bounds: a text
    /// whose bytes alone make more tokens is refused before any BPE (no token is longer than
    /// the vocabulary's longest), and a pre-token longer than the bound before its BPE. A
    /// server counts its requests so: what it counts is at most the bound's worth of bytes.
    pub fn encode_within(&self, text: &str, within: Within, ids: &mut Vec<u32>) -> Result<(), Beyond> {
        self.encode_text(text, Some(within), ids)
    }

    /// Text without added tokens: normalise, pre-tokenize, BPE (`within` its bounds).
    fn encode_text(&self, text: &str, within: Option<Within>, ids: &mut Vec<u32>) -> Result<(), Beyond> {
        let text = if self.nfc { nfc::nfc(text) } else { text.into() };
        if let Some(w) = within {
            let at_least = ids.len() + text.len().div_ceil(self.longest);
            if at_least > w.tokens {
                return Err(Beyond::Tokens { at_least });
            }
        }
        for piece in pretokenize::pieces(&text) {
            if within.is_some_and(|w| piece.len() > w.piece_bytes) {
                return Err(Beyond::Piece(piece.len()));
            }
            self.bpe.encode_piece(piece, ids);
        }
        Ok(())
    }

    /// The text of `ids`, added tokens included; invalid UTF-8 becomes U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        let mut bytes = Vec::new();
        for &id in ids {
            bytes.extend_from_slice(self.token_to_bytes(id)?);
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The bytes that token `id` stands for (not necessarily whole UTF-8 characters).
    pub fn token_to_bytes(&self, id: u32) -> Result<&[u8], TokenizerError> {
        self.bytes.get(id).ok_or_else(|| self.unknown(id))
    }

    /// The vocabulary string of token `id`, as stored (byte-level: a space is 'Ġ').
    pub fn token_str(&self, id: u32) -> Result<&str, TokenizerError> {
        let i = usize::try_from(id).map_err(|_| self.unknown(id))?;
        self.tokens.get(i).map(String::as_str).ok_or_else(|| self.unknown(id))
    }

    /// The id of the vocabulary string `token` (byte-level form for normal tokens).
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.ids.get(token).copied()
    }

    pub fn n_vocab(&self) -> usize {
        self.tokens.len()
    }

    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// Whether `id` ends a generation (EOS, and end-of-turn tokens the metadata names).
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.contains(&id)
    }

    /// The ids that end a generation.
    pub fn eog(&self) -> &[u32] {
        &self.eog
    }

    /// The byte trie of the tokens that stand for bytes (not added or unused ones).
    pub fn trie(&self) -> &VocabTrie {
        self.trie.get_or_init(|| {
            let normal = self.types.iter().zip(0u32..).filter(|(&ty, _)| !is_added(ty) && ty != TYPE_UNUSED);
            VocabTrie::new(&self.bytes, normal.map(|(_, id)| id))
        })
    }

    /// Whether `id` is a control token (`<|im_end|>`, ...), which a reader of the output
    /// usually should not see.
    pub fn is_control(&self, id: u32) -> bool {
        let i = usize::try_from(id).unwrap_or(usize::MAX);
        self.types.get(i) == Some(&TYPE_CONTROL)
    }

    fn unknown(&self, id: u32) -> TokenizerError {
        TokenizerError::UnknownId { id, n_vocab: self.n_vocab() }
    }
}

/// A summary: the vocabulary itself is far too long to print.
impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("n_vocab", &self.n_vocab())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("eog", &self.eog)
            .field("nfc", &self.nfc)
            .finish_non_exhaustive()
    }
}
