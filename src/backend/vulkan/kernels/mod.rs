//! The kernels: which compute ops run on the GPU, with what push constants and grid. Each
//! kernel reads its shapes, strides and offsets from push constants and its run-time length
//! from the sizes buffer (binding 0), so one recording serves every token count up to the
//! planned maximum. Kernels know nothing of the model.
//!
//! Every kernel has seven bindings (`BINDINGS`): 0 the run-time sizes (u32 symbols), 1 to 4
//! the inputs in the node's order (unused ones bound to any buffer), 5 the output, 6 zeroed
//! scratch memory.
//!
//! Here, the registry's choice of a kernel for a dispatch ([`select`]); what names a kernel in
//! `id.rs`, its pipelines in `pipelines.rs`, its push constants, grid and bindings in
//! `launch.rs` (each shader's push-constant block a struct: `push.rs`), and each op family's
//! in its own file.

mod argmax;
mod attn;
mod binary;
mod coop;
mod id;
mod launch;
mod matmul;
mod norm;
mod pipelines;
mod push;
mod rope;
mod rows;
mod unary;

pub use attn::{AttnCoop, AttnSplit, AttnTile, SplitWidth, TILED_MIN_QUERIES};
pub use coop::{CoopMat, Tiles};
pub use matmul::{
    check_rows, wide_cols, wide_rows, MatKind, Prologue, Variants, FOLD_MAX_ROWS, WIDE_COLS, WIDE_MAX_SUBGROUP,
    WIDE_ROWS,
};

use super::device::Device;
use super::error::{Result, VkError};
use super::pipeline::{Pipeline, PipelineSpec};
use super::shaders;
use crate::graph::{DynAxis, Gelu, Op, MAX_DIMS};
use crate::quant::DType;
use std::collections::HashMap;
use std::sync::Mutex;

/// Storage buffers of every kernel: sizes, four inputs, output, scratch.
pub const BINDINGS: u32 = 7;
/// The binding of a kernel's output.
pub const OUTPUT_BINDING: u32 = 5;
/// The binding of a kernel's scratch memory (`Launch::scratch`: zeroed once; its counters left
/// zero by every dispatch, so dispatches ordered by a barrier may share it).
pub const SCRATCH_BINDING: u32 = 6;
/// Inputs a kernel can take (bindings 1..=MAX_INPUTS).
pub const MAX_INPUTS: usize = 4;
/// Fewest lanes a subgroup of `flash_attn_split` has: its shared memory holds the partial
/// outputs of 16 subgroups (MAXSG), a workgroup of 128 threads in subgroups of 8.
pub const SPLIT_MIN_SUBGROUP: u32 = 8;

pub use super::shaders::WType;
pub use id::{BinaryOp, KernelId, UnaryOp, Values};
use launch::{expect_f32, floats, halves, op_launch, out_words, stride_words, values, word, Grid};
pub use launch::{launch, probe_launch, Dyn, Launch, Operand, Ops, Scratch};
pub use pipelines::KernelSet;
use push::{members, Member};
pub use push::{CopyPush, PushWords};

/// The kernel the device runs for `ops` with `ins` (in `dispatcher::Group::inputs` order) and `out`
/// under `variants`, or why there is none: the registry's choice at plan time. Matrix products
/// take the device's best kind that accepts the operands (`Variants::mat_kinds`); attention
/// goes by its planned query count and the device's shared memory (`attn::choose`); a norm
/// with the rope of its output runs as `rms_norm_rope`; every other op has one kernel per op
/// and dtype.
pub fn select(ops: Ops, ins: &[Operand], out: &Operand, dynamic: Option<Dyn>, variants: &Variants) -> Result<KernelId> {
    let candidates: Vec<KernelId> = match (ops.node, ins.first()) {
        (Op::MatMul, Some(w)) => {
            let wt = WType::from_dtype(w.dtype)
                .ok_or_else(|| VkError::NoKernel(format!("no matrix kernel for {} weights", w.dtype)))?;
            let kinds = variants.mat_kinds(w.ne[0], w.ne[1], out.ne[1] * out.ne[2] * out.ne[3]);
            let x = ins.get(1).map_or(Ok(Values::F32), |x| Values::of(x, "x"))?;
            kinds.into_iter().map(|kind| KernelId::MatMul(kind, wt, x)).collect()
        }
        (Op::Rope { .. }, _) if matches!(ops.folded, Some(Op::RmsNorm { .. })) => vec![KernelId::RmsNormRope],
        _ if ops.folded.is_some() || ops.fused.is_some() => {
            return Err(VkError::NoKernel(format!("no kernel runs {}", ops.names())));
        }
        (Op::Attention { segment, .. }, _) if variants.tiled_attention => {
            let k = ins.get(1).ok_or_else(|| VkError::Operands("attention needs k".into()))?;
            let split = variants.subgroup.filter(|&s| s >= SPLIT_MIN_SUBGROUP);
            let (shared, coop) = (variants.shared_memory, variants.coop_attention());
            let kv = Values::of(k, "k")?;
            // The one-query kernel takes what the chosen one refuses (k and v off vec4s).
            let chosen = attn::choose(out, (k.ne[2], *segment), kv, shared, split, coop);
            let mut kernels = vec![chosen, KernelId::FlashAttn(kv)];
            kernels.dedup();
            kernels
        }
        (op, _) => vec![op_launch(op, ins, out, dynamic)?.kernel],
    };
    // The first that accepts the operands as the executor will launch it, of those the
    // self-check did not find broken here.
    let mut refusal = None;
    for kernel in candidates {
        if let Some(why) = variants.refusal(kernel) {
            refusal = Some(VkError::NoKernel(format!("{} failed hrx's self-check here: {why}", kernel.name())));
            continue;
        }
        match launch(kernel, ops, ins, out, dynamic) {
            Ok(l) => return Ok(l.kernel),
            Err(e) => refusal = Some(e),
        }
    }
    Err(refusal.unwrap_or_else(|| VkError::NoKernel(format!("no kernel runs {}", ops.names()))))
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::vulkan::CoopShape;
    use crate::dispatcher::Kernel;

    /// The members of the push-constant block of a SPIR-V module, in order, as (byte offset,
    /// type); None when the module declares no block (or one of a type hrx's blocks never use).
    fn push_block_members(code: &[u8]) -> Option<Vec<(usize, Member)>> {
        let words: Vec<u32> = code.chunks_exact(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect();
        let (mut types, mut structs, mut offsets, mut pointers) =
            (HashMap::new(), HashMap::new(), HashMap::new(), HashMap::new());
        let mut block = None;
        let mut at = 5;
        while at < words.len() {
            let (count, op) = ((words[at] >> 16) as usize, words[at] & 0xffff);
            let w = words.get(at + 1..at + count.max(1))?;
            match op {
                21 if w[1..] == [32, 0] => drop(types.insert(w[0], Member::Uint)), // OpTypeInt 32, unsigned
                22 if w[1] == 32 => drop(types.insert(w[0], Member::Float)),       // OpTypeFloat 32
                23 if types.get(&w[1]) == Some(&Member::Uint) && w[2] == 4 => drop(types.insert(w[0], Member::Uvec4)), // OpTypeVector
                30 => drop(structs.insert(w[0], w[1..].to_vec())), // OpTypeStruct
                32 => drop(pointers.insert(w[0], (w[1], w[2]))),   // OpTypePointer
                59 if w.get(2) == Some(&9) => block = pointers.get(&w[0]).map(|p| p.1), // OpVariable, PushConstant
                72 if w[2] == 35 => drop(offsets.insert((w[0], w[1]), w[3] as usize)), // OpMemberDecorate Offset
                _ => {}
            }
            at += count.max(1);
        }
        let block = block?;
        let members = structs.get(&block)?.iter().enumerate();
        members.map(|(i, ty)| Some((*offsets.get(&(block, i as u32))?, *types.get(ty)?))).collect()
    }

    /// Every kernel's push-constant struct lays out its module's block member for member: the
    /// same types at the same offsets, nothing left over. A launch whose struct differed would
    /// leave the shader reading garbage.
    #[test]
    fn each_kernels_push_struct_is_its_modules_push_block() {
        let mut checked = 0;
        for id in KernelId::all() {
            let module = id.module();
            let code = shaders::spirv(&module).unwrap_or_else(|| panic!("no SPIR-V module {module}"));
            let mut at = 0;
            let laid_out: Vec<(usize, Member)> = id
                .push_members()
                .into_iter()
                .map(|m| {
                    at += 4 * m.words();
                    (at - 4 * m.words(), m)
                })
                .collect();
            match push_block_members(code) {
                Some(block) => assert_eq!(laid_out, block, "{} ({module})", id.name()),
                // A module that reads none (the subgroup probe): its layout's one placeholder word.
                None => assert_eq!(laid_out, [(0, Member::Uint)], "{} ({module}) reads no push constants", id.name()),
            }
            assert_eq!(id.push_bytes() as usize, at);
            checked += 1;
        }
        assert!(checked > 40, "{checked}");
    }

    /// The kernel table and the kernels agree: every kernel's module is embedded, every
    /// embedded module is some kernel's, and every kernel, given a variant, comes back from what
    /// a plan records of it.
    #[test]
    fn kernels_modules_and_plans_agree() {
        let all = KernelId::all();
        for &id in &all {
            assert!(shaders::spirv(&id.module()).is_some(), "{id:?}: no module {}", id.module());
            let id = match id {
                KernelId::MatMul(kind, w, x) => {
                    let shape = kind.shape().map(|_| [16, 16, 16]);
                    KernelId::MatMul(kind.with_variant(kind.subgroup().map(|_| 32), shape).unwrap(), w, x)
                }
                other => other,
            };
            assert_eq!(KernelId::from_name(&planned(id)), Some(id), "{}", id.name());
        }
        for (module, _) in shaders::MODULES.iter() {
            assert!(all.iter().any(|k| k.module() == *module), "module {module} is no kernel's");
        }
    }

    /// Shared memory of the kernels whose tiles are variants (the others declare fixed sizes
    /// within lavapipe's 32 KiB, on which every one of them runs in CI).
    fn variant_shared_bytes(k: KernelId) -> u32 {
        match k {
            KernelId::MatMul(kind, ..) => kind.coop_tiles().map_or(0, |(cm, tiles)| tiles.shared_bytes(cm.shape)),
            KernelId::FlashAttnTiled(tile, _) => tile.shared_bytes(),
            KernelId::FlashAttnCm(tile, _) => tile.shared_bytes(),
            _ => 0,
        }
    }

    /// The Qwen3-VL-2B products and attention (text decode, a 512-token prefill, the vision
    /// tower over 4,096 patches: a 1024 x 1024 image) on RDNA-like devices, subgroups of 64 or
    /// 32 by default: each takes a kernel the device runs, at a subgroup size a test ran (32,
    /// required), within its 64 KiB; prefill products on its matrix units.
    #[test]
    fn the_2b_shapes_take_kernels_that_fit_rdna() {
        use crate::backend::vulkan::DeviceInfo;
        use crate::model::synth::{TextSpec, VisionSpec};
        let (t, v) = (TextSpec::qwen3vl_2b(), VisionSpec::qwen3vl_2b());
        let (e, ff, vocab) = (t.n_embd, t.n_ff, t.n_vocab);
        let q_width = t.n_head * t.head_dim;
        let kv_width = t.n_head_kv * t.head_dim;
        let text = [(e, q_width), (e, kv_width), (q_width, e), (e, ff), (ff, e), (e, vocab)];
        let vision = [(v.n_embd, 3 * v.n_embd), (v.n_embd, v.n_embd), (v.n_embd, v.n_ff), (v.n_ff, v.n_embd)];
        let patches = 4096;
        for default in [64, 32] {
            let info = DeviceInfo::rdna(default);
            let variants = Variants::for_device(&info);
            assert!(info.pins_subgroups());
            let fits = |k: KernelId| {
                assert!(
                    k.subgroup().is_none_or(|s| s == 32),
                    "subgroups of {default}: {} at {:?}",
                    k.name(),
                    k.subgroup()
                );
                let bytes = variant_shared_bytes(k);
                assert!(bytes <= info.max_shared_memory, "subgroups of {default}: {} takes {bytes} bytes", k.name());
            };
            let product = |wt: DType, (k, n): (usize, usize), cols: usize| {
                let w = Operand::contiguous(wt, [k, n, 1, 1], 0);
                let x = Operand::contiguous(DType::F32, [k, cols, 1, 1], 0);
                let out = Operand::contiguous(DType::F32, [n, cols, 1, 1], 0);
                let kernel = select(Ops::single(&Op::MatMul), &[w, x], &out, None, &variants).unwrap();
                fits(kernel);
                kernel
            };
            for shape in text {
                for wt in [DType::Q4K, DType::Q6K] {
                    assert!(matches!(product(wt, shape, 1), KernelId::MatMul(MatKind::VecWide { .. }, ..)));
                    let many = product(wt, shape, 512);
                    assert!(matches!(many, KernelId::MatMul(MatKind::Coop(_) | MatKind::CoopLarge(_), ..)));
                    // The 6,144-row products on the large tiles (192 workgroups of them).
                    let large = matches!(many, KernelId::MatMul(MatKind::CoopLarge(_), ..));
                    assert_eq!(large, shape.1 >= 6144, "{shape:?}");
                }
            }
            for shape in vision {
                let many = product(DType::F16, shape, patches);
                assert!(matches!(many, KernelId::MatMul(MatKind::Coop(_) | MatKind::CoopLarge(_), ..)));
            }
            let attention = |d: usize, heads: usize, kv_heads: usize, queries: usize, kv_rows: usize| {
                let q = Operand::contiguous(DType::F32, [d, heads, queries, 1], 0);
                let kv = Operand::contiguous(DType::F32, [d, kv_heads, kv_rows, 1], 0);
                let op = Op::Attention { scale: 0.1, segment: kv_rows };
                let kernel = select(Ops::single(&op), &[q, kv, kv], &q, None, &variants).unwrap();
                fits(kernel);
                kernel
            };
            let (d, heads, kv_heads) = (t.head_dim, t.n_head, t.n_head_kv);
            assert!(matches!(attention(d, heads, kv_heads, 1, 4096), KernelId::FlashAttnSplit(..)));
            assert!(matches!(attention(d, heads, kv_heads, 512, 512), KernelId::FlashAttnCm(..)));
            let vd = v.n_embd / v.n_head;
            assert!(matches!(attention(vd, v.n_head, v.n_head, patches, patches), KernelId::FlashAttnCm(..)));
        }
    }

    fn planned(id: KernelId) -> Kernel {
        Kernel { subgroup: id.subgroup(), shape: id.shape(), ..Kernel::named(id.name()) }
    }

    #[test]
    fn a_plan_names_enough_to_rebuild_each_variant() {
        let cm = CoopMat { subgroup: 8, shape: CoopShape { m: 8, n: 8, k: 8 } };
        let kinds = [
            MatKind::Tiled,
            MatKind::VecSg { subgroup: 32 },
            MatKind::VecWide { subgroup: 32, rows: 4, cols: 1 },
            MatKind::VecWide { subgroup: 32, rows: 2, cols: 8 },
            MatKind::Coop(cm),
            MatKind::CoopExact(cm),
            MatKind::Rows,
        ];
        for kind in kinds {
            let id = KernelId::MatMul(kind, WType::Q4K, Values::F32);
            assert_eq!(KernelId::from_name(&planned(id)), Some(id), "{kind:?}");
        }
        assert_eq!(KernelId::from_name(&planned(KernelId::RmsNormRope)), Some(KernelId::RmsNormRope));
        // The two cooperative-matrix kernels are told apart by name, and their pipelines by
        // the specialization constants the variant gives.
        let (fast, exact) = (
            KernelId::MatMul(MatKind::Coop(cm), WType::F16, Values::F32),
            KernelId::MatMul(MatKind::CoopExact(cm), WType::F16, Values::F32),
        );
        assert_eq!((fast.name(), exact.name()), ("mul_mat_cm_f16".to_owned(), "mul_mat_cm_exact_f16".to_owned()));
        assert_eq!(fast.constants(), vec![32, 8, 8, 8, 16, 16, 64, 2, 0, 0]);
        assert_eq!(exact.constants(), vec![32, 8, 8, 8, 32, 32, 32, 1, 0, 0]);
        let big = KernelId::MatMul(
            MatKind::Coop(CoopMat { subgroup: 32, shape: CoopShape { m: 16, n: 16, k: 16 } }),
            WType::F16,
            Values::F16,
        );
        assert_eq!((big.constants(), big.subgroup()), (vec![128, 16, 16, 16, 32, 32, 64, 2, 0, 1], Some(32)));
        assert_eq!(big.name(), "mul_mat_cm_f16_x_f16");
        // A variant without what it is built around does not exist.
        let mut no_shape = planned(fast);
        no_shape.shape = None;
        assert_eq!(KernelId::from_name(&no_shape), None);
        let mut stray = planned(KernelId::MatMul(MatKind::Tiled, WType::Q4K, Values::F32));
        stray.shape = Some([16, 16, 16]);
        assert_eq!(KernelId::from_name(&stray), None);
    }
}
