//! Errors of the GGUF loader: every one names the file, the key or tensor, and the byte offset.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// What is wrong, without where (that is in [`GgufError`]).
#[derive(Debug)]
pub enum GgufErrorKind {
    Io(io::Error),
    BadMagic([u8; 4]),
    BigEndian,
    UnsupportedVersion(u32),
    /// `need` bytes were wanted at the offset, the file has `have` left.
    Truncated {
        need: u64,
        have: u64,
    },
    /// A count (keys, tensors, array items, string bytes) that the rest of the file cannot hold.
    CountTooLarge {
        what: &'static str,
        count: u64,
        max: u64,
    },
    UnknownValueType(u32),
    NestingTooDeep,
    BadUtf8,
    DuplicateKey,
    WrongValueType {
        expected: &'static str,
        found: &'static str,
    },
    BadAlignment(u64),
    DuplicateTensor,
    BadDimCount(u32),
    ShapeOverflow,
    UnsupportedDType {
        id: u32,
        name: &'static str,
    },
    /// Row length not a whole number of blocks.
    RowNotWholeBlocks {
        ne0: u64,
        block_len: usize,
    },
    MisalignedTensor {
        offset: u64,
        alignment: u64,
    },
    /// The tensor's data [start, end) runs past the end of the file.
    DataOutOfRange {
        start: u64,
        end: u64,
        file_len: u64,
    },
    /// The tensor's data [start, end) does not start where the previous tensor's (padded) data
    /// ends (`expected`, a file offset): it overlaps another tensor, or leaves a gap.
    DataMisplaced {
        start: u64,
        end: u64,
        expected: u64,
    },
    /// The file runs on past where the last tensor's padded data ends (`end`): bytes that no
    /// tensor owns, as when the last tensor's type or shape was changed to a smaller one.
    TrailingData {
        end: u64,
        file_len: u64,
    },
}

impl fmt::Display for GgufErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use GgufErrorKind::*;
        match self {
            Io(e) => write!(f, "{e}"),
            BadMagic(m) => write!(f, "not a GGUF file (magic {:02x?}, expected \"GGUF\")", m),
            BigEndian => f.write_str("big-endian GGUF files are not supported"),
            UnsupportedVersion(v) => write!(f, "unsupported GGUF version {v} (hrx reads versions 2 and 3)"),
            Truncated { need, have } => {
                write!(f, "file truncated: needs {need} more bytes, {have} left")
            }
            CountTooLarge { what, count, max } => {
                write!(f, "{what} count {count} cannot fit in the rest of the file (at most {max})")
            }
            UnknownValueType(t) => write!(f, "unknown metadata value type {t}"),
            NestingTooDeep => f.write_str("arrays nested too deeply"),
            BadUtf8 => f.write_str("string is not valid UTF-8"),
            DuplicateKey => f.write_str("duplicate metadata key"),
            WrongValueType { expected, found } => write!(f, "expected a {expected} value, found {found}"),
            BadAlignment(a) => write!(f, "alignment {a} is not a power of two"),
            DuplicateTensor => f.write_str("duplicate tensor name"),
            BadDimCount(n) => write!(f, "{n} dimensions (expected 1 to 4)"),
            ShapeOverflow => f.write_str("shape overflows 64-bit element or byte counts"),
            UnsupportedDType { id, name } => write!(f, "unsupported tensor type {name} (ggml type {id})"),
            RowNotWholeBlocks { ne0, block_len } => {
                write!(f, "row length {ne0} is not a multiple of the block length {block_len}")
            }
            MisalignedTensor { offset, alignment } => {
                write!(f, "data offset {offset} is not a multiple of the alignment {alignment}")
            }
            DataOutOfRange { start, end, file_len } => {
                write!(f, "data bytes {start}..{end} run past the end of the file ({file_len} bytes)")
            }
            DataMisplaced { start, end, expected } => write!(
                f,
                "data bytes {start}..{end} should start at byte {expected}, where the previous tensor's data ends \
                 (tensors overlap, are out of order or leave a gap)"
            ),
            TrailingData { end, file_len } => write!(
                f,
                "the tensor data end at byte {end} (padded), but the file has {file_len} bytes: {} belong to no tensor \
                 (a type or shape that is too small)",
                file_len.saturating_sub(*end)
            ),
        }
    }
}

/// A GGUF error with its place: file, the key or tensor being read, and the byte offset.
#[derive(Debug)]
pub struct GgufError {
    pub path: PathBuf,
    pub offset: u64,
    /// e.g. `key "general.alignment"`, `tensor "blk.0.attn_q.weight"`, `header`.
    pub context: String,
    pub kind: GgufErrorKind,
}

impl fmt::Display for GgufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: byte {}: {}: {}", self.path.display(), self.offset, self.context, self.kind)
    }
}

impl std::error::Error for GgufError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            GgufErrorKind::Io(e) => Some(e),
            _ => None,
        }
    }
}
