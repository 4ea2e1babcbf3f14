//! The unblocked formats F32, F16 and BF16: conversion from and to f32.
//!
//! F16 uses `half`'s slice conversions (hardware F16C where present). Every finite value,
//! infinity and NaN sign converts exactly as in gguf-py, both ways; the one difference is
//! NaN payloads: `half` sets the quiet bit, as ggml does on x86, where numpy keeps
//! signaling payloads. BF16 widens by a shift, which is exact for all bits, and narrows as
//! ggml does (round to nearest even, NaNs quieted).

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

use super::bits::{arrays, arrays_mut};
use super::dot::dot_f32;
use super::DType;

/// Values converted per step; bounds the stack buffers.
const CHUNK: usize = 64;

/// Decodes `dst.len()` values of float format `dtype` from `src`, which must hold exactly
/// that many (callers check). Other dtypes are not float formats and leave `dst` as is.
pub(crate) fn decode(dtype: DType, src: &[u8], dst: &mut [f32]) {
    match dtype {
        DType::F32 => {
            for (o, b) in dst.iter_mut().zip(arrays::<u8, 4>(src)) {
                *o = f32::from_le_bytes(*b);
            }
        }
        DType::F16 => {
            for (out, bytes) in dst.chunks_mut(CHUNK).zip(src.chunks(2 * CHUNK)) {
                let mut h = [f16::ZERO; CHUNK];
                for (h, b) in h.iter_mut().zip(arrays::<u8, 2>(bytes)) {
                    *h = f16::from_le_bytes(*b);
                }
                if let Some(h) = h.get(..out.len()) {
                    h.convert_to_f32_slice(out);
                }
            }
        }
        DType::BF16 => {
            for (o, b) in dst.iter_mut().zip(arrays::<u8, 2>(src)) {
                *o = f32::from_bits(u32::from(u16::from_le_bytes(*b)) << 16);
            }
        }
        _ => {}
    }
}

/// Dot product of a float row of `x.len()` values with `x`; `src` must hold exactly that
/// many values (callers check).
pub(crate) fn dot(dtype: DType, src: &[u8], x: &[f32]) -> f32 {
    let mut buf = [0f32; CHUNK];
    let mut acc = 0.0;
    for (bytes, x) in src.chunks(dtype.block_bytes() * CHUNK).zip(x.chunks(CHUNK)) {
        if let Some(row) = buf.get_mut(..x.len()) {
            decode(dtype, bytes, row);
            acc += dot_f32(row, x);
        }
    }
    acc
}

/// Encodes `src` into float format `dtype`; `dst` must hold exactly `src.len()` values.
/// F16 and BF16 round to nearest even, as ggml and gguf-py do (BF16 quiets NaNs).
pub(crate) fn encode(dtype: DType, src: &[f32], dst: &mut [u8]) {
    match dtype {
        DType::F32 => {
            for (b, &x) in arrays_mut::<u8, 4>(dst).zip(src) {
                *b = x.to_le_bytes();
            }
        }
        DType::F16 => {
            for (bytes, x) in dst.chunks_mut(2 * CHUNK).zip(src.chunks(CHUNK)) {
                let mut h = [f16::ZERO; CHUNK];
                if let Some(h) = h.get_mut(..x.len()) {
                    h.convert_from_f32_slice(x);
                }
                for (b, h) in arrays_mut::<u8, 2>(bytes).zip(h) {
                    *b = h.to_le_bytes();
                }
            }
        }
        DType::BF16 => {
            for (b, &x) in arrays_mut::<u8, 2>(dst).zip(src) {
                *b = bf16::from_f32(x).to_le_bytes();
            }
        }
        _ => {}
    }
}
