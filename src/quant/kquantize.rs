//! Quantizers for Q4_K, Q5_K and Q6_K, following ggml's reference quantizers
//! (`quantize_row_q{4,5,6}_K_ref` with their `make_qkx2_quants` / `make_qx_quants`
//! searches) operation for operation, so the f32 rounding and thus the bytes agree.
//!
//! Q4_K/Q5_K fit each 32-value sub-block as `scale * l - min` with a weighted least-squares
//! search over candidate scales, then quantize the sub-block scales and mins to 6 bits under
//! one f16 `d` / `dmin` per block and requantize the values with the rounded scales.
//! Q6_K fits each 16-value sub-block symmetrically as `scale * l`, then quantizes the scales
//! to i8 under one f16 `d`.

use super::bits::{arrays, arrays_mut, f16_bytes, f16_le, pack_bits};
use super::kquants::pack_scales_k4;

/// Below this a sub-block's largest magnitude counts as zero (ggml's `GROUP_MAX_EPS`).
const GROUP_MAX_EPS: f32 = 1e-15;

/// ggml's `nearest_int`: rounds half to even. ggml's bit trick is only valid for
/// |x| < 2^22; beyond that this saturates, which the callers' clamping then handles.
fn nearest_int(x: f32) -> i32 {
    x.round_ties_even() as i32
}

/// Parameters of the scale search of [`fit_scale_min`] (ggml's `make_qkx2_quants`).
struct MinSearch {
    /// Largest quant.
    nmax: i32,
    /// Candidate `k` tries `(nmax + rmin + rdelta * k) / (max - min)` as inverse scale.
    rmin: f32,
    rdelta: f32,
    steps: i32,
}

const Q4_K_SEARCH: MinSearch = MinSearch { nmax: 15, rmin: -1.0, rdelta: 0.1, steps: 20 };
const Q5_K_SEARCH: MinSearch = MinSearch { nmax: 31, rmin: -0.5, rdelta: 0.1, steps: 15 };

/// Fits `x[i] ≈ scale * l[i] - min` with `l` in `0..=nmax`, minimising the `w`-weighted
/// squared error; returns `(scale, min)` with `min >= 0` and writes the quants to `l`.
fn fit_scale_min(x: &[f32; 32], w: &[f32; 32], p: &MinSearch, l: &mut [u8; 32]) -> (f32, f32) {
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = w[0];
    let mut sum_x = sum_w * x[0];
    for (&x, &w) in x.iter().zip(w).skip(1) {
        min = if x < min { x } else { min };
        max = if x > max { x } else { max };
        sum_w += w;
        sum_x += w * x;
    }
    // The offset only ever shifts values up, so an all-positive block keeps min 0.
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l.fill(0);
        return (0.0, -min);
    }
    let nmax = p.nmax as f32;
    let quantize = |iscale: f32, min: f32, l: &mut [u8; 32]| {
        for (l, &x) in l.iter_mut().zip(x) {
            *l = nearest_int(iscale * (x - min)).clamp(0, p.nmax) as u8;
        }
    };
    let error = |scale: f32, min: f32, l: &[u8; 32]| {
        let mut err = 0f32;
        for ((&l, &x), &w) in l.iter().zip(x).zip(w) {
            let diff = scale * f32::from(l) + min - x;
            err += w * (diff * diff);
        }
        err
    };

    let iscale = nmax / (max - min);
    let mut scale = 1.0 / iscale;
    quantize(iscale, min, l);
    let mut best_error = error(scale, min, l);

    let mut cand = [0u8; 32];
    for step in 0..=p.steps {
        let iscale = (p.rmin + p.rdelta * step as f32 + nmax) / (max - min);
        quantize(iscale, min, &mut cand);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for ((&l, &x), &w) in cand.iter().zip(x).zip(w) {
            let l = f32::from(l);
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x;
        }
        // Weighted least squares for (scale, min) given the candidate quants.
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let err = error(this_scale, this_min, &cand);
            if err < best_error {
                *l = cand;
                best_error = err;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// A Q4_K/Q5_K block before bit packing.
struct ScaleMinBlock {
    d: [u8; 2],
    dmin: [u8; 2],
    scales: [u8; 12],
    l: [u8; 256],
}

fn quantize_scale_min(x: &[f32; 256], p: &MinSearch) -> ScaleMinBlock {
    let mut l = [0u8; 256];
    let mut scales = [0f32; 8];
    let mut mins = [0f32; 8];
    let mut max_scale = 0f32;
    let mut max_min = 0f32;
    let subs = arrays::<f32, 32>(x).zip(arrays_mut::<u8, 32>(&mut l));
    for ((xs, ls), (scale, min)) in subs.zip(scales.iter_mut().zip(&mut mins)) {
        // Weigh values by magnitude on top of the sub-block's RMS.
        let sum_x2 = xs.iter().fold(0f32, |s, &v| s + v * v);
        let av_x = (sum_x2 / 32.0).sqrt();
        let w = xs.map(|v| av_x + v.abs());
        (*scale, *min) = fit_scale_min(xs, &w, p, ls);
        max_scale = if *scale > max_scale { *scale } else { max_scale };
        max_min = if *min > max_min { *min } else { max_min };
    }

    let inv_scale = if max_scale > 0.0 { 63.0 / max_scale } else { 0.0 };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    // `as u8` truncates like ggml's assignment to uint8_t before its MIN(63, ·).
    let sc = scales.map(|s| (nearest_int(inv_scale * s) as u8).min(63));
    let m = mins.map(|s| (nearest_int(inv_min * s) as u8).min(63));
    let d = f16_bytes(max_scale / 63.0);
    let dmin = f16_bytes(max_min / 63.0);

    // Requantize with the scales as stored; sub-blocks whose scale rounded to zero keep
    // the quants of the fit (they dequantize to `-min` whatever they are).
    let subs = x.chunks_exact(32).zip(l.chunks_exact_mut(32));
    for ((xs, ls), (&sc, &m)) in subs.zip(sc.iter().zip(&m)) {
        let d = f16_le(d) * f32::from(sc);
        if d == 0.0 {
            continue;
        }
        let dm = f16_le(dmin) * f32::from(m);
        for (l, &x) in ls.iter_mut().zip(xs) {
            *l = nearest_int((x + dm) / d).clamp(0, p.nmax) as u8;
        }
    }
    ScaleMinBlock { d, dmin, scales: pack_scales_k4(&sc, &m), l }
}

/// Writes the fields Q4_K and Q5_K share: d, dmin, scales (bytes 0..16).
fn write_scale_min(q: &ScaleMinBlock, b: &mut [u8]) {
    b[..2].copy_from_slice(&q.d);
    b[2..4].copy_from_slice(&q.dmin);
    b[4..16].copy_from_slice(&q.scales);
}

pub(crate) fn quantize_q4_k(x: &[f32; 256], b: &mut [u8; 144]) {
    let q = quantize_scale_min(x, &Q4_K_SEARCH);
    write_scale_min(&q, b);
    pack_bits::<4, 32>(&q.l, &mut b[16..]);
}

pub(crate) fn quantize_q5_k(x: &[f32; 256], b: &mut [u8; 176]) {
    let q = quantize_scale_min(x, &Q5_K_SEARCH);
    write_scale_min(&q, b);
    pack_bits::<1, 32>(&q.l.map(|l| l >> 4), &mut b[16..48]);
    pack_bits::<4, 32>(&q.l, &mut b[48..]);
}

/// Fits `x[i] ≈ scale * l[i]` with `l` in `-32..32`, weighting by `x²`, trying 19 inverse
/// scales around `-32 / max` (ggml's `make_qx_quants` with `rmse_type` 1); writes `l + 32`.
fn fit_scale_symmetric(x: &[f32; 16], l: &mut [u8; 16]) -> f32 {
    const NMAX: i32 = 32;
    let mut max = 0f32;
    let mut amax = 0f32;
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let quant = |iscale: f32, x: f32| nearest_int(iscale * x).clamp(-NMAX, NMAX - 1);
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0f32, 0f32);
        for &x in x {
            let q = quant(iscale, x) as f32;
            let w = x * x;
            sumlx += w * x * q;
            suml2 += w * q * q;
        }
        (sumlx, suml2)
    };
    let set = |iscale: f32, l: &mut [u8; 16]| {
        for (l, &x) in l.iter_mut().zip(x) {
            *l = (quant(iscale, x) + NMAX) as u8;
        }
    };

    let iscale = -(NMAX as f32) / max;
    set(iscale, l);
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for step in (-9..=9).filter(|&s| s != 0) {
        let iscale = -(NMAX as f32 + 0.1 * step as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        // Keep the candidate that explains more of the weighted energy (sumlx² / suml2).
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            set(iscale, l);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

pub(crate) fn quantize_q6_k(x: &[f32; 256], b: &mut [u8; 210]) {
    let mut l = [0u8; 256];
    let mut scales = [0f32; 16];
    let mut max_scale = 0f32;
    let mut max_abs_scale = 0f32;
    let subs = arrays::<f32, 16>(x).zip(arrays_mut::<u8, 16>(&mut l));
    for ((xs, ls), scale) in subs.zip(&mut scales) {
        *scale = fit_scale_symmetric(xs, ls);
        if scale.abs() > max_abs_scale {
            max_abs_scale = scale.abs();
            max_scale = *scale;
        }
    }
    if max_abs_scale < GROUP_MAX_EPS {
        b.fill(0);
        return;
    }

    let iscale = -128.0 / max_scale;
    let d = f16_bytes(1.0 / iscale);
    // `as i8` wraps like ggml's assignment to int8_t (only -128 and 127 can occur).
    let sc = scales.map(|s| nearest_int(iscale * s).min(127) as i8);
    let subs = x.chunks_exact(16).zip(l.chunks_exact_mut(16));
    for ((xs, ls), &sc) in subs.zip(&sc) {
        let d = f16_le(d) * f32::from(sc);
        if d == 0.0 {
            continue;
        }
        for (l, &x) in ls.iter_mut().zip(xs) {
            *l = (nearest_int(x / d).clamp(-32, 31) + 32) as u8;
        }
    }

    pack_bits::<4, 64>(&l, &mut b[..128]);
    pack_bits::<2, 32>(&l.map(|l| l >> 4), &mut b[128..192]);
    for (b, s) in b[192..208].iter_mut().zip(sc) {
        *b = s as u8;
    }
    b[208..].copy_from_slice(&d);
}
