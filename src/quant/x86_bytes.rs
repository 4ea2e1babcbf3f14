//! AVX-512 products of Q4_K and Q6_K rows with a few activation rows (decode), on the
//! activation's byte planes: each 16-bit quant `a = 256 · hi + lo` (`hi` signed, `lo`
//! unsigned), so that the weights' raw quants, unsigned bytes, multiply both planes with
//! `vpmaddubsw` (unsigned × signed bytes, pairs summed into i16) as they are stored: no
//! widening of the weights to 16 bits and no multiply by their sub-block scale per value, which
//! the 16-bit kernels (x86.rs) pay for every 32 values. The sub-block scales multiply the
//! 16-bit pair sums in `vpdpwssd`, which also accumulates them into i32 lanes (one i32
//! accumulator per plane; the high one is shifted by 8 bits at the end of a block).
//!
//! The sums are those of the 16-bit kernels, exactly: a pair sum is at most 2 · 255 · 63 =
//! 32130 (Q6_K's `lo` plane) in magnitude, so `vpmaddubsw` never saturates, and an i32 lane
//! of a block sums at most 4 chunks · 2 pair sums times a scale of at most 128 (3.3e7, and
//! Q4_K's high plane shifted by 8 bits: 1.9e6 · 256 = 5e8), below 2^31. Only the f32
//! operations after them differ.
//!
//! Q6_K's quants are stored 0..63 for -32..31: the kernel dots the stored quants and takes 32
//! times each sub-block's activation sum off, as the formats with mins do.
//!
//! Q4_K's quants (0..15) are small enough for fewer multiplies: `vpdpbusd` sums four products
//! of a plane into each i32 lane (at most 4 · 255 · 15 = 15300 in magnitude), two chunks' sums
//! pack into one register of i16 (`vpackssdw`, exact), and one `vpdpwssd` scales them: three
//! multiplying instructions per chunk and plane pair where the pair sums take four (2B decode
//! on one thread 14.97 against 14.17 tokens/s, four alternating runs). Q6_K's `lo` plane sums
//! (4 · 255 · 63) would not fit i16; with the values (-32..31) on that plane, the stored quants
//! on the other and the offset taken off through per-16 sums of `hi`, it measured no faster
//! (14.33 against 14.66 tokens/s, four alternating runs).
//!
//! Memory is read through array references only, as in x86.rs; every function here is
//! `#[target_feature]` and called only under [`Simd::Avx512`](super::Simd::Avx512).

use std::arch::x86_64::*;

use super::activation::{Q8Row, SUM_LEN};
use super::x86::{act_dsums, f16x2, load_f32x8, load_u8x16, load_u8x32, prefetch_ahead, scales_k4, sub};

#[inline]
#[target_feature(enable = "avx512f")]
fn load_u8x64(a: &[u8; 64]) -> __m512i {
    // SAFETY: reads exactly the 64 bytes of `a`; loadu has no alignment requirement.
    unsafe { _mm512_loadu_si512(a.as_ptr().cast()) }
}

#[inline]
#[target_feature(enable = "avx512f")]
fn load_i8x64(a: &[i8; 64]) -> __m512i {
    // SAFETY: reads exactly the 64 bytes of `a`; loadu has no alignment requirement.
    unsafe { _mm512_loadu_si512(a.as_ptr().cast()) }
}

#[inline]
#[target_feature(enable = "avx512f")]
fn load_i32x16(a: &[i32; 16]) -> __m512i {
    // SAFETY: reads exactly the 64 bytes of `a`; loadu has no alignment requirement.
    unsafe { _mm512_loadu_si512(a.as_ptr().cast()) }
}

/// Per activation row, its `lo` and `hi` planes in 64-value chunks.
type Planes<'a, const R: usize> = ([&'a [[u8; 64]]; R], [&'a [[i8; 64]]; R]);

/// Loops rather than `std::array::from_fn`: its closures, compiled with this module's target
/// features, are not inlined into it, which made calls per block of every row (13 % of a 2B
/// decode step, 8-12 % of the small model's; x86.rs's `act_blocks` likewise).
#[inline(always)]
fn planes<'a, const R: usize>(acts: &[Q8Row<'a>; R]) -> Planes<'a, R> {
    let (mut lo, mut hi): Planes<'a, R> = ([&[]; R], [&[]; R]);
    for ((lo, hi), a) in lo.iter_mut().zip(&mut hi).zip(acts) {
        (*lo, *hi) = (a.lo.as_chunks::<64>().0, a.hi.as_chunks::<64>().0);
    }
    (lo, hi)
}

/// `acc + Σ pairs of a · b` per i32 lane, as one `vpdpwssd`. LLVM's generic tuning splits
/// the intrinsic into `vpmaddwd` + `vpaddd`: one more instruction for the two ports that run
/// 512-bit integer work on Intel cores, which bound these kernels.
#[inline]
#[target_feature(enable = "avx512f,avx512vnni")]
fn dpwssd(mut acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
    // SAFETY: the instruction reads and writes only the three registers, and the function
    // runs with AVX-512 VNNI enabled.
    unsafe {
        std::arch::asm!(
            "vpdpwssd {acc}, {a}, {b}",
            acc = inout(zmm_reg) acc,
            a = in(zmm_reg) a,
            b = in(zmm_reg) b,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    acc
}

/// The pair sums of 64 unsigned weight bytes `w` with both planes of the same 64 values:
/// `(Σ w · lo, Σ w · hi)` per pair, in 32 i16 lanes each.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
fn pair_sums(w: __m512i, lo: &[u8; 64], hi: &[i8; 64]) -> (__m512i, __m512i) {
    (_mm512_maddubs_epi16(load_u8x64(lo), w), _mm512_maddubs_epi16(w, load_i8x64(hi)))
}

/// Q4_K (see x86.rs's `q4_k`), on planes in [`PlaneOrder::Q4K`](super::activation::PlaneOrder::Q4K): a pair of chunks is 64 bytes
/// of nibbles, values 128p..128p + 128, whose low nibbles are sub-blocks 4p (bytes 0-31) and
/// 4p + 2 (bytes 32-63), the planes' chunk 2p, and whose high nibbles are sub-blocks 4p + 1
/// and 4p + 3, chunk 2p + 1: one load, mask and shift for 128 values (a chunk of values in
/// order took a broadcast 32-byte run, a masked shift and a mask for 64).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
pub(super) fn q4_k<const R: usize>(row: &[u8], acts: &[Q8Row; R]) -> [f32; R] {
    let blocks = row.as_chunks::<144>().0;
    let (lo, hi) = planes(acts);
    let dsums = act_dsums(acts);
    let m4 = _mm512_set1_epi8(0x0F);
    // Per pair of chunks (2p, 2p + 1), the byte shuffle that puts, in each 128-bit lane, the
    // scale of the first chunk's sub-block there in i16 lanes 0-3 and the second's in 4-7, as
    // `_mm512_packs_epi32` lays out their dword sums: sub-blocks 4p and 4p + 1 in 128-bit lanes
    // 0 and 1, 4p + 2 and 4p + 3 in lanes 2 and 3; the i16 picking bytes 2i and 2i + 1 is
    // scale i.
    let pick = |i: i16| (i * 2) | ((i * 2 + 1) << 8);
    let mut picks = [_mm512_setzero_si512(); 2];
    for (p, picks) in picks.iter_mut().enumerate() {
        let (a, b) = (4 * p as i16, 4 * p as i16 + 1);
        // 128-bit lanes 0, 1: sub-blocks a, b; lanes 2, 3: a + 2, b + 2 (i64 per four i16).
        let four = |i: i16| i64::from(pick(i) as u16) * 0x0001_0001_0001_0001;
        *picks =
            _mm512_set_epi64(four(b + 2), four(a + 2), four(b + 2), four(a + 2), four(b), four(a), four(b), four(a));
    }
    let zero = _mm512_setzero_si512();
    let mut facc = [_mm512_setzero_ps(); R];
    let mut macc = [_mm256_setzero_ps(); R];
    for (b, blk) in blocks.iter().enumerate() {
        prefetch_ahead(blk);
        let (d, dmin) = f16x2(sub(blk, 0));
        let (sc, mn) = scales_k4(sub(blk, 4));
        // The eight scales, an i16 each, in every 128-bit lane.
        let scales = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(i64::from_le_bytes(sc))));
        let mut iacc = [[_mm512_setzero_si512(); 2]; R];
        for (p, &pick) in picks.iter().enumerate() {
            let v = load_u8x64(sub(blk, 16 + 64 * p));
            let (w0, w1) = (_mm512_and_si512(v, m4), _mm512_and_si512(_mm512_srli_epi16::<4>(v), m4));
            let s = _mm512_shuffle_epi8(scales, pick);
            for r in 0..R {
                let (c0, c1) = (4 * b + 2 * p, 4 * b + 2 * p + 1);
                // Dword sums of four products each, at most 4 · 255 · 15 (lo) and 4 · 15 · 128
                // (hi) in magnitude: they pack into i16 without saturating.
                let lo_sums = _mm512_packs_epi32(
                    _mm512_dpbusd_epi32(zero, load_u8x64(&lo[r][c0]), w0),
                    _mm512_dpbusd_epi32(zero, load_u8x64(&lo[r][c1]), w1),
                );
                let hi_sums = _mm512_packs_epi32(
                    _mm512_dpbusd_epi32(zero, w0, load_i8x64(&hi[r][c0])),
                    _mm512_dpbusd_epi32(zero, w1, load_i8x64(&hi[r][c1])),
                );
                iacc[r][0] = dpwssd(iacc[r][0], lo_sums, s);
                iacc[r][1] = dpwssd(iacc[r][1], hi_sums, s);
            }
        }
        // dmin · min_j (exact: an f16 times a 6-bit integer), times the activation's sum
        // over sub-block j.
        let mins = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(i64::from_le_bytes(mn))));
        let mins = _mm256_mul_ps(mins, _mm256_set1_ps(dmin));
        for r in 0..R {
            let i = _mm512_cvtepi32_ps(_mm512_add_epi32(iacc[r][0], _mm512_slli_epi32::<8>(iacc[r][1])));
            facc[r] = _mm512_fmadd_ps(i, _mm512_set1_ps(d * acts[r].d[b]), facc[r]);
            macc[r] = _mm256_fmadd_ps(mins, load_f32x8(&dsums[r][b]), macc[r]);
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = _mm512_reduce_add_ps(facc[r]) - _mm512_reduce_add_ps(_mm512_zextps256_ps512(macc[r]));
    }
    out
}

/// The 6-bit quants (0..63) of half `h` of a Q6_K block as two chunks of 64 values (values
/// 128h.. and 128h + 64..), laid out as [`q6_k_quants`](super::x86::q6_k_quants) does, in
/// 512-bit operations: the half's 64 bytes of nibbles at once, its 32 bytes of high bits in
/// both halves of a register, shifted per half.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
fn q6_k_chunks(blk: &[u8; 210], h: usize) -> [__m512i; 2] {
    let m4 = _mm512_set1_epi8(0x0F);
    let m30 = _mm512_set1_epi8(0x30);
    let ql = load_u8x64(sub(blk, 64 * h));
    let qh = _mm512_broadcast_i64x4(load_u8x32(sub(blk, 128 + 32 * h)));
    // Bits 4 and 5 of each byte: the high bits of values 0..32 (qh << 4) and 32..64 (qh << 2),
    // then of values 64..96 (qh) and 96..128 (qh >> 2).
    let hi0 = _mm512_slli_epi16::<2>(qh);
    let hi0 = _mm512_and_si512(_mm512_mask_slli_epi16::<2>(hi0, 0x0000_FFFF, hi0), m30);
    let hi1 = _mm512_and_si512(_mm512_mask_srli_epi16::<2>(qh, 0xFFFF_0000, qh), m30);
    // 0xE4: bits of the first operand where the third is set, else of the second.
    [
        _mm512_ternarylogic_epi32::<0xE4>(ql, hi0, m4),
        _mm512_ternarylogic_epi32::<0xE4>(_mm512_srli_epi16::<4>(ql), hi1, m4),
    ]
}

/// Q6_K (see x86.rs's `q6_k`): a chunk is 64 values of four 16-value sub-blocks, one per
/// 128-bit lane ([`q6_k_chunks`]).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
pub(super) fn q6_k<const R: usize>(row: &[u8], acts: &[Q8Row; R]) -> [f32; R] {
    let blocks = row.as_chunks::<210>().0;
    let (lo, hi) = planes(acts);
    let mut sums: [&[[i32; 16]]; R] = [&[]; R];
    for (s, a) in sums.iter_mut().zip(acts) {
        *s = a.sums.as_chunks::<{ 256 / SUM_LEN }>().0;
    }
    // Per chunk q, the word permutation that puts sub-block 4q + l's scale in 128-bit lane l.
    const LANE: i64 = 0x0001_0001_0001_0001;
    let lanes = _mm512_set_epi64(3 * LANE, 3 * LANE, 2 * LANE, 2 * LANE, LANE, LANE, 0, 0);
    let mut picks = [_mm512_setzero_si512(); 4];
    for (q, pick) in picks.iter_mut().enumerate() {
        *pick = _mm512_add_epi16(_mm512_set1_epi16(4 * q as i16), lanes);
    }
    let mut facc = [_mm512_setzero_ps(); R];
    for (b, blk) in blocks.iter().enumerate() {
        prefetch_ahead(blk);
        let (d, _) = f16x2(&[blk[208], blk[209], 0, 0]);
        let scale_bytes = load_u8x16(sub(blk, 192));
        let scales = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(scale_bytes));
        let mut iacc = [[_mm512_setzero_si512(); 2]; R];
        for h in 0..2 {
            for (c, w) in q6_k_chunks(blk, h).into_iter().enumerate() {
                let q = 2 * h + c;
                let s = _mm512_permutexvar_epi16(picks[q], scales);
                for r in 0..R {
                    let (pl, ph) = pair_sums(w, &lo[r][4 * b + q], &hi[r][4 * b + q]);
                    iacc[r][0] = dpwssd(iacc[r][0], pl, s);
                    iacc[r][1] = dpwssd(iacc[r][1], ph, s);
                }
            }
        }
        // 32 · scale_j per sub-block, for the quants' offset.
        let offsets = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(scale_bytes)), _mm512_set1_ps(32.0));
        for r in 0..R {
            let dd = _mm512_set1_ps(d * acts[r].d[b]);
            let lo_sum = _mm512_cvtepi32_ps(iacc[r][0]);
            let hi_sum = _mm512_cvtepi32_ps(iacc[r][1]);
            let i = _mm512_fmadd_ps(hi_sum, _mm512_set1_ps(256.0), lo_sum);
            let i = _mm512_fnmadd_ps(offsets, _mm512_cvtepi32_ps(load_i32x16(&sums[r][b])), i);
            facc[r] = _mm512_fmadd_ps(i, dd, facc[r]);
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = _mm512_reduce_add_ps(facc[r]);
    }
    out
}
