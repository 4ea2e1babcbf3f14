//! Writing GGUF files (version 3), for `hrx synth` and for tests that need files of any shape.

use super::parse::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC, MAX_DIMS};
use super::value::Value;
use crate::quant::DType;
use std::fmt;

/// Why a tensor cannot be added.
#[derive(Debug, PartialEq)]
pub struct WriteError(pub String);

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WriteError {}

struct PendingTensor {
    name: String,
    dtype: DType,
    shape: Vec<u64>,
    /// Its bytes, or None for a tensor of zeros left to the file system ([`GgufWriter::write_sparse`]).
    data: Option<Vec<u8>>,
    bytes: u64,
}

/// Collects metadata and tensors, then lays them out as a GGUF v3 image.
pub struct GgufWriter {
    metadata: Vec<(String, Value)>,
    tensors: Vec<PendingTensor>,
    alignment: u64,
}

impl Default for GgufWriter {
    fn default() -> Self {
        GgufWriter { metadata: Vec::new(), tensors: Vec::new(), alignment: DEFAULT_ALIGNMENT }
    }
}

impl GgufWriter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a metadata entry. `general.alignment` (u32, power of two) also sets
    /// the layout's alignment.
    pub fn set(&mut self, key: &str, value: Value) {
        if let (ALIGNMENT_KEY, Value::U32(a)) = (key, &value) {
            if a.is_power_of_two() {
                self.alignment = u64::from(*a);
            }
        }
        match self.metadata.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.metadata.push((key.to_owned(), value)),
        }
    }

    /// Adds a tensor; `data` must be exactly the encoded bytes of `shape` (innermost first).
    pub fn add_tensor(&mut self, name: &str, dtype: DType, shape: &[u64], data: Vec<u8>) -> Result<(), WriteError> {
        let bytes = self.check_tensor(name, dtype, shape)?;
        if bytes != data.len() as u64 {
            return Err(WriteError(format!(
                "tensor {name:?}: {} bytes given, shape {shape:?} of {dtype} needs {bytes}",
                data.len()
            )));
        }
        self.tensors.push(PendingTensor {
            name: name.to_owned(),
            dtype,
            shape: shape.to_vec(),
            data: Some(data),
            bytes,
        });
        Ok(())
    }

    /// Adds a tensor of zeros, which [`GgufWriter::write_sparse`] leaves as a hole: a file with
    /// a model's shapes and none of its bytes, for planning tests.
    pub fn add_zeros(&mut self, name: &str, dtype: DType, shape: &[u64]) -> Result<(), WriteError> {
        let bytes = self.check_tensor(name, dtype, shape)?;
        self.tensors.push(PendingTensor { name: name.to_owned(), dtype, shape: shape.to_vec(), data: None, bytes });
        Ok(())
    }

    /// The bytes of a new tensor `name` of `shape`, or why it cannot be added.
    fn check_tensor(&self, name: &str, dtype: DType, shape: &[u64]) -> Result<u64, WriteError> {
        if shape.is_empty() || shape.len() > MAX_DIMS {
            return Err(WriteError(format!("tensor {name:?}: {} dimensions (expected 1 to 4)", shape.len())));
        }
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(WriteError(format!("tensor {name:?} added twice")));
        }
        dtype
            .row_bytes(shape[0])
            .and_then(|row| shape[1..].iter().try_fold(row, |acc, &d| acc.checked_mul(d)))
            .ok_or_else(|| WriteError(format!("tensor {name:?}: shape {shape:?} is not whole {dtype} blocks")))
    }

    /// The whole file.
    pub fn to_bytes(&self) -> Vec<u8> {
        let (mut out, offsets) = self.header();
        let data_start = out.len() as u64;
        for (t, off) in self.tensors.iter().zip(offsets) {
            out.resize((data_start + off) as usize, 0);
            match &t.data {
                Some(data) => out.extend_from_slice(data),
                None => out.resize((data_start + off + t.bytes) as usize, 0),
            }
        }
        out
    }

    /// Writes the file at `path`, the bytes of tensors added with [`GgufWriter::add_zeros`]
    /// left as holes (zeros the file system does not store).
    pub fn write_sparse(&self, path: &std::path::Path) -> std::io::Result<()> {
        use std::io::{Seek, SeekFrom, Write};
        let (header, offsets) = self.header();
        let mut file = std::fs::File::create(path)?;
        file.write_all(&header)?;
        let data_start = header.len() as u64;
        let mut end = data_start;
        for (t, off) in self.tensors.iter().zip(offsets) {
            if let Some(data) = &t.data {
                file.seek(SeekFrom::Start(data_start + off))?;
                file.write_all(data)?;
            }
            end = data_start + off + t.bytes;
        }
        file.set_len(end)
    }

    /// The header and tensor infos, padded to the alignment (where the data starts), and each
    /// tensor's offset from there.
    fn header(&self) -> (Vec<u8>, Vec<u64>) {
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            put_string(&mut out, key);
            out.extend_from_slice(&value.value_type().id().to_le_bytes());
            put_value(&mut out, value);
        }
        let mut offset = 0u64;
        let mut offsets = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            put_string(&mut out, &t.name);
            out.extend_from_slice(&(t.shape.len() as u32).to_le_bytes());
            for d in &t.shape {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.dtype.ggml_id().to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offsets.push(offset);
            offset = (offset + t.bytes).div_ceil(self.alignment) * self.alignment;
        }
        let data_start = (out.len() as u64).div_ceil(self.alignment) * self.alignment;
        out.resize(data_start as usize, 0);
        (out, offsets)
    }
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::U8(v) => out.push(*v),
        Value::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::Bool(v) => out.push(u8::from(*v)),
        Value::String(s) => put_string(out, s),
        Value::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::Array(ty, items) => {
            out.extend_from_slice(&ty.id().to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                put_value(out, item);
            }
        }
    }
}
