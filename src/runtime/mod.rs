//! Running the model: the text model and its plans, sessions (KV slots, positions), the
//! sampler, the chat template and the generation loop.

pub mod chat;
pub mod describe;
pub mod generate;
pub mod sampler;
pub mod session;
pub mod text_model;

use crate::backend::cpu::KernelError;
use crate::backend::ExecError;
use crate::gguf::GgufError;
use crate::graph::GraphError;
use crate::hrx::PlanError;
use crate::model::ModelError;
use std::fmt;

#[derive(Debug)]
pub enum RuntimeError {
    Gguf(GgufError),
    Model(String),
    Graph(GraphError),
    Plan(PlanError),
    Kernel(KernelError),
    /// The Vulkan executor failed, or a plan lacks a buffer the runtime fills.
    Exec(ExecError),
    ContextFull { needed: usize, n_ctx: usize },
    Usage(String),
}

impl fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuntimeError::Gguf(e) => write!(f, "{e}"),
            RuntimeError::Model(m) | RuntimeError::Usage(m) => f.write_str(m),
            RuntimeError::Graph(e) => write!(f, "building the graph: {e}"),
            RuntimeError::Plan(e) => write!(f, "planning: {e}"),
            RuntimeError::Kernel(e) => write!(f, "running: {e}"),
            RuntimeError::Exec(e) => write!(f, "running: {e}"),
            RuntimeError::ContextFull { needed, n_ctx } => {
                write!(f, "the context holds {n_ctx} tokens and {needed} are needed (raise --ctx)")
            }
        }
    }
}

impl std::error::Error for RuntimeError {}

impl From<GgufError> for RuntimeError {
    fn from(e: GgufError) -> Self {
        RuntimeError::Gguf(e)
    }
}

impl From<ModelError> for RuntimeError {
    fn from(e: ModelError) -> Self {
        RuntimeError::Model(e.to_string())
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

impl From<KernelError> for RuntimeError {
    fn from(e: KernelError) -> Self {
        RuntimeError::Kernel(e)
    }
}

impl From<ExecError> for RuntimeError {
    fn from(e: ExecError) -> Self {
        match e {
            ExecError::Cpu(k) => RuntimeError::Kernel(k),
            other => RuntimeError::Exec(other),
        }
    }
}
