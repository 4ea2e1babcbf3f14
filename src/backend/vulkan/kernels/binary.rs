//! Elementwise ADD, MUL (b broadcast over a by repetition) and SWIGLU (silu(gate) * up) over
//! strided f32 operands, into f32 or f16 values: `binary.comp`.

use super::{
    expect_f32, floats, out_words, shape_words, stride_words, word, BinaryOp, Dyn, Grid, KernelId, Launch, Operand,
    Scratch,
};
use crate::backend::vulkan::error::{Result, VkError};

/// Words of `binary.comp`'s push constants.
pub const PUSH_WORDS: usize = 28;

/// The output f32, or f16 (activations kept in halves: `out_words`).
pub fn launch(op: BinaryOp, a: &Operand, b: &Operand, out: &Operand, dynamic: Option<Dyn>) -> Result<Launch> {
    expect_f32(a, "a")?;
    expect_f32(b, "b")?;
    let (d_off, d_nb, d_f16) = out_words(out, KernelId::Binary(op).name().as_str())?;
    let broadcast_ok = (0..4).all(|i| b.ne[i] > 0 && out.ne[i].is_multiple_of(b.ne[i]));
    let same = op != BinaryOp::SwiGlu || b.ne == a.ne;
    if a.ne != out.ne || !broadcast_ok || !same {
        return Err(VkError::Operands(format!("{op:?}: {:?} with {:?} -> {:?}", a.ne, b.ne, out.ne)));
    }
    let mut push = shape_words(out, dynamic, PUSH_WORDS)?;
    push.extend(stride_words(a, "a stride")?);
    for v in b.ne {
        push.push(word(v, "size")?);
    }
    push.extend(stride_words(b, "b stride")?);
    push.extend(d_nb);
    push.push(floats(a.offset, "a offset")?);
    push.push(floats(b.offset, "b offset")?);
    push.push(d_off);
    push.push(d_f16);
    word(out.ne.iter().product(), "element count")?;
    Ok(Launch {
        kernel: KernelId::Binary(op),
        push,
        grid: Grid::ROW_CHUNKS,
        grid_input: None,
        slots: Vec::new(),
        scratch: Scratch::default(),
    })
}
