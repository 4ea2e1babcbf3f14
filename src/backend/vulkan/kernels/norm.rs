//! RMS_NORM (`rms_norm.comp`) and LAYER_NORM (`layer_norm.comp`) along ne0 over strided f32 rows
//! (their outputs in f32 or f16 values).

use super::{expect_f32, floats, out_words, shape_words, stride_words, Dyn, Grid, KernelId, Launch, Operand, Scratch};
use crate::backend::vulkan::error::{Result, VkError};

/// Words of `rms_norm.comp`'s push constants.
pub const PUSH_WORDS: usize = 21;

/// The output f32, or f16 (activations kept in halves: `out_words`).
pub fn launch(x: &Operand, weight: &Operand, eps: f32, out: &Operand, dynamic: Option<Dyn>) -> Result<Launch> {
    expect_f32(x, "x")?;
    expect_f32(weight, "the weight")?;
    let (d_off, d_nb, d_f16) = out_words(out, "rms_norm")?;
    if x.ne != out.ne || weight.ne[0] != x.ne[0] || weight.nb[0] != 4 {
        return Err(VkError::Operands(format!("rms_norm: {:?} with weight {:?} -> {:?}", x.ne, weight.ne, out.ne)));
    }
    if dynamic.is_some_and(|d| d.axis == 0) {
        return Err(VkError::Operands("rms_norm: the normalized axis cannot be dynamic".into()));
    }
    let mut push = shape_words(out, dynamic, PUSH_WORDS)?;
    push.extend(stride_words(x, "x stride")?);
    push.extend(d_nb);
    push.push(floats(x.offset, "x offset")?);
    push.push(floats(weight.offset, "weight offset")?);
    push.push(d_off);
    push.push(eps.to_bits());
    push.push(d_f16);
    Ok(Launch {
        kernel: KernelId::RmsNorm,
        push,
        grid: Grid::Rows,
        grid_input: None,
        slots: Vec::new(),
        scratch: Scratch::default(),
    })
}

/// Words of `layer_norm.comp`'s push constants.
pub const LAYER_PUSH_WORDS: usize = 22;

/// LayerNorm with weight and bias along ne0: `layer_norm.comp`; the output f32 or f16.
pub fn layer_norm(
    x: &Operand,
    weight: &Operand,
    bias: &Operand,
    eps: f32,
    out: &Operand,
    dynamic: Option<Dyn>,
) -> Result<Launch> {
    expect_f32(x, "x")?;
    expect_f32(weight, "the weight")?;
    expect_f32(bias, "the bias")?;
    let (d_off, d_nb, d_f16) = out_words(out, "layer_norm")?;
    let param_ok = |p: &Operand| p.ne[0] == x.ne[0] && p.nb[0] == 4;
    if x.ne != out.ne || !param_ok(weight) || !param_ok(bias) {
        return Err(VkError::Operands(format!(
            "layer_norm: {:?} with weight {:?} bias {:?} -> {:?}",
            x.ne, weight.ne, bias.ne, out.ne
        )));
    }
    if dynamic.is_some_and(|d| d.axis == 0) {
        return Err(VkError::Operands("layer_norm: the normalized axis cannot be dynamic".into()));
    }
    let mut push = shape_words(out, dynamic, LAYER_PUSH_WORDS)?;
    push.extend(stride_words(x, "x stride")?);
    push.extend(d_nb);
    push.push(floats(x.offset, "x offset")?);
    push.push(floats(weight.offset, "weight offset")?);
    push.push(floats(bias.offset, "bias offset")?);
    push.push(d_off);
    push.push(eps.to_bits());
    push.push(d_f16);
    Ok(Launch {
        kernel: KernelId::LayerNorm,
        push,
        grid: Grid::Rows,
        grid_input: None,
        slots: Vec::new(),
        scratch: Scratch::default(),
    })
}
