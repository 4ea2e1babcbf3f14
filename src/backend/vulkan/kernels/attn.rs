//! FLASH_ATTN: fused softmax(q k^T * scale) v with grouped K/V heads, causal through i32
//! slots or over every kv row: `flash_attn.comp`.

use super::{dyn_words, expect_f32, floats, word, Dyn, Grid, KernelId, Launch, Operand};
use crate::backend::vulkan::error::{Result, VkError};
use crate::quant::DType;

/// Words of `flash_attn.comp`'s push constants.
pub const PUSH_WORDS: usize = 27;
/// Largest head dimension the kernel holds.
pub const MAX_HEAD_DIM: usize = 256;

pub fn launch(
    q: &Operand,
    k: &Operand,
    v: &Operand,
    slots: Option<&Operand>,
    scale: f32,
    out: &Operand,
    dynamic: Option<Dyn>,
) -> Result<Launch> {
    for (o, what) in [(q, "q"), (k, "k"), (v, "v"), (out, "the output")] {
        expect_f32(o, what)?;
        if o.nb[0] != 4 || o.ne[3] != 1 {
            return Err(VkError::Invalid(format!(
                "flash_attn: {what} must have unit stride along head_dim and 3 axes"
            )));
        }
    }
    let (d, heads, n_q) = (q.ne[0], q.ne[1], q.ne[2]);
    let shape_ok =
        k.ne == v.ne && k.ne[0] == d && k.ne[1] > 0 && heads % k.ne[1] == 0 && out.ne == q.ne && d <= MAX_HEAD_DIM;
    if !shape_ok {
        return Err(VkError::Invalid(format!("flash_attn: q {:?} k {:?} v {:?} -> {:?}", q.ne, k.ne, v.ne, out.ne)));
    }
    if dynamic.is_some_and(|dy| dy.axis != 2) || k.dynamic.is_some_and(|dy| dy.axis != 2) || k.dynamic != v.dynamic {
        return Err(VkError::Invalid("flash_attn: only the query and kv-row axes can be dynamic".into()));
    }
    let mut push = Vec::with_capacity(PUSH_WORDS);
    for x in out.ne {
        push.push(word(x, "size")?);
    }
    push.extend(dyn_words(dynamic)?);
    for o in [q, k, v, out] {
        push.push(floats(o.offset, "offset")?);
        push.push(floats(o.nb[1], "head stride")?);
        push.push(floats(o.nb[2], "row stride")?);
    }
    push.push(word(k.ne[1], "kv heads")?);
    push.push(word(k.ne[2], "kv rows")?);
    match k.dynamic {
        Some(dy) if dy.den > 0 => {
            push.extend([word(dy.sym, "symbol")?, word(dy.num, "ratio")?, word(dy.den, "ratio")?])
        }
        Some(dy) => return Err(VkError::Invalid(format!("bad dynamic axis {dy:?}"))),
        None => push.extend([u32::MAX, 1, 1]),
    }
    match slots {
        Some(s) => {
            if s.dtype != DType::I32 || s.ne[0] != n_q || s.nb[0] != 4 {
                return Err(VkError::Invalid(format!("flash_attn: slots {} {:?} for {n_q} queries", s.dtype, s.ne)));
            }
            let off = floats(s.offset, "slots offset")?;
            if off == u32::MAX {
                return Err(VkError::Invalid("flash_attn: slots offset out of range".into()));
            }
            push.push(off);
        }
        None => push.push(u32::MAX),
    }
    push.push(scale.to_bits());
    Ok(Launch { kernel: KernelId::FlashAttn, push, grid: Grid::Rows, grid_input: None, slots: Vec::new() })
}
