//! Which graph nodes run on the GPU: a node is registered when a kernel takes its op, dtypes
//! and layout (`kernels::launch` accepts it); every other compute node is left to the CPU.
//! Placements name the kernel the device runs (`for_device`'s variant of a matrix product).

use super::info::DeviceInfo;
use super::kernels::{self, KernelId, MatKind, Operand};
use crate::graph::{Graph, NodeId, Op};
use crate::hrx::{Device, Registry};

/// The Vulkan backend's kernel table for `hrx::Plan::new`.
#[derive(Clone, Debug, Default)]
pub struct VulkanRegistry {
    /// The device whose kernel variants placements name; None: the portable kernels.
    device: Option<DeviceInfo>,
}

impl VulkanRegistry {
    /// Names the portable kernels (what any Vulkan device runs).
    pub const PORTABLE: VulkanRegistry = VulkanRegistry { device: None };

    /// Names the kernels `info`'s device runs.
    pub fn for_device(info: &DeviceInfo) -> VulkanRegistry {
        VulkanRegistry { device: Some(info.clone()) }
    }
}

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
            Ok(l) => Some(match (l.kernel, &self.device) {
                (KernelId::MatMul(kind, w), Some(info)) => KernelId::MatMul(MatKind::for_device(kind, info), w).name(),
                (kernel, _) => kernel.name(),
            }),
            Err(why) => {
                log::debug!("node {} ({}) stays on the CPU: {why}", id.0, node.name);
                None
            }
        }
    }

    /// RMS_NORM with the ROPE of its output (`rms_norm_rope.comp`). A product and its ADD
    /// also run as one dispatch, but only where the arena happens to keep the ADD's output
    /// clear of the product's input: keeping every product's input alive through its ADD
    /// would grow the vision arena about twofold.
    fn fuses(&self, graph: &Graph, id: NodeId, reader: NodeId) -> bool {
        matches!((&graph.node(id).op, &graph.node(reader).op), (Op::RmsNorm { .. }, Op::Rope { .. }))
    }
}
