//! Running the model: plans bound to a backend (`loader`), the text model and the vision
//! encoder ready to run, sessions (KV slots, positions), the sampler, the chat template and the
//! generation loop, and constrained decoding for structured (JSON) answers. `model/` describes Qwen3-VL (parameters, graphs); this module runs it.

pub mod batch;
pub mod chat;
pub mod describe;
pub mod generate;
pub mod loader;
pub mod progress;
pub mod recover;
pub mod sampler;
pub mod session;
pub mod structured;
pub mod text_model;
pub mod vision_model;

use crate::backend::ExecError;
use crate::dispatcher::PlanError;
use crate::gguf::GgufError;
use crate::graph::GraphError;
use crate::image::ImageError;
use crate::model::ModelError;
use crate::quant::QuantError;
use crate::tokenizer::TokenizerError;
use std::fmt;
use std::path::PathBuf;

/// Everything loading or running a model can fail with, each with its cause as `source()`.
#[derive(Debug)]
pub enum RuntimeError {
    /// A model file could not be opened or parsed.
    Gguf(GgufError),
    /// A file's metadata or tensors do not describe the model (or the two files do not match).
    Model(ModelError),
    /// The vocabulary of a model file, or decoding a generated token.
    Tokenizer {
        file: PathBuf,
        source: TokenizerError,
    },
    /// A weight the runtime reads itself (the embedding table) did not dequantize.
    Quant {
        tensor: String,
        source: QuantError,
    },
    Graph(GraphError),
    Plan(PlanError),
    /// An executor failed, or a plan lacks a buffer the runtime fills.
    Exec(ExecError),
    /// An image could not be read or sized for the model.
    Image(ImageError),
    ContextFull {
        needed: usize,
        n_ctx: usize,
    },
    /// The caller's input does not fit the model or its plans (a token id, an image grid, a
    /// prompt without room for its images).
    Usage(String),
}

impl fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuntimeError::Gguf(e) => write!(f, "{e}"),
            RuntimeError::Model(e) => write!(f, "{e}"),
            RuntimeError::Tokenizer { file, source } => write!(f, "{}: {source}", file.display()),
            RuntimeError::Quant { tensor, source } => write!(f, "tensor {tensor}: {source}"),
            RuntimeError::Graph(e) => write!(f, "building the graph: {e}"),
            RuntimeError::Plan(e) => write!(f, "planning: {e}"),
            RuntimeError::Exec(e) => write!(f, "running: {e}"),
            RuntimeError::Image(e) => write!(f, "{e}"),
            RuntimeError::ContextFull { needed, n_ctx } => {
                write!(f, "the context holds {n_ctx} tokens and {needed} are needed (raise --ctx)")
            }
            RuntimeError::Usage(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for RuntimeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RuntimeError::Gguf(e) => Some(e),
            RuntimeError::Model(e) => Some(e),
            RuntimeError::Tokenizer { source, .. } => Some(source),
            RuntimeError::Quant { source, .. } => Some(source),
            RuntimeError::Graph(e) => Some(e),
            RuntimeError::Plan(e) => Some(e),
            RuntimeError::Exec(e) => Some(e),
            RuntimeError::Image(e) => Some(e),
            RuntimeError::ContextFull { .. } | RuntimeError::Usage(_) => None,
        }
    }
}

impl From<GgufError> for RuntimeError {
    fn from(e: GgufError) -> Self {
        RuntimeError::Gguf(e)
    }
}

impl From<ModelError> for RuntimeError {
    fn from(e: ModelError) -> Self {
        RuntimeError::Model(e)
    }
}

impl From<GraphError> for RuntimeError {
    fn from(e: GraphError) -> Self {
        RuntimeError::Graph(e)
    }
}

impl From<PlanError> for RuntimeError {
    fn from(e: PlanError) -> Self {
        RuntimeError::Plan(e)
    }
}

impl From<ExecError> for RuntimeError {
    fn from(e: ExecError) -> Self {
        RuntimeError::Exec(e)
    }
}

impl From<ImageError> for RuntimeError {
    fn from(e: ImageError) -> Self {
        RuntimeError::Image(e)
    }
}
