//! The fast dot path: the activation vector is quantized once to integer blocks, then each
//! weight row is dotted with integer arithmetic per sub-block and one float multiply-add per
//! block. llama.cpp rounds activations to 8 bits (Q8_0 / Q8_K); that moves the logits of the
//! oracle models by 1-4e-2. 16-bit integers keep the error near 1e-4, so hrx uses them; the
//! AVX-512 decode kernels (x86_bytes.rs) multiply them as two byte planes with 8-bit
//! instructions, exactly.
//!
//! [`ActivationRows`] holds several activation rows for a matrix product: its
//! [`matmul`](ActivationRows::matmul) checks every length once, then runs the kernels of the
//! fastest [`Simd`] level, which dot each weight row with several activation rows at a time.
//! [`ActivationQ`] and [`vec_dot_quantized`] are the one-row form of the same kernels.

use super::block::{visit_blocks, BlockVisitor, Unpacked};
use super::error::check_row;
use super::simd::Simd;
use super::{float, DType, QuantError};
use std::ops::Range;

/// Values per entry of the activation's block sums: the smallest sub-block of any format.
pub(crate) const SUM_LEN: usize = 16;

/// An activation vector prepared for [`vec_dot_quantized`] with rows of one family of dtypes
/// (see [`activation_dtype`]).
#[derive(Clone, Debug)]
pub struct ActivationQ {
    rows: ActivationRows,
}

/// `m` activation rows of `k` values each, prepared for products with weight rows of one
/// family of dtypes (see [`activation_dtype`]); made by [`quantize_activations`].
#[derive(Clone, Debug)]
pub struct ActivationRows {
    dtype: DType,
    k: usize,
    m: usize,
    repr: Repr,
}

#[derive(Clone, Debug)]
enum Repr {
    /// For float rows, which dot with f32 directly: `m * k` values.
    F32(Vec<f32>),
    /// `dtype` is Q8_0 (32-value blocks) or Q8K (256), naming the block length: `q[i] *
    /// d[i / block_len]` approximates value `i` (q in -32767..=32767); `sums` holds the sum of
    /// each 16 consecutive `q`, which multiplies a sub-block's min, and `dsums32` the sum of
    /// each 32 times their `d` (the rounded activation's sum, for the SIMD kernels' mins).
    /// Rows follow each other in every vector. Scales stay f32: this format never leaves
    /// memory, so there is no reason to lose precision. `lo` and `hi` are `q` split into bytes,
    /// `q = 256 · hi + lo`, in `order`, for the byte-product kernels (x86_bytes.rs); empty,
    /// with no order, where no kernel of the product reads them ([`plane_order`]).
    Q8 {
        d: Vec<f32>,
        q: Vec<i16>,
        sums: Vec<i32>,
        dsums32: Vec<f32>,
        lo: Vec<u8>,
        hi: Vec<i8>,
        order: Option<PlaneOrder>,
    },
}

/// The order of the values in an activation's byte planes (`lo`, `hi`): that of the byte-product
/// kernel of the row dtype it was made for, so that each 64-value register of the planes
/// meets the register of weights that kernel unpacks with least work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PlaneOrder {
    /// Values in order.
    Natural,
    /// Per 128 values, values 0..32, 64..96, 32..64, 96..128: a Q4_K block's 64 bytes of
    /// nibbles j (values 128j..128j + 128, two runs of 32 bytes) give, masked, the first two
    /// quarters, and shifted the last two.
    Q4K,
}

/// The byte planes that rows for a product of `m` activation rows with `row` rows carry: only
/// the AVX-512 one-row kernels of Q4_K and Q6_K read them, which take products of fewer than
/// `GEMM_MIN_ROWS` rows (a prompt's rows take the tiled kernel, which reads `q`: making the
/// planes was a twentieth of a small model's prefill).
fn plane_order(row: DType, m: usize) -> Option<PlaneOrder> {
    #[cfg(target_arch = "x86_64")]
    if m < super::x86_gemm::GEMM_MIN_ROWS && Simd::detect() == Simd::Avx512 {
        return match row {
            DType::Q4K => Some(PlaneOrder::Q4K),
            DType::Q6K => Some(PlaneOrder::Natural),
            _ => None,
        };
    }
    let _ = (row, m);
    None
}

/// Weight rows of `row_bytes` (> 0) bytes each, back to back in `data` (a whole number of
/// them).
#[derive(Clone, Copy)]
pub(crate) struct Rows<'a> {
    pub data: &'a [u8],
    pub row_bytes: usize,
}

impl<'a> Rows<'a> {
    pub fn len(&self) -> usize {
        self.data.len() / self.row_bytes
    }

    pub fn iter(&self) -> std::slice::ChunksExact<'a, u8> {
        self.data.chunks_exact(self.row_bytes)
    }

    /// Runs of up to `rows` rows.
    pub fn tiles(&self, rows: usize) -> impl Iterator<Item = Rows<'a>> {
        let row_bytes = self.row_bytes;
        self.data.chunks(rows * row_bytes).map(move |data| Rows { data, row_bytes })
    }
}

/// Weight bytes of one tile: the rows of a tile stay in L2 while every group of activation
/// rows passes over them.
pub(crate) const TILE_BYTES: usize = 64 * 1024;

/// Activation rows per kernel call by default; the AVX-512 K-quant kernels, with 32
/// registers, take 8 (a few percent faster).
pub(crate) const GROUP: usize = 4;

/// Runs `$kernel::<R>(row, &[act; R])` over every weight row and activation row: weight
/// rows in tiles of about [`TILE_BYTES`], activation rows in groups of [`GROUP`] (the rest
/// one at a time), writing `out[i * rows.len() + j]`.
macro_rules! drive {
    ($kernel:ident($($arg:expr),*), $rows:expr, $acts:expr, $out:expr) => {
        drive!($kernel($($arg),*), $rows, $acts, $out, GROUP)
    };
    ($kernel:ident($($arg:expr),*), $rows:expr, $acts:expr, $out:expr, $group:expr) => {{
        const G: usize = $group;
        let (rows, acts, out): (Rows, _, &mut [f32]) = ($rows, $acts, $out);
        let n = rows.len();
        let tile = (TILE_BYTES / rows.row_bytes).max(1);
        let (groups, rest) = acts.as_chunks::<G>();
        for (t, tile_rows) in rows.tiles(tile).enumerate() {
            let j0 = t * tile;
            for (g, group) in groups.iter().enumerate() {
                for (jj, row) in tile_rows.iter().enumerate() {
                    let r = $kernel::<G>($($arg,)* row, group);
                    for (i, v) in r.into_iter().enumerate() {
                        out[(G * g + i) * n + j0 + jj] = v;
                    }
                }
            }
            for (i, a) in rest.iter().enumerate() {
                let i = G * groups.len() + i;
                for (jj, row) in tile_rows.iter().enumerate() {
                    out[i * n + j0 + jj] = $kernel::<1>($($arg,)* row, std::array::from_ref(a))[0];
                }
            }
        }
    }};
}
// For the x86 kernels (x86.rs); the portable ones here use the macro in place.
#[cfg(target_arch = "x86_64")]
pub(crate) use drive;

/// One quantized activation row: `d` per block, `q` per value, `sums` per 16 values, `dsums32`
/// per 32 values, `lo` and `hi` per value (`q = 256 · hi + lo`). The kernels take lengths as checked: a row of `nb` weight blocks of
/// `block_len` values meets exactly `nb * block_len` values here.
#[derive(Clone, Copy)]
pub(crate) struct Q8Row<'a> {
    pub d: &'a [f32],
    pub q: &'a [i16],
    pub sums: &'a [i32],
    // Only the x86 K-quant kernels read it; the portable ones use `sums`.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub dsums32: &'a [f32],
    // Only the AVX-512 byte-product kernels read them.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub lo: &'a [u8],
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub hi: &'a [i8],
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub order: Option<PlaneOrder>,
}

impl ActivationQ {
    /// F32, Q8_0 or Q8K: the form the values are held in.
    pub fn dtype(&self) -> DType {
        self.rows.dtype
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.rows.k
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl ActivationRows {
    /// F32, Q8_0 or Q8K: the form the values are held in.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.m
    }

    /// Values per row.
    pub fn row_len(&self) -> usize {
        self.k
    }

    /// Whether these rows serve products with `row` weight rows as rows quantized for them
    /// would: the same activation form, and the byte planes such rows would carry.
    pub fn fits(&self, row: DType) -> bool {
        activation_dtype(row) == Some(self.dtype)
            && match &self.repr {
                Repr::F32(_) => true,
                Repr::Q8 { order, .. } => plane_order(row, self.m).is_none_or(|o| *order == Some(o)),
            }
    }

    /// `out[i * n + j] = Σ row_j · x_i`: each of the `n` weight rows stored back to back in
    /// `weights` dotted with every activation row (a row-major `[m, n]` result), as
    /// [`vec_dot_quantized`] computes each, with the fastest kernels this CPU runs.
    pub fn matmul(&self, dtype: DType, weights: &[u8], n: usize, out: &mut [f32]) -> Result<(), QuantError> {
        self.matmul_with(Simd::detect(), dtype, weights, n, 0..self.m, out)
    }

    /// [`matmul`](Self::matmul) for the activation rows `act_rows` only (`out[(i - start) * n + j]`:
    /// a thread's share of a prompt's rows; `0..rows()` for all), with the kernels of `simd`,
    /// which this CPU must support.
    pub fn matmul_with(
        &self,
        simd: Simd,
        dtype: DType,
        weights: &[u8],
        n: usize,
        act_rows: Range<usize>,
        out: &mut [f32],
    ) -> Result<(), QuantError> {
        if activation_dtype(dtype) != Some(self.dtype) {
            return Err(QuantError::ActivationKind { row: dtype, activation: self.dtype });
        }
        if act_rows.start > act_rows.end || act_rows.end > self.m {
            return Err(QuantError::ActivationRange { start: act_rows.start, end: act_rows.end, rows: self.m });
        }
        // `n` rows of `k` values are one row of `n * k` values.
        check_row(dtype, self.k.saturating_mul(n), weights.len())?;
        let expected = n.saturating_mul(act_rows.len());
        if out.len() != expected {
            return Err(QuantError::OutputLen { expected, given: out.len() });
        }
        if !simd.is_supported() {
            return Err(QuantError::Simd(simd));
        }
        // Lengths are checked: from here on nothing can fail.
        if self.k == 0 || n == 0 {
            out.fill(0.0);
            return Ok(());
        }
        let rows = Rows { data: weights, row_bytes: weights.len() / n };
        match &self.repr {
            Repr::F32(x) => {
                float_matmul(simd, dtype, rows, &x[act_rows.start * self.k..act_rows.end * self.k], self.k, out)
            }
            Repr::Q8 { .. } => {
                let acts: Vec<Q8Row> = act_rows.map(|i| self.q8_row(i)).collect();
                q8_matmul(simd, dtype, rows, &acts, out);
            }
        }
        Ok(())
    }

    /// Row `i` of a Q8 activation (empty slices for F32 ones).
    fn q8_row(&self, i: usize) -> Q8Row<'_> {
        match &self.repr {
            Repr::Q8 { d, q, sums, dsums32, lo, hi, order } => {
                let nb = self.k / self.dtype.block_len();
                Q8Row {
                    d: &d[i * nb..(i + 1) * nb],
                    q: &q[i * self.k..(i + 1) * self.k],
                    sums: &sums[i * self.k / SUM_LEN..(i + 1) * self.k / SUM_LEN],
                    dsums32: &dsums32[i * self.k / 32..(i + 1) * self.k / 32],
                    lo: lo.get(i * self.k..(i + 1) * self.k).unwrap_or_default(),
                    hi: hi.get(i * self.k..(i + 1) * self.k).unwrap_or_default(),
                    order: *order,
                }
            }
            Repr::F32(_) => Q8Row { d: &[], q: &[], sums: &[], dsums32: &[], lo: &[], hi: &[], order: None },
        }
    }
}

/// The activation form rows of `row` dot with: F32 for float rows, Q8_0 for the 32-value
/// formats, Q8K for the K formats; `None` for Q8K itself, which is never a row.
pub fn activation_dtype(row: DType) -> Option<DType> {
    match row {
        DType::F32 | DType::F16 | DType::BF16 => Some(DType::F32),
        DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q5_1 | DType::Q8_0 => Some(DType::Q8_0),
        DType::Q2K | DType::Q3K | DType::Q4K | DType::Q5K | DType::Q6K => Some(DType::Q8K),
        DType::Q8K | DType::I32 => None,
    }
}

/// Prepares `x` for dot products with `row_dtype` rows of `x.len()` values. Each block of
/// `x` is scaled by its largest magnitude to the integers -32767..=32767.
pub fn quantize_activation(row_dtype: DType, x: &[f32]) -> Result<ActivationQ, QuantError> {
    let rows = quantize_activations(row_dtype, x, x.len())?;
    Ok(ActivationQ { rows })
}

/// Prepares the rows of `x`, `k` values each, for [`ActivationRows::matmul`] with
/// `row_dtype` rows, each as [`quantize_activation`] does. `k = 0` takes no rows.
pub fn quantize_activations(row_dtype: DType, x: &[f32], k: usize) -> Result<ActivationRows, QuantError> {
    quantize_activations_in_parts(row_dtype, x, k, 1, |parts| parts.into_iter().for_each(ActivationPart::quantize))
}

/// [`quantize_activations`] with the rows cut into up to `parts` ranges, handed to `run` to be
/// quantized, side by side where it likes (a prompt's rows on the CPU backend's threads):
/// `run` must call [`ActivationPart::quantize`] on every part, or the rows of those it leaves
/// are zero. F32 activations have no parts.
pub fn quantize_activations_in_parts(
    row_dtype: DType,
    x: &[f32],
    k: usize,
    parts: usize,
    run: impl FnOnce(Vec<ActivationPart<'_>>),
) -> Result<ActivationRows, QuantError> {
    let dtype =
        activation_dtype(row_dtype).ok_or(QuantError::Unsupported { dtype: row_dtype, op: "quantize_activation" })?;
    if !k.is_multiple_of(row_dtype.block_len()) {
        return Err(QuantError::PartialBlock { dtype: row_dtype, values: k });
    }
    let m = x.len().checked_div(k).unwrap_or(0);
    if m * k != x.len() {
        return Err(QuantError::PartialRow { values: x.len(), row_len: k });
    }
    if dtype == DType::F32 {
        return Ok(ActivationRows { dtype, k, m, repr: Repr::F32(x.to_vec()) });
    }
    let order = plane_order(row_dtype, m);
    let (n, block) = (x.len(), dtype.block_len());
    let planes = if order.is_some() { n } else { 0 };
    let (mut d, mut q, mut sums, mut dsums32) =
        (vec![0f32; n / block], vec![0i16; n], vec![0i32; n / SUM_LEN], vec![0f32; n / 32]);
    let (mut lo, mut hi) = (vec![0u8; planes], vec![0i8; planes]);
    // Every part but the last holds `per` values, whole rows; each vector is cut with them.
    let per = m.div_ceil(parts.clamp(1, m.max(1))) * k;
    {
        let mut list = Vec::with_capacity(parts);
        let (mut d, mut q, mut sums, mut dsums32) = (&mut d[..], &mut q[..], &mut sums[..], &mut dsums32[..]);
        let (mut lo, mut hi) = (&mut lo[..], &mut hi[..]);
        for x in x.chunks(per.max(1)) {
            let (v, planes) = (x.len(), if order.is_some() { x.len() } else { 0 });
            list.push(ActivationPart {
                x,
                block,
                order,
                d: split_off(&mut d, v / block),
                q: split_off(&mut q, v),
                sums: split_off(&mut sums, v / SUM_LEN),
                dsums32: split_off(&mut dsums32, v / 32),
                lo: split_off(&mut lo, planes),
                hi: split_off(&mut hi, planes),
            });
        }
        run(list);
    }
    Ok(ActivationRows { dtype, k, m, repr: Repr::Q8 { d, q, sums, dsums32, lo, hi, order } })
}

/// The first `len` entries of `v`, leaving it the rest.
fn split_off<'a, T>(v: &mut &'a mut [T], len: usize) -> &'a mut [T] {
    let (head, rest) = std::mem::take(v).split_at_mut(len);
    *v = rest;
    head
}

/// A range of whole rows of activations being made by [`quantize_activations_in_parts`]: their
/// values, and the parts of the result they fill.
pub struct ActivationPart<'a> {
    x: &'a [f32],
    block: usize,
    order: Option<PlaneOrder>,
    d: &'a mut [f32],
    q: &'a mut [i16],
    sums: &'a mut [i32],
    dsums32: &'a mut [f32],
    lo: &'a mut [u8],
    hi: &'a mut [i8],
}

impl ActivationPart<'_> {
    /// Rounds the part's rows into its share of the result.
    pub fn quantize(self) {
        #[cfg(target_arch = "x86_64")]
        if Simd::detect() != Simd::Scalar {
            // SAFETY: every level above Scalar has AVX2 and FMA (`Simd::detect` checked this CPU).
            return unsafe { quantize_part_avx2(self) };
        }
        quantize_part::<false>(self)
    }
}

/// [`quantize_part`] compiled for AVX2: the same operations, in wider registers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn quantize_part_avx2(part: ActivationPart) {
    quantize_part::<true>(part)
}

/// Rows of values in the 16-bit block form (Q8_0 or Q8K, blocks of `part.block`); blocks
/// rounded by the AVX2 kernel where `AVX2` (only in [`quantize_part_avx2`]).
#[inline(always)]
fn quantize_part<const AVX2: bool>(part: ActivationPart) {
    let ActivationPart { x, block, order, d, q, sums, dsums32, lo, hi } = part;
    // Plain loops rather than closures, so that everything is compiled into the caller (with
    // its target features).
    for ((x, q), d) in x.chunks_exact(block).zip(q.chunks_exact_mut(block)).zip(d.iter_mut()) {
        #[cfg(target_arch = "x86_64")]
        if AVX2 {
            // SAFETY: AVX2 is set only in quantize_part_avx2, which runs once `Simd::detect`
            // found AVX2 on this CPU.
            *d = unsafe { super::x86::quantize_i16_block(x, q) };
            continue;
        }
        *d = quantize_i16_block(x, q);
    }
    for (q, sum) in q.chunks_exact(SUM_LEN).zip(sums.iter_mut()) {
        let mut s = 0i32;
        for &v in q {
            s += i32::from(v);
        }
        *sum = s;
    }
    let per_block = block / 32;
    for (c, (s, ds)) in sums.chunks_exact(2).zip(dsums32.iter_mut()).enumerate() {
        *ds = d[c / per_block] * (s[0] + s[1]) as f32;
    }
    match order {
        None => {}
        Some(PlaneOrder::Natural) => split_planes(q, lo, hi),
        // Q4_K rows are whole blocks of 256 values, so every row is whole runs of 128.
        Some(PlaneOrder::Q4K) => {
            for (g, run) in q.chunks_exact(128).enumerate() {
                for (to, from) in [(0, 0), (32, 64), (64, 32), (96, 96)] {
                    let at = 128 * g + to..128 * g + to + 32;
                    split_planes(&run[from..from + 32], &mut lo[at.clone()], &mut hi[at]);
                }
            }
        }
    }
}

/// `q`'s values split into bytes, `q = 256 · hi + lo`.
#[inline(always)]
fn split_planes(q: &[i16], lo: &mut [u8], hi: &mut [i8]) {
    for ((lo, hi), &v) in lo.iter_mut().zip(hi).zip(q) {
        (*lo, *hi) = (v as u8, (v >> 8) as i8);
    }
}

/// Approximate `Σ row[i] * x[i]` for a `dtype` row and an activation from
/// [`quantize_activation`] for `dtype`. The row is exact; rounding moves each `x[i]` by at
/// most `max|x|` of its block / 65534, so the result is off by at most `Σ |row[i]|` times that
/// (plus f32 rounding). Float rows dot with the unrounded `x`.
pub fn vec_dot_quantized(dtype: DType, row: &[u8], act: &ActivationQ) -> Result<f32, QuantError> {
    vec_dot_quantized_with(Simd::detect(), dtype, row, act)
}

/// [`vec_dot_quantized`] with the kernels of `simd`, which this CPU must support.
pub fn vec_dot_quantized_with(simd: Simd, dtype: DType, row: &[u8], act: &ActivationQ) -> Result<f32, QuantError> {
    let mut out = [0f32];
    // An empty activation has no rows; its dot with the empty row is 0.
    if act.rows.m == 0 {
        act.rows.matmul_with(simd, dtype, row, 1, 0..0, &mut [])?;
        return Ok(0.0);
    }
    act.rows.matmul_with(simd, dtype, row, 1, 0..1, &mut out)?;
    Ok(out[0])
}

/// Float rows: `x` holds `m` rows of `k` values.
fn float_matmul(simd: Simd, dtype: DType, rows: Rows, x: &[f32], k: usize, out: &mut [f32]) {
    let xs: Vec<&[f32]> = x.chunks_exact(k).collect();
    match simd {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: matmul_with checked that this CPU supports Simd::Avx2 (AVX2, FMA, F16C),
        // and that every row holds exactly k values of `dtype`, as every x row does.
        Simd::Avx2 => unsafe { super::x86::float_matmul(dtype, rows, &xs, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, with AVX-512 F, BW and VNNI checked too (Simd::Avx512).
        Simd::Avx512 => unsafe { super::x86::float_matmul_512(dtype, rows, &xs, out) },
        _ => {
            let n = rows.len();
            for (i, x) in xs.iter().enumerate() {
                for (j, row) in rows.iter().enumerate() {
                    out[i * n + j] = float::dot(dtype, row, x);
                }
            }
        }
    }
}

/// Quantized rows against Q8 activation rows (lengths checked).
fn q8_matmul(simd: Simd, dtype: DType, rows: Rows, acts: &[Q8Row], out: &mut [f32]) {
    match simd {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: matmul_with checked that this CPU supports Simd::Avx2 (AVX2, FMA, F16C),
        // that every row is one whole `dtype` row of k values and that the activation rows
        // are of k values of the matching block form.
        Simd::Avx2 => unsafe { super::x86::q8_matmul(dtype, rows, acts, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, with AVX-512 F, BW and VNNI checked too (Simd::Avx512).
        Simd::Avx512 => unsafe { super::x86::q8_matmul_512(dtype, rows, acts, out) },
        _ => drive!(dot_q8_rows(dtype), rows, acts, out),
    }
}

/// The portable integer dot of one weight row with `R` activation rows (lengths checked),
/// each block unpacked once for all of them; the reference for the SIMD kernels.
fn dot_q8_rows<const R: usize>(dtype: DType, row: &[u8], acts: &[Q8Row; R]) -> [f32; R] {
    visit_blocks(dtype, DotQ8 { row, acts }).unwrap_or([0.0; R])
}

struct DotQ8<'a, const R: usize> {
    row: &'a [u8],
    acts: &'a [Q8Row<'a>; R],
}

impl<const R: usize> BlockVisitor for DotQ8<'_, R> {
    type Output = [f32; R];

    fn visit<const B: usize, const N: usize, const S: usize>(
        self,
        unpack: impl Fn(&[u8; B], &mut Unpacked<N, S>),
    ) -> [f32; R] {
        let sub = Unpacked::<N, S>::SUB;
        let blocks = self.row.as_chunks::<B>().0;
        let q: [&[[i16; N]]; R] = std::array::from_fn(|r| self.acts[r].q.as_chunks::<N>().0);
        let mut u = Unpacked::new();
        let mut w = [0i16; N];
        let mut acc = [0f32; R];
        for (b, block) in blocks.iter().enumerate() {
            unpack(block, &mut u);
            // Quants times their sub-block's scale: at most 32 · 128 = 4096 (Q6_K).
            for (w, (q, &scale)) in w.chunks_exact_mut(sub).zip(u.q.chunks_exact(sub).zip(&u.scale)) {
                for (w, &q) in w.iter_mut().zip(q) {
                    *w = (i32::from(q) * scale) as i16;
                }
            }
            let has_min = u.min.iter().any(|&m| m != 0);
            for r in 0..R {
                let qsum = dot_i16_block(&w, &q[r][b]);
                let sums = &self.acts[r].sums[b * (N / SUM_LEN)..(b + 1) * (N / SUM_LEN)];
                let msum = if has_min { min_sum(&u.min, sums) } else { 0 };
                acc[r] += self.acts[r].d[b] * (u.d * qsum as f32 - u.dmin * msum as f32);
            }
        }
        acc
    }
}

/// `Σ_j min[j] · (the activation's quants summed over sub-block j)`, exactly, from the
/// block's 16-value sums (`S` sub-blocks of `sums.len() / S` sums each).
#[inline]
pub(crate) fn min_sum<const S: usize>(min: &[i32; S], sums: &[i32]) -> i64 {
    let per = sums.len() / S;
    let mut total = 0i64;
    for j in 0..S {
        let mut s = 0i64;
        for t in 0..per {
            s += i64::from(sums[j * per + t]);
        }
        total += i64::from(min[j]) * s;
    }
    total
}

/// `Σ w[i] · a[i]` for a block of scaled quants (|w| ≤ 4096) and activation quants
/// (|a| ≤ 32767), exactly: in sixteen i32 lanes, which the compiler keeps in vector
/// registers; a lane sums at most 16 products of 256 values, below 16 · 4096 · 32767 =
/// 2147418112 < 2^31 in magnitude. (Not inlined: inside the multi-row loop the compiler
/// stops vectorizing it.)
#[inline(never)]
fn dot_i16_block<const N: usize>(w: &[i16; N], a: &[i16; N]) -> i64 {
    let mut lanes = [0i32; 16];
    for (w, a) in w.as_chunks::<16>().0.iter().zip(a.as_chunks::<16>().0) {
        for l in 0..16 {
            lanes[l] += i32::from(w[l]) * i32::from(a[l]);
        }
    }
    lanes.iter().map(|&v| i64::from(v)).sum()
}

/// Rounds a block to 16-bit integers scaled by its largest magnitude; returns the scale.
#[inline(always)]
fn quantize_i16_block(x: &[f32], q: &mut [i16]) -> f32 {
    // The largest magnitude, in eight lanes the compiler vectorizes (max is exact, so
    // the order does not matter; NaNs are skipped either way).
    let mut lanes = [0f32; 8];
    let chunks = x.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for (l, v) in lanes.iter_mut().zip(c) {
            *l = l.max(v.abs());
        }
    }
    let d = match i16_block_scale(lanes, tail, q) {
        Ok(d) => d,
        Err(degenerate) => return degenerate,
    };
    let inv = 1.0 / d;
    for (q, &v) in q.iter_mut().zip(x) {
        // Through i32: LLVM vectorizes a saturating f32 -> i32 conversion, not one to i16.
        *q = round_half_away(v * inv).clamp(-32767.0, 32767.0) as i32 as i16;
    }
    d
}

/// The 16-bit scale of a block from its largest magnitude, found among `lanes` (per-lane
/// maxima of its first values) and `tail` (the rest), NaNs skipped (max is exact, so the order
/// does not matter): Ok(largest / 32767), or for a block of zeros or with an infinity, `q`
/// zeroed and Err(its scale: 0, or NaN).
#[inline(always)]
pub(super) fn i16_block_scale(lanes: [f32; 8], tail: &[f32], q: &mut [i16]) -> Result<f32, f32> {
    let mut amax = 0f32;
    for v in tail {
        amax = amax.max(v.abs());
    }
    for l in lanes {
        amax = amax.max(l);
    }
    if amax == 0.0 || !amax.is_finite() {
        q.fill(0);
        return Err(if amax.is_finite() { 0.0 } else { f32::NAN });
    }
    Ok(amax / 32767.0)
}

/// `x.round()` (halves away from zero) for |x| < 2^23, in float operations the compiler
/// vectorizes (`round` is a libm call on x86-64 before SSE4.1, and `as i32` saturates
/// lane by lane). Every step is exact: above 2^23 every f32 is an integer, so adding and
/// removing 2^23 rounds `|x|` to an integer, and `|x| - trunc(|x|)` is its fraction. NaN
/// stays NaN.
#[inline]
pub(super) fn round_half_away(x: f32) -> f32 {
    const TWO_23: f32 = 8_388_608.0;
    let a = x.abs();
    let r = (a + TWO_23) - TWO_23;
    let t = if r > a { r - 1.0 } else { r };
    let up = if a - t >= 0.5 { 1.0 } else { 0.0 };
    (t + up).copysign(x)
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    #[test]
    fn avx2_block_rounding_equals_the_portable_one() {
        if !std::is_x86_feature_detected!("avx2") {
            eprintln!("no AVX2 on this CPU: the AVX2 rounding is not run here");
            return;
        }
        // d = 1 (largest 32767): halves, values around them, signed zeros, NaNs, tiny values.
        let mut special = vec![32767.0, -32767.0, 0.5, -0.5, 1.5, -2.5, 2.4999998, 3.5000002, -0.0, 0.0];
        special.extend([f32::NAN, 1e-30, -1e-30, 16383.5, -16384.5, 32766.5, 7.0, -7.49999]);
        let mut blocks = vec![special.clone(), [special.clone(), vec![f32::INFINITY]].concat(), vec![0.0; 32]];
        let mut rng = crate::rng::SplitMix64(0x2545_f491_4f6c_dd1d);
        for len in [32, 256, 37, 7] {
            for scale in [1e-3f32, 1.0, 3e4] {
                let block = (0..len).map(|_| (rng.next_f64() as f32 - 0.5) * scale).collect();
                blocks.push(block);
            }
        }
        for x in blocks {
            let (mut portable, mut avx2) = (vec![7i16; x.len()], vec![9i16; x.len()]);
            let d = quantize_i16_block(&x, &mut portable);
            // SAFETY: AVX2 was detected above.
            let d_avx2 = unsafe { crate::quant::x86::quantize_i16_block(&x, &mut avx2) };
            assert_eq!(d.to_bits(), d_avx2.to_bits(), "scale of {x:?}");
            assert_eq!(portable, avx2, "{x:?}");
        }
    }
}
