//! The fast dot path: the activation vector is quantized once to integer blocks, then each
//! weight row is dotted with integer arithmetic per sub-block and one float multiply-add per
//! block. llama.cpp rounds activations to 8 bits (Q8_0 / Q8_K); that moves the logits of the
//! oracle models by 1-4e-2. 16-bit integers cost the same integer multiply-adds and keep the
//! error near 1e-4, so hrx uses them.

use super::bits::arrays;
use super::block::{visit_blocks, BlockVisitor, Unpacked};
use super::error::check_row;
use super::{float, DType, QuantError};

/// Values per entry of [`ActivationQ`]'s block sums: the smallest sub-block of any format.
const SUM_LEN: usize = 16;

/// An activation vector prepared for [`vec_dot_quantized`] with rows of one family of dtypes
/// (see [`activation_dtype`]).
#[derive(Clone, Debug)]
pub struct ActivationQ {
    repr: Repr,
}

#[derive(Clone, Debug)]
enum Repr {
    /// For float rows, which dot with f32 directly.
    F32(Vec<f32>),
    /// `dtype` is Q8_0 (32-value blocks) or Q8K (256), naming the block length: `q[i] *
    /// d[i / block_len]` approximates value `i` (q in -32767..=32767); `sums` holds the sum of
    /// each 16 consecutive `q`, which multiplies a sub-block's min. Scales stay f32: this
    /// format never leaves memory, so there is no reason to lose precision.
    Q8 {
        dtype: DType,
        d: Vec<f32>,
        q: Vec<i16>,
        sums: Vec<i32>,
    },
}

impl ActivationQ {
    /// F32, Q8_0 or Q8K: the form the values are held in.
    pub fn dtype(&self) -> DType {
        match &self.repr {
            Repr::F32(_) => DType::F32,
            Repr::Q8 { dtype, .. } => *dtype,
        }
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::F32(x) => x.len(),
            Repr::Q8 { q, .. } => q.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
    let dtype = activation_dtype(row_dtype).ok_or(QuantError::Unsupported {
        dtype: row_dtype,
        op: "quantize_activation",
    })?;
    if x.len() % row_dtype.block_len() != 0 {
        return Err(QuantError::PartialBlock {
            dtype: row_dtype,
            values: x.len(),
        });
    }
    if dtype == DType::F32 {
        return Ok(ActivationQ {
            repr: Repr::F32(x.to_vec()),
        });
    }
    let mut q = vec![0i16; x.len()];
    let d = x
        .chunks_exact(dtype.block_len())
        .zip(q.chunks_exact_mut(dtype.block_len()))
        .map(|(x, q)| quantize_i16_block(x, q))
        .collect();
    let sums = q
        .chunks_exact(SUM_LEN)
        .map(|q| q.iter().map(|&v| i32::from(v)).sum())
        .collect();
    Ok(ActivationQ {
        repr: Repr::Q8 { dtype, d, q, sums },
    })
}

/// Approximate `Σ row[i] * x[i]` for a `dtype` row and an activation from
/// [`quantize_activation`] for `dtype`. The row is exact; rounding moves each `x[i]` by at
/// most `max|x|` of its block / 65534, so the result is off by at most `Σ |row[i]|` times that
/// (plus f32 rounding). Float rows dot with the unrounded `x`.
pub fn vec_dot_quantized(dtype: DType, row: &[u8], act: &ActivationQ) -> Result<f32, QuantError> {
    if activation_dtype(dtype) != Some(act.dtype()) {
        return Err(QuantError::ActivationKind {
            row: dtype,
            activation: act.dtype(),
        });
    }
    check_row(dtype, act.len(), row.len())?;
    Ok(match &act.repr {
        Repr::F32(x) => float::dot(dtype, row, x),
        Repr::Q8 { d, q, sums, .. } => {
            visit_blocks(dtype, DotQ8 { row, d, q, sums }).unwrap_or(0.0)
        }
    })
}

struct DotQ8<'a> {
    row: &'a [u8],
    d: &'a [f32],
    q: &'a [i16],
    sums: &'a [i32],
}

impl BlockVisitor for DotQ8<'_> {
    type Output = f32;

    fn visit<const B: usize, const N: usize, const S: usize>(
        self,
        unpack: impl Fn(&[u8; B], &mut Unpacked<N, S>),
    ) -> f32 {
        let sub = Unpacked::<N, S>::SUB;
        let mut u = Unpacked::new();
        let mut acc = 0.0;
        let blocks = arrays::<u8, B>(self.row)
            .zip(arrays::<i16, N>(self.q))
            .zip(self.d)
            .zip(self.sums.chunks_exact(N / SUM_LEN));
        for (((block, q8), &d8), sums) in blocks {
            unpack(block, &mut u);
            // A sub-block's dot fits i32 (16 values × |q| 32 × |q16| 32767 ≈ 1.7e7); scaled
            // and summed over a block (Q6_K: × 128 × 16) it needs i64.
            let mut qsum = 0i64;
            let mut msum = 0i64;
            let subs = u.q.chunks_exact(sub).zip(q8.chunks_exact(sub));
            let subs = subs.zip(sums.chunks_exact(sub / SUM_LEN));
            for (((q, q8), s), (&scale, &min)) in subs.zip(u.scale.iter().zip(&u.min)) {
                qsum += i64::from(scale) * i64::from(dot_i16(q, q8));
                msum += i64::from(min) * s.iter().map(|&v| i64::from(v)).sum::<i64>();
            }
            acc += d8 * (u.d * qsum as f32 - u.dmin * msum as f32);
        }
        acc
    }
}

/// Rounds a block to 16-bit integers scaled by its largest magnitude; returns the scale.
fn quantize_i16_block(x: &[f32], q: &mut [i16]) -> f32 {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    if amax == 0.0 || !amax.is_finite() {
        q.fill(0);
        return if amax.is_finite() { 0.0 } else { f32::NAN };
    }
    let d = amax / 32767.0;
    let inv = 1.0 / d;
    for (q, &v) in q.iter_mut().zip(x) {
        *q = (v * inv).round().clamp(-32767.0, 32767.0) as i16;
    }
    d
}

/// Integer dot product; i32 lanes are associative, so this vectorizes as written.
fn dot_i16(a: &[i8], b: &[i16]) -> i32 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| i32::from(x) * i32::from(y))
        .sum()
}
