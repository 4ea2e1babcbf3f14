//! Hyper-parameters of the Qwen3-VL text decoder, read from GGUF metadata only, and every
//! tensor's shape checked against them before a graph is built.

use super::error::ModelError;
use super::meta::Meta;
use crate::gguf::GgufFile;
use crate::quant::DType;
use std::collections::BTreeMap;

pub const ARCH: &str = "qwen3vl";

#[derive(Clone, Debug, PartialEq)]
pub struct TextParams {
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub n_vocab: usize,
    pub rms_eps: f32,
    pub rope_theta: f32,
    /// Interleaved M-RoPE sections [t, h, w] in rotary frequencies.
    pub rope_sections: [usize; 3],
    /// Deepstack features in the wide input (features past n_layer are never added).
    pub n_deepstack: usize,
    pub n_ctx_train: usize,
    /// The output projection: `output.weight`, or the tied `token_embd.weight`.
    pub output_name: String,
    /// dtype of every weight the graph reads, by tensor name.
    pub dtypes: BTreeMap<String, DType>,
}

impl TextParams {
    pub fn from_gguf(file: &GgufFile) -> Result<TextParams, ModelError> {
        let arch = file.get("general.architecture").and_then(|v| v.as_str()).unwrap_or("");
        let meta = Meta::new(file, ARCH);
        if arch != ARCH {
            return Err(meta.error(
                "key \"general.architecture\"".into(),
                format!("{arch:?} is not a Qwen3-VL text model ({ARCH:?})"),
            ));
        }
        let n_layer = meta.size("block_count", 4096)?;
        let n_embd = meta.size("embedding_length", 1 << 16)?;
        let n_ff = meta.size("feed_forward_length", 1 << 18)?;
        let n_head = meta.size("attention.head_count", 4096)?;
        let n_head_kv = meta.size_or("attention.head_count_kv", 4096, n_head)?;
        let head_dim = meta.size_or("attention.key_length", 4096, n_embd / n_head)?;
        let value_dim = meta.size_or("attention.value_length", 4096, head_dim)?;
        if value_dim != head_dim || head_dim % 4 != 0 || n_head % n_head_kv != 0 {
            return Err(meta.error(
                "attention shape".into(),
                format!("head_dim {head_dim} (value {value_dim}, must be equal and a multiple of 4), {n_head} heads over {n_head_kv} kv heads"),
            ));
        }
        let rms_eps = meta.positive("attention.layer_norm_rms_epsilon")?;
        let rope_theta = meta.positive("rope.freq_base")?;
        let sections = meta.sizes("rope.dimension_sections")?;
        let rope_sections = match sections.as_slice() {
            [t, h, w, ..] if t + h + w <= head_dim / 2 => [*t, *h, *w],
            _ => {
                return Err(meta.error(
                    format!("key \"{ARCH}.rope.dimension_sections\""),
                    format!("{sections:?} does not fit {} rotary frequencies", head_dim / 2),
                ))
            }
        };
        let n_deepstack = meta.count_or_zero("n_deepstack_layers", 64)?;
        let n_ctx_train = meta.size_or("context_length", 1 << 24, 4096)?;

        let embd = file
            .tensor("token_embd.weight")
            .ok_or_else(|| meta.error("tensor \"token_embd.weight\"".into(), "missing"))?;
        let n_vocab = match embd.shape() {
            [e, v] if *e == n_embd as u64 && *v >= 1 && *v <= 1 << 22 => *v as usize,
            s => {
                return Err(meta.error(
                    "tensor \"token_embd.weight\"".into(),
                    format!("shape {s:?}, expected [{n_embd}, n_vocab]"),
                ))
            }
        };
        let output_name =
            if file.tensor("output.weight").is_some() { "output.weight" } else { "token_embd.weight" }.to_owned();

        let (q, kv) = (n_head * head_dim, n_head_kv * head_dim);
        let mut matrices: Vec<(String, Vec<usize>)> =
            vec![("token_embd.weight".into(), vec![n_embd, n_vocab]), (output_name.clone(), vec![n_embd, n_vocab])];
        let mut norms: Vec<(String, usize)> = vec![("output_norm.weight".into(), n_embd)];
        for il in 0..n_layer {
            let b = |s: &str| format!("blk.{il}.{s}.weight");
            matrices.extend([
                (b("attn_q"), vec![n_embd, q]),
                (b("attn_k"), vec![n_embd, kv]),
                (b("attn_v"), vec![n_embd, kv]),
                (b("attn_output"), vec![q, n_embd]),
                (b("ffn_gate"), vec![n_embd, n_ff]),
                (b("ffn_up"), vec![n_embd, n_ff]),
                (b("ffn_down"), vec![n_ff, n_embd]),
            ]);
            norms.extend([
                (b("attn_norm"), n_embd),
                (b("attn_q_norm"), head_dim),
                (b("attn_k_norm"), head_dim),
                (b("ffn_norm"), n_embd),
            ]);
        }
        let mut dtypes = BTreeMap::new();
        for (name, shape) in &matrices {
            dtypes.insert(name.clone(), meta.dtype(name, shape)?);
        }
        for (name, width) in &norms {
            dtypes.insert(name.clone(), meta.vector_dtype(name, *width, &[DType::F32, DType::F16, DType::BF16])?);
        }
        meta.check_all_read(&dtypes)?;
        Ok(TextParams {
            n_layer,
            n_embd,
            n_ff,
            n_head,
            n_head_kv,
            head_dim,
            n_vocab,
            rms_eps,
            rope_theta,
            rope_sections,
            n_deepstack,
            n_ctx_train,
            output_name,
            dtypes,
        })
    }

    /// Values per token of the wide input embedding: the embedding and each deepstack slice.
    pub fn wide_width(&self) -> usize {
        self.n_embd * (1 + self.n_deepstack)
    }

    /// Deepstack features actually added (HF: after layer k for k < min(n_deepstack, n_layer)).
    pub fn n_deepstack_used(&self) -> usize {
        self.n_deepstack.min(self.n_layer)
    }
}
