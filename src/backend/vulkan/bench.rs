//! Each kernel's distance to the hardware (`hrx bench --kernels`): a matrix product of given
//! weight type and shape timed alone on the GPU, in GB/s of weight bytes and TFLOP/s, beside
//! the copy bandwidth of the same device measured in the same run. Model-agnostic: the caller
//! says which shapes.
//!
//! Timing: one recording writes a timestamp, runs the dispatch many times with a barrier after
//! each (as consecutive nodes of a graph wait for each other), and writes another; the
//! difference over the repetitions is one dispatch, its barrier included (enough repetitions
//! for 50 ms, after an untimed submission: an idle GPU's clocks ramp up). Weights are pseudo-random
//! bytes (never zeros: they can run faster than real data), and a product whose weights would
//! stay in the GPU's last-level cache between repetitions cycles through enough copies to
//! exceed it, as decode does (every other weight of the model passes through in between).

use super::buffer::{Buffer, Uploader};
use super::command::CommandBuffer;
use super::descriptor::DescriptorPool;
use super::device::Device;
use super::error::{Result, VkError};
use super::kernels::{self, CopyPush, KernelId, KernelSet, MatKind, Operand, Ops, PushWords, Values, WType, BINDINGS};
use super::memory::Location;
use super::timestamps::TimestampPool;
use crate::graph::Op;
use crate::quant::DType;
use crate::rng::SplitMix64;

/// Bytes of weights cycled through per mat-vec timing: more than any GPU's last-level cache
/// (the H200 has 50 MiB).
const CYCLE_BYTES: u64 = 256 << 20;

/// A matrix product to time: `n` rows of `k` weights of `dtype`, times `m` columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatCase {
    pub dtype: DType,
    pub k: usize,
    pub n: usize,
    pub m: usize,
}

impl MatCase {
    pub fn weight_bytes(&self) -> u64 {
        self.dtype.row_bytes(self.k as u64).unwrap_or(0) * self.n as u64
    }

    pub fn flops(&self) -> f64 {
        2.0 * self.k as f64 * self.n as f64 * self.m as f64
    }
}

/// One kernel's time on one case.
#[derive(Clone, Debug, PartialEq)]
pub struct MatTiming {
    pub case: MatCase,
    pub kernel: String,
    /// Seconds per dispatch (its barrier included).
    pub seconds: f64,
}

impl MatTiming {
    /// Weight bytes read per second, in GB/s.
    pub fn weight_gbps(&self) -> f64 {
        self.case.weight_bytes() as f64 / self.seconds / 1e9
    }

    pub fn tflops(&self) -> f64 {
        self.case.flops() / self.seconds / 1e12
    }
}

/// Times between two timestamps of a recording, in seconds.
fn elapsed(device: &Device, pool: &TimestampPool) -> Result<f64> {
    let ticks = pool.ticks()?;
    let info = device.info();
    let mask = super::timestamps::valid_mask(info.timestamp_bits);
    let delta = ticks[1].wrapping_sub(ticks[0]) & mask;
    Ok(delta as f64 * f64::from(info.timestamp_period) * 1e-9)
}

fn random_bytes(rng: &mut SplitMix64, n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        out.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    out.truncate(n);
    out
}

/// GPU time per repetition of what `record` records (called with a repetition count), in
/// seconds: timed once with `reps` repetitions after an untimed submission, and again with
/// more when that took under `MIN_SECONDS` (the clocks of an idle GPU ramp up, and a short
/// measurement is mostly launch jitter).
fn time_reps(device: &Device, reps: u32, record: &dyn Fn(&mut CommandBuffer, u32) -> Result<()>) -> Result<f64> {
    const MIN_SECONDS: f64 = 0.05;
    let mut reps = reps.max(1);
    loop {
        let stamps = TimestampPool::new(device, 2)?;
        let mut cmd = CommandBuffer::new(device)?;
        cmd.begin()?;
        cmd.reset_timestamps(&stamps)?;
        cmd.write_timestamp(&stamps, 0)?;
        record(&mut cmd, reps)?;
        cmd.write_timestamp(&stamps, 1)?;
        cmd.finish()?;
        cmd.submit_and_wait()?;
        cmd.submit_and_wait()?;
        let seconds = elapsed(device, &stamps)?;
        if seconds >= MIN_SECONDS || reps >= 100_000 {
            return Ok(seconds / f64::from(reps));
        }
        let wanted = (MIN_SECONDS / (seconds / f64::from(reps)).max(1e-9)).ceil();
        reps = (wanted as u32).clamp(reps * 2, 100_000);
    }
}

/// Device copy bandwidth in GB/s, bytes read plus bytes written, as a kernel sees it: a
/// shader copying a buffer of `bytes` (at most what one binding can see) into another in
/// 16-byte words; and the bytes it copied.
pub fn copy_bandwidth(device: &Device, ks: &KernelSet, bytes: u64) -> Result<(f64, u64)> {
    // No more than one binding can see (lavapipe's range is 128 MiB), in whole 16-byte words.
    let bytes = bytes.min(u64::from(device.info().max_storage_buffer_range)) & !15;
    let words = u32::try_from(bytes / 16).map_err(|_| VkError::Operands(format!("{bytes} bytes to copy")))?;
    let src = device.buffer(bytes, Location::Device, "copy source")?;
    let dst = device.buffer(bytes, Location::Device, "copy destination")?;
    src.write(0, &random_bytes(&mut SplitMix64(7), bytes as usize))?;
    let pipeline = ks.pipeline(KernelId::Copy)?;
    let pool = DescriptorPool::new(device, 1, BINDINGS)?;
    let set = pool.bind(&pipeline, &[&src, &src, &src, &src, &src, &dst, &src])?;
    let groups = [words.div_ceil(256).min(device.info().max_workgroup_count[0]), 1, 1];
    let push = PushWords::of(&CopyPush { n: words });
    let per_copy = time_reps(device, 4, &|cmd, reps| {
        for _ in 0..reps {
            cmd.dispatch(&pipeline, &set, &push, groups)?;
            cmd.compute_barrier()?;
        }
        Ok(())
    })?;
    Ok((2.0 * bytes as f64 / per_copy / 1e9, bytes))
}

/// Times matrix kernel `kind` on `case`; None when the kernel does not take the case (its
/// launch refuses the operands).
/// x holds `xv` values (f16: activations kept in halves, where the kind takes them).
pub fn time_matmul(
    device: &Device,
    ks: &KernelSet,
    case: MatCase,
    kind: MatKind,
    xv: Values,
) -> Result<Option<MatTiming>> {
    let wt = WType::from_dtype(case.dtype)
        .ok_or_else(|| VkError::NoKernel(format!("no matrix kernel for {}", case.dtype)))?;
    let kernel = KernelId::MatMul(kind, wt, xv);
    let x_dtype = if xv == Values::F16 { DType::F16 } else { DType::F32 };
    let w_op = Operand::contiguous(case.dtype, [case.k, case.n, 1, 1], 0);
    let x_op = Operand::contiguous(x_dtype, [case.k, case.m, 1, 1], 0);
    let d_op = Operand::contiguous(DType::F32, [case.n, case.m, 1, 1], 0);
    let Ok(launch) = kernels::launch(kernel, Ops::single(&Op::MatMul), &[w_op, x_op], &d_op, None) else {
        return Ok(None);
    };
    let bytes = case.weight_bytes();
    // Copies of the weights (the same random bytes at other addresses), cycled so that mat-vec
    // products read memory, not the cache.
    let copies = if case.m <= MatKind::VEC_MAX_COLS { CYCLE_BYTES.div_ceil(bytes.max(1)).clamp(1, 64) } else { 1 };
    let random = random_bytes(&mut SplitMix64(0x9E37_79B9_7F4A_7C15 ^ bytes), bytes as usize);
    let mut up = Uploader::new(device, bytes * copies);
    let weights = (0..copies)
        .map(|_| {
            let b = device.buffer(bytes, Location::Device, "bench weights")?;
            up.write(&b, 0, &random)?;
            Ok(b)
        })
        .collect::<Result<Vec<Buffer>>>()?;
    up.flush()?;
    let xs: Vec<f32> = (0..case.k * case.m).map(|i| ((i * 37 % 101) as f32 - 50.0) / 64.0).collect();
    let x = device.buffer((x_dtype.block_bytes() * case.k * case.m) as u64, Location::Device, "bench x")?;
    match xv {
        Values::F32 => x.write_f32(0, &xs)?,
        Values::F16 => {
            x.write(0, &xs.iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect::<Vec<u8>>())?
        }
    }
    let d = device.buffer(4 * (case.n * case.m) as u64, Location::Device, "bench output")?;
    let sizes = device.buffer(16, Location::Device, "bench sizes")?;
    sizes.clear()?;
    let pipeline = ks.pipeline(kernel)?;
    let pool = DescriptorPool::new(device, copies as u32, BINDINGS)?;
    let sets = weights
        .iter()
        .map(|w| pool.bind(&pipeline, &[&sizes, w, &x, &sizes, &sizes, &d, &sizes]))
        .collect::<Result<Vec<_>>>()?;
    let groups = launch.groups([case.n, case.m, 1, 1], device.info().max_workgroup_count);
    let seconds = time_reps(device, 8, &|cmd, reps| {
        for i in 0..reps {
            cmd.dispatch(&pipeline, &sets[i as usize % sets.len()], &launch.push, groups)?;
            cmd.compute_barrier()?;
        }
        Ok(())
    })?;
    Ok(Some(MatTiming { case, kernel: kernel.name(), seconds }))
}
