//! Turning ids back into text, at once or one id at a time.

use super::byte_level::ByteAlphabet;
use super::{is_added, Tokenizer, TokenizerError, TYPE_UNUSED};

/// Decodes ids one at a time, as a model generates them, and hands out the text that is
/// complete so far: the bytes of a character split over several tokens are held back until the
/// character is whole. Bytes that can never become valid UTF-8 come out as U+FFFD, exactly as
/// [`Tokenizer::decode`] of all the ids would give them.
pub struct StreamDecoder<'t> {
    tokenizer: &'t Tokenizer,
    /// An incomplete UTF-8 sequence at the end of the bytes so far (at most 3 bytes).
    pending: Vec<u8>,
}

impl<'t> StreamDecoder<'t> {
    pub fn new(tokenizer: &'t Tokenizer) -> Self {
        StreamDecoder { tokenizer, pending: Vec::new() }
    }

    /// Adds one id; returns the text it completes (possibly empty).
    pub fn push(&mut self, id: u32) -> Result<String, TokenizerError> {
        self.pending.extend_from_slice(self.tokenizer.token_to_bytes(id)?);
        let mut out = String::new();
        let mut held = 0;
        let mut chunks = self.pending.utf8_chunks().peekable();
        while let Some(chunk) = chunks.next() {
            out.push_str(chunk.valid());
            let bad = chunk.invalid();
            if bad.is_empty() {
                continue;
            }
            // At the very end, a sequence that is only cut short may still be completed.
            let incomplete =
                chunks.peek().is_none() && std::str::from_utf8(bad).is_err_and(|e| e.error_len().is_none());
            if incomplete {
                held = bad.len();
            } else {
                out.push(char::REPLACEMENT_CHARACTER);
            }
        }
        let done = self.pending.len() - held;
        self.pending.drain(..done);
        Ok(out)
    }

    /// Ends the stream: what is still held back can no longer be completed, so it becomes U+FFFD.
    pub fn finish(self) -> String {
        String::from_utf8_lossy(&self.pending).into_owned()
    }
}

/// The bytes of every token, one buffer for the whole vocabulary.
pub(super) struct TokenBytes {
    data: Vec<u8>,
    /// Token `id` is `data[starts[id]..starts[id + 1]]`.
    starts: Vec<usize>,
}

impl TokenBytes {
    /// Added tokens stand for their own text, unused ones for nothing; the rest are byte-level.
    pub(super) fn new(tokens: &[String], types: &[i32], alphabet: &ByteAlphabet) -> Result<Self, TokenizerError> {
        let mut data = Vec::with_capacity(tokens.iter().map(String::len).sum());
        let mut starts = Vec::with_capacity(tokens.len() + 1);
        starts.push(0);
        for ((token, &ty), id) in tokens.iter().zip(types).zip(0u32..) {
            if is_added(ty) {
                data.extend_from_slice(token.as_bytes());
            } else if ty != TYPE_UNUSED {
                for c in token.chars() {
                    let not_byte_level = || TokenizerError::NotByteLevel { id, token: token.clone() };
                    data.push(alphabet.byte_of(c).ok_or_else(not_byte_level)?);
                }
            }
            starts.push(data.len());
        }
        Ok(TokenBytes { data, starts })
    }

    pub(super) fn get(&self, id: u32) -> Option<&[u8]> {
        let i = usize::try_from(id).ok()?;
        let (&start, &end) = (self.starts.get(i)?, self.starts.get(i.checked_add(1)?)?);
        self.data.get(start..end)
    }
}
