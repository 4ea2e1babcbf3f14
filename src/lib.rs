//! hrx: Qwen3-VL on the GPU of small edge boxes.
//!
//! Modules, one job each (see ../shared/DESIGN.md), from the file to the user:
//! - [`gguf`]: mmap a GGUF file, validate it, expose metadata and typed tensor views; write one.
//! - [`quant`]: block formats — layouts, dequantize, CPU dot products, quantize.
//! - [`tokenizer`]: byte-level BPE with the Qwen2 pre-tokenizer, NFC, streaming decode.
//! - [`image`]: decode (PNG, JPEG, WebP), limits, smart resize, normalize, patches.
//! - [`graph`]: the tensor IR and its builder; knows nothing of Qwen or of devices.
//! - [`model`]: Qwen3-VL described: parameters from metadata, the text and vision graphs, and a
//!   writer of random-weight models (`hrx synth`). It runs nothing.
//! - [`hrx`]: the dispatcher: import and classify every value, plan every node once (kernel,
//!   fusion, row splits from the backend's registry), arena, census.
//! - [`backend`]: executors of a plan — [`backend::cpu`] (reference and fast kernels) and
//!   [`backend::vulkan`] (device layer, kernel table, registry, executor) — and the device choice.
//! - [`runtime`]: running the model: plans bound to a backend, the text model and the vision
//!   encoder, sessions, sampling, the chat template, generation, describing images.
//! - [`caption`], [`serve`], [`cli`]: the surfaces users touch (batch captioning, the
//!   OpenAI-compatible server, the command line with its shared flag table).
//! - [`catalog`]: models.toml, the registry of known models; [`json`]: a small JSON value;
//!   [`rng`]: the seeded generator tests and sampling share; [`fault`]: the faults tests inject.

pub mod backend;
pub mod caption;
pub mod catalog;
pub mod cli;
pub mod fault;
pub mod gguf;
pub mod graph;
pub mod hrx;
pub mod image;
pub mod json;
pub mod model;
pub mod quant;
pub mod rng;
pub mod runtime;
pub mod serve;
pub mod tokenizer;
