//! Continuous batching: up to n_seq conversations on one text model, each prompt prefilled
//! alone into its own sequence of the KV cache, all of them decoded together a token a step by
//! the batched plan. A sequence that stops frees its slots for the next prompt at once, so a
//! long answer does not hold the short ones up.

use super::generate::{prompt_tokens, Decoding, Delta, GenerateConfig, Generation, Made};
use super::session::{PromptPiece, Session};
use super::text_model::TextModel;
use super::RuntimeError;
use crate::model::TextParams;
use crate::tokenizer::Tokenizer;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// A conversation being decoded, known to the caller by `tag`.
struct Active<'a, T> {
    tag: T,
    session: Session,
    decoding: Decoding<'a>,
    /// The token to feed at the next step.
    next: u32,
    prompt_logits: Vec<f32>,
    n_prompt: usize,
    prompt_seconds: f64,
    decoding_since: Instant,
}

/// A conversation that stopped, and what it made.
pub struct Finished<T> {
    pub tag: T,
    pub generation: Generation,
}

/// The sequences of one text model's KV cache and the conversations in them.
pub struct Batch<'a, T> {
    config: &'a GenerateConfig,
    tokenizer: &'a Tokenizer,
    file: PathBuf,
    /// By sequence: the conversation in it, if any.
    seqs: Vec<Option<Active<'a, T>>>,
}

/// Nothing streams from a batch: answers are taken whole.
fn quiet(_: &Delta) -> ControlFlow<()> {
    ControlFlow::Continue(())
}

impl<'a, T> Batch<'a, T> {
    /// Empty sequences of `model` (its n_seq) generating by `config`; `tokenizer` is the
    /// model's (held apart from it: decoding and running interleave).
    pub fn new(model: &TextModel, tokenizer: &'a Tokenizer, config: &'a GenerateConfig) -> Batch<'a, T> {
        let seqs = (0..model.options().n_seq).map(|_| None).collect();
        Batch { config, tokenizer, file: model.file().path().to_owned(), seqs }
    }

    /// Whether a sequence is free for another prompt.
    pub fn has_room(&self) -> bool {
        self.seqs.iter().any(Option::is_none)
    }

    /// Whether no conversation is under way.
    pub fn is_empty(&self) -> bool {
        self.seqs.iter().all(Option::is_none)
    }

    /// Prefills `pieces` into a free sequence and takes the answer's first token; the answer
    /// when that already ends it. The error (a prompt that does not fit, a full batch) leaves
    /// the sequences as they were.
    pub fn start(
        &mut self,
        model: &mut TextModel,
        pieces: &[PromptPiece],
        tag: T,
    ) -> Result<Option<Finished<T>>, RuntimeError> {
        let seq = self
            .seqs
            .iter()
            .position(Option::is_none)
            .ok_or_else(|| RuntimeError::Usage("every sequence of the batch is taken".into()))?;
        let t0 = Instant::now();
        let mut session = Session::at(seq * model.options().n_ctx);
        let prompt_logits = session.feed(model, pieces)?;
        let prompt_seconds = t0.elapsed().as_secs_f64();
        let vocab = (self.tokenizer, Path::new(&self.file));
        let mut decoding =
            Decoding::new(self.config, vocab, prompt_tokens(pieces), session.n_past, model.options().n_ctx)?;
        let decoding_since = Instant::now();
        let first = decoding.step(prompt_logits.clone(), session.is_full(model), &mut quiet)?;
        let n_prompt = session.n_past;
        let active =
            Active { tag, session, decoding, next: 0, prompt_logits, n_prompt, prompt_seconds, decoding_since };
        match first {
            Some(next) => {
                self.seqs[seq] = Some(Active { next, ..active });
                Ok(None)
            }
            None => Ok(Some(finish(active))),
        }
    }

    /// Decodes a token of every conversation under way in one call; returns those that
    /// stopped (their sequences free again). On an error no conversation can go on: see
    /// [`Batch::abandon`].
    pub fn step(&mut self, model: &mut TextModel) -> Result<Vec<Finished<T>>, RuntimeError> {
        let under_way: Vec<usize> = (0..self.seqs.len()).filter(|&i| self.seqs[i].is_some()).collect();
        if under_way.is_empty() {
            return Ok(Vec::new());
        }
        let active = || self.seqs.iter().flatten();
        let tokens: Vec<u32> = active().map(|a| a.next).collect();
        let positions: Vec<i32> = active().map(|a| a.session.next_position).collect();
        let slots: Vec<usize> = active().map(|a| a.session.next_slot()).collect();
        let logits = model.forward_batch(&tokens, &positions, &slots)?;
        let n_vocab = logits.len() / under_way.len();
        let mut finished = Vec::new();
        for (seq, row) in under_way.into_iter().zip(logits.chunks_exact(n_vocab)) {
            let Some(mut a) = self.seqs[seq].take() else { continue };
            a.session.advance();
            match a.decoding.step(row.to_vec(), a.session.is_full(model), &mut quiet)? {
                Some(next) => self.seqs[seq] = Some(Active { next, ..a }),
                None => finished.push(finish(a)),
            }
        }
        Ok(finished)
    }

    /// Ends every conversation under way (after a failed step) and returns their tags.
    pub fn abandon(&mut self) -> Vec<T> {
        self.seqs.iter_mut().filter_map(Option::take).map(|a| a.tag).collect()
    }
}

fn finish<T>(a: Active<T>) -> Finished<T> {
    let Made { tokens, text, logprobs, stop } = a.decoding.finish(&mut quiet);
    let generation = Generation {
        tokens,
        text,
        stop,
        prompt_logits: a.prompt_logits,
        logprobs,
        n_prompt: a.n_prompt,
        prompt_seconds: a.prompt_seconds,
        generate_seconds: a.decoding_since.elapsed().as_secs_f64(),
    };
    Finished { tag: a.tag, generation }
}

/// Bytes of KV cache a sequence of `n_ctx` slots takes: K and V, f32, of every layer.
pub fn kv_bytes_per_sequence(p: &TextParams, n_ctx: usize) -> u64 {
    (p.n_layer * 2 * p.n_head_kv * p.head_dim * 4) as u64 * n_ctx as u64
}

/// Most sequences a default batch takes: past this the batched decode step is bound by
/// compute, not by reading the weights, and gains little.
pub const MAX_DEFAULT_SEQUENCES: usize = 16;

/// The default batch for a device of `memory` bytes holding `weights` bytes of model: as many
/// sequences as a quarter of what the weights leave holds KV caches for (the rest for the
/// plans' arenas, the vision encoder and everything else on the device), 1 to
/// [`MAX_DEFAULT_SEQUENCES`].
pub fn default_sequences(p: &TextParams, n_ctx: usize, memory: u64, weights: u64) -> usize {
    let left = memory.saturating_sub(weights) / 4;
    let n = left / kv_bytes_per_sequence(p, n_ctx).max(1);
    (n as usize).clamp(1, MAX_DEFAULT_SEQUENCES)
}
