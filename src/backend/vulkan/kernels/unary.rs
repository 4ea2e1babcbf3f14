//! Elementwise one-input ops over strided f32 operands, into f32 or f16 values: CONT (a copy),
//! GELU (tanh form) and GELU_ERF (exact): `unary.comp`.

use super::push::{push_block, PushWords, Shape};
use super::{
    expect_f32, floats, out_words, stride_words, word, Dyn, Grid, KernelId, Launch, Operand, Scratch, UnaryOp,
};
use crate::backend::vulkan::error::{Result, VkError};

push_block! {
    /// `unary.comp`.
    pub struct UnaryPush {
        shape: Shape,
        /// Strides in floats (the output's in its values), then offsets likewise.
        x_nb: [u32; 4],
        d_nb: [u32; 4],
        x_off: u32,
        d_off: u32,
        /// 1: the output holds f16 values.
        d_f16: u32,
    }
}

/// The output f32, or f16 (activations kept in halves: `out_words`).
pub fn launch(op: UnaryOp, x: &Operand, out: &Operand, dynamic: Option<Dyn>) -> Result<Launch> {
    expect_f32(x, "x")?;
    let (d_off, d_nb, d_f16) = out_words(out, KernelId::Unary(op).name().as_str())?;
    if x.ne != out.ne {
        return Err(VkError::Operands(format!("{op:?}: {:?} -> {:?}", x.ne, out.ne)));
    }
    word(out.ne.iter().product(), "element count")?;
    let block = UnaryPush {
        shape: Shape::of(out, dynamic)?,
        x_nb: stride_words(x, "x stride")?,
        d_nb,
        x_off: floats(x.offset, "x offset")?,
        d_off,
        d_f16,
    };
    Ok(Launch {
        kernel: KernelId::Unary(op),
        push: PushWords::of(&block),
        grid: Grid::ROW_CHUNKS,
        grid_input: None,
        slots: Vec::new(),
        scratch: Scratch::default(),
    })
}
