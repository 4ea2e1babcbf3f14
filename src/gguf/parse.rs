//! The GGUF header parser: bytes in, validated metadata and tensor table out.
//!
//! Works on any byte slice (the mmap, or a fuzzer's input). Every read is bounds-checked, every
//! count is checked against the bytes that remain before anything is allocated for it, and
//! every size is computed with checked arithmetic, so no input can panic or exhaust memory.

use super::error::GgufErrorKind as Kind;
use super::value::{Value, ValueType};
use crate::quant::{ggml_type_name, DType};
use std::collections::HashSet;

pub const MAGIC: [u8; 4] = *b"GGUF";
pub const DEFAULT_ALIGNMENT: u64 = 32;
pub const ALIGNMENT_KEY: &str = "general.alignment";
pub const MAX_DIMS: usize = 4;
/// Arrays of arrays are legal; deeper than this is a malformed (or hostile) file.
const MAX_NESTING: usize = 8;

/// A tensor's entry in the table, its data range already checked against the file.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: DType,
    /// Elements per dimension, innermost first (ggml's ne); dimensions past `n_dims` are 1.
    pub ne: [u64; MAX_DIMS],
    pub n_dims: usize,
    /// Offset of the data relative to the start of the data section, as stored in the file.
    pub offset: u64,
    /// Absolute byte offset of the data in the file.
    pub file_offset: u64,
    pub n_bytes: u64,
}

impl TensorInfo {
    pub fn shape(&self) -> &[u64] {
        &self.ne[..self.n_dims]
    }

    pub fn n_elements(&self) -> u64 {
        self.ne.iter().product()
    }
}

/// A parsed header.
#[derive(Debug)]
pub struct Header {
    pub version: u32,
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    pub data_offset: u64,
}

/// A parse failure: where, in what, and why. The caller adds the file name.
#[derive(Debug)]
pub struct ParseError {
    pub offset: u64,
    pub context: String,
    pub kind: Kind,
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    context: String,
}

impl<'a> Cursor<'a> {
    fn fail(&self, kind: Kind) -> ParseError {
        self.fail_at(self.pos, kind)
    }

    fn fail_at(&self, pos: usize, kind: Kind) -> ParseError {
        ParseError { offset: pos as u64, context: self.context.clone(), kind }
    }

    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ParseError> {
        if n > self.remaining() {
            return Err(self.fail(Kind::Truncated { need: n as u64, have: self.remaining() as u64 }));
        }
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], ParseError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u32(&mut self) -> Result<u32, ParseError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, ParseError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A count of items each at least `min_item_bytes` long, checked against what remains.
    fn count(&mut self, what: &'static str, min_item_bytes: usize) -> Result<usize, ParseError> {
        let at = self.pos;
        let count = self.u64()?;
        let max = (self.remaining() / min_item_bytes.max(1)) as u64;
        if count > max {
            return Err(self.fail_at(at, Kind::CountTooLarge { what, count, max }));
        }
        Ok(count as usize)
    }

    fn string(&mut self) -> Result<String, ParseError> {
        let len = self.count("string byte", 1)?;
        let at = self.pos;
        let raw = self.take(len)?;
        match std::str::from_utf8(raw) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(self.fail_at(at, Kind::BadUtf8)),
        }
    }

    fn value_type(&mut self) -> Result<ValueType, ParseError> {
        let at = self.pos;
        let id = self.u32()?;
        ValueType::from_id(id).ok_or_else(|| self.fail_at(at, Kind::UnknownValueType(id)))
    }

    fn value(&mut self, ty: ValueType, depth: usize) -> Result<Value, ParseError> {
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array::<1>()?[0]),
            ValueType::I8 => Value::I8(i8::from_le_bytes(self.array()?)),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array()?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array()?)),
            ValueType::U32 => Value::U32(self.u32()?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array()?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array()?)),
            // Any non-zero byte is true, as in gguf-py.
            ValueType::Bool => Value::Bool(self.array::<1>()?[0] != 0),
            ValueType::String => Value::String(self.string()?),
            ValueType::U64 => Value::U64(self.u64()?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array()?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array()?)),
            ValueType::Array => {
                if depth >= MAX_NESTING {
                    return Err(self.fail(Kind::NestingTooDeep));
                }
                let elem = self.value_type()?;
                // Smallest encoding of one element: a scalar's size, a string's length
                // prefix, an array's type + count.
                let min_item = match elem {
                    ValueType::String => 8,
                    ValueType::Array => 12,
                    scalar => scalar.scalar_bytes().unwrap_or(1),
                };
                let n = self.count("array item", min_item)?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.value(elem, depth + 1)?);
                }
                Value::Array(elem, items)
            }
        })
    }

    fn tensor_info(&mut self, names: &mut HashSet<String>) -> Result<(TensorInfo, usize), ParseError> {
        let start = self.pos;
        let name = self.string()?;
        self.context = format!("tensor {name:?}");
        if !names.insert(name.clone()) {
            return Err(self.fail_at(start, Kind::DuplicateTensor));
        }
        let at = self.pos;
        let n_dims = self.u32()?;
        if n_dims == 0 || n_dims as usize > MAX_DIMS {
            return Err(self.fail_at(at, Kind::BadDimCount(n_dims)));
        }
        let mut ne = [1u64; MAX_DIMS];
        for d in ne.iter_mut().take(n_dims as usize) {
            *d = self.u64()?;
        }
        let at_type = self.pos;
        let type_id = self.u32()?;
        let dtype = DType::from_ggml_id(type_id).ok_or_else(|| {
            self.fail_at(at_type, Kind::UnsupportedDType { id: type_id, name: ggml_type_name(type_id) })
        })?;
        let offset = self.u64()?;
        let n_elements = ne.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
        let row_bytes = dtype
            .row_bytes(ne[0])
            .ok_or_else(|| self.fail_at(at, Kind::RowNotWholeBlocks { ne0: ne[0], block_len: dtype.block_len() }))?;
        // ggml keeps element counts in int64_t.
        let n_bytes = n_elements
            .filter(|&n| n <= i64::MAX as u64)
            .and_then(|_| ne[1..].iter().try_fold(row_bytes, |acc, &d| acc.checked_mul(d)))
            .ok_or_else(|| self.fail_at(at, Kind::ShapeOverflow))?;
        let info = TensorInfo { name, dtype, ne, n_dims: n_dims as usize, offset, file_offset: 0, n_bytes };
        Ok((info, start))
    }
}

/// Parses and validates a whole GGUF header against `bytes` (the whole file).
pub fn parse(bytes: &[u8]) -> Result<Header, ParseError> {
    let mut cur = Cursor { bytes, pos: 0, context: "header".to_owned() };
    let magic: [u8; 4] = cur.array()?;
    if magic != MAGIC {
        return Err(cur.fail_at(0, Kind::BadMagic(magic)));
    }
    let version = cur.u32()?;
    if version != 2 && version != 3 {
        // A big-endian file stores 3 as 0x03000000.
        let kind = if version.swap_bytes() == 2 || version.swap_bytes() == 3 {
            Kind::BigEndian
        } else {
            Kind::UnsupportedVersion(version)
        };
        return Err(cur.fail_at(4, kind));
    }
    // Minimal encodings: a tensor info is name length + n_dims + type + offset; a key-value is
    // key length + type + one byte.
    let n_tensors = cur.count("tensor", 8 + 4 + 4 + 8)?;
    let n_kv = cur.count("metadata key", 8 + 4 + 1)?;

    let mut metadata: Vec<(String, Value)> = Vec::with_capacity(n_kv);
    let mut keys = HashSet::with_capacity(n_kv);
    let mut alignment = DEFAULT_ALIGNMENT;
    for i in 0..n_kv {
        cur.context = format!("metadata entry {i}");
        let start = cur.pos;
        let key = cur.string()?;
        cur.context = format!("key {key:?}");
        if !keys.insert(key.clone()) {
            return Err(cur.fail_at(start, Kind::DuplicateKey));
        }
        let at = cur.pos;
        let ty = cur.value_type()?;
        let value = cur.value(ty, 0)?;
        if key == ALIGNMENT_KEY {
            alignment = match value {
                Value::U32(a) if a.is_power_of_two() => a.into(),
                Value::U32(a) => return Err(cur.fail_at(at, Kind::BadAlignment(a.into()))),
                _ => {
                    let found = ty.name();
                    return Err(cur.fail_at(at, Kind::WrongValueType { expected: "u32", found }));
                }
            };
        }
        metadata.push((key, value));
    }

    let mut names = HashSet::with_capacity(n_tensors);
    let mut tensors = Vec::with_capacity(n_tensors);
    let mut starts = Vec::with_capacity(n_tensors);
    for i in 0..n_tensors {
        cur.context = format!("tensor info {i}");
        let (info, start) = cur.tensor_info(&mut names)?;
        tensors.push(info);
        starts.push(start);
    }

    cur.context = "data section".to_owned();
    // The data section starts at the next multiple of the alignment (it may be empty).
    let data_offset = (cur.pos as u64).div_ceil(alignment) * alignment;
    let file_len = bytes.len() as u64;
    // Where the next tensor's data must start: right after the previous one's, padded to the
    // alignment, as every GGUF writer lays them out (and llama.cpp's reader requires), so no
    // two tensors share bytes and none is read from a gap.
    let mut next = 0u64;
    for (info, start) in tensors.iter_mut().zip(starts) {
        let fail = |kind| ParseError { offset: start as u64, context: format!("tensor {:?}", info.name), kind };
        if info.offset % alignment != 0 {
            return Err(fail(Kind::MisalignedTensor { offset: info.offset, alignment }));
        }
        let begin = data_offset.checked_add(info.offset);
        let end = begin.and_then(|b| b.checked_add(info.n_bytes));
        match (begin, end) {
            (Some(b), Some(e)) if e <= file_len => info.file_offset = b,
            _ => {
                return Err(fail(Kind::DataOutOfRange {
                    start: begin.unwrap_or(u64::MAX),
                    end: end.unwrap_or(u64::MAX),
                    file_len,
                }))
            }
        }
        if info.offset != next {
            return Err(fail(Kind::DataMisplaced {
                start: info.file_offset,
                end: info.file_offset + info.n_bytes,
                expected: data_offset + next,
            }));
        }
        // In range of the file, so no overflow.
        next = (info.offset + info.n_bytes).div_ceil(alignment) * alignment;
    }
    // Writers pad the last tensor's data too (gguf-py, llama.cpp) or stop right after it: bytes
    // past that padding are data no tensor owns, so some tensor's type or shape is wrong (the
    // last one's, made smaller, which the layout check above cannot see).
    let end = data_offset.saturating_add(next);
    if file_len > end {
        let context = match tensors.last() {
            Some(t) => format!("tensor {:?} (bytes {}..{})", t.name, t.file_offset, t.file_offset + t.n_bytes),
            None => "data section".to_owned(),
        };
        return Err(ParseError { offset: end, context, kind: Kind::TrailingData { end, file_len } });
    }
    Ok(Header { version, metadata, tensors, alignment, data_offset })
}
