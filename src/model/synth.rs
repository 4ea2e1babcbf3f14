//! Random-weight Qwen3-VL models of any shape, written as GGUF files the loader reads like
//! llama.cpp's: text decoders and vision projectors (mmproj), for tests of shapes the oracle
//! lacks and for benchmarks (the 2B shapes) where real weights are not at hand.

use super::text_params::ARCH;
use crate::gguf::{GgufFile, GgufWriter, Value, ValueType};
use crate::quant::{quantize_row, DType};
use crate::rng::SplitMix64;
use crate::tokenizer::byte_tokens;

/// Shape and format of a synthetic text model.
#[derive(Clone, Debug, PartialEq)]
pub struct TextSpec {
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    /// Ignored when the vocabulary is copied from another file.
    pub n_vocab: usize,
    pub n_deepstack: usize,
    pub rope_sections: [usize; 3],
    pub weights: WeightFormat,
    pub tied_output: bool,
    pub seed: u64,
}

/// How 2-D weights are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightFormat {
    F16,
    BF16,
    Q8_0,
    /// llama.cpp's Q4_K_M mix: Q4_K, with Q6_K for the embedding/output and for attn_v and
    /// ffn_down in the layers llama-quantize gives more bits.
    Q4KM,
    /// The same mix with Q5_K in place of Q4_K (llama.cpp's Q5_K_M).
    Q5KM,
}

impl TextSpec {
    /// Qwen3-VL-2B-Instruct's text decoder.
    pub fn qwen3vl_2b() -> TextSpec {
        TextSpec {
            n_layer: 28,
            n_embd: 2048,
            n_ff: 6144,
            n_head: 16,
            n_head_kv: 8,
            head_dim: 128,
            n_vocab: 151_936,
            n_deepstack: 3,
            rope_sections: [24, 20, 20],
            weights: WeightFormat::Q4KM,
            tied_output: true,
            seed: 1,
        }
    }

    fn dtype_of(&self, name: &str, layer: Option<usize>) -> DType {
        match self.weights {
            WeightFormat::F16 => DType::F16,
            WeightFormat::BF16 => DType::BF16,
            WeightFormat::Q8_0 => DType::Q8_0,
            WeightFormat::Q4KM | WeightFormat::Q5KM => {
                let more_bits = |i: usize| {
                    let n = self.n_layer;
                    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
                };
                let big = name == "token_embd" || name == "output";
                let mixed = matches!(name, "attn_v" | "ffn_down") && layer.is_some_and(more_bits);
                match (big || mixed, self.weights) {
                    (true, _) => DType::Q6K,
                    (false, WeightFormat::Q5KM) => DType::Q5K,
                    (false, _) => DType::Q4K,
                }
            }
        }
    }
}

/// Box-Muller normal samples from a splitmix64 stream.
struct Normal(SplitMix64);

impl Normal {
    fn sample(&mut self, std: f64) -> f32 {
        let (u, v) = (self.0.next_f64().max(1e-300), self.0.next_f64());
        ((-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos() * std) as f32
    }
}

struct Writer {
    w: GgufWriter,
    rng: Normal,
    /// Tensors are shapes only, their bytes zeros (`GgufWriter::add_zeros`).
    zeros: bool,
}

impl Writer {
    /// A [cols, rows] matrix (ggml order) with N(0, std) values, stored as `dtype`.
    fn matrix(&mut self, name: &str, dtype: DType, cols: usize, rows: usize, std: f64) -> Result<(), String> {
        self.tensor(name, dtype, &[cols, rows], std)
    }

    /// A tensor of `shape` (ggml order; rows of shape[0] values) with N(0, std) values.
    fn tensor(&mut self, name: &str, dtype: DType, shape: &[usize], std: f64) -> Result<(), String> {
        let dims: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
        if self.zeros {
            return self.w.add_zeros(name, dtype, &dims).map_err(|e| e.to_string());
        }
        let (cols, rows) = (shape[0], shape[1..].iter().product::<usize>());
        let row_bytes =
            dtype.row_bytes(cols as u64).ok_or_else(|| format!("{name}: {cols} is not whole {dtype} blocks"))? as usize;
        // Each row draws from its own stream, seeded from the model's stream and the row
        // index, so the file depends on the seed only while sampling and quantizing (the slow
        // parts) run on every core.
        let base = self.rng.0.next_u64();
        let mut data = vec![0u8; row_bytes * rows];
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let rows_per = rows.div_ceil(threads).max(1);
        let results: Vec<Result<(), String>> = std::thread::scope(|s| {
            let workers: Vec<_> = data
                .chunks_mut(rows_per * row_bytes)
                .enumerate()
                .map(|(chunk, dst)| {
                    s.spawn(move || {
                        let mut row = vec![0f32; cols];
                        for (i, out) in dst.chunks_mut(row_bytes).enumerate() {
                            let r = (chunk * rows_per + i) as u64;
                            let mut rng = Normal(SplitMix64(base ^ r.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
                            row.iter_mut().for_each(|v| *v = rng.sample(std));
                            quantize_row(dtype, &row, out).map_err(|e| format!("{name}: {e}"))?;
                        }
                        Ok(())
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().unwrap_or_else(|_| Err(format!("{name}: a quantizer thread failed"))))
                .collect()
        });
        results.into_iter().collect::<Result<(), String>>()?;
        self.w.add_tensor(name, dtype, &dims, data).map_err(|e| e.to_string())
    }

    /// A norm weight: 1 + N(0, 0.1), f32.
    fn norm(&mut self, name: &str, n: usize) -> Result<(), String> {
        self.vector(name, n, 1.0, 0.1)
    }

    /// An f32 vector: `mean` + N(0, std).
    fn vector(&mut self, name: &str, n: usize, mean: f32, std: f64) -> Result<(), String> {
        if self.zeros {
            return self.w.add_zeros(name, DType::F32, &[n as u64]).map_err(|e| e.to_string());
        }
        let data: Vec<u8> = (0..n).flat_map(|_| (mean + self.rng.sample(std)).to_le_bytes()).collect();
        self.w.add_tensor(name, DType::F32, &[n as u64], data).map_err(|e| e.to_string())
    }

    fn u32(&mut self, key: &str, v: usize) {
        self.w.set(&format!("{ARCH}.{key}"), Value::U32(v as u32));
    }
}

/// Tokenizer metadata: copied from `vocab` when given, else the 256 byte tokens plus Qwen's
/// chat tokens, padded with unused tokens to `n_vocab`.
fn tokenizer_metadata(w: &mut GgufWriter, vocab: Option<&GgufFile>, n_vocab: usize) -> Result<usize, String> {
    if let Some(file) = vocab {
        let tokens = file
            .get("tokenizer.ggml.tokens")
            .and_then(Value::as_array)
            .ok_or("the vocabulary file has no tokenizer.ggml.tokens")?;
        let n = tokens.len();
        for (key, value) in file.metadata() {
            if key.starts_with("tokenizer.") {
                w.set(key, value.clone());
            }
        }
        return Ok(n);
    }
    let mut tokens = byte_tokens();
    let mut types = vec![1i32; tokens.len()];
    for special in
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>"]
    {
        tokens.push(special.to_owned());
        types.push(3);
    }
    if n_vocab < tokens.len() {
        return Err(format!("a vocabulary of {n_vocab} is smaller than the {} built-in tokens", tokens.len()));
    }
    while tokens.len() < n_vocab {
        types.push(5);
        tokens.push(format!("[PAD{}]", tokens.len()));
    }
    let strings = |v: Vec<String>| Value::Array(ValueType::String, v.into_iter().map(Value::String).collect());
    w.set("tokenizer.ggml.model", Value::String("gpt2".into()));
    w.set("tokenizer.ggml.pre", Value::String("qwen2".into()));
    w.set("tokenizer.ggml.tokens", strings(tokens));
    w.set("tokenizer.ggml.token_type", Value::Array(ValueType::I32, types.into_iter().map(Value::I32).collect()));
    w.set("tokenizer.ggml.merges", strings(Vec::new()));
    w.set("tokenizer.ggml.eos_token_id", Value::U32(258));
    w.set("tokenizer.ggml.bos_token_id", Value::U32(256));
    Ok(n_vocab)
}

/// The GGUF image of a random text model of `spec`'s shape.
pub fn text_model(spec: &TextSpec, vocab: Option<&GgufFile>) -> Result<Vec<u8>, String> {
    Ok(text_writer(spec, vocab, false)?.to_bytes())
}

/// A text model of `spec`'s shape at `path` whose tensors are zeros left as holes (a few MB
/// on disk at any shape): what planning reads, for tests of the 2B shapes.
pub fn write_text_layout(spec: &TextSpec, path: &std::path::Path) -> Result<(), String> {
    text_writer(spec, None, true)?.write_sparse(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// The text model's writer, its tensors random or (`zeros`) shapes only.
fn text_writer(spec: &TextSpec, vocab: Option<&GgufFile>, zeros: bool) -> Result<GgufWriter, String> {
    let s = spec;
    if !s.n_head.is_multiple_of(s.n_head_kv)
        || !s.head_dim.is_multiple_of(4)
        || s.rope_sections.iter().sum::<usize>() > s.head_dim / 2
    {
        return Err(format!(
            "inconsistent attention shape: {} heads, {} kv heads, head_dim {}, sections {:?}",
            s.n_head, s.n_head_kv, s.head_dim, s.rope_sections
        ));
    }
    let mut w = Writer { w: GgufWriter::new(), rng: Normal(SplitMix64(spec.seed)), zeros };
    w.w.set("general.architecture", Value::String(ARCH.into()));
    w.w.set("general.name", Value::String("hrx-synth".into()));
    let n_vocab = tokenizer_metadata(&mut w.w, vocab, s.n_vocab)?;
    w.u32("block_count", s.n_layer);
    w.u32("context_length", 262_144);
    w.u32("embedding_length", s.n_embd);
    w.u32("feed_forward_length", s.n_ff);
    w.u32("attention.head_count", s.n_head);
    w.u32("attention.head_count_kv", s.n_head_kv);
    w.u32("attention.key_length", s.head_dim);
    w.u32("attention.value_length", s.head_dim);
    w.u32("n_deepstack_layers", s.n_deepstack);
    w.w.set(&format!("{ARCH}.rope.freq_base"), Value::F32(5e6));
    w.w.set(&format!("{ARCH}.attention.layer_norm_rms_epsilon"), Value::F32(1e-6));
    let sections = [s.rope_sections[0], s.rope_sections[1], s.rope_sections[2], 0];
    w.w.set(
        &format!("{ARCH}.rope.dimension_sections"),
        Value::Array(ValueType::I32, sections.iter().map(|&x| Value::I32(x as i32)).collect()),
    );

    let (e, q, kv) = (s.n_embd, s.n_head * s.head_dim, s.n_head_kv * s.head_dim);
    w.matrix("token_embd.weight", s.dtype_of("token_embd", None), e, n_vocab, 0.02)?;
    if !s.tied_output {
        w.matrix("output.weight", s.dtype_of("output", None), e, n_vocab, 0.02)?;
    }
    w.norm("output_norm.weight", e)?;
    let fan = |n: usize| 1.0 / (n as f64).sqrt();
    for il in 0..s.n_layer {
        let name = |t: &str| format!("blk.{il}.{t}.weight");
        let l = Some(il);
        w.norm(&name("attn_norm"), e)?;
        w.matrix(&name("attn_q"), s.dtype_of("attn_q", l), e, q, fan(e))?;
        w.matrix(&name("attn_k"), s.dtype_of("attn_k", l), e, kv, fan(e))?;
        w.matrix(&name("attn_v"), s.dtype_of("attn_v", l), e, kv, fan(e))?;
        w.matrix(&name("attn_output"), s.dtype_of("attn_output", l), q, e, fan(q))?;
        w.norm(&name("attn_q_norm"), s.head_dim)?;
        w.norm(&name("attn_k_norm"), s.head_dim)?;
        w.norm(&name("ffn_norm"), e)?;
        w.matrix(&name("ffn_gate"), s.dtype_of("ffn_gate", l), e, s.n_ff, fan(e))?;
        w.matrix(&name("ffn_up"), s.dtype_of("ffn_up", l), e, s.n_ff, fan(e))?;
        w.matrix(&name("ffn_down"), s.dtype_of("ffn_down", l), s.n_ff, e, fan(s.n_ff))?;
    }
    Ok(w.w)
}

/// Shape of a synthetic Qwen3-VL vision projector (an mmproj file).
#[derive(Clone, Debug, PartialEq)]
pub struct VisionSpec {
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_head: usize,
    pub patch: usize,
    pub temporal: usize,
    pub merge: usize,
    /// Side of the learned position grid (position embeddings: side * side).
    pub pos_side: usize,
    /// Width of the text model the projector feeds.
    pub n_out: usize,
    /// The blocks after which a deepstack feature is taken.
    pub deepstack: Vec<usize>,
    /// How matrices are stored (F16 as llama.cpp's mmproj-F16 files, BF16 or F32).
    pub dtype: DType,
    pub seed: u64,
}

impl VisionSpec {
    /// Qwen3-VL-2B-Instruct's vision tower: 24 blocks of width 1024, MLP 4096, 16 heads, 16 x 16
    /// patches over 2 frames, 2 x 2 merges, 48 x 48 position embeddings, deepstack after blocks
    /// 5, 11 and 17, projected to the text model's 2048.
    pub fn qwen3vl_2b() -> VisionSpec {
        VisionSpec {
            n_layer: 24,
            n_embd: 1024,
            n_ff: 4096,
            n_head: 16,
            patch: 16,
            temporal: 2,
            merge: 2,
            pos_side: 48,
            n_out: 2048,
            deepstack: vec![5, 11, 17],
            dtype: DType::F16,
            seed: 1,
        }
    }
}

/// The GGUF image of a random vision projector of `spec`'s shape, laid out as llama.cpp's
/// converter writes Qwen3-VL's (`clip` architecture, `qwen3vl_merger` projector).
pub fn vision_model(spec: &VisionSpec) -> Result<Vec<u8>, String> {
    Ok(vision_writer(spec, false)?.to_bytes())
}

/// A vision projector of `spec`'s shape at `path` whose tensors are zeros left as holes.
pub fn write_vision_layout(spec: &VisionSpec, path: &std::path::Path) -> Result<(), String> {
    vision_writer(spec, true)?.write_sparse(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// The projector's writer, its tensors random or (`zeros`) shapes only.
fn vision_writer(spec: &VisionSpec, zeros: bool) -> Result<GgufWriter, String> {
    use super::vision_params::{patch_embd_name, MergerNames, ARCH as CLIP, PROJECTOR};
    let s = spec;
    if s.n_head == 0 || !s.n_embd.is_multiple_of(4 * s.n_head) || s.deepstack.iter().any(|&d| d >= s.n_layer) {
        return Err(format!(
            "inconsistent vision shape: width {}, {} heads, deepstack {:?} of {} blocks",
            s.n_embd, s.n_head, s.deepstack, s.n_layer
        ));
    }
    let mut w = Writer { w: GgufWriter::new(), rng: Normal(SplitMix64(spec.seed)), zeros };
    let key = |k: &str| format!("{CLIP}.vision.{k}");
    let size = |v: usize| Value::U32(v as u32);
    w.w.set("general.architecture", Value::String(CLIP.into()));
    w.w.set("general.name", Value::String("hrx-synth-vision".into()));
    w.w.set("clip.projector_type", Value::String(PROJECTOR.into()));
    w.w.set("clip.has_vision_encoder", Value::Bool(true));
    for (k, v) in [
        ("embedding_length", s.n_embd),
        ("feed_forward_length", s.n_ff),
        ("block_count", s.n_layer),
        ("attention.head_count", s.n_head),
        ("patch_size", s.patch),
        ("image_size", s.pos_side * s.patch),
        ("projection_dim", s.n_out),
        ("spatial_merge_size", s.merge),
    ] {
        w.w.set(&key(k), size(v));
    }
    w.w.set(&key("attention.layer_norm_epsilon"), Value::F32(1e-6));
    let flags = (0..s.n_layer).map(|i| Value::Bool(s.deepstack.contains(&i))).collect();
    w.w.set(&key("is_deepstack_layers"), Value::Array(ValueType::Bool, flags));
    let half = Value::Array(ValueType::F32, vec![Value::F32(0.5); 3]);
    w.w.set(&key("image_mean"), half.clone());
    w.w.set(&key("image_std"), half);

    let (vh, mvh) = (s.n_embd, s.n_embd * s.merge * s.merge);
    let fan = |n: usize| 1.0 / (n as f64).sqrt();
    for t in 0..s.temporal {
        w.tensor(&patch_embd_name(t), DType::F16, &[s.patch, s.patch, 3, vh], fan(3 * s.patch * s.patch * s.temporal))?;
    }
    w.vector("v.patch_embd.bias", vh, 0.0, 0.02)?;
    w.matrix("v.position_embd.weight", s.dtype, vh, s.pos_side * s.pos_side, 0.02)?;
    let linear = |w: &mut Writer, name: &str, n_in: usize, n_out: usize| -> Result<(), String> {
        w.matrix(&format!("{name}.weight"), s.dtype, n_in, n_out, fan(n_in))?;
        w.vector(&format!("{name}.bias"), n_out, 0.0, 0.02)
    };
    let layer_norm = |w: &mut Writer, name: &str, n: usize| -> Result<(), String> {
        w.norm(&format!("{name}.weight"), n)?;
        w.vector(&format!("{name}.bias"), n, 0.0, 0.02)
    };
    for il in 0..s.n_layer {
        let b = |x: &str| format!("v.blk.{il}.{x}");
        layer_norm(&mut w, &b("ln1"), vh)?;
        linear(&mut w, &b("attn_qkv"), vh, 3 * vh)?;
        linear(&mut w, &b("attn_out"), vh, vh)?;
        layer_norm(&mut w, &b("ln2"), vh)?;
        linear(&mut w, &b("ffn_up"), vh, s.n_ff)?;
        linear(&mut w, &b("ffn_down"), s.n_ff, vh)?;
    }
    let mergers = std::iter::once((MergerNames::final_merger(), vh))
        .chain(s.deepstack.iter().map(|&d| (MergerNames::deepstack(d), mvh)));
    for (names, norm_width) in mergers {
        layer_norm(&mut w, &names.norm, norm_width)?;
        linear(&mut w, &names.fc1, mvh, mvh)?;
        linear(&mut w, &names.fc2, mvh, s.n_out)?;
    }
    Ok(w.w)
}
