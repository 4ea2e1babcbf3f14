//! AVX-512 block sums of the CPU attention (attention.rs's `attend_body`), for `WIDE_QUERIES` queries
//! at once: each load of a key or value vector serves all of them, and their sums are
//! independent chains of multiply-adds (one query's scores were [`ATTN_KEYS`] / 8 chains of
//! `head_dim` dependent adds each: the adds' latency, not the multipliers, set the pace).
//!
//! Every sum is formed as the portable loops form it (per lane, terms in the same order, each
//! added by one fused multiply-add), so the results are those of the AVX2 path bit for bit,
//! whichever queries share a call.
//!
//! Memory is read and written through array references only; every function here is
//! `#[target_feature]` and called only once AVX-512 is detected.

use std::arch::x86_64::*;

use super::attention::{ATTN_KEYS, WIDE_QUERIES as QUERIES};

#[inline]
#[target_feature(enable = "avx512f")]
fn load(a: &[f32; 16]) -> __m512 {
    // SAFETY: reads exactly the 64 bytes of `a`; loadu has no alignment requirement.
    unsafe { _mm512_loadu_ps(a.as_ptr()) }
}

#[inline]
#[target_feature(enable = "avx512f")]
fn store(a: &mut [f32; 16], v: __m512) {
    // SAFETY: writes exactly the 64 bytes of `a`; storeu has no alignment requirement.
    unsafe { _mm512_storeu_ps(a.as_mut_ptr(), v) }
}

/// `scores[g][j] = Σ_i q[g][i] · keys_t[i][j]` over the block's keys transposed (`keys_t[i]`:
/// value i of every key), i in order. (Loops over constant indices: LLVM keeps such arrays
/// of registers in registers, where iterators over them went through memory.)
#[target_feature(enable = "avx512f")]
pub(super) fn scores(q: [&[f32]; QUERIES], keys_t: &[[f32; ATTN_KEYS]], scores: &mut [[f32; ATTN_KEYS]; QUERIES]) {
    const V: usize = ATTN_KEYS / 16;
    const _: () = assert!(ATTN_KEYS.is_multiple_of(16), "whole vectors of keys");
    let mut acc = [[_mm512_setzero_ps(); V]; QUERIES];
    let [q0, q1, q2, q3] = q;
    for ((((kt, &a), &b), &c), &e) in keys_t.iter().zip(q0).zip(q1).zip(q2).zip(q3) {
        let kt = kt.as_chunks::<16>().0;
        let mut k = [_mm512_setzero_ps(); V];
        for h in 0..V {
            k[h] = load(&kt[h]);
        }
        let x = [a, b, c, e];
        for g in 0..QUERIES {
            let xg = _mm512_set1_ps(x[g]);
            for h in 0..V {
                acc[g][h] = _mm512_fmadd_ps(xg, k[h], acc[g][h]);
            }
        }
    }
    for g in 0..QUERIES {
        let s = scores[g].as_chunks_mut::<16>().0;
        for h in 0..V {
            store(&mut s[h], acc[g][h]);
        }
    }
}

/// `keys_t[i][j] = keys[j * d + i]`: the block's keys (rows of `d` values, d a multiple of 16)
/// transposed in tiles of 16 keys by 16 values; lanes of keys past the last row of a tile are
/// zero, those of tiles past the last row are left as they were.
#[target_feature(enable = "avx512f")]
pub(super) fn transpose_keys(keys: &[f32], d: usize, keys_t: &mut [[f32; ATTN_KEYS]]) {
    let n = keys.len() / d;
    for g in 0..n.div_ceil(16).min(ATTN_KEYS / 16) {
        for t in 0..d / 16 {
            let mut rows = [_mm512_setzero_ps(); 16];
            for (jj, row) in rows.iter_mut().enumerate() {
                let j = 16 * g + jj;
                if j < n {
                    *row = load(keys[j * d + 16 * t..][..16].first_chunk().expect("16 values"));
                }
            }
            for (c, col) in transpose16(rows).into_iter().enumerate() {
                store(&mut keys_t[16 * t + c].as_chunks_mut::<16>().0[g], col);
            }
        }
    }
}

/// The 16 x 16 matrix whose rows are `r` transposed: 32-bit then 64-bit interleaves of row
/// pairs, then two rounds of 128-bit lane shuffles.
#[inline]
#[target_feature(enable = "avx512f")]
fn transpose16(r: [__m512; 16]) -> [__m512; 16] {
    // a[2k], a[2k + 1]: rows 2k and 2k + 1 interleaved; per 128-bit lane L, columns 4L, 4L + 1
    // and 4L + 2, 4L + 3.
    let mut a = [_mm512_setzero_ps(); 16];
    for k in 0..8 {
        a[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
        a[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
    // b[4k + c]: per 128-bit lane L, column 4L + c of rows 4k..4k + 4.
    let pd = _mm512_castps_pd;
    let mut b = [_mm512_setzero_ps(); 16];
    for k in 0..4 {
        let (lo, hi) = (4 * k, 4 * k + 2);
        b[4 * k] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(a[lo]), pd(a[hi])));
        b[4 * k + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(a[lo]), pd(a[hi])));
        b[4 * k + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(a[lo + 1]), pd(a[hi + 1])));
        b[4 * k + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(a[lo + 1]), pd(a[hi + 1])));
    }
    // Column 4L + c is lane L of b[c], b[4 + c], b[8 + c], b[12 + c]: a 4 x 4 transpose of lanes
    // (0x88 takes lanes 0 and 2 of each operand, 0xDD lanes 1 and 3).
    let mut out = [_mm512_setzero_ps(); 16];
    for c in 0..4 {
        let x0 = _mm512_shuffle_f32x4::<0x88>(b[c], b[4 + c]);
        let x1 = _mm512_shuffle_f32x4::<0xDD>(b[c], b[4 + c]);
        let y0 = _mm512_shuffle_f32x4::<0x88>(b[8 + c], b[12 + c]);
        let y1 = _mm512_shuffle_f32x4::<0xDD>(b[8 + c], b[12 + c]);
        out[c] = _mm512_shuffle_f32x4::<0x88>(x0, y0);
        out[4 + c] = _mm512_shuffle_f32x4::<0x88>(x1, y1);
        out[8 + c] = _mm512_shuffle_f32x4::<0xDD>(x0, y0);
        out[12 + c] = _mm512_shuffle_f32x4::<0xDD>(x1, y1);
    }
    out
}

/// `out[g] += Σ_j p[g][j] · values[j]` over the first `n[g]` value rows (`values`: rows of
/// `d` values, d a multiple of 16), j in order: 64 values of the rows at a time, then 16.
#[target_feature(enable = "avx512f")]
pub(super) fn values(p: &[[f32; ATTN_KEYS]; QUERIES], n: [usize; QUERIES], values: &[f32], out: [&mut [f32]; QUERIES]) {
    let d = out[0].len();
    let [o0, o1, o2, o3] = out;
    let mut out = [
        o0.as_chunks_mut::<16>().0,
        o1.as_chunks_mut::<16>().0,
        o2.as_chunks_mut::<16>().0,
        o3.as_chunks_mut::<16>().0,
    ];
    let rows = n[0].max(n[1]).max(n[2]).max(n[3]);
    let rows = &values[..rows * d];
    let wide = d / 64 * 4;
    for c in (0..wide).step_by(4) {
        values_of::<4>(p, n, rows, d, &mut out, c);
    }
    for c in wide..d / 16 {
        values_of::<1>(p, n, rows, d, &mut out, c);
    }
}

/// [`values`] for the `W` vectors of 16 from vector `c` on of every row.
#[inline]
#[target_feature(enable = "avx512f")]
fn values_of<const W: usize>(
    p: &[[f32; ATTN_KEYS]; QUERIES],
    n: [usize; QUERIES],
    rows: &[f32],
    d: usize,
    out: &mut [&mut [[f32; 16]]; QUERIES],
    c: usize,
) {
    let mut acc = [[_mm512_setzero_ps(); W]; QUERIES];
    for g in 0..QUERIES {
        for w in 0..W {
            acc[g][w] = load(&out[g][c + w]);
        }
    }
    for (j, row) in rows.chunks_exact(d).enumerate() {
        let v = row.as_chunks::<16>().0;
        let mut vs = [_mm512_setzero_ps(); W];
        for w in 0..W {
            vs[w] = load(&v[c + w]);
        }
        for g in 0..QUERIES {
            if j < n[g] {
                let pj = _mm512_set1_ps(p[g][j]);
                for w in 0..W {
                    acc[g][w] = _mm512_fmadd_ps(pj, vs[w], acc[g][w]);
                }
            }
        }
    }
    for g in 0..QUERIES {
        for w in 0..W {
            store(&mut out[g][c + w], acc[g][w]);
        }
    }
}
