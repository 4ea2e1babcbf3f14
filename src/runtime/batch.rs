//! Continuous batching: up to n_seq conversations on one text model, each in its own sequence
//! of the KV cache, the prompts that start at once prefilled together, all of them decoded
//! together a token a step by the batched plan. A sequence that stops frees its slots for the next prompt at once, so a
//! long answer does not hold the short ones up.

use super::generate::{prompt_tokens, Choice, Decoding, Delta, GenerateConfig, Generation, Made};
use super::session::{feed_together, PromptPiece, Session};
use super::text_model::{Read, Scores, TextModel};
use super::RuntimeError;
use crate::model::TextParams;
use crate::quant::DType;
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
    n_prompt: usize,
    prompt_seconds: f64,
    decoding_since: Instant,
}

/// A conversation that stopped, and what it made.
pub struct Finished<T> {
    pub tag: T,
    pub generation: Generation,
}

/// The sequences of one text model's KV cache and the conversations in them, each generating
/// by its own settings.
pub struct Batch<'a, T> {
    tokenizer: &'a Tokenizer,
    file: PathBuf,
    /// By sequence: the conversation in it, if any.
    seqs: Vec<Option<Active<'a, T>>>,
}

/// What becomes of a conversation at a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// Decode its next token with the others.
    Step,
    /// Leave it as it is this step (its reader is behind).
    Hold,
    /// Stop it now (its reader went away): it ends as cancelled.
    Cancel,
}

/// Who follows the conversations of a batch: says what each does at a step and takes each
/// one's text as it becomes final (a break stops that conversation, as cancelled).
pub trait Listener<T> {
    /// What the conversation tagged `tag` does at this step (asked before every step).
    fn turn(&mut self, _tag: &T) -> Turn {
        Turn::Step
    }

    /// Text of `tag`'s answer that became final, once per token and once at its end.
    fn text(&mut self, _tag: &T, _delta: &Delta) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }
}

/// Every conversation steps, and their answers are taken whole.
pub struct Quiet;

impl<T> Listener<T> for Quiet {}

/// A prompt to start: its pieces, how to generate its answer, and its tag.
pub struct Start<'p, T> {
    pub pieces: Vec<PromptPiece<'p>>,
    pub config: GenerateConfig,
    pub tag: T,
}

/// What became of a prompt given to [`Batch::start_all`].
pub enum Started<T> {
    /// Its answer is under way in a sequence.
    Running,
    /// Its first token ended its answer.
    Finished(Finished<T>),
    /// It did not start, and why.
    Failed(T, RuntimeError),
}

/// What a step did: the conversations that stopped (their sequences free again) and how many
/// were decoded (none when every one was held).
pub struct Stepped<T> {
    pub finished: Vec<Finished<T>>,
    pub decoded: usize,
}

impl<'a, T> Batch<'a, T> {
    /// Empty sequences of `model` (its n_seq); `tokenizer` is the model's (held apart from it:
    /// decoding and running interleave).
    pub fn new(model: &TextModel, tokenizer: &'a Tokenizer) -> Batch<'a, T> {
        let seqs = (0..model.options().n_seq).map(|_| None).collect();
        Batch { tokenizer, file: model.file().path().to_owned(), seqs }
    }

    /// Whether no conversation is under way.
    pub fn is_empty(&self) -> bool {
        self.seqs.iter().all(Option::is_none)
    }

    /// Free sequences: how many more prompts [`Batch::start_all`] takes now.
    pub fn room(&self) -> usize {
        self.seqs.iter().filter(|s| s.is_none()).count()
    }

    /// Prefills the prompts of `starts` together (in the same prefill calls, each into a free
    /// sequence) and takes each answer's first token (its text to `listener`); what became of
    /// each, in order. A prompt that cannot start (it does not fit its context, its settings
    /// are refused, no sequence is free) fails alone, before anything runs; a failed prefill
    /// fails every prompt of the call and leaves the sequences as they were.
    pub fn start_all(
        &mut self,
        model: &mut TextModel,
        starts: Vec<Start<T>>,
        listener: &mut dyn Listener<T>,
    ) -> Vec<Started<T>> {
        let t0 = Instant::now();
        let n_ctx = model.options().n_ctx;
        let vocab = (self.tokenizer, Path::new(&self.file));
        let mut free = (0..self.seqs.len()).filter(|&s| self.seqs[s].is_none());
        let mut started: Vec<Started<T>> = Vec::with_capacity(starts.len());
        // The prompts that can start: index in `started`, sequence, prompt, decoding.
        let mut ready = Vec::new();
        for Start { pieces, config, tag } in starts {
            let n_prompt = pieces.iter().map(PromptPiece::slots).sum::<usize>();
            let checked = match free.next() {
                None => Err(RuntimeError::Usage("every sequence of the batch is taken".into())),
                Some(_) if n_prompt > n_ctx => Err(RuntimeError::ContextFull { needed: n_prompt, n_ctx }),
                Some(_) if n_prompt == 0 => Err(RuntimeError::Usage("the prompt is empty".into())),
                Some(seq) => Decoding::new(config, vocab, prompt_tokens(&pieces), n_prompt, n_ctx).map(|d| (seq, d)),
            };
            match checked {
                Ok((seq, decoding)) => {
                    ready.push((started.len(), Session::at(seq * n_ctx), pieces, decoding, tag));
                    started.push(Started::Running);
                }
                Err(e) => started.push(Started::Failed(tag, e)),
            }
        }
        if ready.is_empty() {
            return started;
        }
        let read = Read::for_all(ready.iter().map(|(.., decoding, _)| decoding.read()));
        let mut prompts: Vec<(&mut Session, &[PromptPiece])> =
            ready.iter_mut().map(|(_, session, pieces, ..)| (session, pieces.as_slice())).collect();
        let fed = feed_together(model, &mut prompts, read);
        let prompt_seconds = t0.elapsed().as_secs_f64();
        let mut outputs = match fed {
            Ok(outputs) => outputs,
            Err(e) => {
                let message = e.to_string();
                for (i, _, _, _, tag) in ready {
                    started[i] = Started::Failed(tag, RuntimeError::Usage(message.clone()));
                }
                return started;
            }
        };
        let rows = outputs.rows(model.params().n_vocab);
        for ((i, session, _, mut decoding, tag), scores) in ready.into_iter().zip(rows) {
            let decoding_since = Instant::now();
            let seq = session.base / n_ctx;
            let first = decoding.step(scores, session.is_full(model), &mut |d| listener.text(&tag, d));
            let n_prompt = session.n_past;
            let active = Active { tag, session, decoding, next: 0, n_prompt, prompt_seconds, decoding_since };
            started[i] = match first {
                Ok(Some(next)) => {
                    self.seqs[seq] = Some(Active { next, ..active });
                    Started::Running
                }
                Ok(None) => Started::Finished(finish(active, listener)),
                Err(e) => Started::Failed(active.tag, e),
            };
        }
        started
    }

    /// Decodes a token of every conversation under way that `listener` steps, in one call,
    /// and ends those it cancels. On an error no conversation can go on: see
    /// [`Batch::abandon`].
    pub fn step(&mut self, model: &mut TextModel, listener: &mut dyn Listener<T>) -> Result<Stepped<T>, RuntimeError> {
        let mut finished = Vec::new();
        let mut stepping = Vec::new();
        for seq in 0..self.seqs.len() {
            let Some(a) = &self.seqs[seq] else { continue };
            match listener.turn(&a.tag) {
                Turn::Step => stepping.push(seq),
                Turn::Hold => {}
                Turn::Cancel => {
                    if let Some(mut a) = self.seqs[seq].take() {
                        a.decoding.cancel();
                        finished.push(finish(a, listener));
                    }
                }
            }
        }
        let decoded = stepping.len();
        if stepping.is_empty() {
            return Ok(Stepped { finished, decoded });
        }
        let active = || stepping.iter().filter_map(|&seq| self.seqs[seq].as_ref());
        let tokens: Vec<u32> = active().map(|a| a.next).collect();
        let positions: Vec<i32> = active().map(|a| a.session.next_position).collect();
        let slots: Vec<usize> = active().map(|a| a.session.next_slot()).collect();
        let read = Read::for_all(active().map(|a| a.decoding.read()));
        let t0 = Instant::now();
        let mut outputs = model.forward_batch(&tokens, &positions, &slots, read)?;
        let forwarded = t0.elapsed();
        let mut rows = outputs.rows(model.params().n_vocab);
        let choices = self.choose(&stepping, &mut rows)?;
        for ((seq, row), choice) in stepping.into_iter().zip(&rows).zip(choices) {
            let Some(mut a) = self.seqs[seq].take() else { continue };
            a.session.advance();
            let full = a.session.is_full(model);
            match a.decoding.take(choice, row.logits(), full, &mut |d| listener.text(&a.tag, d))? {
                Some(next) => self.seqs[seq] = Some(Active { next, ..a }),
                None => finished.push(finish(a, listener)),
            }
        }
        drop(rows);
        model.take_back(outputs);
        // Where a step's time goes on the host's side (RUST_LOG=hrx=debug).
        log::debug!(
            "step: {decoded} sequences: forward {:.3} ms, sampling and text {:.3} ms",
            forwarded.as_secs_f64() * 1e3,
            (t0.elapsed() - forwarded).as_secs_f64() * 1e3
        );
        Ok(Stepped { finished, decoded })
    }

    /// The token each sequence of `stepping` (in order) chooses from its row of `scores`, on
    /// threads side by side where they are logits: a choice from logits is at least an argmax
    /// over the vocabulary (151,936 values on the 2B model), and 32 sequences on one thread
    /// took 3 ms of a 15 ms step on the H200.
    fn choose(&mut self, stepping: &[usize], scores: &mut [Scores]) -> Result<Vec<Choice>, RuntimeError> {
        let mut rows: Vec<(&mut Decoding, &mut Scores)> = self
            .seqs
            .iter_mut()
            .enumerate()
            .filter(|(seq, _)| stepping.contains(seq))
            .filter_map(|(_, a)| a.as_mut().map(|a| &mut a.decoding))
            .zip(scores.iter_mut())
            .collect();
        // A thread's start (tens of microseconds) is below a row's argmax (about 90 there).
        static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let cores = *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let argmax_read = rows.iter().all(|(_, row)| matches!(row, Scores::Argmax(_)));
        let threads = if argmax_read { 1 } else { cores.min(rows.len()) };
        if threads < 2 {
            return Ok(rows.into_iter().map(|(d, row)| d.choose(row)).collect());
        }
        let per = rows.len().div_ceil(threads);
        std::thread::scope(|s| {
            let handles: Vec<_> = rows
                .chunks_mut(per)
                .map(|part| s.spawn(move || part.iter_mut().map(|(d, row)| d.choose(row)).collect::<Vec<_>>()))
                .collect();
            let mut choices = Vec::with_capacity(stepping.len());
            for h in handles {
                choices.extend(h.join().map_err(|_| RuntimeError::Usage("internal: a sampling thread failed".into()))?);
            }
            Ok(choices)
        })
    }

    /// Ends every conversation under way (after a failed step) and returns their tags.
    pub fn abandon(&mut self) -> Vec<T> {
        self.seqs.iter_mut().filter_map(Option::take).map(|a| a.tag).collect()
    }
}

/// The answer of a conversation that stopped, its last text to `listener`.
fn finish<T>(a: Active<T>, listener: &mut dyn Listener<T>) -> Finished<T> {
    let tag = a.tag;
    let Made { tokens, text, logprobs, stop } = a.decoding.finish(&mut |d| listener.text(&tag, d));
    let generation = Generation {
        tokens,
        text,
        stop,
        prompt_logits: Vec::new(),
        logprobs,
        n_prompt: a.n_prompt,
        prompt_seconds: a.prompt_seconds,
        generate_seconds: a.decoding_since.elapsed().as_secs_f64(),
    };
    Finished { tag, generation }
}

/// Bytes of KV cache a sequence of `n_ctx` slots takes: K and V of every layer, in values of
/// `cache` (`Registry::cache_dtype`).
pub fn kv_bytes_per_sequence(p: &TextParams, n_ctx: usize, cache: DType) -> u64 {
    (p.n_layer * 2 * p.n_head_kv * p.head_dim * cache.block_bytes()) as u64 * n_ctx as u64
}

/// Most sequences whose KV caches (`per_sequence` bytes each) a device of `memory` bytes holds
/// beside `weights` bytes of model (at least 1: one sequence is what any run takes, whatever the
/// memory says).
pub fn most_sequences(per_sequence: u64, memory: u64, weights: u64) -> usize {
    let n = memory.saturating_sub(weights) / per_sequence.max(1);
    usize::try_from(n).unwrap_or(usize::MAX).max(1)
}

/// Most sequences a default batch takes: as many as the batched decode's narrow products take
/// (past 32 columns they run on the prefill's tiles). On the H200 (2B shape) 32 sequences
/// decoded 3,060 tokens/s against 16's 2,238, and `hrx caption` made 1,490 captions a minute
/// against 1,310.
pub const MAX_DEFAULT_SEQUENCES: usize = 32;

/// The default batch for a device of `memory` bytes holding `weights` bytes of model: as many
/// sequences as a quarter of what the weights leave holds KV caches (`per_sequence` bytes
/// each) for (the rest for the
/// plans' arenas, the vision encoder and everything else on the device), 1 to
/// [`MAX_DEFAULT_SEQUENCES`].
pub fn default_sequences(per_sequence: u64, memory: u64, weights: u64) -> usize {
    let left = memory.saturating_sub(weights) / 4;
    let n = left / per_sequence.max(1);
    (n as usize).clamp(1, MAX_DEFAULT_SEQUENCES)
}
