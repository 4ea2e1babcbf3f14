//! hrx: Qwen3-VL on the GPU of small edge boxes.
//!
//! One binary, one model family, one plan made at start-up and replayed for every image and
//! every token. The data flow:
//!
//! ```text
//! image file -> decode -> smart-resize -> normalize -> patches --+
//!                                                               v
//! GGUF (mmap) -> model params -> graph builders -> HRX import -> plan (once) -> executor
//!                                                               ^             (Vulkan | CPU)
//! prompt -> chat template -> BPE tokenizer -> token ids ---------+                 |
//!                                                                                  v
//!                                     text <- detokenize <- sampler <- logits <----+
//! ```
//!
//! The rules the code keeps (the dispatcher's own are in [`dispatcher`]):
//! - Shapes come from GGUF metadata, never from constants: any Qwen3-VL size, and any random
//!   test model (`hrx synth`), loads and runs.
//! - The plan is the single source of truth for what runs: the backend's registry decides each
//!   node's launch at plan time (kernel, device variant, fusion, row splits), `hrx plan`
//!   prints exactly that, and an executor only binds and records it. Per call only small
//!   parameters change (token count, positions, KV length); no graph is rebuilt and no command
//!   buffer recorded again per token.
//! - Accumulate in f32. The CPU backend is the numeric reference, simple and obviously right;
//!   the fast CPU kernels and every GPU kernel are tested against it on random inputs and odd
//!   shapes (normalized mean squared error), and the whole model against HF transformers'
//!   outputs (the oracle in tests/oracle).
//! - GPU kernels are chosen from the properties the device reports and run only at subgroup
//!   sizes a test ran; on the user's own device hrx checks them before first use and leaves
//!   out what is wrong ([`backend::vulkan`]'s self-check).
//! - Kernels know nothing of the model, the planner nothing of Qwen: model knowledge lives in
//!   [`model`] alone.
//!
//! Modules, one job each, from the file to the user:
//! - [`gguf`]: mmap a GGUF file, validate it, expose metadata and typed tensor views; write one.
//! - [`quant`]: block formats — layouts, dequantize, CPU dot products, quantize.
//! - [`tokenizer`]: byte-level BPE with the Qwen2 pre-tokenizer, NFC, streaming decode.
//! - [`image`]: decode (PNG, JPEG, WebP), limits, smart resize, normalize, patches.
//! - [`graph`]: the tensor IR and its builder; knows nothing of Qwen or of devices.
//! - [`model`]: Qwen3-VL described: parameters from metadata, the text and vision graphs, and a
//!   writer of random-weight models (`hrx synth`). It runs nothing.
//! - [`dispatcher`]: the HRX dispatcher: import and classify every value, plan every node once (kernel,
//!   fusion, row splits from the backend's registry), arena, census.
//! - [`backend`]: executors of a plan — [`backend::cpu`] (reference and fast kernels) and
//!   [`backend::vulkan`] (device layer, kernel table, registry, executor) — and the device choice.
//! - [`runtime`]: running the model: plans bound to a backend, the text model and the vision
//!   encoder, sessions, sampling, the chat template, generation, describing images.
//! - [`caption`], [`serve`], [`cli`]: the surfaces users touch (batch captioning, the
//!   OpenAI-compatible server, the command line with its shared flag table).
//! - [`catalog`]: models.toml, the registry of known models; [`json`]: a small JSON value;
//!   [`rng`]: the seeded generator tests and sampling share; [`fault`]: the faults tests inject;
//!   [`settings`]: every `HRX_*` environment variable, declared and read once.

pub mod backend;
pub mod caption;
pub mod catalog;
pub mod cli;
pub mod dispatcher;
pub mod fault;
pub mod gguf;
pub mod graph;
pub mod image;
pub mod json;
pub mod model;
pub mod quant;
pub mod rng;
pub mod runtime;
pub mod serve;
pub mod settings;
pub mod tokenizer;
