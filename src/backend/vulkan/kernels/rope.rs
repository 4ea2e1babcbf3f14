//! ROPE (NeoX pairing) over strided f32 rows with i32 positions: `rope.comp`. The frequency of
//! each pair and the position component it turns with follow `cpu::reference::rope_frequency`.

use super::{expect_f32, floats, shape_words, stride_words, word, Dyn, Grid, KernelId, Launch, Operand, Scratch};
use crate::backend::vulkan::error::{Result, VkError};
use crate::graph::RopeKind;
use crate::quant::DType;

/// Words of `rope.comp`'s push constants.
pub const PUSH_WORDS: usize = 26;

pub fn launch(
    kind: &RopeKind,
    theta: f32,
    n_dims: usize,
    x: &Operand,
    pos: &Operand,
    out: &Operand,
    dynamic: Option<Dyn>,
) -> Result<Launch> {
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
    let mut push = shape_words(out, dynamic, PUSH_WORDS)?;
    push.extend(stride_words(x, "x stride")?);
    push.extend(stride_words(out, "output stride")?);
    push.push(floats(x.offset, "x offset")?);
    push.push(floats(out.offset, "output offset")?);
    push.push(floats(pos.offset, "positions offset")?);
    push.push(1);
    push.push(word(n, "positions per component")?);
    push.push(word(n_dims, "rotated dims")?);
    push.push(kind_word);
    push.push(word(s_h, "section")?);
    push.push(word(s_w, "section")?);
    push.push((f64::from(theta).log2() as f32).to_bits());
    word(out.ne.iter().product(), "element count")?;
    Ok(Launch {
        kernel: KernelId::Rope,
        push,
        grid: Grid::Flat { per_group: 256 },
        grid_input: None,
        slots: Vec::new(),
        scratch: Scratch::default(),
    })
}
