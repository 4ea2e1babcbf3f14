//! Micro-benchmark of the fast matmul kernels (not a test): one thread, random weights.
//!
//! cargo run --release --example bench_kernels [-- K N M [REPS]]   (default 2048 2048 1)
//! Prints, per format and SIMD level, the time of a [M, K] × [K, N] product (time on the CPU
//! where Linux reports it, else wall time), as GMAC/s and as
//! weight bytes streamed per second. DTYPE=Q4_K (say) runs one format only, HRX_SIMD=scalar
//! the scalar kernels only.

use hrx::quant::{quantize_activations, quantize_row, DType, Simd};
use std::time::Instant;

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).map(|a| a.parse().expect("numbers")).collect();
    let (k, n, m) = (*args.first().unwrap_or(&2048), *args.get(1).unwrap_or(&2048), *args.get(2).unwrap_or(&1));
    // Repetitions: as given, else enough for about half a second (the CPU-time clock is
    // coarse).
    let reps = args.get(3).copied();
    let mut seed = 1u64;
    let mut rnd = move || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    };
    let levels: Vec<Simd> = match std::env::var("HRX_SIMD").as_deref() {
        Ok("scalar") => vec![Simd::Scalar],
        _ => Simd::supported(),
    };
    let x: Vec<f32> = (0..k * m).map(|_| rnd()).collect();
    let w: Vec<f32> = (0..k).map(|_| rnd()).collect();
    let only = std::env::var("DTYPE").ok();
    for dtype in [DType::Q4K, DType::Q6K, DType::Q8_0, DType::Q5K, DType::F16] {
        if only.as_deref().is_some_and(|o| o != dtype.name()) {
            continue;
        }
        let rb = dtype.row_bytes(k as u64).unwrap() as usize;
        let mut one = vec![0u8; rb];
        quantize_row(dtype, &w, &mut one).unwrap();
        let weights: Vec<u8> = (0..n).flat_map(|_| one.iter().copied()).collect();
        let acts = quantize_activations(dtype, &x, k).unwrap();
        let mut out = vec![0f32; m * n];
        for &simd in &levels {
            let t = Instant::now();
            acts.matmul_with(simd, dtype, &weights, n, 0..m, &mut out).unwrap();
            let reps = reps.unwrap_or((0.5 / t.elapsed().as_secs_f64().max(1e-6)).clamp(1.0, 1e5) as usize);
            let (t, c) = (Instant::now(), cpu_ns());
            for _ in 0..reps {
                acts.matmul_with(simd, dtype, &weights, n, 0..m, &mut out).unwrap();
            }
            // On-CPU time where Linux reports it: other processes on the machine then only
            // cost cache, not the time they run.
            let s = match (c, cpu_ns()) {
                (Some(a), Some(b)) => (b - a) as f64 * 1e-9,
                _ => t.elapsed().as_secs_f64(),
            } / reps as f64;
            println!(
                "{:5} {:6} k {k} n {n} m {m}: {:8.3} ms  {:6.2} GMAC/s  {:6.2} GB/s of weights",
                dtype.name(),
                simd.name(),
                s * 1e3,
                (k * n * m) as f64 / s / 1e9,
                weights.len() as f64 / s / 1e9
            );
        }
    }
}

/// Nanoseconds this thread has run on a CPU (Linux's schedstat), if available.
fn cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}
