//! The operations of the graph IR. Layout ops rewrite shapes and strides only; compute ops
//! write bytes. Nothing here knows a model or a device.

/// How a RoPE op maps each rotary frequency to a position component and a frequency.
#[derive(Clone, Debug, PartialEq)]
pub enum RopeKind {
    /// Multi-axis RoPE with interleaved sections `[s_t, s_h, s_w]` (Qwen3-VL text, llama.cpp's
    /// IMROPE): frequency j uses component h if j % 3 == 1 and j < 3*s_h, w if j % 3 == 2 and
    /// j < 3*s_w, t otherwise. Positions are `[3, n]` (rows t, h, w). Frequencies
    /// theta^(-2j/n_dims).
    MropeInterleaved { sections: [usize; 3] },
    /// 2-D RoPE over (row, col): the first half of the frequencies rotate by the row, the second
    /// by the column, each half with frequencies theta^(-2j/(n_dims/2)). Positions `[2, n]`.
    Axial2d,
}

/// GELU flavour: the tanh approximation or the exact erf form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gelu {
    Tanh,
    Erf,
}

/// An operation. Inputs are listed per variant in the order the node's `inputs` holds them.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// A value bound from outside the graph (weights, token ids, positions, caches, a value
    /// made by another graph). No inputs.
    External,

    // Layout ops: the output is a window (offset, ne, nb) on the input's bytes.
    /// `[input]`: an arbitrary window given by the value's own offset/ne/nb.
    View,
    /// `[input]`: same bytes, new shape (input must be contiguous).
    Reshape,
    /// `[input]`: axes permuted (output axis i is input axis `axes[i]`).
    Permute { axes: [usize; 4] },
    /// `[input]`: axes 0 and 1 swapped.
    Transpose,

    // Compute ops.
    /// `[table, ids]`: rows of `table` (any dtype) picked by i32 `ids`, as f32.
    GetRows,
    /// `[table, ids, weights]`: out[:, p] = sum_k weights[k, p] * table[ids[k, p]] (k along ne0
    /// of ids/weights); bilinear resampling of a table, for example.
    GetRowsWeighted,
    /// `[dst, src, ids]`: writes row r of `src` into row `ids[r]` of `dst`; the output is `dst`.
    SetRows,
    /// `[w, x]`: out[n, m] = sum_k w[k, n] * x[k, m] (ggml's mul_mat). `w` any dtype.
    MatMul,
    /// `[a, b]`: a + b, b broadcast over a by repetition.
    Add,
    /// `[a, b]`: a * b, b broadcast over a by repetition.
    Mul,
    /// `[x, weight]`: x / sqrt(mean(x^2) + eps) * weight, along ne0.
    RmsNorm { eps: f32 },
    /// `[x, weight, bias]`: (x - mean) / sqrt(var + eps) * weight + bias, along ne0.
    LayerNorm { eps: f32 },
    /// `[x, positions]`: rotary embedding of the first `n_dims` of each row (ne0 = head dim),
    /// NeoX pairing (i, i + n_dims/2).
    Rope { kind: RopeKind, theta: f32, n_dims: usize },
    /// `[gate, up]`: silu(gate) * up.
    SwiGlu,
    /// `[x]`
    Gelu(Gelu),
    /// `[x]`: a contiguous copy of a strided value.
    Cont,
    /// `[q, k, v]` or `[q, k, v, slots]`: softmax(q k^T * scale) v per head, with grouped
    /// K/V heads (q head h reads kv head h / (n_head / n_kv_head)). q: [d, n_head, n_q],
    /// k/v: [d, n_kv_head, n_kv]. With `slots` (i32 [n_q], causal): the kv rows are
    /// sequences of `segment` rows each, and query i at slot s sees rows
    /// s - s % segment ..= s (its own sequence's, up to itself). With `segment` 0, `slots` are
    /// spans instead (i32 [2, n_q]): query i sees rows slots[0, i] .. slots[1, i] (several
    /// images in one call, each attending over its own patches). Without: every query sees
    /// all n_kv rows (`segment` is then n_kv and has no effect).
    Attention { scale: f32, segment: usize },
    /// `[x]`: the index of the largest value of each row along ne0 (the first of equal ones;
    /// NaN is never the largest; 0 when every value is NaN), as an f32: [1, ne1, ne2, ne3].
    /// An f32 holds every index exactly (rows are at most 2^24 long), so the value lives in
    /// the arena and is read back as every other output is.
    Argmax,
}

impl Op {
    pub fn name(&self) -> &'static str {
        match self {
            Op::External => "EXTERNAL",
            Op::View => "VIEW",
            Op::Reshape => "RESHAPE",
            Op::Permute { .. } => "PERMUTE",
            Op::Transpose => "TRANSPOSE",
            Op::GetRows => "GET_ROWS",
            Op::GetRowsWeighted => "GET_ROWS_WEIGHTED",
            Op::SetRows => "SET_ROWS",
            Op::MatMul => "MUL_MAT",
            Op::Add => "ADD",
            Op::Mul => "MUL",
            Op::RmsNorm { .. } => "RMS_NORM",
            Op::LayerNorm { .. } => "NORM",
            Op::Rope { .. } => "ROPE",
            Op::SwiGlu => "SWIGLU",
            Op::Gelu(Gelu::Tanh) => "GELU",
            Op::Gelu(Gelu::Erf) => "GELU_ERF",
            Op::Cont => "CONT",
            Op::Attention { .. } => "FLASH_ATTN",
            Op::Argmax => "ARGMAX",
        }
    }

    /// The input whose bytes the output is (SET_ROWS writes into `dst`), if any.
    pub fn writes_into(&self) -> Option<usize> {
        matches!(self, Op::SetRows).then_some(0)
    }

    /// VIEW, RESHAPE, PERMUTE, TRANSPOSE: ops that write no bytes.
    pub fn is_layout(&self) -> bool {
        matches!(self, Op::View | Op::Reshape | Op::Permute { .. } | Op::Transpose)
    }
}
