//! The 256-value "K" formats Q2_K..Q6_K (ggml-common.h `block_q*_K`): unpacking and the
//! packed sub-block scales.
//!
//! Layouts, little-endian, f16 scales:
//! - Q2_K (84 B):  scales[16] (low nibble scale, high nibble min), qs[64] (2-bit), d, dmin.
//! - Q3_K (110 B): hmask[32] (high bit), qs[64] (2-bit), scales[12] (16 × 6-bit), d.
//! - Q4_K (144 B): d, dmin, scales[12] (8 × 6-bit scale + 8 × 6-bit min), qs[128] (4-bit).
//! - Q5_K (176 B): d, dmin, scales[12] (as Q4_K), qh[32] (high bit), qs[128] (4-bit).
//! - Q6_K (210 B): ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] (i8), d.
//!
//! Quant bit planes follow [`unpack_bits`]'s layout; Q2_K, Q3_K and Q6_K use 16 sub-blocks
//! of 16 values, Q4_K and Q5_K 8 sub-blocks of 32.

use super::bits::{f16_le, unpack_bits};
use super::block::{set_quants, Unpacked};

/// Unpacks the 6-bit scales and mins of Q4_K/Q5_K (ggml's `get_scale_min_k4`): bytes 0..4
/// hold scales 0..4, bytes 4..8 mins 0..4, each in the low 6 bits; scales and mins 4..8
/// keep their low nibbles in bytes 8..12 and their top 2 bits in the spare top bits of
/// bytes 0..8.
pub(crate) fn unpack_scales_k4(s: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut m = [0u8; 8];
    for j in 0..4 {
        sc[j] = s[j] & 63;
        m[j] = s[j + 4] & 63;
        sc[j + 4] = (s[j + 8] & 0xF) | ((s[j] >> 6) << 4);
        m[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
    }
    (sc, m)
}

/// Inverse of [`unpack_scales_k4`] for values below 64.
pub(crate) fn pack_scales_k4(sc: &[u8; 8], m: &[u8; 8]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for j in 0..4 {
        s[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6);
        s[j + 4] = (m[j] & 63) | ((m[j + 4] >> 4) << 6);
        s[j + 8] = (sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4);
    }
    s
}

/// Q3_K's sixteen 6-bit scales (stored biased by 32): low nibbles in bytes 0..8 (scale `j`
/// in nibble `j / 8` of byte `j % 8`), top 2 bits in bytes 8..12 (bits `2*(j/4)` of byte
/// `8 + j % 4`).
fn unpack_scales_q3_k(s: &[u8; 12]) -> [i32; 16] {
    let mut out = [0i32; 16];
    for (j, o) in out.iter_mut().enumerate() {
        let lo = (s[j % 8] >> (4 * (j / 8))) & 0xF;
        let hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        *o = i32::from(lo | hi << 4) - 32;
    }
    out
}

type Block256x16 = Unpacked<256, 16>;
type Block256x8 = Unpacked<256, 8>;

pub(crate) fn unpack_q2_k(b: &[u8; 84], u: &mut Block256x16) {
    for ((sc, m), &packed) in u.scale.iter_mut().zip(&mut u.min).zip(&b[..16]) {
        *sc = i32::from(packed & 0xF);
        *m = i32::from(packed >> 4);
    }
    let mut lo = [0u8; 256];
    unpack_bits::<2, 32>(&b[16..80], &mut lo);
    set_quants(&mut u.q, &lo, &[], 2, 0);
    u.d = f16_le([b[80], b[81]]);
    u.dmin = f16_le([b[82], b[83]]);
}

pub(crate) fn unpack_q3_k(b: &[u8; 110], u: &mut Block256x16) {
    let mut hi = [0u8; 256];
    unpack_bits::<1, 32>(&b[..32], &mut hi);
    let mut lo = [0u8; 256];
    unpack_bits::<2, 32>(&b[32..96], &mut lo);
    // A clear high bit means "subtract 4": q = (lo | hi << 2) - 4.
    set_quants(&mut u.q, &lo, &hi, 2, 4);
    let mut scales = [0u8; 12];
    scales.copy_from_slice(&b[96..108]);
    u.scale = unpack_scales_q3_k(&scales);
    u.min = [0; 16];
    u.d = f16_le([b[108], b[109]]);
    u.dmin = 0.0;
}

/// The part Q4_K and Q5_K share: d, dmin, and the 6-bit scales and mins.
fn set_scales_k4(b: &[u8], u: &mut Block256x8) {
    let mut packed = [0u8; 12];
    packed.copy_from_slice(&b[4..16]);
    let (sc, m) = unpack_scales_k4(&packed);
    u.scale = sc.map(i32::from);
    u.min = m.map(i32::from);
    u.d = f16_le([b[0], b[1]]);
    u.dmin = f16_le([b[2], b[3]]);
}

pub(crate) fn unpack_q4_k(b: &[u8; 144], u: &mut Block256x8) {
    set_scales_k4(b, u);
    let mut lo = [0u8; 256];
    unpack_bits::<4, 32>(&b[16..], &mut lo);
    set_quants(&mut u.q, &lo, &[], 4, 0);
}

pub(crate) fn unpack_q5_k(b: &[u8; 176], u: &mut Block256x8) {
    set_scales_k4(b, u);
    let mut hi = [0u8; 256];
    unpack_bits::<1, 32>(&b[16..48], &mut hi);
    let mut lo = [0u8; 256];
    unpack_bits::<4, 32>(&b[48..], &mut lo);
    set_quants(&mut u.q, &lo, &hi, 4, 0);
}

pub(crate) fn unpack_q6_k(b: &[u8; 210], u: &mut Block256x16) {
    let mut lo = [0u8; 256];
    unpack_bits::<4, 64>(&b[..128], &mut lo);
    let mut hi = [0u8; 256];
    unpack_bits::<2, 32>(&b[128..192], &mut hi);
    set_quants(&mut u.q, &lo, &hi, 4, 32);
    for (sc, &v) in u.scale.iter_mut().zip(&b[192..208]) {
        *sc = i32::from(v as i8);
    }
    u.min = [0; 16];
    u.d = f16_le([b[208], b[209]]);
    u.dmin = 0.0;
}
