//! The 32-value formats Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 (ggml-common.h `block_q*_0/1`).
//!
//! Layouts, little-endian: `d: f16`, then `m: f16` (`_1` types), then `qh: u32` (Q5
//! types, bit `i` = high bit of value `i`), then the quants. 4-bit quants: byte `i` holds
//! value `i` in its low nibble and value `i + 16` in its high nibble. `_0` types are
//! symmetric (`d * (q - offset)`), `_1` types add the min `m` (`d * q + m`).

use super::bits::{f16_le, unpack_bits};
use super::block::{set_quants, Unpacked};

type Block32 = Unpacked<32, 1>;

/// Sets the scale fields shared by all legacy formats. `m` is stored as a negated `dmin`
/// with `min = 1`: `d*q - (-m)` is bit-identical to gguf-py's `d*q + m`.
fn set_scales(u: &mut Block32, d: [u8; 2], m: Option<[u8; 2]>) {
    u.d = f16_le(d);
    u.scale = [1];
    match m {
        Some(m) => {
            u.dmin = -f16_le(m);
            u.min = [1];
        }
        None => {
            u.dmin = 0.0;
            u.min = [0];
        }
    }
}

/// Unpacks 16 bytes of 4-bit quants plus optional 32 high bits (`qh`, bit `i` for value `i`).
fn set_q4_q5(u: &mut Block32, qs: &[u8], qh: Option<[u8; 4]>, offset: i8) {
    let mut lo = [0u8; 32];
    unpack_bits::<4, 16>(qs, &mut lo);
    let mut hi = [0u8; 32];
    let hi: &[u8] = match qh {
        Some(qh) => {
            let qh = u32::from_le_bytes(qh);
            for (i, h) in hi.iter_mut().enumerate() {
                *h = (qh >> i) as u8 & 1;
            }
            &hi
        }
        None => &[],
    };
    set_quants(&mut u.q, &lo, hi, 4, offset);
}

pub(crate) fn unpack_q4_0(b: &[u8; 18], u: &mut Block32) {
    set_scales(u, [b[0], b[1]], None);
    set_q4_q5(u, &b[2..], None, 8);
}

pub(crate) fn unpack_q4_1(b: &[u8; 20], u: &mut Block32) {
    set_scales(u, [b[0], b[1]], Some([b[2], b[3]]));
    set_q4_q5(u, &b[4..], None, 0);
}

pub(crate) fn unpack_q5_0(b: &[u8; 22], u: &mut Block32) {
    set_scales(u, [b[0], b[1]], None);
    set_q4_q5(u, &b[6..], Some([b[2], b[3], b[4], b[5]]), 16);
}

pub(crate) fn unpack_q5_1(b: &[u8; 24], u: &mut Block32) {
    set_scales(u, [b[0], b[1]], Some([b[2], b[3]]));
    set_q4_q5(u, &b[8..], Some([b[4], b[5], b[6], b[7]]), 0);
}

pub(crate) fn unpack_q8_0(b: &[u8; 34], u: &mut Block32) {
    set_scales(u, [b[0], b[1]], None);
    for (q, &v) in u.q.iter_mut().zip(&b[2..]) {
        *q = v as i8;
    }
}
