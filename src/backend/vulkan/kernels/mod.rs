//! The kernels: which compute ops run on the GPU, with what push constants and grid. Each
//! kernel reads its shapes, strides and offsets from push constants and its run-time length
//! from the sizes buffer (binding 0), so one recording serves every token count up to the
//! planned maximum. Kernels know nothing of the model.
//!
//! Every kernel has six bindings: 0 the run-time sizes (u32 symbols), 1 to 4 the inputs in
//! the node's order (unused ones bound to any buffer), 5 the output.

mod attn;
mod binary;
mod matmul;
mod norm;
mod rope;
mod rows;
mod unary;

pub use matmul::{coopmat_requested, MatKind};

use super::device::Device;
use super::error::{Result, VkError};
use super::pipeline::{Pipeline, PipelineSpec};
use super::shaders;
use crate::graph::{DynAxis, Gelu, Op, MAX_DIMS};
use crate::quant::DType;
use std::collections::HashMap;
use std::sync::Mutex;

/// Storage buffers of every kernel: sizes, four inputs, output.
pub const BINDINGS: u32 = 6;
/// Inputs a kernel can take (bindings 1..=MAX_INPUTS).
pub const MAX_INPUTS: usize = 4;

/// Weight types the matrix kernels decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WType {
    F32,
    F16,
    BF16,
    Q8_0,
    Q4K,
    Q5K,
    Q6K,
}

impl WType {
    pub fn from_dtype(d: DType) -> Option<WType> {
        Some(match d {
            DType::F32 => WType::F32,
            DType::F16 => WType::F16,
            DType::BF16 => WType::BF16,
            DType::Q8_0 => WType::Q8_0,
            DType::Q4K => WType::Q4K,
            DType::Q5K => WType::Q5K,
            DType::Q6K => WType::Q6K,
            _ => return None,
        })
    }

    fn suffix(self) -> &'static str {
        match self {
            WType::F32 => "f32",
            WType::F16 => "f16",
            WType::BF16 => "bf16",
            WType::Q8_0 => "q8_0",
            WType::Q4K => "q4_k",
            WType::Q5K => "q5_k",
            WType::Q6K => "q6_k",
        }
    }
}

/// The elementwise ops of `binary.comp` (its specialization constant).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add = 0,
    Mul = 1,
    SwiGlu = 2,
}

/// The elementwise one-input ops of `unary.comp` (its specialization constant).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Copy = 0,
    GeluTanh = 1,
    GeluErf = 2,
}

/// A kernel: one pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KernelId {
    MatMul(MatKind, WType),
    Binary(BinaryOp),
    RmsNorm,
    LayerNorm,
    Unary(UnaryOp),
    /// A table of this type; weighted (GET_ROWS_WEIGHTED) or not.
    GetRows(WType, bool),
    SetRows,
    Rope,
    /// RMS_NORM then ROPE of its output, in one dispatch.
    RmsNormRope,
    FlashAttn,
}

impl KernelId {
    /// The name plans and logs show, e.g. `mul_mat_vec_q4_k`.
    pub fn name(self) -> &'static str {
        match self {
            // By weight type, in WType's order.
            KernelId::MatMul(kind, w) => {
                let names = match kind {
                    MatKind::Vec => ["mul_mat_vec_f32", "mul_mat_vec_f16", "mul_mat_vec_bf16", "mul_mat_vec_q8_0", "mul_mat_vec_q4_k", "mul_mat_vec_q5_k", "mul_mat_vec_q6_k"],
                    MatKind::VecSg { .. } => ["mul_mat_vec_sg_f32", "mul_mat_vec_sg_f16", "mul_mat_vec_sg_bf16", "mul_mat_vec_sg_q8_0", "mul_mat_vec_sg_q4_k", "mul_mat_vec_sg_q5_k", "mul_mat_vec_sg_q6_k"],
                    MatKind::Tiled => ["mul_mat_f32", "mul_mat_f16", "mul_mat_bf16", "mul_mat_q8_0", "mul_mat_q4_k", "mul_mat_q5_k", "mul_mat_q6_k"],
                    MatKind::Coop { .. } => ["mul_mat_cm_f32", "mul_mat_cm_f16", "mul_mat_cm_bf16", "mul_mat_cm_q8_0", "mul_mat_cm_q4_k", "mul_mat_cm_q5_k", "mul_mat_cm_q6_k"],
                    MatKind::Rows => ["mul_mat_rows_f32", "mul_mat_rows_f16", "mul_mat_rows_bf16", "mul_mat_rows_q8_0", "mul_mat_rows_q4_k", "mul_mat_rows_q5_k", "mul_mat_rows_q6_k"],
                };
                names[w as usize]
            }
            KernelId::Binary(BinaryOp::Add) => "add",
            KernelId::Binary(BinaryOp::Mul) => "mul",
            KernelId::Binary(BinaryOp::SwiGlu) => "swiglu",
            KernelId::RmsNorm => "rms_norm",
            KernelId::LayerNorm => "layer_norm",
            KernelId::Unary(UnaryOp::Copy) => "cont",
            KernelId::Unary(UnaryOp::GeluTanh) => "gelu",
            KernelId::Unary(UnaryOp::GeluErf) => "gelu_erf",
            KernelId::GetRows(w, false) => match w {
                WType::F32 => "get_rows_f32",
                WType::F16 => "get_rows_f16",
                WType::BF16 => "get_rows_bf16",
                WType::Q8_0 => "get_rows_q8_0",
                WType::Q4K => "get_rows_q4_k",
                WType::Q5K => "get_rows_q5_k",
                WType::Q6K => "get_rows_q6_k",
            },
            KernelId::GetRows(w, true) => match w {
                WType::F32 => "get_rows_weighted_f32",
                WType::F16 => "get_rows_weighted_f16",
                WType::BF16 => "get_rows_weighted_bf16",
                WType::Q8_0 => "get_rows_weighted_q8_0",
                WType::Q4K => "get_rows_weighted_q4_k",
                WType::Q5K => "get_rows_weighted_q5_k",
                WType::Q6K => "get_rows_weighted_q6_k",
            },
            KernelId::SetRows => "set_rows",
            KernelId::Rope => "rope",
            KernelId::RmsNormRope => "rms_norm_rope",
            KernelId::FlashAttn => "flash_attn",
        }
    }

    fn module(self) -> String {
        match self {
            KernelId::MatMul(MatKind::Vec, w) => format!("mul_mat_vec_{}", w.suffix()),
            KernelId::MatMul(MatKind::VecSg { .. }, w) => format!("mul_mat_vec_sg_{}", w.suffix()),
            KernelId::MatMul(MatKind::Tiled, w) => format!("mul_mat_{}", w.suffix()),
            KernelId::MatMul(MatKind::Coop { .. }, w) => format!("mul_mat_cm_{}", w.suffix()),
            KernelId::MatMul(MatKind::Rows, w) => format!("mul_mat_rows_{}", w.suffix()),
            KernelId::Binary(_) => "binary".to_owned(),
            KernelId::RmsNorm => "rms_norm".to_owned(),
            KernelId::LayerNorm => "layer_norm".to_owned(),
            KernelId::Unary(_) => "unary".to_owned(),
            KernelId::GetRows(w, _) => format!("get_rows_{}", w.suffix()),
            KernelId::SetRows => "set_rows".to_owned(),
            KernelId::Rope => "rope".to_owned(),
            KernelId::RmsNormRope => "rms_norm_rope".to_owned(),
            KernelId::FlashAttn => "flash_attn".to_owned(),
        }
    }

    fn push_words(self) -> usize {
        match self {
            KernelId::MatMul(..) => matmul::PUSH_WORDS,
            KernelId::Binary(_) => binary::PUSH_WORDS,
            KernelId::RmsNorm => norm::PUSH_WORDS,
            KernelId::LayerNorm => norm::LAYER_PUSH_WORDS,
            KernelId::Unary(_) => unary::PUSH_WORDS,
            KernelId::GetRows(..) => rows::GET_PUSH_WORDS,
            KernelId::SetRows => rows::SET_PUSH_WORDS,
            KernelId::Rope => rope::PUSH_WORDS,
            KernelId::RmsNormRope => rope::PUSH_WORDS + 2,
            KernelId::FlashAttn => attn::PUSH_WORDS,
        }
    }

    fn constants(self) -> Vec<u32> {
        match self {
            KernelId::Binary(op) => vec![op as u32],
            KernelId::Unary(op) => vec![op as u32],
            KernelId::GetRows(_, weighted) => vec![u32::from(weighted)],
            // The workgroup: four subgroups.
            KernelId::MatMul(MatKind::Coop { subgroup }, _) => vec![4 * subgroup],
            _ => Vec::new(),
        }
    }

    /// The subgroup size the kernel must run with, for kernels built around a fixed number
    /// of subgroups per workgroup.
    fn subgroup_size(self) -> Option<u32> {
        match self {
            KernelId::MatMul(MatKind::Coop { subgroup }, _) => Some(subgroup),
            _ => None,
        }
    }
}

/// The pipelines of a device, made on first use (through the pipeline cache).
pub struct KernelSet {
    device: Device,
    pipelines: Mutex<HashMap<KernelId, Pipeline>>,
}

impl KernelSet {
    pub fn new(device: &Device) -> KernelSet {
        KernelSet { device: device.clone(), pipelines: Mutex::new(HashMap::new()) }
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    pub fn pipeline(&self, id: KernelId) -> Result<Pipeline> {
        let mut map = self.pipelines.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = map.get(&id) {
            return Ok(p.clone());
        }
        let module = id.module();
        let spirv = shaders::spirv(&module).ok_or_else(|| VkError::Pipeline { kernel: module.clone(), reason: "no such SPIR-V module".into() })?;
        let spec = PipelineSpec {
            name: id.name(),
            spirv,
            bindings: BINDINGS,
            push_bytes: (id.push_words() * 4) as u32,
            constants: &id.constants(),
            subgroup_size: id.subgroup_size(),
        };
        let p = Pipeline::new(&self.device, &spec)?;
        map.insert(id, p.clone());
        Ok(p)
    }
}

/// An operand as a kernel sees it: dtype, maximal shape, byte strides, byte offset in the
/// buffer bound for it, and its dynamic axis (kernels that size their work by an input, such
/// as SET_ROWS by its source rows, read it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Operand {
    pub dtype: DType,
    pub ne: [usize; MAX_DIMS],
    pub nb: [usize; MAX_DIMS],
    pub offset: usize,
    pub dynamic: Option<Dyn>,
}

impl Operand {
    /// A contiguous, static operand at byte `offset`.
    pub fn contiguous(dtype: DType, ne: [usize; MAX_DIMS], offset: usize) -> Operand {
        Operand { dtype, ne, nb: crate::graph::contiguous_strides(dtype, ne), offset, dynamic: None }
    }
}

/// A kernel chosen for a node, with its push constants; `groups` gives the grid for a
/// run-time output shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    pub kernel: KernelId,
    pub push: Vec<u32>,
    /// Output elements per workgroup along (rows of ne0, columns), for the grid.
    grid: Grid,
    /// The grid follows the run-time shape of this input (SET_ROWS: its source), else the
    /// output's.
    pub grid_input: Option<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Grid {
    /// x: ne0 / rows_per_group, y: columns (ne1*ne2*ne3) / cols_per_group.
    Mat { rows: usize, cols: usize },
    /// x: all elements / per_group.
    Flat { per_group: usize },
    /// x: one group per row (ne1*ne2*ne3).
    Rows,
}

impl Launch {
    /// Workgroups for output shape `ne` (the run-time one), within the device's `max`. The
    /// kernels loop over what a clamped grid leaves.
    pub fn groups(&self, ne: [usize; MAX_DIMS], max: [u32; 3]) -> [u32; 3] {
        let cols = ne[1] * ne[2] * ne[3];
        let g = match self.grid {
            Grid::Mat { rows, cols: per } => [ne[0].div_ceil(rows), cols.div_ceil(per), 1],
            Grid::Flat { per_group } => [(ne[0] * cols).div_ceil(per_group), 1, 1],
            Grid::Rows => [cols, 1, 1],
        };
        [0, 1, 2].map(|i| g[i].min(max[i] as usize) as u32)
    }
}

/// A run-time length for axis `axis` of the output: `syms[sym] * num / den`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dyn {
    pub axis: usize,
    pub sym: usize,
    pub num: usize,
    pub den: usize,
}

impl From<DynAxis> for Dyn {
    fn from(d: DynAxis) -> Dyn {
        Dyn { axis: d.axis, sym: d.sym.0, num: d.num, den: d.den }
    }
}

/// Push-constant words of a dynamic axis; axis 4 means static.
fn dyn_words(d: Option<Dyn>) -> Result<[u32; 4]> {
    match d {
        None => Ok([4, 0, 1, 1]),
        Some(d) if d.axis < MAX_DIMS && d.den > 0 => Ok([d.axis as u32, word(d.sym, "symbol")?, word(d.num, "ratio")?, word(d.den, "ratio")?]),
        Some(d) => Err(VkError::Invalid(format!("bad dynamic axis {d:?}"))),
    }
}

/// The words most kernels' push constants start with: the output's sizes and its dynamic axis.
fn shape_words(out: &Operand, dynamic: Option<Dyn>, capacity: usize) -> Result<Vec<u32>> {
    let mut push = Vec::with_capacity(capacity);
    for v in out.ne {
        push.push(word(v, "size")?);
    }
    push.extend(dyn_words(dynamic)?);
    Ok(push)
}

/// The byte strides of an f32 operand as words of floats.
fn stride_words(o: &Operand, what: &str) -> Result<[u32; MAX_DIMS]> {
    let mut words = [0; MAX_DIMS];
    for (w, &nb) in words.iter_mut().zip(&o.nb) {
        *w = floats(nb, what)?;
    }
    Ok(words)
}

/// A size or offset as a push-constant word.
fn word(v: usize, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| VkError::Invalid(format!("{what} {v} does not fit 32 bits")))
}

/// A byte offset or stride of an f32 operand in floats.
fn floats(bytes: usize, what: &str) -> Result<u32> {
    if !bytes.is_multiple_of(4) {
        return Err(VkError::Invalid(format!("{what}: {bytes} bytes is not a whole number of floats")));
    }
    word(bytes / 4, what)
}

fn expect_f32(o: &Operand, what: &str) -> Result<()> {
    if o.dtype != DType::F32 {
        return Err(VkError::Invalid(format!("{what} is {}, the kernel reads f32", o.dtype)));
    }
    Ok(())
}

/// The kernel and push constants for compute op `op` with `ins` (in the node's order) and
/// `out`, or why there is none. Matrix products pick their kernel by `MatKind::choose` (the
/// portable one; the executor adapts it to its device with `MatKind::for_device`).
pub fn launch(op: &Op, ins: &[Operand], out: &Operand, dynamic: Option<Dyn>) -> Result<Launch> {
    let arg = |i: usize| ins.get(i).ok_or_else(|| VkError::Invalid(format!("{} needs input {i}", op.name())));
    match op {
        Op::MatMul => {
            let kind = MatKind::choose(arg(0)?.ne[0], out.ne[1] * out.ne[2] * out.ne[3]);
            matmul::launch(kind, arg(0)?, arg(1)?, out, None, dynamic)
        }
        Op::Add => binary::launch(BinaryOp::Add, arg(0)?, arg(1)?, out, dynamic),
        Op::Mul => binary::launch(BinaryOp::Mul, arg(0)?, arg(1)?, out, dynamic),
        Op::SwiGlu => binary::launch(BinaryOp::SwiGlu, arg(0)?, arg(1)?, out, dynamic),
        Op::RmsNorm { eps } => norm::launch(arg(0)?, arg(1)?, *eps, out, dynamic),
        Op::LayerNorm { eps } => norm::layer_norm(arg(0)?, arg(1)?, arg(2)?, *eps, out, dynamic),
        Op::Gelu(Gelu::Tanh) => unary::launch(UnaryOp::GeluTanh, arg(0)?, out, dynamic),
        Op::Gelu(Gelu::Erf) => unary::launch(UnaryOp::GeluErf, arg(0)?, out, dynamic),
        Op::Cont => unary::launch(UnaryOp::Copy, arg(0)?, out, dynamic),
        Op::GetRows => rows::get_rows(arg(0)?, arg(1)?, None, out, dynamic),
        Op::GetRowsWeighted => rows::get_rows(arg(0)?, arg(1)?, Some(arg(2)?), out, dynamic),
        Op::SetRows => rows::set_rows(arg(0)?, arg(1)?, arg(2)?, out),
        Op::Rope { kind, theta, n_dims } => rope::launch(kind, *theta, *n_dims, arg(0)?, arg(1)?, out, dynamic),
        Op::Attention { scale } => attn::launch(arg(0)?, arg(1)?, arg(2)?, ins.get(3), *scale, out, dynamic),
        other => Err(VkError::Invalid(format!("no Vulkan kernel for {}", other.name()))),
    }
}

/// RMS_NORM (`norm`: eps, inputs x and weight) followed by ROPE (`rope`: its positions
/// `pos`) of the norm's output into `out`, as one kernel.
pub fn launch_norm_rope(norm: &Op, rope: &Op, x: &Operand, weight: &Operand, pos: &Operand, out: &Operand, dynamic: Option<Dyn>) -> Result<Launch> {
    let (Op::RmsNorm { eps }, Op::Rope { kind, theta, n_dims }) = (norm, rope) else {
        return Err(VkError::Invalid(format!("no fused kernel for {} then {}", norm.name(), rope.name())));
    };
    // Each half of the fused kernel accepts what its own kernel accepts.
    norm::launch(x, weight, *eps, out, dynamic)?;
    let mut launch = rope::launch(kind, *theta, *n_dims, x, pos, out, dynamic)?;
    launch.push.push(floats(weight.offset, "weight offset")?);
    launch.push.push(eps.to_bits());
    launch.kernel = KernelId::RmsNormRope;
    launch.grid = Grid::Rows;
    Ok(launch)
}

/// A matrix product with a chosen kernel (the executor's device-specific choice; tests run
/// every kernel on the same shapes).
/// `residual` (input 3) is added to the product, when given.
pub fn launch_mat(kind: MatKind, w: &Operand, x: &Operand, out: &Operand, residual: Option<&Operand>, dynamic: Option<Dyn>) -> Result<Launch> {
    matmul::launch(kind, w, x, out, residual, dynamic)
}
