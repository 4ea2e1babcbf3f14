//! RMS_NORM (`rms_norm.comp`) and LAYER_NORM (`layer_norm.comp`) along ne0 over strided f32 rows
//! (their outputs in f32 or f16 values).

use super::push::{push_block, PushWords, Shape};
use super::{expect_f32, floats, out_words, stride_words, Dyn, Grid, KernelId, Launch, Operand, Scratch};
use crate::backend::vulkan::error::{Result, VkError};

push_block! {
    /// `rms_norm.comp`.
    pub struct RmsNormPush {
        shape: Shape,
        /// Strides in floats (the output's in its values), then offsets likewise.
        x_nb: [u32; 4],
        d_nb: [u32; 4],
        x_off: u32,
        w_off: u32,
        d_off: u32,
        eps: f32,
        /// 1: the output holds f16 values.
        d_f16: u32,
    }
}

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
    let block = RmsNormPush {
        shape: Shape::of(out, dynamic)?,
        x_nb: stride_words(x, "x stride")?,
        d_nb,
        x_off: floats(x.offset, "x offset")?,
        w_off: floats(weight.offset, "weight offset")?,
        d_off,
        eps,
        d_f16,
    };
    Ok(Launch {
        kernel: KernelId::RmsNorm,
        push: PushWords::of(&block),
        grid: Grid::Rows,
        grid_input: None,
        slots: Vec::new(),
        scratch: Scratch::default(),
    })
}

push_block! {
    /// `layer_norm.comp`.
    pub struct LayerNormPush {
        shape: Shape,
        /// Strides in floats (the output's in its values), then offsets likewise.
        x_nb: [u32; 4],
        d_nb: [u32; 4],
        x_off: u32,
        w_off: u32,
        b_off: u32,
        d_off: u32,
        eps: f32,
        /// 1: the output holds f16 values.
        d_f16: u32,
    }
}

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
    let block = LayerNormPush {
        shape: Shape::of(out, dynamic)?,
        x_nb: stride_words(x, "x stride")?,
        d_nb,
        x_off: floats(x.offset, "x offset")?,
        w_off: floats(weight.offset, "weight offset")?,
        b_off: floats(bias.offset, "bias offset")?,
        d_off,
        eps,
        d_f16,
    };
    Ok(Launch {
        kernel: KernelId::LayerNorm,
        push: PushWords::of(&block),
        grid: Grid::Rows,
        grid_input: None,
        slots: Vec::new(),
        scratch: Scratch::default(),
    })
}
