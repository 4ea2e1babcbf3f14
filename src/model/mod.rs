//! Qwen3-VL described, not run: hyper-parameters from GGUF metadata (nothing hard-coded), the
//! text graph, the vision graph with its deepstack wiring, and a writer of random-weight models
//! of any shape. `runtime/` plans and runs these graphs.

mod error;
mod meta;
pub mod synth;
pub mod text;
mod text_params;
pub mod vision;
pub mod vision_grid;
mod vision_params;

pub use error::ModelError;
pub use text_params::TextParams;
pub use vision_params::VisionParams;

/// Declares the weight `name` of a graph with the dtype its file stores (`dtypes`, filled when
/// the parameters checked every tensor) and shape `ne` (innermost first).
pub(crate) fn weight(
    g: &mut crate::graph::Graph,
    dtypes: &std::collections::BTreeMap<String, crate::quant::DType>,
    name: &str,
    ne: &[usize],
) -> crate::graph::Result<crate::graph::NodeId> {
    let dtype = dtypes
        .get(name)
        .copied()
        .ok_or_else(|| crate::graph::GraphError::new(name, "a weight that was not among the checked tensors"))?;
    let mut shape = [1; crate::graph::MAX_DIMS];
    shape[..ne.len()].copy_from_slice(ne);
    g.weight(name, dtype, shape)
}
