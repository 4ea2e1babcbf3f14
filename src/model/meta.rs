//! Typed reads of GGUF metadata and tensor shapes, each failure naming the file and the key or
//! tensor.

use super::error::ModelError;
use crate::gguf::{GgufFile, TensorInfo, Value, ValueType};
use crate::quant::DType;

/// How a key the model reads must be stored: a scalar or an array of one of `types`.
struct Stored {
    types: &'static [ValueType],
    array: bool,
    what: &'static str,
}

const UNSIGNED: &[ValueType] = &[ValueType::U8, ValueType::U16, ValueType::U32, ValueType::U64];
const FLOATS: &[ValueType] = &[ValueType::F32, ValueType::F64];
const UNSIGNED_INT: Stored = Stored { types: UNSIGNED, array: false, what: "an unsigned integer" };
const FLOAT: Stored = Stored { types: FLOATS, array: false, what: "a float (f32 or f64)" };
/// llama.cpp writes M-RoPE's sections as i32.
const INTEGER_ARRAY: Stored = Stored {
    types: &[ValueType::U8, ValueType::I8, ValueType::U16, ValueType::I16, ValueType::U32, ValueType::I32],
    array: true,
    what: "an array of integers",
};
const FLOAT_ARRAY: Stored = Stored { types: FLOATS, array: true, what: "an array of floats (f32 or f64)" };
const BOOL_ARRAY: Stored = Stored { types: &[ValueType::Bool], array: true, what: "an array of booleans" };

pub struct Meta<'a> {
    pub file: &'a GgufFile,
    /// Key prefix, e.g. `qwen3vl` or `clip.vision`.
    pub prefix: String,
}

impl<'a> Meta<'a> {
    pub fn new(file: &'a GgufFile, prefix: &str) -> Meta<'a> {
        Meta { file, prefix: prefix.to_owned() }
    }

    fn key(&self, name: &str) -> String {
        format!("{}.{name}", self.prefix)
    }

    pub fn error(&self, what: String, message: impl Into<String>) -> ModelError {
        ModelError { file: self.file.path().to_path_buf(), what, message: message.into() }
    }

    /// The value of `key`, which must be stored as `want` says: a value of another type with
    /// the same bytes (an epsilon stored as U32) is not read as a number.
    fn typed(&self, key: &str, want: &Stored) -> Result<Option<&'a Value>, ModelError> {
        let Some(v) = self.file.get(key) else { return Ok(None) };
        let (stored, array) = match v {
            Value::Array(element, _) => (*element, true),
            v => (v.value_type(), false),
        };
        if !want.types.contains(&stored) || array != want.array {
            let stored = if array { format!("an array of {}", stored.name()) } else { stored.name().to_owned() };
            let what = want.what;
            return Err(self.error(format!("key {key:?}"), format!("is stored as {stored}; the model reads {what}")));
        }
        Ok(Some(v))
    }

    /// The value of the required `name`, stored as `want` says.
    fn required(&self, name: &str, want: &Stored) -> Result<(String, &'a Value), ModelError> {
        let key = self.key(name);
        match self.typed(&key, want)? {
            Some(v) => Ok((key, v)),
            None => Err(self.error(format!("key {key:?}"), "missing")),
        }
    }

    /// A positive integer no larger than `max` (sizes that later multiply must stay sane),
    /// stored as an unsigned integer.
    pub fn size(&self, name: &str, max: usize) -> Result<usize, ModelError> {
        let (key, v) = self.required(name, &UNSIGNED_INT)?;
        match v.as_u64() {
            Some(n) if n >= 1 && n <= max as u64 => Ok(n as usize),
            _ => Err(self.error(format!("key {key:?}"), format!("{v} is not a size in 1..={max}"))),
        }
    }

    pub fn size_or(&self, name: &str, max: usize, default: usize) -> Result<usize, ModelError> {
        if self.file.get(&self.key(name)).is_none() {
            return Ok(default);
        }
        self.size(name, max)
    }

    /// A count that may be 0 or absent (absent = 0), stored as an unsigned integer.
    pub fn count_or_zero(&self, name: &str, max: usize) -> Result<usize, ModelError> {
        let key = self.key(name);
        match self.typed(&key, &UNSIGNED_INT)? {
            None => Ok(0),
            Some(v) => match v.as_u64() {
                Some(n) if n <= max as u64 => Ok(n as usize),
                _ => Err(self.error(format!("key {key:?}"), format!("{v} is not a count in 0..={max}"))),
            },
        }
    }

    /// A finite positive float, stored as F32 or F64.
    pub fn positive(&self, name: &str) -> Result<f32, ModelError> {
        let (key, v) = self.required(name, &FLOAT)?;
        match v.as_f32() {
            Some(x) if x.is_finite() && x > 0.0 => Ok(x),
            _ => Err(self.error(format!("key {key:?}"), format!("{v} is not a positive number"))),
        }
    }

    /// An array of non-negative integers.
    pub fn sizes(&self, name: &str) -> Result<Vec<usize>, ModelError> {
        let (key, v) = self.required(name, &INTEGER_ARRAY)?;
        v.as_array()
            .and_then(|items| items.iter().map(|i| i.as_u32().map(|x| x as usize)).collect::<Option<Vec<_>>>())
            .ok_or_else(|| self.error(format!("key {key:?}"), format!("{v} is not an array of sizes")))
    }

    /// An array of finite floats, stored as F32 or F64.
    pub fn floats(&self, name: &str) -> Result<Vec<f32>, ModelError> {
        let (key, v) = self.required(name, &FLOAT_ARRAY)?;
        v.as_array()
            .and_then(|items| items.iter().map(|i| i.as_f32().filter(|x| x.is_finite())).collect::<Option<Vec<_>>>())
            .ok_or_else(|| self.error(format!("key {key:?}"), format!("{v} is not an array of finite numbers")))
    }

    /// An array of booleans.
    pub fn flags(&self, name: &str) -> Result<Vec<bool>, ModelError> {
        let (key, v) = self.required(name, &BOOL_ARRAY)?;
        v.as_array()
            .and_then(|items| items.iter().map(|i| i.as_bool()).collect::<Option<Vec<_>>>())
            .ok_or_else(|| self.error(format!("key {key:?}"), format!("{v} is not an array of booleans")))
    }

    /// The tensor `name`, which must have exactly `shape` (innermost first).
    pub fn tensor(&self, name: &str, shape: &[usize]) -> Result<&'a TensorInfo, ModelError> {
        let t = self.file.tensor(name).ok_or_else(|| self.error(format!("tensor {name:?}"), "missing"))?;
        let want: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
        let mut have: Vec<u64> = t.shape().to_vec();
        while have.len() > want.len() && have.last() == Some(&1) {
            have.pop();
        }
        if have != want {
            return Err(self.error(format!("tensor {name:?}"), format!("shape {:?}, expected {want:?}", t.shape())));
        }
        Ok(t)
    }

    /// A tensor's dtype, for tensors the graph takes as weights.
    pub fn dtype(&self, name: &str, shape: &[usize]) -> Result<DType, ModelError> {
        Ok(self.tensor(name, shape)?.dtype)
    }

    /// The dtype of the vector `name` of `width` values (a norm's scale, a bias), which must be
    /// one of `allowed`: a quantized vector is a mislabelled one.
    pub fn vector_dtype(&self, name: &str, width: usize, allowed: &[DType]) -> Result<DType, ModelError> {
        let t = self.tensor(name, &[width])?;
        if !allowed.contains(&t.dtype) {
            let allowed: Vec<String> = allowed.iter().map(|d| d.to_string()).collect();
            return Err(self.error(
                Self::placed(t),
                format!("is {}, expected {} (a vector the graph adds or multiplies in)", t.dtype, allowed.join(" or ")),
            ));
        }
        Ok(t.dtype)
    }

    /// Refuses a file holding a tensor the model does not read (`read`: every tensor it reads),
    /// such as the layers past a `block_count` that is too small: its metadata and tensors
    /// disagree, and running it would silently drop weights.
    pub fn check_all_read(&self, read: &std::collections::BTreeMap<String, DType>) -> Result<(), ModelError> {
        match self.file.tensors().iter().find(|t| !read.contains_key(&t.name)) {
            Some(t) => Err(self.error(
                Self::placed(t),
                "is not read by the model its metadata describes (metadata and tensors disagree)",
            )),
            None => Ok(()),
        }
    }

    /// `tensor "name" (bytes start..end)`.
    fn placed(t: &TensorInfo) -> String {
        format!("tensor {:?} (bytes {}..{})", t.name, t.file_offset, t.file_offset + t.n_bytes)
    }
}
