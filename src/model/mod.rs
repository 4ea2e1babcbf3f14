//! Qwen3-VL: hyper-parameters from GGUF metadata, the text graph, the vision graph.

mod error;
mod meta;
pub mod text;
pub mod synth;
mod text_params;

pub use error::ModelError;
pub use text_params::TextParams;
