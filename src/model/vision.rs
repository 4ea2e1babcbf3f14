//! The Qwen3-VL vision encoder as a graph: one function per part, in the model's own terms.
//!
//! Inputs (run-time buffers, each planned for `max_patches` rows; the symbol `n_patches` gives
//! the rows of the current image, in merge-block order):
//! - [`PIXELS`]: f32 `[patch_row, max_patches]`, rows `[channel][temporal][y][x]`;
//! - [`POS_TAPS`] / [`POS_WEIGHTS`]: i32 / f32 `[TAPS, max_patches]`, the bilinear taps of the
//!   position grid ([`pos_taps`](super::vision_grid::pos_taps));
//! - [`ROPE_POS`]: i32 `[max_patches, 2]`: the row of every patch, then the column of every
//!   patch (component c of patch t at `c * max_patches + t`);
//! - [`ATTN_SPANS`]: i32 `[2, max_patches]`: the patches every patch attends over, the first
//!   and the end (its image's: a call may hold several images, one after another).
//!
//! Output: [`WIDE_OUT`], f32 `[wide_width, max_patches / merge²]`: per merged token, the
//! merger's output then each deepstack feature, written there by the last node of each merger.
//!
//! The per-frame windows on the pixel buffer are views of a storage this graph does not own:
//! the dispatcher binds them from the buffer (rule 3) and a `cont` gathers each frame.

use super::vision_grid::TAPS;
use super::vision_params::{patch_embd_name, MergerNames, VisionParams, ROPE_THETA};
use crate::graph::{AttnMask, DynAxis, Gelu, Graph, GraphError, NodeId, Result, RopeKind, SymId};
use crate::quant::DType;

pub const PIXELS: &str = "vision.pixel_values";
pub const POS_TAPS: &str = "vision.pos_taps";
pub const POS_WEIGHTS: &str = "vision.pos_weights";
pub const ROPE_POS: &str = "vision.rope_positions";
pub const ATTN_SPANS: &str = "vision.attn_spans";
pub const WIDE_OUT: &str = "vision.wide";

/// A built vision graph.
pub struct VisionGraph {
    pub graph: Graph,
    /// Patches of the current image (a multiple of merge², at most the planned maximum).
    pub n_patches: SymId,
}

struct Builder<'a> {
    g: Graph,
    p: &'a VisionParams,
    /// The patch axis of a `[width, patches]` value.
    patches: DynAxis,
    n: usize,
    rope_pos: NodeId,
    spans: NodeId,
}

impl Builder<'_> {
    fn w(&mut self, name: &str, ne: &[usize]) -> Result<NodeId> {
        super::weight(&mut self.g, &self.p.dtypes, name, ne)
    }

    fn at(&self, axis: usize) -> Option<DynAxis> {
        Some(DynAxis { axis, ..self.patches })
    }

    /// `name.weight · x + name.bias`.
    fn linear(&mut self, name: &str, x: NodeId, n_in: usize, n_out: usize) -> Result<NodeId> {
        let w = self.w(&format!("{name}.weight"), &[n_in, n_out])?;
        let b = self.w(&format!("{name}.bias"), &[n_out])?;
        let y = self.g.matmul(w, x, name)?;
        self.g.add(y, b, &format!("{name}.add_bias"))
    }

    fn layer_norm(&mut self, name: &str, x: NodeId, width: usize) -> Result<NodeId> {
        let w = self.w(&format!("{name}.weight"), &[width])?;
        let b = self.w(&format!("{name}.bias"), &[width])?;
        self.g.layer_norm(x, w, b, self.p.eps, name)
    }

    /// Conv3d with stride = kernel: Σ_t W_t · x[:, t] + bias, where W_t is temporal slice t of
    /// the kernel.
    fn patch_embed(&mut self, pixels: NodeId) -> Result<NodeId> {
        let mut sum = self.conv_slice(pixels, 0)?;
        for t in 1..self.p.n_temporal {
            let y = self.conv_slice(pixels, t)?;
            sum = self.g.add(sum, y, &format!("patch.conv_sum{t}"))?;
        }
        let bias = self.w("v.patch_embd.bias", &[self.p.n_embd])?;
        self.g.add(sum, bias, "patch.add_bias")
    }

    /// W_t · x[:, t]: frame t of every channel of every patch, gathered into rows of
    /// `[channel][y][x]` (the layout of the kernel slice `[x, y, channel, vh]`).
    fn conv_slice(&mut self, pixels: NodeId, t: usize) -> Result<NodeId> {
        let p = self.p;
        let (plane, row, n) = (p.patch_size * p.patch_size, p.patch_row(), self.n);
        let nb = [4, p.n_temporal * plane * 4, row * 4, row * 4 * n];
        let frame = self.g.view(
            pixels,
            [plane, p.n_channels, n, 1],
            nb,
            t * plane * 4,
            self.at(2),
            &format!("patch.frame{t}"),
        )?;
        let frame = self.g.cont(frame, &format!("patch.frame{t}.cont"))?;
        let frame = self.g.reshape(frame, [plane * p.n_channels, n, 1, 1], &format!("patch.frame{t}.rows"))?;
        let kernel = self.w(&patch_embd_name(t), &[plane * p.n_channels, p.n_embd])?;
        self.g.matmul(kernel, frame, &format!("patch.conv{t}"))
    }

    /// The learned position grid resampled at every patch: Σ_k weight_k · table[tap_k].
    fn pos_embed(&mut self) -> Result<NodeId> {
        let p = self.p;
        let ids = self.g.input(POS_TAPS, DType::I32, [TAPS, self.n, 1, 1], self.at(1))?;
        let weights = self.g.input(POS_WEIGHTS, DType::F32, [TAPS, self.n, 1, 1], self.at(1))?;
        let table = self.w("v.position_embd.weight", &[p.n_embd, p.pos_side * p.pos_side])?;
        self.g.get_rows_weighted(table, ids, weights, "pos_embd")
    }

    /// x += proj(attention(rope(q), rope(k), v)) with q, k, v from one fused projection of LN1(x).
    fn attention(&mut self, il: usize, x: NodeId) -> Result<NodeId> {
        let (p, n) = (self.p, self.n);
        let (vh, hd) = (p.n_embd, p.head_dim);
        let h = self.layer_norm(&format!("v.blk.{il}.ln1"), x, vh)?;
        let qkv = self.linear(&format!("v.blk.{il}.attn_qkv"), h, vh, 3 * vh)?;
        // Rows of qkv are [q | k | v], each n_head heads of head_dim.
        let nb = [4, hd * 4, 3 * vh * 4, 3 * vh * 4 * n];
        let heads_dyn = self.at(2);
        let mut split = |which: usize, label: &str| {
            self.g.view(qkv, [hd, p.n_head, n, 1], nb, which * vh * 4, heads_dyn, &format!("v.blk.{il}.{label}"))
        };
        let (q, k, v) = (split(0, "q")?, split(1, "k")?, split(2, "v")?);
        let q = self.g.rope(q, self.rope_pos, RopeKind::Axial2d, ROPE_THETA, hd, &format!("v.blk.{il}.q_rope"))?;
        let k = self.g.rope(k, self.rope_pos, RopeKind::Axial2d, ROPE_THETA, hd, &format!("v.blk.{il}.k_rope"))?;
        let att = self.g.attention(
            q,
            k,
            v,
            AttnMask::Spans(self.spans),
            1.0 / (hd as f32).sqrt(),
            &format!("v.blk.{il}.attn"),
        )?;
        let att = self.g.reshape(att, [vh, n, 1, 1], &format!("v.blk.{il}.attn_rows"))?;
        let out = self.linear(&format!("v.blk.{il}.attn_out"), att, vh, vh)?;
        self.g.add(x, out, &format!("v.blk.{il}.attn_residual"))
    }

    /// x += fc2(gelu_tanh(fc1(LN2(x)))).
    fn mlp(&mut self, il: usize, x: NodeId) -> Result<NodeId> {
        let p = self.p;
        let h = self.layer_norm(&format!("v.blk.{il}.ln2"), x, p.n_embd)?;
        let h = self.linear(&format!("v.blk.{il}.ffn_up"), h, p.n_embd, p.n_ff)?;
        let h = self.g.gelu(h, Gelu::Tanh, &format!("v.blk.{il}.ffn_gelu"))?;
        let h = self.linear(&format!("v.blk.{il}.ffn_down"), h, p.n_ff, p.n_embd)?;
        self.g.add(x, h, &format!("v.blk.{il}.ffn_residual"))
    }

    /// The merge² patches of a block side by side as one row.
    fn merge_rows(&mut self, x: NodeId, name: &str) -> Result<NodeId> {
        let p = self.p;
        self.g.reshape(x, [p.merged_width(), self.n / p.merge_patches(), 1, 1], name)
    }

    /// fc2(gelu_erf(fc1(x))) on merged rows: the tail of every merger.
    fn merger_mlp(&mut self, names: &MergerNames, x: NodeId) -> Result<NodeId> {
        let mvh = self.p.merged_width();
        let h = self.linear(&names.fc1, x, mvh, mvh)?;
        let h = self.g.gelu(h, Gelu::Erf, &format!("{}.gelu", names.fc1))?;
        self.linear(&names.fc2, h, mvh, self.p.n_out)
    }

    /// Final merger: LayerNorm per patch, then the merge block as one row.
    fn final_merger(&mut self, x: NodeId) -> Result<NodeId> {
        let names = MergerNames::final_merger();
        let h = self.layer_norm(&names.norm, x, self.p.n_embd)?;
        let h = self.merge_rows(h, "merger.rows")?;
        self.merger_mlp(&names, h)
    }

    /// Deepstack merger after block `block`: the merge block as one row, then LayerNorm of it.
    fn deepstack_merger(&mut self, block: usize, x: NodeId) -> Result<NodeId> {
        let names = MergerNames::deepstack(block);
        let h = self.merge_rows(x, &format!("v.deepstack.{block}.rows"))?;
        let h = self.layer_norm(&names.norm, h, self.p.merged_width())?;
        self.merger_mlp(&names, h)
    }
}

/// Builds the vision encoder for images of up to `max_patches` patches (a positive multiple
/// of merge²).
pub fn build(p: &VisionParams, max_patches: usize) -> Result<VisionGraph> {
    let n = max_patches;
    let merge = p.merge_patches();
    if n == 0 || !n.is_multiple_of(merge) {
        return Err(GraphError::new("vision graph", format!("{n} patches is not a positive multiple of {merge}")));
    }
    let mut g = Graph::new("vision");
    let n_patches = g.symbol("n_patches", n);
    let patches = DynAxis { axis: 1, sym: n_patches, num: 1, den: 1 };
    let pixels = g.input(PIXELS, DType::F32, [p.patch_row(), n, 1, 1], Some(patches))?;
    let rope_pos = g.input(ROPE_POS, DType::I32, [n, 2, 1, 1], Some(DynAxis { axis: 0, ..patches }))?;
    let spans = g.input(ATTN_SPANS, DType::I32, [2, n, 1, 1], Some(patches))?;
    let n_tokens = n / merge;
    let width = p.wide_width();
    let wide = g.external_storage(WIDE_OUT, DType::F32, width * n_tokens * 4, false);
    let wide_nb = [4, width * 4, width * n_tokens * 4, width * n_tokens * 4];

    let mut b = Builder { g, p, patches, n, rope_pos, spans };
    let embd = b.patch_embed(pixels)?;
    let pos = b.pos_embed()?;
    let mut x = b.g.add(embd, pos, "inp_pos")?;
    for il in 0..p.n_layer {
        x = b.attention(il, x)?;
        x = b.mlp(il, x)?;
        if let Some(k) = p.deepstack_blocks.iter().position(|&d| d == il) {
            let feature = b.deepstack_merger(il, x)?;
            b.g.write_into(feature, wide, (1 + k) * p.n_out * 4, wide_nb)?;
        }
    }
    let merged = b.final_merger(x)?;
    b.g.write_into(merged, wide, 0, wide_nb)?;
    Ok(VisionGraph { graph: b.g, n_patches })
}
