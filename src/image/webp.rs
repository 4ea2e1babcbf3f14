//! WebP (lossy, lossless, with alpha; the first frame of an animation) through `image-webp`.

use super::convert::Layout;
use super::decode::{checked, corrupt, Decoded};
use super::error::ImageError;
use super::format::Format;
use super::orient::Orientation;
use super::{exif, Limits};
use image_webp::WebPDecoder;
use std::io::Cursor;

/// Width, height and EXIF orientation from the RIFF chunks.
pub(crate) fn probe(name: &str, bytes: &[u8], limits: &Limits) -> Result<(usize, usize, Orientation), ImageError> {
    let bad = |e: image_webp::DecodingError| corrupt(name, Format::WebP, e);
    let mut decoder = WebPDecoder::new(Cursor::new(bytes)).map_err(bad)?;
    let (width, height) = decoder.dimensions();
    limits.check_size(name, width.into(), height.into())?;
    let orientation = decoder.exif_metadata().ok().flatten().map_or(Orientation::Normal, |e| exif::orientation(&e));
    Ok((width as usize, height as usize, orientation))
}

pub(crate) fn decode(name: &str, bytes: &[u8], limits: &Limits) -> Result<Decoded, ImageError> {
    let bad = |e: image_webp::DecodingError| corrupt(name, Format::WebP, e);
    let mut decoder = WebPDecoder::new(Cursor::new(bytes)).map_err(bad)?;
    let (width, height) = decoder.dimensions();
    limits.check_size(name, width.into(), height.into())?;
    let size = decoder.output_buffer_size().ok_or_else(|| corrupt(name, Format::WebP, "image too large for memory"))?;
    let mut samples = vec![0; size];
    decoder.read_image(&mut samples).map_err(bad)?;
    // Pillow opens a WebP with alpha as RGBA (then composited onto white), else as RGB.
    let layout = if decoder.has_alpha() { Layout::Rgba } else { Layout::Rgb };
    let orientation = decoder.exif_metadata().ok().flatten().map_or(Orientation::Normal, |e| exif::orientation(&e));
    checked(name, Format::WebP, (width as usize, height as usize), layout, samples, orientation)
}
