//! Which instruction set the dot-product kernels use, detected once at run time.
//!
//! Every level computes the same integer sums; levels differ only in the order of f32
//! additions, so their results agree to f32 rounding. [`Simd::Scalar`] is portable Rust and
//! the reference the others are tested against.

use std::sync::OnceLock;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Simd {
    /// Portable Rust: any CPU.
    Scalar,
    /// x86-64 with AVX2, FMA and F16C (Intel Haswell, AMD Zen and later).
    Avx2,
}

impl Simd {
    /// Every level, slowest first.
    pub const ALL: [Simd; 2] = [Simd::Scalar, Simd::Avx2];

    /// The fastest level this CPU runs, unless `HRX_SIMD=scalar` asks for the portable
    /// kernels. Decided once per process.
    pub fn detect() -> Simd {
        static LEVEL: OnceLock<Simd> = OnceLock::new();
        *LEVEL.get_or_init(|| {
            if std::env::var("HRX_SIMD").as_deref() == Ok("scalar") {
                return Simd::Scalar;
            }
            Simd::ALL.into_iter().rev().find(|s| s.is_supported()).unwrap_or(Simd::Scalar)
        })
    }

    /// Whether this CPU can run the level's kernels.
    pub fn is_supported(self) -> bool {
        match self {
            Simd::Scalar => true,
            Simd::Avx2 => avx2_supported(),
        }
    }

    /// The levels this CPU runs, slowest first.
    pub fn supported() -> Vec<Simd> {
        Simd::ALL.into_iter().filter(|s| s.is_supported()).collect()
    }

    pub fn name(self) -> &'static str {
        match self {
            Simd::Scalar => "scalar",
            Simd::Avx2 => "avx2",
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn avx2_supported() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
}

#[cfg(not(target_arch = "x86_64"))]
fn avx2_supported() -> bool {
    false
}
