//! d = w^T x (ggml's mul_mat) with quantized or float weights and f32 activations:
//! `mul_mat_vec.comp` for a few columns, `mul_mat.comp` (64 x 64 tiles, f32) for many, and
//! `mul_mat_rows.comp` (a thread per output value) for a few columns of short rows. Devices
//! with subgroup arithmetic in compute shaders take `mul_mat_vec_sg.comp` (a subgroup per
//! output row, reduced by subgroupAdd) instead of `mul_mat_vec.comp`. Devices with f16
//! cooperative matrices take `mul_mat_cm.comp` (f16 operands on the matrix units, f32 sums)
//! instead of `mul_mat.comp` (HRX_VK_NO_COOPMAT=1 keeps it), or with HRX_VK_EXACT=1
//! `mul_mat_cm_exact.comp` (f32-accurate), and for a few columns (batched decode) its narrow
//! build, `mul_mat_cm_narrow` ([`Variants`]).

use super::coop::{CoopMat, Tiles};
use super::push::{push_block, PushWords, Shape};
use super::{expect_f32, floats, values, word, Dyn, Grid, KernelId, Launch, Operand, Scratch, Values, WType};
use crate::backend::vulkan::error::{Result, VkError};
use crate::backend::vulkan::info::CoopShape;
use crate::backend::vulkan::info::DeviceInfo;
use crate::settings::{self, settings};

push_block! {
    /// `mul_mat_params.glsl`: every matrix kernel's.
    pub struct MatMulPush {
        shape: Shape,
        /// A column of x: offset, then strides along ne1..ne3 (its values); unit stride along K.
        x_nb: [u32; 4],
        /// A column of the output likewise (floats).
        d_nb: [u32; 4],
        k: u32,
        /// w: the byte offset of its first row, bytes per row.
        w_off: u32,
        w_nb1: u32,
        /// The fused residual's float offset; `NO_RESIDUAL`: none.
        r_off: u32,
        /// `mul_mat_vec_wide`: threads per row.
        tpr: u32,
        /// The folded producer (`Prologue`): 0 none, 1 RMS norm, 2 SwiGLU; its second input's
        /// float offset; the norm's epsilon.
        pro_mode: u32,
        pro_off: u32,
        pro_eps: f32,
        /// 1: the residual is one row, added to every column (a bias).
        r_row: u32,
    }
}

/// `MatMulPush::r_off` of a product with no residual.
const NO_RESIDUAL: u32 = u32::MAX;

/// A producer folded into a product: its input x is computed as the product loads it (only
/// `mul_mat_vec_wide` does this: decode, where the producer would be a dispatch of its own).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Prologue {
    /// x = rms_norm(x') * weight, x' the norm's input (bound as x), `weight` its f32 weight.
    RmsNorm { weight: Operand, eps: f32 },
    /// x = silu(gate) * up, the gate bound as x, `up` laid out as the gate.
    SwiGlu { up: Operand },
}

/// Which matrix kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatKind {
    /// One workgroup per 4 rows and column: weights read once per column.
    Vec,
    /// As `Vec`, but one subgroup (of this many lanes) per row and column, reduced with
    /// subgroupAdd: 128 / subgroup rows per workgroup.
    VecSg { subgroup: u32 },
    /// As `Vec` for decode on wide GPUs: a row split over 64 or 128 threads (several
    /// subgroups of at most 64 lanes) taking 32 values each, `rows` (2, 4 or 8) rows per
    /// thread (`mul_mat_vec_wide.comp`), so that the whole matrix is in flight at once; each
    /// unit of weights loaded once for `cols` (1, 2, 4 or 8) columns (sequences decoded
    /// together).
    VecWide { subgroup: u32, rows: u32, cols: u32 },
    /// 64 x 64 output tiles through shared memory, f32 throughout.
    Tiled,
    /// Tiles on cooperative matrices of the variant's shape: f16 operands (weights dequantized
    /// and activations converted while staged), f32 accumulators, one product per block
    /// (`Tiles::fast`: 64 x 64 per workgroup at 16 x 16 x 16). Rows of whole slices (64
    /// values), aligned as `chunk_alignment` says.
    Coop(CoopMat),
    /// As `Coop` on tiles twice as large each way (`Tiles::large`: 128 x 128 per workgroup at
    /// 16 x 16 x 16): each staged slice of w serves twice the columns, for products of many
    /// rows and columns, where the large tiles still give `LARGE_MIN_GROUPS` workgroups.
    CoopLarge(CoopMat),
    /// As `Coop`, on tiles of `blocks` (1 or 2) matrix-unit blocks each way (`Tiles::narrow`:
    /// 16 x 16 or 32 x 32 at 16 x 16 x 16), the four subgroups of a workgroup each over a
    /// quarter of k: for a few columns (sequences decoded together), where 64 x 64 tiles leave
    /// most of a large GPU idle.
    CoopNarrow { cm: CoopMat, blocks: u32 },
    /// As `Coop`, but each operand split into two f16 halves and three products per block, so
    /// the result keeps f32 accuracy (`Tiles::exact`: 64 x 64 per workgroup).
    CoopExact(CoopMat),
    /// One thread per output value, no shared memory: for short rows, where splitting K
    /// across a workgroup leaves most threads idle (and CPU drivers pay for every barrier).
    Rows,
}

impl MatKind {
    /// Every kind, its variant unset (`KernelId::all` lists kernels from it).
    pub fn all() -> Vec<MatKind> {
        let wide =
            WIDE_ROWS.into_iter().flat_map(|rows| WIDE_COLS.map(|cols| MatKind::VecWide { subgroup: 0, rows, cols }));
        [MatKind::Vec, MatKind::VecSg { subgroup: 0 }]
            .into_iter()
            .chain(wide)
            .chain([
                MatKind::Tiled,
                MatKind::Coop(CoopMat::UNSET),
                MatKind::CoopLarge(CoopMat::UNSET),
                MatKind::CoopNarrow { cm: CoopMat::UNSET, blocks: 1 },
                MatKind::CoopNarrow { cm: CoopMat::UNSET, blocks: 2 },
                MatKind::CoopExact(CoopMat::UNSET),
                MatKind::Rows,
            ])
            .collect()
    }

    /// Up to this many output columns the vector (or rows) kernel is used.
    pub const VEC_MAX_COLS: usize = 8;
    /// Rows up to this long take the rows kernel when the vector kernel would be used.
    pub const ROWS_MAX_K: usize = 256;

    /// The cooperative-matrix variant a kind runs on, where it is one.
    pub fn coop(self) -> Option<CoopMat> {
        match self {
            MatKind::Coop(cm) | MatKind::CoopLarge(cm) | MatKind::CoopNarrow { cm, .. } | MatKind::CoopExact(cm) => {
                Some(cm)
            }
            _ => None,
        }
    }

    /// Whether it reads x in f16 values too (activations kept in halves): the matrix-unit
    /// kinds that stage x as f16 anyway (mul_mat_cm.comp's X_F16), so that halves lose nothing.
    pub fn takes_halves(self) -> bool {
        matches!(self, MatKind::Coop(_) | MatKind::CoopLarge(_) | MatKind::CoopNarrow { .. })
    }

    /// The subgroup size a variant is built around, where it is one.
    pub fn subgroup(self) -> Option<u32> {
        match self {
            MatKind::VecSg { subgroup } | MatKind::VecWide { subgroup, .. } => Some(subgroup),
            _ => self.coop().map(|cm| cm.subgroup),
        }
    }

    /// The matrix-unit shape (M, N, K) a variant is built around, where it is one.
    pub fn shape(self) -> Option<[u32; 3]> {
        self.coop().map(|cm| [cm.shape.m, cm.shape.n, cm.shape.k])
    }

    /// This kind built around `subgroup` and `shape` as a plan records them (`subgroup`,
    /// `shape`); None when they do not make a variant of it.
    pub fn with_variant(self, subgroup: Option<u32>, shape: Option<[u32; 3]>) -> Option<MatKind> {
        let coop = |subgroup, [m, n, k]: [u32; 3]| CoopMat { subgroup, shape: CoopShape { m, n, k } };
        Some(match (self, subgroup, shape) {
            (MatKind::VecSg { .. }, Some(subgroup), None) => MatKind::VecSg { subgroup },
            (MatKind::VecWide { rows, cols, .. }, Some(subgroup), None) => MatKind::VecWide { subgroup, rows, cols },
            (MatKind::Coop(_), Some(s), Some(shape)) => MatKind::Coop(coop(s, shape)),
            (MatKind::CoopLarge(_), Some(s), Some(shape)) => MatKind::CoopLarge(coop(s, shape)),
            (MatKind::CoopNarrow { blocks, .. }, Some(s), Some(shape)) => {
                MatKind::CoopNarrow { cm: coop(s, shape), blocks }
            }
            (MatKind::CoopExact(_), Some(s), Some(shape)) => MatKind::CoopExact(coop(s, shape)),
            (MatKind::Vec | MatKind::Tiled | MatKind::Rows, None, None) => self,
            _ => return None,
        })
    }

    pub fn choose(k: usize, cols: usize) -> MatKind {
        if cols > Self::VEC_MAX_COLS {
            MatKind::Tiled
        } else if k <= Self::ROWS_MAX_K {
            MatKind::Rows
        } else {
            MatKind::Vec
        }
    }

    /// The tiles of a cooperative-matrix kind.
    pub fn coop_tiles(self) -> Option<(CoopMat, Tiles)> {
        match self {
            MatKind::Coop(cm) => Some((cm, Tiles::fast(cm))),
            MatKind::CoopLarge(cm) => Some((cm, Tiles::large(cm))),
            MatKind::CoopNarrow { cm, blocks } => Some((cm, Tiles::narrow(cm, blocks))),
            MatKind::CoopExact(cm) => Some((cm, Tiles::exact())),
            _ => None,
        }
    }
}

/// The kernel variants a device runs, decided once from what it reports and the switches in
/// the environment: `Variants::for_device` is the registry's policy, so plans, `hrx plan` and
/// `hrx doctor` agree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Variants {
    /// The subgroup size of the subgroup kernels (`DeviceInfo::subgroup_kernels`), where they
    /// run: `mul_mat_vec_sg` and `mul_mat_vec_wide` in place of `mul_mat_vec`, `flash_attn_split`
    /// for decode attention (HRX_VK_NO_SUBGROUP=1 keeps the portable ones).
    pub subgroup: Option<u32>,
    /// The cooperative-matrix variant (subgroup size, matrix-unit shape) the many-column
    /// products run on in place of the tiled f32 kernel where the device has one (unless
    /// HRX_VK_NO_COOPMAT=1): `mul_mat_cm` (f16 operands, f32 sums: a normalized error of about
    /// 1e-7 against f32, logits within about 1e-2) unless `exact`. On the H200 it prefills the
    /// 2B model twice as fast as the tiled f32 kernel.
    pub coopmat: Option<CoopMat>,
    /// HRX_VK_EXACT=1: cooperative-matrix products keep f32 accuracy: `mul_mat_cm_exact`
    /// (operands split into f16 halves, three products per block) and attention runs in f32
    /// tiles. For checking the fast defaults against, on the same device.
    pub exact: bool,
    /// The KV cache keeps f16 values (`VulkanRegistry::cache_dtype`), half the bytes and memory
    /// of f32, unless `exact` or HRX_VK_KV_F32=1. On the H100 (2B shape, one call each) decode
    /// after 4,096 tokens 295.2 against 289.6 tok/s, pp512 26,057 against 25,136, pp2048 24,024
    /// against 22,863 (attention reads half the bytes).
    pub kv_f16: bool,
    /// Whether activations that only matrix-unit products read are kept in halves
    /// (`VulkanRegistry::keeps_halves`): where products are f16 (`coopmat`, not `exact`), unless
    /// HRX_VK_F32_ACTIVATIONS=1. The products round x to f16 as they stage it anyway, so the
    /// results are the same; x's loads halve (H100, 2B shapes at 512 columns: 2048 -> 6144 in
    /// 102 us against 158).
    pub half_activations: bool,
    /// Whether decode products take `mul_mat_vec_wide` (where the subgroup kernel runs, with
    /// subgroups of at most 64 lanes) rather than `mul_mat_vec_sg` (HRX_VK_MATVEC=sg).
    pub wide_matvec: bool,
    /// Whether products of a few columns may take `mul_mat_cm_narrow` (HRX_VK_NO_NARROW=1:
    /// `mul_mat_cm` for all).
    pub narrow: bool,
    /// Whether pairs of nodes may run as one dispatch (HRX_VK_NO_FUSE=1: every node alone).
    pub fuse: bool,
    /// Whether attention over many queries may run tiled (`flash_attn_tiled`) where a tile
    /// fits `shared_memory` (HRX_VK_NO_TILED_ATTN=1: the one-query kernel everywhere).
    pub tiled_attention: bool,
    /// The cooperative-matrix variant tiled attention runs on (`flash_attn_cm`): `coopmat`'s,
    /// where products are f16 (not `exact`) and the device has subgroup shuffles.
    pub coop_attention: Option<CoopMat>,
    /// Bytes of shared memory a workgroup may use: kernels with a choice of tiles take one that
    /// fits, or a kernel without.
    pub shared_memory: u32,
    /// Kernels hrx's self-check found giving wrong results here (or none), and why: never
    /// chosen, the next kernel of their op is (`selfcheck`; empty until a check ran).
    pub refused: Vec<(KernelId, String)>,
}

impl Variants {
    /// The kernels any Vulkan device runs: 16 KiB of shared memory is all Vulkan guarantees.
    pub const PORTABLE: Variants = Variants {
        subgroup: None,
        coopmat: None,
        exact: false,
        kv_f16: false,
        half_activations: false,
        narrow: true,
        wide_matvec: false,
        fuse: true,
        tiled_attention: true,
        coop_attention: None,
        shared_memory: 16384,
        refused: Vec::new(),
    };

    /// What the device of `info` runs best, as the HRX_VK_* switches allow.
    pub fn for_device(info: &DeviceInfo) -> Variants {
        let set = settings();
        let subgroup = info.subgroup_kernels().filter(|_| !set.switch(&settings::VK_NO_SUBGROUP));
        let wide = set.choice(&settings::VK_MATVEC) != Some("sg");
        let coopmat = info.coopmat_matmul().filter(|_| !set.switch(&settings::VK_NO_COOPMAT));
        let exact = set.switch(&settings::VK_EXACT);
        let shuffle = info.subgroup_in_compute && info.subgroup_ops.contains(&"shuffle");
        Variants {
            subgroup,
            coopmat,
            exact,
            kv_f16: !set.switch(&settings::VK_KV_F32) && !exact,
            half_activations: coopmat.is_some() && !exact && !set.switch(&settings::VK_F32_ACTIVATIONS),
            narrow: !set.switch(&settings::VK_NO_NARROW),
            coop_attention: coopmat.filter(|_| !exact && shuffle),
            wide_matvec: wide && subgroup.is_some_and(|s| s <= WIDE_MAX_SUBGROUP),
            fuse: !set.switch(&settings::VK_NO_FUSE),
            tiled_attention: !set.switch(&settings::VK_NO_TILED_ATTN),
            shared_memory: info.max_shared_memory,
            refused: Vec::new(),
        }
    }

    /// These variants without any kernel built around a subgroup size: the portable kernels,
    /// for a device whose subgroups are not what it reports (`selfcheck::probe`).
    pub fn without_subgroups(self) -> Variants {
        Variants {
            subgroup: None,
            wide_matvec: false,
            coopmat: None,
            coop_attention: None,
            half_activations: false,
            ..self
        }
    }

    /// Why `kernel` is never chosen here, if it is not (it failed the self-check).
    pub fn refusal(&self, kernel: KernelId) -> Option<&str> {
        self.refused.iter().find(|(k, _)| *k == kernel).map(|(_, why)| why.as_str())
    }

    /// The matrix kernels for `n` rows of `k` values of type `wt` and `cols` output columns,
    /// the device's best first: the registry takes the first that accepts the operands (the
    /// wide mat-vec kernel reads Q4_K blocks as 16-byte vectors, so it needs 16-byte aligned
    /// rows).
    pub fn mat_kinds(&self, k: usize, n: usize, cols: usize) -> Vec<MatKind> {
        let narrow = self.narrow_kind(n, cols);
        let units = if cols >= NARROW_MIN_COLS { self.units_take(k, n, cols) } else { None };
        match MatKind::choose(k, cols) {
            // From 5 columns the matrix units beat the wide mat-vec kernel, folded producers and
            // all: narrow tiles where they take the rows (2B shape, H200, 8 sequences: a decode
            // step 12.8 ms on the wide kernel's 8 columns, 7.4 ms on narrow tiles of 16), else
            // the fast tiles (the 151,936-row Q6_K head at 8 columns: 536 us against the wide
            // kernel's 669 alone and 1,141 with the final norm folded in). The wide one is left
            // out there: a fold would choose it.
            MatKind::Vec if units.is_some() => {
                let sg = self.subgroup.map(|subgroup| MatKind::VecSg { subgroup });
                units.into_iter().chain(sg).chain([MatKind::Vec]).collect()
            }
            MatKind::Vec => {
                let mut kinds = Vec::new();
                if let Some(subgroup) = self.subgroup {
                    if self.wide_matvec && k.is_multiple_of(32) {
                        let cols = wide_cols(cols);
                        kinds.push(MatKind::VecWide { subgroup, rows: wide_rows(cols), cols });
                    }
                    kinds.push(MatKind::VecSg { subgroup });
                }
                kinds.push(MatKind::Vec);
                kinds
            }
            MatKind::Tiled => {
                let coop = self.coopmat.map(|cm| if self.exact { MatKind::CoopExact(cm) } else { MatKind::Coop(cm) });
                let large = self.large_kind(n, cols);
                narrow.into_iter().chain(large).chain(coop).chain([MatKind::Tiled]).collect()
            }
            kind => vec![kind],
        }
    }

    /// The matrix-unit kind `cols` columns (`NARROW_MIN_COLS` up to the mat-vec kernels'
    /// most) take `n` rows of `k` values with: the narrow tiles where they pay (and run here),
    /// the fast tiles where too many of them would fill the GPU; None in the exact mode (its
    /// three products a block lose to the wide mat-vec kernel at a few columns) or where `k`
    /// is not whole slices of the kind.
    fn units_take(&self, k: usize, n: usize, cols: usize) -> Option<MatKind> {
        let cm = self.coopmat.filter(|_| !self.exact)?;
        let kind = if narrow_pays(cm, n, cols) { self.narrow_kind(n, cols)? } else { MatKind::Coop(cm) };
        whole_slices(kind, k).then_some(kind)
    }

    /// The large tiles, where `n` rows and `cols` columns fill them: rows for 32 of them and
    /// columns for two, and `LARGE_MIN_GROUPS` workgroups; None in the exact mode, or where
    /// they do not stage evenly or fit the shared memory here.
    fn large_kind(&self, n: usize, cols: usize) -> Option<MatKind> {
        let cm = self.coopmat.filter(|_| !self.exact)?;
        let tiles = Tiles::large(cm);
        let (rows, tile_cols) = (tiles.rows() as usize, tiles.cols() as usize);
        let fills =
            n >= 32 * rows && cols >= 2 * tile_cols && n.div_ceil(rows) * cols.div_ceil(tile_cols) >= LARGE_MIN_GROUPS;
        let runs = tiles.stages_evenly(cm) && tiles.shared_bytes(cm.shape) <= self.shared_memory;
        (fills && runs).then_some(MatKind::CoopLarge(cm))
    }

    /// The narrow tiles `cols` columns of `n` rows take where they pay and run here: two
    /// blocks a side where the columns fill them and they leave `NARROW_WIDE_MIN_GROUPS`
    /// workgroups, else one.
    fn narrow_kind(&self, n: usize, cols: usize) -> Option<MatKind> {
        let cm = self.coopmat.filter(|&cm| !self.exact && narrow_pays(cm, n, cols))?;
        let wide = Tiles::narrow(cm, 2);
        let (rows, wide_cols) = (wide.rows() as usize, wide.cols() as usize);
        let fills = cols >= wide_cols && n.div_ceil(rows) * cols.div_ceil(wide_cols) >= NARROW_WIDE_MIN_GROUPS;
        let blocks = [2, 1].into_iter().filter(|&b| b == 1 || fills).find(|&b| self.narrow_fits(cm, b))?;
        Some(MatKind::CoopNarrow { cm, blocks })
    }

    /// Whether `mul_mat_cm_narrow` runs variant `cm` with tiles of `blocks` here: its tiles
    /// stage evenly and fit the shared memory (HRX_VK_NO_NARROW=1: never).
    fn narrow_fits(&self, cm: CoopMat, blocks: u32) -> bool {
        let tiles = Tiles::narrow(cm, blocks);
        self.narrow && tiles.stages_evenly(cm) && tiles.shared_bytes(cm.shape) <= self.shared_memory
    }

    /// Whether many-column products run with f16 operands (`mul_mat_cm`): results then differ
    /// from the f32 kernels' by f16 rounding, not f32's.
    pub fn f16_products(&self) -> bool {
        self.coopmat.is_some() && !self.exact
    }

    /// The variant tiled attention runs on the matrix units with, where it does.
    pub fn coop_attention(&self) -> Option<CoopMat> {
        self.coop_attention.filter(|_| self.tiled_attention)
    }
}

/// Columns up to which a product may take `mul_mat_cm_narrow`: past them `mul_mat_cm`'s 64 x 64
/// tiles have enough workgroups, and share each weight load among more columns.
pub const NARROW_MAX_COLS: usize = 32;
/// Rows up to which `mul_mat_vec_wide` folds a producer in for two or more columns: each of
/// many workgroups loading the norm weight again beside the columns of x costs more than the
/// norm's own dispatch (H200, the 2B shape's 151,936-row Q6_K head, folded against not:
/// 1,141 against 669 us at eight columns; batched decode S_TG 567 -> 603 tok/s at 2, 805 ->
/// 844 at 4). One column keeps the fold: tg128 391.6 +- 2.5 folded, 387.0 +- 6.9 not.
pub const FOLD_MAX_ROWS: usize = 65_536;
/// Workgroups from which `mul_mat_cm_narrow` takes tiles of two blocks a side (where the
/// columns fill them): about one per multiprocessor of a large GPU (the H200's 132). Each
/// column of x staged then serves twice the rows (H200, 32 columns: 2048 -> 6144 in 192
/// workgroups 28 us against 39 on one block; 2048 rows, 64 workgroups, lost).
const NARROW_WIDE_MIN_GROUPS: usize = 128;
/// Fewest workgroups of `mul_mat_cm`'s large tiles for a product to take them: the 2B shape's
/// 2048 -> 6144 products at 512 tokens make 192 (on the H200 pp512 20,163 against 18,826 tok/s
/// with them on the large tiles); its 2048-row ones, 64, ran slower on them in a tile sweep.
const LARGE_MIN_GROUPS: usize = 192;
/// Columns from which a product takes `mul_mat_cm_narrow` rather than the wide mat-vec kernel.
pub const NARROW_MIN_COLS: usize = 5;
/// `mul_mat_cm`'s workgroups from which a product keeps it whatever its columns: the vocabulary
/// head (151,936 rows, 2,374 workgroups) filled the H200 and ran 578 us at 32 columns against
/// the narrow tiles' 1,006 (whose more workgroups bought nothing, and each weight was loaded
/// once per 16 columns).
const NARROW_MAX_FAST_GROUPS: usize = 1024;

/// Whether `mul_mat_cm_narrow` beats `mul_mat_cm` for `n` rows and `cols` columns: few columns,
/// and too few 64 x 64 tiles to fill a large GPU (H200, 2B shapes at 32 columns: 2048 x 2048
/// Q4_K 43 -> 16 us, 6144 -> 2048 115 -> 41 us).
fn narrow_pays(cm: CoopMat, n: usize, cols: usize) -> bool {
    let fast = Tiles::fast(cm);
    let groups = n.div_ceil(fast.rows() as usize) * cols.div_ceil(fast.cols() as usize);
    cols <= NARROW_MAX_COLS && groups < NARROW_MAX_FAST_GROUPS
}

/// Whether rows of `k` values are whole slices of the cooperative-matrix kind `kind`.
fn whole_slices(kind: MatKind, k: usize) -> bool {
    kind.coop_tiles().is_some_and(|(_, tiles)| k.is_multiple_of(tiles.bk as usize))
}

/// Rows per thread of `mul_mat_vec_wide` (the families of shaders/modules.txt).
pub const WIDE_ROWS: [u32; 3] = [2, 4, 8];
/// Columns per workgroup of `mul_mat_vec_wide` (its specialization constant 0).
pub const WIDE_COLS: [u32; 4] = [1, 2, 4, 8];
/// Sums a thread of `mul_mat_vec_wide` keeps at most (rows x columns): more rows per thread
/// for more columns would spill registers.
const WIDE_MAX_SUMS: u32 = 16;

/// Columns per workgroup of `mul_mat_vec_wide` for a product planned for `cols` columns: all of
/// them where a variant holds them (the fewest that do), so each weight is read once.
pub fn wide_cols(cols: usize) -> u32 {
    WIDE_COLS.into_iter().find(|&c| c as usize >= cols).unwrap_or(WIDE_COLS[WIDE_COLS.len() - 1])
}

/// Rows per thread of `mul_mat_vec_wide` at `cols` columns per workgroup: 4, or fewer where that
/// would keep more than `WIDE_MAX_SUMS` sums a thread; HRX_VK_WIDE_ROWS=2|4|8 asks for another (a
/// tuning probe, as HRX_VK_WIDE_TPR). Four rows measured faster on the H100 (2B shape,
/// alternating in one call) than the earlier choice (8 for the 6,144-row gate and up, 2 for the
/// 1,024-row k and v and for Q6_K, so as to leave 256 workgroups): tg128 431-440 against 373-379
/// tok/s, tg64 after 4,096 tokens 346-354 against 290-297; two rows for all 419, eight 392
/// (another call: 443.5 at four). Timed alone (`hrx bench --kernels`, a barrier after each) two
/// rows look faster on most shapes; in a decode step the products of a stage (q, k, v; gate,
/// up) share the GPU. The 151,936-row head took 2 rows until Q6_K was stored by quads; since,
/// 4 are faster there too (H100, one call: 121.1 us against 125.9 in `--kernels`, the decode
/// step's GPU time 2.032-2.036 ms against 2.050-2.055).
pub fn wide_rows(cols: u32) -> u32 {
    let rows = settings().whole(&settings::VK_WIDE_ROWS).map_or(4, |n| n as u32);
    rows.min((WIDE_MAX_SUMS / cols).max(2))
}

/// Rows from which `mul_mat_vec_wide` gives a row 32 threads (where subgroups divide 32): the
/// grid is then many times what a GPU runs at once, so fewer threads a row cost no
/// parallelism, and each thread's loads of x and its reduction serve more weights. On the H200
/// (`hrx bench --kernels`, one call) the 151,936-row Q6_K head took 176 us at 64 threads and 4
/// rows, 158 at 32 and 4, 151 at 32 and 2 (Q6_K in the file's layout); at 2,048 rows 32 threads
/// lost (Q6_K 6144 -> 2048: 19.4 us against 12.9).
const WIDE_LONG_ROWS: usize = 65_536;

/// Threads per row of `mul_mat_vec_wide` for `n` rows of `k` values on subgroups of `subgroup`
/// lanes: 32 for `WIDE_LONG_ROWS` rows and more where subgroups divide 32; else 128 where rows
/// are whole multiples of 128 units of 32 values, else 64 (every thread then takes the same
/// number of units); or what HRX_VK_WIDE_TPR asks (a tuning probe, as HRX_VK_ATTN_SPLITS: 128,
/// 64, or the subgroup's size, one subgroup a row without shared memory or barriers) where the
/// device's subgroups divide it.
fn wide_threads_per_row(k: usize, n: usize, subgroup: u32) -> usize {
    let asked = settings().whole(&settings::VK_WIDE_TPR).unwrap_or(0) as usize;
    let fits = asked >= subgroup as usize && asked.is_multiple_of(subgroup as usize);
    if asked != 0 && !fits {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            log::warn!("HRX_VK_WIDE_TPR={asked}: not whole subgroups of this device's {subgroup} lanes; unset")
        });
    }
    if fits {
        asked
    } else if n >= WIDE_LONG_ROWS && 32usize.is_multiple_of(subgroup as usize) {
        32
    } else if (k / 32).is_multiple_of(128) {
        128
    } else {
        64
    }
}

/// Rows of weights the self-check gives a product of `n` rows on kernel `kind`: enough for a
/// whole tile or row group and part of the next (192: one and a half of the large tiles' 128),
/// and for the wide mat-vec kernel on long products as many as keep its launch's choices
/// (`WIDE_LONG_ROWS`: 32 threads a row, and a folded producer only at one column).
pub fn check_rows(kind: MatKind, n: usize) -> usize {
    let rows = match kind {
        MatKind::VecWide { .. } if n >= WIDE_LONG_ROWS => WIDE_LONG_ROWS,
        _ => 192,
    };
    n.min(rows)
}

/// Largest subgroup `mul_mat_vec_wide` runs with: its row groups are 64 or 128 threads, whole
/// subgroups each.
pub const WIDE_MAX_SUBGROUP: u32 = 64;

/// `residual`: an f32 value added to the product (bound as input 3), laid out as `out` (same
/// sizes and strides) or one row of `out`'s N added to every column (a bias: `[N, 1, 1, 1]`,
/// contiguous).
pub fn launch(
    kind: MatKind,
    w: &Operand,
    x: &Operand,
    out: &Operand,
    residual: Option<&Operand>,
    prologue: Option<Prologue>,
    dynamic: Option<Dyn>,
) -> Result<Launch> {
    let wt = WType::from_dtype(w.dtype)
        .ok_or_else(|| VkError::Operands(format!("no matrix kernel for {} weights", w.dtype)))?;
    let xv = Values::of(x, "x")?;
    let kernel = KernelId::MatMul(kind, wt, xv);
    // Halves as whole 16-byte words of a column (two loads of a 16-value chunk).
    let words = |b: usize| b.is_multiple_of(16);
    if xv == Values::F16
        && !(kind.takes_halves() && prologue.is_none() && words(x.offset) && x.nb[1..].iter().all(|&b| words(b)))
    {
        return Err(VkError::Operands(format!(
            "{} reads no f16 x {:?}/{:?} at {}",
            kernel.name(),
            x.ne,
            x.nb,
            x.offset
        )));
    }
    expect_f32(out, "the output")?;
    let (k, n) = (w.ne[0], w.ne[1]);
    let shape_ok = x.ne[0] == k && w.ne[2] == 1 && w.ne[3] == 1 && out.ne == [n, x.ne[1], x.ne[2], x.ne[3]];
    if !shape_ok || k % w.dtype.block_len() != 0 {
        return Err(VkError::Operands(format!("mul_mat: w {:?} x {:?} -> {:?}", w.ne, x.ne, out.ne)));
    }
    if w.nb[0] != w.dtype.block_bytes() || x.nb[0] != x.dtype.block_bytes() || out.nb[0] != 4 {
        return Err(VkError::Operands("mul_mat: rows of w, x and the output must be contiguous".into()));
    }
    if wt == WType::F32 && (!w.offset.is_multiple_of(4) || !w.nb[1].is_multiple_of(4)) {
        return Err(VkError::Operands("mul_mat: f32 weights must be 4-byte aligned".into()));
    }
    // The last byte of w must be addressable by 32-bit byte offsets.
    word(w.offset + w.nb[1] * n, "w extent")?;
    let (r_off, r_row) = match residual {
        None => (NO_RESIDUAL, false),
        Some(r) => {
            expect_f32(r, "the residual")?;
            let as_out = r.ne == out.ne && r.nb == out.nb;
            let row = !as_out && r.ne == [n, 1, 1, 1] && r.nb[0] == 4;
            if !as_out && !row {
                return Err(VkError::Operands(format!(
                    "mul_mat: residual {:?}/{:?} is neither laid out as the output {:?}/{:?} nor one row of it",
                    r.ne, r.nb, out.ne, out.nb
                )));
            }
            let at = floats(r.offset, "residual offset")?;
            if at == NO_RESIDUAL {
                return Err(VkError::Operands("mul_mat: residual offset out of range".into()));
            }
            (at, row)
        }
    };
    let tpr = match kind {
        MatKind::VecWide { subgroup, .. } => wide_threads_per_row(k, n, subgroup),
        _ => 0,
    };
    // The prologue: mode (0 none, 1 RMS norm, 2 SwiGLU), the float offset of its second input
    // (binding 4), the norm's epsilon.
    let (pro_mode, pro_off, pro_eps) = match prologue {
        None => (0, 0, 0.0),
        Some(_) if !matches!(kind, MatKind::VecWide { cols, .. } if cols == 1 || n <= FOLD_MAX_ROWS) => {
            return Err(VkError::Operands(format!("{} folds no producer into {n} rows", kernel.name())));
        }
        Some(Prologue::RmsNorm { weight, eps }) => {
            expect_f32(&weight, "the norm weight")?;
            if weight.ne[0] != k || weight.nb[0] != 4 || eps.is_nan() || eps <= 0.0 {
                return Err(VkError::Operands(format!("mul_mat: a norm weight {:?} for rows of {k}", weight.ne)));
            }
            (1, floats(weight.offset, "norm weight offset")?, eps)
        }
        Some(Prologue::SwiGlu { up }) => {
            expect_f32(&up, "up")?;
            if up.ne != x.ne || up.nb != x.nb {
                return Err(VkError::Operands(format!(
                    "mul_mat: up {:?}/{:?} is not laid out as the gate {:?}/{:?}",
                    up.ne, up.nb, x.ne, x.nb
                )));
            }
            (2, floats(up.offset, "up offset")?, 0.0)
        }
    };
    // A column's offset and strides: x's in its values, the output's in floats.
    let [x_off, x_nb1, x_nb2, x_nb3] =
        [x.offset, x.nb[1], x.nb[2], x.nb[3]].map(|b| values(x, b, "x offset or stride"));
    let [d_off, d_nb1, d_nb2, d_nb3] =
        [out.offset, out.nb[1], out.nb[2], out.nb[3]].map(|b| floats(b, "output offset or stride"));
    let block = MatMulPush {
        shape: Shape::of(out, dynamic)?,
        x_nb: [x_off?, x_nb1?, x_nb2?, x_nb3?],
        d_nb: [d_off?, d_nb1?, d_nb2?, d_nb3?],
        k: word(k, "K")?,
        w_off: word(w.offset, "w offset")?,
        w_nb1: word(w.nb[1], "w row bytes")?,
        r_off,
        tpr: tpr as u32,
        pro_mode,
        pro_off,
        pro_eps,
        r_row: u32::from(r_row),
    };
    let grid = match kind {
        MatKind::Vec => Grid::Mat { rows: 4, cols: 1 },
        MatKind::VecWide { subgroup, rows, cols } => {
            if !subgroup.is_power_of_two()
                || !(4..=WIDE_MAX_SUBGROUP).contains(&subgroup)
                || !k.is_multiple_of(32)
                || !WIDE_ROWS.contains(&rows)
                || !WIDE_COLS.contains(&cols)
            {
                return Err(VkError::Operands(format!(
                    "mul_mat_vec_wide: subgroup size {subgroup}, K {k}, {rows} rows per thread, {cols} columns"
                )));
            }
            if wt == WType::Q4K && (!w.offset.is_multiple_of(16) || !w.nb[1].is_multiple_of(16)) {
                return Err(VkError::Operands("mul_mat_vec_wide: Q4_K rows must be 16-byte aligned".into()));
            }
            // x and the producer's second input are read as vec4s.
            let second = match prologue {
                Some(Prologue::RmsNorm { weight, .. }) => Some(weight),
                Some(Prologue::SwiGlu { up }) => Some(up),
                None => None,
            };
            let vec4_columns =
                |o: &Operand| o.offset.is_multiple_of(16) && o.nb[1..].iter().all(|b| b.is_multiple_of(16));
            if !vec4_columns(x) || second.is_some_and(|o| !vec4_columns(&o)) {
                return Err(VkError::Operands("mul_mat_vec_wide: x must be in 16-byte aligned columns".into()));
            }
            Grid::Mat { rows: 128 / tpr * rows as usize, cols: cols as usize }
        }
        MatKind::VecSg { subgroup } => {
            if !subgroup.is_power_of_two() || !(4..=128).contains(&subgroup) {
                return Err(VkError::Operands(format!("mul_mat_vec_sg: subgroup size {subgroup}")));
            }
            Grid::Mat { rows: 128 / subgroup as usize, cols: 1 }
        }
        MatKind::Tiled => Grid::Mat { rows: 64, cols: 64 },
        MatKind::Coop(cm) | MatKind::CoopLarge(cm) | MatKind::CoopNarrow { cm, .. } => {
            let name = kernel.name();
            let tiles = kind.coop_tiles().map_or_else(|| Tiles::fast(cm), |(_, tiles)| tiles);
            if !k.is_multiple_of(tiles.bk as usize) {
                return Err(VkError::Operands(format!("{name}: K {k} is not whole slices of {}", tiles.bk)));
            }
            let align = chunk_alignment(wt);
            if !w.offset.is_multiple_of(align) || !w.nb[1].is_multiple_of(align) {
                return Err(VkError::Operands(format!("{name}: {} rows must be {align}-byte aligned", w.dtype)));
            }
            if !tiles.stages_evenly(cm) {
                return Err(VkError::Operands(format!(
                    "{name}: no tiles for subgroups of {} and {} matrices",
                    cm.subgroup, cm.shape
                )));
            }
            coop_grid(cm, tiles)?
        }
        MatKind::CoopExact(cm) => coop_grid(cm, Tiles::exact())?,
        MatKind::Rows => Grid::Mat { rows: 64, cols: 1 },
    };
    Ok(Launch {
        kernel,
        push: PushWords::of(&block),
        grid,
        grid_input: None,
        slots: Vec::new(),
        scratch: Scratch::default(),
    })
}

/// The alignment of rows of w that `mul_mat_cm` reads in 16-value chunks (shaders/wtype.glsl's
/// fetch16): 16-byte loads of rows (and of their 16-byte aligned blocks), or for Q6_K and Q8_0,
/// whose blocks are 2-byte aligned, words around each chunk.
fn chunk_alignment(wt: WType) -> usize {
    match wt {
        WType::Q6K | WType::Q8_0 => 2,
        WType::F32 | WType::F16 | WType::BF16 | WType::Q4K | WType::Q5K => 16,
    }
}

/// The grid of a cooperative-matrix kernel: a workgroup per tile.
fn coop_grid(cm: CoopMat, tiles: Tiles) -> Result<Grid> {
    if !cm.supported() {
        return Err(VkError::Operands(format!(
            "mul_mat_cm: no kernel for subgroups of {} and {} matrices",
            cm.subgroup, cm.shape
        )));
    }
    Ok(Grid::Mat { rows: tiles.rows() as usize, cols: tiles.cols() as usize })
}

#[cfg(test)]
mod tests {
    use super::MatKind;

    /// `all` holds every kind once: a kind added to the enum but not to `all` fails here (the
    /// match is exhaustive, so a new kind must be given a position too).
    #[test]
    fn all_lists_every_kind_once() {
        let wide = |rows: u32, cols: u32| 2 + 4 * (rows.ilog2() as usize - 1) + cols.ilog2() as usize;
        let position = |k: MatKind| match k {
            MatKind::Vec => 0,
            MatKind::VecSg { .. } => 1,
            MatKind::VecWide { rows, cols, .. } => wide(rows, cols),
            MatKind::Tiled => 14,
            MatKind::Coop(_) => 15,
            MatKind::CoopLarge(_) => 16,
            MatKind::CoopNarrow { blocks, .. } => 16 + blocks as usize,
            MatKind::CoopExact(_) => 19,
            MatKind::Rows => 20,
        };
        let positions: Vec<usize> = MatKind::all().iter().map(|&k| position(k)).collect();
        assert_eq!(positions, (0..MatKind::all().len()).collect::<Vec<_>>());
    }
}
