//! Errors of loading and running the vision encoder.

use super::ModelError;
use crate::backend::cpu::KernelError;
use crate::backend::ExecError;
use crate::gguf::GgufError;
use crate::graph::GraphError;
use crate::hrx::PlanError;
use std::fmt;

#[derive(Debug)]
pub enum VisionError {
    /// The mmproj file could not be opened or parsed.
    Gguf(GgufError),
    /// Its metadata or tensors do not describe a Qwen3-VL vision encoder.
    Model(ModelError),
    Graph(GraphError),
    Plan(PlanError),
    Kernel(KernelError),
    /// The Vulkan executor failed, or the plan lacks a buffer the encoder fills.
    Exec(ExecError),
    /// The caller's image does not fit the model or the plan (grid, size, pixel count).
    Input(String),
}

impl fmt::Display for VisionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VisionError::Gguf(e) => write!(f, "{e}"),
            VisionError::Model(e) => write!(f, "{e}"),
            VisionError::Graph(e) => write!(f, "building the vision graph: {e}"),
            VisionError::Plan(e) => write!(f, "planning the vision graph: {e}"),
            VisionError::Kernel(e) => write!(f, "running the vision graph: {e}"),
            VisionError::Exec(e) => write!(f, "running the vision graph: {e}"),
            VisionError::Input(m) => write!(f, "vision input: {m}"),
        }
    }
}

impl std::error::Error for VisionError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            VisionError::Gguf(e) => Some(e),
            VisionError::Model(e) => Some(e),
            VisionError::Graph(e) => Some(e),
            VisionError::Plan(e) => Some(e),
            VisionError::Kernel(e) => Some(e),
            VisionError::Exec(e) => Some(e),
            VisionError::Input(_) => None,
        }
    }
}

impl From<GgufError> for VisionError {
    fn from(e: GgufError) -> Self {
        VisionError::Gguf(e)
    }
}

impl From<ModelError> for VisionError {
    fn from(e: ModelError) -> Self {
        VisionError::Model(e)
    }
}

impl From<GraphError> for VisionError {
    fn from(e: GraphError) -> Self {
        VisionError::Graph(e)
    }
}

impl From<PlanError> for VisionError {
    fn from(e: PlanError) -> Self {
        VisionError::Plan(e)
    }
}

impl From<KernelError> for VisionError {
    fn from(e: KernelError) -> Self {
        VisionError::Kernel(e)
    }
}

impl From<ExecError> for VisionError {
    fn from(e: ExecError) -> Self {
        match e {
            ExecError::Cpu(k) => VisionError::Kernel(k),
            other => VisionError::Exec(other),
        }
    }
}
