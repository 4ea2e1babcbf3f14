//! Exact dot products of a stored row with an f32 vector.

use super::bits::arrays;
use super::block::{visit_blocks, BlockVisitor, Unpacked};
use super::error::check_row;
use super::{float, DType, QuantError};

/// `Σ row[i] * x[i]` for a `dtype` row of `x.len()` values, with every weight dequantized
/// exactly (as by [`dequantize_row`](super::dequantize_row)) and products summed in f32.
pub fn vec_dot_f32(dtype: DType, row: &[u8], x: &[f32]) -> Result<f32, QuantError> {
    if dtype == DType::Q8K {
        return Err(QuantError::Unsupported { dtype, op: "vec_dot_f32" });
    }
    check_row(dtype, x.len(), row.len())?;
    Ok(visit_blocks(dtype, DotF32 { row, x }).unwrap_or_else(|| float::dot(dtype, row, x)))
}

struct DotF32<'a> {
    row: &'a [u8],
    x: &'a [f32],
}

impl BlockVisitor for DotF32<'_> {
    type Output = f32;

    fn visit<const B: usize, const N: usize, const S: usize>(
        self,
        unpack: impl Fn(&[u8; B], &mut Unpacked<N, S>),
    ) -> f32 {
        let mut u = Unpacked::new();
        let mut w = [0f32; N];
        let mut acc = 0.0;
        for (block, x) in arrays::<u8, B>(self.row).zip(arrays::<f32, N>(self.x)) {
            unpack(block, &mut u);
            u.dequantize(&mut w);
            acc += dot_f32(&w, x);
        }
        acc
    }
}

/// `Σ a[i] * b[i]` over the shorter length, in eight interleaved f32 partial sums so the
/// compiler can keep them in one vector register (a single running sum cannot be
/// vectorized without changing its rounding).
pub(crate) fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    const L: usize = 8;
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; L];
    for (x, y) in arrays::<f32, L>(a).zip(arrays::<f32, L>(b)) {
        for k in 0..L {
            acc[k] += x[k] * y[k];
        }
    }
    let tail = n - n % L;
    let rest: f32 = a[tail..].iter().zip(&b[tail..]).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + rest
}
