//! Byte-level helpers shared by the block formats: fixed-size chunking, bit-plane
//! (un)packing and little-endian f16 fields.

use half::f16;

/// `s` as consecutive `N`-element arrays; a tail shorter than `N` is skipped, so callers
/// validate lengths first. Arrays let the per-block code index with constants, which
/// can neither panic nor keep bounds checks.
pub(crate) fn arrays<T, const N: usize>(s: &[T]) -> impl Iterator<Item = &[T; N]> {
    s.chunks_exact(N).filter_map(|c| c.try_into().ok())
}

/// Mutable counterpart of [`arrays`].
pub(crate) fn arrays_mut<T, const N: usize>(s: &mut [T]) -> impl Iterator<Item = &mut [T; N]> {
    s.chunks_exact_mut(N).filter_map(|c| c.try_into().ok())
}

/// Splits packed `BITS`-bit fields into one byte each.
///
/// Every ggml format packs the same way: a group of `G` bytes holds `8 / BITS` runs of `G`
/// values; run `s` sits at bit offset `BITS * s`. So value `g*G*(8/BITS) + s*G + i` is
/// field `s` of byte `g*G + i`.
pub(crate) fn unpack_bits<const BITS: usize, const G: usize>(src: &[u8], out: &mut [u8]) {
    let mask = (1u8 << BITS) - 1;
    for (group, dst) in src.chunks_exact(G).zip(out.chunks_exact_mut(G * (8 / BITS))) {
        for (s, run) in dst.chunks_exact_mut(G).enumerate() {
            for (o, &b) in run.iter_mut().zip(group) {
                *o = (b >> (s * BITS)) & mask;
            }
        }
    }
}

/// Inverse of [`unpack_bits`]: packs the low `BITS` bits of each value of `vals`.
pub(crate) fn pack_bits<const BITS: usize, const G: usize>(vals: &[u8], out: &mut [u8]) {
    let mask = (1u8 << BITS) - 1;
    let per_group = G * (8 / BITS);
    for (group, src) in out.chunks_exact_mut(G).zip(vals.chunks_exact(per_group)) {
        group.fill(0);
        for (s, run) in src.chunks_exact(G).enumerate() {
            for (o, &v) in group.iter_mut().zip(run) {
                *o |= (v & mask) << (s * BITS);
            }
        }
    }
}

/// The f16 stored little-endian in `b`, widened (exactly) to f32.
pub(crate) fn f16_le(b: [u8; 2]) -> f32 {
    f16::from_le_bytes(b).to_f32()
}

/// `x` rounded to the nearest f16 (ties to even), as little-endian bytes.
pub(crate) fn f16_bytes(x: f32) -> [u8; 2] {
    f16::from_f32(x).to_le_bytes()
}
