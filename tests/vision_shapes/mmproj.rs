//! Random Qwen3-VL mmproj files of any shape, written with the crate's GGUF writer.

use hrx::gguf::{GgufFile, GgufWriter, Value, ValueType};
use hrx::quant::{quantize_row, DType};
use std::sync::Arc;

/// The sizes of a random vision encoder.
#[derive(Clone, Debug)]
pub struct Shape {
    pub vh: usize,
    pub heads: usize,
    pub ff: usize,
    /// One flag per block: a deepstack feature is taken after it.
    pub deepstack: Vec<bool>,
    pub out: usize,
    pub patch: usize,
    pub channels: usize,
    pub temporal: usize,
    pub merge: usize,
    /// Side of the position grid.
    pub side: usize,
}

impl Shape {
    pub fn depth(&self) -> usize {
        self.deepstack.len()
    }

    pub fn patch_row(&self) -> usize {
        self.channels * self.temporal * self.patch * self.patch
    }
}

pub struct Tensor {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<u64>,
    pub values: Vec<f32>,
}

/// Metadata and tensors before they are written: tests edit them to make broken files.
pub struct Mmproj {
    pub meta: Vec<(String, Value)>,
    pub tensors: Vec<Tensor>,
}

/// A fixed pseudo-random sequence in [-1, 1) (xorshift64).
pub struct Random(u64);

impl Random {
    pub fn new(seed: u64) -> Random {
        Random(seed.max(1))
    }

    pub fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    pub fn values(&mut self, n: usize, scale: f32, offset: f32) -> Vec<f32> {
        (0..n).map(|_| offset + scale * self.next()).collect()
    }
}

impl Mmproj {
    pub fn random(s: &Shape, seed: u64) -> Mmproj {
        let mut r = Random::new(seed);
        let u32v = |v: usize| Value::U32(v as u32);
        let floats = |v: f32| Value::Array(ValueType::F32, vec![Value::F32(v); s.channels]);
        let meta = vec![
            ("general.architecture".to_owned(), Value::String("clip".into())),
            ("clip.projector_type".to_owned(), Value::String("qwen3vl_merger".into())),
            ("clip.vision.embedding_length".to_owned(), u32v(s.vh)),
            ("clip.vision.feed_forward_length".to_owned(), u32v(s.ff)),
            ("clip.vision.block_count".to_owned(), u32v(s.depth())),
            ("clip.vision.attention.head_count".to_owned(), u32v(s.heads)),
            ("clip.vision.patch_size".to_owned(), u32v(s.patch)),
            ("clip.vision.image_size".to_owned(), u32v(s.side * s.patch)),
            ("clip.vision.projection_dim".to_owned(), u32v(s.out)),
            ("clip.vision.spatial_merge_size".to_owned(), u32v(s.merge)),
            ("clip.vision.attention.layer_norm_epsilon".to_owned(), Value::F32(1e-6)),
            (
                "clip.vision.is_deepstack_layers".to_owned(),
                Value::Array(ValueType::Bool, s.deepstack.iter().map(|&b| Value::Bool(b)).collect()),
            ),
            ("clip.vision.image_mean".to_owned(), floats(0.5)),
            ("clip.vision.image_std".to_owned(), floats(0.5)),
        ];
        let mut tensors = Vec::new();
        // Weights ~ U(-a, a) with variance 1/fan_in; biases small; norm weights near 1.
        let mut matrix = |name: String, shape: &[usize], dtype: DType, r: &mut Random| {
            let fan_in = shape[..shape.len() - 1].iter().product::<usize>();
            let n = shape.iter().product();
            let values = r.values(n, (3.0 / fan_in as f32).sqrt(), 0.0);
            tensors.push(Tensor { name, dtype, shape: shape.iter().map(|&d| d as u64).collect(), values });
        };
        for t in 0..s.temporal {
            let name = if t == 0 { "v.patch_embd.weight".to_owned() } else { format!("v.patch_embd.weight.{t}") };
            matrix(name, &[s.patch, s.patch, s.channels, s.vh], DType::F16, &mut r);
        }
        matrix("v.position_embd.weight".into(), &[s.vh, s.side * s.side], DType::F32, &mut r);
        let mut vectors: Vec<(String, usize, f32)> = vec![("v.patch_embd.bias".into(), s.vh, 0.0)];
        let mut linear = |name: &str,
                          n_in: usize,
                          n_out: usize,
                          dtype: DType,
                          r: &mut Random,
                          vectors: &mut Vec<(String, usize, f32)>| {
            matrix(format!("{name}.weight"), &[n_in, n_out], dtype, r);
            vectors.push((format!("{name}.bias"), n_out, 0.0));
        };
        let mvh = s.vh * s.merge * s.merge;
        for il in 0..s.depth() {
            let b = |x: &str| format!("v.blk.{il}.{x}");
            // One BF16 and one F32 matrix among the F16 ones: every float weight format runs.
            let qkv_dtype = if il == 0 { DType::BF16 } else { DType::F16 };
            let up_dtype = if il == 1 { DType::F32 } else { DType::F16 };
            linear(&b("attn_qkv"), s.vh, 3 * s.vh, qkv_dtype, &mut r, &mut vectors);
            linear(&b("attn_out"), s.vh, s.vh, DType::F16, &mut r, &mut vectors);
            linear(&b("ffn_up"), s.vh, s.ff, up_dtype, &mut r, &mut vectors);
            linear(&b("ffn_down"), s.ff, s.vh, DType::F16, &mut r, &mut vectors);
            for norm in ["ln1", "ln2"] {
                vectors.push((format!("{}.weight", b(norm)), s.vh, 1.0));
                vectors.push((format!("{}.bias", b(norm)), s.vh, 0.0));
            }
        }
        let deepstack = (0..s.depth()).filter(|&d| s.deepstack[d]).map(|d| {
            (format!("v.deepstack.{d}.norm"), format!("v.deepstack.{d}.fc1"), format!("v.deepstack.{d}.fc2"), mvh)
        });
        for (norm, fc1, fc2, width) in
            std::iter::once(("v.post_ln".to_owned(), "mm.0".to_owned(), "mm.2".to_owned(), s.vh)).chain(deepstack)
        {
            vectors.push((format!("{norm}.weight"), width, 1.0));
            vectors.push((format!("{norm}.bias"), width, 0.0));
            linear(&fc1, mvh, mvh, DType::F16, &mut r, &mut vectors);
            linear(&fc2, mvh, s.out, DType::F16, &mut r, &mut vectors);
        }
        for (name, n, offset) in vectors {
            let scale = if offset == 0.0 { 0.02 } else { 0.1 };
            let values = r.values(n, scale, offset);
            tensors.push(Tensor { name, dtype: DType::F32, shape: vec![n as u64], values });
        }
        Mmproj { meta, tensors }
    }

    pub fn tensor_mut(&mut self, name: &str) -> &mut Tensor {
        self.tensors.iter_mut().find(|t| t.name == name).unwrap_or_else(|| panic!("no tensor {name}"))
    }

    pub fn set(&mut self, key: &str, value: Value) {
        match self.meta.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.meta.push((key.to_owned(), value)),
        }
    }

    pub fn remove(&mut self, key: &str) {
        self.meta.retain(|(k, _)| k != key);
    }

    /// The file, encoded and parsed; `name` stands for its path in errors.
    pub fn file(&self, name: &str) -> Arc<GgufFile> {
        let mut w = GgufWriter::new();
        for (k, v) in &self.meta {
            w.set(k, v.clone());
        }
        for t in &self.tensors {
            let row = t.shape[0] as usize;
            let row_bytes = t.dtype.row_bytes(row as u64).expect("whole blocks") as usize;
            let mut data = vec![0u8; t.values.len() / row * row_bytes];
            for (src, dst) in t.values.chunks(row).zip(data.chunks_mut(row_bytes)) {
                quantize_row(t.dtype, src, dst).expect("encode a row");
            }
            w.add_tensor(&t.name, t.dtype, &t.shape, data).expect("add tensor");
        }
        Arc::new(GgufFile::from_bytes(name, w.to_bytes()).expect("parse the written file"))
    }
}
