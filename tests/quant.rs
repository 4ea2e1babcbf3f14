//! Tests of hrx::quant: bit-exactness against gguf-py's vectors (made by
//! scripts/gen_quant_vectors.py), quantization round trips, dot products, length errors.

use hrx::quant::{
    dequantize_row, quantize_activation, quantize_activations, quantize_activations_in_parts, quantize_row,
    vec_dot_f32, vec_dot_quantized, vec_dot_quantized_with, ActivationPart, DType, QuantError, Simd, FILE_DTYPES,
};

// ---------------------------------------------------------------- helpers

/// splitmix64: deterministic test data without a dev-dependency.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f32 {
        let u = 1.0 - self.uniform();
        let v = self.uniform();
        (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
    }

    /// Weight-like data: normal values whose scale varies per 32-value run, so that blocks
    /// differ, with occasional 6-sigma outliers.
    fn weights(&mut self, n: usize) -> Vec<f32> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let scale = 10f32.powf(self.uniform() * 4.0 - 3.0);
            for _ in 0..32.min(n - out.len()) {
                let outlier = if self.uniform() < 0.01 { 6.0 } else { 1.0 };
                out.push(self.normal() * scale * outlier);
            }
        }
        out
    }
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn dequantized(dtype: DType, row: &[u8]) -> Vec<f32> {
    let n = row.len() / dtype.block_bytes() * dtype.block_len();
    let mut out = vec![0f32; n];
    dequantize_row(dtype, row, &mut out).unwrap();
    out
}

fn quantized(dtype: DType, x: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; dtype.row_bytes(x.len() as u64).unwrap() as usize];
    quantize_row(dtype, x, &mut out).unwrap();
    out
}

/// `(Σ a·b, Σ |a·b|)` in f64.
fn exact_dot(a: &[f32], b: &[f32]) -> (f64, f64) {
    a.iter().zip(b).fold((0.0, 0.0), |(s, m), (&a, &b)| {
        let p = f64::from(a) * f64::from(b);
        (s + p, m + p.abs())
    })
}

fn rel_rms(x: &[f32], y: &[f32]) -> f64 {
    let err: f64 = x.iter().zip(y).map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2)).sum();
    let norm: f64 = x.iter().map(|&a| f64::from(a).powi(2)).sum();
    (err / norm).sqrt()
}

// ---------------------------------------------------------------- gguf-py vectors

/// `(dtype, blocks, gguf.quants.dequantize(blocks))`.
const DEQUANT_VECTORS: [(DType, &[u8], &[u8]); 13] = {
    macro_rules! v {
        ($d:expr, $name:literal) => {
            (
                $d,
                include_bytes!(concat!("data/quant/deq_", $name, ".bin")),
                include_bytes!(concat!("data/quant/deq_", $name, ".f32")),
            )
        };
    }
    [
        v!(DType::F32, "f32"),
        v!(DType::F16, "f16"),
        v!(DType::BF16, "bf16"),
        v!(DType::Q4_0, "q4_0"),
        v!(DType::Q4_1, "q4_1"),
        v!(DType::Q5_0, "q5_0"),
        v!(DType::Q5_1, "q5_1"),
        v!(DType::Q8_0, "q8_0"),
        v!(DType::Q2K, "q2_k"),
        v!(DType::Q3K, "q3_k"),
        v!(DType::Q4K, "q4_k"),
        v!(DType::Q5K, "q5_k"),
        v!(DType::Q6K, "q6_k"),
    ]
};

fn vectors(dtype: DType) -> (&'static [u8], Vec<f32>) {
    let (_, blocks, values) = DEQUANT_VECTORS.iter().find(|v| v.0 == dtype).unwrap();
    (blocks, f32s(values))
}

#[test]
fn dequantize_is_bit_exact_with_gguf_py() {
    for dtype in FILE_DTYPES {
        let (blocks, want) = vectors(dtype);
        assert!(want.len() >= 1000, "{dtype}: too few vectors");
        let got = dequantized(dtype, blocks);
        assert_eq!(got.len(), want.len(), "{dtype}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            // F16 NaNs come out quiet (as in ggml on x86); numpy keeps signaling payloads.
            let same = if dtype == DType::F16 && w.is_nan() {
                g.is_nan() && g.is_sign_negative() == w.is_sign_negative()
            } else {
                g.to_bits() == w.to_bits()
            };
            assert!(
                same,
                "{dtype} value {i} (block {}): got {g:e} ({:#010x}), gguf-py {w:e} ({:#010x})",
                i / dtype.block_len(),
                g.to_bits(),
                w.to_bits()
            );
        }
    }
}

#[test]
fn dequantize_blockwise_equals_whole_row() {
    // A row is a concatenation of independent blocks: decoding them one by one must agree.
    for dtype in FILE_DTYPES {
        let (blocks, want) = vectors(dtype);
        for (i, block) in blocks.chunks_exact(dtype.block_bytes()).enumerate().step_by(7) {
            let got = dequantized(dtype, block);
            let want = &want[i * dtype.block_len()..(i + 1) * dtype.block_len()];
            let same = got.iter().zip(want).all(|(g, w)| g.to_bits() == w.to_bits() || w.is_nan());
            assert!(same, "{dtype} block {i}");
        }
    }
}

#[test]
fn quantize_is_bit_exact_with_gguf_py() {
    let cases: [(DType, &[u8], &[u8]); 3] = [
        (DType::F16, include_bytes!("data/quant/q_f16.in.f32"), include_bytes!("data/quant/q_f16.bin")),
        (DType::BF16, include_bytes!("data/quant/q_bf16.in.f32"), include_bytes!("data/quant/q_bf16.bin")),
        (DType::Q8_0, include_bytes!("data/quant/q_q8_0.in.f32"), include_bytes!("data/quant/q_q8_0.bin")),
    ];
    for (dtype, input, want) in cases {
        let x = f32s(input);
        let got = quantized(dtype, &x);
        assert_eq!(got.len(), want.len(), "{dtype}");
        let step = dtype.block_bytes();
        for (i, (g, w)) in got.chunks(step).zip(want.chunks(step)).enumerate() {
            assert_eq!(g, w, "{dtype} block {i} (input {:?})", &x[i * dtype.block_len()..][..dtype.block_len()]);
        }
    }
}

#[test]
fn k_quantize_is_bit_exact_with_ggml_reference() {
    // ggml's C quantize_row_q{4,5,6}_K_ref (see scripts/gen_quant_vectors.py --ggml).
    let x = f32s(include_bytes!("data/quant/q_k.in.f32"));
    let cases: [(DType, &[u8]); 3] = [
        (DType::Q4K, include_bytes!("data/quant/q_q4_k.bin")),
        (DType::Q5K, include_bytes!("data/quant/q_q5_k.bin")),
        (DType::Q6K, include_bytes!("data/quant/q_q6_k.bin")),
    ];
    for (dtype, want) in cases {
        let got = quantized(dtype, &x);
        assert_eq!(got.len(), want.len(), "{dtype}");
        let step = dtype.block_bytes();
        for (i, (g, w)) in got.chunks(step).zip(want.chunks(step)).enumerate() {
            assert_eq!(g, w, "{dtype} block {i}");
        }
    }
}

#[test]
fn f16_nan_stays_nan() {
    let x = [f32::NAN, -f32::NAN, f32::from_bits(0x7F80_0001)];
    let back = dequantized(DType::F16, &quantized(DType::F16, &x));
    for (b, x) in back.iter().zip(x) {
        assert!(b.is_nan() && b.is_sign_negative() == x.is_sign_negative(), "{x:?} -> {b:?}");
    }
}

// ---------------------------------------------------------------- quantize round trips

/// Relative RMS error bounds, about 1.35x the errors measured on `Rng::weights` data
/// (F16 2.0e-4, BF16 1.5e-3, Q8_0 7.5e-3, Q6_K 2.3e-2, Q5_K 4.1e-2, Q4_K 8.2e-2). That data
/// is harsher than plain Gaussian: outliers and scales varying 1e4-fold between sub-blocks.
const ROUND_TRIP_BOUNDS: [(DType, f64); 7] = [
    (DType::F32, 0.0),
    (DType::F16, 3e-4),
    (DType::BF16, 2e-3),
    (DType::Q8_0, 1e-2),
    (DType::Q6K, 3e-2),
    (DType::Q5K, 5.5e-2),
    (DType::Q4K, 1.1e-1),
];

#[test]
fn quantize_round_trip_error_is_bounded() {
    let x = Rng(1).weights(256 * 64);
    for (dtype, bound) in ROUND_TRIP_BOUNDS {
        let err = rel_rms(&x, &dequantized(dtype, &quantized(dtype, &x)));
        eprintln!("{dtype}: relative RMS round-trip error {err:.3e} (bound {bound:.1e})");
        assert!(err <= bound, "{dtype}: relative RMS error {err:e} > {bound:e}");
    }
}

#[test]
fn zero_rows_quantize_to_zero_bytes() {
    let x = vec![0f32; 512];
    for (dtype, _) in ROUND_TRIP_BOUNDS {
        let q = quantized(dtype, &x);
        assert!(q.iter().all(|&b| b == 0), "{dtype}: {q:?}");
        // == rather than bits: formats with an offset (Q6_K: q - 32) give 0 * -32 = -0.0.
        assert!(dequantized(dtype, &q).iter().all(|&v| v == 0.0), "{dtype}");
    }
}

/// Rows whose values lie on each format's grid come back exactly.
#[test]
fn representable_rows_round_trip_exactly() {
    let mut rng = Rng(2);
    // Integers in lo..=hi times `unit`; in each 16 values, value 3 is `hi_pin` (it fixes
    // the scale) and value 5 is `lo_pin` (Q4_K/Q5_K need a 0 per sub-block to pin the min).
    let mut grid = |lo: i32, hi: i32, pins: (i32, i32), unit: f32| -> Vec<f32> {
        (0..512)
            .map(|i| {
                let q = match i % 16 {
                    3 => pins.0,
                    5 => pins.1,
                    _ => lo + (rng.next_u64() % (hi - lo + 1) as u64) as i32,
                };
                q as f32 * unit
            })
            .collect()
    };
    // Q4_K/Q5_K: 63 * 2^-6 makes the f16 super-scale d = max_scale / 63 = 2^-6 exact.
    let k4_unit = 63.0 / 64.0;
    let cases = [
        (DType::F16, grid(-2048, 2048, (0, 0), 1.0 / 1024.0)),
        (DType::BF16, grid(-255, 255, (0, 0), 1.0 / 1024.0)),
        (DType::Q8_0, grid(-127, 127, (-127, 0), 0.125)),
        (DType::Q6K, grid(-32, 31, (-32, 0), 0.25)),
        (DType::Q5K, grid(0, 31, (31, 0), k4_unit)),
        (DType::Q4K, grid(0, 15, (15, 0), k4_unit)),
    ];
    for (dtype, x) in cases {
        let back = dequantized(dtype, &quantized(dtype, &x));
        for (i, (b, x)) in back.iter().zip(&x).enumerate() {
            assert_eq!(b, x, "{dtype} value {i}");
        }
    }
}

#[test]
fn quantize_handles_extreme_inputs() {
    // No panic and a result of the right size on non-finite and huge or tiny inputs.
    let mut x = Rng(3).weights(512);
    x[0] = f32::NAN;
    x[40] = f32::INFINITY;
    x[300] = -f32::INFINITY;
    x[301] = 1e38;
    x[302] = 1e-40;
    for (dtype, _) in ROUND_TRIP_BOUNDS {
        let q = quantized(dtype, &x);
        assert_eq!(dequantized(dtype, &q).len(), x.len(), "{dtype}");
    }
    let tiny: Vec<f32> = (0..256).map(|i| i as f32 * 1e-12).collect();
    for dtype in [DType::Q4K, DType::Q5K, DType::Q6K] {
        let back = dequantized(dtype, &quantized(dtype, &tiny));
        assert!(back.iter().all(|v| v.is_finite() && v.abs() < 1e-9), "{dtype}: {back:?}");
    }
}

// ---------------------------------------------------------------- dot products

/// Rows of every format for dot tests: the gguf-py blocks for quantized formats (random
/// quants, finite scales), quantized random weights for the float formats (whose vector
/// files hold NaNs). Returns `n_blocks` blocks.
fn test_row(dtype: DType, n_blocks: usize, rng: &mut Rng) -> Vec<u8> {
    if dtype.block_len() == 1 {
        return quantized(dtype, &rng.weights(n_blocks));
    }
    let (blocks, _) = vectors(dtype);
    let bb = dtype.block_bytes();
    let start = (rng.next_u64() as usize % (blocks.len() / bb - n_blocks)) * bb;
    blocks[start..start + n_blocks * bb].to_vec()
}

fn dot_lengths(dtype: DType) -> [usize; 3] {
    // One block, a few, and many; for float formats lengths that are not multiples of 8.
    if dtype.block_len() == 1 {
        [1, 37, 4099]
    } else {
        [1, 3, 33]
    }
}

#[test]
fn vec_dot_f32_matches_dequantize_then_dot() {
    let mut rng = Rng(4);
    for dtype in FILE_DTYPES {
        for blocks in dot_lengths(dtype) {
            let row = test_row(dtype, blocks, &mut rng);
            let w = dequantized(dtype, &row);
            let x = rng.weights(w.len());
            let (exact, mag) = exact_dot(&w, &x);
            let got = vec_dot_f32(dtype, &row, &x).unwrap();
            let err = (f64::from(got) - exact).abs();
            assert!(err <= 1e-6 * mag + 1e-30, "{dtype} × {blocks} blocks: {got} vs {exact} (Σ|wx| {mag})");
        }
    }
}

#[test]
fn vec_dot_quantized_is_exact_when_the_activation_is_representable() {
    // Per block, integers in -32767..=32767 times a power of two with one ±32767: the activation
    // quantizes without error, so only f32 rounding separates the result from exact.
    let mut rng = Rng(5);
    for dtype in FILE_DTYPES {
        for blocks in dot_lengths(dtype) {
            let row = test_row(dtype, blocks, &mut rng);
            let w = dequantized(dtype, &row);
            let x: Vec<f32> = (0..w.len())
                .map(|i| {
                    let scale = (((i / 256) % 5) as f32 - 2.0).exp2();
                    let q = if i % 32 == 7 { 32767 } else { (rng.next_u64() % 65535) as i32 - 32767 };
                    q as f32 * scale
                })
                .collect();
            let act = quantize_activation(dtype, &x).unwrap();
            let (exact, mag) = exact_dot(&w, &x);
            for simd in Simd::supported() {
                let got = vec_dot_quantized_with(simd, dtype, &row, &act).unwrap();
                let err = (f64::from(got) - exact).abs();
                assert!(
                    err <= 1e-6 * mag + 1e-30,
                    "{dtype} × {blocks} blocks ({simd:?}): {got} vs {exact} (Σ|wx| {mag})"
                );
            }
        }
    }
}

#[test]
fn vec_dot_quantized_error_is_within_activation_rounding() {
    // Rounding x to d·q with d = max|x_block| / 32767 moves each x by at most d / 2, so the
    // dot moves by at most Σ |w_i| d_i / 2 (plus f32 rounding).
    let mut rng = Rng(6);
    for dtype in FILE_DTYPES {
        for blocks in dot_lengths(dtype) {
            let row = test_row(dtype, blocks, &mut rng);
            let w = dequantized(dtype, &row);
            let x = rng.weights(w.len());
            let bl = dtype.block_len().max(32);
            let bound: f64 = w
                .chunks(bl)
                .zip(x.chunks(bl))
                .map(|(w, x)| {
                    let d = x.iter().fold(0f32, |m, v| m.max(v.abs())) / 32767.0;
                    w.iter().map(|&w| f64::from(w.abs())).sum::<f64>() * f64::from(d) / 2.0
                })
                .sum();
            let act = quantize_activation(dtype, &x).unwrap();
            let (exact, mag) = exact_dot(&w, &x);
            let tol = if dtype.block_len() == 1 { 1e-6 * mag } else { bound * 1.001 + 1e-6 * mag };
            for simd in Simd::supported() {
                let got = vec_dot_quantized_with(simd, dtype, &row, &act).unwrap();
                let err = (f64::from(got) - exact).abs();
                assert!(
                    err <= tol + 1e-30,
                    "{dtype} × {blocks} blocks ({simd:?}): {got} vs {exact}, err {err:e} > {tol:e}"
                );
            }
        }
    }
}

/// Representable activation rows (see the test above): per block, integers up to ±32767
/// times a power of two, one of them ±32767, so quantizing them is exact.
fn representable(rng: &mut Rng, n: usize, extreme: bool) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let scale = (((i / 256) % 5) as f32 - 2.0).exp2();
            let q = if extreme || i % 32 == 7 {
                if rng.next_u64().is_multiple_of(2) {
                    32767
                } else {
                    -32767
                }
            } else {
                (rng.next_u64() % 65535) as i32 - 32767
            };
            q as f32 * scale
        })
        .collect()
}

#[test]
fn matmul_matches_the_scalar_kernels_at_every_simd_level() {
    // Every format, row lengths of one to many blocks (odd float lengths), activation row
    // counts around the kernels' group of 4: each level agrees with the exact dot to the
    // activation-rounding bound and with the scalar kernels to f32 rounding.
    let mut rng = Rng(7);
    for dtype in FILE_DTYPES {
        for blocks in dot_lengths(dtype) {
            // A tile of the many-row kernel is 16 weight rows: one and a ragged second.
            let n = 21;
            let rows: Vec<Vec<u8>> = (0..n).map(|_| test_row(dtype, blocks, &mut rng)).collect();
            let w: Vec<Vec<f32>> = rows.iter().map(|r| dequantized(dtype, r)).collect();
            let k = w[0].len();
            let weights: Vec<u8> = rows.concat();
            // 16 and more rows take the AVX-512 tiled kernel, which orders its f32 additions
            // differently from the one-row kernels.
            for m in [1, 3, 4, 5, 9, 16, 23] {
                let x = rng.weights(m * k);
                let acts = quantize_activations(dtype, &x, k).unwrap();
                assert_eq!((acts.rows(), acts.row_len()), (m, k));
                let mut scalar = vec![0f32; m * n];
                acts.matmul_with(Simd::Scalar, dtype, &weights, n, 0..m, &mut scalar).unwrap();
                for simd in Simd::supported() {
                    let mut got = vec![f32::NAN; m * n];
                    acts.matmul_with(simd, dtype, &weights, n, 0..m, &mut got).unwrap();
                    for i in 0..m {
                        let xi = &x[i * k..(i + 1) * k];
                        let one = quantize_activation(dtype, xi).unwrap();
                        for j in 0..n {
                            let (exact, mag) = exact_dot(&w[j], xi);
                            let bl = dtype.block_len().max(32);
                            let bound: f64 = w[j]
                                .chunks(bl)
                                .zip(xi.chunks(bl))
                                .map(|(w, x)| {
                                    let d = x.iter().fold(0f32, |m, v| m.max(v.abs())) / 32767.0;
                                    w.iter().map(|&w| f64::from(w.abs())).sum::<f64>() * f64::from(d) / 2.0
                                })
                                .sum();
                            let tol = if dtype.block_len() == 1 { 1e-6 * mag } else { bound * 1.001 + 1e-6 * mag };
                            let g = got[i * n + j];
                            let what = format!("{dtype} × {blocks} blocks, m {m}, row {i}, col {j} ({simd:?})");
                            assert!((f64::from(g) - exact).abs() <= tol + 1e-30, "{what}: {g} vs exact {exact}");
                            let s = scalar[i * n + j];
                            assert!(
                                (f64::from(g) - f64::from(s)).abs() <= 1e-6 * mag + 1e-30,
                                "{what}: {g} vs scalar {s} (Σ|wx| {mag})"
                            );
                            let single = vec_dot_quantized_with(simd, dtype, &rows[j], &one).unwrap();
                            if m < 16 || simd != Simd::Avx512 {
                                assert_eq!(single.to_bits(), g.to_bits(), "{what}: one row at a time differs");
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn activation_rows_quantized_in_parts_equal_the_whole() {
    // The CPU backend quantizes a prompt's rows a range per thread, into one set of rows; a few
    // rows (decode) carry the byte planes, many (a prompt) do not.
    let mut rng = Rng(11);
    for dtype in [DType::F32, DType::Q8_0, DType::Q4K, DType::Q6K] {
        for m in [5, 19] {
            let (n, k) = (5, 512);
            let rows: Vec<u8> = (0..n).flat_map(|_| test_row(dtype, k / dtype.block_len(), &mut rng)).collect();
            let x = rng.weights(m * k);
            let whole = quantize_activations(dtype, &x, k).unwrap();
            let mut a = vec![0f32; m * n];
            whole.matmul(dtype, &rows, n, &mut a).unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            for parts in [1, 2, 3, 4, 40] {
                let mut handed = 0;
                let split = quantize_activations_in_parts(dtype, &x, k, parts, |list| {
                    handed = list.len();
                    // Out of order, as threads may take them.
                    list.into_iter().rev().for_each(ActivationPart::quantize);
                })
                .unwrap();
                // Parts of equal whole rows, but for the last.
                let want = if dtype == DType::F32 { 0 } else { m.div_ceil(m.div_ceil(parts.min(m))) };
                assert_eq!(handed, want, "{dtype} m {m} parts {parts}");
                assert_eq!((split.rows(), split.row_len()), (m, k), "{dtype}");
                let mut b = vec![f32::NAN; m * n];
                split.matmul(dtype, &rows, n, &mut b).unwrap();
                assert_eq!(bits(&a), bits(&b), "{dtype} m {m} parts {parts}");
            }
            // Rows fit products with rows of their family, and no other.
            assert!(whole.fits(dtype), "{dtype}");
            let family = if dtype == DType::F32 { DType::Q4K } else { DType::F32 };
            assert!(!whole.fits(family), "{dtype}");
            // Q4_K and Q6_K rows read the byte planes, in orders of their own, only in products
            // of fewer than 16 rows on AVX-512: there rows made for one do not serve the other.
            if dtype == DType::Q4K {
                assert_eq!(whole.fits(DType::Q6K), m >= 16 || Simd::detect() != Simd::Avx512, "m {m}");
            }
        }
    }
    // A part left alone leaves its rows zero: every product with them is 0.
    let x = rng.weights(4 * 256);
    let none = quantize_activations_in_parts(DType::Q4K, &x, 256, 2, |parts| drop(parts)).unwrap();
    let row = test_row(DType::Q4K, 1, &mut rng);
    let mut out = [f32::NAN; 4];
    none.matmul(DType::Q4K, &row, 1, &mut out).unwrap();
    assert_eq!(out, [0.0; 4]);
}

#[test]
fn products_of_ranges_of_sixteen_or_more_activation_rows_equal_the_whole() {
    // The CPU backend splits a prompt's rows into ranges of at least 16 over its threads: each
    // range's rows must come out as the whole product's, whatever the thread count.
    let mut rng = Rng(12);
    for dtype in [DType::F32, DType::F16, DType::Q8_0, DType::Q4K, DType::Q6K] {
        let (n, k, m) = (21, 512, 50);
        let rows: Vec<u8> = (0..n).flat_map(|_| test_row(dtype, k / dtype.block_len(), &mut rng)).collect();
        let x = rng.weights(m * k);
        let acts = quantize_activations(dtype, &x, k).unwrap();
        let mut whole = vec![0f32; m * n];
        acts.matmul(dtype, &rows, n, &mut whole).unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for range in [0..16, 16..50, 7..30, 0..50] {
            let mut part = vec![f32::NAN; range.len() * n];
            acts.matmul_with(Simd::detect(), dtype, &rows, n, range.clone(), &mut part).unwrap();
            assert_eq!(bits(&part), bits(&whole[range.start * n..range.end * n]), "{dtype} rows {range:?}");
        }
        let mut none = vec![0f32; 0];
        assert!(
            acts.matmul_with(Simd::detect(), dtype, &rows, n, 40..51, &mut none).is_err(),
            "{dtype}: rows past the last"
        );
        assert!(
            acts.matmul_with(Simd::detect(), dtype, &rows, n, 3..8, &mut none).is_err(),
            "{dtype}: output too short"
        );
    }
}

/// Where a format keeps its f16 scales: (d offset, dmin or m offset) in a block.
fn scale_offsets(dtype: DType) -> Vec<usize> {
    match dtype {
        DType::Q4_0 | DType::Q5_0 | DType::Q8_0 => vec![0],
        DType::Q4_1 | DType::Q5_1 => vec![0, 2],
        DType::Q2K => vec![80, 82],
        DType::Q3K => vec![108],
        DType::Q4K | DType::Q5K => vec![0, 2],
        DType::Q6K => vec![208],
        _ => vec![],
    }
}

#[test]
fn extreme_quants_and_scales_do_not_overflow_the_integer_sums() {
    // Blocks of all-zero, all-one and alternating bits (largest quants and sub-block
    // scales of either sign) with f16 scales of 1, against activations at ±32767: the
    // integer sums are largest here, and must still be exact at every level.
    let mut rng = Rng(8);
    for dtype in FILE_DTYPES.into_iter().filter(|d| d.block_len() > 1) {
        for fill in [0x00u8, 0xFF, 0xAA, 0x55, 0x80, 0x7F] {
            let blocks = 5;
            let mut row = vec![fill; blocks * dtype.block_bytes()];
            for block in row.chunks_mut(dtype.block_bytes()) {
                for &off in &scale_offsets(dtype) {
                    block[off..off + 2].copy_from_slice(&[0x00, 0x3C]); // f16 1.0
                }
            }
            let w = dequantized(dtype, &row);
            // Formats with a min compute `d·Σ sc·q·x - dmin·Σ m·x` as two f32 terms, which
            // cancel where the weights are 0: the f32 rounding is relative to the terms.
            let parts: Vec<Vec<f32>> = scale_offsets(dtype)
                .iter()
                .map(|&zeroed| {
                    let mut r = row.clone();
                    for block in r.chunks_mut(dtype.block_bytes()) {
                        block[zeroed..zeroed + 2].copy_from_slice(&[0, 0]);
                    }
                    dequantized(dtype, &r)
                })
                .collect();
            for extreme in [true, false] {
                let x = representable(&mut rng, w.len(), extreme);
                // Same sign as the weight everywhere: the largest possible sum.
                let aligned: Vec<f32> =
                    x.iter().zip(&w).map(|(x, w)| x.abs() * if *w < 0.0 { -1.0 } else { 1.0 }).collect();
                for x in [x, aligned] {
                    let act = quantize_activation(dtype, &x).unwrap();
                    let (exact, mut mag) = exact_dot(&w, &x);
                    if parts.len() == 2 {
                        mag = parts.iter().map(|p| exact_dot(p, &x).1).sum();
                    }
                    // The same row against 16 copies of the activation: the many-row kernel.
                    let many = quantize_activations(dtype, &x.repeat(16), x.len()).unwrap();
                    for simd in Simd::supported() {
                        let got = vec_dot_quantized_with(simd, dtype, &row, &act).unwrap();
                        let mut rows_out = [f32::NAN; 16];
                        many.matmul_with(simd, dtype, &row, 1, 0..16, &mut rows_out).unwrap();
                        for got in std::iter::once(got).chain(rows_out) {
                            assert!(
                                (f64::from(got) - exact).abs() <= 1e-6 * mag + 1e-30,
                                "{dtype} fill {fill:#04x} ({simd:?}): {got} vs {exact}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn matmul_lengths_are_checked() {
    let x = vec![0.5f32; 512];
    let acts = quantize_activations(DType::Q4K, &x, 256).unwrap();
    let rows = vec![0u8; 3 * 144];
    let mut out = vec![0f32; 6];
    assert_eq!(acts.matmul(DType::Q4K, &rows, 3, &mut out), Ok(()));
    assert_eq!(acts.matmul(DType::Q4K, &rows, 3, &mut out[..5]), Err(QuantError::OutputLen { expected: 6, given: 5 }));
    assert!(matches!(acts.matmul(DType::Q4K, &rows[..431], 3, &mut out), Err(QuantError::ByteLen { .. })));
    assert!(matches!(acts.matmul(DType::Q4K, &rows, 2, &mut out[..4]), Err(QuantError::ByteLen { .. })));
    assert!(matches!(acts.matmul(DType::Q8_0, &rows, 3, &mut out), Err(QuantError::ActivationKind { .. })));
    assert_eq!(acts.matmul(DType::Q4K, &[], 0, &mut []), Ok(()));
    assert!(matches!(quantize_activations(DType::Q4K, &x, 128), Err(QuantError::PartialBlock { .. })));
    assert_eq!(
        quantize_activations(DType::Q4K, &x[..256 + 32], 256).unwrap_err(),
        QuantError::PartialRow { values: 288, row_len: 256 }
    );
    assert!(matches!(quantize_activations(DType::Q4K, &x, 0), Err(QuantError::PartialRow { .. })));
    let empty = quantize_activations(DType::Q4K, &[], 256).unwrap();
    assert_eq!(empty.rows(), 0);
    assert_eq!(empty.matmul(DType::Q4K, &rows, 3, &mut []), Ok(()));
    let none = quantize_activations(DType::Q4K, &[], 0).unwrap();
    assert_eq!(none.matmul(DType::Q4K, &[], 5, &mut []), Ok(()));
}

#[test]
fn empty_rows_dot_to_zero() {
    for dtype in FILE_DTYPES {
        assert_eq!(vec_dot_f32(dtype, &[], &[]), Ok(0.0), "{dtype}");
        let act = quantize_activation(dtype, &[]).unwrap();
        assert!(act.is_empty());
        assert_eq!(vec_dot_quantized(dtype, &[], &act), Ok(0.0), "{dtype}");
    }
}

// ---------------------------------------------------------------- length and kind errors

#[test]
fn length_mismatches_are_reported() {
    let mut out = vec![0f32; 64];
    assert_eq!(
        dequantize_row(DType::Q4_0, &[0; 35], &mut out),
        Err(QuantError::ByteLen { dtype: DType::Q4_0, values: 64, expected: 36, given: 35 })
    );
    let err = dequantize_row(DType::Q4K, &[0; 144], &mut out[..63]).unwrap_err();
    assert_eq!(err, QuantError::PartialBlock { dtype: DType::Q4K, values: 63 });
    assert_eq!(err.to_string(), "Q4_K: 63 values is not a whole number of 256-value blocks");
    assert_eq!(
        vec_dot_f32(DType::F16, &[0; 6], &[1.0; 4]).unwrap_err().to_string(),
        "F16: a row of 4 values takes 8 bytes, got 6"
    );
    assert!(matches!(
        quantize_activation(DType::Q6K, &[0.0; 32]),
        Err(QuantError::PartialBlock { dtype: DType::Q6K, values: 32 })
    ));
    assert!(matches!(
        quantize_row(DType::Q8_0, &[0.0; 32], &mut [0; 33]),
        Err(QuantError::ByteLen { expected: 34, given: 33, .. })
    ));
    let act = quantize_activation(DType::Q8_0, &[1.0; 64]).unwrap();
    assert!(matches!(vec_dot_quantized(DType::Q4_1, &[0; 20], &act), Err(QuantError::ByteLen { .. })));
}

#[test]
fn unsupported_operations_are_reported() {
    let err = quantize_row(DType::Q4_0, &[0.0; 32], &mut [0; 18]).unwrap_err();
    assert_eq!(err, QuantError::Unsupported { dtype: DType::Q4_0, op: "quantize" });
    assert_eq!(err.to_string(), "Q4_0: quantize is not supported");
    assert!(matches!(dequantize_row(DType::Q8K, &[0; 292], &mut [0.0; 256]), Err(QuantError::Unsupported { .. })));
    assert!(matches!(vec_dot_f32(DType::Q8K, &[0; 292], &[0.0; 256]), Err(QuantError::Unsupported { .. })));
    assert!(matches!(quantize_activation(DType::Q8K, &[0.0; 256]), Err(QuantError::Unsupported { .. })));
}

#[test]
fn activation_of_the_wrong_kind_is_rejected() {
    let x = vec![0.5f32; 256];
    let legacy = quantize_activation(DType::Q4_0, &x).unwrap();
    let k = quantize_activation(DType::Q4K, &x).unwrap();
    let float = quantize_activation(DType::BF16, &x).unwrap();
    assert_eq!((legacy.dtype(), k.dtype(), float.dtype()), (DType::Q8_0, DType::Q8K, DType::F32));
    let err = vec_dot_quantized(DType::Q4K, &[0; 144], &legacy).unwrap_err();
    assert_eq!(err, QuantError::ActivationKind { row: DType::Q4K, activation: DType::Q8_0 });
    assert_eq!(err.to_string(), "Q4_K: rows need a Q8_K activation, got Q8_0");
    assert!(vec_dot_quantized(DType::Q8_0, &[0; 272], &k).is_err());
    assert!(vec_dot_quantized(DType::F16, &[0; 512], &k).is_err());
    assert!(vec_dot_quantized(DType::Q6K, &[0; 210], &float).is_err());
    assert_eq!(vec_dot_quantized(DType::F16, &[0; 512], &float), Ok(0.0));
}

#[test]
fn no_slice_lengths_panic() {
    // Every entry point, every dtype, lengths around the block sizes: an error or a result,
    // never a panic, and Ok exactly when the lengths agree.
    let values = [0usize, 1, 31, 32, 33, 64, 255, 256, 257, 512];
    let bytes = [0usize, 1, 2, 17, 18, 34, 35, 84, 110, 144, 176, 210, 292, 420, 512, 1024];
    let mut dtypes = FILE_DTYPES.to_vec();
    dtypes.push(DType::Q8K);
    for dtype in dtypes {
        for &n in &values {
            let x = vec![0.25f32; n];
            let act = quantize_activation(dtype, &x);
            for &b in &bytes {
                let fits = dtype.row_bytes(n as u64) == Some(b as u64) && dtype != DType::Q8K;
                let row = vec![0x5Au8; b];
                assert_eq!(dequantize_row(dtype, &row, &mut vec![0.0; n]).is_ok(), fits, "{dtype} {n} {b}");
                assert_eq!(vec_dot_f32(dtype, &row, &x).is_ok(), fits, "{dtype} {n} {b}");
                if let Ok(act) = &act {
                    assert_eq!(vec_dot_quantized(dtype, &row, act).is_ok(), fits, "{dtype} {n} {b}");
                }
                let quantizable = matches!(
                    dtype,
                    DType::F32 | DType::F16 | DType::BF16 | DType::Q8_0 | DType::Q4K | DType::Q5K | DType::Q6K
                );
                let quantized = quantize_row(dtype, &x, &mut vec![0; b]).is_ok();
                assert_eq!(quantized, fits && quantizable, "{dtype} {n} {b}");
            }
        }
    }
}

#[test]
fn activation_rounding_is_to_nearest_with_halves_away_from_zero() {
    // Blocks of 32 whose maximum is 32767 have d = 1, so each value's quant is the value
    // rounded: read back exactly through Q8_0 rows whose only weight is a 1 at its place.
    let mut rng = Rng(9);
    let mut values: Vec<f32> = vec![0.5, -0.5, 1.5, 2.5, -2.5, 0.49999997, -0.49999997, 32766.5, -32766.5, 3.7, -3.7];
    for k in [0.0f32, 1.0, 2.0, 100.0, 4095.0, 16383.0] {
        for h in [k + 0.5, -(k + 0.5)] {
            values.extend([h, f32::from_bits(h.to_bits() + 1), f32::from_bits(h.to_bits() - 1)]);
        }
    }
    values.extend((0..2000).map(|_| (rng.uniform() * 2.0 - 1.0) * 32767.0));
    values.extend((0..500).map(|_| (rng.uniform() * 2.0 - 1.0) * 4.0));
    for chunk in values.chunks(31) {
        let mut x = vec![32767f32];
        x.extend_from_slice(chunk);
        x.resize(32, 0.0);
        let act = quantize_activation(DType::Q8_0, &x).unwrap();
        for (i, &v) in chunk.iter().enumerate() {
            let mut row = vec![0u8; 34];
            row[..2].copy_from_slice(&[0x00, 0x3C]); // d = 1.0
            row[2 + i + 1] = 1;
            let got = vec_dot_quantized(DType::Q8_0, &row, &act).unwrap();
            assert_eq!(got, v.round(), "{v} ({:#010x})", v.to_bits());
        }
    }
}
