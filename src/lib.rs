//! hrx: Qwen3-VL on the GPU of small edge boxes.
//!
//! Modules, one job each (see ../shared/DESIGN.md):
//! - [`gguf`]: mmap a GGUF file, validate it, expose metadata and typed tensor views.
//! - [`quant`]: block formats — layouts, dequantize, CPU dot products, quantize.
//! - [`tokenizer`]: byte-level BPE with the Qwen2 pre-tokenizer and NFC.

pub mod gguf;
pub mod image;
pub mod quant;
pub mod tokenizer;
pub mod cli;
pub mod json;
pub mod backend;
pub mod graph;
pub mod hrx;
pub mod model;
pub mod runtime;
pub mod catalog;
pub mod caption;
pub mod serve;
pub mod rng;
