//! Dequantization of whole rows.

use super::bits::{arrays, arrays_mut};
use super::block::{visit_blocks, BlockVisitor, Unpacked};
use super::error::check_row;
use super::{float, DType, QuantError};

/// Decodes one `dtype` row into `dst`: `src` must hold exactly `dst.len()` values.
/// Results are bit-identical to `gguf.quants.dequantize`, except that F16 NaNs come out
/// quiet (top mantissa bit set, as in ggml on x86) where numpy keeps signaling payloads.
pub fn dequantize_row(dtype: DType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    if dtype == DType::Q8K {
        return Err(QuantError::Unsupported { dtype, op: "dequantize" });
    }
    check_row(dtype, dst.len(), src.len())?;
    if visit_blocks(dtype, Dequantize { src, dst: &mut *dst }).is_none() {
        float::decode(dtype, src, dst);
    }
    Ok(())
}

struct Dequantize<'a> {
    src: &'a [u8],
    dst: &'a mut [f32],
}

impl BlockVisitor for Dequantize<'_> {
    type Output = ();

    fn visit<const B: usize, const N: usize, const S: usize>(self, unpack: impl Fn(&[u8; B], &mut Unpacked<N, S>)) {
        let mut u = Unpacked::new();
        for (block, out) in arrays::<u8, B>(self.src).zip(arrays_mut::<f32, N>(self.dst)) {
            unpack(block, &mut u);
            u.dequantize(out);
        }
    }
}
