//! ROPE (NeoX pairing) over strided f32 rows with i32 positions: `rope.comp`. The frequency of
//! each pair and the position component it turns with follow `cpu::reference::rope_frequency`.

use super::push::{push_block, PushWords, Shape};
use super::{expect_f32, floats, stride_words, word, Dyn, Grid, KernelId, Launch, Operand, Scratch};
use crate::backend::vulkan::error::{Result, VkError};
use crate::graph::RopeKind;
use crate::quant::DType;

push_block! {
    /// `rope_fields.glsl`: all of `rope.comp`'s block, the start of `rms_norm_rope.comp`'s.
    pub struct RopePush {
        shape: Shape,
        /// Strides and offsets in floats.
        x_nb: [u32; 4],
        d_nb: [u32; 4],
        x_off: u32,
        d_off: u32,
        /// Positions (ints): offset, stride along tokens, stride between components.
        p_off: u32,
        p_nb0: u32,
        p_nb1: u32,
        n_dims: u32,
        /// 0 interleaved M-RoPE, 1 axial 2-D.
        kind: u32,
        /// M-RoPE sections of the h and w components.
        s_h: u32,
        s_w: u32,
        log2_theta: f32,
    }
}

/// `rope.comp`'s launch of the operands `block` was made for (`push`).
pub fn launch(block: RopePush) -> Launch {
    Launch {
        kernel: KernelId::Rope,
        push: PushWords::of(&block),
        grid: Grid::Flat { per_group: 256 },
        grid_input: None,
        slots: Vec::new(),
        scratch: Scratch::default(),
    }
}

/// The rope's push constants, or why it does not take these operands.
pub fn push(
    kind: &RopeKind,
    theta: f32,
    n_dims: usize,
    x: &Operand,
    pos: &Operand,
    out: &Operand,
    dynamic: Option<Dyn>,
) -> Result<RopePush> {
    expect_f32(x, "x")?;
    expect_f32(out, "the output")?;
    if pos.dtype != DType::I32 {
        return Err(VkError::Operands(format!("rope: positions are {}, the kernel reads i32", pos.dtype)));
    }
    let comps = match kind {
        RopeKind::MropeInterleaved { .. } => 3,
        RopeKind::Axial2d => 2,
    };
    let n = x.ne[2];
    // Positions: component c of token t at t * nb0 + c * (n * nb0) in a contiguous [n, comps]
    // or [n * comps] buffer (the layout every graph builder uses).
    let pos_ok =
        pos.ne.iter().product::<usize>() == n * comps && pos.nb == crate::graph::contiguous_strides(DType::I32, pos.ne);
    if x.ne != out.ne || n_dims == 0 || n_dims > x.ne[0] || !n_dims.is_multiple_of(4) || !pos_ok || theta <= 0.0 {
        return Err(VkError::Operands(format!(
            "rope: {:?} over {n_dims} dims with positions {:?} -> {:?}",
            x.ne, pos.ne, out.ne
        )));
    }
    if dynamic.is_some_and(|d| d.axis == 0) {
        return Err(VkError::Operands("rope: the rotated axis cannot be dynamic".into()));
    }
    let (kind_word, s_h, s_w) = match kind {
        RopeKind::MropeInterleaved { sections } => (0, sections[1], sections[2]),
        RopeKind::Axial2d => (1, 0, 0),
    };
    word(out.ne.iter().product(), "element count")?;
    Ok(RopePush {
        shape: Shape::of(out, dynamic)?,
        x_nb: stride_words(x, "x stride")?,
        d_nb: stride_words(out, "output stride")?,
        x_off: floats(x.offset, "x offset")?,
        d_off: floats(out.offset, "output offset")?,
        p_off: floats(pos.offset, "positions offset")?,
        p_nb0: 1,
        p_nb1: word(n, "positions per component")?,
        n_dims: word(n_dims, "rotated dims")?,
        kind: kind_word,
        s_h: word(s_h, "section")?,
        s_w: word(s_w, "section")?,
        log2_theta: f64::from(theta).log2() as f32,
    })
}
