//! The Qwen3-VL text decoder as a graph: one function per block, in the model's own terms.
//!
//! Input is the wide embedding (n_embd × (1 + n_deepstack) per token), bound from outside the
//! graph: slice 0 is the token or image embedding, slice k the deepstack feature added after
//! layer k-1. Slice 0 is an external window on that buffer and each deepstack slice a view one
//! slice further in, so the dispatcher's rule 3 (skip, bind from the tensor) is exercised.

use super::text_params::TextParams;
use crate::graph::{AttnMask, DynAxis, Graph, NodeId, Result, RopeKind, SymId};
use crate::quant::DType;

/// Names of the run-time buffers the text graph binds.
/// The embedding table, read by the runtime (rows of input tokens) and by the graph when the
/// output projection is tied to it.
pub const TOKEN_EMBD: &str = "token_embd.weight";
pub const INP_WIDE: &str = "inp_wide";
pub const POSITIONS: &str = "positions";
pub const KV_SLOTS: &str = "kv_slots";
pub const OUT_IDS: &str = "out_ids";

pub fn cache_k(layer: usize) -> String {
    format!("cache_k.{layer}")
}

pub fn cache_v(layer: usize) -> String {
    format!("cache_v.{layer}")
}

/// Sizes a text graph is planned for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextShape {
    /// The graph's name: "text-prefill", "text-decode", "text-batch".
    pub name: &'static str,
    /// Tokens per call (a prefill chunk, or 1 for decode).
    pub max_tokens: usize,
    /// Positions whose logits are computed per call.
    pub max_outputs: usize,
    /// KV slots per sequence.
    pub n_ctx: usize,
    /// Sequences the KV cache holds, `n_ctx` slots each (a query attends its own's).
    pub n_seq: usize,
    /// The element type of the KV cache: f32, or f16 (half the bytes a decode step reads at
    /// depth) where the backend keeps caches so (`Registry::cache_dtype`).
    pub cache: DType,
}

/// A built text graph and the ids the runtime needs.
pub struct TextGraph {
    pub graph: Graph,
    pub logits: NodeId,
    /// The index of each output position's largest logit (a greedy step's token), as f32.
    pub argmax: NodeId,
    /// Symbols, in this order: tokens in the call, outputs in the call.
    pub n_tokens: SymId,
    pub n_outputs: SymId,
}

impl AsRef<Graph> for TextGraph {
    fn as_ref(&self) -> &Graph {
        &self.graph
    }
}

struct Builder<'a> {
    g: Graph,
    p: &'a TextParams,
    tokens: DynAxis,
    positions: NodeId,
    slots: NodeId,
    n_ctx: usize,
    n_seq: usize,
    cache: DType,
}

impl Builder<'_> {
    fn w(&mut self, name: &str, ne: &[usize]) -> Result<NodeId> {
        super::weight(&mut self.g, &self.p.dtypes, name, ne)
    }

    fn tok(&self, axis: usize) -> Option<DynAxis> {
        Some(DynAxis { axis, ..self.tokens })
    }

    /// Q, K or V: project and split into heads.
    fn project(&mut self, il: usize, x: NodeId, which: &str, n_heads: usize, n: usize) -> Result<NodeId> {
        let (p, hd) = (self.p, self.p.head_dim);
        let w = self.w(&format!("blk.{il}.attn_{which}.weight"), &[p.n_embd, n_heads * hd])?;
        let y = self.g.matmul(w, x, &format!("blk.{il}.{which}"))?;
        self.g.reshape(y, [hd, n_heads, n, 1], &format!("blk.{il}.{which}_heads"))
    }

    /// Q or K heads: per-head RMSNorm, then M-RoPE.
    fn norm_rope(&mut self, il: usize, y: NodeId, which: &str) -> Result<NodeId> {
        let (p, hd) = (self.p, self.p.head_dim);
        let norm = self.w(&format!("blk.{il}.attn_{which}_norm.weight"), &[hd])?;
        let y = self.g.rms_norm(y, norm, p.rms_eps, &format!("blk.{il}.{which}_norm"))?;
        let kind = RopeKind::MropeInterleaved { sections: p.rope_sections };
        self.g.rope(y, self.positions, kind, p.rope_theta, hd, &format!("blk.{il}.{which}_rope"))
    }

    /// Writes this call's K or V rows into the layer's cache and returns the whole cache (every
    /// sequence's slots, one after another) as [head_dim, n_head_kv, n_ctx * n_seq] for
    /// attention.
    fn cache(&mut self, name: &str, rows: NodeId, n: usize) -> Result<NodeId> {
        let (hd, nkv) = (self.p.head_dim, self.p.n_head_kv);
        let (row, slots, size) = (hd * nkv, self.n_ctx * self.n_seq, self.cache.block_bytes());
        let storage = self.g.external_storage(name, self.cache, row * slots * size, false);
        let cache = self.g.external_window(
            name,
            storage,
            0,
            [row, slots, 1, 1],
            [size, row * size, row * size * slots, row * size * slots],
            None,
        )?;
        let flat = self.g.reshape(rows, [row, n, 1, 1], &format!("{name}.rows"))?;
        let written = self.g.set_rows(cache, flat, self.slots, &format!("{name}.write"))?;
        let nb = [size, hd * size, row * size, row * size * slots];
        self.g.view(written, [hd, nkv, slots, 1], nb, 0, None, &format!("{name}.heads"))
    }

    fn attention(&mut self, il: usize, x: NodeId, n: usize) -> Result<NodeId> {
        let p = self.p;
        let norm = self.w(&format!("blk.{il}.attn_norm.weight"), &[p.n_embd])?;
        let h = self.g.rms_norm(x, norm, p.rms_eps, &format!("blk.{il}.attn_norm"))?;
        // The three projections first, then the norms and ropes: the GPU runs each group's
        // independent dispatches behind one barrier.
        let q = self.project(il, h, "q", p.n_head, n)?;
        let k = self.project(il, h, "k", p.n_head_kv, n)?;
        let v = self.project(il, h, "v", p.n_head_kv, n)?;
        let q = self.norm_rope(il, q, "q")?;
        let k = self.norm_rope(il, k, "k")?;
        let k_all = self.cache(&cache_k(il), k, n)?;
        let v_all = self.cache(&cache_v(il), v, n)?;
        let scale = 1.0 / (p.head_dim as f32).sqrt();
        let att = self.g.attention(
            q,
            k_all,
            v_all,
            AttnMask::Causal { slots: self.slots, segment: self.n_ctx },
            scale,
            &format!("blk.{il}.attn"),
        )?;
        let att = self.g.reshape(att, [p.head_dim * p.n_head, n, 1, 1], &format!("blk.{il}.attn_flat"))?;
        let wo = self.w(&format!("blk.{il}.attn_output.weight"), &[p.head_dim * p.n_head, p.n_embd])?;
        self.g.matmul(wo, att, &format!("blk.{il}.attn_out"))
    }

    fn ffn(&mut self, il: usize, x: NodeId) -> Result<NodeId> {
        let p = self.p;
        let norm = self.w(&format!("blk.{il}.ffn_norm.weight"), &[p.n_embd])?;
        let h = self.g.rms_norm(x, norm, p.rms_eps, &format!("blk.{il}.ffn_norm"))?;
        let wg = self.w(&format!("blk.{il}.ffn_gate.weight"), &[p.n_embd, p.n_ff])?;
        let wu = self.w(&format!("blk.{il}.ffn_up.weight"), &[p.n_embd, p.n_ff])?;
        let wd = self.w(&format!("blk.{il}.ffn_down.weight"), &[p.n_ff, p.n_embd])?;
        let gate = self.g.matmul(wg, h, &format!("blk.{il}.ffn_gate"))?;
        let up = self.g.matmul(wu, h, &format!("blk.{il}.ffn_up"))?;
        let act = self.g.swiglu(gate, up, &format!("blk.{il}.ffn_swiglu"))?;
        self.g.matmul(wd, act, &format!("blk.{il}.ffn_down"))
    }
}

/// Builds the text decoder for `shape`.
pub fn build(p: &TextParams, shape: TextShape) -> Result<TextGraph> {
    let n = shape.max_tokens;
    let mut g = Graph::new(shape.name);
    let n_tokens = g.symbol("n_tokens", n);
    let n_outputs = g.symbol("n_outputs", shape.max_outputs);
    let tokens = DynAxis { axis: 1, sym: n_tokens, num: 1, den: 1 };

    // The wide embedding: a storage of this graph's caller, never a value of this graph.
    let row = p.wide_width() * 4;
    let wide = g.external_storage(INP_WIDE, DType::F32, row * n, false);
    let nb = [4, row, row * n, row * n];
    let inp = g.external_window("inp_embd", wide, 0, [p.n_embd, n, 1, 1], nb, Some(tokens))?;
    let positions = g.input(POSITIONS, DType::I32, [n, 3, 1, 1], Some(DynAxis { axis: 0, ..tokens }))?;
    let slots = g.input(KV_SLOTS, DType::I32, [n, 1, 1, 1], Some(DynAxis { axis: 0, ..tokens }))?;
    let out_ids = g.input(
        OUT_IDS,
        DType::I32,
        [shape.max_outputs, 1, 1, 1],
        Some(DynAxis { axis: 0, sym: n_outputs, num: 1, den: 1 }),
    )?;

    let mut b = Builder { g, p, tokens, positions, slots, n_ctx: shape.n_ctx, n_seq: shape.n_seq, cache: shape.cache };
    let mut x = inp;
    for il in 0..p.n_layer {
        let att = b.attention(il, x, n)?;
        x = b.g.add(x, att, &format!("blk.{il}.attn_residual"))?;
        let ffn = b.ffn(il, x)?;
        x = b.g.add(x, ffn, &format!("blk.{il}.ffn_residual"))?;
        if il < p.n_deepstack_used() {
            // Deepstack feature il sits one slice further in per feature (zeros for text tokens).
            let slice =
                b.g.view(inp, [p.n_embd, n, 1, 1], nb, (il + 1) * p.n_embd * 4, b.tok(1), &format!("deepstack.{il}"))?;
            x = b.g.add(x, slice, &format!("blk.{il}.deepstack_add"))?;
        }
    }
    let x = b.g.get_rows(x, out_ids, "out_rows")?;
    let norm = b.w("output_norm.weight", &[p.n_embd])?;
    let x = b.g.rms_norm(x, norm, p.rms_eps, "output_norm")?;
    let output = b.w(&p.output_name.clone(), &[p.n_embd, p.n_vocab])?;
    let logits = b.g.matmul(output, x, "logits")?;
    let argmax = b.g.argmax(logits, "argmax")?;
    b.g.mark_output(logits);
    b.g.mark_output(argmax);
    Ok(TextGraph { graph: b.g, logits, argmax, n_tokens, n_outputs })
}
