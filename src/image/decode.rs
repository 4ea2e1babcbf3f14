//! File bytes to upright RGB: limits, format sniffing, the format's decoder, RGB conversion and
//! EXIF orientation, in that order.

use super::convert::{self, Layout};
use super::error::{ImageError, ImageErrorKind};
use super::format::{self, Format};
use super::orient::Orientation;
use super::{jpeg, png, webp, Limits, RgbImage};
use std::io::Read;
use std::path::Path;

/// What a format decoder hands over: 8-bit interleaved samples and the EXIF orientation.
pub(crate) struct Decoded {
    pub width: usize,
    pub height: usize,
    pub layout: Layout,
    pub samples: Vec<u8>,
    pub orientation: Orientation,
}

/// Reads and decodes an image file; errors name `path`.
pub fn decode_file(path: &Path, limits: &Limits) -> Result<RgbImage, ImageError> {
    decode_bytes(&path.display().to_string(), &read_file(path, limits)?, limits)
}

/// An image file's bytes, within `limits.max_file_bytes`; errors name `path`.
pub fn read_file(path: &Path, limits: &Limits) -> Result<Vec<u8>, ImageError> {
    let name = path.display().to_string();
    let io = |e| ImageError::new(&name, ImageErrorKind::Io(e));
    // Opening a FIFO waits for a writer, for ever: only regular files are opened.
    if !std::fs::metadata(path).map_err(io)?.is_file() {
        let not_a_file = std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file");
        return Err(io(not_a_file));
    }
    let file = std::fs::File::open(path).map_err(io)?;
    limits.check_file_bytes(&name, file.metadata().map_err(io)?.len())?;
    read_from(&name, file, limits)
}

/// The bytes of a stream (a pipe: standard input), within `limits.max_file_bytes`, never
/// reading more than one byte past it; errors call it `name`.
pub fn read_from(name: &str, reader: impl Read, limits: &Limits) -> Result<Vec<u8>, ImageError> {
    // `take` keeps the cap on a stream of unknown length, and on a file that grew after its
    // size was checked.
    let mut bytes = Vec::new();
    reader
        .take(limits.max_file_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| ImageError::new(name, ImageErrorKind::Io(e)))?;
    limits.check_file_bytes(name, bytes.len() as u64)?;
    Ok(bytes)
}

/// The upright (width, height) `decode_bytes` would give, from the headers alone (a PNG's
/// chunks up to its image data, a JPEG's or WebP's headers: no pixel is decoded), within
/// `limits`: what a caller counts an image's cost by before paying it.
pub fn probe_bytes(name: &str, bytes: &[u8], limits: &Limits) -> Result<(usize, usize), ImageError> {
    limits.check_file_bytes(name, bytes.len() as u64)?;
    let format = format::sniff(bytes)
        .map_err(|looks_like| ImageError::new(name, ImageErrorKind::UnknownFormat { looks_like }))?;
    let (width, height, orientation) = contain_panics(name, format, || match format {
        Format::Png => png::probe(name, bytes, limits),
        Format::Jpeg => jpeg::probe(name, bytes, limits),
        Format::WebP => webp::probe(name, bytes, limits),
    })?;
    Ok(if orientation.swaps_axes() { (height, width) } else { (width, height) })
}

/// Decodes an image held in memory; `name` is what errors call it (a path, a URL, "upload 3").
///
/// PNG, JPEG and WebP are recognised by their first bytes. The result is what the HF processor
/// resizes: EXIF orientation applied, alpha composited onto white, gray replicated to RGB.
pub fn decode_bytes(name: &str, bytes: &[u8], limits: &Limits) -> Result<RgbImage, ImageError> {
    limits.check_file_bytes(name, bytes.len() as u64)?;
    let format = format::sniff(bytes)
        .map_err(|looks_like| ImageError::new(name, ImageErrorKind::UnknownFormat { looks_like }))?;
    let decoded: Decoded = contain_panics(name, format, || match format {
        Format::Png => png::decode(name, bytes, limits),
        Format::Jpeg => jpeg::decode(name, bytes, limits),
        Format::WebP => webp::decode(name, bytes, limits),
    })?;
    let rgb = convert::to_rgb(decoded.width, decoded.height, decoded.layout, decoded.samples);
    Ok(decoded.orientation.apply(rgb))
}

/// The decoder crates are fuzzed and meant to return errors, but the bytes are untrusted: a
/// panic inside one becomes an error for this file instead of taking the process down (with the
/// default `panic = "unwind"`; tests/image.rs checks that damaged files never get here).
fn contain_panics<T>(
    name: &str,
    format: Format,
    decode: impl FnOnce() -> Result<T, ImageError>,
) -> Result<T, ImageError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(decode))
        .unwrap_or_else(|_| Err(ImageError::new(name, ImageErrorKind::DecoderPanicked { format: format.name() })))
}

/// The error for data a decoder refused.
pub(crate) fn corrupt(name: &str, format: Format, detail: impl std::fmt::Display) -> ImageError {
    ImageError::new(name, ImageErrorKind::Corrupt { format: format.name(), detail: detail.to_string() })
}

pub(crate) fn truncated(name: &str, format: Format) -> ImageError {
    ImageError::new(name, ImageErrorKind::Truncated { format: format.name() })
}

/// Checks that a decoder returned exactly `width * height` pixels of `layout`.
pub(crate) fn checked(
    name: &str,
    format: Format,
    (width, height): (usize, usize),
    layout: Layout,
    samples: Vec<u8>,
    orientation: Orientation,
) -> Result<Decoded, ImageError> {
    let expected = width.checked_mul(height).and_then(|p| p.checked_mul(layout.channels()));
    if expected != Some(samples.len()) {
        let detail = format!("decoder returned {} bytes for {width}x{height} {layout:?}", samples.len());
        return Err(corrupt(name, format, detail));
    }
    Ok(Decoded { width, height, layout, samples, orientation })
}
