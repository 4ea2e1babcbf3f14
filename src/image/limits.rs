//! Resource limits checked before any pixel is decoded, so a decompression bomb (a tiny file whose
//! header declares gigapixels) is a clear error instead of an out-of-memory abort.

use super::error::{ImageError, ImageErrorKind};

/// Caps on an input image. Both are checked before decoding: the file size before reading the
/// file, the declared width x height right after parsing the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest accepted width x height. Decoding needs at most 4 bytes per pixel plus the
    /// 3-byte RGB result, so the default 50 MP bounds a decode at about 350 MB.
    pub max_pixels: u64,
    /// Largest accepted file, in bytes.
    pub max_file_bytes: u64,
}

impl Limits {
    pub const DEFAULT_MAX_PIXELS: u64 = 50_000_000;
    pub const DEFAULT_MAX_FILE_BYTES: u64 = 256 << 20;

    /// The declared size must be non-empty and within `max_pixels`.
    pub(crate) fn check_size(&self, name: &str, width: u64, height: u64) -> Result<(), ImageError> {
        if width == 0 || height == 0 {
            return Err(ImageError::new(name, ImageErrorKind::ZeroSize { width, height }));
        }
        if u128::from(width) * u128::from(height) > u128::from(self.max_pixels) {
            let kind = ImageErrorKind::TooManyPixels { width, height, max_pixels: self.max_pixels };
            return Err(ImageError::new(name, kind));
        }
        Ok(())
    }

    pub(crate) fn check_file_bytes(&self, name: &str, bytes: u64) -> Result<(), ImageError> {
        if bytes == 0 {
            return Err(ImageError::new(name, ImageErrorKind::Empty));
        }
        if bytes > self.max_file_bytes {
            return Err(ImageError::new(name, ImageErrorKind::FileTooLarge { bytes, max: self.max_file_bytes }));
        }
        Ok(())
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_pixels: Self::DEFAULT_MAX_PIXELS, max_file_bytes: Self::DEFAULT_MAX_FILE_BYTES }
    }
}
