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

/// Declares the weight `name` of a graph with the dtype its file stores (`dtypes`, filled when
/// the parameters checked every tensor) and shape `ne` (innermost first).
pub(crate) fn weight(
    g: &mut crate::graph::Graph,
    dtypes: &std::collections::BTreeMap<String, crate::quant::DType>,
    name: &str,
    ne: &[usize],
) -> crate::graph::Result<crate::graph::NodeId> {
    let dtype = dtypes.get(name).copied().ok_or_else(|| crate::graph::GraphError(format!("weight {name:?} was not among the checked tensors")))?;
    let mut shape = [1; crate::graph::MAX_DIMS];
    shape[..ne.len()].copy_from_slice(ne);
    g.weight(name, dtype, shape)
}
