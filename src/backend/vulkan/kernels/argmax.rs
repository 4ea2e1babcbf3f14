//! ARGMAX along ne0 of strided f32 rows: `argmax.comp`, each row split over workgroups of
//! `CHUNK` values whose last to finish combines them.

use super::push::{push_block, PushWords, Shape};
use super::{expect_f32, floats, stride_words, word, Dyn, Grid, KernelId, Launch, Operand, Scratch};
use crate::backend::vulkan::error::{Result, VkError};

push_block! {
    /// `argmax.comp`.
    pub struct ArgmaxPush {
        shape: Shape,
        /// Strides and offsets in floats.
        x_nb: [u32; 4],
        d_nb: [u32; 4],
        x_off: u32,
        d_off: u32,
        /// Values per row.
        n: u32,
        /// Workgroups per row.
        splits: u32,
    }
}

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
    let block = ArgmaxPush {
        shape: Shape::of(out, dynamic)?,
        x_nb: stride_words(x, "x stride")?,
        d_nb: stride_words(out, "output stride")?,
        x_off: floats(x.offset, "x offset")?,
        d_off: floats(out.offset, "output offset")?,
        n: word(x.ne[0], "row length")?,
        splits: word(splits, "splits")?,
    };
    // A (value, index) record per (row, split), then a counter per row.
    let rows = out.ne[1] * out.ne[2] * out.ne[3];
    let counters = 8 * rows * splits;
    let scratch = Scratch { bytes: counters + 4 * rows, counters };
    word(scratch.bytes / 4, "scratch")?;
    Ok(Launch {
        kernel: KernelId::Argmax,
        push: PushWords::of(&block),
        grid: Grid::Split { splits },
        grid_input: None,
        slots: Vec::new(),
        scratch,
    })
}
