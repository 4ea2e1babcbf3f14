//! The error type of the quant module and the length checks every entry point shares.

use std::fmt;

use super::{DType, Simd};

/// Why a quant operation refused its arguments. Nothing is written or computed when one is returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QuantError {
    /// `values` is not a whole number of `dtype` blocks.
    PartialBlock { dtype: DType, values: usize },
    /// A `dtype` row of `values` values takes `expected` bytes, but the slice holds `given`.
    ByteLen { dtype: DType, values: usize, expected: usize, given: usize },
    /// `op` is not implemented for `dtype`.
    Unsupported { dtype: DType, op: &'static str },
    /// An activation quantized as `activation` cannot be dotted with a `row` row.
    ActivationKind { row: DType, activation: DType },
    /// `values` activation values are not a whole number of rows of `row_len`.
    PartialRow { values: usize, row_len: usize },
    /// A matrix product's output slice holds `given` values where it needs `expected`.
    OutputLen { expected: usize, given: usize },
    /// Activation rows `start..end` asked of an activation of `rows` rows.
    ActivationRange { start: usize, end: usize, rows: usize },
    /// This CPU cannot run the kernels of a [`Simd`] level.
    Simd(Simd),
}

impl fmt::Display for QuantError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            QuantError::PartialBlock { dtype, values } => {
                write!(f, "{dtype}: {values} values is not a whole number of {}-value blocks", dtype.block_len())
            }
            QuantError::ByteLen { dtype, values, expected, given } => {
                write!(f, "{dtype}: a row of {values} values takes {expected} bytes, got {given}")
            }
            QuantError::Unsupported { dtype, op } => write!(f, "{dtype}: {op} is not supported"),
            QuantError::ActivationKind { row, activation } => write!(
                f,
                "{row}: rows need a {} activation, got {activation}",
                super::activation_dtype(row).map_or("(none)", DType::name)
            ),
            QuantError::PartialRow { values, row_len } => {
                write!(f, "{values} values are not a whole number of rows of {row_len}")
            }
            QuantError::OutputLen { expected, given } => {
                write!(f, "the output holds {given} values, the product has {expected}")
            }
            QuantError::ActivationRange { start, end, rows } => {
                write!(f, "activation rows {start}..{end} asked of {rows} rows")
            }
            QuantError::Simd(simd) => write!(f, "this CPU cannot run the {} kernels", simd.name()),
        }
    }
}

impl std::error::Error for QuantError {}

/// Checks that `bytes` is exactly one `dtype` row of `values` values.
pub(crate) fn check_row(dtype: DType, values: usize, bytes: usize) -> Result<(), QuantError> {
    if !values.is_multiple_of(dtype.block_len()) {
        return Err(QuantError::PartialBlock { dtype, values });
    }
    // Cannot overflow for real slices (no format takes more than 4 bytes a value), but
    // saturating keeps that an argument rather than an assumption.
    let expected = (values / dtype.block_len()).saturating_mul(dtype.block_bytes());
    if bytes != expected {
        return Err(QuantError::ByteLen { dtype, values, expected, given: bytes });
    }
    Ok(())
}
