//! Decoded samples to RGB, as the HF processor's `convert_to_rgb` does it with Pillow: RGB is kept
//! as it is; everything else goes to RGBA and is alpha-composited onto opaque white, then the
//! alpha is dropped. Gray is replicated to three channels.

use super::RgbImage;

/// How the decoders hand over 8-bit samples (interleaved, row-major, no padding).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    Gray,
    GrayAlpha,
    Rgb,
    Rgba,
}

impl Layout {
    pub fn channels(self) -> usize {
        match self {
            Layout::Gray => 1,
            Layout::GrayAlpha => 2,
            Layout::Rgb => 3,
            Layout::Rgba => 4,
        }
    }
}

/// `value` with coverage `alpha` over opaque white.
///
/// Pillow's `alpha_composite` works in 7-bit fixed point; with an opaque background its result
/// is exactly round((value * alpha + 255 * (255 - alpha)) / 255) for all 65,536 (value, alpha)
/// pairs (checked exhaustively against Pillow 13). The quotient is never a tie, so the +127
/// integer form is that rounding.
pub fn over_white(value: u8, alpha: u8) -> u8 {
    let (v, a) = (u32::from(value), u32::from(alpha));
    ((v * a + 255 * (255 - a) + 127) / 255) as u8
}

/// RGB from `samples` laid out as `layout`; `samples.len()` must be `pixels * layout.channels()`.
pub fn to_rgb(width: usize, height: usize, layout: Layout, samples: Vec<u8>) -> RgbImage {
    let data = match layout {
        Layout::Rgb => samples,
        Layout::Gray => samples.iter().flat_map(|&g| [g; 3]).collect(),
        Layout::GrayAlpha => samples.chunks_exact(2).flat_map(|p| [over_white(p[0], p[1]); 3]).collect(),
        Layout::Rgba => samples
            .chunks_exact(4)
            .flat_map(|p| [over_white(p[0], p[3]), over_white(p[1], p[3]), over_white(p[2], p[3])])
            .collect(),
    };
    RgbImage::from_parts(width, height, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compositing_ends_are_exact() {
        for v in 0..=255u8 {
            assert_eq!(over_white(v, 255), v);
            assert_eq!(over_white(v, 0), 255);
        }
        // Values from Pillow 13: alpha_composite(white, (v, v, v, a)).
        assert_eq!(over_white(69, 92), 188);
        assert_eq!(over_white(0, 128), 127);
        assert_eq!(over_white(0, 127), 128);
    }

    #[test]
    fn gray_and_alpha_layouts_become_rgb() {
        let img = to_rgb(2, 1, Layout::GrayAlpha, vec![10, 255, 10, 0]);
        assert_eq!(img.data(), &[10, 10, 10, 255, 255, 255]);
        let img = to_rgb(1, 1, Layout::Rgba, vec![0, 100, 200, 128]);
        assert_eq!(img.data(), &[127, 177, 227]);
        let img = to_rgb(2, 1, Layout::Gray, vec![3, 4]);
        assert_eq!(img.data(), &[3, 3, 3, 4, 4, 4]);
    }
}
