//! Elementwise ADD, MUL (b broadcast over a by repetition) and SWIGLU (silu(gate) * up) over
//! strided f32 operands: `binary.comp`.

use super::{dyn_words, expect_f32, floats, word, BinaryOp, Dyn, Grid, KernelId, Launch, Operand};
use crate::backend::vulkan::error::{Result, VkError};

/// Words of `binary.comp`'s push constants.
pub const PUSH_WORDS: usize = 27;

pub fn launch(op: BinaryOp, a: &Operand, b: &Operand, out: &Operand, dynamic: Option<Dyn>) -> Result<Launch> {
    expect_f32(a, "a")?;
    expect_f32(b, "b")?;
    expect_f32(out, "the output")?;
    let broadcast_ok = (0..4).all(|i| b.ne[i] > 0 && out.ne[i] % b.ne[i] == 0);
    let same = op != BinaryOp::SwiGlu || b.ne == a.ne;
    if a.ne != out.ne || !broadcast_ok || !same {
        return Err(VkError::Invalid(format!("{op:?}: {:?} with {:?} -> {:?}", a.ne, b.ne, out.ne)));
    }
    let mut push = Vec::with_capacity(PUSH_WORDS);
    for v in out.ne {
        push.push(word(v, "size")?);
    }
    push.extend(dyn_words(dynamic)?);
    for v in a.nb {
        push.push(floats(v, "a stride")?);
    }
    for v in b.ne {
        push.push(word(v, "size")?);
    }
    for v in b.nb {
        push.push(floats(v, "b stride")?);
    }
    for v in out.nb {
        push.push(floats(v, "output stride")?);
    }
    push.push(floats(a.offset, "a offset")?);
    push.push(floats(b.offset, "b offset")?);
    push.push(floats(out.offset, "output offset")?);
    word(out.ne.iter().product(), "element count")?;
    Ok(Launch { kernel: KernelId::Binary(op), push, grid: Grid::Flat { per_group: 256 }, grid_input: None })
}
