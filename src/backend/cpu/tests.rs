//! Fast kernels against reference kernels on random data and odd shapes (NMSE, as
//! llama.cpp's test-backend-ops).

use super::tensor::{Data, In, Out};
use super::{execute, Kernels};
use crate::graph::{Op, RopeKind};
use crate::quant::{quantize_row, DType};

/// Uniform values in [-1, 1) (also for fast.rs's unit tests).
pub(super) struct Rng(pub(super) u64);

impl Rng {
    fn f32(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    pub(super) fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f32()).collect()
    }
}

fn strides(dtype: DType, ne: [usize; 4]) -> [usize; 4] {
    crate::graph::contiguous_strides(dtype, ne)
}

pub(super) fn f32_in(data: &[f32], ne: [usize; 4]) -> In<'_> {
    In { data: Data::F32(data), dtype: DType::F32, offset: 0, ne, nb: strides(DType::F32, ne) }
}

/// A vector of i32 (slots, row ids).
fn i32_in(data: &[i32]) -> In<'_> {
    let n = data.len();
    In { data: Data::I32(data), dtype: DType::I32, offset: 0, ne: [n, 1, 1, 1], nb: [4, 4 * n, 4 * n, 4 * n] }
}

fn nmse(a: &[f32], b: &[f32]) -> f64 {
    let err: f64 = a.iter().zip(b).map(|(x, y)| f64::from(x - y).powi(2)).sum();
    let norm: f64 = b.iter().map(|y| f64::from(*y).powi(2)).sum();
    err / norm.max(1e-30)
}

/// Runs `op` with both kernel sets and returns the NMSE between them.
fn compare(op: &Op, ins: &[In], out_ne: [usize; 4]) -> f64 {
    let n: usize = out_ne.iter().product();
    let mut results = Vec::new();
    for kernels in [Kernels::Reference, Kernels::Fast] {
        let mut buf = vec![0f32; n];
        let mut out = Out { data: &mut buf, offset: 0, ne: out_ne, nb: strides(DType::F32, out_ne) };
        execute(op, ins, &mut out, kernels, 3).expect("runs");
        results.push(buf);
    }
    assert!(results[1].iter().all(|x| x.is_finite()), "{} gave non-finite values", op.name());
    nmse(&results[1], &results[0])
}

#[test]
fn matmul_fast_matches_reference_for_every_weight_dtype_and_odd_shapes() {
    let mut rng = Rng(1);
    for dtype in [DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4K, DType::Q5K, DType::Q6K] {
        // Small products, and ones large enough for several threads and row ranges.
        for &(k, n, m) in &[(256, 7, 1), (512, 33, 5), (256, 1, 3), (256, 300, 7), (512, 1000, 1), (256, 64, 130)] {
            let w = rng.vec(k * n);
            let row_bytes = dtype.row_bytes(k as u64).unwrap() as usize;
            let mut wq = vec![0u8; row_bytes * n];
            for (src, dst) in w.chunks(k).zip(wq.chunks_mut(row_bytes)) {
                quantize_row(dtype, src, dst).unwrap();
            }
            let x = rng.vec(k * m);
            let wne = [k, n, 1, 1];
            let win = In { data: Data::Bytes(&wq), dtype, offset: 0, ne: wne, nb: strides(dtype, wne) };
            let e = compare(&Op::MatMul, &[win, f32_in(&x, [k, m, 1, 1])], [n, m, 1, 1]);
            assert!(e < 1e-7, "{dtype} k={k} n={n} m={m}: nmse {e:.2e}");
            // Activation rows 8 values apart (a view into wider rows): gathered, not borrowed.
            let padded = rng.vec((k + 8) * m);
            let xin = In { nb: [4, 4 * (k + 8), 4 * (k + 8) * m, 4 * (k + 8) * m], ..f32_in(&padded, [k, m, 1, 1]) };
            assert!(xin.f32_rows().is_none() || m == 1);
            let e = compare(&Op::MatMul, &[win, xin], [n, m, 1, 1]);
            assert!(e < 1e-7, "{dtype} k={k} n={n} m={m}, padded rows: nmse {e:.2e}");
        }
    }
}

#[test]
fn f32_rows_borrows_only_rows_back_to_back() {
    let data: Vec<f32> = (0..48).map(|i| i as f32).collect();
    let rows = f32_in(&data, [4, 3, 2, 1]);
    assert_eq!(rows.f32_rows(), Some(&data[..24]));
    // An axis of length 1 may have any stride; an offset moves the start.
    let one = In { offset: 8, ne: [4, 1, 3, 1], nb: [4, 999, 16, 48], ..rows };
    assert_eq!(one.f32_rows(), Some(&data[2..14]));
    // Padded rows, strided values, running past the data, and non-f32 data are not rows.
    assert!(In { nb: [4, 20, 60, 120], ..rows }.f32_rows().is_none());
    assert!(In { nb: [8, 32, 96, 192], ..rows }.f32_rows().is_none());
    assert!(In { offset: 4 * 30, ..rows }.f32_rows().is_none());
    let ints = [0i32; 24];
    assert!(In { data: Data::I32(&ints), ..rows }.f32_rows().is_none());
}

#[test]
fn attention_and_norm_fast_match_reference() {
    let mut rng = Rng(2);
    // The last: several blocks of queries (16 tokens) and of K/V rows (32), both ragged.
    for &(d, heads, kv_heads, n_q, n_kv) in &[(16, 4, 2, 5, 9), (64, 2, 2, 1, 30), (8, 6, 3, 7, 7), (32, 4, 2, 37, 100)]
    {
        let q = rng.vec(d * heads * n_q);
        let k = rng.vec(d * kv_heads * n_kv);
        let v = rng.vec(d * kv_heads * n_kv);
        let slots: Vec<i32> = (0..n_q).map(|i| (n_kv - n_q + i) as i32).collect();
        let qi = f32_in(&q, [d, heads, n_q, 1]);
        let (ki, vi) = (f32_in(&k, [d, kv_heads, n_kv, 1]), f32_in(&v, [d, kv_heads, n_kv, 1]));
        let si = i32_in(&slots);
        let op = Op::Attention { scale: 0.3, segment: n_kv };
        let causal = compare(&op, &[qi, ki, vi, si], [d, heads, n_q, 1]);
        let full = compare(&op, &[qi, ki, vi], [d, heads, n_q, 1]);
        assert!(causal < 1e-10 && full < 1e-10, "attention d={d}: {causal:.2e} {full:.2e}");

        let w = rng.vec(d);
        let e = compare(&Op::RmsNorm { eps: 1e-6 }, &[qi, f32_in(&w, [d, 1, 1, 1])], [d, heads, n_q, 1]);
        assert!(e < 1e-10, "rms_norm d={d}: {e:.2e}");
    }
}

/// Runs `op` with both kernel sets into an output of `out_ne` whose rows lie `pitch` values
/// apart (NaN between them), and returns both buffers.
fn both_into(op: &Op, ins: &[In], out_ne: [usize; 4], pitch: usize) -> [Vec<f32>; 2] {
    let rows = out_ne[1] * out_ne[2] * out_ne[3];
    [Kernels::Reference, Kernels::Fast].map(|kernels| {
        let mut buf = vec![f32::NAN; pitch * rows];
        let nb = [4, 4 * pitch, 4 * pitch * out_ne[1], 4 * pitch * out_ne[1] * out_ne[2]];
        let mut out = Out { data: &mut buf, offset: 0, ne: out_ne, nb };
        execute(op, ins, &mut out, kernels, 3).expect("runs");
        buf
    })
}

#[test]
fn row_ops_fast_equal_reference_on_views_and_strided_outputs() {
    let mut rng = Rng(9);
    let (n, rows) = (40, 37);
    let x = rng.vec(n * rows * 2);
    let (w, b) = (rng.vec(n), rng.vec(n));
    // Rows of x as they are, and every other value of wider rows (a strided view).
    let plain = f32_in(&x[..n * rows], [n, rows, 1, 1]);
    let strided = In { nb: [8, 8 * n, 8 * n * rows, 8 * n * rows], ..f32_in(&x, [n, rows, 1, 1]) };
    // Weights as a model file holds them: bytes.
    let bytes = |v: &[f32]| v.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>();
    let (wb, bb) = (bytes(&w), bytes(&b));
    let weight = |data| In { data: Data::Bytes(data), dtype: DType::F32, offset: 0, ne: [n, 1, 1, 1], nb: [4; 4] };
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for xi in [plain, strided] {
        let ops = [
            (Op::LayerNorm { eps: 1e-6 }, vec![xi, weight(&wb), weight(&bb)]),
            (Op::Gelu(crate::graph::Gelu::Tanh), vec![xi]),
            (Op::Gelu(crate::graph::Gelu::Erf), vec![xi]),
            (Op::Cont, vec![xi]),
            (Op::Add, vec![xi, f32_in(&b, [n, 1, 1, 1])]),
            (Op::Mul, vec![xi, f32_in(&x[..n * rows], [n, rows, 1, 1])]),
            // A bias from the model file: bytes.
            (Op::Add, vec![xi, weight(&bb)]),
        ];
        for (op, ins) in ops {
            for pitch in [n, n + 8] {
                let [reference, fast] = both_into(&op, &ins, [n, rows, 1, 1], pitch);
                assert_eq!(bits(&fast), bits(&reference), "{} pitch {pitch}", op.name());
                assert!(fast.chunks(pitch).all(|r| r[..n].iter().all(|v| v.is_finite())), "{}", op.name());
            }
        }
        // The fast SwiGLU's silu and RMS norm's f32 sums are within rounding of the reference.
        let near = [
            (Op::SwiGlu, vec![xi, f32_in(&x[..n * rows], [n, rows, 1, 1])]),
            (Op::RmsNorm { eps: 1e-6 }, vec![xi, weight(&wb)]),
        ];
        for (op, ins) in near {
            for pitch in [n, n + 8] {
                let [reference, fast] = both_into(&op, &ins, [n, rows, 1, 1], pitch);
                let rows_of = |v: &[f32]| v.chunks(pitch).flat_map(|r| r[..n].to_vec()).collect::<Vec<_>>();
                let e = nmse(&rows_of(&fast), &rows_of(&reference));
                assert!(e < 1e-10, "{} pitch {pitch}: {e:.2e}", op.name());
            }
        }
    }
}

#[test]
fn set_rows_fast_equals_reference_and_refuses_bad_slots() {
    let mut rng = Rng(11);
    let (n, rows, slots) = (24, 5, 9);
    let src = rng.vec(n * rows);
    for ids in [vec![3, 0, 8, 5, 1], vec![3, 0, 9, 5, 1]] {
        let ii = In { data: Data::I32(&ids), dtype: DType::I32, offset: 0, ne: [rows, 1, 1, 1], nb: [4; 4] };
        let cache = rng.vec(n * slots);
        let ci = f32_in(&cache, [n, slots, 1, 1]);
        let results = [Kernels::Reference, Kernels::Fast].map(|kernels| {
            let mut buf = cache.clone();
            let mut out =
                Out { data: &mut buf, offset: 0, ne: [n, slots, 1, 1], nb: strides(DType::F32, [n, slots, 1, 1]) };
            let r = execute(&Op::SetRows, &[ci, f32_in(&src, [n, rows, 1, 1]), ii], &mut out, kernels, 2);
            (r.map_err(|e| e.to_string()), buf)
        });
        let [(reference, want), (fast, got)] = results;
        if ids.contains(&9) {
            let err = fast.expect_err("slot 9 of 9");
            assert!(err.contains("out of range"), "{err}");
            assert_eq!(reference.expect_err("slot 9 of 9"), err);
        } else {
            fast.expect("runs");
            reference.expect("runs");
            assert_eq!(got, want);
            assert_eq!(&got[8 * n..9 * n], &src[2 * n..3 * n], "row 2 into slot 8");
        }
    }
}

#[test]
fn attention_fast_matches_reference_over_several_sequences() {
    let mut rng = Rng(5);
    // Sequences of 300 slots: a query's rows come in up to three chunks, merged.
    let (d, heads, kv_heads, segment) = (16, 4, 2, 300);
    // A batch of decode steps (sequence s at its own depth: one row, every row, three chunks,
    // one) and a prompt's chunk ending sequence 0 (its queries seeing 281 to 300 rows) and
    // starting sequence 1 (20 queries each, over two blocks of tokens).
    let cases: [Vec<i32>; 2] = [vec![0, 300 + 299, 600 + 280, 900 + 21], (280..320).collect()];
    for slots in cases {
        let (n_q, n_kv) = (slots.len(), 4 * segment);
        let (q, k, v) = (rng.vec(d * heads * n_q), rng.vec(d * kv_heads * n_kv), rng.vec(d * kv_heads * n_kv));
        let si = i32_in(&slots);
        let ins = [
            f32_in(&q, [d, heads, n_q, 1]),
            f32_in(&k, [d, kv_heads, n_kv, 1]),
            f32_in(&v, [d, kv_heads, n_kv, 1]),
            si,
        ];
        let op = Op::Attention { scale: 0.3, segment };
        let e = compare(&op, &ins, [d, heads, n_q, 1]);
        assert!(e < 1e-10, "slots {slots:?}: {e:.2e}");
        // Each query alone (its sequence's rows only) gives the same numbers.
        let all = run(&op, &ins, [d, heads, n_q, 1]);
        for (t, &slot) in slots.iter().enumerate() {
            let start = slot as usize - slot as usize % segment;
            let one = [slot - start as i32];
            let qt = &q[t * d * heads..][..d * heads];
            let kv = |x: &[f32]| x[start * d * kv_heads..][..segment * d * kv_heads].to_vec();
            let (ks, vs) = (kv(&k), kv(&v));
            let alone = run(
                &Op::Attention { scale: 0.3, segment },
                &[
                    f32_in(qt, [d, heads, 1, 1]),
                    f32_in(&ks, [d, kv_heads, segment, 1]),
                    f32_in(&vs, [d, kv_heads, segment, 1]),
                    i32_in(&one),
                ],
                [d, heads, 1, 1],
            );
            assert_eq!(&all[t * d * heads..][..d * heads], &alone[..], "query {t} at slot {slot}");
        }
    }
}

fn run(op: &Op, ins: &[In], out_ne: [usize; 4]) -> Vec<f32> {
    let mut buf = vec![0f32; out_ne.iter().product()];
    let mut out = Out { data: &mut buf, offset: 0, ne: out_ne, nb: strides(DType::F32, out_ne) };
    execute(op, ins, &mut out, Kernels::Fast, 2).expect("runs");
    buf
}

#[test]
fn elementwise_ops_broadcast_and_compute_their_formulas() {
    let mut rng = Rng(3);
    let x = rng.vec(16 * 3);
    let b = rng.vec(16);
    let (xi, bi) = (f32_in(&x, [16, 3, 1, 1]), f32_in(&b, [16, 1, 1, 1]));
    let add = run(&Op::Add, &[xi, bi], [16, 3, 1, 1]);
    let mul = run(&Op::Mul, &[xi, bi], [16, 3, 1, 1]);
    let swiglu = run(&Op::SwiGlu, &[xi, xi], [16, 3, 1, 1]);
    for i in 0..48 {
        assert_eq!(add[i], x[i] + b[i % 16]);
        assert_eq!(mul[i], x[i] * b[i % 16]);
        assert!((swiglu[i] - x[i] * x[i] / (1.0 + (-x[i]).exp())).abs() < 1e-6);
    }
    let one = [1.0f32];
    let gelu = |kind| run(&Op::Gelu(kind), &[f32_in(&one, [1, 1, 1, 1])], [1, 1, 1, 1])[0];
    assert!((gelu(crate::graph::Gelu::Tanh) - 0.841_192).abs() < 1e-5);
    assert!((gelu(crate::graph::Gelu::Erf) - 0.841_345).abs() < 1e-5);
    let ones = vec![1f32; 16];
    let zeros = vec![0f32; 16];
    let ln = run(
        &Op::LayerNorm { eps: 0.0 },
        &[xi, f32_in(&ones, [16, 1, 1, 1]), f32_in(&zeros, [16, 1, 1, 1])],
        [16, 3, 1, 1],
    );
    for row in ln.chunks(16) {
        let mean: f32 = row.iter().sum::<f32>() / 16.0;
        let var: f32 = row.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / 16.0;
        assert!(mean.abs() < 1e-5 && (var - 1.0).abs() < 1e-4, "mean {mean} var {var}");
    }
}

#[test]
fn rope_rotates_pairs_by_position_and_leaves_position_zero_alone() {
    let mut rng = Rng(4);
    let (d, heads, n) = (16, 2, 3);
    let x = rng.vec(d * heads * n);
    let pos: Vec<i32> = vec![0, 5, 9, 0, 6, 2, 0, 7, 4]; // [n, 3]: t, h, w rows
                                                         // Many tokens (several blocks of them over the threads) give the reference's values too.
    let many = 21;
    let (xs, ps) = (rng.vec(d * heads * many), (0..3 * many as i32).map(|i| i * 7 % 50).collect::<Vec<i32>>());
    let psi = In {
        data: Data::I32(&ps),
        dtype: DType::I32,
        offset: 0,
        ne: [many, 3, 1, 1],
        nb: [4, 4 * many, 12 * many, 12 * many],
    };
    let op = Op::Rope { kind: RopeKind::MropeInterleaved { sections: [2, 1, 1] }, theta: 1e4, n_dims: d };
    assert_eq!(compare(&op, &[f32_in(&xs, [d, heads, many, 1]), psi], [d, heads, many, 1]), 0.0);
    let pi =
        In { data: Data::I32(&pos), dtype: DType::I32, offset: 0, ne: [n, 3, 1, 1], nb: [4, 4 * n, 12 * n, 12 * n] };
    for kind in [RopeKind::MropeInterleaved { sections: [2, 1, 1] }, RopeKind::Axial2d] {
        // The fast kernel computes the reference's values exactly, on every dimension or on
        // the first half (the rest passed through).
        for n_dims in [d, d / 2] {
            let op = Op::Rope { kind: kind.clone(), theta: 1e4, n_dims };
            assert_eq!(compare(&op, &[f32_in(&x, [d, heads, n, 1]), pi], [d, heads, n, 1]), 0.0, "{op:?}");
        }
        let op = Op::Rope { kind, theta: 1e4, n_dims: d };
        let y = run(&op, &[f32_in(&x, [d, heads, n, 1]), pi], [d, heads, n, 1]);
        for h in 0..heads {
            for t in 0..n {
                let base = (t * heads + h) * d;
                for j in 0..d / 2 {
                    let (a, b) = (x[base + j], x[base + j + d / 2]);
                    let (c, e) = (y[base + j], y[base + j + d / 2]);
                    assert!(((a * a + b * b).sqrt() - (c * c + e * e).sqrt()).abs() < 1e-5, "pair norm");
                    if t == 0 {
                        assert!((a - c).abs() < 1e-6 && (b - e).abs() < 1e-6, "position 0 is the identity");
                    }
                }
            }
        }
    }
}

#[test]
fn erf_is_accurate() {
    // Values of erf from tables.
    for (x, want) in
        [(0.0, 0.0), (0.5, 0.520_499_877_8), (1.0, 0.842_700_792_9), (-2.0, -0.995_322_265_0), (3.5, 0.999_999_256_9)]
    {
        assert!((super::reference::erf(x) - want).abs() < 2e-7, "erf({x})");
    }
}

#[test]
fn out_of_range_ids_are_errors_not_panics() {
    let table = vec![0f32; 8 * 4];
    let ids = [0i32, 4];
    let ti = f32_in(&table, [8, 4, 1, 1]);
    let ii = In { data: Data::I32(&ids), dtype: DType::I32, offset: 0, ne: [2, 1, 1, 1], nb: [4, 8, 8, 8] };
    let mut buf = vec![0f32; 16];
    for kernels in [Kernels::Reference, Kernels::Fast] {
        let mut out = Out { data: &mut buf, offset: 0, ne: [8, 2, 1, 1], nb: [4, 32, 64, 64] };
        let err = execute(&Op::GetRows, &[ti, ii], &mut out, kernels, 2).expect_err("id 4 of 4 rows");
        assert!(err.to_string().contains("out of range"), "{err}");
    }
}

#[test]
fn argmax_takes_the_first_maximum_past_nans_in_any_lane() {
    for n in [1, 15, 16, 17, 40, 1000] {
        for at in [0, n / 3, n - 1] {
            let mut v: Vec<f32> = (0..n).map(|i| ((i * 7919) % 101) as f32 - 200.0).collect();
            v[at] = 5.0;
            v[n - 1 - (n - 1 - at) / 2] = 5.0; // a later equal one, where there is room
            if at > 0 {
                v[0] = f32::NAN;
            }
            assert_eq!(super::reference::argmax(&v), at, "n={n} at={at}");
        }
    }
    assert_eq!(super::reference::argmax(&[f32::NAN, f32::NAN]), 0);
    assert_eq!(super::reference::argmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY, 1.0]), 2);
    assert_eq!(super::reference::argmax(&[]), 0);
}

#[test]
fn argmax_op_takes_each_rows_first_maximum_as_an_index() {
    // Rows of 5 in a [5, 3, 2] value, read through a view that skips the last column of 6.
    let mut data: Vec<f32> = (0..36).map(|i| ((i * 13) % 7) as f32).collect();
    data[2] = f32::NAN;
    data[7..12].fill(f32::NEG_INFINITY);
    let x = In { data: Data::F32(&data), dtype: DType::F32, offset: 4, ne: [5, 3, 2, 1], nb: [4, 24, 72, 144] };
    let got = run(&Op::Argmax, &[x], [1, 3, 2, 1]);
    let want: Vec<f32> = (0..6)
        .map(|r| {
            let row = &data[1 + 6 * r..][..5];
            let best = row.iter().copied().filter(|v| !v.is_nan()).fold(f32::NEG_INFINITY, f32::max);
            row.iter().position(|&v| v == best).unwrap_or(0) as f32
        })
        .collect();
    assert_eq!(got, want);
    assert_eq!(got[1], 0.0, "every value -inf: the first");
}

#[test]
fn pool_runs_every_thread_and_raises_panics() {
    use super::pool::Pool;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let pool = Pool::global();
    for threads in [1, 2, 3, 8] {
        for _ in 0..200 {
            let items = AtomicUsize::new(0);
            let sum = AtomicUsize::new(0);
            pool.run(threads, &|| loop {
                let i = items.fetch_add(1, Ordering::Relaxed);
                if i >= 100 {
                    break;
                }
                // A nested run is allowed. Like any job it hands out its work (here one item):
                // when another test holds the pool, the outer run has no job and this one may
                // be taken by a worker as well as by the calling thread.
                let taken = AtomicBool::new(false);
                pool.run(threads, &|| {
                    if !taken.swap(true, Ordering::Relaxed) {
                        sum.fetch_add(i, Ordering::Relaxed);
                    }
                });
            });
            assert_eq!(sum.load(Ordering::Relaxed), 4950);
        }
    }
    let caught = std::panic::catch_unwind(|| {
        pool.run(2, &|| panic!("boom"));
    });
    assert!(caught.is_err());
    // The pool still works after a panic.
    let count = AtomicUsize::new(0);
    pool.run(2, &|| {
        count.fetch_add(1, Ordering::Relaxed);
    });
    assert!(count.load(Ordering::Relaxed) >= 1);
}

#[test]
fn a_runs_memo_gives_each_node_the_values_it_would_compute_alone() {
    // Within a run, products that read one value share its quantized rows, and RoPEs that turn
    // by one positions value share its angles: each node's output must equal its own
    // computation, also where the shared rows do not fit (another weight dtype, whose byte
    // planes differ) or the angles' frequencies differ.
    use super::execute_with;
    use super::fast::RunMemo;
    use crate::graph::NodeId;
    let mut rng = Rng(9);
    let mut memo = RunMemo::default();
    let alone_and_memo = |op: &Op, ins: &[In], out_ne: [usize; 4], inputs: &[NodeId], memo: &mut RunMemo| {
        let n: usize = out_ne.iter().product();
        let mut outs = [vec![0f32; n], vec![0f32; n]];
        for (i, buf) in outs.iter_mut().enumerate() {
            let mut out = Out { data: buf, offset: 0, ne: out_ne, nb: strides(DType::F32, out_ne) };
            let memo = (i == 1).then_some((inputs, &mut *memo));
            execute_with(op, ins, &mut out, Kernels::Fast, 2, memo).expect("runs");
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&outs[1]), bits(&outs[0]), "{op:?}");
    };
    let (k, n) = (512, 40);
    let ids = [NodeId(1), NodeId(2)];
    for m in [3, 37] {
        let x = rng.vec(k * m);
        for dtype in [DType::Q4K, DType::Q4K, DType::Q6K, DType::Q8_0, DType::F16, DType::Q4K] {
            let mut w = vec![0u8; dtype.row_bytes((k * n) as u64).expect("whole blocks") as usize];
            quantize_row(dtype, &rng.vec(k * n), &mut w).expect("quantizes");
            let w_in =
                In { data: Data::Bytes(&w), dtype, offset: 0, ne: [k, n, 1, 1], nb: strides(dtype, [k, n, 1, 1]) };
            alone_and_memo(&Op::MatMul, &[w_in, f32_in(&x, [k, m, 1, 1])], [n, m, 1, 1], &ids, &mut memo);
        }
    }
    let (d, heads, t) = (16, 2, 19);
    let x = rng.vec(d * heads * t);
    let pos: Vec<i32> = (0..3 * t as i32).map(|i| i * 5 % 23).collect();
    let pi =
        In { data: Data::I32(&pos), dtype: DType::I32, offset: 0, ne: [t, 3, 1, 1], nb: [4, 4 * t, 12 * t, 12 * t] };
    for (theta, n_dims) in [(1e4, d), (1e4, d), (5e5, d), (5e5, d / 2)] {
        let op = Op::Rope { kind: RopeKind::MropeInterleaved { sections: [2, 1, 1] }, theta, n_dims };
        alone_and_memo(&op, &[f32_in(&x, [d, heads, t, 1]), pi], [d, heads, t, 1], &ids, &mut memo);
    }
}
