//! Applying the EXIF orientation, as transformers' `load_image` does with Pillow's
//! `ImageOps.exif_transpose` before the processor sees the picture.

use super::RgbImage;

/// The transform that brings a stored image upright, named after Pillow's `Image.Transpose`
/// operation that `exif_transpose` applies for each EXIF value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Orientation {
    /// EXIF 1: stored upright.
    Normal,
    /// EXIF 2: mirror left-right.
    FlipHorizontal,
    /// EXIF 3: rotate 180 degrees.
    Rotate180,
    /// EXIF 4: mirror top-bottom.
    FlipVertical,
    /// EXIF 5: mirror across the main diagonal (swaps width and height).
    Transpose,
    /// EXIF 6: rotate 270 degrees counter-clockwise, i.e. 90 clockwise.
    Rotate270,
    /// EXIF 7: mirror across the anti-diagonal.
    Transverse,
    /// EXIF 8: rotate 90 degrees counter-clockwise.
    Rotate90,
}

impl Orientation {
    pub fn from_exif(value: u16) -> Option<Self> {
        Some(match value {
            1 => Self::Normal,
            2 => Self::FlipHorizontal,
            3 => Self::Rotate180,
            4 => Self::FlipVertical,
            5 => Self::Transpose,
            6 => Self::Rotate270,
            7 => Self::Transverse,
            8 => Self::Rotate90,
            _ => return None,
        })
    }

    pub(crate) fn swaps_axes(self) -> bool {
        matches!(self, Self::Transpose | Self::Rotate270 | Self::Transverse | Self::Rotate90)
    }

    /// The upright image.
    pub fn apply(self, img: RgbImage) -> RgbImage {
        if self == Self::Normal {
            return img;
        }
        let (w, h) = (img.width(), img.height());
        let (out_w, out_h) = if self.swaps_axes() { (h, w) } else { (w, h) };
        let src = img.data();
        let mut out = Vec::with_capacity(src.len());
        for y in 0..out_h {
            for x in 0..out_w {
                let (sy, sx) = match self {
                    Self::Normal => (y, x),
                    Self::FlipHorizontal => (y, w - 1 - x),
                    Self::Rotate180 => (h - 1 - y, w - 1 - x),
                    Self::FlipVertical => (h - 1 - y, x),
                    Self::Transpose => (x, y),
                    Self::Rotate270 => (h - 1 - x, y),
                    Self::Transverse => (h - 1 - x, w - 1 - y),
                    Self::Rotate90 => (x, w - 1 - y),
                };
                let i = (sy * w + sx) * 3;
                out.extend_from_slice(&src[i..i + 3]);
            }
        }
        RgbImage::from_parts(out_w, out_h, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 3x2 image whose pixels are numbered 0..6 in reading order (value in every channel).
    fn numbered() -> RgbImage {
        RgbImage::from_parts(3, 2, (0..6u8).flat_map(|v| [v; 3]).collect())
    }

    fn values(img: &RgbImage) -> Vec<u8> {
        img.data().chunks(3).map(|p| p[0]).collect()
    }

    #[test]
    fn each_orientation_moves_pixels_like_pillow_transpose() {
        // Source:  0 1 2
        //          3 4 5
        let cases: [(u16, (usize, usize), [u8; 6]); 8] = [
            (1, (3, 2), [0, 1, 2, 3, 4, 5]),
            (2, (3, 2), [2, 1, 0, 5, 4, 3]),
            (3, (3, 2), [5, 4, 3, 2, 1, 0]),
            (4, (3, 2), [3, 4, 5, 0, 1, 2]),
            (5, (2, 3), [0, 3, 1, 4, 2, 5]),
            (6, (2, 3), [3, 0, 4, 1, 5, 2]),
            (7, (2, 3), [5, 2, 4, 1, 3, 0]),
            (8, (2, 3), [2, 5, 1, 4, 0, 3]),
        ];
        for (exif, (w, h), expect) in cases {
            let out = Orientation::from_exif(exif).unwrap().apply(numbered());
            assert_eq!((out.width(), out.height()), (w, h), "orientation {exif}");
            assert_eq!(values(&out), expect, "orientation {exif}");
        }
        assert_eq!(Orientation::from_exif(0), None);
        assert_eq!(Orientation::from_exif(9), None);
    }
}
