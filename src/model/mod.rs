//! Qwen3-VL: hyper-parameters from GGUF metadata, the text graph, the vision graph.

mod error;
mod meta;
pub mod text;
pub mod synth;
mod text_params;
pub mod vision;
mod vision_error;
pub mod vision_grid;
mod vision_model;
mod vision_params;

pub use error::ModelError;
pub use text_params::TextParams;
pub use vision_error::VisionError;
pub use vision_model::{plan_vision, plan_vision_for, VisionModel};
pub use vision_params::VisionParams;
