//! RGB image to the vision tower's input, as the HF Qwen3-VL processor makes it: smart_resize,
//! antialiased bicubic resize, normalise, patchify.

use super::error::{ImageError, ImageErrorKind};
use super::patches::{level_table, patch_positions, patchify};
use super::{resize_bicubic_aa, smart_resize, RgbImage};

/// Preprocessing parameters. Patch size, merge size and mean/std belong to the model (the
/// mmproj metadata); the pixel budget is the caller's choice.
#[derive(Clone, Debug, PartialEq)]
pub struct PreprocessConfig {
    pub patch_size: usize,
    pub merge_size: usize,
    /// Frames per temporal patch; a still image is repeated to fill them.
    pub temporal_patch_size: usize,
    pub min_pixels: usize,
    pub max_pixels: usize,
    pub image_mean: [f32; 3],
    pub image_std: [f32; 3],
}

impl PreprocessConfig {
    /// Qwen3-VL's processor defaults (`size.shortest_edge` / `size.longest_edge`).
    pub const HF_MIN_PIXELS: usize = 65_536;
    pub const HF_MAX_PIXELS: usize = 16_777_216;
    /// The kiosk budget: at most 1024 x 1024 pixels = 4096 patches of 16 x 16 = 1024 image
    /// tokens after the 2 x 2 merge. The HF default lets a 12 MP phone photo through nearly
    /// whole (~46k patches, ~11.5k tokens): vision attention is quadratic in patches, so that is
    /// tens of seconds on a small GPU plus a long prefill. 1 MP keeps the encoder at 4096 patches
    /// and is the top of Qwen's own recommended range (Qwen2.5-VL: 1280 x 28 x 28 ~ 1.0 MP),
    /// enough to read a document page or a sign.
    pub const KIOSK_MAX_PIXELS: usize = 1024 * 1024;

    /// The processor's own settings: the reference behaviour.
    pub fn hf() -> Self {
        Self {
            patch_size: 16,
            merge_size: 2,
            temporal_patch_size: 2,
            min_pixels: Self::HF_MIN_PIXELS,
            max_pixels: Self::HF_MAX_PIXELS,
            image_mean: [0.5; 3],
            image_std: [0.5; 3],
        }
    }

    /// HF's settings with the kiosk pixel budget.
    pub fn kiosk() -> Self {
        Self { max_pixels: Self::KIOSK_MAX_PIXELS, ..Self::hf() }
    }

    /// Sizes are snapped to multiples of this (32 for Qwen3-VL).
    pub fn factor(&self) -> usize {
        self.patch_size.saturating_mul(self.merge_size)
    }

    /// Values per row of `pixel_values` (1536 for Qwen3-VL).
    pub fn patch_dim(&self) -> usize {
        3 * self.temporal_patch_size * self.patch_size * self.patch_size
    }

    fn check(&self) -> Result<(), ImageError> {
        let bad = |what: String| Err(ImageError::unnamed(ImageErrorKind::BadConfig(what)));
        if self.patch_size == 0 || self.merge_size == 0 || self.temporal_patch_size == 0 {
            return bad(format!("{self:?} has a zero size"));
        }
        let dim = self.patch_size.checked_mul(self.patch_size).and_then(|p| p.checked_mul(self.temporal_patch_size));
        if self.patch_size.checked_mul(self.merge_size).is_none() || dim.and_then(|d| d.checked_mul(3)).is_none() {
            return bad(format!("{self:?}: sizes overflow"));
        }
        if self.image_std.iter().any(|&s| !s.is_normal()) {
            return bad(format!("image_std {:?} must be non-zero", self.image_std));
        }
        Ok(())
    }
}

impl Default for PreprocessConfig {
    fn default() -> Self {
        Self::hf()
    }
}

/// The vision tower's input for one image.
#[derive(Clone, Debug)]
pub struct Patches {
    /// `n_patches` rows of `patch_dim` values, rows in merge-block order (see [`patch_positions`]).
    pub pixel_values: Vec<f32>,
    /// [t, h, w] in patches; t = 1 for a still image.
    pub grid_thw: [usize; 3],
    /// The size the image was resized to, (height, width) in pixels.
    pub resized_hw: (usize, usize),
    pub patch_dim: usize,
    pub merge_size: usize,
}

impl Patches {
    pub fn n_patches(&self) -> usize {
        self.grid_thw.iter().product()
    }

    /// Image tokens in the prompt: patches / merge^2.
    pub fn n_image_tokens(&self) -> usize {
        self.n_patches() / (self.merge_size * self.merge_size)
    }

    /// (row, col) of each row of `pixel_values`, for the vision RoPE and position embeddings.
    pub fn positions(&self) -> Vec<(usize, usize)> {
        patch_positions(self.grid_thw[1], self.grid_thw[2], self.merge_size)
    }
}

/// Resizes `img` to the smart_resize size and cuts it into normalised patches.
pub fn preprocess(img: &RgbImage, cfg: &PreprocessConfig) -> Result<Patches, ImageError> {
    cfg.check()?;
    let (h, w) = smart_resize(img.height(), img.width(), cfg.factor(), cfg.min_pixels, cfg.max_pixels)?;
    let resized = resize_bicubic_aa(img, h, w);
    let levels = level_table(cfg.image_mean, cfg.image_std);
    let pixel_values = patchify(&resized, cfg.patch_size, cfg.merge_size, cfg.temporal_patch_size, &levels);
    Ok(Patches {
        pixel_values,
        grid_thw: [1, h / cfg.patch_size, w / cfg.patch_size],
        resized_hw: (h, w),
        patch_dim: cfg.patch_dim(),
        merge_size: cfg.merge_size,
    })
}
