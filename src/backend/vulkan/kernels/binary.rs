//! Elementwise ADD, MUL (b broadcast over a by repetition) and SWIGLU (silu(gate) * up) over
//! strided f32 operands, into f32 or f16 values: `binary.comp`.

use super::push::{push_block, PushWords, Shape};
use super::{
    expect_f32, floats, out_words, stride_words, word, BinaryOp, Dyn, Grid, KernelId, Launch, Operand, Scratch,
};
use crate::backend::vulkan::error::{Result, VkError};

push_block! {
    /// `binary.comp`.
    pub struct BinaryPush {
        shape: Shape,
        /// Strides in floats (the output's in its values).
        a_nb: [u32; 4],
        /// b's shape, which divides the output's.
        b_ne: [u32; 4],
        b_nb: [u32; 4],
        d_nb: [u32; 4],
        /// Offsets likewise.
        a_off: u32,
        b_off: u32,
        d_off: u32,
        /// 1: the output holds f16 values.
        d_f16: u32,
    }
}

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
    word(out.ne.iter().product(), "element count")?;
    let block = BinaryPush {
        shape: Shape::of(out, dynamic)?,
        a_nb: stride_words(a, "a stride")?,
        b_ne: Shape::of(b, None)?.ne,
        b_nb: stride_words(b, "b stride")?,
        d_nb,
        a_off: floats(a.offset, "a offset")?,
        b_off: floats(b.offset, "b offset")?,
        d_off,
        d_f16,
    };
    Ok(Launch {
        kernel: KernelId::Binary(op),
        push: PushWords::of(&block),
        grid: Grid::ROW_CHUNKS,
        grid_input: None,
        slots: Vec::new(),
        scratch: Scratch::default(),
    })
}
