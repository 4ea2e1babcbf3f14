//! Shared by the Vulkan tests: opening a device (a failure under CI=true, a loud skip
//! elsewhere), test data, running one kernel, and the normalized error.
#![allow(dead_code)] // each test binary uses its own subset

use hrx::backend::cpu::tensor::In;
use hrx::backend::vulkan::kernels::{
    self, Dyn, KernelId, KernelSet, Launch, MatKind, Operand, Ops, Values, Variants, WType,
};
use hrx::backend::vulkan::weight_layout::Stored;
use hrx::backend::vulkan::VkError;
use hrx::backend::vulkan::{once, Buffer, Device, DeviceOptions, Location, Selection};
use hrx::backend::DeviceChoice;
use hrx::graph::Op;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The Vulkan device the tests run on, resolved as every command resolves `HRX_DEVICE`
/// (`DeviceChoice::resolve`): device N when it names one, else the best device, lavapipe
/// included (the tests are of the Vulkan backend; `cpu` names no Vulkan device).
pub fn selection() -> Selection {
    match DeviceChoice::resolve(None).expect("HRX_DEVICE") {
        DeviceChoice::Vulkan(i, _) => Selection::Index(i),
        DeviceChoice::Auto => Selection::Best,
        DeviceChoice::Cpu => panic!("HRX_DEVICE=cpu names hrx's CPU backend: the Vulkan tests need a Vulkan device"),
    }
}

/// Options for tests: the pipeline cache in a fresh temporary folder; the submission limit
/// from `HRX_VK_TIMEOUT` as for every command (scripts/lib/subgroup_sizes.sh raises it for
/// lavapipe at widths where one submission can take minutes).
pub fn options(tag: &str) -> DeviceOptions {
    let cache_dir = std::env::temp_dir().join(format!("hrx-vk-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache_dir);
    DeviceOptions { cache_dir: Some(cache_dir), map_device_memory: true, profile: false, ..DeviceOptions::from_env() }
}

/// The test device, or None (after a loud message) where there is none. Under CI=true a
/// missing device fails the test: CI has lavapipe, so no device there is a broken set-up.
/// One device per test binary, shared by its tests (it is thread-safe): opening a GPU's
/// device and compiling pipelines afresh for every test took most of a GPU run's time.
/// Tests that need other options open their own with `device_with`.
pub fn device() -> Option<Device> {
    static SHARED: OnceLock<Option<Device>> = OnceLock::new();
    SHARED.get_or_init(|| device_with(options("shared"))).clone()
}

pub fn device_with(options: DeviceOptions) -> Option<Device> {
    match Device::new(&selection(), &options) {
        Ok(d) => {
            eprintln!(
                "vulkan device: {} ({}), driver {}",
                d.info().name,
                d.info().kind.name(),
                d.info().driver_info.clone().unwrap_or_default()
            );
            Some(d)
        }
        Err(e) => {
            let msg = format!("NO VULKAN DEVICE: {e}");
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("{msg}; under CI=true this is a failure (install mesa-vulkan-drivers for lavapipe)");
            }
            // Straight to stderr: the test harness captures eprintln! of passing tests.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "\n!!!!! {msg}: SKIPPING this test (install mesa-vulkan-drivers for lavapipe) !!!!!\n"
            );
            None
        }
    }
}

pub fn cache_dir(options: &DeviceOptions) -> PathBuf {
    options.cache_dir.clone().expect("test options have a cache dir")
}

/// Deterministic test data from hrx's own splitmix64.
pub struct Rng(hrx::rng::SplitMix64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(hrx::rng::SplitMix64(seed))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in [-1, 1).
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    pub fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.uniform()).collect()
    }
}

/// Normalized mean squared error of `got` against `want` (llama.cpp's test-backend-ops), as
/// hrx's self-check measures it.
pub fn nmse(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    hrx::backend::vulkan::selfcheck::nmse(got, want)
}

pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A device buffer holding `bytes` at byte `offset` (zeros before it).
/// The bytes of a buffer holding the weight `input` (at byte `input.offset` of `bytes`, rows of
/// `input.ne[0]` values, whole rows to the end) as the device stores weights
/// (`weight_layout`: Q6_K rows of whole quads by quads), what a model's upload gives.
pub fn stored(bytes: &[u8], input: &In) -> Vec<u8> {
    let (head, tensor) = bytes.split_at(input.offset.min(bytes.len()));
    let mut out = head.to_vec();
    out.resize(bytes.len(), 0);
    Stored::of(input.dtype, input.ne[0], tensor).unwrap().copy_range(&mut out[head.len()..], 0);
    out
}

pub fn upload(dev: &Device, bytes: &[u8], offset: usize) -> Buffer {
    let b = dev.buffer((offset + bytes.len()) as u64, Location::Device, "test input").unwrap();
    b.write(offset as u64, bytes).unwrap();
    b
}

/// Runs one launch: bindings sizes (`syms`), `ins` (up to four), `out`; grid for `out_ne`, clamped to
/// `max` workgroups (the device's limit when None; small values exercise the kernels'
/// grid-stride loops).
pub fn run(
    kernels: &KernelSet,
    launch: &Launch,
    syms: &[u32],
    ins: &[&Buffer],
    out: &Buffer,
    out_ne: [usize; 4],
    max: Option<[u32; 3]>,
) {
    let groups = launch.groups(out_ne, max.unwrap_or(kernels.device().info().max_workgroup_count));
    once::dispatch(kernels, launch, syms, ins, out, groups).unwrap();
}

/// The portable kernel for `op` on these operands, as the registry selects it, and its launch.
pub fn launch(op: &Op, ins: &[Operand], out: &Operand, dynamic: Option<Dyn>) -> Result<Launch, VkError> {
    let kernel = kernels::select(Ops::single(op), ins, out, dynamic, &Variants::PORTABLE)?;
    kernels::launch(kernel, Ops::single(op), ins, out, dynamic)
}

/// Matrix kernel `kind` on `w` and `x`, with `residual` added (a product fused with its ADD).
pub fn launch_mat(
    kind: MatKind,
    w: &Operand,
    x: &Operand,
    out: &Operand,
    residual: Option<&Operand>,
    dynamic: Option<Dyn>,
) -> Result<Launch, VkError> {
    let wt =
        WType::from_dtype(w.dtype).ok_or_else(|| VkError::NoKernel(format!("no matrix kernel for {}", w.dtype)))?;
    let kernel = KernelId::MatMul(kind, wt, Values::of(x, "x")?);
    match residual {
        None => kernels::launch(kernel, Ops::single(&Op::MatMul), &[*w, *x], out, dynamic),
        Some(r) => kernels::launch(
            kernel,
            Ops { fused: Some(&Op::Add), ..Ops::single(&Op::MatMul) },
            &[*w, *x, *r],
            out,
            dynamic,
        ),
    }
}
