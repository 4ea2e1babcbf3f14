//! The fast CPU attention (`Op::Attention`): an online softmax over blocks of keys.
//!
//! Each query's numbers are formed the same way whichever work item holds it, so that a batch
//! of sequences, a prompt and a decode step agree bit for bit: its kv rows are cut, from its
//! sequence's first row, into chunks of [`CHUNK_KEYS`]; each chunk is an online softmax over
//! blocks of [`ATTN_KEYS`] keys (a block's scores first, then one rescale of the running
//! sums), started afresh; the chunks' partial sums are then merged in order ([`Partial::merge`]).
//!
//! Work items: a prompt's tokens come in blocks of about [`ATTN_QUERIES`] queries per kv head,
//! an item per (block, kv head), which passes over the chunks in turn, its queries sharing each
//! block of K/V rows. A block of few queries (a decode step's token) gives instead an item per
//! chunk, over every kv head, and the chunks' partials are merged once every item is done: a
//! decode step's attention is spread over the threads by its keys, and each item reads whole
//! cache rows (every kv head of a token, one after another), which the hardware prefetchers
//! follow. One kv head's rows lie a cache row apart (4 KiB in the 2B shape), where they do
//! not: each read waited on memory (2B decode 1,024 tokens deep on two threads, alternating
//! runs: 13.3-13.6 tokens/s by kv heads, 17.6-17.9 by chunks of 128 keys; software prefetches
//! of the next rows stalled on the full miss queue and gained nothing over these).

use super::fast::{exp_nonpositive, out_is_matrix};
use super::pool::par_items;
use super::reference;
use super::tensor::{In, Out};
use super::KernelError;
use crate::quant::{self, DType};
use std::ops::Range;
use std::sync::{Mutex, PoisonError};

/// Queries per work item of a prompt's attention, about (whole tokens: every head of a kv
/// head's group): they share each block of K/V rows while it is in L1, and the block's keys are
/// laid out transposed once for all of them. A 2B image encode (448 x 448) took 4.20 s with 16 a
/// work item (of one head), 3.91 with 64, 3.82 with 128; small-model prefill was level.
const ATTN_QUERIES: usize = 128;

/// K/V rows per block: a query's per-block work (softmax, rescale) over more keys. 64 against
/// 32: the 2B shape's pp512 attention 501-530 -> 471-477 ms, a 448 x 448 encode's 1,197-1,254
/// -> 1,113 ms, though at head_dim 128 a block's K and V (64 KiB) no longer fit L1.
pub(super) const ATTN_KEYS: usize = 64;

/// K/V rows per chunk (a whole number of blocks): a decode step's work items. Merging a chunk
/// costs a query two multiply-adds per value, against two per key and value within it. 128
/// against 256 (2B decode on two threads, alternating runs): 256 tokens deep 21.5-22.4 against
/// 18.3-20.4 tokens/s (two items, one a thread, where 256 made one), 1,024 deep 17.0-17.7
/// against 16.5; 64 was level with 128.
const CHUNK_KEYS: usize = 2 * ATTN_KEYS;

/// Queries per kv head up to which a block of tokens is split by chunks (a decode step's
/// token: its kv head's group); more share each K/V row read by one kv head's item.
const SPLIT_MAX_QUERIES: usize = 8;

/// Queries whose block sums the AVX-512 attention forms together.
pub(super) const WIDE_QUERIES: usize = 4;

/// Causal attention (see the module's comment): q [d, n_head, n_q], k and v [d, n_kv_head,
/// n_kv] (f32 or f16), each query's kv rows from `slots` and `segment` as the reference takes
/// them.
pub(super) fn attention(
    q: &In,
    k: &In,
    v: &In,
    slots: Option<&In>,
    (scale, segment): (f32, usize),
    out: &mut Out,
    threads: usize,
) -> Option<Result<(), KernelError>> {
    let (d, n_head, n_q, n_kv_head) = (q.ne[0], q.ne[1], q.ne[2], k.ne[1]);
    if !out_is_matrix(out) || k.dtype != DType::F32 && k.dtype != DType::F16 || d == 0 || n_kv_head == 0 {
        return None;
    }
    if k.ne[0] != d || v.ne[0] != d {
        return None;
    }
    let group = n_head / n_kv_head;
    let kv = match (0..n_q).map(|t| reference::kv_range(slots, t, k.ne[2], segment)).collect::<Result<Vec<_>, _>>() {
        Ok(kv) => kv,
        Err(e) => return Some(Err(e)),
    };
    // Blocks of consecutive tokens of one sequence (one first kv row).
    let tokens_per_item = ATTN_QUERIES.div_ceil(group.max(1));
    let mut blocks: Vec<Range<usize>> = Vec::new();
    for (t, rows) in kv.iter().enumerate() {
        match blocks.last_mut() {
            Some(b) if b.len() < tokens_per_item && kv[b.start].start == rows.start => b.end = t + 1,
            _ => blocks.push(t..t + 1),
        }
    }
    let task =
        |tokens: &Range<usize>, kv_heads: Range<usize>| Task { tokens: tokens.clone(), kv_heads, kv: &kv, scale };
    // The last tokens' blocks first: under a causal mask they see the most rows, and a
    // thread left with one of them at the end would keep the others waiting. Blocks split by
    // chunks keep the range of their items, to merge.
    let mut items = Vec::new();
    let mut split = Vec::new();
    for b in blocks.iter().rev() {
        if b.len() * group <= SPLIT_MAX_QUERIES {
            let first = items.len();
            items.extend((0..task(b, 0..n_kv_head).chunks()).map(|chunk| Work::Chunk { tokens: b.clone(), chunk }));
            split.push((b, first..items.len()));
        } else {
            items.extend((0..n_kv_head).map(|kv_head| Work::Head { tokens: b.clone(), kv_head }));
        }
    }
    let heads = Heads { q, k, v, group };
    let data = Mutex::new(&mut out.data[out.offset / 4..][..n_q * n_head * d]);
    let write = |task: &Task, o: &[f32]| {
        let mut data = data.lock().unwrap_or_else(PoisonError::into_inner);
        for ((t, h), row) in task.queries(group).zip(o.chunks_exact(d)) {
            data[(t * n_head + h) * d..][..d].copy_from_slice(row);
        }
    };
    let partials: Vec<Mutex<Option<Partial>>> = items.iter().map(|_| Mutex::new(None)).collect();
    // No more threads than items: one item (a decode step's first 128 tokens) runs on the
    // caller without waking the pool.
    par_items(threads.min(items.len()), items.iter().zip(&partials), |(work, partial)| match work {
        Work::Head { tokens, kv_head } => {
            let task = task(tokens, *kv_head..kv_head + 1);
            let mut sum = Partial::empty(task.n_queries(group), d);
            for chunk in 0..task.chunks() {
                sum.merge(&attend(&heads, &task, chunk));
            }
            write(&task, &sum.normalized());
        }
        Work::Chunk { tokens, chunk } => {
            let part = attend(&heads, &task(tokens, 0..n_kv_head), *chunk);
            *partial.lock().unwrap_or_else(PoisonError::into_inner) = Some(part);
        }
    });
    let partials: Vec<Option<Partial>> =
        partials.into_iter().map(|p| p.into_inner().unwrap_or_else(PoisonError::into_inner)).collect();
    for (tokens, chunks) in split {
        let task = task(tokens, 0..n_kv_head);
        let mut sum = Partial::empty(task.n_queries(group), d);
        for part in &partials[chunks] {
            match part {
                Some(part) => sum.merge(part),
                // Every item ran: par_items returns when none is left.
                None => {
                    return Some(Err(KernelError::Fault(format!(
                        "attention: a chunk of tokens {tokens:?} did not run"
                    ))))
                }
            }
        }
        write(&task, &sum.normalized());
    }
    Some(Ok(()))
}

/// A work item of [`attention`]: every chunk of the tokens' rows for one kv head, or one chunk
/// for every kv head.
enum Work {
    Head { tokens: Range<usize>, kv_head: usize },
    Chunk { tokens: Range<usize>, chunk: usize },
}

/// The query rows and the K and V caches; `group` query heads per kv head.
#[derive(Clone, Copy)]
struct Heads<'a, 'b> {
    q: &'a In<'b>,
    k: &'a In<'b>,
    v: &'a In<'b>,
    group: usize,
}

/// The queries of `tokens` (whose kv rows, `kv[token]`, start alike) for the heads of kv heads
/// `kv_heads`.
struct Task<'a> {
    tokens: Range<usize>,
    kv_heads: Range<usize>,
    kv: &'a [Range<usize>],
    scale: f32,
}

impl Task<'_> {
    /// (token, head) of each query: kv head by kv head, token by token, the heads of its group.
    fn queries(&self, group: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.kv_heads.clone().flat_map(move |kh| {
            self.tokens.clone().flat_map(move |t| (kh * group..(kh + 1) * group).map(move |h| (t, h)))
        })
    }

    fn n_queries(&self, group: usize) -> usize {
        self.kv_heads.len() * self.tokens.len() * group
    }

    /// The first kv row of the tokens and the end of the last one's rows.
    fn rows(&self) -> Range<usize> {
        let start = self.kv.get(self.tokens.start).map_or(0, |r| r.start);
        start..self.tokens.clone().map(|t| self.kv[t].end).max().unwrap_or(start).max(start)
    }

    fn chunks(&self) -> usize {
        self.rows().len().div_ceil(CHUNK_KEYS)
    }
}

/// The softmax of a query over some keys: the largest scaled score and the sum of the weights
/// `e^(s - max)`.
#[derive(Clone, Copy)]
struct Softmax {
    max: f32,
    total: f32,
}

/// The queries' softmaxes over some keys and their values weighed by them (a row of head_dim
/// per query, not yet divided by the total).
struct Partial {
    softmax: Vec<Softmax>,
    o: Vec<f32>,
    d: usize,
}

impl Partial {
    /// Over no keys.
    fn empty(queries: usize, d: usize) -> Partial {
        Partial { softmax: vec![Softmax { max: f32::NEG_INFINITY, total: 0.0 }; queries], o: vec![0.0; queries * d], d }
    }

    /// This over the keys of `part` too: both rescaled to the larger maximum and added. A query
    /// that saw no keys there is left as it is; into an empty one, `part` is copied exactly
    /// (scaled by e^0 = 1 and added to zeros).
    fn merge(&mut self, part: &Partial) {
        let d = self.d;
        for ((run, o_run), (p, o)) in
            self.softmax.iter_mut().zip(self.o.chunks_exact_mut(d)).zip(part.softmax.iter().zip(part.o.chunks_exact(d)))
        {
            if p.total == 0.0 {
                continue;
            }
            let m = run.max.max(p.max);
            let (a, b) = (exp_nonpositive(run.max - m), exp_nonpositive(p.max - m));
            run.max = m;
            run.total = run.total * a + p.total * b;
            for (r, &x) in o_run.iter_mut().zip(o) {
                *r = *r * a + x * b;
            }
        }
    }

    /// The attention's output rows: the weighted values divided by their totals.
    fn normalized(mut self) -> Vec<f32> {
        for (o, s) in self.o.chunks_exact_mut(self.d).zip(&self.softmax) {
            let inv = 1.0 / s.total;
            o.iter_mut().for_each(|o| *o *= inv);
        }
        self.o
    }
}

/// The task's queries over chunk `chunk` of their kv rows, in the fastest form this CPU has.
fn attend(heads: &Heads, task: &Task, chunk: usize) -> Partial {
    #[cfg(target_arch = "x86_64")]
    match quant::Simd::detect() {
        // SAFETY: Avx512 has AVX-512F, AVX2 and FMA (`Simd::detect` checked this CPU).
        quant::Simd::Avx512 if heads.q.ne[0].is_multiple_of(16) => return unsafe { attend_512(heads, task, chunk) },
        // SAFETY: every level above Scalar has AVX2 and FMA (`Simd::detect` checked this CPU).
        quant::Simd::Avx2 | quant::Simd::Avx512 => return unsafe { attend_avx2(heads, task, chunk) },
        quant::Simd::Scalar => {}
    }
    attend_body::<false, false>(heads, task, chunk)
}

/// [`attend_body`] compiled for AVX2: the same operations in the same order, in wider
/// registers, multiply-adds fused.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn attend_avx2(heads: &Heads, task: &Task, chunk: usize) -> Partial {
    attend_body::<true, false>(heads, task, chunk)
}

/// [`attend_body`] with the block sums of [`WIDE_QUERIES`] queries at a time in AVX-512
/// registers (x86_attend.rs; head_dim a multiple of 16): the AVX2 path's numbers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn attend_512(heads: &Heads, task: &Task, chunk: usize) -> Partial {
    attend_body::<true, true>(heads, task, chunk)
}

/// `a * b + c`, fused (one rounding) where `FMA`: the instruction where the caller is compiled
/// with it, a slow libm call elsewhere, so the portable path multiplies and adds.
#[inline(always)]
fn mul_add<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// The softmax of each of the task's queries over chunk `chunk` of its kv rows, in blocks of
/// [`ATTN_KEYS`], each block's scores for a query first, then one rescale of its running sums
/// (an online softmax by blocks). Each block's K/V rows are read key by key, every kv head of
/// the task's for each. `WIDE` (AVX-512, head_dim a multiple of 16): the scores and weighted
/// values of [`WIDE_QUERIES`] queries at a time through x86_attend.rs, the same sums as the
/// loops here.
#[inline(always)]
fn attend_body<const FMA: bool, const WIDE: bool>(heads: &Heads, task: &Task, chunk: usize) -> Partial {
    let Heads { q, k, v, group } = *heads;
    let d = q.ne[0];
    let (kv, scale) = (task.kv, task.scale);
    let mut buf = Vec::new();
    let queries: Vec<(usize, usize)> = task.queries(group).collect();
    let mut qs = Vec::with_capacity(queries.len() * d);
    for &(t, h) in &queries {
        qs.extend_from_slice(q.row_f32(h, t, 0, &mut buf));
    }
    let mut part = Partial::empty(queries.len(), d);
    let rows = task.rows();
    let first = rows.start + chunk * CHUNK_KEYS;
    let end = (first + CHUNK_KEYS).min(rows.end);
    let per_head = task.tokens.len() * group;
    // Per kv head, a block's keys and values (rows of d), and its keys transposed (value i of
    // key j at i * ATTN_KEYS + j), so that a query's scores for the whole block are one vector
    // of sums: every multiply-add goes to eight or sixteen keys at once, with no sum across
    // lanes per key.
    let n_heads = task.kv_heads.len();
    // Taken and put back, not borrowed in a closure: closures are not compiled with the
    // caller's target features.
    let mut scratch = SCRATCH.take();
    let Scratch { keys, values, keys_t } = &mut scratch;
    keys.resize(n_heads * ATTN_KEYS * d, 0.0);
    values.resize(n_heads * ATTN_KEYS * d, 0.0);
    keys_t.resize(d, [0.0; ATTN_KEYS]);
    for j0 in (first..end).step_by(ATTN_KEYS) {
        let j1 = (j0 + ATTN_KEYS).min(end);
        for (jj, j) in (j0..j1).enumerate() {
            for (e, kh) in task.kv_heads.clone().enumerate() {
                let at = (e * ATTN_KEYS + jj) * d;
                keys[at..at + d].copy_from_slice(&k.row_f32(kh, j, 0, &mut buf)[..d]);
                values[at..at + d].copy_from_slice(&v.row_f32(kh, j, 0, &mut buf)[..d]);
            }
        }
        for e in 0..n_heads {
            let head_keys = &keys[e * ATTN_KEYS * d..][..(j1 - j0) * d];
            let head_values = &values[e * ATTN_KEYS * d..][..(j1 - j0) * d];
            if WIDE {
                // One value at a time, AVX-512 code stores a key's values with scatters, which
                // took most of a decode step's attention.
                #[cfg(target_arch = "x86_64")]
                // SAFETY: WIDE only from attend_512, which runs with AVX-512F.
                unsafe {
                    super::x86_attend::transpose_keys(head_keys, d, keys_t)
                };
            } else {
                for (jj, key) in head_keys.chunks_exact(d).enumerate() {
                    for (kt, &x) in keys_t.iter_mut().zip(key) {
                        kt[jj] = x;
                    }
                }
            }
            let head = e * per_head..(e + 1) * per_head;
            let (qs, out) = (&qs[head.start * d..head.end * d], &mut part.o[head.start * d..head.end * d]);
            let (queries, softmax) = (&queries[head.clone()], &mut part.softmax[head]);
            let mut i = 0;
            while i < queries.len() {
                let wide = if WIDE && queries.len() - i >= WIDE_QUERIES { WIDE_QUERIES } else { 1 };
                // Keys of the block each query sees (past them: sums not read).
                let mut n = [0; WIDE_QUERIES];
                for (n, &(t, _)) in n.iter_mut().zip(&queries[i..i + wide]) {
                    *n = kv[t].end.min(j1).saturating_sub(j0);
                }
                if n == [0; WIDE_QUERIES] {
                    i += wide;
                    continue;
                }
                let (qg, og) = (&qs[i * d..(i + wide) * d], &mut out[i * d..(i + wide) * d]);
                let mut scores = [[0f32; ATTN_KEYS]; WIDE_QUERIES];
                if wide == WIDE_QUERIES {
                    #[cfg(target_arch = "x86_64")]
                    {
                        let q = [&qg[..d], &qg[d..2 * d], &qg[2 * d..3 * d], &qg[3 * d..]];
                        // SAFETY: WIDE only from attend_512, which runs with AVX-512F.
                        unsafe { super::x86_attend::scores(q, keys_t, &mut scores) };
                    }
                } else {
                    // In a local array, which the compiler keeps in registers (through the
                    // array in `scores`, each step waited on the last one's stores).
                    let mut acc = [0f32; ATTN_KEYS];
                    for (&q, kt) in qg.iter().zip(keys_t.iter()) {
                        for j in 0..ATTN_KEYS {
                            acc[j] = mul_add::<FMA>(q, kt[j], acc[j]);
                        }
                    }
                    scores[0] = acc;
                }
                for (g, (scores, oi)) in scores.iter_mut().zip(og.chunks_exact_mut(d)).enumerate() {
                    if n[g] > 0 {
                        softmax_block(scores, n[g], scale, &mut softmax[i + g], oi);
                    }
                }
                if wide == WIDE_QUERIES {
                    #[cfg(target_arch = "x86_64")]
                    {
                        let (o01, o23) = og.split_at_mut(2 * d);
                        let (o0, o1) = o01.split_at_mut(d);
                        let (o2, o3) = o23.split_at_mut(d);
                        // SAFETY: WIDE only from attend_512, which runs with AVX-512F.
                        unsafe { super::x86_attend::values(&scores, n, head_values, [o0, o1, o2, o3]) };
                    }
                } else {
                    weighted_values::<FMA>(&scores[0][..n[0]], head_values, og);
                }
                i += wide;
            }
        }
    }
    SCRATCH.set(scratch);
    part
}

/// A thread's buffers for [`attend_body`], kept from one call to the next: a decode step's
/// items (every kv head's keys and values of a block, 512 KiB in the 2B shape) would
/// otherwise map, zero and unmap fresh pages each.
#[derive(Default)]
struct Scratch {
    keys: Vec<f32>,
    values: Vec<f32>,
    keys_t: Vec<[f32; ATTN_KEYS]>,
}

thread_local! {
    static SCRATCH: std::cell::Cell<Scratch> = std::cell::Cell::default();
}

/// One query's block of scores made its softmax weights (the first `n`; the rest 0): scaled,
/// the running maximum raised to theirs (the running total and output `o` rescaled to it),
/// each weighed as `e^(s - max)`, their sum added to the total. Over the whole block in
/// fixed-size loops the compiler vectorizes (the maximum and the sum of a block's values one
/// at a time were chains of dependent operations as long as a block's scores took), the sum
/// pairwise.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // lanes of fixed-size arrays, as the vector code takes them
fn softmax_block(scores: &mut [f32; ATTN_KEYS], n: usize, scale: f32, run: &mut Softmax, o: &mut [f32]) {
    let mut masked = [f32::NEG_INFINITY; ATTN_KEYS];
    for j in 0..ATTN_KEYS {
        scores[j] *= scale;
        if j < n {
            masked[j] = scores[j];
        }
    }
    let m = halve(masked, f32::max).max(run.max);
    if m > run.max {
        let correction = (run.max - m).exp();
        run.total *= correction;
        for o in o.iter_mut() {
            *o *= correction;
        }
        run.max = m;
    }
    for j in 0..ATTN_KEYS {
        scores[j] = if j < n { exp_nonpositive(scores[j] - m) } else { 0.0 };
    }
    run.total += halve(*scores, |a, b| a + b);
}

/// `v` reduced by `f` pairwise: lane j with lane j + half, halves shrinking.
#[inline(always)]
fn halve(mut v: [f32; ATTN_KEYS], f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut half = ATTN_KEYS / 2;
    while half > 0 {
        for j in 0..half {
            v[j] = f(v[j], v[j + half]);
        }
        half /= 2;
    }
    v[0]
}

/// `o += Σ_j p[j] · values[j]` (rows of `o.len()` values), j in order: 64 values of `o` at a
/// time held in registers over the block's keys (one key at a time, each key's additions
/// waited on the last one's stores; 32 at a time, on the last one's multiply-adds).
#[inline(always)]
fn weighted_values<const FMA: bool>(p: &[f32], values: &[f32], o: &mut [f32]) {
    const W: usize = 64;
    let d = o.len();
    let (o_chunks, o_rest) = o.as_chunks_mut::<W>();
    for (c, oc) in o_chunks.iter_mut().enumerate() {
        let mut acc = *oc;
        for (&p, vrow) in p.iter().zip(values.chunks_exact(d)) {
            let Some(vc) = vrow[W * c..].first_chunk::<W>() else { continue };
            for j in 0..W {
                acc[j] = mul_add::<FMA>(p, vc[j], acc[j]);
            }
        }
        *oc = acc;
    }
    let done = d - o_rest.len();
    for (&p, vrow) in p.iter().zip(values.chunks_exact(d)) {
        for (o, &vv) in o_rest.iter_mut().zip(&vrow[done..]) {
            *o = mul_add::<FMA>(p, vv, *o);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AVX-512 attention's numbers are the AVX2 path's, bit for bit: causal and ragged
    /// blocks, queries seeing no keys of a block, groups of four and the queries left over.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx512_attention_equals_avx2() {
        if quant::Simd::detect() != quant::Simd::Avx512 {
            eprintln!("no AVX-512 on this CPU: the AVX-512 attention is not run here");
            return;
        }
        let mut rng = super::super::tests::Rng(7);
        for (d, group, n_q, n_kv) in
            [(16, 2, 7, 40), (48, 1, 9, 70), (64, 1, 16, 100), (80, 3, 5, 33), (128, 2, 11, 65), (32, 2, 6, 300)]
        {
            let (q, k, v) = (rng.vec(d * group * n_q), rng.vec(d * n_kv), rng.vec(d * n_kv));
            let f32_in = super::super::tests::f32_in;
            let (qi, ki, vi) =
                (f32_in(&q, [d, group, n_q, 1]), f32_in(&k, [d, 1, n_kv, 1]), f32_in(&v, [d, 1, n_kv, 1]));
            // Token t sees the first n_kv - n_q + t + 1 rows (the last token all of them).
            let kv: Vec<Range<usize>> = (0..n_q).map(|t| 0..n_kv - n_q + t + 1).collect();
            let heads = Heads { q: &qi, k: &ki, v: &vi, group };
            let task = Task { tokens: 0..n_q, kv_heads: 0..1, kv: &kv, scale: 0.2 };
            let (mut wide, mut narrow) = (Partial::empty(n_q * group, d), Partial::empty(n_q * group, d));
            for chunk in 0..task.chunks() {
                // SAFETY: the CPU has AVX-512 (checked above), so AVX2 and FMA too.
                unsafe {
                    wide.merge(&attend_512(&heads, &task, chunk));
                    narrow.merge(&attend_avx2(&heads, &task, chunk));
                }
            }
            let (wide, narrow) = (wide.normalized(), narrow.normalized());
            assert_eq!(wide, narrow, "head_dim {d}");
            assert!(wide.iter().all(|x| x.is_finite() && *x != 0.0));
        }
    }
}
