//! The text decoder ready to run: parameters, tokenizer, the prefill and decode plans made once,
//! and the executor that replays them.

use super::{loader, RuntimeError};
use crate::backend::cpu::Kernels;
use crate::backend::{Backend, DeviceChoice, Executor, PlanId};
use crate::gguf::{GgufFile, TensorInfo};
use crate::hrx::{Plan, Registry};
use crate::model::text::{self, TextGraph, TextShape};
use crate::model::{ModelError, TextParams};
use crate::quant;
use crate::tokenizer::Tokenizer;
use std::path::Path;
use std::sync::Arc;

/// Run-time options of the text model.
#[derive(Clone, Copy, Debug)]
pub struct TextOptions {
    /// KV cache length (tokens of prompt + generation).
    pub n_ctx: usize,
    /// Tokens per prefill call.
    pub chunk: usize,
    /// Positions per prefill call whose logits can be asked for (the arena holds
    /// n_vocab floats for each: 0.6 MB per position for Qwen's vocabulary).
    pub max_outputs: usize,
    /// CPU kernels (when the backend is the CPU).
    pub kernels: Kernels,
    /// Where the plans run (`--device`, `HRX_DEVICE`).
    pub device: DeviceChoice,
}

impl TextOptions {
    /// The defaults (context 4096, chunks of 256 tokens), on `device`.
    pub fn on(device: DeviceChoice) -> TextOptions {
        TextOptions { n_ctx: 4096, chunk: 256, max_outputs: 1, kernels: Kernels::from_env(), device }
    }
}

/// One token of input: its slice-0 embedding comes from the vocabulary or from the vision
/// encoder (with its deepstack features).
#[derive(Clone, Copy, Debug)]
pub enum TokenInput<'a> {
    Text(u32),
    /// A row of the wide embedding: n_embd × (1 + n_deepstack) values.
    Embedding(&'a [f32]),
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
    prefill: (PlanId, TextGraph),
    decode: (PlanId, TextGraph),
    /// Per input buffer (the decode plan's, the prefill plan's): how many of its first rows
    /// are known to hold a zero deepstack part (none at first: fresh device memory need not
    /// be zero; none after an image's rows).
    deepstack_clean: [usize; 2],
}

/// The plans of a text model for `registry`, for `hrx plan` (built without binding weights).
pub fn plan_text(
    params: &TextParams,
    options: &TextOptions,
    registry: &dyn Registry,
) -> Result<Vec<Plan>, RuntimeError> {
    let (prefill, decode) = build_graphs(params, options)?;
    loader::plan_all(&[prefill.graph, decode.graph], registry)
}

fn build_graphs(params: &TextParams, options: &TextOptions) -> Result<(TextGraph, TextGraph), RuntimeError> {
    let prefill = text::build(
        params,
        TextShape {
            max_tokens: options.chunk,
            max_outputs: options.max_outputs.clamp(1, options.chunk),
            n_ctx: options.n_ctx,
        },
    )?;
    let decode = text::build(params, TextShape { max_tokens: 1, max_outputs: 1, n_ctx: options.n_ctx })?;
    Ok((prefill, decode))
}

/// Prompts of at least this many tokens have their input rows made on several threads.
const PARALLEL_ROWS: usize = 64;

impl TextModel {
    /// Loads on the backend `options.device` chooses.
    pub fn load(path: &Path, options: TextOptions) -> Result<TextModel, RuntimeError> {
        Self::load_on(path, options, &Backend::open(options.device, options.kernels))
    }

    /// Loads on `backend`: plans for its registry, binds (uploads) the weights once.
    pub fn load_on(path: &Path, options: TextOptions, backend: &Backend) -> Result<TextModel, RuntimeError> {
        let file = Arc::new(GgufFile::open(path)?);
        let params = TextParams::from_gguf(&file)?;
        let tokenizer = Arc::new(
            Tokenizer::from_gguf(&file).map_err(|source| RuntimeError::Tokenizer { file: path.to_owned(), source })?,
        );
        if options.chunk == 0 || options.n_ctx == 0 {
            return Err(RuntimeError::Usage("context and chunk sizes must be at least 1".into()));
        }
        let (prefill, decode) = build_graphs(&params, &options)?;
        let (backend, exec) =
            loader::load(&[prefill.graph.clone(), decode.graph.clone()], backend, &[Arc::clone(&file)])?;
        // TextParams checked every tensor the graphs read, the embedding table among them.
        let token_embd = file.tensor(text::TOKEN_EMBD).cloned().ok_or_else(|| {
            RuntimeError::Model(ModelError {
                file: path.to_owned(),
                what: format!("tensor {:?}", text::TOKEN_EMBD),
                message: "missing".into(),
            })
        })?;
        log::info!("text model on {}", backend.describe());
        Ok(TextModel {
            params,
            tokenizer,
            file,
            options,
            backend,
            token_embd,
            exec,
            prefill: (PlanId(0), prefill),
            decode: (PlanId(1), decode),
            deepstack_clean: [0, 0],
        })
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

    /// Dispatches and barriers of the prefill and decode recordings (Vulkan; empty on the CPU).
    pub fn recording_stats(&self) -> Vec<crate::backend::vulkan::RecordingStats> {
        self.exec.recording_stats()
    }

    pub fn set_threads(&mut self, n: usize) {
        self.exec.set_threads(n);
    }

    /// Runs `inputs` at KV slots `first_slot..` with M-RoPE `positions` ([t, h, w] per
    /// token); returns the logits of the tokens whose indices are in `outputs`
    /// (n_vocab values each, in that order).
    pub fn forward(
        &mut self,
        inputs: &[TokenInput],
        positions: &[[i32; 3]],
        first_slot: usize,
        outputs: &[usize],
    ) -> Result<Vec<f32>, RuntimeError> {
        let n = inputs.len();
        if positions.len() != n || outputs.iter().any(|&o| o >= n) {
            return Err(RuntimeError::Usage("forward: positions or outputs do not match the inputs".into()));
        }
        if first_slot + n > self.options.n_ctx {
            return Err(RuntimeError::ContextFull { needed: first_slot + n, n_ctx: self.options.n_ctx });
        }
        let (plan, graph) = if n == 1 { (&self.decode.0, &self.decode.1) } else { (&self.prefill.0, &self.prefill.1) };
        let (plan, logits_node) = (*plan, graph.logits);
        let max = if n == 1 { 1 } else { self.options.chunk };
        let max_outputs = if n == 1 { 1 } else { self.options.max_outputs.clamp(1, max) };
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
                    quant::dequantize_row(embd.dtype, src, &mut row[..n_embd])
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
        let row_width = if text_only { n_embd } else { width };
        // A prompt's rows on several threads: dequantizing them one by one took a third of a
        // GPU prefill's time.
        let mut rows = vec![0f32; n * row_width];
        let threads =
            if n >= PARALLEL_ROWS { std::thread::available_parallelism().map_or(1, |t| t.get().min(8)) } else { 1 };
        let per_thread = n.div_ceil(threads);
        if threads == 1 {
            // A decode step's one row: no thread (starting one took 0.13 ms, 5 % of a step).
            inputs.iter().zip(rows.chunks_mut(row_width)).try_for_each(|(i, r)| fill(i, r))?;
        } else {
            std::thread::scope(|s| {
                let workers: Vec<_> = rows
                    .chunks_mut(per_thread * row_width)
                    .zip(inputs.chunks(per_thread))
                    .map(|(rows, ins)| {
                        s.spawn(move || ins.iter().zip(rows.chunks_mut(row_width)).try_for_each(|(i, r)| fill(i, r)))
                    })
                    .collect();
                workers.into_iter().try_for_each(|w| {
                    w.join()
                        .unwrap_or_else(|_| Err(RuntimeError::Usage("a thread making the prompt's rows failed".into())))
                })
            })?;
        }
        let made = started.elapsed();
        let which = usize::from(n != 1);
        if text_only {
            for (t, row) in rows.chunks(n_embd).enumerate() {
                self.exec.write_f32(plan, text::INP_WIDE, t * width, row)?;
            }
            let clean = self.deepstack_clean[which];
            if clean < n && width > n_embd {
                let zeros = vec![0f32; width - n_embd];
                for t in clean..n {
                    self.exec.write_f32(plan, text::INP_WIDE, t * width + n_embd, &zeros)?;
                }
            }
            self.deepstack_clean[which] = clean.max(n);
        } else {
            self.exec.write_f32(plan, text::INP_WIDE, 0, &rows)?;
            // The other plan's input may be the same buffer (plans of one size share it).
            self.deepstack_clean = [0, 0];
        }
        // Positions: component c of token t at c * max + t (the planned stride).
        for c in 0..3 {
            let column: Vec<i32> = positions.iter().map(|p| p[c]).collect();
            self.exec.write_i32(plan, text::POSITIONS, c * max, &column)?;
        }
        let slots: Vec<i32> = (0..n).map(|t| (first_slot + t) as i32).collect();
        self.exec.write_i32(plan, text::KV_SLOTS, 0, &slots)?;
        let ids: Vec<i32> = outputs.iter().map(|&o| o as i32).collect();
        self.exec.write_i32(plan, text::OUT_IDS, 0, &ids)?;
        let symbols = [n, outputs.len()];
        let written = started.elapsed();
        self.exec.run(plan, &symbols)?;
        let ran = started.elapsed();
        let logits = self.exec.output(plan, logits_node, &symbols)?;
        // Where a step's time goes on the host's side (RUST_LOG=hrx=debug).
        log::debug!(
            "forward: {n} tokens: inputs {:.3} ms (rows made in {:.3}), run {:.3} ms, logits {:.3} ms",
            written.as_secs_f64() * 1e3,
            made.as_secs_f64() * 1e3,
            (ran - written).as_secs_f64() * 1e3,
            (started.elapsed() - ran).as_secs_f64() * 1e3
        );
        Ok(logits)
    }
}
