//! Antialiased bicubic resize of uint8 RGB, bit-exact with what the HF processor runs:
//! torchvision `resize(uint8, BICUBIC, antialias=True)`, i.e. torch's uint8 antialias kernel
//! (`_upsample_bicubic2d_aa`; the AVX2 path and the generic path compute the same integers).
//!
//! That kernel is Pillow-SIMD's scheme, and it is what this file follows:
//! * separable, horizontal pass first, then vertical; an axis whose size does not change is
//!   skipped, and the intermediate image is rounded and clamped to uint8;
//! * Keys cubic with a = -0.5, support 2 widened by the downscale factor (the antialias), taps
//!   centred on pixel centres, weights computed in f64 and normalised to sum 1;
//! * weights then become integers with `precision` fractional bits, the most that keeps the
//!   largest weight of the axis within int16 (14 for upscaling, more for strong downscaling;
//!   Pillow proper uses 22 bits in int32, which is why it differs by a level here and there);
//! * each output is (sum of weight x sample + 2^(precision-1)) >> precision, clamped to 0..=255.

use super::RgbImage;

/// Keys' cubic convolution kernel, a = -0.5, written as torch's `cubic_convolution1/2`
/// (the same operations in the same order, so the f64 weights match bit for bit).
fn keys_cubic(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A
    } else {
        0.0
    }
}

/// Fixed-point filter taps of one axis: output `i` reads `len[i]` source samples starting at
/// `first[i]`, with weights `weights[i * stride ..]`.
struct Taps {
    first: Vec<usize>,
    len: Vec<usize>,
    weights: Vec<i64>,
    stride: usize,
    precision: u32,
}

impl Taps {
    fn new(in_size: usize, out_size: usize) -> Taps {
        let scale = in_size as f64 / out_size as f64;
        let (support, inv_scale) = if scale >= 1.0 { (2.0 * scale, 1.0 / scale) } else { (2.0, 1.0) };
        let stride = support.ceil() as usize * 2 + 1;
        let mut first = Vec::with_capacity(out_size);
        let mut len = Vec::with_capacity(out_size);
        let mut real = vec![0f64; out_size * stride];
        let mut max_weight = 0f64;
        for (i, row) in real.chunks_exact_mut(stride).enumerate() {
            let center = scale * (i as f64 + 0.5);
            // `as i64` truncates toward zero like the C++ static_cast.
            let lo = ((center - support + 0.5) as i64).max(0);
            let hi = ((center + support + 0.5) as i64).min(in_size as i64);
            let n = (hi - lo).clamp(0, stride as i64) as usize;
            let mut total = 0.0;
            for (j, w) in row[..n].iter_mut().enumerate() {
                *w = keys_cubic(((j as i64 + lo) as f64 - center + 0.5) * inv_scale);
                total += *w;
            }
            if total != 0.0 {
                for w in &mut row[..n] {
                    *w /= total;
                    max_weight = max_weight.max(*w);
                }
            }
            first.push(lo as usize);
            len.push(n);
        }
        // The most fractional bits (up to 22) for which the largest weight, doubled, still
        // rounds below 2^15.
        let mut precision = 0;
        while precision < 22 && ((0.5 + max_weight * f64::from(1u32 << (precision + 1))) as i32) < 1 << 15 {
            precision += 1;
        }
        let unit = f64::from(1u32 << precision);
        let weights = real
            .iter()
            .map(|&w| {
                let v = w * unit;
                (if v < 0.0 { -0.5 + v } else { 0.5 + v }) as i64
            })
            .collect();
        Taps { first, len, weights, stride, precision }
    }

    /// The taps of output `i`: (first source index, weights).
    fn of(&self, i: usize) -> (usize, &[i64]) {
        (self.first[i], &self.weights[i * self.stride..][..self.len[i]])
    }

    fn to_u8(&self, acc: i64) -> u8 {
        (acc >> self.precision).clamp(0, 255) as u8
    }

    /// The rounding offset every sum starts from.
    fn half(&self) -> i64 {
        (1i64 << self.precision) >> 1
    }
}

/// Resizes to `out_h` x `out_w` (see the module doc for the exact arithmetic). An empty input
/// has nothing to sample: the result is then black.
pub fn resize_bicubic_aa(img: &RgbImage, out_h: usize, out_w: usize) -> RgbImage {
    if img.width() == 0 || img.height() == 0 || out_h == 0 || out_w == 0 {
        return RgbImage::from_parts(out_w, out_h, vec![0; out_w * out_h * 3]);
    }
    let mut cur = img.clone();
    if out_w != cur.width() {
        cur = horizontal(&cur, out_w);
    }
    if out_h != cur.height() {
        cur = vertical(&cur, out_h);
    }
    cur
}

fn horizontal(img: &RgbImage, out_w: usize) -> RgbImage {
    let (w, h) = (img.width(), img.height());
    let taps = Taps::new(w, out_w);
    let mut out = Vec::with_capacity(out_w * h * 3);
    for src in img.data().chunks_exact(w * 3) {
        for x in 0..out_w {
            let (first, weights) = taps.of(x);
            let mut acc = [taps.half(); 3];
            for (px, &wt) in src[first * 3..].chunks_exact(3).zip(weights) {
                for (a, &s) in acc.iter_mut().zip(px) {
                    *a += i64::from(s) * wt;
                }
            }
            out.extend(acc.map(|a| taps.to_u8(a)));
        }
    }
    RgbImage::from_parts(out_w, h, out)
}

fn vertical(img: &RgbImage, out_h: usize) -> RgbImage {
    let (w, h) = (img.width(), img.height());
    let taps = Taps::new(h, out_h);
    let row_len = w * 3;
    let mut out = Vec::with_capacity(row_len * out_h);
    let mut acc = vec![0i64; row_len];
    for y in 0..out_h {
        let (first, weights) = taps.of(y);
        acc.fill(taps.half());
        for (src, &wt) in img.data()[first * row_len..].chunks_exact(row_len).zip(weights) {
            for (a, &s) in acc.iter_mut().zip(src) {
                *a += i64::from(s) * wt;
            }
        }
        out.extend(acc.iter().map(|&a| taps.to_u8(a)));
    }
    RgbImage::from_parts(w, out_h, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upscaling_taps_use_14_bits_and_sum_to_one() {
        let taps = Taps::new(40, 320);
        assert_eq!(taps.precision, 14);
        for i in 0..320 {
            let sum: i64 = taps.of(i).1.iter().sum();
            assert!((sum - (1 << 14)).abs() <= 2, "output {i}: weights sum to {sum}");
        }
    }

    #[test]
    fn downscaling_widens_the_support() {
        let taps = Taps::new(1000, 100); // factor 10: support 20 source pixels each side
        let (first, weights) = taps.of(50);
        assert_eq!(weights.len(), 40);
        assert_eq!(first, 485);
        assert!(taps.precision > 14);
    }

    #[test]
    fn empty_sizes_do_not_panic() {
        let img = RgbImage::from_parts(4, 3, vec![9; 36]);
        assert_eq!(resize_bicubic_aa(&img, 0, 5).data().len(), 0);
        assert_eq!(resize_bicubic_aa(&img, 2, 0).data().len(), 0);
        let empty = RgbImage::from_parts(0, 3, vec![]);
        assert_eq!(resize_bicubic_aa(&empty, 2, 2).data(), &[0; 12]);
    }

    #[test]
    fn flat_images_stay_flat_and_same_size_is_a_copy() {
        let flat = RgbImage::from_parts(7, 5, [10u8, 200, 255].repeat(35));
        for (h, w) in [(5, 7), (13, 3), (1, 1), (64, 96)] {
            let out = resize_bicubic_aa(&flat, h, w);
            assert_eq!((out.height(), out.width()), (h, w));
            assert!(out.data().chunks(3).all(|p| p == [10, 200, 255]), "{h}x{w}");
        }
    }

    #[test]
    fn negative_lobes_ring_and_are_clamped() {
        let step = |lo: u8, hi: u8| -> Vec<u8> {
            let row: Vec<u8> = (0..16).flat_map(|x| [if x < 8 { lo } else { hi }; 3]).collect();
            let out = resize_bicubic_aa(&RgbImage::from_parts(16, 1, row), 1, 37);
            out.data().chunks(3).map(|p| p[0]).collect()
        };
        let v = step(100, 200);
        assert!(v.iter().min() < Some(&100) && v.iter().max() > Some(&200), "no ringing: {v:?}");
        // 0 | 255: the undershoot must clamp to 0, not wrap around to ~250.
        let v = step(0, 255);
        assert!(v[..18].iter().all(|&x| x < 128) && v[19..].iter().all(|&x| x >= 128), "{v:?}");
    }
}
