//! The kernels: which compute ops run on the GPU, with what push constants and grid. Each
//! kernel reads its shapes, strides and offsets from push constants and its run-time length
//! from the sizes buffer (binding 0), so one recording serves every token count up to the
//! planned maximum. Kernels know nothing of the model.
//!
//! Every kernel has seven bindings (`BINDINGS`): 0 the run-time sizes (u32 symbols), 1 to 4
//! the inputs in the node's order (unused ones bound to any buffer), 5 the output, 6 zeroed
//! scratch memory.

mod argmax;
mod attn;
mod binary;
mod coop;
mod matmul;
mod norm;
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

/// The kernels planned in this process, in the order their handles were given.
static PLANNED: Mutex<Vec<KernelId>> = Mutex::new(Vec::new());

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

/// The values an operand holds where a kernel takes either kind: K and V of an attention kernel
/// (the KV cache's, `Registry::cache_dtype`: its specialization constant KV_F16,
/// shaders/attn_kv.glsl), x of a matrix-unit product (activations kept in halves,
/// `Registry::keeps_halves`: X_F16, shaders/mul_mat_cm_tiles.glsl), so that a pipeline reads one
/// kind with no branch among its loads; the output of a kernel that writes halves in pairs (a
/// push constant: its stores are few).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Values {
    F32 = 0,
    F16 = 1,
}

impl Values {
    pub const ALL: [Values; 2] = [Values::F32, Values::F16];

    /// Those `o` holds (`what` names it in the refusal).
    pub fn of(o: &Operand, what: &str) -> Result<Values> {
        match o.dtype {
            DType::F32 => Ok(Values::F32),
            DType::F16 => Ok(Values::F16),
            other => Err(VkError::Invalid(format!("{what} is {other}, the kernel takes f32 or f16 values"))),
        }
    }

    /// The suffix of the kernel's name: none for f32 values.
    fn suffix(self) -> &'static str {
        match self {
            Values::F32 => "",
            Values::F16 => "_f16",
        }
    }
}

/// A kernel: one pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KernelId {
    /// A product of weights of this type; x of these values (f16: `MatKind::takes_halves`).
    MatMul(MatKind, WType, Values),
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
    /// Attention for a few queries: a workgroup per (head, query). Each attention kernel reads
    /// K and V of one kind of values.
    FlashAttn(Values),
    /// Attention for many queries: a workgroup per (head, tile of queries).
    FlashAttnTiled(AttnTile, Values),
    /// As `FlashAttnTiled`, on the matrix units.
    FlashAttnCm(AttnCoop, Values),
    /// Attention for a few queries over long contexts: the kv rows of each (head, query) split
    /// over many workgroups, combined by the last to finish.
    FlashAttnSplit(AttnSplit, Values),
    /// The index of each row's largest value.
    Argmax,
    /// 16-byte words from input 1 to the output: the copy bandwidth `hrx bench --kernels`
    /// compares products with; no graph node runs it.
    Copy,
    /// What a subgroup of this many lanes is here (`selfcheck::probe`); no graph node runs it.
    SubgroupProbe(u32),
}

impl KernelId {
    /// Every kernel, each once (subgroup sizes and shapes 0: they are filled in from a plan's
    /// kernel).
    pub fn all() -> Vec<KernelId> {
        let mut all = Vec::new();
        for w in WType::ALL {
            for kind in MatKind::all() {
                let xs = if kind.takes_halves() { &Values::ALL[..] } else { &[Values::F32][..] };
                all.extend(xs.iter().map(|&x| KernelId::MatMul(kind, w, x)));
            }
            all.extend([KernelId::GetRows(w, false), KernelId::GetRows(w, true)]);
        }
        all.extend([BinaryOp::Add, BinaryOp::Mul, BinaryOp::SwiGlu].map(KernelId::Binary));
        all.extend([UnaryOp::Copy, UnaryOp::GeluTanh, UnaryOp::GeluErf].map(KernelId::Unary));
        all.extend([
            KernelId::RmsNorm,
            KernelId::LayerNorm,
            KernelId::SetRows,
            KernelId::Rope,
            KernelId::RmsNormRope,
            KernelId::Argmax,
            KernelId::Copy,
            KernelId::SubgroupProbe(0),
        ]);
        for kv in Values::ALL {
            all.push(KernelId::FlashAttn(kv));
            all.extend(
                [SplitWidth::Wide, SplitWidth::Narrow]
                    .map(|width| KernelId::FlashAttnSplit(AttnSplit { width, subgroup: 0 }, kv)),
            );
            all.extend(AttnTile::ALL.map(|tile| KernelId::FlashAttnTiled(tile, kv)));
            all.extend(
                [AttnTile::D64, AttnTile::D128]
                    .map(|class| KernelId::FlashAttnCm(AttnCoop { class, cm: CoopMat::UNSET }, kv)),
            );
        }
        all
    }

    /// The handle a plan carries for this kernel (`dispatcher::Kernel::handle`): its place in
    /// the process's table of kernels planned, so the executor takes the kernel back without
    /// reading its name.
    pub fn handle(self) -> u32 {
        let mut planned = PLANNED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let at = planned.iter().position(|&k| k == self).unwrap_or_else(|| {
            planned.push(self);
            planned.len() - 1
        });
        u32::try_from(at).unwrap_or(u32::MAX)
    }

    /// The kernel of a plan's `kernel`: by the handle this backend's registry gave it.
    pub fn of_plan(kernel: &crate::dispatcher::Kernel) -> Option<KernelId> {
        let planned = PLANNED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        planned.get(usize::try_from(kernel.handle?).ok()?).copied()
    }

    /// The kernel a record names (the self-check's file): `name` as [`KernelId::name`] gives
    /// it, with the subgroup size (and matrix-unit shape) of a variant built around one.
    pub fn from_name(kernel: &crate::dispatcher::Kernel) -> Option<KernelId> {
        let id = KernelId::all().into_iter().find(|k| k.name() == kernel.name)?;
        match (id, kernel.subgroup, kernel.shape) {
            (KernelId::MatMul(kind, w, x), subgroup, shape) => {
                Some(KernelId::MatMul(kind.with_variant(subgroup, shape)?, w, x))
            }
            (KernelId::SubgroupProbe(_), Some(subgroup), None) => Some(KernelId::SubgroupProbe(subgroup)),
            (KernelId::FlashAttnSplit(split, kv), Some(subgroup), None) => {
                Some(KernelId::FlashAttnSplit(AttnSplit { subgroup, ..split }, kv))
            }
            (KernelId::FlashAttnCm(tile, kv), Some(subgroup), Some([m, n, k])) => {
                let cm = CoopMat { subgroup, shape: crate::backend::vulkan::info::CoopShape { m, n, k } };
                Some(KernelId::FlashAttnCm(AttnCoop { cm, ..tile }, kv))
            }
            (id, None, None) => Some(id),
            _ => None,
        }
    }

    /// The subgroup size the kernel is built around, where it is one: it runs at exactly that
    /// size (its pipeline requires it where the device allows, `DeviceInfo::pins_subgroups`).
    pub fn subgroup(self) -> Option<u32> {
        match self {
            KernelId::MatMul(kind, ..) => kind.subgroup(),
            KernelId::FlashAttnCm(tile, _) => Some(tile.cm.subgroup),
            KernelId::FlashAttnSplit(split, _) => Some(split.subgroup),
            KernelId::SubgroupProbe(subgroup) => Some(subgroup),
            _ => None,
        }
    }

    /// The values K and V hold, for an attention kernel.
    pub fn kv(self) -> Option<Values> {
        match self {
            KernelId::FlashAttn(kv)
            | KernelId::FlashAttnTiled(_, kv)
            | KernelId::FlashAttnCm(_, kv)
            | KernelId::FlashAttnSplit(_, kv) => Some(kv),
            _ => None,
        }
    }

    /// This attention kernel reading `kv` values; any other kernel as it is.
    pub fn with_kv(self, kv: Values) -> KernelId {
        match self {
            KernelId::FlashAttn(_) => KernelId::FlashAttn(kv),
            KernelId::FlashAttnTiled(tile, _) => KernelId::FlashAttnTiled(tile, kv),
            KernelId::FlashAttnCm(tile, _) => KernelId::FlashAttnCm(tile, kv),
            KernelId::FlashAttnSplit(split, _) => KernelId::FlashAttnSplit(split, kv),
            other => other,
        }
    }

    /// The matrix-unit shape (M, N, K) the kernel is built around, where it is one.
    pub fn shape(self) -> Option<[u32; 3]> {
        match self {
            KernelId::MatMul(kind, ..) => kind.shape(),
            KernelId::FlashAttnCm(tile, _) => Some([tile.cm.shape.m, tile.cm.shape.n, tile.cm.shape.k]),
            _ => None,
        }
    }

    /// Its family in the kernel table (shaders/modules.txt).
    fn family(self) -> &'static str {
        match self {
            KernelId::MatMul(MatKind::Vec, ..) => "mul_mat_vec",
            KernelId::MatMul(MatKind::VecSg { .. }, ..) => "mul_mat_vec_sg",
            KernelId::MatMul(MatKind::VecWide { rows: 2, .. }, ..) => "mul_mat_vec_wide",
            KernelId::MatMul(MatKind::VecWide { rows: 4, .. }, ..) => "mul_mat_vec_wide4",
            KernelId::MatMul(MatKind::VecWide { .. }, ..) => "mul_mat_vec_wide8",
            KernelId::MatMul(MatKind::Tiled, ..) => "mul_mat",
            KernelId::MatMul(MatKind::Coop(_) | MatKind::CoopLarge(_), ..) => "mul_mat_cm",
            KernelId::MatMul(MatKind::CoopNarrow { blocks: 1, .. }, ..) => "mul_mat_cm_narrow",
            KernelId::MatMul(MatKind::CoopNarrow { .. }, ..) => "mul_mat_cm_narrow2",
            KernelId::MatMul(MatKind::CoopExact(_), ..) => "mul_mat_cm_exact",
            KernelId::MatMul(MatKind::Rows, ..) => "mul_mat_rows",
            KernelId::Binary(_) => "binary",
            KernelId::RmsNorm => "rms_norm",
            KernelId::LayerNorm => "layer_norm",
            KernelId::Unary(_) => "unary",
            KernelId::GetRows(..) => "get_rows",
            KernelId::SetRows => "set_rows",
            KernelId::Rope => "rope",
            KernelId::RmsNormRope => "rms_norm_rope",
            KernelId::FlashAttn(_) => "flash_attn",
            KernelId::FlashAttnTiled(..) => "flash_attn_tiled",
            KernelId::FlashAttnCm(..) => "flash_attn_cm",
            KernelId::FlashAttnSplit(AttnSplit { width: SplitWidth::Wide, .. }, _) => "flash_attn_split",
            KernelId::FlashAttnSplit(AttnSplit { width: SplitWidth::Narrow, .. }, _) => "flash_attn_split_narrow",
            KernelId::Argmax => "argmax",
            KernelId::Copy => "copy",
            KernelId::SubgroupProbe(_) => "subgroup_probe",
        }
    }

    fn wtype(self) -> Option<WType> {
        match self {
            KernelId::MatMul(_, w, _) | KernelId::GetRows(w, _) => Some(w),
            _ => None,
        }
    }

    /// Its SPIR-V module: the family, and the weight type for families compiled per type.
    pub fn module(self) -> String {
        match self.wtype() {
            Some(w) => format!("{}_{}", self.family(), w.suffix()),
            None => self.family().to_owned(),
        }
    }

    /// The name plans, logs and profiles show: the module's, or for modules that run several
    /// ops through a specialization constant, the op's (`add`, `gelu_erf`,
    /// `get_rows_weighted_q4_k`); an attention kernel's over f16 values ends in `_f16`, a
    /// product's of x in f16 values in `_x_f16`.
    pub fn name(self) -> String {
        let name = self.base_name();
        match (self, self.kv()) {
            (_, Some(kv)) => name + kv.suffix(),
            (KernelId::MatMul(.., Values::F16), None) => name + "_x_f16",
            _ => name,
        }
    }

    fn base_name(self) -> String {
        match self {
            KernelId::Binary(BinaryOp::Add) => "add".into(),
            KernelId::Binary(BinaryOp::Mul) => "mul".into(),
            KernelId::Binary(BinaryOp::SwiGlu) => "swiglu".into(),
            KernelId::Unary(UnaryOp::Copy) => "cont".into(),
            KernelId::Unary(UnaryOp::GeluTanh) => "gelu".into(),
            KernelId::Unary(UnaryOp::GeluErf) => "gelu_erf".into(),
            KernelId::GetRows(w, true) => format!("get_rows_weighted_{}", w.suffix()),
            KernelId::FlashAttnTiled(tile, _) => format!("flash_attn_tiled_{}", tile.suffix()),
            KernelId::FlashAttnCm(tile, _) => format!("flash_attn_cm_{}", tile.class.suffix()),
            KernelId::MatMul(MatKind::VecWide { cols, .. }, ..) if cols > 1 => format!("{}_x{cols}", self.module()),
            KernelId::MatMul(MatKind::CoopLarge(_), w, _) => format!("mul_mat_cm_large_{}", w.suffix()),
            other => other.module(),
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
            KernelId::RmsNormRope => rope::PUSH_WORDS + 6,
            KernelId::FlashAttn(_) | KernelId::FlashAttnTiled(..) | KernelId::FlashAttnCm(..) => attn::PUSH_WORDS,
            KernelId::FlashAttnSplit(..) => attn::PUSH_WORDS + 1,
            KernelId::Argmax => argmax::PUSH_WORDS,
            KernelId::Copy | KernelId::SubgroupProbe(_) => 1,
        }
    }

    fn constants(self) -> Vec<u32> {
        match self {
            KernelId::Binary(op) => vec![op as u32],
            KernelId::Unary(op) => vec![op as u32],
            KernelId::GetRows(_, weighted) => vec![u32::from(weighted)],
            KernelId::MatMul(MatKind::VecWide { cols, .. }, ..) => vec![cols],
            // The workgroup (four subgroups), the matrix-unit shape and the tiles, then X_F16.
            KernelId::MatMul(kind, _, x) => {
                kind.coop_tiles().map_or_else(Vec::new, |(cm, tiles)| [tiles.constants(cm), vec![x as u32]].concat())
            }
            // The tile's, then KV_F16.
            KernelId::FlashAttnTiled(tile, kv) => [tile.constants(), vec![kv as u32]].concat(),
            KernelId::FlashAttnCm(tile, kv) => [tile.constants(), vec![kv as u32]].concat(),
            KernelId::FlashAttn(kv) | KernelId::FlashAttnSplit(_, kv) => vec![kv as u32],
            _ => Vec::new(),
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
        if let Some(p) = self.made(id) {
            return Ok(p);
        }
        // Made outside the lock: pipelines of other kernels are made meanwhile (`prepare`).
        let p = self.make(id)?;
        let mut map = self.pipelines.lock().unwrap_or_else(|e| e.into_inner());
        Ok(map.entry(id).or_insert(p).clone())
    }

    /// Makes the pipelines of `ids` that are not made yet, on up to one thread per core (the
    /// driver compiles each; an empty driver cache makes that most of a cold start).
    pub fn prepare(&self, ids: impl IntoIterator<Item = KernelId>) -> Result<()> {
        let mut todo: Vec<KernelId> = Vec::new();
        for id in ids {
            if !todo.contains(&id) && self.made(id).is_none() {
                todo.push(id);
            }
        }
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(todo.len());
        let next = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| -> Result<()> {
                        while let Some(&id) = todo.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) {
                            self.pipeline(id)?;
                        }
                        Ok(())
                    })
                })
                .collect();
            workers.into_iter().try_for_each(|w| {
                w.join().unwrap_or_else(|_| Err(VkError::Invalid("a pipeline-making thread panicked".into())))
            })
        })
    }

    fn made(&self, id: KernelId) -> Option<Pipeline> {
        self.pipelines.lock().unwrap_or_else(|e| e.into_inner()).get(&id).cloned()
    }

    fn make(&self, id: KernelId) -> Result<Pipeline> {
        let module = id.module();
        let spirv = shaders::spirv(&module)
            .ok_or_else(|| VkError::Pipeline { kernel: module.clone(), reason: "no such SPIR-V module".into() })?;
        let name = id.name();
        // A kernel built around a subgroup size runs at exactly that size: required where the
        // device allows it, else the device's one size.
        let info = self.device.info();
        let pins = info.pins_subgroups();
        if let Some(size) = id.subgroup().filter(|&s| !pins && s != info.subgroup_size) {
            return Err(VkError::Pipeline {
                kernel: name,
                reason: format!(
                    "built for subgroups of {size}; {} runs {} and a pipeline cannot require another",
                    info.name, info.subgroup_size
                ),
            });
        }
        let spec = PipelineSpec {
            name: &name,
            spirv,
            bindings: BINDINGS,
            push_bytes: (id.push_words() * 4) as u32,
            constants: &id.constants(),
            subgroup_size: id.subgroup().filter(|_| pins),
        };
        Pipeline::new(&self.device, &spec)
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
    /// The binding of each input, in the order the launch took them; empty: 1, 2, 3...
    pub slots: Vec<u32>,
    /// The scratch memory the dispatch uses (`SCRATCH_BINDING`).
    pub scratch: Scratch,
}

/// Scratch memory of a dispatch: `bytes` in all (0: none), of which those from `counters` on
/// must be zero when it starts and are zero again when it ends (the rest it writes before it
/// reads). Dispatches with the same two can share a buffer where a barrier orders them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Scratch {
    pub bytes: usize,
    pub counters: usize,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Grid {
    /// x: ne0 / rows_per_group, y: columns (ne1*ne2*ne3) / cols_per_group.
    Mat { rows: usize, cols: usize },
    /// x: all elements / per_group.
    Flat { per_group: usize },
    /// x: one group per row (ne1*ne2*ne3).
    Rows,
    /// x: one group per (ne1, tile of `queries` along ne2) (and ne3).
    QueryTiles { queries: usize },
    /// x: one group per (ne1, ne2, ne3) and split.
    Split { splits: usize },
}

impl Grid {
    /// The row-wise elementwise kernels' grid (shaders/elementwise.glsl): x, chunks of
    /// `ROW_CHUNK` (1,024) values of a row; y, the rows.
    const ROW_CHUNKS: Grid = Grid::Mat { rows: 1024, cols: 1 };
}

impl Launch {
    /// The binding input `i` goes to.
    pub fn slot(&self, i: usize) -> u32 {
        self.slots.get(i).copied().unwrap_or(i as u32 + 1)
    }

    /// Workgroups for output shape `ne` (the run-time one), within the device's `max`. The
    /// kernels loop over what a clamped grid leaves.
    pub fn groups(&self, ne: [usize; MAX_DIMS], max: [u32; 3]) -> [u32; 3] {
        let cols = ne[1] * ne[2] * ne[3];
        let g = match self.grid {
            Grid::Mat { rows, cols: per } => [ne[0].div_ceil(rows), cols.div_ceil(per), 1],
            Grid::Flat { per_group } => [(ne[0] * cols).div_ceil(per_group), 1, 1],
            Grid::Rows => [cols, 1, 1],
            Grid::QueryTiles { queries } => [ne[1] * ne[2].div_ceil(queries) * ne[3], 1, 1],
            Grid::Split { splits } => [cols * splits, 1, 1],
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
        Some(d) if d.axis < MAX_DIMS && d.den > 0 => {
            Ok([d.axis as u32, word(d.sym, "symbol")?, word(d.num, "ratio")?, word(d.den, "ratio")?])
        }
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

/// The byte strides of an f32 or f16 operand as words of its values.
fn stride_words(o: &Operand, what: &str) -> Result<[u32; MAX_DIMS]> {
    let mut words = [0; MAX_DIMS];
    for (w, &nb) in words.iter_mut().zip(&o.nb) {
        *w = values(o, nb, what)?;
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

/// How a kernel that writes f32 or f16 values (a cache's rows, `Registry::cache_dtype`, or
/// activations kept in halves) takes its output `o`, its push constant: 0 as f32 values, 1 as
/// f16 ones (its offsets and strides then count halves).
fn halves(o: &Operand, what: &str) -> Result<u32> {
    Ok(Values::of(o, what)? as u32)
}

/// The output `o` of a kernel that writes it as f32 values or, in pairs, as halves: its push
/// words (offset, strides: values) and the halves flag. Halves go out as whole aligned pairs
/// along contiguous rows.
fn out_words(o: &Operand, kernel: &str) -> Result<(u32, [u32; MAX_DIMS], u32)> {
    let half = halves(o, &format!("{kernel}'s output"))?;
    let words = stride_words(o, "output stride")?;
    let offset = values(o, o.offset, "output offset")?;
    let pairs = o.ne[0].is_multiple_of(2) && offset.is_multiple_of(2) && words[1..].iter().all(|w| w.is_multiple_of(2));
    if half == 1 && (words[0] != 1 || !pairs) {
        return Err(VkError::Invalid(format!("{kernel}: halves are written in pairs along contiguous rows")));
    }
    Ok((offset, words, half))
}

/// A byte offset or stride of an f32 or f16 operand `o` in its values.
fn values(o: &Operand, bytes: usize, what: &str) -> Result<u32> {
    let size = o.dtype.block_bytes();
    if !bytes.is_multiple_of(size) {
        return Err(VkError::Invalid(format!("{what}: {bytes} bytes is not a whole number of {} values", o.dtype)));
    }
    word(bytes / size, what)
}

fn expect_f32(o: &Operand, what: &str) -> Result<()> {
    if o.dtype != DType::F32 {
        return Err(VkError::Invalid(format!("{what} is {}, the kernel reads f32", o.dtype)));
    }
    Ok(())
}

/// The ops of one dispatch's nodes (`dispatcher::Group`): the node's, its folded producer's (computed
/// on the fly from the producer's inputs), its fused reader's (whose output it writes).
#[derive(Clone, Copy, Debug)]
pub struct Ops<'a> {
    pub node: &'a Op,
    pub folded: Option<&'a Op>,
    pub fused: Option<&'a Op>,
}

impl<'a> Ops<'a> {
    pub fn single(node: &'a Op) -> Ops<'a> {
        Ops { node, folded: None, fused: None }
    }

    fn names(&self) -> String {
        let ops = self.folded.into_iter().chain([self.node]).chain(self.fused);
        ops.map(|o| o.name()).collect::<Vec<_>>().join("+")
    }
}

/// The launch of the subgroup probe at `size` lanes: one workgroup of 128 invocations, each
/// writing four words to the output (`selfcheck::probe`).
pub fn probe_launch(size: u32) -> Launch {
    Launch {
        kernel: KernelId::SubgroupProbe(size),
        push: vec![0],
        grid: Grid::Rows,
        grid_input: None,
        slots: Vec::new(),
        scratch: Scratch::default(),
    }
}

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
                .ok_or_else(|| VkError::Invalid(format!("no matrix kernel for {} weights", w.dtype)))?;
            let kinds = variants.mat_kinds(w.ne[0], w.ne[1], out.ne[1] * out.ne[2] * out.ne[3]);
            let x = ins.get(1).map_or(Ok(Values::F32), |x| Values::of(x, "x"))?;
            kinds.into_iter().map(|kind| KernelId::MatMul(kind, wt, x)).collect()
        }
        (Op::Rope { .. }, _) if matches!(ops.folded, Some(Op::RmsNorm { .. })) => vec![KernelId::RmsNormRope],
        _ if ops.folded.is_some() || ops.fused.is_some() => {
            return Err(VkError::Invalid(format!("no kernel runs {}", ops.names())));
        }
        (Op::Attention { segment, .. }, _) if variants.tiled_attention => {
            let k = ins.get(1).ok_or_else(|| VkError::Invalid("attention needs k".into()))?;
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
            refusal = Some(VkError::Invalid(format!("{} failed hrx's self-check here: {why}", kernel.name())));
            continue;
        }
        match launch(kernel, ops, ins, out, dynamic) {
            Ok(l) => return Ok(l.kernel),
            Err(e) => refusal = Some(e),
        }
    }
    Err(refusal.unwrap_or_else(|| VkError::Invalid(format!("no kernel runs {}", ops.names()))))
}

/// The push constants, grid and bindings of `kernel` (the plan's choice) running `ops` on `ins`
/// (in `dispatcher::Group::inputs` order) into `out`; an error when the kernel does not take them.
pub fn launch(kernel: KernelId, ops: Ops, ins: &[Operand], out: &Operand, dynamic: Option<Dyn>) -> Result<Launch> {
    let arg = |i: usize| ins.get(i).ok_or_else(|| VkError::Invalid(format!("{} needs input {i}", kernel.name())));
    let launch = match (kernel, ops.node, ops.folded, ops.fused) {
        (KernelId::MatMul(kind, ..), Op::MatMul, folded, fused) => {
            // w, x (or the folded producer's first input), the fused ADD's residual, the folded
            // producer's second input: bindings 1, 2, 3, 4.
            let residual = match fused {
                None => None,
                Some(Op::Add) => Some(arg(2)?),
                Some(other) => return Err(VkError::Invalid(format!("a product does not fuse {}", other.name()))),
            };
            let second = if residual.is_some() { 3 } else { 2 };
            let prologue = match folded {
                None => None,
                Some(Op::RmsNorm { eps }) => Some(Prologue::RmsNorm { weight: *arg(second)?, eps: *eps }),
                Some(Op::SwiGlu) => Some(Prologue::SwiGlu { up: *arg(second)? }),
                Some(other) => return Err(VkError::Invalid(format!("a product does not fold {}", other.name()))),
            };
            let mut l = matmul::launch(kind, arg(0)?, arg(1)?, out, residual, prologue, dynamic)?;
            if prologue.is_some() && residual.is_none() {
                l.slots = vec![1, 2, 4];
            }
            l
        }
        (KernelId::RmsNormRope, rope, Some(norm), fused) => launch_norm_rope(norm, rope, fused, ins, out, dynamic)?,
        (
            KernelId::FlashAttnTiled(..) | KernelId::FlashAttnCm(..) | KernelId::FlashAttnSplit(..),
            Op::Attention { scale, segment },
            None,
            None,
        ) => attn::launch(kernel, ins, (*scale, *segment), out, dynamic)?,
        (_, op, None, None) => op_launch(op, ins, out, dynamic)?,
        _ => return Err(VkError::Invalid(format!("{} does not run {}", kernel.name(), ops.names()))),
    };
    if launch.kernel != kernel {
        return Err(VkError::Invalid(format!(
            "the plan names {}, the node needs {}",
            kernel.name(),
            launch.kernel.name()
        )));
    }
    Ok(launch)
}

/// The one kernel of a compute op other than a matrix product, with its push constants.
fn op_launch(op: &Op, ins: &[Operand], out: &Operand, dynamic: Option<Dyn>) -> Result<Launch> {
    let arg = |i: usize| ins.get(i).ok_or_else(|| VkError::Invalid(format!("{} needs input {i}", op.name())));
    match op {
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
        Op::Attention { scale, segment } => {
            let kernel = KernelId::FlashAttn(Values::of(arg(1)?, "k")?);
            attn::launch(kernel, ins, (*scale, *segment), out, dynamic)
        }
        Op::Argmax => argmax::launch(arg(0)?, out, dynamic),
        other => Err(VkError::Invalid(format!("no Vulkan kernel for {}", other.name()))),
    }
}

/// ROPE (`rope`) of an RMS_NORM (`norm`, folded: computed as the rope loads its rows) as one
/// kernel: `ins` are x and the positions, then, with a fused SET_ROWS (`scatter`), its ids,
/// then the norm weight. With the SET_ROWS, token t's rotated heads (the rope's output,
/// [head_dim, heads, tokens] reshaped to rows of head_dim * heads) go to row ids[t] of `out`,
/// the SET_ROWS's destination (a KV cache), and nothing else is written.
fn launch_norm_rope(
    norm: &Op,
    rope: &Op,
    scatter: Option<&Op>,
    ins: &[Operand],
    out: &Operand,
    dynamic: Option<Dyn>,
) -> Result<Launch> {
    let (Op::RmsNorm { eps }, Op::Rope { kind, theta, n_dims }) = (norm, rope) else {
        return Err(VkError::Invalid(format!("no fused kernel for {} then {}", norm.name(), rope.name())));
    };
    let arg = |i: usize| ins.get(i).ok_or_else(|| VkError::Invalid(format!("rms_norm_rope needs input {i}")));
    let (x, pos) = (arg(0)?, arg(1)?);
    // The rope's output as the kernel writes it, and (ids offset, stride, destination rows).
    let (rotated, ids, weight) = match scatter {
        None => (*out, None, arg(2)?),
        Some(Op::SetRows) => {
            let ids = arg(2)?;
            let width = x.ne[0] * x.ne[1];
            let half = halves(out, "rms_norm_rope's destination")?;
            let size = out.dtype.block_bytes();
            // Halves go out in pairs: whole, aligned pairs of rotated halves, tails and rows.
            let pairs = half == 0 || [x.ne[0], out.offset / size, out.nb[1] / size].iter().all(|v| v.is_multiple_of(2));
            if ids.dtype != DType::I32
                || ids.ne != [x.ne[2], 1, 1, 1]
                || x.ne[3] != 1
                || out.ne[0] != width
                || out.ne[2] != 1
                || out.ne[3] != 1
                || out.nb[0] != size
                || !out.offset.is_multiple_of(size)
                || !out.nb[1].is_multiple_of(size)
                || !pairs
            {
                return Err(VkError::Invalid(format!(
                    "rms_norm_rope: {:?} by ids {:?} into rows {} {:?}",
                    x.ne, ids.ne, out.dtype, out.ne
                )));
            }
            // The kernel counts the destination's offsets and strides in its values: a cache of
            // halves goes through the f32 launches' checks as floats at 4 / 2 times its bytes.
            let (row, offset) = (out.nb[1] / size * 4, out.offset / size * 4);
            let nb = [4, 4 * x.ne[0], row, row * out.ne[1]];
            let rotated = Operand { nb, dynamic: x.dynamic, ..Operand::contiguous(DType::F32, x.ne, offset) };
            let scatter =
                [floats(ids.offset, "ids offset")?, floats(ids.nb[0], "ids stride")?, word(out.ne[1], "rows")?, half];
            (rotated, Some(scatter), arg(3)?)
        }
        Some(other) => return Err(VkError::Invalid(format!("rms_norm_rope does not fuse {}", other.name()))),
    };
    let dynamic = if scatter.is_some() { x.dynamic } else { dynamic };
    // Each half of the fused kernel accepts what its own kernel accepts.
    norm::launch(x, weight, *eps, &rotated, dynamic)?;
    let mut launch = rope::launch(kind, *theta, *n_dims, x, pos, &rotated, dynamic)?;
    launch.push.push(floats(weight.offset, "weight offset")?);
    launch.push.push(eps.to_bits());
    // Rows 0: no scatter (and f32 values).
    launch.push.extend(ids.unwrap_or([0; 4]));
    launch.kernel = KernelId::RmsNormRope;
    launch.grid = Grid::Rows;
    // The grid follows the rope's rows (the folded norm's value), not the destination's.
    launch.grid_input = Some(0);
    launch.slots = if ids.is_some() { vec![1, 3, 4, 2] } else { vec![1, 3, 2] };
    Ok(launch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::vulkan::CoopShape;
    use crate::dispatcher::Kernel;

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
