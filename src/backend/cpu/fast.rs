//! Fast CPU kernels: threads over rows, contiguous inner loops the compiler vectorizes, dot
//! products on quantized blocks without dequantizing whole matrices. Each returns None when
//! its layout preconditions do not hold, and the reference kernel runs instead.

use super::pool::par_items;
use super::reference;
use super::tensor::{Data, In, Out};
use super::KernelError;
use crate::graph::{Gelu, NodeId, Op, RopeKind};
use crate::quant::{self, DType};
use std::sync::{Mutex, PoisonError};

/// What one run of a graph computes once for several nodes, each with the value it was made
/// from: the caller keeps it true (clears what a node may have changed; see `run_node`).
#[derive(Default)]
pub struct RunMemo {
    /// The last product's quantized activation rows, for the products after it that read the
    /// same value (a layer's q, k and v products; gate and up).
    pub quantized: KeptRows,
    /// RoPE's angles (sine, cosine) per token and frequency for a positions value, for every
    /// RoPE of the run that turns by the same positions and frequencies (q and k of every
    /// layer: computing them was 3 % of a small model's prefill).
    pub trig: Angles,
}

/// Quantized activation rows and the value they were made from.
pub type KeptRows = Option<(NodeId, quant::ActivationRows)>;

/// RoPE's (sine, cosine) per token and frequency, and what they were made from.
pub type Angles = Option<(TrigKey, Vec<(f64, f64)>)>;

/// What a table of RoPE angles depends on: the positions value and the frequencies.
#[derive(PartialEq)]
pub struct TrigKey {
    pos: NodeId,
    kind: RopeKind,
    theta: u32,
    n_dims: usize,
    tokens: usize,
}

/// Runs `op` with the fast kernels, None where they do not apply. `memo`: the run's
/// [`RunMemo`] and the node's inputs.
pub fn execute(
    op: &Op,
    ins: &[In],
    out: &mut Out,
    threads: usize,
    memo: Option<(&[NodeId], &mut RunMemo)>,
) -> Option<Result<(), KernelError>> {
    // The value a memo entry is made from: the product's activations, RoPE's positions.
    let memo = memo.and_then(|(inputs, m)| Some((*inputs.get(1)?, m)));
    match op {
        Op::MatMul => matmul(ins.first()?, ins.get(1)?, out, threads, memo.map(|(id, m)| (id, &mut m.quantized))),
        Op::Attention { scale, segment } => super::attention::attention(
            ins.first()?,
            ins.get(1)?,
            ins.get(2)?,
            ins.get(3),
            (*scale, *segment),
            out,
            threads,
        ),
        Op::RmsNorm { eps } => rms_norm(ins.first()?, ins.get(1)?, *eps, out, threads),
        Op::Rope { kind, theta, n_dims } => {
            rope(ins.first()?, ins.get(1)?, kind, *theta, *n_dims, out, threads, memo.map(|(id, m)| (id, &mut m.trig)))
        }
        Op::Add => binary(ins.first()?, ins.get(1)?, out, Binary::Add, threads),
        Op::Mul => binary(ins.first()?, ins.get(1)?, out, Binary::Mul, threads),
        Op::SwiGlu => binary(ins.first()?, ins.get(1)?, out, Binary::SwiGlu, threads),
        Op::SetRows => set_rows(ins.get(1)?, ins.get(2)?, out),
        Op::LayerNorm { eps } => layer_norm(ins.first()?, ins.get(1)?, ins.get(2)?, *eps, out, threads),
        Op::Gelu(Gelu::Tanh) => par_rows(ins.first()?, out, threads, gelu_tanh_row),
        Op::Gelu(kind) => rows_map(ins.first()?, out, threads, |x| reference::gelu(*kind, x)),
        Op::Cont => rows_map(ins.first()?, out, threads, |x| x),
        _ => None,
    }
}

/// Rows per work item of the row-wise ops: enough work to be worth handing out.
const ROWS_PER_ITEM: usize = 16;

/// `out`'s rows (a plain matrix) with the matching rows of `x` (f32 data, any strides), in
/// blocks of [`ROWS_PER_ITEM`] over the threads: `f(out row, x row's base element, x's element
/// stride)`. None where `x` is not an f32 buffer of `out`'s shape that holds every row.
fn par_rows(
    x: &In,
    out: &mut Out,
    threads: usize,
    f: impl Fn(&mut [f32], &[f32], usize) + Sync,
) -> Option<Result<(), KernelError>> {
    let Data::F32(v) = x.data else { return None };
    let n = out.ne[0];
    if !out_is_matrix(out) || x.ne != out.ne || !x.nb[0].is_multiple_of(4) || !x.offset.is_multiple_of(4) {
        return None;
    }
    let step = x.nb[0] / 4;
    // Every row's base (in elements) with room for its n values.
    let mut bases = Vec::with_capacity(out.n_rows());
    for r in 0..out.n_rows() {
        let (i1, i2, i3) = super::tensor::row_coords(r, &x.ne);
        let base = x.byte_at([0, i1, i2, i3]) / 4;
        if n > 0 && base + (n - 1) * step >= v.len() {
            return None;
        }
        bases.push(base);
    }
    let n_rows = out.n_rows();
    let data = &mut out.data[out.offset / 4..][..n_rows * n];
    let items = data.chunks_mut(ROWS_PER_ITEM * n.max(1)).zip(bases.chunks(ROWS_PER_ITEM));
    let threads = threads.min(n_rows.div_ceil(ROWS_PER_ITEM));
    par_items(threads, items, |(block, bases)| {
        for (o, &base) in block.chunks_exact_mut(n.max(1)).zip(bases) {
            f(o, &v[base..], step);
        }
    });
    Some(Ok(()))
}

/// `f` of every value of `x` (GELU's erf form, a copy into rows), as the reference computes it.
fn rows_map(x: &In, out: &mut Out, threads: usize, f: impl Fn(f32) -> f32 + Sync) -> Option<Result<(), KernelError>> {
    par_rows(x, out, threads, |o, xs, step| {
        for (i, o) in o.iter_mut().enumerate() {
            *o = f(xs[i * step]);
        }
    })
}

/// GELU's tanh form of a row of `x` (elements `step` apart), through [`gelu_tanh`]: in AVX2
/// registers where the CPU has them and the row is contiguous (libm's `tanh`, a call per
/// value, was a sixth of a CPU image encode).
fn gelu_tanh_row(o: &mut [f32], xs: &[f32], step: usize) {
    if step == 1 {
        #[cfg(target_arch = "x86_64")]
        if quant::Simd::detect() != quant::Simd::Scalar {
            // SAFETY: every level above Scalar has AVX2 and FMA (`Simd::detect` checked this CPU).
            return unsafe { gelu_tanh_run_avx2(o, xs) };
        }
        return gelu_tanh_run(o, xs);
    }
    for (i, o) in o.iter_mut().enumerate() {
        *o = gelu_tanh(xs[i * step]);
    }
}

/// [`gelu_tanh_run`] compiled for AVX2: four values a step.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn gelu_tanh_run_avx2(o: &mut [f32], xs: &[f32]) {
    gelu_tanh_run(o, xs)
}

#[inline(always)]
fn gelu_tanh_run(o: &mut [f32], xs: &[f32]) {
    for (o, &x) in o.iter_mut().zip(xs) {
        *o = gelu_tanh(x);
    }
}

/// `0.5 · x · (1 + tanh u)`, `u = √(2/π) · (x + 0.044715 · x³)`, as the reference computes
/// it in f64 but as `x · sigmoid(2u)` (the same function), through [`exp_nonpositive_f64`] of
/// `-|2u|`, in operations the compiler vectorizes. Within an ulp of the reference's f32 where
/// `1 + tanh u` leaves the reference most of its digits; below (x < -3 or so, values under
/// 1e-4) this form is the more accurate of the two.
#[inline(always)]
fn gelu_tanh(x: f32) -> f32 {
    let x = f64::from(x);
    let t = 2.0 * (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
    let e = exp_nonpositive_f64(-t.abs());
    let y = if t >= 0.0 { x / (1.0 + e) } else { x * e / (1.0 + e) };
    y as f32
}

/// `e^x` for `x ≤ 0` in f64, to about 1e-13 (far below an f32 ulp; 0 below -1022 ln 2, where e^x
/// leaves the normal range), in operations the compiler vectorizes: `e^x = 2^n · e^r` with
/// `n` the nearest integer to `x / ln 2`, `r` taken off in two parts (fdlibm's), `e^r` by its
/// Taylor series to degree 11 (|r| ≤ ln 2 / 2), `2^n` from exponent bits.
#[inline(always)]
fn exp_nonpositive_f64(x: f64) -> f64 {
    const LN2_HI: f64 = 6.931_471_803_691_238e-1;
    const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
    let n = (x * std::f64::consts::LOG2_E).round_ties_even().max(-1022.0);
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = 1.0 / 39_916_800.0;
    for c in [3_628_800.0, 362_880.0, 40_320.0, 5_040.0, 720.0, 120.0, 24.0, 6.0, 2.0, 1.0, 1.0] {
        p = p * r + 1.0 / c;
    }
    // 2^n: n + 1023 (1..=1023) in the low bits of 2^52 + 1023 + n, shifted into the exponent.
    let two_n = f64::from_bits((n + 4_503_599_627_371_519.0).to_bits() << 52);
    if x < -708.396_418_532_264_1 {
        0.0
    } else {
        p * two_n
    }
}

/// The reference's layer norm (its row function: the same values) on the threads, a block of
/// rows per work item.
fn layer_norm(
    x: &In,
    weight: &In,
    bias: &In,
    eps: f32,
    out: &mut Out,
    threads: usize,
) -> Option<Result<(), KernelError>> {
    let n = x.ne[0];
    // The weights as f32 (model weights are file bytes).
    let (mut wbuf, mut bbuf) = (Vec::new(), Vec::new());
    let (w, b) = (weight.row_f32(0, 0, 0, &mut wbuf), bias.row_f32(0, 0, 0, &mut bbuf));
    if w.len() != n || b.len() != n {
        return None;
    }
    par_rows(x, out, threads, |o, xs, step| {
        reference::layer_norm_row(n, |i| xs[i * step], |i| (w[i], b[i]), eps, |i, y| o[i] = y);
    })
}

/// Out is a plain [ne0, rows] matrix: rows ne0 apart, unit stride. The stride of an axis of
/// length 1 is never used, so it does not matter (a dynamic axis run below its planned maximum
/// leaves the planned strides on the axes above it).
pub(super) fn out_is_matrix(out: &Out) -> bool {
    let mut packed = 4;
    out.nb[0] == 4
        && (1..4).all(|i| {
            packed *= out.ne[i - 1];
            out.ne[i] <= 1 || out.nb[i] == packed
        })
}

fn matmul(
    w: &In,
    x: &In,
    out: &mut Out,
    threads: usize,
    memo: Option<(NodeId, &mut KeptRows)>,
) -> Option<Result<(), KernelError>> {
    let (k, n_out) = (w.ne[0], w.ne[1]);
    if !out_is_matrix(out) || w.ne[2] != 1 || w.ne[3] != 1 {
        return None;
    }
    let m = out.n_rows();
    // The activations as contiguous f32 rows: borrowed where they are, else gathered once.
    let gathered: Vec<f32>;
    let xs = match x.f32_rows().filter(|v| v.len() == m * k) {
        Some(v) => v,
        None => {
            let mut rows = Vec::with_capacity(m * k);
            let mut buf = Vec::new();
            for i in 0..m {
                let (i1, i2, i3) = super::tensor::row_coords(i, &x.ne);
                rows.extend_from_slice(x.row_f32(i1, i2, i3, &mut buf));
            }
            gathered = rows;
            &gathered
        }
    };
    // The weight rows, back to back.
    let dtype = w.dtype;
    let row_bytes = dtype.row_bytes(k as u64)? as usize;
    let weights = match w.data {
        Data::Bytes(raw) if n_out < 2 || w.nb[1] == row_bytes => raw.get(w.offset..w.offset + n_out * row_bytes)?,
        _ => return None,
    };
    let data = &mut out.data[out.offset / 4..][..m * n_out];
    if k == 0 {
        data.fill(0.0);
        return Some(Ok(()));
    }
    // Each activation row is quantized once (16-bit blocks) for formats with an integer dot
    // product, and once for every product of the run that reads the same value; float weights
    // dot the f32 rows directly.
    let fresh;
    let acts = match memo {
        Some((input, kept)) => {
            let fits = |(id, rows): &(NodeId, quant::ActivationRows)| {
                *id == input && rows.fits(dtype) && (rows.rows(), rows.row_len()) == (m, k)
            };
            if !kept.as_ref().is_some_and(fits) {
                *kept = None;
                match quantize_rows(dtype, xs, k, threads) {
                    Ok(rows) => *kept = Some((input, rows)),
                    Err(e) => return Some(Err(KernelError::Quant(e))),
                }
            }
            &kept.as_ref()?.1
        }
        None => match quantize_rows(dtype, xs, k, threads) {
            Ok(rows) => {
                fresh = rows;
                &fresh
            }
            Err(e) => return Some(Err(KernelError::Quant(e))),
        },
    };
    Some(par_matmul(acts, dtype, weights, n_out, data, threads).map_err(KernelError::Quant))
}

/// The rows of `xs` (`k` > 0 values each) prepared for `dtype` weight rows, a range of rows
/// per thread where there are enough of them (a prompt's: quantizing them on one thread took
/// a tenth of a small model's prefill).
fn quantize_rows(
    dtype: DType,
    xs: &[f32],
    k: usize,
    threads: usize,
) -> Result<quant::ActivationRows, quant::QuantError> {
    // Fewer rows go on one thread: a decode step's one row, a few sequences' rows.
    const MIN_ROWS_PER_THREAD: usize = 8;
    let threads = threads.min(xs.len() / k / MIN_ROWS_PER_THREAD).max(1);
    quant::quantize_activations_in_parts(dtype, xs, k, threads, |parts| {
        par_items(threads.min(parts.len()), parts.into_iter(), quant::ActivationPart::quantize)
    })
}

/// Activation rows per thread from which a product splits them, not the weight rows, over the
/// threads: every thread then reads every weight row, which a prompt's many rows amortize. No
/// range is shorter: from 16 rows the AVX-512 kernel tiles them, and rows computed so come out
/// the same in any range of 16 or more (tests/quant.rs).
const ACT_SPLIT_MIN_ROWS: usize = 16;
/// Ranges of activation rows per thread: a late thread leaves its share to the others, and
/// each range decodes the weights anew.
const ACT_RANGES_PER_THREAD: usize = 2;
/// Largest quantized weight matrix whose products split the activation rows: one that every
/// range can decode again and keep in its core's cache. (The 2B shape's, 2.4 MB and up,
/// prefilled 10 % slower so; the small oracle model's, at most 74 KB, 31 % faster on 2
/// threads.) Float weights have no tiles to decode: theirs split at any size.
const ACT_SPLIT_MAX_WEIGHT_BYTES: usize = 1 << 20;

/// `data[i * rows.len() + j] = rows[j] · act i`, the weight rows split into ranges handed
/// out to the threads (each range read by one thread, meeting every activation row), or for
/// many activation rows, those.
fn par_matmul(
    acts: &quant::ActivationRows,
    dtype: DType,
    weights: &[u8],
    n: usize,
    data: &mut [f32],
    threads: usize,
) -> Result<(), quant::QuantError> {
    let (m, k) = (acts.rows(), acts.row_len());
    let float = matches!(dtype, DType::F32 | DType::F16 | DType::BF16);
    // Multiply-adds worth a thread, and worth a range of rows.
    const MIN_THREAD_WORK: usize = 1 << 16;
    const MIN_RANGE_WORK: usize = 1 << 18;
    let work = n.saturating_mul(m).saturating_mul(k);
    let threads = threads.clamp(1, n.max(1)).min(work / MIN_THREAD_WORK + 1);
    if threads == 1 {
        return acts.matmul(dtype, weights, n, data);
    }
    // Several ranges per thread, so that a late thread leaves its share to the others.
    let per = n.div_ceil(threads * 8).max(MIN_RANGE_WORK.div_ceil(m * k)).min(n);
    let ranges = weights.chunks(per * (weights.len() / n));
    let error = Mutex::new(None);
    let fail = |e| *error.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
    if m == 1 {
        par_items(threads, ranges.zip(data.chunks_mut(per)), |(rows, out)| {
            if let Err(e) = acts.matmul(dtype, rows, out.len(), out) {
                fail(e);
            }
        });
    } else if m >= ACT_SPLIT_MIN_ROWS * threads && (float || weights.len() <= ACT_SPLIT_MAX_WEIGHT_BYTES) {
        // A prompt's rows: ranges of them over the threads, each against every weight row and
        // writing its own rows of the result. (Ranges of weight rows would each fill an
        // [m, range] block to be copied into place: a tenth of a small model's prefill.)
        // Ranges as even as they come, each of ACT_SPLIT_MIN_ROWS rows or more: the kernels
        // then compute every row as the whole product would, whatever the thread count.
        let ranges = (threads * ACT_RANGES_PER_THREAD).min(m / ACT_SPLIT_MIN_ROWS);
        let mut items = Vec::with_capacity(ranges);
        let mut rest = &mut data[..];
        let mut start = 0;
        for r in 0..ranges {
            let len = m / ranges + usize::from(r < m % ranges);
            let (out, tail) = std::mem::take(&mut rest).split_at_mut(len * n);
            items.push((start..start + len, out));
            rest = tail;
            start += len;
        }
        par_items(threads, items.into_iter(), |(act_rows, out)| {
            if let Err(e) = acts.matmul_with(quant::Simd::detect(), dtype, weights, n, act_rows, out) {
                fail(e);
            }
        });
    } else {
        // Each range fills an [m, range] block, then copies it into place.
        let data = Mutex::new(data);
        par_items(threads, ranges.enumerate(), |(t, rows)| {
            let (j0, len) = (t * per, (n - t * per).min(per));
            let mut block = vec![0f32; m * len];
            if let Err(e) = acts.matmul(dtype, rows, len, &mut block) {
                return fail(e);
            }
            let mut data = data.lock().unwrap_or_else(PoisonError::into_inner);
            for (i, src) in block.chunks_exact(len).enumerate() {
                data[i * n + j0..i * n + j0 + len].copy_from_slice(src);
            }
        });
    }
    match error.into_inner().unwrap_or_else(PoisonError::into_inner) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The elementwise ops of two inputs.
#[derive(Clone, Copy)]
enum Binary {
    Add,
    Mul,
    SwiGlu,
}

/// `out = op(a, b)` elementwise, `b` broadcast as the reference does (index modulo its
/// shape), when every row of `a` and `b` is a contiguous f32 run of out's row length and out's
/// rows are runs apart from each other: blocks of [`ROWS_PER_ITEM`] rows over the threads.
fn binary(a: &In, b: &In, out: &mut Out, op: Binary, threads: usize) -> Option<Result<(), KernelError>> {
    let n = out.ne[0];
    // Output rows may lie apart (a window on a wider buffer, such as the deepstack slices of
    // the vision model's output), in order and not overlapping.
    if !out.unit_stride() || a.ne != out.ne || b.ne[0] != n {
        return None;
    }
    let n_rows = out.n_rows();
    let starts: Vec<usize> = (0..n_rows)
        .map(|r| {
            let (i1, i2, i3) = super::tensor::row_coords(r, &a.ne);
            out.index([0, i1, i2, i3])
        })
        .collect();
    // One row of b (a bias, say) may be model-file bytes: taken as f32 once.
    let mut b_buf = Vec::new();
    let b_row = (b.ne[1] * b.ne[2] * b.ne[3] == 1).then(|| b.row_f32(0, 0, 0, &mut b_buf)).filter(|y| y.len() == n);
    let mut rows = Vec::with_capacity(n_rows);
    let mut rest = &mut out.data[..];
    let mut taken = 0;
    for (r, start) in starts.into_iter().enumerate() {
        let (i1, i2, i3) = super::tensor::row_coords(r, &a.ne);
        let x = a.f32_row(i1, i2, i3)?;
        let y = match b_row {
            Some(y) => y,
            None => b.f32_row(i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3])?,
        };
        let (_, tail) = std::mem::take(&mut rest).split_at_mut_checked(start.checked_sub(taken)?)?;
        let (o, tail) = tail.split_at_mut_checked(n)?;
        rest = tail;
        taken = start + n;
        rows.push((o, x, y));
    }
    let threads = threads.min(rows.len().div_ceil(ROWS_PER_ITEM));
    par_items(threads, rows.chunks_mut(ROWS_PER_ITEM), |block| {
        for (o, x, y) in block.iter_mut() {
            binary_row(op, o, x, y);
        }
    });
    Some(Ok(()))
}

/// One row of [`binary`], in AVX2 registers where the CPU has them.
fn binary_row(op: Binary, o: &mut [f32], x: &[f32], y: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if quant::Simd::detect() != quant::Simd::Scalar {
        // SAFETY: every level above Scalar has AVX2 and FMA (`Simd::detect` checked this CPU).
        return unsafe { binary_row_avx2(op, o, x, y) };
    }
    binary_row_body(op, o, x, y)
}

/// [`binary_row_body`] compiled for AVX2: the same operations (no fused multiply-adds are
/// formed), eight lanes at a time, and `round` an instruction rather than a libm call.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn binary_row_avx2(op: Binary, o: &mut [f32], x: &[f32], y: &[f32]) {
    binary_row_body(op, o, x, y)
}

#[inline(always)]
fn binary_row_body(op: Binary, o: &mut [f32], x: &[f32], y: &[f32]) {
    // Loops, not closures: a closure is not always compiled into a caller with more target
    // features.
    let lanes = o.iter_mut().zip(x).zip(y);
    match op {
        Binary::Add => {
            for ((o, &x), &y) in lanes {
                *o = x + y;
            }
        }
        Binary::Mul => {
            for ((o, &x), &y) in lanes {
                *o = x * y;
            }
        }
        Binary::SwiGlu => {
            for ((o, &g), &u) in lanes {
                *o = silu(g) * u;
            }
        }
    }
}

/// The source rows written into the cache rows their slots name, as the reference does,
/// where each is a contiguous f32 run and the cache's rows are too.
fn set_rows(src: &In, ids: &In, out: &mut Out) -> Option<Result<(), KernelError>> {
    let n = src.ne[0];
    if !out.unit_stride() || n > out.ne[0] {
        return None;
    }
    for r in 0..src.ne[1] {
        let x = src.f32_row(r, 0, 0)?;
        let slot = match reference::row_id(ids.i32_at([r, 0, 0, 0]), out.ne[1], "slot") {
            Ok(slot) => slot,
            Err(e) => return Some(Err(e)),
        };
        let start = out.index([0, slot, 0, 0]);
        out.data.get_mut(start..start + n)?.copy_from_slice(x);
    }
    Some(Ok(()))
}

/// RMS norm of each row (f32 sums in [`dot`]'s lanes), a block of rows per work item.
fn rms_norm(x: &In, weight: &In, eps: f32, out: &mut Out, threads: usize) -> Option<Result<(), KernelError>> {
    let n = x.ne[0];
    let mut wbuf = Vec::new();
    let w = weight.row_f32(0, 0, 0, &mut wbuf);
    if w.len() != n {
        return None;
    }
    par_rows(x, out, threads, |o, xs, step| {
        let mut gathered = Vec::new();
        let xs = if step == 1 {
            &xs[..n]
        } else {
            gathered.extend((0..n).map(|i| xs[i * step]));
            &gathered
        };
        // In `dot`'s eight partial sums: one running sum is a chain of dependent adds.
        let ss = dot(xs, xs);
        let scale = 1.0 / (ss / n as f32 + eps).sqrt();
        for ((o, &v), &g) in o.iter_mut().zip(xs).zip(w) {
            *o = v * scale * g;
        }
    })
}

/// Tokens per work item of rotary embedding: every head of each.
const ROPE_TOKENS: usize = 8;

/// The reference's rotary embedding, the same f64 operations in the same order (so the same
/// values), on contiguous rows: the angles once per token, every head's row as a slice
/// rather than element by element through four-index addressing; blocks of tokens over the
/// threads.
#[allow(clippy::too_many_arguments)]
fn rope(
    x: &In,
    pos: &In,
    kind: &RopeKind,
    theta: f32,
    n_dims: usize,
    out: &mut Out,
    threads: usize,
    memo: Option<(NodeId, &mut Angles)>,
) -> Option<Result<(), KernelError>> {
    let (d, heads) = (out.ne[0], out.ne[1]);
    if !out_is_matrix(out) || x.ne != out.ne || n_dims > d || !n_dims.is_multiple_of(2) {
        return None;
    }
    let n_rows = out.n_rows();
    if n_rows == 0 || d == 0 {
        return Some(Ok(()));
    }
    let half = n_dims / 2;
    let tokens = out.ne[2];
    // Rows run through the heads of a token first: a token's rows lie together in out.
    let mut rows = Vec::with_capacity(n_rows);
    for r in 0..n_rows {
        let (h, t, i3) = super::tensor::row_coords(r, &out.ne);
        rows.push(x.f32_row(h, t, i3)?);
    }
    // Every head of a token turns by the same angles: (sin, cos) per token and pair.
    let angles = |table: &mut Vec<(f64, f64)>| {
        let freqs: Vec<(usize, f64)> = (0..half).map(|j| reference::rope_frequency(kind, theta, n_dims, j)).collect();
        table.resize(tokens * half, (0.0, 0.0));
        let items = table.chunks_mut(ROPE_TOKENS * half).enumerate();
        par_items(threads.min(tokens.div_ceil(ROPE_TOKENS)), items, |(item, trig)| {
            for (i, trig) in trig.chunks_exact_mut(half).enumerate() {
                let t = item * ROPE_TOKENS + i;
                for (tj, &(comp, inv_freq)) in trig.iter_mut().zip(&freqs) {
                    *tj = (f64::from(pos.i32_at([t, comp, 0, 0])) * inv_freq).sin_cos();
                }
            }
        });
    };
    let fresh;
    let trig: &[(f64, f64)] = match memo {
        Some((pos_id, kept)) => {
            let key = TrigKey { pos: pos_id, kind: kind.clone(), theta: theta.to_bits(), n_dims, tokens };
            if !kept.as_ref().is_some_and(|(k, _)| *k == key) {
                let mut table = kept.take().map(|(_, t)| t).unwrap_or_default();
                angles(&mut table);
                *kept = Some((key, table));
            }
            &kept.as_ref()?.1
        }
        None => {
            let mut table = Vec::new();
            angles(&mut table);
            fresh = table;
            &fresh
        }
    };
    let data = &mut out.data[out.offset / 4..][..n_rows * d];
    let items = data.chunks_mut(ROPE_TOKENS * heads * d).zip(rows.chunks(ROPE_TOKENS * heads)).enumerate();
    let threads = threads.min((n_rows / heads).div_ceil(ROPE_TOKENS));
    par_items(threads, items, |(item, (o, x))| {
        for (i, (o, x)) in o.chunks_exact_mut(heads * d).zip(x.chunks_exact(heads)).enumerate() {
            let t = (item * ROPE_TOKENS + i) % tokens;
            let trig = &trig[t * half..(t + 1) * half];
            for (o, x) in o.chunks_exact_mut(d).zip(x) {
                let (o_lo, o_hi) = o.split_at_mut(half);
                let (x_lo, x_hi) = x.split_at(half);
                for ((((o_a, o_b), &a), &b), &(sin, cos)) in
                    o_lo.iter_mut().zip(o_hi.iter_mut()).zip(x_lo).zip(x_hi).zip(trig)
                {
                    let (a, b) = (f64::from(a), f64::from(b));
                    *o_a = (a * cos - b * sin) as f32;
                    *o_b = (b * cos + a * sin) as f32;
                }
                o[n_dims..].copy_from_slice(&x[n_dims..]);
            }
        }
    });
    Some(Ok(()))
}

/// `Σ a[i] * b[i]` in eight interleaved partial sums, which the compiler keeps in vector
/// registers (one running sum would be a chain of dependent adds).
#[inline]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a8.remainder().iter().zip(b8.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in a8.zip(b8) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `e^x` for the softmax's `x ≤ 0`, within 2 ulp of `f32::exp` (0 below -87.34, where e^x
/// leaves the normal range), in operations the compiler vectorizes (libm's `expf` is a
/// call per value): `e^x = 2^n · e^r` with `n = round(x / ln 2)`, `|r| ≤ ln 2 / 2`, `r`
/// taken off in two parts (the first exact in f32), `e^r` by Cephes' degree-7 polynomial.
#[inline(always)]
pub(super) fn exp_nonpositive(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let n = (x * std::f32::consts::LOG2_E).round();
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4f32;
    for c in [1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5] {
        p = p * r + c;
    }
    let e_r = p * r * r + r + 1.0;
    // 2^n: n + 127 (1..=127 above the cut-off) in the low bits of 2^23 + 127 + n, shifted
    // into the exponent (no float-to-integer conversion, which the compiler did not vectorize).
    let two_n = f32::from_bits((n.max(-126.0) + 8_388_735.0).to_bits() << 23);
    if x < -87.336_54 {
        0.0
    } else {
        e_r * two_n
    }
}

/// `x · sigmoid(x)` as [`reference::silu`] computes it, to a few ulp, through
/// [`exp_nonpositive`] of `-|x|` (so that the compiler can vectorize it): for x ≥ 0,
/// `x / (1 + e^-x)`; below, `x · e^x / (1 + e^x)`.
#[inline(always)]
fn silu(x: f32) -> f32 {
    let e = exp_nonpositive(-x.abs());
    if x >= 0.0 {
        x / (1.0 + e)
    } else {
        x * e / (1.0 + e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silu_matches_the_reference() {
        let mut x = -100f32;
        while x < 100.0 {
            let (got, want) = (silu(x), reference::silu(x));
            // A few ulp, or nothing to speak of where e^x leaves the normal range.
            assert!((got - want).abs() <= 8.0 * f32::EPSILON * want.abs() + 1e-30, "silu({x}): {got} vs {want}");
            x += 0.0173;
        }
    }

    #[test]
    fn gelu_tanh_matches_the_reference() {
        let check = |x: f32| {
            let (got, want) = (gelu_tanh(x), reference::gelu(Gelu::Tanh, x));
            let ulp = (want.to_bits() as i64 - got.to_bits() as i64).abs();
            // An ulp; or, where the reference's 1 + tanh u has lost digits to cancellation
            // (x < -3, values under 1e-4), nothing to speak of.
            assert!(ulp <= 1 || x < -3.0 && (got - want).abs() < 1e-11, "gelu({x}): {got} vs {want} ({ulp} ulp)");
        };
        let mut x = -20f32;
        while x < 20.0 {
            check(x);
            x += 0.000_37;
        }
        for x in [0.0, -0.0, 1e-30, -1e-30, 1e30, -1e30, f32::MAX, f32::MIN, f32::INFINITY] {
            check(x);
        }
        assert!(gelu_tanh(f32::NAN).is_nan() && gelu_tanh(f32::NEG_INFINITY).is_nan());
        assert!(gelu_tanh(-0.0).is_sign_negative());
        // Contiguous rows (the AVX2 loop) and strided ones agree with the scalar function.
        let xs: Vec<f32> = (0..203).map(|i| (i as f32 - 101.0) * 0.093).collect();
        let mut run = vec![0f32; xs.len()];
        gelu_tanh_row(&mut run, &xs, 1);
        let mut strided = vec![0f32; xs.len() / 2 + 1];
        gelu_tanh_row(&mut strided, &xs, 2);
        for (i, &x) in xs.iter().enumerate() {
            assert_eq!(run[i], gelu_tanh(x));
            if i % 2 == 0 {
                assert_eq!(strided[i / 2], gelu_tanh(x));
            }
        }
    }

    #[test]
    fn exp_nonpositive_f64_is_within_1e_13_of_exp() {
        let mut x = 0f64;
        while x > -710.0 {
            let (got, want) = (exp_nonpositive_f64(x), x.exp());
            assert!(
                want < f64::MIN_POSITIVE && got == 0.0 || (got - want).abs() <= 1e-13 * want,
                "e^{x}: {got} vs {want}"
            );
            x -= 0.0137;
        }
        assert_eq!(exp_nonpositive_f64(0.0), 1.0);
    }

    #[test]
    fn exp_nonpositive_is_within_two_ulp_of_exp() {
        let mut x = 0f32;
        while x > -90.0 {
            let (got, want) = (exp_nonpositive(x), x.exp());
            let ulp = (want.to_bits() as i64 - got.to_bits() as i64).abs();
            assert!(want < f32::MIN_POSITIVE || ulp <= 2, "e^{x}: {got} vs {want} ({ulp} ulp)");
            x -= 0.0137;
        }
        assert_eq!(exp_nonpositive(0.0), 1.0);
        assert_eq!(exp_nonpositive(-100.0), 0.0);
    }

    #[test]
    fn rows_below_the_planned_maximum_are_still_a_matrix() {
        let mut data = vec![0f32; 64];
        let mut out = |ne, nb| out_is_matrix(&Out { data: &mut data, offset: 0, ne, nb });
        // [8, 3] of a plan for [8, 10]: axes 2 and 3 keep the planned strides.
        assert!(out([8, 3, 1, 1], [4, 32, 320, 320]));
        // [4, 2, 3] of a plan for [4, 2, 10].
        assert!(out([4, 2, 3, 1], [4, 16, 32, 320]));
        // Rows not packed: a strided window, or planes apart by the planned row count.
        assert!(!out([8, 3, 1, 1], [4, 64, 192, 192]));
        assert!(!out([8, 3, 2, 1], [4, 32, 320, 640]));
        assert!(!out([8, 3, 1, 1], [8, 64, 192, 192]));
    }
}
