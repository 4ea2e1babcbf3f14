//! Which graph nodes run on the GPU and with what, decided at plan time: a node is registered
//! when a kernel takes its op, dtypes and layout (`kernels::select`), with the device's variant
//! (`Variants`), the row ranges of a product whose weights exceed one storage-buffer window,
//! and the groups of nodes that run as one dispatch (fused readers, folded producers). Every
//! other compute node is left to the CPU. The executor records exactly what the plan says.

use super::error::{Result, VkError};
use super::info::DeviceInfo;
use super::kernels::{self, BinaryOp, KernelId, MatKind, Operand, Ops, UnaryOp, Values, Variants};
use crate::dispatcher::{Fusion, Group, Kernel, Registry, Where};
use crate::graph::{Graph, NodeId, Op};
use crate::quant::DType;

/// What every Vulkan device guarantees: a storage-buffer window of 2^27 bytes, offsets aligned
/// to at most 256 bytes (the portable registry plans splits with these).
const MIN_STORAGE_RANGE: u64 = 1 << 27;
const MAX_OFFSET_ALIGN: u64 = 256;

/// The Vulkan backend's kernel table for `dispatcher::Plan::new`.
#[derive(Clone, Debug)]
pub struct VulkanRegistry {
    variants: Variants,
    /// Pipelines require the subgroup size their kernel is built around
    /// (`DeviceInfo::pins_subgroups`).
    pins_subgroups: bool,
    /// The device's storage-buffer range and offset alignment: products whose weights exceed
    /// one window run as several dispatches over row ranges.
    max_range: u64,
    align: u64,
}

impl VulkanRegistry {
    /// The kernel `kernels::select` gives compute node `id` on this device, or why none.
    fn select(&self, graph: &Graph, id: NodeId) -> Result<KernelId> {
        let node = graph.node(id);
        if node.op.is_layout() || node.op == Op::External {
            return Err(VkError::NoKernel(format!("{} is no compute op", node.op.name())));
        }
        let ins: Vec<Operand> = node.inputs.iter().map(|&i| operand(graph, i)).collect();
        let dynamic = node.value.dyn_axis.map(Into::into);
        kernels::select(Ops::single(&node.op), &ins, &operand(graph, id), dynamic, &self.variants)
    }

    /// The portable kernels, within the limits every Vulkan device has.
    pub const PORTABLE: VulkanRegistry = VulkanRegistry {
        variants: Variants::PORTABLE,
        pins_subgroups: false,
        max_range: MIN_STORAGE_RANGE,
        align: MAX_OFFSET_ALIGN,
    };

    /// The kernels `info`'s device runs (`Variants::for_device`), within its limits.
    pub fn for_device(info: &DeviceInfo) -> VulkanRegistry {
        Self::with_variants(info, Variants::for_device(info))
    }

    /// `variants` on `info`'s device, within its limits.
    pub fn with_variants(info: &DeviceInfo, variants: Variants) -> VulkanRegistry {
        VulkanRegistry {
            variants,
            pins_subgroups: info.pins_subgroups(),
            max_range: u64::from(info.max_storage_buffer_range),
            align: info.min_storage_buffer_offset_alignment.max(1),
        }
    }

    fn kernel_of(&self, id: KernelId, splits: Vec<(usize, usize)>) -> Kernel {
        let subgroup = id.subgroup();
        let subgroup_required = self.pins_subgroups && subgroup.is_some();
        Kernel { name: id.name(), subgroup, subgroup_required, shape: id.shape(), splits, handle: Some(id.handle()) }
    }

    /// The output row ranges of product `id`, when its weights need more than one window.
    fn splits(&self, graph: &Graph, id: NodeId) -> Option<Vec<(usize, usize)>> {
        let node = graph.node(id);
        let w = graph.value(*node.inputs.first()?);
        if node.op != Op::MatMul || w.extent_bytes() as u64 + self.align <= self.max_range {
            return Some(Vec::new());
        }
        let fit = ((self.max_range.saturating_sub(self.align)) / w.nb[1].max(1) as u64) as usize / 64 * 64;
        if fit == 0 {
            log::debug!("node {} ({}): one weight row exceeds the storage-buffer range", id.0, node.name);
            return None;
        }
        Some((0..w.ne[1]).step_by(fit).map(|r0| (r0, fit.min(w.ne[1] - r0))).collect())
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
    Operand {
        dtype: v.dtype,
        ne: v.ne,
        nb: v.nb,
        offset: storage_offset(graph, id),
        dynamic: v.dyn_axis.map(Into::into),
    }
}

impl Registry for VulkanRegistry {
    fn device(&self) -> Where {
        Where::Gpu
    }

    /// A value is bound as a window starting at its offset aligned down (executor.rs,
    /// `bind_window`), so it may take the range less one alignment.
    fn max_value_bytes(&self) -> Option<usize> {
        usize::try_from(self.max_range.saturating_sub(self.align)).ok()
    }

    /// Halves (`Variants::kv_f16`: unless HRX_VK_KV_F32=1 or the exact mode): the cache-writing
    /// kernels round rows to f16 and attention reads them back as such, half the bytes.
    fn cache_dtype(&self) -> DType {
        if self.variants.kv_f16 {
            DType::F16
        } else {
            DType::F32
        }
    }

    fn kernel(&self, graph: &Graph, id: NodeId) -> Option<Kernel> {
        match self.select(graph, id) {
            Ok(k) => Some(self.kernel_of(k, self.splits(graph, id)?)),
            Err(why) => {
                log::debug!("node {} ({}) stays on the CPU: {why}", id.0, graph.node(id).name);
                None
            }
        }
    }

    /// Activations only matrix-unit products read, as x (`Variants::half_activations`), from a
    /// kernel that writes halves: a norm, a SwiGLU, a GELU, attention on the matrix units. The
    /// products stage x as f16 either way, so their results do not change; their loads halve.
    fn keeps_halves(&self, graph: &Graph, id: NodeId, readers: &[NodeId]) -> bool {
        let writes = matches!(
            self.select(graph, id),
            Ok(KernelId::RmsNorm
                | KernelId::LayerNorm
                | KernelId::Binary(BinaryOp::SwiGlu)
                | KernelId::Unary(UnaryOp::GeluTanh | UnaryOp::GeluErf)
                | KernelId::FlashAttnCm(..))
        );
        let read_as_x = |r: NodeId| {
            let ins = &graph.node(r).inputs;
            let root = |i: usize| ins.get(i).map(|&v| graph.layout_root(v));
            root(0) != Some(id) && root(1) == Some(id) && ins.len() == 2
        };
        self.variants.half_activations && writes && readers.iter().all(|&r| {
            read_as_x(r)
                && matches!(self.select(graph, r), Ok(KernelId::MatMul(kind, _, Values::F16)) if kind.takes_halves())
        })
    }

    /// What `kernels::select` runs as one dispatch: a product with the ADD of its output (the
    /// residual or bias added in the product's store), a decode product with the RMS norm or SwiGLU
    /// that makes its input folded in (`mul_mat_vec_wide`), an RMS_NORM with the ROPE of its
    /// output (`rms_norm_rope.comp`). The norm, products of a few columns and products with
    /// their bias reserve their inputs' bytes; a product of many columns fuses a residual ADD
    /// only where the arena happens to keep the output clear of its inputs: keeping every such
    /// input alive through its ADD would grow the vision arena about twofold. A product split over row ranges neither folds
    /// nor fuses.
    fn group(&self, graph: &Graph, group: Group) -> Option<Fusion> {
        if !self.variants.fuse || !self.splits(graph, group.node)?.is_empty() {
            return None;
        }
        let ins: Vec<Operand> = group.inputs(graph).iter().map(|&i| operand(graph, i)).collect();
        let op = |id: NodeId| &graph.node(id).op;
        let ops = Ops { node: op(group.node), folded: group.folded.map(op), fused: group.fused.map(op) };
        let out = group.output();
        let dynamic = graph.value(out).dyn_axis.map(Into::into);
        let k = kernels::select(ops, &ins, &operand(graph, out), dynamic, &self.variants).ok()?;
        // Reserving costs the arena little for a norm or a few columns (decode), and makes
        // those pairs fuse wherever they occur.
        let few_columns = matches!(
            k,
            KernelId::MatMul(MatKind::Vec | MatKind::VecSg { .. } | MatKind::VecWide { .. } | MatKind::Rows, ..)
        );
        // A bias (one row added to every column) keeps only the product's input alive one node
        // longer: the value it adds is a weight.
        let bias = matches!(k, KernelId::MatMul(..))
            && group.fused.is_some()
            && ins.get(2).is_some_and(|r| r.ne[1..] == [1, 1, 1]);
        let reserve = k == KernelId::RmsNormRope || few_columns || bias;
        Some(Fusion { kernel: self.kernel_of(k, Vec::new()), reserve })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::DeviceChoice;
    use crate::dispatcher::{Placement, Plan, Where};
    use crate::gguf::GgufFile;
    use crate::model::synth::{write_text_layout, write_vision_layout, TextSpec, VisionSpec};
    use crate::model::{TextParams, VisionParams};
    use crate::runtime::text_model::{plan_text, TextOptions};
    use crate::runtime::vision_model::plan_vision;

    /// Qwen3-VL-2B planned for a fake RDNA device (RADV on Strix Halo: subgroups of 64 by
    /// default, 32 to 64 allowed, 64 KiB, 16 x 16 x 16 f16 matrices), every graph a run makes:
    /// prefill, decode, the batched decode steps of `caption --batch 32`, and the vision tower
    /// at 1024 x 1024. Every node runs on the GPU, and every dispatch built around a subgroup
    /// size requires one a test ran: 32 (no test has run hrx at wave64).
    #[test]
    fn the_2b_model_on_rdna_dispatches_only_at_subgroup_sizes_a_test_ran() {
        let dir = std::env::temp_dir().join(format!("hrx-rdna-plan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (text_path, vision_path) = (dir.join("2b.gguf"), dir.join("2b-mmproj.gguf"));
        write_text_layout(&TextSpec::qwen3vl_2b(), &text_path).unwrap();
        write_vision_layout(&VisionSpec::qwen3vl_2b(), &vision_path).unwrap();
        let text = TextParams::from_gguf(&GgufFile::open(&text_path).unwrap()).unwrap();
        let vision = VisionParams::from_gguf(&GgufFile::open(&vision_path).unwrap()).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        for default in [64, 32] {
            let info = DeviceInfo::rdna(default);
            let registry = VulkanRegistry::for_device(&info);
            let options = TextOptions::on(DeviceChoice::Auto).with_sequences(32);
            let mut plans: Vec<Plan> = plan_text(&text, &options, &registry).unwrap();
            plans.push(plan_vision(&vision, 4096, &registry).unwrap());
            let mut sized = std::collections::BTreeSet::new();
            for plan in &plans {
                for (i, p) in plan.placements.iter().enumerate() {
                    let Placement::Run { device, kernel, .. } = p else { continue };
                    let at = format!("wave{default}: graph {} node {i} ({})", plan.graph.name, kernel);
                    assert_eq!(*device, Where::Gpu, "{at}");
                    if let Some(size) = kernel.subgroup {
                        assert!(size == 32 && kernel.subgroup_required, "{at}");
                        sized.insert(kernel.name.clone());
                    }
                }
            }
            // The subgroup kernels and the matrix units are in use, not left out.
            for family in ["mul_mat_vec_wide", "flash_attn_split", "mul_mat_cm", "flash_attn_cm"] {
                assert!(sized.iter().any(|k| k.starts_with(family)), "wave{default}: no {family} in {sized:?}");
            }
        }
    }
}
