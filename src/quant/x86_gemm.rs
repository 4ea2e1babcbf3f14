//! AVX-512 products of quantized weight rows with many activation rows (prefill chunks, the
//! vision encoder): [`Simd::Avx512`](super::Simd::Avx512) with at least [`GEMM_MIN_ROWS`]
//! activation rows.
//!
//! The one-row kernels (x86.rs) decode a block's bits once per group of a few activation rows
//! and finish every (weight row, activation row, block) with a few float operations of their
//! own; with hundreds of activation rows both dominate. Here a tile of [`TILE_ROWS`] weight
//! rows is decoded once into 16-bit integers (quants times their sub-block scale, as the
//! one-row kernels do in registers) and every activation row then passes over it, and the float
//! work of a block is done for four rows per instruction:
//!
//! - the tile holds groups of four rows; per group and per 8 values (a chunk), one 512-bit
//!   word holds the four rows' 8 values, row `r` in 128-bit lane `r`. `vpdpwssd` of that word
//!   with the activation's 8 values in every lane adds row `r`'s products of values 2s and
//!   2s + 1 of the chunk into i32 lane `4r + s`.
//! - A lane gains two products a chunk, so it is turned into f32 (times the block's `d` and
//!   the activation block's scale) every `flush` values, chosen per tile from its largest
//!   weight so that no lane passes 2^31: the integer sums stay exact, as in every kernel here.
//! - Formats with mins subtract `dmin · min_j` times the activation's sum over sub-block `j`
//!   (f32, as the one-row kernels do), for all 16 rows of the tile per instruction.
//! - The activation rows pass over the tile a slab of [`slab_values`] values at a time, their
//!   sums kept between slabs ([`Acc`]): a 2B row's whole tile (64 KiB) did not stay in the
//!   level-1 cache while three activation rows passed (2B prefill 54.7 against 48.3 tokens/s
//!   for 2,048-value slabs, 51.0 for 512; the same float operations in the same order).
//! - While they pass, the next tile's weights are asked for from memory, a share per pass.
//!
//! Results agree with the one-row kernels to f32 rounding (the additions are ordered
//! differently). Memory is read through array references only, as in x86.rs.

use std::arch::x86_64::*;
use std::ops::Range;
use std::sync::OnceLock;

use super::activation::{Q8Row, Rows, SUM_LEN};
use super::block::{visit_blocks, BlockVisitor, Unpacked};
use super::x86::{
    f16x2, load_f32x16, load_i16x32, load_i16x8, prefetch_l2, q4_k_scales_512, q4_k_weights_512, q6_k_quants,
    q6_k_scales_512, q6_k_weights_512, scales_k4, store_f32x16, sub,
};
use super::DType;

/// Activation rows from which a product takes this kernel: below it, decoding a tile costs
/// more than it saves.
pub(crate) const GEMM_MIN_ROWS: usize = 16;

/// Weight rows per tile: four groups of four.
const TILE_ROWS: usize = 16;
const GROUPS: usize = TILE_ROWS / 4;

/// Activation rows per pass over a tile: each holds a group's four integer and four float
/// accumulators in registers (24 of the 32), with the tile's four words and one activation.
const PASS: usize = 3;

/// `out[i * rows.len() + j] = rows[j] · acts[i]` for quantized rows of `dtype` (not F32, F16,
/// BF16), as `q8_matmul_512` (same preconditions: every row one whole `dtype` row of `k`
/// values, every activation row `k` values in the block form of `dtype`).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
pub(crate) fn q8_gemm_512(dtype: DType, rows: Rows, acts: &[Q8Row], out: &mut [f32]) {
    struct Visit<'a, 'b> {
        dtype: DType,
        rows: Rows<'a>,
        acts: &'a [Q8Row<'b>],
        out: &'a mut [f32],
    }
    impl BlockVisitor for Visit<'_, '_> {
        type Output = ();
        fn visit<const B: usize, const N: usize, const S: usize>(self, unpack: impl Fn(&[u8; B], &mut Unpacked<N, S>)) {
            // SAFETY: `Visit` is only made in `q8_gemm_512`, which runs with AVX-512 F, BW and
            // VNNI, AVX2, FMA and F16C.
            unsafe { gemm::<B, N, S>(self.dtype, self.rows, self.acts, self.out, unpack) }
        }
    }
    visit_blocks(dtype, Visit { dtype, rows, acts, out });
}

/// A tile of [`TILE_ROWS`] weight rows, decoded.
struct Tile {
    /// Per group, per chunk, 32 values: rows 4g..4g + 4 of the chunk's 8 values, a row per
    /// 128-bit lane. Rows past the matrix's last are zero.
    w: Vec<i16>,
    /// Per group, per block, 16 lanes: row 4g + r's `d` in lanes 4r..4r + 4.
    d: Vec<f32>,
    /// Per block, per sub-block, 16 lanes: row t's `dmin · min_j` in lane t.
    mins: Vec<f32>,
    has_mins: bool,
    /// Values between conversions of the integer sums to f32.
    flush: usize,
    /// Chunks of 8 values per row, and blocks per row (kept: a division per store was a
    /// quarter of a 2B prefill's tile decoding).
    chunks: usize,
    blocks: usize,
}

impl Tile {
    fn new(k: usize, blocks: usize, subs: usize) -> Tile {
        Tile {
            w: vec![0; GROUPS * k * 4],
            d: vec![0.0; GROUPS * blocks * 16],
            mins: vec![0.0; blocks * subs * 16],
            has_mins: false,
            flush: 8,
            chunks: k / 8,
            blocks,
        }
    }

    /// Decodes `rows` (at most [`TILE_ROWS`] whole rows of `dtype`, `N`-value blocks) into the
    /// tile: Q4_K and Q6_K with AVX-512, the others through their scalar unpacker.
    #[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
    fn fill<const B: usize, const N: usize, const S: usize>(
        &mut self,
        dtype: DType,
        rows: Rows,
        unpack: &impl Fn(&[u8; B], &mut Unpacked<N, S>),
    ) {
        let blocks = rows.row_bytes / B;
        let mut u = Unpacked::<N, S>::new();
        let mut largest = 0u32;
        self.has_mins = false;
        for t in 0..TILE_ROWS {
            let row = rows.iter().nth(t);
            largest = largest.max(match (dtype, row) {
                (DType::Q4K, Some(row)) => self.fill_q4_k(t, row),
                (DType::Q6K, Some(row)) => self.fill_q6_k(t, row),
                _ => (0..blocks).fold(0, |largest, b| {
                    match row {
                        Some(row) => unpack(sub(row, b * B), &mut u),
                        None => u = Unpacked::new(),
                    }
                    largest.max(self.fill_block(t, b, &u))
                }),
            });
        }
        // A lane gains `flush / 4` products of at most `largest · 32767` each.
        let per_lane = (i32::MAX as u64) / (u64::from(largest.max(1)) * 32767);
        self.flush = 8;
        while self.flush * 2 <= N && (self.flush * 2 / 4) as u64 <= per_lane {
            self.flush *= 2;
        }
    }

    /// Where the 8 values of chunk `c` of tile row `t` go in `w`.
    fn at(&self, t: usize, c: usize) -> usize {
        ((t / 4 * self.chunks + c) * 4 + t % 4) * 8
    }

    /// Block `b` of tile row `t`, unpacked; returns its largest |quant · scale|.
    fn fill_block<const N: usize, const S: usize>(&mut self, t: usize, b: usize, u: &Unpacked<N, S>) -> u32 {
        let mut largest = 0;
        for (c, q) in u.q.as_chunks::<8>().0.iter().enumerate() {
            let scale = u.scale[c * 8 / (N / S)];
            let at = self.at(t, b * N / 8 + c);
            for (w, &q) in self.w[at..at + 8].iter_mut().zip(q) {
                let v = i32::from(q) * scale;
                largest = largest.max(v.unsigned_abs());
                *w = v as i16;
            }
        }
        self.set_scales(t, b, u.d, u.dmin, &u.min);
        largest
    }

    /// Row `t`'s `d` and `dmin · min_j` for block `b`.
    fn set_scales(&mut self, t: usize, b: usize, d: f32, dmin: f32, min: &[i32]) {
        self.d[(t / 4 * self.blocks + b) * 16 + 4 * (t % 4)..][..4].fill(d);
        let subs = min.len();
        for (j, &m) in min.iter().enumerate() {
            self.has_mins |= m != 0;
            self.mins[(b * subs + j) * 16 + t] = dmin * m as f32;
        }
    }

    /// 32 values of row `t` from value `8c` on, in four chunks.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn store(&mut self, t: usize, c: usize, w: __m512i) {
        let lanes = [
            _mm512_extracti32x4_epi32::<0>(w),
            _mm512_extracti32x4_epi32::<1>(w),
            _mm512_extracti32x4_epi32::<2>(w),
            _mm512_extracti32x4_epi32::<3>(w),
        ];
        for (i, lane) in lanes.into_iter().enumerate() {
            let at = self.at(t, c + i);
            let dst: &mut [i16; 8] = (&mut self.w[at..at + 8]).try_into().expect("8 values");
            // SAFETY: writes exactly the 16 bytes of `dst`; storeu has no alignment requirement.
            unsafe { _mm_storeu_si128(dst.as_mut_ptr().cast(), lane) }
        }
    }

    /// A Q4_K row; returns the largest |quant · scale|.
    #[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
    fn fill_q4_k(&mut self, t: usize, row: &[u8]) -> u32 {
        let mut largest = 0;
        for (b, blk) in row.as_chunks::<144>().0.iter().enumerate() {
            let (d, dmin) = f16x2(sub(blk, 0));
            let (sc, mn) = scales_k4(sub(blk, 4));
            let scales = q4_k_scales_512(sc);
            for j in 0..4 {
                let [w_lo, w_hi] = q4_k_weights_512(blk, j, scales);
                self.store(t, (b * 256 + 64 * j) / 8, w_lo);
                self.store(t, (b * 256 + 64 * j + 32) / 8, w_hi);
            }
            largest = largest.max(15 * u32::from(sc.into_iter().max().unwrap_or(0)));
            self.set_scales(t, b, d, dmin, &mn.map(i32::from));
        }
        largest
    }

    /// A Q6_K row; returns the largest |quant · scale|.
    #[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
    fn fill_q6_k(&mut self, t: usize, row: &[u8]) -> u32 {
        let mut largest = 0;
        for (b, blk) in row.as_chunks::<210>().0.iter().enumerate() {
            let (d, _) = f16x2(&[blk[208], blk[209], 0, 0]);
            let scales = q6_k_scales_512(blk);
            for h in 0..2 {
                for (g, v) in q6_k_quants(blk, h).into_iter().enumerate() {
                    let w = q6_k_weights_512(v, scales, 8 * h + 2 * g);
                    self.store(t, (b * 256 + 128 * h + 32 * g) / 8, w);
                }
            }
            let s_max = blk[192..208].iter().map(|&s| (s as i8).unsigned_abs()).max().unwrap_or(0);
            largest = largest.max(32 * u32::from(s_max));
            self.set_scales(t, b, d, 0.0, &[0; 16]);
        }
        largest
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
fn gemm<const B: usize, const N: usize, const S: usize>(
    dtype: DType,
    rows: Rows,
    acts: &[Q8Row],
    out: &mut [f32],
    unpack: impl Fn(&[u8; B], &mut Unpacked<N, S>),
) {
    let n = rows.len();
    let blocks = rows.row_bytes / B;
    let k = blocks * N;
    // Each activation row's sums over every sub-block, times its block's scale.
    let sub_sums = N / S / SUM_LEN;
    let mut asums = vec![0f32; acts.len() * blocks * S];
    for (a, asums) in acts.iter().zip(asums.chunks_exact_mut(blocks * S)) {
        for (j, (asum, s)) in asums.iter_mut().zip(a.sums.chunks_exact(sub_sums)).enumerate() {
            *asum = a.d[j / S] * s.iter().sum::<i32>() as f32;
        }
    }
    let asums: Vec<&[f32]> = asums.chunks_exact(blocks * S).collect();
    let mut tile = Tile::new(k, blocks, S);
    let tiles: Vec<Rows> = rows.tiles(TILE_ROWS).collect();
    // Every activation row passes over a slab of the tile's blocks before the next slab: the
    // slab stays in the level-1 cache while they do.
    let slab = (slab_values() / N).max(1);
    let mut accs = vec![Acc::default(); acts.len()];
    for (t, tile_rows) in tiles.iter().enumerate() {
        tile.fill(dtype, *tile_rows, &unpack);
        let (j0, live) = (t * TILE_ROWS, tile_rows.len());
        accs.fill(Acc::default());
        // The next tile's weights are asked for a share at each pass over this one: decoding
        // waited on them coming from memory (12 % of a 2B prefill, most of it at the loads).
        let next = tiles.get(t + 1).map_or(&[][..], |r| r.data);
        let passes = blocks.div_ceil(slab) * acts.len().div_ceil(PASS);
        let mut coming = next.chunks(next.len().div_ceil(passes).max(64));
        for b0 in (0..blocks).step_by(slab) {
            let range = b0..(b0 + slab).min(blocks);
            let mut i = 0;
            while i < acts.len() {
                if let Some(lines) = coming.next() {
                    prefetch_l2(lines);
                }
                let r = (acts.len() - i).min(PASS);
                let (acts, asums, accs) = (&acts[i..i + r], &asums[i..i + r], &mut accs[i..i + r]);
                match r {
                    3 => pass::<N, S, 3>(&tile, blocks, range.clone(), acts.try_into().expect("3 rows"), asums, accs),
                    2 => pass::<N, S, 2>(&tile, blocks, range.clone(), acts.try_into().expect("2 rows"), asums, accs),
                    _ => pass::<N, S, 1>(&tile, blocks, range.clone(), acts.try_into().expect("1 row"), asums, accs),
                }
                i += r;
            }
        }
        for (i, acc) in accs.iter().enumerate() {
            out[i * n + j0..][..live].copy_from_slice(&acc.sums()[..live]);
        }
    }
}

/// Values of a slab of blocks ([`gemm`]): the most, a power of two, whose 16 rows (32 bytes a
/// value) fill at most two thirds of the core's level-1 data cache, leaving room for the
/// activations: 1,024 on a 48 KiB cache, 512 on a 32 KiB one and where the system does not
/// say.
fn slab_values() -> usize {
    static VALUES: OnceLock<usize> = OnceLock::new();
    *VALUES.get_or_init(|| {
        let room = l1_data_bytes().unwrap_or(32 * 1024) * 2 / 3;
        let mut values = 256;
        while 32 * values * 2 <= room {
            values *= 2;
        }
        values
    })
}

/// The size of the first CPU's level-1 data cache, as Linux describes it.
fn l1_data_bytes() -> Option<usize> {
    let dir = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    (0..8).find_map(|i| {
        let read = |name: &str| std::fs::read_to_string(dir.join(format!("index{i}/{name}"))).ok();
        if read("level")?.trim() != "1" || read("type")?.trim() != "Data" {
            return None;
        }
        let size = read("size")?;
        let size = size.trim();
        let (digits, unit) = match size.strip_suffix('K') {
            Some(d) => (d, 1024),
            None => (size, 1),
        };
        digits.parse::<usize>().ok()?.checked_mul(unit)
    })
}

/// One activation row's sums with a tile's rows so far: per group, row 4g + j's four partial
/// sums in lanes 4j..4j + 4 of `f[g]`; row t's `Σ dmin · min · activation sum` in `m[t]`.
#[derive(Clone, Copy, Default)]
struct Acc {
    f: [[f32; 16]; GROUPS],
    m: [f32; 16],
}

impl Acc {
    /// Each row's ((l0 + l1) + (l2 + l3)) - m, in registers: pairs of groups are shuffled into
    /// one register per step ([`pair`]), so that 128-bit lane j of `whole` holds rows j,
    /// 4 + j, 8 + j and 12 + j, a 4 x 4 transpose of the row order that `rows` undoes (the same
    /// permutation: a transpose is its own inverse).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn sums(&self) -> [f32; TILE_ROWS] {
        let rows = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
        let f = |g: usize| load_f32x16(&self.f[g]);
        let whole = pair(pair(f(0), f(1)), pair(f(2), f(3)));
        let mut sums = [0f32; TILE_ROWS];
        store_f32x16(&mut sums, _mm512_sub_ps(_mm512_permutexvar_ps(rows, whole), load_f32x16(&self.m)));
        sums
    }
}

/// The tile's rows dotted with `R` activation rows over the blocks of `slab`, added to their
/// [`Acc`]s.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
fn pass<const N: usize, const S: usize, const R: usize>(
    tile: &Tile,
    blocks: usize,
    slab: Range<usize>,
    acts: &[Q8Row; R],
    asums: &[&[f32]],
    accs: &mut [Acc],
) {
    let chunks = blocks * N / 8;
    // Loops rather than `std::array::from_fn`: its closures, compiled with this function's
    // target features, are not inlined into it (a call per chunk was 4 % of a small model's
    // prefill).
    let mut words: [&[[i16; 32]]; GROUPS] = [&[]; GROUPS];
    for (g, w) in words.iter_mut().enumerate() {
        *w = tile.w[g * chunks * 32..(g + 1) * chunks * 32].as_chunks::<32>().0;
    }
    let mut aq: [&[[i16; 8]]; R] = [&[]; R];
    for (q, a) in aq.iter_mut().zip(acts) {
        *q = a.q.as_chunks::<8>().0;
    }
    let dvec: &[[f32; 16]] = tile.d.as_chunks::<16>().0;
    let mvec: &[[f32; 16]] = tile.mins.as_chunks::<16>().0;
    let mut facc = [[_mm512_setzero_ps(); R]; GROUPS];
    let mut macc = [_mm512_setzero_ps(); R];
    for (r, acc) in accs.iter().enumerate().take(R) {
        for (facc, f) in facc.iter_mut().zip(&acc.f) {
            facc[r] = load_f32x16(f);
        }
        macc[r] = load_f32x16(&acc.m);
    }
    for b in slab {
        let mut scale = [_mm512_setzero_ps(); R];
        for (s, a) in scale.iter_mut().zip(acts) {
            *s = _mm512_set1_ps(a.d[b]);
        }
        for f in (0..N).step_by(tile.flush) {
            let mut iacc = [[_mm512_setzero_si512(); R]; GROUPS];
            for c in (b * N + f) / 8..(b * N + f + tile.flush) / 8 {
                let mut w = [_mm512_setzero_si512(); GROUPS];
                for (w, words) in w.iter_mut().zip(&words) {
                    *w = load_i16x32(&words[c]);
                }
                for r in 0..R {
                    let a = _mm512_broadcast_i32x4(load_i16x8(&aq[r][c]));
                    for g in 0..GROUPS {
                        iacc[g][r] = _mm512_dpwssd_epi32(iacc[g][r], w[g], a);
                    }
                }
            }
            for g in 0..GROUPS {
                let d = load_f32x16(&dvec[g * blocks + b]);
                for r in 0..R {
                    let dd = _mm512_mul_ps(d, scale[r]);
                    facc[g][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc[g][r]), dd, facc[g][r]);
                }
            }
        }
        if tile.has_mins {
            for j in 0..S {
                let m = load_f32x16(&mvec[b * S + j]);
                for r in 0..R {
                    macc[r] = _mm512_fmadd_ps(m, _mm512_set1_ps(asums[r][b * S + j]), macc[r]);
                }
            }
        }
    }
    for (r, acc) in accs.iter_mut().enumerate().take(R) {
        for (f, facc) in acc.f.iter_mut().zip(&facc) {
            store_f32x16(f, facc[r]);
        }
        store_f32x16(&mut acc.m, macc[r]);
    }
}

/// Per 128-bit lane, `[a0 + a1, a2 + a3, b0 + b1, b2 + b3]`.
#[inline]
#[target_feature(enable = "avx512f")]
fn pair(a: __m512, b: __m512) -> __m512 {
    _mm512_add_ps(_mm512_shuffle_ps::<0x88>(a, b), _mm512_shuffle_ps::<0xDD>(a, b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slabs_fill_two_thirds_of_the_level_one_cache_at_most() {
        let values = slab_values();
        assert!(values.is_power_of_two() && values >= 256, "{values}");
        let room = l1_data_bytes().unwrap_or(32 * 1024) * 2 / 3;
        assert!(32 * values <= room.max(32 * 256), "{values} values for {room} bytes");
        assert!(32 * values * 2 > room, "{values} values leave half of {room} bytes unused");
    }
}
