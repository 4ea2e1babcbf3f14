//! A conversation's state on a text model: which sequence of the KV cache it has, how many of
//! its slots are used and where the M-RoPE positions continue.

use super::text_model::{Outputs, Read, TextModel, TokenInput};
use super::RuntimeError;

/// One piece of a prompt.
#[derive(Clone, Copy, Debug)]
pub enum PromptPiece<'a> {
    Token(u32),
    /// An image's merged tokens, row-major over a grid of `rows` × `cols` (merged patches):
    /// `rows * cols` wide-embedding rows.
    Image {
        embeddings: &'a [f32],
        rows: usize,
        cols: usize,
    },
}

impl PromptPiece<'_> {
    /// KV slots the piece takes.
    pub fn slots(&self) -> usize {
        match *self {
            PromptPiece::Token(_) => 1,
            PromptPiece::Image { rows, cols, .. } => rows * cols,
        }
    }
}

/// A prompt laid out for the text model: inputs, their [t, h, w] positions, and where the
/// positions continue.
pub struct Layout<'a> {
    pub inputs: Vec<TokenInput<'a>>,
    pub positions: Vec<[i32; 3]>,
    pub next_position: i32,
}

#[derive(Clone, Debug)]
pub struct Session {
    /// The first KV slot of its sequence (n_ctx slots from there are its).
    pub base: usize,
    /// KV slots used so far.
    pub n_past: usize,
    /// M-RoPE position of the next text token.
    pub next_position: i32,
}

impl Default for Session {
    fn default() -> Self {
        Self::new()
    }
}

impl Session {
    /// A conversation in the first sequence of the cache.
    pub fn new() -> Session {
        Session::at(0)
    }

    /// A conversation in the sequence whose slots start at `base`.
    pub fn at(base: usize) -> Session {
        Session { base, n_past: 0, next_position: 0 }
    }

    /// The KV slot the next token takes.
    pub fn next_slot(&self) -> usize {
        self.base + self.n_past
    }

    /// Counts a token decoded at [`Session::next_slot`] (by a batched step).
    pub fn advance(&mut self) {
        self.n_past += 1;
        self.next_position += 1;
    }

    /// Inputs and their [t, h, w] positions, as the reference's rope-index function assigns
    /// them: text tokens share one running position; an image's tokens at s get
    /// (s, s + row, s + col) and the running position continues at s + max(rows, cols).
    pub fn layout<'a>(&self, pieces: &[PromptPiece<'a>], width: usize) -> Result<Layout<'a>, RuntimeError> {
        let mut inputs = Vec::new();
        let mut positions = Vec::new();
        let mut pos = self.next_position;
        for piece in pieces {
            match *piece {
                PromptPiece::Token(id) => {
                    inputs.push(TokenInput::Text(id));
                    positions.push([pos; 3]);
                    pos += 1;
                }
                PromptPiece::Image { embeddings, rows, cols } => {
                    if embeddings.len() != rows * cols * width {
                        return Err(RuntimeError::Usage(format!(
                            "image of {rows}x{cols} tokens needs {} embedding values, got {}",
                            rows * cols * width,
                            embeddings.len()
                        )));
                    }
                    for (k, row) in embeddings.chunks(width).enumerate() {
                        inputs.push(TokenInput::Embedding(row));
                        let (r, c) = ((k / cols) as i32, (k % cols) as i32);
                        positions.push([pos, pos + r, pos + c]);
                    }
                    pos += rows.max(cols) as i32;
                }
            }
        }
        Ok(Layout { inputs, positions, next_position: pos })
    }

    /// Feeds the pieces in chunks and returns the logits of the last one. A prompt that does
    /// not fit what is left of the context is refused before any of it runs, with its real size.
    pub fn feed(&mut self, model: &mut TextModel, pieces: &[PromptPiece]) -> Result<Vec<f32>, RuntimeError> {
        feed_together(model, &mut [(self, pieces)], Read::Logits)?.logits()
    }

    /// Decodes one text token at the next slot and position; returns what `read` asks of its
    /// logits.
    pub fn step(&mut self, model: &mut TextModel, token: u32, read: Read) -> Result<Outputs, RuntimeError> {
        let n_ctx = model.options().n_ctx;
        // Past its own slots the next would be another sequence's.
        if self.n_past >= n_ctx {
            return Err(RuntimeError::ContextFull { needed: self.n_past + 1, n_ctx });
        }
        let outputs = model.forward_batch(&[token], &[self.next_position], &[self.next_slot()], read)?;
        self.advance();
        Ok(outputs)
    }

    /// Whether the KV cache of `model` has no slot left.
    pub fn is_full(&self, model: &TextModel) -> bool {
        self.n_past >= model.options().n_ctx
    }
}

/// Feeds each session its prompt, all of them in the same chunks (each token at its own
/// session's next slot, so every session must have a sequence of its own), and returns what
/// `read` asks of each prompt's last logits, in order. Many short prompts then fill the products of one call
/// instead of a call each. Any prompt that does not fit what is left of its context, or is
/// empty, is refused before any of them runs; on an error no session moves on (the slots
/// written are past every session's n_past).
pub fn feed_together(
    model: &mut TextModel,
    prompts: &mut [(&mut Session, &[PromptPiece])],
    read: Read,
) -> Result<Outputs, RuntimeError> {
    let (n_ctx, width) = (model.options().n_ctx, model.params().wide_width());
    let mut sequences: Vec<usize> = prompts.iter().map(|(s, _)| s.base / n_ctx).collect();
    sequences.sort_unstable();
    if sequences.windows(2).any(|w| w[0] == w[1]) {
        return Err(RuntimeError::Usage("feed_together: two prompts in one sequence".into()));
    }
    let mut inputs = Vec::new();
    let mut positions = Vec::new();
    let mut slots = Vec::new();
    // Index in the stream of each prompt's last token.
    let mut ends = Vec::with_capacity(prompts.len());
    let mut next_positions = Vec::with_capacity(prompts.len());
    for (session, pieces) in prompts.iter() {
        let needed = session.n_past + pieces.iter().map(PromptPiece::slots).sum::<usize>();
        if needed > n_ctx {
            return Err(RuntimeError::ContextFull { needed, n_ctx });
        }
        let layout = session.layout(pieces, width)?;
        if layout.inputs.is_empty() {
            return Err(RuntimeError::Usage("the prompt is empty".into()));
        }
        slots.extend((0..layout.inputs.len()).map(|k| session.next_slot() + k));
        inputs.extend(layout.inputs);
        positions.extend(layout.positions);
        ends.push(inputs.len() - 1);
        next_positions.push(layout.next_position);
    }
    let chunk = model.options().chunk;
    let mut read_back = match read {
        Read::Logits => Outputs::Logits(Vec::new()),
        Read::Argmax => Outputs::Argmax(Vec::new()),
    };
    let mut start = 0;
    while start < inputs.len() {
        let end = (start + chunk).min(inputs.len());
        let outputs: Vec<usize> = ends.iter().filter(|&&e| (start..end).contains(&e)).map(|&e| e - start).collect();
        let rows = model.prefill(&inputs[start..end], &positions[start..end], &slots[start..end], &outputs, read)?;
        read_back.append(rows)?;
        start = end;
    }
    for ((session, pieces), next) in prompts.iter_mut().zip(next_positions) {
        session.n_past += pieces.iter().map(PromptPiece::slots).sum::<usize>();
        session.next_position = next;
    }
    Ok(read_back)
}
