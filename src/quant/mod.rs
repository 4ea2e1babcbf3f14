//! Block formats of GGUF tensors: layouts, dequantization, CPU dot products, quantization.
//!
//! Every format stores a row as a sequence of blocks; a block holds `block_len()` values in
//! `block_bytes()` bytes. Rows always hold a whole number of blocks.
//!
//! - [`dequantize_row`]: bytes to f32, bit-identical to gguf-py's reference dequantizers.
//! - [`vec_dot_f32`]: a row dotted with f32 values, weights dequantized exactly.
//! - [`quantize_activation`] + [`vec_dot_quantized`]: the fast path; the activation is rounded to
//!   16-bit blocks once, then each row is dotted with integer arithmetic;
//!   [`quantize_activations`] + [`ActivationRows::matmul`] do the same for many rows at once,
//!   with SIMD kernels ([`Simd`]) where the CPU has them.
//! - [`quantize_row`]: f32 to F32/F16/BF16/Q8_0/Q4_K/Q5_K/Q6_K, as ggml's reference quantizers.
//!
//! Every function checks slice lengths first and returns a [`QuantError`] on a mismatch;
//! any byte content is accepted.

use std::fmt;

mod activation;
mod bits;
mod block;
mod dequant;
mod dot;
mod error;
mod float;
mod kquantize;
mod kquants;
mod legacy;
mod quantize;
mod simd;
#[cfg(target_arch = "x86_64")]
mod x86;
#[cfg(target_arch = "x86_64")]
mod x86_bytes;
#[cfg(target_arch = "x86_64")]
mod x86_gemm;

pub use activation::{
    activation_dtype, quantize_activation, quantize_activations, quantize_activations_in_parts, vec_dot_quantized,
    vec_dot_quantized_with, ActivationPart, ActivationQ, ActivationRows,
};
pub use dequant::dequantize_row;
pub use dot::vec_dot_f32;
pub use error::QuantError;
pub use quantize::quantize_row;
pub use simd::Simd;

/// A tensor element type as numbered by ggml (the `type` field of a GGUF tensor info).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    /// Activation format for K-quant dot products (f32 scale, 256 int8, 16 i16 block sums); never in files we accept.
    Q8K,
    /// 32-bit integers (token ids, positions); run-time buffers only, never in files we accept.
    I32,
}

/// Every dtype a GGUF tensor may have in a file hrx accepts.
pub const FILE_DTYPES: [DType; 13] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q2K,
    DType::Q3K,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
];

impl DType {
    /// The dtype of ggml type id `id`, if it is one hrx reads from files.
    pub fn from_ggml_id(id: u32) -> Option<DType> {
        FILE_DTYPES.iter().copied().find(|d| d.ggml_id() == id)
    }

    /// ggml's numbering (ggml.h `enum ggml_type`).
    pub fn ggml_id(self) -> u32 {
        match self {
            DType::F32 => 0,
            DType::F16 => 1,
            DType::Q4_0 => 2,
            DType::Q4_1 => 3,
            DType::Q5_0 => 6,
            DType::Q5_1 => 7,
            DType::Q8_0 => 8,
            DType::Q2K => 10,
            DType::Q3K => 11,
            DType::Q4K => 12,
            DType::Q5K => 13,
            DType::Q6K => 14,
            DType::Q8K => 15,
            DType::BF16 => 30,
            DType::I32 => 26,
        }
    }

    /// Values per block.
    pub fn block_len(self) -> usize {
        match self {
            DType::F32 | DType::F16 | DType::BF16 | DType::I32 => 1,
            DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q5_1 | DType::Q8_0 => 32,
            DType::Q2K | DType::Q3K | DType::Q4K | DType::Q5K | DType::Q6K | DType::Q8K => 256,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::Q4_0 => 18,
            DType::Q4_1 => 20,
            DType::Q5_0 => 22,
            DType::Q5_1 => 24,
            DType::Q8_0 => 34,
            DType::Q2K => 84,
            DType::Q3K => 110,
            DType::Q4K => 144,
            DType::Q5K => 176,
            DType::Q6K => 210,
            DType::Q8K => 292,
        }
    }

    /// The name llama.cpp prints for this type.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "F32",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::Q4_0 => "Q4_0",
            DType::Q4_1 => "Q4_1",
            DType::Q5_0 => "Q5_0",
            DType::Q5_1 => "Q5_1",
            DType::Q8_0 => "Q8_0",
            DType::Q2K => "Q2_K",
            DType::Q3K => "Q3_K",
            DType::Q4K => "Q4_K",
            DType::Q5K => "Q5_K",
            DType::Q6K => "Q6_K",
            DType::Q8K => "Q8_K",
            DType::I32 => "I32",
        }
    }

    /// Bytes of a row of `n` values, or None when `n` is not a whole number of blocks
    /// or the size overflows.
    pub fn row_bytes(self, n: u64) -> Option<u64> {
        let bl = self.block_len() as u64;
        if !n.is_multiple_of(bl) {
            return None;
        }
        (n / bl).checked_mul(self.block_bytes() as u64)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Name of a ggml type id hrx does not read, for error messages.
pub fn ggml_type_name(id: u32) -> &'static str {
    match id {
        4 => "Q4_2 (removed)",
        5 => "Q4_3 (removed)",
        9 => "Q8_1",
        15 => "Q8_K",
        16 => "IQ2_XXS",
        17 => "IQ2_XS",
        18 => "IQ3_XXS",
        19 => "IQ1_S",
        20 => "IQ4_NL",
        21 => "IQ3_S",
        22 => "IQ2_S",
        23 => "IQ4_XS",
        24 => "I8",
        25 => "I16",
        26 => "I32",
        27 => "I64",
        28 => "F64",
        29 => "IQ1_M",
        34 => "TQ1_0",
        35 => "TQ2_0",
        39 => "MXFP4",
        _ => match DType::from_ggml_id(id) {
            Some(d) => d.name(),
            None => "unknown",
        },
    }
}
