//! Small PNG thumbnails of decoded images (the caption report's), by the model's own resize.

use super::{resize_bicubic_aa, RgbImage};

/// `img` scaled to fit `side` x `side` pixels (never up), as PNG bytes.
pub fn thumbnail_png(img: &RgbImage, side: usize) -> Vec<u8> {
    let (w, h) = (img.width().max(1), img.height().max(1));
    let scale = (side as f64 / w.max(h) as f64).min(1.0);
    let (tw, th) = (((w as f64 * scale).round() as usize).max(1), ((h as f64 * scale).round() as usize).max(1));
    let small = if (tw, th) == (w, h) { img.clone() } else { resize_bicubic_aa(img, th, tw) };
    let mut out = Vec::new();
    let mut encoder = ::png::Encoder::new(&mut out, small.width() as u32, small.height() as u32);
    encoder.set_color(::png::ColorType::Rgb);
    encoder.set_depth(::png::BitDepth::Eight);
    encoder.set_compression(::png::Compression::High);
    // Writing into a Vec of an image whose size matches its data cannot fail.
    if let Ok(mut writer) = encoder.write_header() {
        let _ = writer.write_image_data(small.data());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thumbnail_fits_its_side_and_is_a_png_of_it() {
        let img = RgbImage::from_raw(300, 200, (0..300 * 200 * 3).map(|i| (i % 251) as u8).collect()).unwrap();
        let png = thumbnail_png(&img, 96);
        let decoder = ::png::Decoder::new(std::io::Cursor::new(&png));
        let reader = decoder.read_info().unwrap();
        assert_eq!((reader.info().width, reader.info().height), (96, 64));
        let tiny = RgbImage::from_raw(4, 3, vec![9; 36]).unwrap();
        let reader = ::png::Decoder::new(std::io::Cursor::new(thumbnail_png(&tiny, 96))).read_info().unwrap();
        assert_eq!((reader.info().width, reader.info().height), (4, 3), "never scaled up");
    }
}
