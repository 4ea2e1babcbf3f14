//! GGUF files (llama.cpp's model format): mmap, validate, expose metadata and tensor data.
//!
//! Opening parses only the header; tensor data stays in the page cache until someone reads it
//! through [`GgufFile::tensor_data`]. Nothing here knows about models.

mod error;
mod parse;
mod value;
mod write;

pub use error::{GgufError, GgufErrorKind};
pub use parse::{TensorInfo, ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAX_DIMS};
pub use value::{Value, ValueType};
pub use write::GgufWriter;

use memmap2::Mmap;
use std::fs::File;
use std::ops::Deref;
use std::path::{Path, PathBuf};

enum Bytes {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// An open, validated GGUF file.
pub struct GgufFile {
    path: PathBuf,
    bytes: Bytes,
    version: u32,
    alignment: u64,
    data_offset: u64,
    metadata: Vec<(String, Value)>,
    tensors: Vec<TensorInfo>,
}

impl GgufFile {
    /// Maps `path` and validates its header; the tensor data is not read.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, GgufError> {
        let path = path.as_ref();
        let io_err = |e| GgufError {
            path: path.to_path_buf(),
            offset: 0,
            context: "open".to_owned(),
            kind: GgufErrorKind::Io(e),
        };
        let file = File::open(path).map_err(io_err)?;
        let meta = file.metadata().map_err(io_err)?;
        if !meta.is_file() {
            return Err(io_err(std::io::Error::other("not a regular file")));
        }
        let bytes = if meta.len() == 0 {
            // mmap of an empty file fails on some systems; parse() reports the truncation.
            Bytes::Owned(Vec::new())
        } else {
            // SAFETY: the map is read-only and private to this process. Another process
            // truncating or rewriting the file while it is mapped is outside what hrx can
            // guard against (as for every mmap-based loader); we never hand out the map mutably.
            Bytes::Mapped(unsafe { Mmap::map(&file) }.map_err(io_err)?)
        };
        Self::from_storage(path.to_path_buf(), bytes)
    }

    /// Parses a GGUF image held in memory; `name` stands for the file name in errors.
    pub fn from_bytes(name: impl Into<PathBuf>, bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
        Self::from_storage(name.into(), Bytes::Owned(bytes))
    }

    fn from_storage(path: PathBuf, bytes: Bytes) -> Result<GgufFile, GgufError> {
        match parse::parse(&bytes) {
            Ok(h) => Ok(GgufFile {
                path,
                bytes,
                version: h.version,
                alignment: h.alignment,
                data_offset: h.data_offset,
                metadata: h.metadata,
                tensors: h.tensors,
            }),
            Err(e) => Err(GgufError { path, offset: e.offset, context: e.context, kind: e.kind }),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute offset of the data section.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    pub fn file_len(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// Metadata in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Tensors in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The bytes of a tensor of this file (a slice of the map: no copy).
    pub fn tensor_data(&self, info: &TensorInfo) -> &[u8] {
        // The range was checked against the file length when the header was parsed, and
        // `info` can only come from this file's table (its fields are public, so clamp anyway).
        let start = (info.file_offset as usize).min(self.bytes.len());
        let end = start.saturating_add(info.n_bytes as usize).min(self.bytes.len());
        &self.bytes[start..end]
    }
}
