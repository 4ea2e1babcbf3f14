//! x86-64 AVX2 kernels of the fast path ([`Simd::Avx2`](super::Simd::Avx2)): AVX2 for the
//! integer dot products, FMA for the f32 sums, F16C for f16 scales and weights.
//!
//! Weight quants are widened to i16 and multiplied by their sub-block scale (every format's
//! `q * scale` fits i16: at most 32 * 128 = 4096, Q6_K), then `_mm256_madd_epi16` multiplies
//! them with the i16 activation and adds pairs into i32 lanes. Each lane of a block's i32
//! accumulator sums at most 32 products below 2^31 in magnitude (Q5_K: 32 · 1953 · 32767 ≈
//! 2.05e9; Q4_K: 9.9e8); Q6_K, whose products reach 4096 · 32767, is flushed every 128
//! values (16 products: 2147418112 < 2^31). So the integer sums are exact, as in the scalar
//! kernel, and only the f32 additions after them are ordered differently.
//!
//! Each kernel dots one weight row with `R` activation rows at once, so a block is unpacked
//! once and its quants are reused from registers `R` times; `drive!` (activation.rs) tiles
//! a matrix product over such calls.
//!
//! Everything here is `#[target_feature(enable = "avx2,fma,f16c")]`: the two entry points
//! are called only once [`Simd::Avx2`](super::Simd::Avx2) is detected. Memory is read only
//! through the load helpers below, which take array references, so no load reaches past a
//! slice; lengths are checked by the caller and again by slice indexing (a bug panics, it
//! never reads out of bounds).

use std::arch::x86_64::*;

use super::activation::{
    drive, i16_block_scale, min_sum, round_half_away, PlaneOrder, Q8Row, Rows, GROUP, SUM_LEN, TILE_BYTES,
};
use super::block::{visit_blocks, BlockVisitor, Unpacked};
use super::x86_bytes::{q4_k as q4_k_bytes, q6_k as q6_k_bytes};
use super::x86_gemm::{q8_gemm_512, GEMM_MIN_ROWS};
use super::{float, DType};

// ---------------------------------------------------------------- loads

/// How far past the bytes a row kernel is reading it asks for the next weights. A decode
/// step reads every weight row once, from memory, and the hardware prefetchers alone left
/// the 2B shape's decode short of the machine's bandwidth: 4 KiB ahead took it from 24.8 to
/// 26.5 tokens/s on two threads (14.5 to 15.9 on one); 1-3 KiB gained less, 8-16 KiB lost
/// the gain again. Only the AVX-512 kernels ask: the AVX2 ones, with more work per byte,
/// decoded 3 % slower with it (21.7 against 21.0 tokens/s).
const PREFETCH_AHEAD: usize = 4096;

/// Asks the cache for the lines that begin in `bytes` moved [`PREFETCH_AHEAD`] on: called on
/// the consecutive runs of a row, it asks for each line once.
#[inline(always)]
pub(super) fn prefetch_ahead(bytes: &[u8]) {
    let ahead = bytes.as_ptr().wrapping_add(PREFETCH_AHEAD);
    let first = (ahead as usize).next_multiple_of(64) - ahead as usize;
    for at in (first..bytes.len()).step_by(64) {
        // SAFETY: a prefetch is a hint: it changes nothing the program can observe and never
        // faults, whatever the address (past the end of the weights too).
        unsafe { _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(at).cast()) };
    }
}

/// Asks the level-2 cache for every line of `bytes`: weights a kernel reads a while later.
#[inline(always)]
pub(super) fn prefetch_l2(bytes: &[u8]) {
    let start = bytes.as_ptr() as usize;
    for line in (start & !63..start + bytes.len()).step_by(64) {
        // SAFETY: a prefetch is a hint: it changes nothing the program can observe and never
        // faults, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(bytes.as_ptr().wrapping_add(line - start).cast()) };
    }
}

/// `s[at..at + M]` as an array.
#[inline(always)]
pub(super) fn sub<T, const M: usize>(s: &[T], at: usize) -> &[T; M] {
    s[at..at + M].first_chunk().expect("slice of length M")
}

#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn load_u8x32(a: &[u8; 32]) -> __m256i {
    // SAFETY: reads exactly the 32 bytes of `a`; loadu has no alignment requirement.
    unsafe { _mm256_loadu_si256(a.as_ptr().cast()) }
}

#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn load_u8x16(a: &[u8; 16]) -> __m128i {
    // SAFETY: reads exactly the 16 bytes of `a`; loadu has no alignment requirement.
    unsafe { _mm_loadu_si128(a.as_ptr().cast()) }
}

#[inline]
#[target_feature(enable = "avx2")]
fn load_i8x16(a: &[i8; 16]) -> __m128i {
    // SAFETY: reads exactly the 16 bytes of `a`; loadu has no alignment requirement.
    unsafe { _mm_loadu_si128(a.as_ptr().cast()) }
}

#[inline]
#[target_feature(enable = "avx2")]
fn load_i16x16(a: &[i16; 16]) -> __m256i {
    // SAFETY: reads exactly the 32 bytes of `a`; loadu has no alignment requirement.
    unsafe { _mm256_loadu_si256(a.as_ptr().cast()) }
}

#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn load_f32x8(a: &[f32; 8]) -> __m256 {
    // SAFETY: reads exactly the 32 bytes of `a`; loadu has no alignment requirement.
    unsafe { _mm256_loadu_ps(a.as_ptr()) }
}

#[inline]
#[target_feature(enable = "avx512f")]
pub(super) fn load_i16x32(a: &[i16; 32]) -> __m512i {
    // SAFETY: reads exactly the 64 bytes of `a`; loadu has no alignment requirement.
    unsafe { _mm512_loadu_si512(a.as_ptr().cast()) }
}

#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn load_i16x8(a: &[i16; 8]) -> __m128i {
    // SAFETY: reads exactly the 16 bytes of `a`; loadu has no alignment requirement.
    unsafe { _mm_loadu_si128(a.as_ptr().cast()) }
}

#[inline]
#[target_feature(enable = "avx512f")]
pub(super) fn store_f32x16(a: &mut [f32; 16], v: __m512) {
    // SAFETY: writes exactly the 64 bytes of `a`; storeu has no alignment requirement.
    unsafe { _mm512_storeu_ps(a.as_mut_ptr(), v) }
}

#[inline]
#[target_feature(enable = "avx")]
fn store_f32x8(a: &mut [f32; 8], v: __m256) {
    // SAFETY: writes exactly the 32 bytes of `a`; storeu has no alignment requirement.
    unsafe { _mm256_storeu_ps(a.as_mut_ptr(), v) }
}

#[inline]
#[target_feature(enable = "avx2")]
fn store_i16x8(a: &mut [i16; 8], v: __m128i) {
    // SAFETY: writes exactly the 16 bytes of `a`; storeu has no alignment requirement.
    unsafe { _mm_storeu_si128(a.as_mut_ptr().cast(), v) }
}

// ---------------------------------------------------------------- activation rounding

/// A block of activations rounded to 16-bit integers, as `activation::quantize_i16_block`
/// does it (the same float operations lane by lane: the same integers and scale), eight values
/// at a time; returns the scale.
#[target_feature(enable = "avx2")]
pub(super) fn quantize_i16_block(x: &[f32], q: &mut [i16]) -> f32 {
    let (chunks, tail) = x.as_chunks::<8>();
    let abs = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MAX));
    // `vmaxps` returns its second operand where either is NaN: NaNs of x are skipped, as
    // `f32::max` skips them.
    let mut lanes_max = _mm256_setzero_ps();
    for c in chunks {
        lanes_max = _mm256_max_ps(_mm256_and_ps(load_f32x8(c), abs), lanes_max);
    }
    let mut lanes = [0f32; 8];
    store_f32x8(&mut lanes, lanes_max);
    let d = match i16_block_scale(lanes, tail, q) {
        Ok(d) => d,
        Err(degenerate) => return degenerate,
    };
    let inv = 1.0 / d;
    let (scale, two_23, one, half) =
        (_mm256_set1_ps(inv), _mm256_set1_ps(8_388_608.0), _mm256_set1_ps(1.0), _mm256_set1_ps(0.5));
    let (low, high, sign) =
        (_mm256_set1_ps(-32767.0), _mm256_set1_ps(32767.0), _mm256_castsi256_ps(_mm256_set1_epi32(i32::MIN)));
    let (q_chunks, q_tail) = q.as_chunks_mut::<8>();
    for (c, qc) in chunks.iter().zip(q_chunks) {
        let y = _mm256_mul_ps(load_f32x8(c), scale);
        // round_half_away: |y| to the nearest integer through 2^23, one less where that rounded
        // up (the integer part), plus one where the fraction is a half or more; y's sign.
        let a = _mm256_and_ps(y, abs);
        let r = _mm256_sub_ps(_mm256_add_ps(a, two_23), two_23);
        let t = _mm256_sub_ps(r, _mm256_and_ps(_mm256_cmp_ps::<_CMP_GT_OQ>(r, a), one));
        let up = _mm256_and_ps(_mm256_cmp_ps::<_CMP_GE_OQ>(_mm256_sub_ps(a, t), half), one);
        let rounded = _mm256_or_ps(_mm256_add_ps(t, up), _mm256_and_ps(y, sign));
        let clamped = _mm256_min_ps(_mm256_max_ps(rounded, low), high);
        // A NaN of x becomes 0, as `as i32` makes it.
        let ordered = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_ORD_Q>(y, y));
        let ints = _mm256_and_si256(_mm256_cvttps_epi32(clamped), ordered);
        let packed = _mm256_permute4x64_epi64::<0b1000>(_mm256_packs_epi32(ints, ints));
        store_i16x8(qc, _mm256_castsi256_si128(packed));
    }
    for (&v, q) in tail.iter().zip(q_tail) {
        *q = round_half_away(v * inv).clamp(-32767.0, 32767.0) as i32 as i16;
    }
    d
}

// ---------------------------------------------------------------- small helpers

/// Sum of the eight lanes.
#[inline]
#[target_feature(enable = "avx2")]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// The two little-endian f16 at `b[0..2]` and `b[2..4]`, widened exactly.
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(super) fn f16x2(b: &[u8; 4]) -> (f32, f32) {
    let v = _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from_le_bytes(*b)));
    (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
}

/// The little-endian f16 at `b`, widened exactly, in every lane. (A broadcast: converted
/// as a scalar, LLVM inserts the f16 into whatever register is free, which ties the
/// conversion to that register's last writer, often an accumulator, serializing blocks.)
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn f16_splat(b: &[u8; 2]) -> __m256 {
    _mm256_cvtph_ps(_mm_set1_epi16(i16::from_le_bytes(*b)))
}

/// Q4_K/Q5_K's packed 6-bit scales and mins ([`super::kquants::unpack_scales_k4`]) as
/// `(scales, mins)`, one byte each, with 32-bit word operations.
#[inline(always)]
pub(super) fn scales_k4(s: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    let w = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    let (w0, w1, w2) = (w(0), w(1), w(2));
    let sc_lo = w0 & 0x3f3f_3f3f;
    let mn_lo = w1 & 0x3f3f_3f3f;
    let sc_hi = (w2 & 0x0f0f_0f0f) | ((w0 >> 6) & 0x0303_0303) << 4;
    let mn_hi = ((w2 >> 4) & 0x0f0f_0f0f) | ((w1 >> 6) & 0x0303_0303) << 4;
    let cat = |lo: u32, hi: u32| (u64::from(lo) | u64::from(hi) << 32).to_le_bytes();
    (cat(sc_lo, sc_hi), cat(mn_lo, mn_hi))
}

/// The 6-bit quants (0..63, before Q6_K's offset of 32) of half `h` of a Q6_K block: values
/// 128h..128h + 128 in four registers of 32. Bytes l and l + 32 of the half's 64 bytes of
/// nibbles give values l, l + 32 from their low nibbles and l + 64, l + 96 from their high
/// ones; the half's 32 bytes of high bits give 2 bits to each of the four.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn q6_k_quants(blk: &[u8; 210], h: usize) -> [__m256i; 4] {
    let m4 = _mm256_set1_epi8(0x0F);
    let m30 = _mm256_set1_epi8(0x30);
    let ql0 = load_u8x32(sub(blk, 64 * h));
    let ql1 = load_u8x32(sub(blk, 64 * h + 32));
    let qh = load_u8x32(sub(blk, 128 + 32 * h));
    [
        _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16::<4>(qh), m30)),
        _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16::<2>(qh), m30)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m4), _mm256_and_si256(qh, m30)),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4),
            _mm256_and_si256(_mm256_srli_epi16::<2>(qh), m30),
        ),
    ]
}

// ---------------------------------------------------------------- driver

/// `out[i * rows.len() + j] = row j · acts[i]` for quantized rows of `dtype`.
///
/// Every row must be one whole `dtype` row of `k` values and every activation row hold `k`
/// values in the block form of `dtype` (checked by the caller; a mismatch panics).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn q8_matmul(dtype: DType, rows: Rows, acts: &[Q8Row], out: &mut [f32]) {
    match dtype {
        DType::Q4K => drive!(q4_k(), rows, acts, out),
        DType::Q6K => drive!(q6_k(), rows, acts, out),
        DType::Q8_0 => drive!(q8_0(), rows, acts, out),
        _ => drive!(generic(dtype), rows, acts, out),
    }
}

/// `out[i * rows.len() + j] = rows[j] · xs[i]` for float rows of `dtype` (F32, F16, BF16);
/// every row holds `xs[i].len()` values (checked by the caller).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn float_matmul(dtype: DType, rows: Rows, xs: &[&[f32]], out: &mut [f32]) {
    match dtype {
        DType::F16 => drive!(f16_rows(), rows, xs, out),
        DType::BF16 => drive!(bf16_rows(), rows, xs, out),
        DType::F32 => drive!(f32_rows(), rows, xs, out),
        _ => {}
    }
}

// ---------------------------------------------------------------- quantized kernels

/// Per activation row, its quants as arrays of one block (`N` values). A loop rather than
/// `std::array::from_fn`, whose closure, compiled with the caller's target features, is not
/// inlined into it (x86_bytes.rs's `planes`).
#[inline(always)]
fn act_blocks<'a, const N: usize, const R: usize>(acts: &[Q8Row<'a>; R]) -> [&'a [[i16; N]]; R] {
    let mut out: [&'a [[i16; N]]; R] = [&[]; R];
    for (o, a) in out.iter_mut().zip(acts) {
        *o = a.q.as_chunks::<N>().0;
    }
    out
}

/// Per activation row, its `dsums32` in blocks of 8 (as [`act_blocks`]).
#[inline(always)]
pub(super) fn act_dsums<'a, const R: usize>(acts: &[Q8Row<'a>; R]) -> [&'a [[f32; 8]]; R] {
    let mut out: [&'a [[f32; 8]]; R] = [&[]; R];
    for (o, a) in out.iter_mut().zip(acts) {
        *o = a.dsums32.as_chunks::<8>().0;
    }
    out
}

/// Q4_K (144-byte blocks: d, dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles:
/// 32 bytes per 64 values, low nibbles first).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q4_k<const R: usize>(row: &[u8], acts: &[Q8Row; R]) -> [f32; R] {
    let blocks = row.as_chunks::<144>().0;
    let q = act_blocks::<256, R>(acts);
    let dsums = act_dsums(acts);
    let m4 = _mm256_set1_epi8(0x0F);
    let mut facc = [_mm256_setzero_ps(); R];
    for (b, blk) in blocks.iter().enumerate() {
        let (d, dmin) = f16x2(sub(blk, 0));
        let (sc, mn) = scales_k4(sub(blk, 4));
        let mut iacc = [_mm256_setzero_si256(); R];
        for j in 0..4 {
            let v = load_u8x32(sub(blk, 16 + 32 * j));
            let lo = _mm256_and_si256(v, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
            let s_lo = _mm256_set1_epi16(i16::from(sc[2 * j]));
            let s_hi = _mm256_set1_epi16(i16::from(sc[2 * j + 1]));
            let w = [
                _mm256_mullo_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(lo)), s_lo),
                _mm256_mullo_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256::<1>(lo)), s_lo),
                _mm256_mullo_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(hi)), s_hi),
                _mm256_mullo_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256::<1>(hi)), s_hi),
            ];
            for r in 0..R {
                let a = &q[r][b];
                let p0 = _mm256_madd_epi16(w[0], load_i16x16(sub(a, 64 * j)));
                let p1 = _mm256_madd_epi16(w[1], load_i16x16(sub(a, 64 * j + 16)));
                let p2 = _mm256_madd_epi16(w[2], load_i16x16(sub(a, 64 * j + 32)));
                let p3 = _mm256_madd_epi16(w[3], load_i16x16(sub(a, 64 * j + 48)));
                let p = _mm256_add_epi32(_mm256_add_epi32(p0, p1), _mm256_add_epi32(p2, p3));
                iacc[r] = _mm256_add_epi32(iacc[r], p);
            }
        }
        // dmin · min_j (exact: an f16 times a 6-bit integer), times the activation's sum
        // over sub-block j.
        let mins = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(i64::from_le_bytes(mn))));
        let mins = _mm256_mul_ps(mins, _mm256_set1_ps(dmin));
        for r in 0..R {
            facc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[r]), _mm256_set1_ps(d * acts[r].d[b]), facc[r]);
            facc[r] = _mm256_fnmadd_ps(mins, load_f32x8(&dsums[r][b]), facc[r]);
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = hsum(facc[r]);
    }
    out
}

/// Q6_K (210-byte blocks: 128 bytes of low nibbles, 64 of high 2-bit pairs, 16 i8 scales,
/// d; the quants laid out as [`q6_k_quants`] reads them).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q6_k<const R: usize>(row: &[u8], acts: &[Q8Row; R]) -> [f32; R] {
    let blocks = row.as_chunks::<210>().0;
    let q = act_blocks::<256, R>(acts);
    let m32 = _mm256_set1_epi8(32);
    let mut facc = [_mm256_setzero_ps(); R];
    for (b, blk) in blocks.iter().enumerate() {
        let d = f16_splat(sub(blk, 208));
        let scales: &[u8; 16] = sub(blk, 192);
        let mut dd = [_mm256_setzero_ps(); R];
        for r in 0..R {
            dd[r] = _mm256_mul_ps(d, _mm256_set1_ps(acts[r].d[b]));
        }
        for h in 0..2 {
            let v = q6_k_quants(blk, h);
            let mut iacc = [_mm256_setzero_si256(); R];
            for (g, &v) in v.iter().enumerate() {
                let v = _mm256_sub_epi8(v, m32);
                let s_a = _mm256_set1_epi16(i16::from(scales[8 * h + 2 * g] as i8));
                let s_b = _mm256_set1_epi16(i16::from(scales[8 * h + 2 * g + 1] as i8));
                let w0 = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(v)), s_a);
                let w1 = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_extracti128_si256::<1>(v)), s_b);
                for r in 0..R {
                    let a = &q[r][b];
                    let p0 = _mm256_madd_epi16(w0, load_i16x16(sub(a, 128 * h + 32 * g)));
                    let p1 = _mm256_madd_epi16(w1, load_i16x16(sub(a, 128 * h + 32 * g + 16)));
                    iacc[r] = _mm256_add_epi32(iacc[r], _mm256_add_epi32(p0, p1));
                }
            }
            for r in 0..R {
                facc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[r]), dd[r], facc[r]);
            }
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = hsum(facc[r]);
    }
    out
}

/// Q8_0 (34-byte blocks: d, 32 i8 quants).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q8_0<const R: usize>(row: &[u8], acts: &[Q8Row; R]) -> [f32; R] {
    let blocks = row.as_chunks::<34>().0;
    let q = act_blocks::<32, R>(acts);
    let mut facc = [_mm256_setzero_ps(); R];
    for (b, blk) in blocks.iter().enumerate() {
        let d = f16_splat(sub(blk, 0));
        let w0 = _mm256_cvtepi8_epi16(load_u8x16(sub(blk, 2)));
        let w1 = _mm256_cvtepi8_epi16(load_u8x16(sub(blk, 18)));
        for r in 0..R {
            let a = &q[r][b];
            let p0 = _mm256_madd_epi16(w0, load_i16x16(sub(a, 0)));
            let p1 = _mm256_madd_epi16(w1, load_i16x16(sub(a, 16)));
            let p = _mm256_cvtepi32_ps(_mm256_add_epi32(p0, p1));
            facc[r] = _mm256_fmadd_ps(p, _mm256_mul_ps(d, _mm256_set1_ps(acts[r].d[b])), facc[r]);
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = hsum(facc[r]);
    }
    out
}

/// Any block format, through its scalar unpacker ([`visit_blocks`]); the integer dot in
/// AVX2.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn generic<const R: usize>(dtype: DType, row: &[u8], acts: &[Q8Row; R]) -> [f32; R] {
    struct Visit<'a, const R: usize> {
        row: &'a [u8],
        acts: &'a [Q8Row<'a>; R],
    }
    impl<const R: usize> BlockVisitor for Visit<'_, R> {
        type Output = [f32; R];
        fn visit<const B: usize, const N: usize, const S: usize>(
            self,
            unpack: impl Fn(&[u8; B], &mut Unpacked<N, S>),
        ) -> [f32; R] {
            // SAFETY: `Visit` is only made in `generic`, which runs with AVX2, FMA and F16C.
            unsafe { generic_blocks(self.row, self.acts, unpack) }
        }
    }
    visit_blocks(dtype, Visit { row, acts }).unwrap_or([0.0; R])
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn generic_blocks<const B: usize, const N: usize, const S: usize, const R: usize>(
    row: &[u8],
    acts: &[Q8Row; R],
    unpack: impl Fn(&[u8; B], &mut Unpacked<N, S>),
) -> [f32; R] {
    let sub_len = N / S;
    let blocks = row.as_chunks::<B>().0;
    let q = act_blocks::<N, R>(acts);
    let mut u = Unpacked::<N, S>::new();
    let mut facc = [_mm256_setzero_ps(); R];
    let mut mins = [0f32; R];
    for (b, blk) in blocks.iter().enumerate() {
        unpack(blk, &mut u);
        let mut dd = [_mm256_setzero_ps(); R];
        for r in 0..R {
            dd[r] = _mm256_set1_ps(u.d * acts[r].d[b]);
        }
        let chunks = u.q.as_chunks::<16>().0;
        let mut iacc = [_mm256_setzero_si256(); R];
        for (c, qc) in chunks.iter().enumerate() {
            let s = _mm256_set1_epi16(u.scale[c * 16 / sub_len] as i16);
            let w = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(load_i8x16(qc)), s);
            for r in 0..R {
                let p = _mm256_madd_epi16(w, load_i16x16(sub(&q[r][b], 16 * c)));
                iacc[r] = _mm256_add_epi32(iacc[r], p);
            }
            // Flush every 128 values, and at the block's end.
            if c % 8 == 7 || c + 1 == chunks.len() {
                for r in 0..R {
                    facc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[r]), dd[r], facc[r]);
                    iacc[r] = _mm256_setzero_si256();
                }
            }
        }
        if u.min.iter().any(|&m| m != 0) {
            for r in 0..R {
                let sums = &acts[r].sums[b * (N / SUM_LEN)..(b + 1) * (N / SUM_LEN)];
                let msum = min_sum(&u.min, sums);
                mins[r] += acts[r].d[b] * (u.dmin * msum as f32);
            }
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = hsum(facc[r]) - mins[r];
    }
    out
}

// ---------------------------------------------------------------- float kernels

/// Float row formats, as const parameters of [`float_rows`].
const F32: u8 = 0;
const F16: u8 = 1;
const BF16: u8 = 2;

/// Values `i..i + 8` of a float row of format `F`, widened to f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn load_float<const F: u8>(row: &[u8], i: usize) -> __m256 {
    match F {
        F16 => _mm256_cvtph_ps(load_u8x16(sub(row, 2 * i))),
        BF16 => _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(load_u8x16(sub(row, 2 * i))))),
        _ => _mm256_castsi256_ps(load_u8x32(sub(row, 4 * i))),
    }
}

/// One float row of format `F` dotted with `R` f32 rows, 16 values a step in two
/// accumulators per row; the tail (under 16 values) is scalar.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn float_rows<const F: u8, const R: usize>(dtype: DType, row: &[u8], xs: &[&[f32]; R]) -> [f32; R] {
    let k = xs[0].len();
    let main = k - k % 16;
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    for i in (0..main).step_by(16) {
        let w0 = load_float::<F>(row, i);
        let w1 = load_float::<F>(row, i + 8);
        for r in 0..R {
            acc[r][0] = _mm256_fmadd_ps(w0, load_f32x8(sub(xs[r], i)), acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(w1, load_f32x8(sub(xs[r], i + 8)), acc[r][1]);
        }
    }
    let bpv = dtype.block_bytes();
    let mut out = [0f32; R];
    for r in 0..R {
        let tail = if main < k { float::dot(dtype, &row[main * bpv..], &xs[r][main..]) } else { 0.0 };
        out[r] = hsum(_mm256_add_ps(acc[r][0], acc[r][1])) + tail;
    }
    out
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn f32_rows<const R: usize>(row: &[u8], xs: &[&[f32]; R]) -> [f32; R] {
    float_rows::<F32, R>(DType::F32, row, xs)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn f16_rows<const R: usize>(row: &[u8], xs: &[&[f32]; R]) -> [f32; R] {
    float_rows::<F16, R>(DType::F16, row, xs)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn bf16_rows<const R: usize>(row: &[u8], xs: &[&[f32]; R]) -> [f32; R] {
    float_rows::<BF16, R>(DType::BF16, row, xs)
}

// ---------------------------------------------------------------- AVX-512 kernels
//
// [`Simd::Avx512`](super::Simd::Avx512): the same sums as the AVX2 kernels. Q4_K and Q6_K
// rows take the byte-plane kernels (x86_bytes.rs) below [`GEMM_MIN_ROWS`] activation rows
// and the tiled ones (x86_gemm.rs) from there; Q8_0 and F16 rows have kernels here, 32 i16 a
// register with `vpdpwssd` (AVX512-VNNI) fusing the multiply-add and the accumulation.

#[inline]
#[target_feature(enable = "avx512f")]
pub(super) fn load_f32x16(a: &[f32; 16]) -> __m512 {
    // SAFETY: reads exactly the 64 bytes of `a`; loadu has no alignment requirement.
    unsafe { _mm512_loadu_ps(a.as_ptr()) }
}

/// `acc + Σ pairs of w · a` per i32 lane (`vpdpwssd`), `a` read from memory. (LLVM's
/// generic tuning often emits `vpmaddwd` + `vpaddd` instead; inline assembly forcing
/// `vpdpwssd` measured no faster on Zen 5, whose multiply pipes bound both.)
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn dpwssd(acc: __m512i, w: __m512i, a: &[i16; 32]) -> __m512i {
    // SAFETY: reads exactly the 64 bytes of `a`; loadu has no alignment requirement.
    _mm512_dpwssd_epi32(acc, w, unsafe { _mm512_loadu_si512(a.as_ptr().cast()) })
}

/// `out[i * rows.len() + j] = rows[j] · acts[i]`, as [`q8_matmul`] (same preconditions).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
pub(crate) fn q8_matmul_512(dtype: DType, rows: Rows, acts: &[Q8Row], out: &mut [f32]) {
    if acts.len() >= GEMM_MIN_ROWS {
        return q8_gemm_512(dtype, rows, acts, out);
    }
    // The byte-product kernels read the planes in their own order ([`PlaneOrder`]); rows without
    // them take the 16-bit kernels.
    let order = acts.first().and_then(|a| a.order);
    match dtype {
        DType::Q4K if order == Some(PlaneOrder::Q4K) => drive!(q4_k_bytes(), rows, acts, out, 4),
        DType::Q6K if order == Some(PlaneOrder::Natural) => drive!(q6_k_bytes(), rows, acts, out, 4),
        DType::Q8_0 => drive!(q8_0_512(), rows, acts, out),
        _ => q8_matmul(dtype, rows, acts, out),
    }
}

/// `out[i * rows.len() + j] = rows[j] · xs[i]`, as [`float_matmul`] (same preconditions).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
pub(crate) fn float_matmul_512(dtype: DType, rows: Rows, xs: &[&[f32]], out: &mut [f32]) {
    match dtype {
        DType::F16 => f16_matmul_512(rows, xs, out),
        _ => float_matmul(dtype, rows, xs, out),
    }
}

/// The 16-bit lanes of `v` all set to its lane `i` (i < 32).
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
fn splat_i16(v: __m512i, i: i16) -> __m512i {
    _mm512_permutexvar_epi16(_mm512_set1_epi16(i), v)
}

/// A Q6_K block's 16 sub-block scales, one per 16-bit lane (lanes 16..32 zero).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2")]
pub(super) fn q6_k_scales_512(blk: &[u8; 210]) -> __m512i {
    _mm512_castsi256_si512(_mm256_cvtepi8_epi16(load_u8x16(sub(blk, 192))))
}

/// 32 Q6_K quants (`v`, from [`q6_k_quants`]) less 32, times their scales: sub-block `first`
/// for lanes 0..16, `first + 1` for lanes 16..32 (`scales` from [`q6_k_scales_512`]).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2")]
pub(super) fn q6_k_weights_512(v: __m256i, scales: __m512i, first: usize) -> __m512i {
    let first = first as i16;
    let idx = _mm512_mask_set1_epi16(_mm512_set1_epi16(first), 0xFFFF_0000, first + 1);
    let s = _mm512_permutexvar_epi16(idx, scales);
    _mm512_mullo_epi16(_mm512_cvtepi8_epi16(_mm256_sub_epi8(v, _mm256_set1_epi8(32))), s)
}

/// The 64 values of part `j` (values 64j..64j + 64) of a Q4_K block, times their sub-block
/// scales (`scales`: the eight scales, one per 16-bit lane): low nibbles then high ones.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2")]
pub(super) fn q4_k_weights_512(blk: &[u8; 144], j: usize, scales: __m512i) -> [__m512i; 2] {
    let m4 = _mm256_set1_epi8(0x0F);
    let v = load_u8x32(sub(blk, 16 + 32 * j));
    let lo = _mm256_and_si256(v, m4);
    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
    [
        _mm512_mullo_epi16(_mm512_cvtepu8_epi16(lo), splat_i16(scales, 2 * j as i16)),
        _mm512_mullo_epi16(_mm512_cvtepu8_epi16(hi), splat_i16(scales, 2 * j as i16 + 1)),
    ]
}

/// A Q4_K block's eight sub-block scales (from [`scales_k4`]), one per 16-bit lane.
#[inline]
#[target_feature(enable = "avx512f,avx2")]
pub(super) fn q4_k_scales_512(sc: [u8; 8]) -> __m512i {
    _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(i64::from_le_bytes(sc))))
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
fn q8_0_512<const R: usize>(row: &[u8], acts: &[Q8Row; R]) -> [f32; R] {
    let blocks = row.as_chunks::<34>().0;
    let q = act_blocks::<32, R>(acts);
    let mut facc = [_mm512_setzero_ps(); R];
    for (b, blk) in blocks.iter().enumerate() {
        prefetch_ahead(blk);
        let d = _mm512_cvtph_ps(_mm256_set1_epi16(i16::from_le_bytes(*sub(blk, 0))));
        let w = _mm512_cvtepi8_epi16(load_u8x32(sub(blk, 2)));
        for r in 0..R {
            let p = dpwssd(_mm512_setzero_si512(), w, &q[r][b]);
            let dd = _mm512_mul_ps(d, _mm512_set1_ps(acts[r].d[b]));
            facc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), dd, facc[r]);
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = _mm512_reduce_add_ps(facc[r]);
    }
    out
}

/// F16 rows against many activation rows: register tiles of [`F16_TILE_ROWS`] weight rows by
/// [`F16_TILE_ACTS`] activation rows (six loads a step for eight multiply-adds, where one row
/// against a group of activation rows loads one activation vector per multiply-add), over
/// weight rows in tiles of about [`TILE_BYTES`] as `drive!` takes them; rows left over go one
/// weight row at a time ([`f16_rows_512`]). Writes `out[i * rows.len() + j]`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
fn f16_matmul_512(rows: Rows, xs: &[&[f32]], out: &mut [f32]) {
    let n = rows.len();
    let tile = (TILE_BYTES / rows.row_bytes).max(1);
    let (groups, rest) = xs.as_chunks::<F16_TILE_ACTS>();
    let steps = xs.first().map_or(0, |x| x.len() / 16);
    for (t, tile_rows) in rows.tiles(tile).enumerate() {
        let j0 = t * tile;
        let tile_rows: Vec<&[u8]> = tile_rows.iter().collect();
        let (pairs, odd) = tile_rows.as_chunks::<F16_TILE_ROWS>();
        let mut acc: Vec<F16TileSums> = vec![[[_mm512_setzero_ps(); F16_TILE_ACTS]; F16_TILE_ROWS]; pairs.len()];
        for (g, group) in groups.iter().enumerate() {
            let i0 = F16_TILE_ACTS * g;
            acc.fill([[_mm512_setzero_ps(); F16_TILE_ACTS]; F16_TILE_ROWS]);
            for s0 in (0..steps).step_by(F16_TILE_STEPS) {
                for (pair, acc) in pairs.iter().zip(acc.iter_mut()) {
                    f16_tile_steps_512(pair, group, s0..(s0 + F16_TILE_STEPS).min(steps), acc);
                }
            }
            for (p, (pair, acc)) in pairs.iter().zip(&acc).enumerate() {
                let sums = f16_tile_finish_512(pair, group, acc);
                for (w, sums) in sums.iter().enumerate() {
                    for (r, &v) in sums.iter().enumerate() {
                        out[(i0 + r) * n + j0 + F16_TILE_ROWS * p + w] = v;
                    }
                }
            }
            for (jj, row) in odd.iter().enumerate() {
                let sums = f16_rows_512::<F16_TILE_ACTS>(row, group);
                for (r, &v) in sums.iter().enumerate() {
                    out[(i0 + r) * n + j0 + F16_TILE_ROWS * pairs.len() + jj] = v;
                }
            }
        }
        for (i, x) in rest.iter().enumerate() {
            let i = F16_TILE_ACTS * groups.len() + i;
            for (jj, row) in tile_rows.iter().enumerate() {
                out[i * n + j0 + jj] = f16_rows_512::<1>(row, std::array::from_ref(x))[0];
            }
        }
    }
}

/// Weight rows per register tile of [`f16_matmul_512`].
const F16_TILE_ROWS: usize = 2;
/// Activation rows per register tile of [`f16_matmul_512`]. With the weight rows, eight
/// accumulators: 4 x 4 (sixteen) were kept on the stack by the compiler, stored after every
/// multiply-add, and ran slower than one weight row at a time; 2 x 8 and 2 x 6 took 25 % and
/// 4 % longer over a 2B 448 x 448 encode's products.
const F16_TILE_ACTS: usize = 4;

/// A register tile's sums: per weight row and activation row, 16 lanes over the values.
type F16TileSums = [[__m512; F16_TILE_ACTS]; F16_TILE_ROWS];

/// Adds to `acc` a register tile's products over steps `steps` of 16 values (one f16 to f32
/// conversion per weight vector for all the activation rows): each lane sums its values in
/// order whichever steps a call takes.
#[inline]
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
fn f16_tile_steps_512(
    rows: &[&[u8]; F16_TILE_ROWS],
    xs: &[&[f32]; F16_TILE_ACTS],
    steps: std::ops::Range<usize>,
    acc: &mut F16TileSums,
) {
    // Indexed by constants only, so that the accumulators stay in registers.
    let mut sums = *acc;
    let mut w = [_mm512_setzero_ps(); F16_TILE_ROWS];
    // Every operand cut into its steps up front, lengths checked once, not per load.
    let mut wc: [&[[u8; 32]]; F16_TILE_ROWS] = [&[]; F16_TILE_ROWS];
    for j in 0..F16_TILE_ROWS {
        wc[j] = rows[j][32 * steps.start..32 * steps.end].as_chunks::<32>().0;
    }
    let mut xc: [&[[f32; 16]]; F16_TILE_ACTS] = [&[]; F16_TILE_ACTS];
    for r in 0..F16_TILE_ACTS {
        xc[r] = xs[r][16 * steps.start..16 * steps.end].as_chunks::<16>().0;
    }
    for i in 0..steps.len() {
        for j in 0..F16_TILE_ROWS {
            w[j] = _mm512_cvtph_ps(load_u8x32(&wc[j][i]));
        }
        for r in 0..F16_TILE_ACTS {
            let x = load_f32x16(&xc[r][i]);
            for j in 0..F16_TILE_ROWS {
                sums[j][r] = _mm512_fmadd_ps(w[j], x, sums[j][r]);
            }
        }
    }
    *acc = sums;
}

/// A register tile's dot products from its sums over the whole steps ([`f16_tile_steps_512`]):
/// each sum's lanes added, then the tail (under 16 values) in scalar.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
fn f16_tile_finish_512(
    rows: &[&[u8]; F16_TILE_ROWS],
    xs: &[&[f32]; F16_TILE_ACTS],
    acc: &F16TileSums,
) -> [[f32; F16_TILE_ACTS]; F16_TILE_ROWS] {
    let k = xs[0].len();
    let main = k - k % 16;
    let mut out = [[0f32; F16_TILE_ACTS]; F16_TILE_ROWS];
    for ((out, acc), row) in out.iter_mut().zip(acc).zip(rows) {
        for ((o, &acc), x) in out.iter_mut().zip(acc).zip(xs) {
            let tail = if main < k { float::dot(DType::F16, &row[main * 2..], &x[main..]) } else { 0.0 };
            *o = _mm512_reduce_add_ps(acc) + tail;
        }
    }
    out
}

/// Steps of 16 values a tile's activation rows take at a time across the tile's weight rows:
/// 1024 values, four activation rows of 4 KiB each staying in L1 while every pair of weight
/// rows passes (rows of 4096 values, 64 KiB, streamed from L2 for each pair: the 2B vision
/// tower's 4096 -> 1024 products took 1.2 times its 1024 -> 4096 ones, the same multiply-adds;
/// 2,190 -> 1,877 ms over a 448 x 448 encode's 48 at blocks of 512 values, which cost the
/// products of 1024 values 4-6 %).
const F16_TILE_STEPS: usize = 64;

/// F16 rows, 16 values a step in one accumulator per row, as [`f16_tile_steps_512`] sums each of its
/// pairs (so a product's values do not depend on which rows shared a tile); the tail (under 16
/// values) is scalar.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
fn f16_rows_512<const R: usize>(row: &[u8], xs: &[&[f32]; R]) -> [f32; R] {
    let k = xs[0].len();
    let main = k - k % 16;
    let mut acc = [_mm512_setzero_ps(); R];
    for i in (0..main).step_by(16) {
        let run = sub(row, 2 * i);
        prefetch_ahead(run);
        let w = _mm512_cvtph_ps(load_u8x32(run));
        for (acc, x) in acc.iter_mut().zip(xs) {
            *acc = _mm512_fmadd_ps(w, load_f32x16(sub(x, i)), *acc);
        }
    }
    let mut out = [0f32; R];
    for ((o, &acc), x) in out.iter_mut().zip(&acc).zip(xs) {
        let tail = if main < k { float::dot(DType::F16, &row[main * 2..], &x[main..]) } else { 0.0 };
        *o = _mm512_reduce_add_ps(acc) + tail;
    }
    out
}
