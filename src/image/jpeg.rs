//! JPEG through `zune-jpeg`.
//!
//! The reference (Pillow with libjpeg-turbo: ISLOW IDCT, fancy upsampling) and zune-jpeg round
//! differently in the IDCT, chroma upsampling and colour conversion, so decoded pixels differ by
//! a few levels (tests/image.rs measures it). Strict mode makes truncated data an error, as it is
//! in Pillow; it also refuses data libjpeg only warns about (stray bytes between segments,
//! unexpected markers inside scans), which only corrupt files contain.

use super::convert::Layout;
use super::decode::{checked, corrupt, Decoded};
use super::error::ImageError;
use super::format::Format;
use super::orient::Orientation;
use super::{exif, Limits};
use zune_jpeg::zune_core::bytestream::ZCursor;
use zune_jpeg::zune_core::colorspace::ColorSpace;
use zune_jpeg::zune_core::options::DecoderOptions;
use zune_jpeg::JpegDecoder;

pub(crate) fn decode(name: &str, bytes: &[u8], limits: &Limits) -> Result<Decoded, ImageError> {
    let bad = |e: zune_jpeg::errors::DecodeErrors| corrupt(name, Format::Jpeg, e);
    // Gray, YCbCr, CMYK and YCCK all come out as RGB; the size caps are ours (Limits), so the
    // decoder's own are opened to the format's maximum.
    let options = DecoderOptions::default()
        .set_strict_mode(true)
        .jpeg_set_out_colorspace(ColorSpace::RGB)
        .set_max_width(usize::from(u16::MAX))
        .set_max_height(usize::from(u16::MAX));
    let mut decoder = JpegDecoder::new_with_options(ZCursor::new(bytes), options);
    decoder.decode_headers().map_err(bad)?;
    let (width, height) = decoder.dimensions().ok_or_else(|| corrupt(name, Format::Jpeg, "no frame header"))?;
    limits.check_size(name, width as u64, height as u64)?;
    let orientation = decoder.exif().map_or(Orientation::Normal, |e| exif::orientation(e));
    let samples = decoder.decode().map_err(bad)?;
    checked(name, Format::Jpeg, (width, height), Layout::Rgb, samples, orientation)
}
