//! The target size: Qwen2-VL's `smart_resize`, which Qwen3-VL's processor uses unchanged.

use super::error::{ImageError, ImageErrorKind};

/// The processor refuses images whose longer side is more than this many times the shorter.
pub const MAX_ASPECT_RATIO: f64 = 200.0;

/// (height, width) rounded to multiples of `factor` (patch size x merge size) with about the same
/// aspect ratio, scaled into `min_pixels ..= max_pixels`. Follows the Python exactly, including
/// its float arithmetic: `round` is round-half-to-even (272 / 32 = 8.5 -> 8), so 400x272 becomes
/// 384x256.
pub fn smart_resize(
    height: usize,
    width: usize,
    factor: usize,
    min_pixels: usize,
    max_pixels: usize,
) -> Result<(usize, usize), ImageError> {
    if factor == 0 || min_pixels > max_pixels {
        let what = format!("factor {factor}, min_pixels {min_pixels}, max_pixels {max_pixels}");
        return Err(ImageError::unnamed(ImageErrorKind::BadConfig(what)));
    }
    if height == 0 || width == 0 {
        return Err(ImageError::unnamed(ImageErrorKind::ZeroSize { width: width as u64, height: height as u64 }));
    }
    let (h, w, f) = (height as f64, width as f64, factor as f64);
    if h.max(w) / h.min(w) > MAX_ASPECT_RATIO {
        return Err(ImageError::unnamed(ImageErrorKind::AspectRatio { height, width, max_ratio: MAX_ASPECT_RATIO }));
    }
    // Float results here are non-negative whole numbers, so `as usize` is exact (and saturates,
    // like the multiplication, for absurd budgets instead of overflowing).
    let snap = |x: f64| (x as usize).saturating_mul(factor);
    let (mut h_bar, mut w_bar) = (snap((h / f).round_ties_even()), snap((w / f).round_ties_even()));
    let area = |a: usize, b: usize| a as u128 * b as u128;
    if area(h_bar, w_bar) > max_pixels as u128 {
        let beta = ((height as f64 * w) / max_pixels as f64).sqrt();
        h_bar = factor.max(snap((h / beta / f).floor()));
        w_bar = factor.max(snap((w / beta / f).floor()));
    } else if area(h_bar, w_bar) < min_pixels as u128 {
        let beta = (min_pixels as f64 / (height as f64 * w)).sqrt();
        h_bar = snap((h * beta / f).ceil());
        w_bar = snap((w * beta / f).ceil());
    }
    Ok((h_bar, w_bar))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HF: (usize, usize, usize) = (32, 65_536, 16_777_216);

    fn hf(h: usize, w: usize) -> (usize, usize) {
        smart_resize(h, w, HF.0, HF.1, HF.2).unwrap()
    }

    /// Expected values from the Python smart_resize of transformers.
    #[test]
    fn matches_the_python_on_readme_and_edge_cases() {
        assert_eq!(hf(272, 400), (256, 384)); // I6: 8.5 and 12.5 both round down to even
        assert_eq!(hf(304, 400), (320, 384)); // 9.5 rounds up to even
        assert_eq!(hf(30, 40), (224, 320)); // I3: below min_pixels, scaled up
        assert_eq!(hf(517, 333), (512, 320)); // I2
        assert_eq!(hf(200, 300), (224, 320)); // I5
        assert_eq!(hf(448, 448), (448, 448)); // I1
        assert_eq!(hf(10, 10), (256, 256));
        assert_eq!(hf(6000, 8000), (3520, 4704)); // above max_pixels, scaled down
        assert_eq!(hf(3024, 4032), (3008, 4032));
        assert_eq!(hf(1, 200), (32, 3648)); // ratio exactly 200 is allowed
        assert_eq!(hf(100_000, 600), (52_864, 288));
    }

    #[test]
    fn results_respect_the_pixel_budget_and_factor() {
        for (h, w) in [(1, 1), (31, 33), (4000, 3000), (999, 700), (65_535, 65_535)] {
            for (min, max) in [(HF.1, HF.2), (65_536, 1 << 20), (1024, 4096)] {
                let (rh, rw) = smart_resize(h, w, 32, min, max).unwrap();
                assert!(rh % 32 == 0 && rw % 32 == 0 && rh > 0 && rw > 0, "{h}x{w} -> {rh}x{rw}");
                assert!(rh * rw <= max, "{h}x{w} -> {rh}x{rw} over {max}");
            }
        }
        // As in the Python, a side never drops below one factor, even if that breaks the budget.
        assert_eq!(smart_resize(9999, 70, 32, 1024, 4096).unwrap(), (736, 32));
    }

    #[test]
    fn refuses_extreme_aspect_ratios_and_bad_input() {
        for (h, w) in [(1, 201), (201, 1), (10, 2001)] {
            let e = smart_resize(h, w, HF.0, HF.1, HF.2).unwrap_err();
            assert!(matches!(e.kind, ImageErrorKind::AspectRatio { .. }), "{h}x{w}: {e}");
            assert!(e.to_string().contains("aspect ratio"), "{e}");
        }
        assert!(matches!(smart_resize(0, 5, 32, 1, 2).unwrap_err().kind, ImageErrorKind::ZeroSize { .. }));
        assert!(matches!(smart_resize(5, 5, 0, 1, 2).unwrap_err().kind, ImageErrorKind::BadConfig(_)));
        assert!(matches!(smart_resize(5, 5, 32, 3, 2).unwrap_err().kind, ImageErrorKind::BadConfig(_)));
    }
}
