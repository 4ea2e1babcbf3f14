//! d = w^T x (ggml's mul_mat) with quantized or float weights and f32 activations:
//! `mul_mat_vec.comp` for a few columns, `mul_mat.comp` (64 x 64 tiles, f32) for many, and
//! `mul_mat_rows.comp` (a thread per output value) for a few columns of short rows. Devices
//! with subgroup arithmetic in compute shaders take `mul_mat_vec_sg.comp` (a subgroup per
//! output row, reduced by subgroupAdd) instead of `mul_mat_vec.comp`, and devices with f16
//! cooperative matrices `mul_mat_cm.comp` (f16 operands on the matrix units, f32 sums) instead
//! of `mul_mat.comp`, or with HRX_VK_EXACT=1 `mul_mat_cm_exact.comp` (f32-accurate) ([`Variants`]).

use super::coop::{CoopMat, Tiles};
use super::{dyn_words, expect_f32, floats, word, Dyn, Grid, KernelId, Launch, Operand, WType};
use crate::backend::vulkan::error::{Result, VkError};
use crate::backend::vulkan::info::DeviceInfo;

/// Words of `mul_mat_params.glsl`'s push constants.
pub const PUSH_WORDS: usize = 20;

/// Which matrix kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatKind {
    /// One workgroup per 4 rows and column: weights read once per column.
    Vec,
    /// As `Vec`, but one subgroup (of this many lanes) per row and column, reduced with
    /// subgroupAdd: 128 / subgroup rows per workgroup.
    VecSg { subgroup: u32 },
    /// 64 x 64 output tiles through shared memory, f32 throughout.
    Tiled,
    /// Tiles on cooperative matrices of the variant's shape: f16 operands (weights dequantized
    /// and activations converted while staged), f32 accumulators, one product per block
    /// (`Tiles::fast`: 128 x 128 per workgroup at 16 x 16 x 16).
    Coop(CoopMat),
    /// As `Coop`, but each operand split into two f16 halves and three products per block, so
    /// the result keeps f32 accuracy (`Tiles::exact`: 64 x 64 per workgroup).
    CoopExact(CoopMat),
    /// One thread per output value, no shared memory: for short rows, where splitting K
    /// across a workgroup leaves most threads idle (and CPU drivers pay for every barrier).
    Rows,
}

impl MatKind {
    /// Up to this many output columns the vector (or rows) kernel is used.
    pub const VEC_MAX_COLS: usize = 8;
    /// Rows up to this long take the rows kernel when the vector kernel would be used.
    pub const ROWS_MAX_K: usize = 256;

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
            MatKind::Coop(cm) => Some((cm, Tiles::fast(cm.shape))),
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
    /// Subgroup size of the subgroup matrix-vector kernel (`mul_mat_vec_sg`), where it runs in
    /// place of `mul_mat_vec` (HRX_VK_NO_SUBGROUP=1 keeps the portable one).
    pub subgroup_matvec: Option<u32>,
    /// The cooperative-matrix variant (subgroup size, matrix-unit shape) the many-column
    /// products run on in place of the tiled f32 kernel, where the device has one:
    /// `mul_mat_cm` (f16 operands, f32 sums: a normalized error of about 1e-7 against f32,
    /// logits within about 1e-2) unless `exact`. HRX_VK_NO_COOPMAT=1 keeps the tiled kernel.
    pub coopmat: Option<CoopMat>,
    /// HRX_VK_EXACT=1: products keep f32 accuracy: `mul_mat_cm_exact` (operands split into
    /// f16 halves, three products per block) where there is a cooperative-matrix variant, else
    /// the tiled f32 kernel. Slower; for checking the fast kernel against, on the same device.
    pub exact: bool,
    /// Whether pairs of nodes may run as one dispatch (HRX_VK_NO_FUSE=1: every node alone).
    pub fuse: bool,
}

impl Variants {
    /// The kernels any Vulkan device runs.
    pub const PORTABLE: Variants = Variants { subgroup_matvec: None, coopmat: None, exact: false, fuse: true };

    /// What the device of `info` runs best, as the HRX_VK_* switches allow.
    pub fn for_device(info: &DeviceInfo) -> Variants {
        let switch = |name: &str| std::env::var(name).is_ok_and(|v| v == "1");
        Variants {
            subgroup_matvec: info.subgroup_matvec().filter(|_| !switch("HRX_VK_NO_SUBGROUP")),
            coopmat: info.coopmat_matmul().filter(|_| !switch("HRX_VK_NO_COOPMAT")),
            exact: switch("HRX_VK_EXACT"),
            fuse: !switch("HRX_VK_NO_FUSE"),
        }
    }

    /// The matrix kernel for rows of `k` values and `cols` output columns.
    pub fn mat_kind(&self, k: usize, cols: usize) -> MatKind {
        match MatKind::choose(k, cols) {
            MatKind::Vec => self.subgroup_matvec.map_or(MatKind::Vec, |subgroup| MatKind::VecSg { subgroup }),
            MatKind::Tiled => match (self.coopmat, self.exact) {
                (Some(cm), false) => MatKind::Coop(cm),
                (Some(cm), true) => MatKind::CoopExact(cm),
                (None, _) => MatKind::Tiled,
            },
            kind => kind,
        }
    }

    /// Whether many-column products run with f16 operands (`mul_mat_cm`): results then differ
    /// from the f32 kernels' by f16 rounding, not f32's.
    pub fn f16_products(&self) -> bool {
        self.coopmat.is_some() && !self.exact
    }
}

/// `residual`: an f32 value laid out as `out` (same sizes and strides) added to the product
/// (bound as input 3).
pub fn launch(
    kind: MatKind,
    w: &Operand,
    x: &Operand,
    out: &Operand,
    residual: Option<&Operand>,
    dynamic: Option<Dyn>,
) -> Result<Launch> {
    let wt = WType::from_dtype(w.dtype)
        .ok_or_else(|| VkError::Invalid(format!("no matrix kernel for {} weights", w.dtype)))?;
    expect_f32(x, "x")?;
    expect_f32(out, "the output")?;
    let (k, n) = (w.ne[0], w.ne[1]);
    let shape_ok = x.ne[0] == k && w.ne[2] == 1 && w.ne[3] == 1 && out.ne == [n, x.ne[1], x.ne[2], x.ne[3]];
    if !shape_ok || k % w.dtype.block_len() != 0 {
        return Err(VkError::Invalid(format!("mul_mat: w {:?} x {:?} -> {:?}", w.ne, x.ne, out.ne)));
    }
    if w.nb[0] != w.dtype.block_bytes() || x.nb[0] != 4 || out.nb[0] != 4 {
        return Err(VkError::Invalid("mul_mat: rows of w, x and the output must be contiguous".into()));
    }
    if wt == WType::F32 && (!w.offset.is_multiple_of(4) || !w.nb[1].is_multiple_of(4)) {
        return Err(VkError::Invalid("mul_mat: f32 weights must be 4-byte aligned".into()));
    }
    let mut push = Vec::with_capacity(PUSH_WORDS);
    for v in out.ne {
        push.push(word(v, "mul_mat: size")?);
    }
    push.extend(dyn_words(dynamic)?);
    push.push(floats(x.offset, "x offset")?);
    for i in 1..4 {
        push.push(floats(x.nb[i], "x stride")?);
    }
    push.push(floats(out.offset, "output offset")?);
    for i in 1..4 {
        push.push(floats(out.nb[i], "output stride")?);
    }
    push.push(word(k, "K")?);
    push.push(word(w.offset, "w offset")?);
    push.push(word(w.nb[1], "w row bytes")?);
    // The last byte of w must be addressable by 32-bit byte offsets.
    word(w.offset + w.nb[1] * n, "w extent")?;
    match residual {
        None => push.push(u32::MAX),
        Some(r) => {
            expect_f32(r, "the residual")?;
            if r.ne != out.ne || r.nb != out.nb {
                return Err(VkError::Invalid(format!(
                    "mul_mat: residual {:?}/{:?} is not laid out as the output {:?}/{:?}",
                    r.ne, r.nb, out.ne, out.nb
                )));
            }
            let at = floats(r.offset, "residual offset")?;
            if at == u32::MAX {
                return Err(VkError::Invalid("mul_mat: residual offset out of range".into()));
            }
            push.push(at);
        }
    }
    let grid = match kind {
        MatKind::Vec => Grid::Mat { rows: 4, cols: 1 },
        MatKind::VecSg { subgroup } => {
            if !subgroup.is_power_of_two() || !(4..=128).contains(&subgroup) {
                return Err(VkError::Invalid(format!("mul_mat_vec_sg: subgroup size {subgroup}")));
            }
            Grid::Mat { rows: 128 / subgroup as usize, cols: 1 }
        }
        MatKind::Tiled => Grid::Mat { rows: 64, cols: 64 },
        MatKind::Coop(cm) => coop_grid(cm, Tiles::fast(cm.shape))?,
        MatKind::CoopExact(cm) => coop_grid(cm, Tiles::exact())?,
        MatKind::Rows => Grid::Mat { rows: 64, cols: 1 },
    };
    Ok(Launch { kernel: KernelId::MatMul(kind, wt), push, grid, grid_input: None })
}

/// The grid of a cooperative-matrix kernel: a workgroup per tile.
fn coop_grid(cm: CoopMat, tiles: Tiles) -> Result<Grid> {
    if !cm.supported() {
        return Err(VkError::Invalid(format!(
            "mul_mat_cm: no kernel for subgroups of {} and {} matrices",
            cm.subgroup, cm.shape
        )));
    }
    Ok(Grid::Mat { rows: tiles.rows() as usize, cols: tiles.cols() as usize })
}
