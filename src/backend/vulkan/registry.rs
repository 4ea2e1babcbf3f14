//! Which graph nodes run on the GPU: a node is registered when a kernel takes its op, dtypes
//! and layout (`kernels::launch` accepts it); every other compute node is left to the CPU.

use super::kernels::{self, Operand};
use crate::graph::{Graph, NodeId, Op};
use crate::hrx::{Device, Registry};

/// The Vulkan backend's kernel table for `hrx::Plan::new`.
#[derive(Clone, Copy, Debug, Default)]
pub struct VulkanRegistry;

/// Byte offset of a value in its storage, as far as the graph knows it: external values
/// carry theirs, views add theirs to their input's, and transients start on an arena slot
/// (aligned to 256 bytes, so 0 stands for any of them when checking alignment).
pub fn storage_offset(graph: &Graph, id: NodeId) -> usize {
    let node = graph.node(id);
    match node.value.external {
        Some((_, offset)) => offset,
        None if node.op.is_layout() => storage_offset(graph, node.inputs[0]) + node.value.view_offset,
        None => 0,
    }
}

/// The operand of value `id` as a kernel would see it.
pub fn operand(graph: &Graph, id: NodeId) -> Operand {
    let v = graph.value(id);
    Operand { dtype: v.dtype, ne: v.ne, nb: v.nb, offset: storage_offset(graph, id), dynamic: v.dyn_axis.map(Into::into) }
}

impl Registry for VulkanRegistry {
    fn device(&self) -> Device {
        Device::Gpu
    }

    fn register(&self, graph: &Graph, id: NodeId) -> Option<&'static str> {
        let node = graph.node(id);
        if node.op.is_layout() || node.op == Op::External {
            return None;
        }
        let ins: Vec<Operand> = node.inputs.iter().map(|&i| operand(graph, i)).collect();
        let out = operand(graph, id);
        match kernels::launch(&node.op, &ins, &out, node.value.dyn_axis.map(Into::into)) {
            Ok(l) => Some(l.kernel.name()),
            Err(why) => {
                log::debug!("node {} ({}) stays on the CPU: {why}", id.0, node.name);
                None
            }
        }
    }
}
