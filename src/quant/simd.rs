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
    /// x86-64 with AVX-512 F, BW and VNNI on top of [`Simd::Avx2`] (Intel Ice Lake, AMD Zen 4
    /// and later).
    Avx512,
}

impl Simd {
    /// Every level, slowest first.
    pub const ALL: [Simd; 3] = [Simd::Scalar, Simd::Avx2, Simd::Avx512];

    /// The fastest level this CPU runs, or a slower one that `HRX_SIMD` names (`scalar`,
    /// `avx2`). Decided once per process.
    pub fn detect() -> Simd {
        static LEVEL: OnceLock<Simd> = OnceLock::new();
        *LEVEL.get_or_init(|| {
            let asked = crate::settings::settings().choice(&crate::settings::SIMD);
            let cap = asked.and_then(|v| Simd::ALL.into_iter().find(|s| s.name() == v));
            let allowed = |s: &Simd| cap.is_none_or(|c| *s as u8 <= c as u8);
            Simd::ALL.into_iter().rev().find(|s| allowed(s) && s.is_supported()).unwrap_or(Simd::Scalar)
        })
    }

    /// Whether this CPU can run the level's kernels.
    pub fn is_supported(self) -> bool {
        match self {
            Simd::Scalar => true,
            Simd::Avx2 => avx2_supported(),
            Simd::Avx512 => avx512_supported(),
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
            Simd::Avx512 => "avx512",
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn avx2_supported() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
}

#[cfg(target_arch = "x86_64")]
fn avx512_supported() -> bool {
    avx2_supported()
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vnni")
}

#[cfg(not(target_arch = "x86_64"))]
fn avx2_supported() -> bool {
    false
}

#[cfg(not(target_arch = "x86_64"))]
fn avx512_supported() -> bool {
    false
}
