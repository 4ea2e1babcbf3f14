//! Elementwise one-input ops over strided f32 operands: CONT (a copy), GELU (tanh form) and
//! GELU_ERF (exact): `unary.comp`.

use super::{
    expect_f32, floats, shape_words, stride_words, word, Dyn, Grid, KernelId, Launch, Operand, Scratch, UnaryOp,
};
use crate::backend::vulkan::error::{Result, VkError};

/// Words of `unary.comp`'s push constants.
pub const PUSH_WORDS: usize = 18;

pub fn launch(op: UnaryOp, x: &Operand, out: &Operand, dynamic: Option<Dyn>) -> Result<Launch> {
    expect_f32(x, "x")?;
    expect_f32(out, "the output")?;
    if x.ne != out.ne {
        return Err(VkError::Invalid(format!("{op:?}: {:?} -> {:?}", x.ne, out.ne)));
    }
    let mut push = shape_words(out, dynamic, PUSH_WORDS)?;
    push.extend(stride_words(x, "x stride")?);
    push.extend(stride_words(out, "output stride")?);
    push.push(floats(x.offset, "x offset")?);
    push.push(floats(out.offset, "output offset")?);
    word(out.ne.iter().product(), "element count")?;
    Ok(Launch {
        kernel: KernelId::Unary(op),
        push,
        grid: Grid::ROW_CHUNKS,
        grid_input: None,
        slots: Vec::new(),
        scratch: Scratch::default(),
    })
}
