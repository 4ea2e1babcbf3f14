//! Quantization of f32 rows (for writing test models): the float formats, Q8_0 and, in
//! [`kquantize`](super::kquantize), Q4_K, Q5_K and Q6_K.

use super::bits::{arrays, arrays_mut, f16_bytes};
use super::error::check_row;
use super::{float, kquantize, DType, QuantError};

/// Encodes `src` as one `dtype` row into `dst`, which must be exactly `src.len()` values of
/// `dtype` long. Supported: F32, F16, BF16, Q8_0, Q4_K, Q5_K, Q6_K. Bit-identical to
/// ggml's reference quantizers (`quantize_row_*_ref`, and for F16 / BF16 its conversions),
/// for F16 / BF16 / Q8_0 also to gguf-py's (F16 NaN payloads aside, see `float.rs`).
pub fn quantize_row(dtype: DType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    // `None`: a float format, encoded value by value.
    let blockwise: Option<RowQuantizer> = match dtype {
        DType::F32 | DType::F16 | DType::BF16 => None,
        DType::Q8_0 => Some(|x, b| blocks(x, b, quantize_q8_0)),
        DType::Q4K => Some(|x, b| blocks(x, b, kquantize::quantize_q4_k)),
        DType::Q5K => Some(|x, b| blocks(x, b, kquantize::quantize_q5_k)),
        DType::Q6K => Some(|x, b| blocks(x, b, kquantize::quantize_q6_k)),
        _ => return Err(QuantError::Unsupported { dtype, op: "quantize" }),
    };
    check_row(dtype, src.len(), dst.len())?;
    match blockwise {
        Some(f) => f(src, dst),
        None => float::encode(dtype, src, dst),
    }
    Ok(())
}

type RowQuantizer = fn(&[f32], &mut [u8]);

/// Applies a per-block quantizer over a validated row.
fn blocks<const N: usize, const B: usize>(src: &[f32], dst: &mut [u8], f: fn(&[f32; N], &mut [u8; B])) {
    for (x, b) in arrays::<f32, N>(src).zip(arrays_mut::<u8, B>(dst)) {
        f(x, b);
    }
}

/// Symmetric 8-bit quantization of one block (ggml's `quantize_row_q8_0_ref`):
/// `d = max|x| / 127`, `q = round(x / d)` with ties away from zero, computed as `x * (1/d)`.
/// Returns `d` unrounded; Q8_0 stores it as f16, activations keep it.
pub(crate) fn quantize_q8_block(x: &[f32], q: &mut [i8]) -> f32 {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    for (q, &v) in q.iter_mut().zip(x) {
        // `as` saturates (and maps NaN to 0), so odd inputs cannot wrap.
        *q = (v * id).round() as i8;
    }
    d
}

fn quantize_q8_0(x: &[f32; 32], b: &mut [u8; 34]) {
    let mut q = [0i8; 32];
    let d = quantize_q8_block(x, &mut q);
    let [d0, d1] = f16_bytes(d);
    b[0] = d0;
    b[1] = d1;
    for (b, q) in b[2..].iter_mut().zip(q) {
        *b = q as u8;
    }
}
