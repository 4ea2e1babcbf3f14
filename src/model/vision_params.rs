//! Hyper-parameters of the Qwen3-VL vision encoder (llama.cpp's `clip` mmproj with projector
//! `qwen3vl_merger`), read from GGUF metadata and tensor shapes only, every tensor's shape
//! checked before a graph is built.

use super::error::ModelError;
use super::meta::Meta;
use crate::gguf::GgufFile;
use crate::quant::DType;
use std::collections::BTreeMap;

pub const ARCH: &str = "clip";
pub const PROJECTOR: &str = "qwen3vl_merger";
const PREFIX: &str = "clip.vision";

/// The 2-D RoPE base of the vision blocks: a constant of the HF model code
/// (`Qwen3VLVisionRotaryEmbedding`), not a value the converter writes.
pub const ROPE_THETA: f32 = 10000.0;

/// Name of the patch-embedding kernel slice for temporal index `t` (`v.patch_embd.weight`,
/// `v.patch_embd.weight.1`, ...).
pub fn patch_embd_name(t: usize) -> String {
    match t {
        0 => "v.patch_embd.weight".to_owned(),
        t => format!("v.patch_embd.weight.{t}"),
    }
}

/// Names of a merger's tensors: the final one (`v.post_ln`, `mm.0`, `mm.2`) or the deepstack
/// merger after block `d` (`v.deepstack.{d}.norm|fc1|fc2`).
#[derive(Clone, Debug, PartialEq)]
pub struct MergerNames {
    pub norm: String,
    pub fc1: String,
    pub fc2: String,
}

impl MergerNames {
    pub fn final_merger() -> MergerNames {
        MergerNames { norm: "v.post_ln".into(), fc1: "mm.0".into(), fc2: "mm.2".into() }
    }

    pub fn deepstack(block: usize) -> MergerNames {
        let t = |s: &str| format!("v.deepstack.{block}.{s}");
        MergerNames { norm: t("norm"), fc1: t("fc1"), fc2: t("fc2") }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct VisionParams {
    /// Hidden size of the blocks (`vh`).
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub head_dim: usize,
    /// Side of a square patch in pixels.
    pub patch_size: usize,
    /// Colour channels of a patch (from the patch kernel's shape).
    pub n_channels: usize,
    /// Frames per temporal patch: the number of patch-kernel slices in the file.
    pub n_temporal: usize,
    /// Side of the square of patches merged into one output token.
    pub merge: usize,
    /// Side of the learned position-embedding grid (sqrt of the table's rows).
    pub pos_side: usize,
    /// Width of every output slice (the text model's embedding width).
    pub n_out: usize,
    pub eps: f32,
    /// Blocks after which a deepstack feature is taken, in feature order.
    pub deepstack_blocks: Vec<usize>,
    pub image_mean: Vec<f32>,
    pub image_std: Vec<f32>,
    /// dtype of every weight the graph reads, by tensor name.
    pub dtypes: BTreeMap<String, DType>,
}

impl VisionParams {
    pub fn from_gguf(file: &GgufFile) -> Result<VisionParams, ModelError> {
        let meta = Meta::new(file, PREFIX);
        let string = |key: &str| file.get(key).and_then(|v| v.as_str()).unwrap_or("").to_owned();
        let arch = string("general.architecture");
        if arch != ARCH {
            return Err(meta.error(
                "key \"general.architecture\"".into(),
                format!("{arch:?} is not a vision projector ({ARCH:?})"),
            ));
        }
        let projector = string("clip.projector_type");
        if projector != PROJECTOR {
            return Err(meta.error(
                "key \"clip.projector_type\"".into(),
                format!("{projector:?} is not Qwen3-VL's {PROJECTOR:?}"),
            ));
        }
        let n_embd = meta.size("embedding_length", 1 << 16)?;
        let n_ff = meta.size("feed_forward_length", 1 << 18)?;
        let n_layer = meta.size("block_count", 1024)?;
        let n_head = meta.size("attention.head_count", 1024)?;
        let patch_size = meta.size("patch_size", 1024)?;
        let image_size = meta.size("image_size", 1 << 20)?;
        let n_out = meta.size("projection_dim", 1 << 16)?;
        let merge = meta.size("spatial_merge_size", 64)?;
        let eps = meta.positive("attention.layer_norm_epsilon")?;
        let head_dim = n_embd / n_head;
        if head_dim * n_head != n_embd || head_dim % 4 != 0 {
            return Err(meta.error(
                format!("key \"{PREFIX}.attention.head_count\""),
                format!("{n_head} heads do not split {n_embd} into head sizes that are a multiple of 4 (2-D RoPE)"),
            ));
        }
        let flags = meta.flags("is_deepstack_layers")?;
        if flags.len() != n_layer {
            return Err(meta.error(
                format!("key \"{PREFIX}.is_deepstack_layers\""),
                format!("{} flags for {n_layer} blocks", flags.len()),
            ));
        }
        let deepstack_blocks: Vec<usize> = (0..n_layer).filter(|&i| flags[i]).collect();

        // The patch kernel gives the channel count; its slices give the temporal patch.
        let kernel_name = patch_embd_name(0);
        let kernel =
            file.tensor(&kernel_name).ok_or_else(|| meta.error(format!("tensor {kernel_name:?}"), "missing"))?;
        let n_channels = match kernel.shape() {
            [x, y, c, h]
                if *x == patch_size as u64
                    && *y == patch_size as u64
                    && *h == n_embd as u64
                    && (1..=64).contains(c) =>
            {
                *c as usize
            }
            s => {
                return Err(meta.error(
                    format!("tensor {kernel_name:?}"),
                    format!("shape {s:?}, expected [{patch_size}, {patch_size}, channels, {n_embd}]"),
                ))
            }
        };
        let n_temporal = (1..).find(|&t| file.tensor(&patch_embd_name(t)).is_none()).unwrap_or(1);
        let image_mean = meta.floats("image_mean")?;
        let image_std = meta.floats("image_std")?;
        for (key, values) in [("image_mean", &image_mean), ("image_std", &image_std)] {
            if values.len() != n_channels {
                return Err(meta.error(
                    format!("key \"{PREFIX}.{key}\""),
                    format!("{} values for {n_channels} channels", values.len()),
                ));
            }
        }
        if image_std.iter().any(|&s| s <= 0.0) {
            return Err(meta.error(
                format!("key \"{PREFIX}.image_std\""),
                format!("{image_std:?} has a value that is not positive"),
            ));
        }

        let pos_name = "v.position_embd.weight";
        let pos = file.tensor(pos_name).ok_or_else(|| meta.error(format!("tensor {pos_name:?}"), "missing"))?;
        let pos_side = match pos.shape() {
            [w, n] if *w == n_embd as u64 => (1..=4096u64).find(|s| s * s == *n).map(|s| s as usize),
            _ => None,
        }
        .ok_or_else(|| {
            meta.error(
                format!("tensor {pos_name:?}"),
                format!("shape {:?}, expected [{n_embd}, side * side]", pos.shape()),
            )
        })?;
        if pos_side * patch_size != image_size {
            return Err(meta.error(
                format!("key \"{PREFIX}.image_size\""),
                format!(
                    "{image_size} is not the {pos_side} x {pos_side} position grid times the patch size {patch_size}"
                ),
            ));
        }

        let p = VisionParams {
            n_embd,
            n_ff,
            n_layer,
            n_head,
            head_dim,
            patch_size,
            n_channels,
            n_temporal,
            merge,
            pos_side,
            n_out,
            eps,
            deepstack_blocks,
            image_mean,
            image_std,
            dtypes: BTreeMap::new(),
        };
        let dtypes = p.check_tensors(&meta)?;
        Ok(VisionParams { dtypes, ..p })
    }

    /// Checks the shape of every tensor the graph reads (vectors must be F32: the graph adds
    /// them to f32 activations) and returns their dtypes.
    fn check_tensors(&self, meta: &Meta) -> Result<BTreeMap<String, DType>, ModelError> {
        let (vh, mvh) = (self.n_embd, self.merged_width());
        let mut want = Shapes::default();
        for t in 0..self.n_temporal {
            want.matrix(patch_embd_name(t), &[self.patch_size, self.patch_size, self.n_channels, vh]);
        }
        want.matrix("v.position_embd.weight".into(), &[vh, self.pos_side * self.pos_side]);
        want.vector("v.patch_embd.bias".into(), vh);
        for il in 0..self.n_layer {
            let b = |s: &str| format!("v.blk.{il}.{s}");
            want.layer_norm(&b("ln1"), vh);
            want.linear(&b("attn_qkv"), vh, 3 * vh);
            want.linear(&b("attn_out"), vh, vh);
            want.layer_norm(&b("ln2"), vh);
            want.linear(&b("ffn_up"), vh, self.n_ff);
            want.linear(&b("ffn_down"), self.n_ff, vh);
        }
        let final_merger = (MergerNames::final_merger(), vh);
        let deepstack = self.deepstack_blocks.iter().map(|&d| (MergerNames::deepstack(d), mvh));
        for (names, norm_width) in std::iter::once(final_merger).chain(deepstack) {
            want.layer_norm(&names.norm, norm_width);
            want.linear(&names.fc1, mvh, mvh);
            want.linear(&names.fc2, mvh, self.n_out);
        }
        let mut dtypes = BTreeMap::new();
        for (name, shape) in &want.matrices {
            dtypes.insert(name.clone(), meta.dtype(name, shape)?);
        }
        for (name, width) in &want.vectors {
            dtypes.insert(name.clone(), meta.vector_dtype(name, *width, &[DType::F32])?);
        }
        meta.check_all_read(&dtypes)?;
        Ok(dtypes)
    }

    /// Values per row of `pixel_values`: `[channel][temporal][y][x]`.
    pub fn patch_row(&self) -> usize {
        self.n_channels * self.n_temporal * self.patch_size * self.patch_size
    }

    /// Patches merged into one output token.
    pub fn merge_patches(&self) -> usize {
        self.merge * self.merge
    }

    /// Width of a merge block's patches side by side: the mergers' input.
    pub fn merged_width(&self) -> usize {
        self.n_embd * self.merge_patches()
    }

    pub fn n_deepstack(&self) -> usize {
        self.deepstack_blocks.len()
    }

    /// Values per output token: the merger's output and each deepstack feature.
    pub fn wide_width(&self) -> usize {
        self.n_out * (1 + self.n_deepstack())
    }
}

/// The tensors a vision graph reads and their expected shapes (innermost first).
#[derive(Default)]
struct Shapes {
    /// Weights of any dtype the matmul reads.
    matrices: Vec<(String, Vec<usize>)>,
    /// Biases and norm parameters, added to f32 activations.
    vectors: Vec<(String, usize)>,
}

impl Shapes {
    fn matrix(&mut self, name: String, shape: &[usize]) {
        self.matrices.push((name, shape.to_vec()));
    }

    fn vector(&mut self, name: String, width: usize) {
        self.vectors.push((name, width));
    }

    fn linear(&mut self, name: &str, n_in: usize, n_out: usize) {
        self.matrix(format!("{name}.weight"), &[n_in, n_out]);
        self.vector(format!("{name}.bias"), n_out);
    }

    fn layer_norm(&mut self, name: &str, width: usize) {
        self.vector(format!("{name}.weight"), width);
        self.vector(format!("{name}.bias"), width);
    }
}
