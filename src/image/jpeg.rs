//! JPEG through `jpeg-decoder`, with `zune-jpeg` for the colour spaces it lacks (CMYK, YCCK).
//!
//! The reference is Pillow with libjpeg-turbo (ISLOW IDCT, fancy upsampling). jpeg-decoder
//! follows libjpeg's fancy upsampling: on the oracle's 4:2:0 photo 7.8 % of values differ, by
//! 0.10 levels on average (max 3); zune-jpeg differs on 27 % (mean 0.37, max 4), which moved the
//! small model's logits by 3e-2. Both still differ from libjpeg-turbo's IDCT rounding by a level
//! here and there (tests/image.rs measures it). zune's strict mode makes truncated data an error,
//! as it is in Pillow; jpeg-decoder reports a truncated scan as an error too.

use super::convert::Layout;
use super::decode::{checked, corrupt, truncated, Decoded};
use super::error::ImageError;
use super::format::Format;
use super::orient::Orientation;
use super::{exif, Limits};
use zune_jpeg::zune_core::bytestream::ZCursor;
use zune_jpeg::zune_core::colorspace::ColorSpace;
use zune_jpeg::zune_core::options::DecoderOptions;
use zune_jpeg::JpegDecoder;

/// Width, height and EXIF orientation from the headers (every colour space: `decode` reads
/// the same headers first).
pub(crate) fn probe(name: &str, bytes: &[u8], limits: &Limits) -> Result<(usize, usize, Orientation), ImageError> {
    let mut decoder = jpeg_decoder::Decoder::new(bytes);
    decoder.read_info().map_err(|e| jpeg_error(name, e))?;
    let info = decoder.info().ok_or_else(|| corrupt(name, Format::Jpeg, "no frame header"))?;
    limits.check_size(name, u64::from(info.width), u64::from(info.height))?;
    let orientation = decoder.exif_data().map_or(Orientation::Normal, exif::orientation);
    Ok((usize::from(info.width), usize::from(info.height), orientation))
}

pub(crate) fn decode(name: &str, bytes: &[u8], limits: &Limits) -> Result<Decoded, ImageError> {
    let mut decoder = jpeg_decoder::Decoder::new(bytes);
    decoder.read_info().map_err(|e| jpeg_error(name, e))?;
    let info = decoder.info().ok_or_else(|| corrupt(name, Format::Jpeg, "no frame header"))?;
    limits.check_size(name, u64::from(info.width), u64::from(info.height))?;
    let layout = match info.pixel_format {
        jpeg_decoder::PixelFormat::RGB24 => Layout::Rgb,
        jpeg_decoder::PixelFormat::L8 => Layout::Gray,
        // CMYK/YCCK (and 16-bit lossless) go to zune, which converts them to RGB.
        _ => return decode_zune(name, bytes, limits),
    };
    let samples = decoder.decode().map_err(|e| jpeg_error(name, e))?;
    let orientation = decoder.exif_data().map_or(Orientation::Normal, exif::orientation);
    checked(name, Format::Jpeg, (usize::from(info.width), usize::from(info.height)), layout, samples, orientation)
}

/// jpeg-decoder reports data that ends early as the reader's error ("failed to fill whole
/// buffer"): said as what it is.
fn jpeg_error(name: &str, e: jpeg_decoder::Error) -> ImageError {
    match e {
        jpeg_decoder::Error::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => truncated(name, Format::Jpeg),
        e => corrupt(name, Format::Jpeg, e),
    }
}

fn decode_zune(name: &str, bytes: &[u8], limits: &Limits) -> Result<Decoded, ImageError> {
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
