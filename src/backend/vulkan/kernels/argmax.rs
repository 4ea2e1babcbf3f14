//! ARGMAX along ne0 of strided f32 rows: `argmax.comp`, each row split over workgroups of
//! `CHUNK` values whose last to finish combines them.

use super::{expect_f32, floats, shape_words, stride_words, word, Dyn, Grid, KernelId, Launch, Operand, Scratch};
use crate::backend::vulkan::error::{Result, VkError};

/// Words of `argmax.comp`'s push constants.
pub const PUSH_WORDS: usize = 20;

/// Values one workgroup takes (the shader's WG x PER_THREAD).
const CHUNK: usize = 2048;

pub fn launch(x: &Operand, out: &Operand, dynamic: Option<Dyn>) -> Result<Launch> {
    expect_f32(x, "x")?;
    expect_f32(out, "the output")?;
    if out.ne[0] != 1 || x.ne[0] == 0 || x.ne[1..] != out.ne[1..] {
        return Err(VkError::Operands(format!("argmax: {:?} -> {:?}", x.ne, out.ne)));
    }
    if dynamic.is_some_and(|d| d.axis == 0) {
        return Err(VkError::Operands("argmax: the searched axis cannot be dynamic".into()));
    }
    let splits = x.ne[0].div_ceil(CHUNK);
    let mut push = shape_words(out, dynamic, PUSH_WORDS)?;
    push.extend(stride_words(x, "x stride")?);
    push.extend(stride_words(out, "output stride")?);
    push.push(floats(x.offset, "x offset")?);
    push.push(floats(out.offset, "output offset")?);
    push.push(word(x.ne[0], "row length")?);
    push.push(word(splits, "splits")?);
    // A (value, index) record per (row, split), then a counter per row.
    let rows = out.ne[1] * out.ne[2] * out.ne[3];
    let counters = 8 * rows * splits;
    let scratch = Scratch { bytes: counters + 4 * rows, counters };
    word(scratch.bytes / 4, "scratch")?;
    Ok(Launch {
        kernel: KernelId::Argmax,
        push,
        grid: Grid::Split { splits },
        grid_input: None,
        slots: Vec::new(),
        scratch,
    })
}
