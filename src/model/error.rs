//! Errors of reading a model's hyper-parameters and tensors from its GGUF file.

use std::fmt;
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq)]
pub struct ModelError {
    pub file: PathBuf,
    /// The metadata key or tensor at fault, e.g. `key "qwen3vl.block_count"`.
    pub what: String,
    pub message: String,
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.file.display(), self.what, self.message)
    }
}

impl std::error::Error for ModelError {}
