//! Whether the device's subgroups are what it reports: the subgroup kernels split their work
//! by `gl_SubgroupSize`, so a driver that reports one size and runs another gives them wrong
//! sums with no error anywhere. Mesa's lavapipe at 1024- and 2048-bit vectors is one: it
//! reports 32 and 64 and runs subgroups of 16 lanes (llvmpipe builds compute shaders at
//! min(width / 32, 16) lanes).

use super::super::buffer::Buffer;
use super::super::error::Result;
use super::super::kernels::{probe_launch, KernelSet};
use super::super::memory::Location;
use super::super::once;

/// Invocations of the probe's one workgroup.
const THREADS: u32 = 128;

/// Runs the probe at subgroups of `size` lanes (required where the device allows): Ok when
/// every invocation sees `size` reported, `size` lanes adding up and 128 / `size` subgroups;
/// else what the device runs instead, naming its driver.
pub fn probe(ks: &KernelSet, size: u32) -> Result<std::result::Result<(), String>> {
    let dev = ks.device();
    let out = dev.buffer(u64::from(4 * 4 * THREADS), Location::Device, "the subgroup probe's output")?;
    out.clear()?;
    let launch = probe_launch(size);
    once::dispatch(ks, &launch, &[], &[], &out, [1, 1, 1])?;
    let words = read_words(&out)?;
    let info = dev.info();
    let seen = |k: usize| {
        let mut v: Vec<u32> = words.chunks_exact(4).map(|w| w[k]).collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let (reported, lanes, subgroups) = (seen(0), seen(1), seen(2));
    let expected = THREADS / size.max(1);
    if reported == [size] && lanes == [size] && subgroups == [expected] {
        return Ok(Ok(()));
    }
    Ok(Err(format!(
        "{} (driver {}) asked for subgroups of {size} reports {reported:?} and runs {lanes:?} lanes together, {subgroups:?} subgroups of a {THREADS}-thread workgroup where {expected} were due",
        info.name,
        info.driver()
    )))
}

fn read_words(out: &Buffer) -> Result<Vec<u32>> {
    let mut bytes = vec![0u8; (4 * 4 * THREADS) as usize];
    out.read(0, &mut bytes)?;
    Ok(bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
}
