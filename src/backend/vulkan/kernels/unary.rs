//! Elementwise one-input ops over strided f32 operands, into f32 or f16 values: CONT (a copy),
//! GELU (tanh form) and GELU_ERF (exact): `unary.comp`.

use super::{
    expect_f32, floats, out_words, shape_words, stride_words, word, Dyn, Grid, KernelId, Launch, Operand, Scratch,
    UnaryOp,
};
use crate::backend::vulkan::error::{Result, VkError};

/// Words of `unary.comp`'s push constants.
pub const PUSH_WORDS: usize = 19;

/// The output f32, or f16 (activations kept in halves: `out_words`).
pub fn launch(op: UnaryOp, x: &Operand, out: &Operand, dynamic: Option<Dyn>) -> Result<Launch> {
    expect_f32(x, "x")?;
    let (d_off, d_nb, d_f16) = out_words(out, KernelId::Unary(op).name().as_str())?;
    if x.ne != out.ne {
        return Err(VkError::Operands(format!("{op:?}: {:?} -> {:?}", x.ne, out.ne)));
    }
    let mut push = shape_words(out, dynamic, PUSH_WORDS)?;
    push.extend(stride_words(x, "x stride")?);
    push.extend(d_nb);
    push.push(floats(x.offset, "x offset")?);
    push.push(d_off);
    push.push(d_f16);
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
