//! The text decoder ready to run: parameters, tokenizer, the prefill and decode plans (and, for
//! several sequences, the batched decode plan) made once, and the executor that replays them.

use super::{loader, RuntimeError};
use crate::backend::cpu::pool::par_items;
use crate::backend::cpu::Kernels;
use crate::backend::{Backend, DeviceChoice, Executor, PlanId};
use crate::dispatcher::{Plan, Registry};
use crate::gguf::{GgufFile, TensorInfo};
use crate::model::text::{self, TextGraph, TextShape};
use crate::model::{ModelError, TextParams};
use crate::quant::{self, DType};
use crate::tokenizer::{Tokenizer, TokenizerError};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

/// Run-time options of the text model.
#[derive(Clone, Copy, Debug)]
pub struct TextOptions {
    /// KV slots per sequence (tokens of prompt + generation).
    pub n_ctx: usize,
    /// Sequences the KV cache holds (n_ctx slots each); above 1 a batched decode plan decodes
    /// a token of each at once.
    pub n_seq: usize,
    /// Tokens per prefill call.
    pub chunk: usize,
    /// Positions per prefill call whose logits can be asked for (the arena holds
    /// n_vocab floats for each: 0.6 MB per position for Qwen's vocabulary).
    pub max_outputs: usize,
    /// CPU kernels (when the backend is the CPU).
    pub kernels: Kernels,
    /// Where the plans run (`--device`, `HRX_DEVICE`).
    pub device: DeviceChoice,
    /// Whether hrx's self-check runs on a Vulkan device before the plans do (`--no-check`).
    pub check: bool,
}

impl TextOptions {
    /// The defaults (context 4096, chunks of 256 tokens), on `device`.
    pub fn on(device: DeviceChoice) -> TextOptions {
        TextOptions {
            n_ctx: 4096,
            n_seq: 1,
            chunk: 256,
            max_outputs: 1,
            kernels: Kernels::from_env(),
            device,
            check: true,
        }
    }

    /// These options for `n_seq` sequences: above one, prompts prefilled together
    /// ([`feed_together`](super::session::feed_together)) run in chunks of at least
    /// [`GATHERED_CHUNK`] tokens.
    pub fn with_sequences(self, n_seq: usize) -> TextOptions {
        let chunk = if n_seq > 1 { self.chunk.max(GATHERED_CHUNK) } else { self.chunk };
        TextOptions { n_seq, chunk, ..self }
    }

    /// Positions of a prefill call whose logits can be asked for: `max_outputs`, and one a
    /// sequence (prompts prefilled together each want their last).
    fn prefill_outputs(&self) -> usize {
        self.max_outputs.max(self.n_seq).clamp(1, self.chunk)
    }
}

/// Tokens per prefill call when prompts of several sequences are prefilled together: a
/// caption's prompt (an image's tokens and a few words) is ~200 tokens, too few to fill the
/// products' tiles alone.
pub const GATHERED_CHUNK: usize = 1024;

/// One token of input: its slice-0 embedding comes from the vocabulary or from the vision
/// encoder (with its deepstack features).
#[derive(Clone, Copy, Debug)]
pub enum TokenInput<'a> {
    Text(u32),
    /// A row of the wide embedding: n_embd × (1 + n_deepstack) values.
    Embedding(&'a [f32]),
}

/// What a call reads back for each of its output positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    /// The logits, n_vocab values each.
    Logits,
    /// The index of the largest logit alone: a greedy choice, made on the device (a step of
    /// 32 sequences then reads 128 bytes back instead of 19 MB of logits, and the host has no
    /// argmax to take).
    Argmax,
}

impl Read {
    /// What a call for sequences that each want `reads` reads: the argmax alone when every
    /// one of them wants nothing else.
    pub fn for_all(reads: impl IntoIterator<Item = Read>) -> Read {
        if reads.into_iter().all(|r| r == Read::Argmax) {
            Read::Argmax
        } else {
            Read::Logits
        }
    }
}

/// What a call read back: see [`Read`].
pub enum Outputs {
    /// n_vocab values per output position, one position after another.
    Logits(Vec<f32>),
    Argmax(Vec<u32>),
}

/// One output position's share of [`Outputs`].
pub enum Scores<'a> {
    Logits(&'a mut [f32]),
    Argmax(u32),
}

impl Scores<'_> {
    /// The logits (none when only the argmax was read).
    pub fn logits(&self) -> &[f32] {
        match self {
            Scores::Logits(l) => l,
            Scores::Argmax(_) => &[],
        }
    }
}

impl Outputs {
    /// `more` after these (what a later call of the same [`Read`] read).
    pub fn append(&mut self, more: Outputs) -> Result<(), RuntimeError> {
        match (self, more) {
            (Outputs::Logits(a), Outputs::Logits(b)) => a.extend(b),
            (Outputs::Argmax(a), Outputs::Argmax(b)) => a.extend(b),
            _ => return Err(RuntimeError::Usage("internal: logits and argmaxes appended".into())),
        }
        Ok(())
    }

    /// The logits, which a call with [`Read::Logits`] read.
    pub fn logits(self) -> Result<Vec<f32>, RuntimeError> {
        match self {
            Outputs::Logits(logits) => Ok(logits),
            Outputs::Argmax(_) => {
                Err(RuntimeError::Usage("internal: logits wanted of a call that read the argmax".into()))
            }
        }
    }

    /// Each output position's share, in order (`n_vocab` logits each).
    pub fn rows(&mut self, n_vocab: usize) -> Vec<Scores<'_>> {
        match self {
            Outputs::Logits(l) => l.chunks_exact_mut(n_vocab.max(1)).map(Scores::Logits).collect(),
            Outputs::Argmax(ids) => ids.iter().map(|&id| Scores::Argmax(id)).collect(),
        }
    }
}

/// The plans of a text model, by `PlanId` (`Step::plan`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// A chunk of one sequence's prompt.
    Prefill,
    /// One token of one sequence.
    Decode,
    /// One token of each of up to `batch_sizes(n_seq)[i]` sequences.
    Batch(usize),
}

impl Step {
    fn plan(self) -> usize {
        match self {
            Step::Prefill => 0,
            Step::Decode => 1,
            Step::Batch(i) => 2 + i,
        }
    }
}

/// The sizes of the batched decode plans for `n_seq` sequences: the powers of two from 2 below
/// it, and n_seq. A step of a few sequences runs the smallest that holds them: its products
/// then read each weight once for just those columns (a plan for 32 columns takes the tiled
/// kernels, whose time hardly falls with fewer).
fn batch_sizes(n_seq: usize) -> Vec<usize> {
    let mut sizes: Vec<usize> =
        std::iter::successors(Some(2usize), |s| s.checked_mul(2)).take_while(|&s| s < n_seq).collect();
    if n_seq > 1 {
        sizes.push(n_seq);
    }
    sizes
}

pub struct TextModel {
    params: TextParams,
    tokenizer: Arc<Tokenizer>,
    file: Arc<GgufFile>,
    options: TextOptions,
    backend: Backend,
    /// The embedding table, found once at load (every call reads rows of it).
    token_embd: TensorInfo,
    exec: Executor,
    /// The graphs of the plans, by `Step`.
    graphs: Vec<TextGraph>,
    /// Per plan's input buffer (by `Step::plan`): how many of its first rows are known to hold
    /// a zero deepstack part (none at first: fresh device memory need not be zero; none after
    /// an image's rows).
    deepstack_clean: Vec<usize>,
    /// Where the input buffer can only be written (Vulkan memory the host does not map): the
    /// input rows of the last call, kept for the next: a prefill chunk of 1,024 image
    /// rows is 32 MB, and making them in fresh memory took 3.4-3.8 ms on the H200's host,
    /// 1.6-2.2 ms in kept memory (`hrx caption`, batch 32).
    rows: Vec<f32>,
    /// Memory for the next call's logits: what the last call read, handed back
    /// ([`TextModel::take_back`]). A step of 32 sequences reads 19 MB of them; into fresh,
    /// zeroed memory that copy took 1.5-1.9 ms on the 2-core development machine, 1.0 ms into
    /// kept memory.
    logits: Vec<f32>,
}

/// The plans of a text model for `registry`, for `hrx plan` (built without binding weights).
pub fn plan_text(
    params: &TextParams,
    options: &TextOptions,
    registry: &dyn Registry,
) -> Result<Vec<Plan>, RuntimeError> {
    let graphs = build_graphs(params, options, registry.cache_dtype())?;
    loader::plan_all(graphs.iter().map(|g| &g.graph), registry)
}

/// The graphs of the plans, by `Step`: prefill, decode and, for several sequences, the batch;
/// KV caches of `cache` values.
fn build_graphs(params: &TextParams, options: &TextOptions, cache: DType) -> Result<Vec<TextGraph>, RuntimeError> {
    let (n_ctx, n_seq) = (options.n_ctx, options.n_seq);
    let shape = |name, max_tokens, max_outputs| TextShape { name, max_tokens, max_outputs, n_ctx, n_seq, cache };
    let mut graphs = vec![
        text::build(params, shape("text-prefill", options.chunk, options.prefill_outputs()))?,
        text::build(params, shape("text-decode", 1, 1))?,
    ];
    for size in batch_sizes(n_seq) {
        graphs.push(text::build(params, shape("text-batch", size, size))?);
    }
    Ok(graphs)
}

/// Prompts of at least this many tokens have their input rows made on several threads.
const PARALLEL_ROWS: usize = 64;

/// A text model's GGUF file, its header read, and its tokenizer (Qwen's 151,646 tokens and
/// merges: 0.19 s on the H200's host) being made on a thread of its own meanwhile. Opened before
/// the device (0.15 s there), so that the tokenizer is ready by the time the weights are up
/// rather than last.
pub struct TextFile {
    path: PathBuf,
    file: Arc<GgufFile>,
    tokenizer: JoinHandle<Result<Tokenizer, TokenizerError>>,
}

impl TextFile {
    pub fn open(path: &Path) -> Result<TextFile, RuntimeError> {
        let t0 = std::time::Instant::now();
        let file = Arc::new(GgufFile::open(path)?);
        log::debug!("{}: GGUF header read in {:.3} s", path.display(), t0.elapsed().as_secs_f64());
        let tokenizer = {
            let file = Arc::clone(&file);
            std::thread::spawn(move || {
                let t0 = std::time::Instant::now();
                let made = Tokenizer::from_gguf(&file);
                log::debug!("tokenizer made in {:.3} s", t0.elapsed().as_secs_f64());
                made
            })
        };
        Ok(TextFile { path: path.to_owned(), file, tokenizer })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn gguf(&self) -> &GgufFile {
        &self.file
    }
}

impl TextModel {
    /// Loads on the backend `options.device` chooses.
    pub fn load(path: &Path, options: TextOptions) -> Result<TextModel, RuntimeError> {
        let file = TextFile::open(path)?;
        Self::load_file_on(file, options, &Backend::open(options.device, options.kernels, options.check))
    }

    /// Loads on `backend`: plans for its registry, binds (uploads) the weights once.
    pub fn load_on(path: &Path, options: TextOptions, backend: &Backend) -> Result<TextModel, RuntimeError> {
        Self::load_file_on(TextFile::open(path)?, options, backend)
    }

    /// [`load_on`](Self::load_on) with the file already open.
    pub fn load_file_on(text: TextFile, options: TextOptions, backend: &Backend) -> Result<TextModel, RuntimeError> {
        let TextFile { path, file, tokenizer } = text;
        let params = TextParams::from_gguf(&file)?;
        if options.chunk == 0 || options.n_ctx == 0 || options.n_seq == 0 {
            return Err(RuntimeError::Usage("context, sequence and chunk counts must be at least 1".into()));
        }
        if options.n_ctx > params.n_ctx_train {
            log::warn!(
                "a context of {} tokens is past the {} the model was trained for (its context_length): \
                 answers that run past it may wander",
                options.n_ctx,
                params.n_ctx_train
            );
        }
        let loaded = loader::load(|cache| build_graphs(&params, &options, cache), backend, &[Arc::clone(&file)]);
        // The tokenizer's error, if any, is the one reported.
        let tokenizer = tokenizer
            .join()
            .map_err(|_| RuntimeError::Usage("the thread making the tokenizer failed".into()))?
            .map_err(|source| RuntimeError::Tokenizer { file: path.clone(), source })?;
        let tokenizer = Arc::new(tokenizer);
        let (backend, exec, graphs) = loaded?;
        // TextParams checked every tensor the graphs read, the embedding table among them.
        let token_embd = file.tensor(text::TOKEN_EMBD).cloned().ok_or_else(|| {
            RuntimeError::Model(ModelError {
                file: path.clone(),
                what: format!("tensor {:?}", text::TOKEN_EMBD),
                message: "missing".into(),
            })
        })?;
        Ok(TextModel::assemble(params, tokenizer, file, options, token_embd, (backend, exec, graphs)))
    }

    /// This model's plans and weights again on `backend`, its file and tokenizer kept: what a
    /// long-running command does once its device was lost (`runtime::recover`).
    pub fn reload_on(&self, backend: &Backend) -> Result<TextModel, RuntimeError> {
        let (params, options) = (&self.params, &self.options);
        let loaded = loader::load(|cache| build_graphs(params, options, cache), backend, &[Arc::clone(&self.file)])?;
        let (tokenizer, file) = (Arc::clone(&self.tokenizer), Arc::clone(&self.file));
        Ok(TextModel::assemble(params.clone(), tokenizer, file, *options, self.token_embd.clone(), loaded))
    }

    fn assemble(
        params: TextParams,
        tokenizer: Arc<Tokenizer>,
        file: Arc<GgufFile>,
        options: TextOptions,
        token_embd: TensorInfo,
        (backend, exec, graphs): (Backend, Executor, Vec<TextGraph>),
    ) -> TextModel {
        log::info!("text model on {}", backend.describe());
        let deepstack_clean = vec![0; graphs.len()];
        TextModel {
            params,
            tokenizer,
            file,
            options,
            backend,
            token_embd,
            exec,
            graphs,
            deepstack_clean,
            rows: Vec::new(),
            logits: Vec::new(),
        }
    }

    pub fn params(&self) -> &TextParams {
        &self.params
    }

    pub fn tokenizer(&self) -> &Arc<Tokenizer> {
        &self.tokenizer
    }

    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    pub fn options(&self) -> &TextOptions {
        &self.options
    }

    /// Where the plans run (the CPU when a Vulkan plan could not take every node).
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// The executor's command-buffer recordings (Vulkan; None on the CPU): fixed at load.
    pub fn recordings(&self) -> Option<usize> {
        self.exec.recordings()
    }

    /// Dispatches and barriers of the recordings, by plan (Vulkan; empty on the CPU).
    pub fn recording_stats(&self) -> Vec<crate::backend::vulkan::RecordingStats> {
        self.exec.recording_stats()
    }

    pub fn set_threads(&mut self, n: usize) {
        self.exec.set_threads(n);
    }

    /// Runs `inputs` at KV slots `first_slot..` (all in one sequence's) with M-RoPE
    /// `positions` ([t, h, w] per token); returns the logits of the tokens whose indices are
    /// in `outputs` (n_vocab values each, in that order).
    pub fn forward(
        &mut self,
        inputs: &[TokenInput],
        positions: &[[i32; 3]],
        first_slot: usize,
        outputs: &[usize],
    ) -> Result<Vec<f32>, RuntimeError> {
        let n = inputs.len();
        // The sequence of the first slot (past the cache: the last), whose n_ctx slots the
        // tokens must fit.
        let n_ctx = self.options.n_ctx;
        let start = (first_slot / n_ctx).min(self.options.n_seq - 1) * n_ctx;
        if first_slot - start + n > n_ctx {
            return Err(RuntimeError::ContextFull { needed: first_slot - start + n, n_ctx });
        }
        let slots: Vec<usize> = (first_slot..first_slot + n).collect();
        self.prefill(inputs, positions, &slots, outputs, Read::Logits)?.logits()
    }

    /// Runs `inputs` at KV slots `slots` (any sequences': each token attends to its own
    /// sequence's slots up to its own; a sequence's tokens come together, as the tiled
    /// attention kernels take them) with M-RoPE `positions`; returns what `read` asks of the
    /// logits of the tokens whose indices are in `outputs`, in that order. One token runs the
    /// decode plan, more a prefill chunk.
    pub fn prefill(
        &mut self,
        inputs: &[TokenInput],
        positions: &[[i32; 3]],
        slots: &[usize],
        outputs: &[usize],
        read: Read,
    ) -> Result<Outputs, RuntimeError> {
        let n = inputs.len();
        if positions.len() != n || slots.len() != n || outputs.iter().any(|&o| o >= n) {
            return Err(RuntimeError::Usage("prefill: positions, slots or outputs do not match the inputs".into()));
        }
        let cache = self.options.n_ctx * self.options.n_seq;
        let slots = slots
            .iter()
            .map(|&s| i32::try_from(s).ok().filter(|_| s < cache))
            .collect::<Option<Vec<i32>>>()
            .ok_or_else(|| RuntimeError::Usage(format!("prefill: a slot past the cache's {cache}")))?;
        let mut seen = vec![false; self.options.n_seq];
        for (i, &slot) in slots.iter().enumerate() {
            let seq = slot as usize / self.options.n_ctx;
            let follows = i > 0 && slots[i - 1] as usize / self.options.n_ctx == seq;
            if !follows && std::mem::replace(&mut seen[seq], true) {
                return Err(RuntimeError::Usage(format!("prefill: the tokens of sequence {seq} do not come together")));
            }
        }
        let step = if n == 1 { Step::Decode } else { Step::Prefill };
        self.run(step, inputs, positions, &slots, outputs, read)
    }

    /// Takes back what a call read once its reader is done with it: the next call reads its
    /// logits into the same memory.
    pub fn take_back(&mut self, outputs: Outputs) {
        if let Outputs::Logits(logits) = outputs {
            if logits.capacity() > self.logits.capacity() {
                self.logits = logits;
            }
        }
    }

    /// Decodes `tokens[i]` at KV slot `slots[i]` and position `positions[i]` (text: all
    /// three components alike), one token of each of up to n_seq sequences (each slot in
    /// its own sequence's); returns what `read` asks of each token's logits, in order.
    pub fn forward_batch(
        &mut self,
        tokens: &[u32],
        positions: &[i32],
        slots: &[usize],
        read: Read,
    ) -> Result<Outputs, RuntimeError> {
        let (n, n_ctx) = (tokens.len(), self.options.n_ctx);
        if positions.len() != n || slots.len() != n || n > self.options.n_seq {
            return Err(RuntimeError::Usage(format!(
                "forward_batch: {n} tokens, {} positions, {} slots for {} sequences",
                positions.len(),
                slots.len(),
                self.options.n_seq
            )));
        }
        let mut seen = vec![false; self.options.n_seq];
        for &s in slots {
            match seen.get_mut(s / n_ctx) {
                Some(seen) if !*seen => *seen = true,
                _ => {
                    return Err(RuntimeError::Usage(format!(
                        "forward_batch: slot {s} is outside the cache or a second token of its sequence"
                    )))
                }
            }
        }
        // One sequence alone runs the one-token plan (a batch of one is a decode step).
        // The smallest batched plan that holds them (n <= n_seq: checked above).
        let step = match batch_sizes(self.options.n_seq).iter().position(|&size| size >= n) {
            _ if n == 1 => Step::Decode,
            Some(i) => Step::Batch(i),
            None => return Err(RuntimeError::Usage(format!("forward_batch: no plan for {n} sequences"))),
        };
        let inputs: Vec<TokenInput> = tokens.iter().map(|&t| TokenInput::Text(t)).collect();
        let positions: Vec<[i32; 3]> = positions.iter().map(|&p| [p; 3]).collect();
        let slots: Vec<i32> = slots.iter().map(|&s| s as i32).collect();
        let outputs: Vec<usize> = (0..n).collect();
        self.run(step, &inputs, &positions, &slots, &outputs, read)
    }

    /// Runs `step`'s plan on the inputs, their positions and KV slots; what `read` asks of
    /// the logits of `outputs`.
    fn run(
        &mut self,
        step: Step,
        inputs: &[TokenInput],
        positions: &[[i32; 3]],
        slots: &[i32],
        outputs: &[usize],
        read: Read,
    ) -> Result<Outputs, RuntimeError> {
        let n = inputs.len();
        let graph = self
            .graphs
            .get(step.plan())
            .ok_or_else(|| RuntimeError::Usage(format!("forward: no {step:?} plan for one sequence")))?;
        let (plan, logits_node, argmax_node) = (PlanId(step.plan()), graph.logits, graph.argmax);
        let (max, max_outputs) = match step {
            Step::Decode => (1, 1),
            Step::Prefill => (self.options.chunk, self.options.prefill_outputs()),
            Step::Batch(i) => {
                let size = batch_sizes(self.options.n_seq).get(i).copied().unwrap_or(0);
                (size, size)
            }
        };
        if n > max || outputs.len() > max_outputs {
            return Err(RuntimeError::Usage(format!(
                "forward: {n} tokens ({} outputs) exceed the plan's {max} ({max_outputs})",
                outputs.len()
            )));
        }
        let started = std::time::Instant::now();
        let width = self.params.wide_width();
        let n_embd = self.params.n_embd;
        let embd = &self.token_embd;
        let embd_bytes = self.file.tensor_data(embd);
        let row_bytes = embd.dtype.row_bytes(n_embd as u64).unwrap_or(0) as usize;
        let n_vocab = self.params.n_vocab;
        let fill = |input: &TokenInput, row: &mut [f32]| -> Result<(), RuntimeError> {
            match input {
                TokenInput::Text(id) => {
                    let id = *id as usize;
                    if id >= n_vocab {
                        return Err(RuntimeError::Usage(format!(
                            "token id {id} is outside the vocabulary (0..{n_vocab})"
                        )));
                    }
                    let src = &embd_bytes[id * row_bytes..(id + 1) * row_bytes];
                    let (embedding, deepstack) = row.split_at_mut(n_embd.min(row.len()));
                    // A text token's deepstack part is zero (beside image rows).
                    deepstack.fill(0.0);
                    quant::dequantize_row(embd.dtype, src, embedding)
                        .map_err(|source| RuntimeError::Quant { tensor: text::TOKEN_EMBD.into(), source })
                }
                TokenInput::Embedding(values) => {
                    if values.len() != width {
                        return Err(RuntimeError::Usage(format!(
                            "an embedding row has {} values, the model takes {width}",
                            values.len()
                        )));
                    }
                    row.copy_from_slice(values);
                    Ok(())
                }
            }
        };
        // Text rows are written without their deepstack part where it is known to be zero
        // already (`deepstack_clean`): a 512-token text prompt then writes 4 MB, not 16.
        let text_only = inputs.iter().all(|i| matches!(i, TokenInput::Text(_)));
        let which = step.plan();
        let clean = if text_only { self.deepstack_clean[which] } else { 0 };
        // Rows of `stride` values, row t from input t, on the pool's threads for a prompt
        // (dequantizing them one by one took a third of a GPU prefill's time; spawning threads
        // for each call 1 ms of a 512-token chunk on the H100's host); where rows are `width`
        // wide, a text row's deepstack part only where it is not known to be zero.
        let make = |rows: &mut [f32], stride: usize| -> Result<(), RuntimeError> {
            let threads =
                if n >= PARALLEL_ROWS { std::thread::available_parallelism().map_or(1, |t| t.get().min(8)) } else { 1 };
            let failed = Mutex::new(None);
            par_items(threads, rows.chunks_mut(stride).zip(inputs).enumerate(), |(t, (row, input))| {
                let text = matches!(input, TokenInput::Text(_));
                let row = if text && t < clean { &mut row[..n_embd.min(stride)] } else { row };
                if let Err(e) = fill(input, row) {
                    *failed.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
                }
            });
            failed.into_inner().unwrap_or_else(PoisonError::into_inner).map_or(Ok(()), Err)
        };
        // Straight into the input buffer where the host holds or maps it; else into the rows
        // kept from the last call (`fill` writes every value), or fresh zeroed memory, then
        // written.
        let mut in_place = Ok(());
        if !self.exec.fill_f32(plan, text::INP_WIDE, 0, n * width, |rows| in_place = make(rows, width))? {
            let row_width = if text_only { n_embd } else { width };
            let mut kept = std::mem::take(&mut self.rows);
            if kept.len() < n * row_width {
                kept = vec![0f32; n * row_width];
            }
            let rows = &mut kept[..n * row_width];
            make(rows, row_width)?;
            if text_only {
                for (t, row) in rows.chunks(n_embd).enumerate() {
                    self.exec.write_f32(plan, text::INP_WIDE, t * width, row)?;
                }
                if clean < n && width > n_embd {
                    let zeros = vec![0f32; width - n_embd];
                    for t in clean..n {
                        self.exec.write_f32(plan, text::INP_WIDE, t * width + n_embd, &zeros)?;
                    }
                }
            } else {
                self.exec.write_f32(plan, text::INP_WIDE, 0, rows)?;
            }
            self.rows = kept;
        }
        in_place?;
        let made = started.elapsed();
        if text_only {
            self.deepstack_clean[which] = clean.max(n);
        } else {
            // The other plans' input may be the same buffer (plans of one size share it).
            self.deepstack_clean.iter_mut().for_each(|c| *c = 0);
        }
        // Positions: component c of token t at c * max + t (the planned stride).
        for c in 0..3 {
            let column: Vec<i32> = positions.iter().map(|p| p[c]).collect();
            self.exec.write_i32(plan, text::POSITIONS, c * max, &column)?;
        }
        self.exec.write_i32(plan, text::KV_SLOTS, 0, slots)?;
        let ids: Vec<i32> = outputs.iter().map(|&o| o as i32).collect();
        self.exec.write_i32(plan, text::OUT_IDS, 0, &ids)?;
        let symbols = [n, outputs.len()];
        let written = started.elapsed();
        self.exec.run(plan, &symbols)?;
        let ran = started.elapsed();
        let read_back = match read {
            Read::Logits => {
                let mut logits = std::mem::take(&mut self.logits);
                self.exec.output_into(plan, logits_node, &symbols, &mut logits)?;
                Outputs::Logits(logits)
            }
            // Exact: every index of a row is below 2^24 (graph::MAX_ARGMAX_ROW).
            Read::Argmax => {
                Outputs::Argmax(self.exec.output(plan, argmax_node, &symbols)?.into_iter().map(|i| i as u32).collect())
            }
        };
        // Where a step's time goes on the host's side (RUST_LOG=hrx=debug).
        log::debug!(
            "forward: {n} tokens: inputs {:.3} ms (rows made in {:.3}), run {:.3} ms, {read:?} read in {:.3} ms",
            written.as_secs_f64() * 1e3,
            made.as_secs_f64() * 1e3,
            (ran - written).as_secs_f64() * 1e3,
            (started.elapsed() - ran).as_secs_f64() * 1e3
        );
        Ok(read_back)
    }
}

#[cfg(test)]
mod tests {
    use super::{batch_sizes, Read};

    #[test]
    fn a_call_reads_the_argmax_alone_when_every_sequence_wants_only_it() {
        assert_eq!(Read::for_all([Read::Argmax, Read::Argmax]), Read::Argmax);
        assert_eq!(Read::for_all([Read::Argmax, Read::Logits, Read::Argmax]), Read::Logits);
        assert_eq!(Read::for_all([Read::Logits]), Read::Logits);
    }

    #[test]
    fn batched_plans_double_up_to_the_sequences() {
        assert_eq!(batch_sizes(1), Vec::<usize>::new());
        assert_eq!(batch_sizes(2), [2]);
        assert_eq!(batch_sizes(12), [2, 4, 8, 12]);
        assert_eq!(batch_sizes(16), [2, 4, 8, 16]);
    }
}
