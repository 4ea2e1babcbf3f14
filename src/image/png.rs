//! PNG through the `png` crate, with Pillow's conversions.

use super::convert::Layout;
use super::decode::{checked, corrupt, Decoded};
use super::error::ImageError;
use super::format::Format;
use super::orient::Orientation;
use super::{exif, Limits};
use ::png::{BitDepth, ColorType, Transformations};
use std::io::Cursor;

/// Width, height and EXIF orientation from the chunks before the image data.
pub(crate) fn probe(name: &str, bytes: &[u8], limits: &Limits) -> Result<(usize, usize, Orientation), ImageError> {
    let bad = |e: ::png::DecodingError| corrupt(name, Format::Png, e);
    let mut decoder = ::png::Decoder::new(Cursor::new(bytes));
    let header = decoder.read_header_info().map_err(bad)?;
    let (width, height) = (header.width, header.height);
    limits.check_size(name, width.into(), height.into())?;
    let reader = decoder.read_info().map_err(bad)?;
    let orientation = reader.info().exif_metadata.as_deref().map_or(Orientation::Normal, exif::orientation);
    Ok((width as usize, height as usize, orientation))
}

pub(crate) fn decode(name: &str, bytes: &[u8], limits: &Limits) -> Result<Decoded, ImageError> {
    let bad = |e: ::png::DecodingError| corrupt(name, Format::Png, e);
    let mut decoder = ::png::Decoder::new(Cursor::new(bytes));
    // EXPAND: palette -> RGB(A) with tRNS alpha; gray below 8 bits -> 8 bits scaled to 0..255 as
    // Pillow's L;1/L;2/L;4 unpackers do; a gray or RGB tRNS colour -> alpha channel.
    // STRIP_16: keep the high byte of 16-bit samples, which is what Pillow does for 16-bit RGB,
    // RGBA and gray+alpha. For 16-bit gray Pillow opens mode I;16, whose RGB conversion clamps
    // every value above 255 to white; hrx deliberately keeps the high byte there too.
    decoder.set_transformations(Transformations::EXPAND | Transformations::STRIP_16);
    let header = decoder.read_header_info().map_err(bad)?;
    limits.check_size(name, header.width.into(), header.height.into())?;
    let source = header.color_type;
    let mut reader = decoder.read_info().map_err(bad)?;
    check_palette(name, reader.info())?;
    let size = reader.output_buffer_size().ok_or_else(|| corrupt(name, Format::Png, "image too large for memory"))?;
    let mut samples = vec![0; size];
    // The first frame: the IDAT image, which is also what Pillow shows for an APNG.
    let frame = reader.next_frame(&mut samples).map_err(bad)?;
    samples.truncate(frame.buffer_size());
    if frame.bit_depth != BitDepth::Eight {
        return Err(corrupt(name, Format::Png, format!("unexpected output depth {:?}", frame.bit_depth)));
    }
    let layout = match frame.color_type {
        ColorType::Grayscale => Layout::Gray,
        ColorType::GrayscaleAlpha => Layout::GrayAlpha,
        ColorType::Rgb => Layout::Rgb,
        ColorType::Rgba => Layout::Rgba,
        ColorType::Indexed => return Err(corrupt(name, Format::Png, "palette was not expanded")),
    };
    // The processor keeps mode-RGB images untouched, so the tRNS colour of an RGB PNG (which only
    // Pillow's convert("RGBA") would apply) never reaches the model: drop that alpha again.
    let (layout, samples) = if source == ColorType::Rgb && layout == Layout::Rgba {
        (Layout::Rgb, samples.chunks_exact(4).flat_map(|p| [p[0], p[1], p[2]]).collect())
    } else {
        (layout, samples)
    };
    let orientation = reader.info().exif_metadata.as_deref().map_or(Orientation::Normal, exif::orientation);
    let size = (frame.width as usize, frame.height as usize);
    checked(name, Format::Png, size, layout, samples, orientation)
}

/// A PLTE chunk of whole RGB entries (1 to 256 of them) and, for a palette image, a tRNS chunk of
/// at most one alpha per entry, as the PNG spec has them: the `png` crate (0.18) expands palettes
/// assuming both and panics on a file where they do not hold (found by scripts/fuzz).
fn check_palette(name: &str, info: &::png::Info) -> Result<(), ImageError> {
    let Some(palette) = info.palette.as_deref() else { return Ok(()) };
    if palette.is_empty() || palette.len() % 3 != 0 || palette.len() > 3 * 256 {
        let detail = format!("a PLTE chunk of {} bytes, not 1 to 256 RGB entries", palette.len());
        return Err(corrupt(name, Format::Png, detail));
    }
    match info.trns.as_deref() {
        Some(trns) if info.color_type == ColorType::Indexed && trns.len() > palette.len() / 3 => {
            let detail = format!("a tRNS chunk of {} entries for a palette of {}", trns.len(), palette.len() / 3);
            Err(corrupt(name, Format::Png, detail))
        }
        _ => Ok(()),
    }
}
