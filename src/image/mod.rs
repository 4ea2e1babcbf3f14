//! Images in, vision-tower input out, exactly as the HF Qwen3-VL processor makes it.
//!
//! * [`decode_file`] / [`decode_bytes`]: PNG, JPEG or WebP (recognised by content) to upright RGB,
//!   within [`Limits`] checked before decoding; alpha composited onto white and gray replicated,
//!   as the processor's `convert_to_rgb` does with Pillow; [`probe_bytes`] the upright size
//!   alone, from the headers, to count an image's tokens before decoding it.
//! * [`preprocess`]: [`smart_resize`] to multiples of patch x merge, [`resize_bicubic_aa`]
//!   (bit-exact with torchvision's uint8 antialiased bicubic), normalise, cut into [`Patches`]
//!   in merge-block order.
//!
//! Every failure is an [`ImageError`] whose one-line `Display` names the file; no input bytes
//! can make this module panic or allocate beyond the limits.
//!
//! Where hrx and the HF pipeline (Pillow 13 + transformers) part ways, on purpose or not:
//! * 16-bit gray PNG: Pillow clamps it to white; hrx keeps the high byte (png.rs).
//! * JPEG pixels are zune-jpeg's, a few levels from libjpeg-turbo's (jpeg.rs).
//! * Alpha, palettes, tRNS (ignored on RGB PNGs, as the processor does), low bit depths,
//!   16-bit RGB(A), EXIF orientation and the resize match Pillow/torchvision bit for bit.

mod convert;
mod decode;
mod error;
mod exif;
mod format;
mod jpeg;
mod limits;
mod orient;
mod patches;
mod png;
mod preprocess;
mod resize;
mod smart_resize;
mod thumbnail;
mod webp;

pub use decode::{decode_bytes, decode_file, probe_bytes, read_file, read_from};
pub use error::{ImageError, ImageErrorKind};
pub use format::{sniff, Format};
pub use limits::Limits;
pub use orient::Orientation;
pub use patches::patch_positions;
pub use preprocess::{preprocess, Patches, PreprocessConfig};
pub use resize::resize_bicubic_aa;
pub use smart_resize::{smart_resize, MAX_ASPECT_RATIO};
pub use thumbnail::thumbnail_png;

/// An 8-bit RGB image, rows top to bottom, pixels interleaved R, G, B (HWC).
/// `data.len() == width * height * 3` always holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RgbImage {
    width: usize,
    height: usize,
    data: Vec<u8>,
}

impl RgbImage {
    /// Wraps raw HWC RGB bytes; `None` if the length is not `width * height * 3`.
    pub fn from_raw(width: usize, height: usize, data: Vec<u8>) -> Option<Self> {
        (width.checked_mul(height)?.checked_mul(3)? == data.len()).then_some(Self { width, height, data })
    }

    /// For code of this module, which sizes `data` itself.
    pub(crate) fn from_parts(width: usize, height: usize, data: Vec<u8>) -> Self {
        debug_assert_eq!(data.len(), width * height * 3);
        Self { width, height, data }
    }

    pub fn width(&self) -> usize {
        self.width
    }

    pub fn height(&self) -> usize {
        self.height
    }

    pub fn data(&self) -> &[u8] {
        &self.data
    }

    pub fn into_data(self) -> Vec<u8> {
        self.data
    }
}
