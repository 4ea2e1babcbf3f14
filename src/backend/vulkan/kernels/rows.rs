//! Row gathers and scatters: GET_ROWS and GET_ROWS_WEIGHTED (`get_rows.comp`, a table of any
//! weight type read by bytes) and SET_ROWS (`set_rows.comp`, f32 rows into a storage such as a
//! KV cache, of f32 or f16 values).

use super::push::{push_block, PushWords, Shape};
use super::{expect_f32, floats, halves, values, word, Dyn, Grid, KernelId, Launch, Operand, Scratch, WType};
use crate::backend::vulkan::error::{Result, VkError};
use crate::quant::DType;

push_block! {
    /// `get_rows.comp`.
    pub struct GetRowsPush {
        shape: Shape,
        /// The table: byte offset, bytes per row, rows.
        t_off: u32,
        t_nb1: u32,
        t_rows: u32,
        /// Ids per output row.
        taps: u32,
        /// Ids: offset, stride along taps, stride along rows (ints).
        i_off: u32,
        i_nb0: u32,
        i_nb1: u32,
        /// Weights: offset, strides (floats).
        w_off: u32,
        w_nb0: u32,
        w_nb1: u32,
        /// The output: offset, row stride (floats).
        d_off: u32,
        d_nb1: u32,
    }
}

push_block! {
    /// `set_rows.comp`; its shape is the source's.
    pub struct SetRowsPush {
        shape: Shape,
        /// The source: offset, element and row strides (floats).
        s_off: u32,
        s_nb0: u32,
        s_nb1: u32,
        /// Ids: offset and stride (ints).
        i_off: u32,
        i_nb0: u32,
        /// The destination: offset, element and row strides (values), rows, whether it holds
        /// halves.
        d_off: u32,
        d_nb0: u32,
        d_nb1: u32,
        d_rows: u32,
        d_f16: u32,
    }
}

fn ints(bytes: usize, what: &str) -> Result<u32> {
    floats(bytes, what)
}

fn expect_i32(o: &Operand, what: &str) -> Result<()> {
    if o.dtype != DType::I32 {
        return Err(VkError::Operands(format!("{what} is {}, the kernel reads i32", o.dtype)));
    }
    Ok(())
}

/// `weights`: None for GET_ROWS (one id per output row, ids [rows]), Some for
/// GET_ROWS_WEIGHTED (ids and weights [taps, rows]).
pub fn get_rows(
    table: &Operand,
    ids: &Operand,
    weights: Option<&Operand>,
    out: &Operand,
    dynamic: Option<Dyn>,
) -> Result<Launch> {
    let wt = WType::from_dtype(table.dtype)
        .ok_or_else(|| VkError::Operands(format!("get_rows: no kernel for a {} table", table.dtype)))?;
    expect_i32(ids, "ids")?;
    expect_f32(out, "the output")?;
    let flat = |o: &Operand| o.ne[2] == 1 && o.ne[3] == 1;
    let taps = if weights.is_some() { ids.ne[0] } else { 1 };
    let rows_ok = if weights.is_some() { ids.ne[1] == out.ne[1] } else { ids.ne[0] == out.ne[1] && ids.ne[1] == 1 };
    if !flat(table) || !flat(ids) || !flat(out) || table.ne[0] != out.ne[0] || !rows_ok || table.ne[1] == 0 {
        return Err(VkError::Operands(format!("get_rows: table {:?} ids {:?} -> {:?}", table.ne, ids.ne, out.ne)));
    }
    if table.nb[0] != table.dtype.block_bytes()
        || out.nb[0] != 4
        || !table.ne[0].is_multiple_of(table.dtype.block_len())
    {
        return Err(VkError::Operands("get_rows: table and output rows must be contiguous".into()));
    }
    if wt == WType::F32 && (!table.offset.is_multiple_of(4) || !table.nb[1].is_multiple_of(4)) {
        return Err(VkError::Operands("get_rows: an f32 table must be 4-byte aligned".into()));
    }
    if dynamic.is_some_and(|d| d.axis != 1) {
        return Err(VkError::Operands("get_rows: only the row axis can be dynamic".into()));
    }
    // Without weights, one id per row: its stride serves both axes.
    let (i_nb0, i_nb1, [w_off, w_nb0, w_nb1]) = match weights {
        Some(w) => {
            expect_f32(w, "the weights")?;
            if w.ne != ids.ne {
                return Err(VkError::Operands(format!("get_rows_weighted: ids {:?} with weights {:?}", ids.ne, w.ne)));
            }
            let weights = [
                floats(w.offset, "weights offset")?,
                floats(w.nb[0], "weights stride")?,
                floats(w.nb[1], "weights stride")?,
            ];
            (ints(ids.nb[0], "ids stride")?, ints(ids.nb[1], "ids stride")?, weights)
        }
        None => {
            let s = ints(ids.nb[0], "ids stride")?;
            (s, s, [0; 3])
        }
    };
    let block = GetRowsPush {
        shape: Shape::of(out, dynamic)?,
        t_off: word(table.offset, "table offset")?,
        t_nb1: word(table.nb[1], "table row bytes")?,
        t_rows: word(table.ne[1], "table rows")?,
        taps: word(taps, "taps")?,
        i_off: ints(ids.offset, "ids offset")?,
        i_nb0,
        i_nb1,
        w_off,
        w_nb0,
        w_nb1,
        d_off: floats(out.offset, "output offset")?,
        d_nb1: floats(out.nb[1], "output stride")?,
    };
    // The last byte of the table must be addressable by 32-bit byte offsets.
    word(table.offset + table.nb[1] * table.ne[1], "table extent")?;
    Ok(Launch {
        kernel: KernelId::GetRows(wt, weights.is_some()),
        push: PushWords::of(&block),
        grid: Grid::Rows,
        grid_input: None,
        slots: Vec::new(),
        scratch: Scratch::default(),
    })
}

/// Rows of `src` [width, rows] into rows `ids` of `out` (the destination storage).
pub fn set_rows(dst: &Operand, src: &Operand, ids: &Operand, out: &Operand) -> Result<Launch> {
    expect_f32(src, "src")?;
    let half = halves(out, "set_rows' destination")?;
    expect_i32(ids, "ids")?;
    // Halves go out in pairs: contiguous rows of whole, aligned pairs.
    let size = out.dtype.block_bytes();
    let pairs = half == 0
        || out.nb[0] == size && [src.ne[0], out.offset / size, out.nb[1] / size].iter().all(|v| v.is_multiple_of(2));
    if !pairs {
        return Err(VkError::Operands(format!(
            "set_rows: f16 rows of {} values at byte {} (row stride {}) are not whole pairs",
            src.ne[0], out.offset, out.nb[1]
        )));
    }
    let flat = |o: &Operand| o.ne[2] == 1 && o.ne[3] == 1;
    if !flat(src)
        || !flat(out)
        || !flat(ids)
        || ids.ne[1] != 1
        || out.ne[0] != src.ne[0]
        || ids.ne[0] != src.ne[1]
        || dst.ne != out.ne
    {
        return Err(VkError::Operands(format!("set_rows: {:?} by ids {:?} into {:?}", src.ne, ids.ne, out.ne)));
    }
    if src.dynamic.is_some_and(|d| d.axis != 1) {
        return Err(VkError::Operands("set_rows: only the source's row axis can be dynamic".into()));
    }
    let block = SetRowsPush {
        shape: Shape::of(src, src.dynamic)?,
        s_off: floats(src.offset, "src offset")?,
        s_nb0: floats(src.nb[0], "src stride")?,
        s_nb1: floats(src.nb[1], "src stride")?,
        i_off: ints(ids.offset, "ids offset")?,
        i_nb0: ints(ids.nb[0], "ids stride")?,
        d_off: values(out, out.offset, "destination offset")?,
        d_nb0: values(out, out.nb[0], "destination stride")?,
        d_nb1: values(out, out.nb[1], "destination stride")?,
        d_rows: word(out.ne[1], "destination rows")?,
        d_f16: half,
    };
    Ok(Launch {
        kernel: KernelId::SetRows,
        push: PushWords::of(&block),
        grid: Grid::ROW_CHUNKS,
        grid_input: Some(1),
        slots: Vec::new(),
        scratch: Scratch::default(),
    })
}
