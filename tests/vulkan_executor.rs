//! `VulkanExecutor` on a small hand-built block (norm, three quantized projections, SwiGLU,
//! residual add, scale) against the CPU executor with reference kernels, the same GGUF
//! weights and the same inputs; one recording replayed for several token counts.

mod vulkan_common;

use hrx::backend::cpu::{CpuExecutor, Kernels};
use hrx::backend::vulkan::kernels::Variants;
use hrx::backend::vulkan::{Device, DeviceOptions, Location, VkError, VulkanExecutor, VulkanRegistry};
use hrx::backend::PlanId;
use hrx::dispatcher::{CpuRegistry, Plan};
use hrx::gguf::{GgufFile, GgufWriter};
use hrx::graph::{DynAxis, Gelu, Graph, NodeId};
use hrx::quant::{quantize_row, DType};
use std::sync::Arc;
use vulkan_common::{nmse, Rng};

const N: usize = 256;
const FF: usize = 512;
const MAX_T: usize = 20;

/// The block and its output node.
fn block() -> (Graph, NodeId) {
    block_of(N, FF, MAX_T)
}

/// The block of width `n`, MLP `ff`, for up to `max_t` tokens.
fn block_of(n: usize, ff: usize, max_t: usize) -> (Graph, NodeId) {
    let mut g = Graph::new("block");
    let t = g.symbol("tokens", max_t);
    let dyn_t = Some(DynAxis { axis: 1, sym: t, num: 1, den: 1 });
    let x = g.input("x", DType::F32, [n, max_t, 1, 1], dyn_t).unwrap();
    let norm = g.weight("norm", DType::F32, [n, 1, 1, 1]).unwrap();
    let gate = g.weight("gate", DType::Q4K, [n, ff, 1, 1]).unwrap();
    let up = g.weight("up", DType::Q6K, [n, ff, 1, 1]).unwrap();
    let down = g.weight("down", DType::Q8_0, [ff, n, 1, 1]).unwrap();
    let proj = g.weight("proj", DType::F16, [n, n, 1, 1]).unwrap();
    let h = g.rms_norm(x, norm, 1e-6, "norm").unwrap();
    let a = g.matmul(gate, h, "gate").unwrap();
    let b = g.matmul(up, h, "up").unwrap();
    let s = g.swiglu(a, b, "swiglu").unwrap();
    let d = g.matmul(down, s, "down").unwrap();
    let y = g.add(x, d, "residual").unwrap();
    let z = g.mul(y, norm, "scale").unwrap();
    let out = g.matmul(proj, z, "proj").unwrap();
    g.mark_output(out);
    (g, out)
}

fn weights(rng: &mut Rng) -> Arc<GgufFile> {
    weights_of(rng, N, FF)
}

fn weights_of(rng: &mut Rng, width: usize, ff: usize) -> Arc<GgufFile> {
    let mut w = GgufWriter::new();
    for (name, dtype, k, n) in [
        ("norm", DType::F32, width, 1),
        ("gate", DType::Q4K, width, ff),
        ("up", DType::Q6K, width, ff),
        ("down", DType::Q8_0, ff, width),
        ("proj", DType::F16, width, width),
    ] {
        let row = dtype.row_bytes(k as u64).unwrap() as usize;
        let mut data = vec![0u8; row * n];
        for r in 0..n {
            // Norm weights near 1, projections scaled like trained ones.
            let v: Vec<f32> = (0..k)
                .map(|_| if n == 1 { 1.0 + 0.1 * rng.uniform() } else { rng.uniform() / (k as f32).sqrt() })
                .collect();
            quantize_row(dtype, &v, &mut data[r * row..(r + 1) * row]).unwrap();
        }
        let shape: Vec<u64> = if n == 1 { vec![k as u64] } else { vec![k as u64, n as u64] };
        w.add_tensor(name, dtype, &shape, data).unwrap();
    }
    Arc::new(GgufFile::from_bytes("block.gguf", w.to_bytes()).unwrap())
}

/// A decode step of the block on the device's own kernels, for one sequence and for a few
/// decoded together (3: the wide kernel's 4-column variant, run for 1 and 3; from 5 devices
/// with cooperative matrices take narrow tiles, which fold nothing): the norm and
/// the SwiGLU are folded into the products that read them (the wide mat-vec kernel computes
/// them as it loads x), the residual ADD into the down product, and the result matches the
/// CPU executor.
#[test]
fn a_decode_block_folds_its_norm_and_swiglu_into_the_products() {
    let Some(dev) = vulkan_common::device() else { return };
    let registry = VulkanRegistry::for_device(dev.info());
    let (width, ff) = (512, 1024);
    for sequences in [1, 3] {
        let (graph, out) = block_of(width, ff, sequences);
        let plan = Plan::new(graph.clone(), &registry).unwrap();
        let census = plan.census();
        let kernels: Vec<&String> = census.by_kernel.keys().map(|(_, k)| k).collect();
        eprintln!("{kernels:?}");
        if !kernels.iter().any(|k| k.starts_with("mul_mat_vec_wide")) {
            eprintln!("no wide mat-vec kernel on {}: nothing folds", dev.info().name);
            assert_eq!(census.fused, 0);
            return;
        }
        // norm into gate and up, swiglu and the residual add into down: 8 compute nodes, 5
        // dispatches (gate, up, down, the scale, the last product).
        assert!(kernels.iter().any(|k| k.ends_with("(RMS_NORM+MUL_MAT)")), "{kernels:?}");
        assert!(kernels.iter().any(|k| k.ends_with("(SWIGLU+MUL_MAT+ADD)")), "{kernels:?}");
        let batched = kernels.iter().filter(|k| k.contains("_x4")).count();
        assert_eq!(batched, if sequences == 1 { 0 } else { kernels.len() - 1 }, "{kernels:?}");
        assert_eq!((census.dispatches, census.fused), (5, 3), "{kernels:?}");
        let mut rng = Rng::new(23);
        let file = weights_of(&mut rng, width, ff);
        let mut gpu = VulkanExecutor::new(&dev, vec![plan], std::slice::from_ref(&file)).unwrap();
        assert_eq!(gpu.recording_stats()[0].dispatches, 5);
        let mut cpu =
            CpuExecutor::new(vec![Plan::new(graph, &CpuRegistry).unwrap()], &[file], Kernels::Reference).unwrap();
        for n in [1, 2, 3].into_iter().filter(|&n| n <= sequences) {
            let e = block_nmse(&mut gpu, &mut cpu, &mut rng, width, out, n);
            eprintln!("folded decode block, {n} of {sequences} columns: nmse {e:.3e}");
            assert!(e < 1e-9, "nmse {e}");
        }
    }
}

/// Sixteen sequences decoded together on a device with cooperative matrices: every product of
/// the block runs on the narrow tiles (`mul_mat_cm_narrow`, f16 operands: within their
/// tolerance of the CPU executor), none folds a producer, for 16, 9 and 5 of the planned
/// columns. Elsewhere (or with HRX_VK_NO_NARROW=1) no plan names them.
#[test]
fn a_decode_block_of_sixteen_sequences_takes_the_narrow_tiles() {
    let Some(dev) = vulkan_common::device() else { return };
    let variants = Variants::for_device(dev.info());
    let (width, ff, sequences) = (512, 1024, 16);
    let (graph, out) = block_of(width, ff, sequences);
    let plan = Plan::new(graph.clone(), &VulkanRegistry::for_device(dev.info())).unwrap();
    let census = plan.census();
    let kernels: Vec<&String> = census.by_kernel.keys().map(|(_, k)| k).collect();
    let narrow = kernels.iter().filter(|k| k.starts_with("mul_mat_cm_narrow")).count();
    if variants.coopmat.is_none() || variants.exact || !variants.narrow {
        eprintln!("no narrow tiles on {}: {kernels:?}", dev.info().name);
        assert_eq!(narrow, 0, "{kernels:?}");
        return;
    }
    // gate (Q4_K), up (Q6_K), down (Q8_0), proj (F16); the residual ADD fused into down.
    assert_eq!(narrow, 4, "{kernels:?}");
    assert!(!kernels.iter().any(|k| k.contains("RMS_NORM+MUL_MAT") || k.contains("SWIGLU+MUL_MAT")), "{kernels:?}");
    let mut rng = Rng::new(29);
    let file = weights_of(&mut rng, width, ff);
    let mut gpu = VulkanExecutor::new(&dev, vec![plan], std::slice::from_ref(&file)).unwrap();
    let mut cpu = CpuExecutor::new(vec![Plan::new(graph, &CpuRegistry).unwrap()], &[file], Kernels::Reference).unwrap();
    for n in [16, 9, 5] {
        let e = block_nmse(&mut gpu, &mut cpu, &mut rng, width, out, n);
        eprintln!("decode block on narrow tiles, {n} of {sequences} columns: nmse {e:.3e}");
        // f16 operands: the kernel tests' bound for them.
        assert!(e < 1e-5, "nmse {e}");
    }
}

#[test]
fn a_recorded_plan_matches_the_cpu_executor_at_every_token_count() {
    let Some(dev) = vulkan_common::device() else { return };
    check_block(&dev);
}

/// The same with device memory never mapped (as on a discrete GPU): weights go through
/// staging copies and the output is read back from the copy the recording makes.
#[test]
fn a_recorded_plan_without_mapped_device_memory() {
    let options = DeviceOptions { map_device_memory: false, ..vulkan_common::options("executor-unmapped") };
    let Some(dev) = vulkan_common::device_with(options) else { return };
    check_block(&dev);
}

/// Q6_K rows of whole runs of four blocks (1,024 values) are stored by quads on the device
/// (`weight_layout`): uploaded so, mapped or through staging copies, every kernel that reads
/// them (the portable ones and the device's own, for one column and four: f32 sums) gives
/// what the CPU gives from the file's blocks. Read as the file's layout, they would give noise.
#[test]
fn q6_k_weights_stored_by_quads_match_the_cpu() {
    let (width, ff) = (1024, 256);
    for map_device_memory in [true, false] {
        let options = DeviceOptions { map_device_memory, ..vulkan_common::options("executor-quads") };
        let Some(dev) = vulkan_common::device_with(options) else { return };
        let mut rng = Rng::new(29);
        let file = weights_of(&mut rng, width, ff);
        for registry in [VulkanRegistry::PORTABLE, VulkanRegistry::for_device(dev.info())] {
            let (graph, out) = block_of(width, ff, 4);
            let gpu_plan = Plan::new(graph.clone(), &registry).unwrap();
            let mut gpu = VulkanExecutor::new(&dev, vec![gpu_plan], std::slice::from_ref(&file)).unwrap();
            let cpu_plan = Plan::new(graph, &CpuRegistry).unwrap();
            let mut cpu = CpuExecutor::new(vec![cpu_plan], std::slice::from_ref(&file), Kernels::Reference).unwrap();
            for t in [1, 4] {
                let e = block_nmse(&mut gpu, &mut cpu, &mut rng, width, out, t);
                eprintln!("quads, mapped {map_device_memory}, {t} columns: nmse {e:.3e}");
                assert!(e < 1e-9, "mapped {map_device_memory}, {t} columns: nmse {e}");
            }
        }
    }
}

/// Weights go up through one staging buffer: a staging buffer per weight, in a host block
/// given back to the driver after each, made the 2B model's cold start 27 s on NVIDIA's driver
/// (a driver allocation per weight). Here 24 products' weights take a few allocations in all,
/// and the chain's output is still right.
#[test]
fn weights_upload_through_one_staging_buffer() {
    const LINKS: usize = 24;
    const W: usize = 64;
    let options = DeviceOptions { map_device_memory: false, ..vulkan_common::options("executor-staging") };
    let Some(dev) = vulkan_common::device_with(options) else { return };
    let mut g = Graph::new("chain");
    let mut x = g.input("x", DType::F32, [W, 1, 1, 1], None).unwrap();
    let mut file = GgufWriter::new();
    let mut rng = Rng::new(5);
    let mut want: Vec<f32> = rng.vec(W);
    let x0 = want.clone();
    for i in 0..LINKS {
        let w: Vec<f32> = (0..W * W).map(|_| rng.uniform() / W as f32).collect();
        let name = format!("w{i}");
        let weight = g.weight(&name, DType::F32, [W, W, 1, 1]).unwrap();
        x = g.matmul(weight, x, &name).unwrap();
        want = (0..W).map(|r| (0..W).map(|k| w[r * W + k] * want[k]).sum()).collect();
        file.add_tensor(&name, DType::F32, &[W as u64, W as u64], w.iter().flat_map(|v| v.to_le_bytes()).collect())
            .unwrap();
    }
    g.mark_output(x);
    let file = Arc::new(GgufFile::from_bytes("chain.gguf", file.to_bytes()).unwrap());
    let plan = Plan::new(g, &VulkanRegistry::PORTABLE).unwrap();
    let before = dev.driver_allocations();
    let mut gpu = VulkanExecutor::new(&dev, vec![plan], &[file]).unwrap();
    let made = dev.driver_allocations() - before;
    assert!(made <= 6, "{LINKS} weights took {made} driver allocations");
    gpu.write_f32(PlanId(0), "x", 0, &x0).unwrap();
    gpu.run(PlanId(0), &[]).unwrap();
    let got = gpu.output(PlanId(0), x, &[]).unwrap();
    assert!(nmse(&got, &want) < 1e-8, "nmse {}", nmse(&got, &want));
}

/// The block (of `width`) run on `t` random columns of x by both executors: the NMSE of the
/// device's output against the CPU's, after checking it has `width` values a column.
fn block_nmse(
    gpu: &mut VulkanExecutor,
    cpu: &mut CpuExecutor,
    rng: &mut Rng,
    width: usize,
    out: NodeId,
    t: usize,
) -> f64 {
    let x: Vec<f32> = rng.vec(width * t);
    gpu.write_f32(PlanId(0), "x", 0, &x).unwrap();
    cpu.f32_buffer(PlanId(0), "x").unwrap()[..x.len()].copy_from_slice(&x);
    gpu.run(PlanId(0), &[t]).unwrap();
    cpu.run(PlanId(0), &[t]).unwrap();
    let got = gpu.output(PlanId(0), out, &[t]).unwrap();
    assert_eq!(got.len(), width * t);
    nmse(&got, cpu.output(PlanId(0), out, &[t]).unwrap())
}

fn check_block(dev: &Device) {
    let mut rng = Rng::new(11);
    let file = weights(&mut rng);
    let (graph, out) = block();
    let gpu_plan = Plan::new(graph.clone(), &VulkanRegistry::PORTABLE).unwrap();
    assert_eq!(gpu_plan.census().cpu_nodes, 0);
    let mut gpu = VulkanExecutor::new(dev, vec![gpu_plan], std::slice::from_ref(&file)).unwrap();
    let mut cpu = CpuExecutor::new(vec![Plan::new(graph, &CpuRegistry).unwrap()], &[file], Kernels::Reference).unwrap();
    for t in [MAX_T, 1, 7, MAX_T] {
        let e = block_nmse(&mut gpu, &mut cpu, &mut rng, N, out, t);
        eprintln!("executor tokens={t}: nmse {e:.3e}");
        assert!(e < 5e-4, "tokens={t}: nmse {e}");
    }
    assert!(matches!(gpu.run(PlanId(0), &[MAX_T + 1]), Err(VkError::Plan(_))));
}

#[test]
fn a_plan_with_cpu_nodes_is_refused_by_name() {
    let Some(dev) = vulkan_common::device() else { return };
    let mut g = Graph::new("mixed");
    let x = g.input("x", DType::F32, [8, 2, 1, 1], None).unwrap();
    let y = g.gelu(x, Gelu::Tanh, "act").unwrap();
    g.mark_output(y);
    // Planned for the CPU: every compute node is a CPU node.
    let plan = Plan::new(g, &CpuRegistry).unwrap();
    match VulkanExecutor::new(&dev, vec![plan], &[]) {
        Err(VkError::Plan(m)) => assert!(m.contains("act"), "{m}"),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("a plan with a CPU node was accepted"),
    }
}

/// A storage larger than the device's storage-buffer range (lavapipe: 128 MiB) is bound as a
/// window around each value read from it, the rest of the offset going to the kernel; a
/// value that itself spans more than the range is refused by name. On devices whose range
/// exceeds 1 GiB (NVIDIA: 4 GiB) the same graph binds the whole buffer.
#[test]
fn values_far_into_a_buffer_past_the_storage_range_are_windowed() {
    let Some(dev) = vulkan_common::device() else { return };
    let range = dev.info().max_storage_buffer_range as usize;
    let big = if range <= 1 << 30 { range + (8 << 20) } else { 64 << 20 };
    let (n, rows) = (300, 5);
    let mut g = Graph::new("window");
    let storage = g.external_storage("big", DType::F32, big, false);
    // A window whose first byte lies past the range (not aligned to the offset alignment).
    let offset = big - 4 * n * rows - 4 * 7;
    let x =
        g.external_window("x", storage, offset, [n, rows, 1, 1], [4, 4 * n, 4 * n * rows, 4 * n * rows], None).unwrap();
    let y = g.add(x, x, "double").unwrap();
    g.mark_output(y);
    let plan = Plan::new(g, &VulkanRegistry::PORTABLE).unwrap();
    let mut gpu = VulkanExecutor::new(&dev, vec![plan], &[]).unwrap();
    let xs: Vec<f32> = Rng::new(12).vec(n * rows);
    gpu.write_f32(PlanId(0), "big", offset / 4, &xs).unwrap();
    gpu.run(PlanId(0), &[]).unwrap();
    let got = gpu.output(PlanId(0), y, &[]).unwrap();
    let want: Vec<f32> = xs.iter().map(|v| v + v).collect();
    assert_eq!(got, want);
    if range <= 1 << 30 {
        // A value spanning the whole buffer cannot be bound on this device.
        let mut g = Graph::new("too-wide");
        let storage = g.external_storage("big", DType::F32, big, false);
        let cols = big / 4 / 1024;
        let x =
            g.external_window("x", storage, 0, [1024, cols, 1, 1], [4, 4096, 4096 * cols, 4096 * cols], None).unwrap();
        let y = g.add(x, x, "wide_add").unwrap();
        g.mark_output(y);
        match VulkanExecutor::new(&dev, vec![Plan::new(g, &VulkanRegistry::PORTABLE).unwrap()], &[]) {
            Err(VkError::Plan(m)) => assert!(m.contains("wide_add") && m.contains("storage-buffer range"), "{m}"),
            Err(e) => panic!("unexpected error {e}"),
            Ok(_) => panic!("a value wider than the storage-buffer range was accepted"),
        }
    }
}

/// A matrix whose weights span more than the storage-buffer range runs as several dispatches
/// over row ranges, each binding a window of the weights, and matches the CPU executor (on
/// devices whose range exceeds 1 GiB the weights are smaller and bound whole).
#[test]
fn weights_past_the_storage_range_are_split_by_rows() {
    let Some(dev) = vulkan_common::device() else { return };
    let range = dev.info().max_storage_buffer_range as usize;
    let k = 256;
    let n = if range <= 1 << 30 { range / (4 * k) + 3001 } else { 16_001 };
    let mut rng = Rng::new(13);
    let mut w = GgufWriter::new();
    let data: Vec<u8> = (0..k * n).flat_map(|_| (rng.uniform() / 16.0).to_le_bytes()).collect();
    w.add_tensor("big", DType::F32, &[k as u64, n as u64], data).unwrap();
    let file = Arc::new(GgufFile::from_bytes("big.gguf", w.to_bytes()).unwrap());
    let mut g = Graph::new("split");
    let x = g.input("x", DType::F32, [k, 2, 1, 1], None).unwrap();
    let wt = g.weight("big", DType::F32, [k, n, 1, 1]).unwrap();
    let y = g.matmul(wt, x, "logits").unwrap();
    g.mark_output(y);
    let mut gpu = VulkanExecutor::new(
        &dev,
        vec![Plan::new(g.clone(), &VulkanRegistry::PORTABLE).unwrap()],
        std::slice::from_ref(&file),
    )
    .unwrap();
    let mut cpu = CpuExecutor::new(vec![Plan::new(g, &CpuRegistry).unwrap()], &[file], Kernels::Reference).unwrap();
    let xs = rng.vec(2 * k);
    gpu.write_f32(PlanId(0), "x", 0, &xs).unwrap();
    cpu.f32_buffer(PlanId(0), "x").unwrap().copy_from_slice(&xs);
    gpu.run(PlanId(0), &[]).unwrap();
    cpu.run(PlanId(0), &[]).unwrap();
    let got = gpu.output(PlanId(0), y, &[]).unwrap();
    let e = nmse(&got, cpu.output(PlanId(0), y, &[]).unwrap());
    eprintln!("split matmul {k}x{n} ({} MiB of weights, range {} MiB): nmse {e:.3e}", (k * n * 4) >> 20, range >> 20);
    assert_eq!(got.len(), 2 * n);
    assert!(e < 5e-4, "nmse {e}");
}

/// A model with a node no Vulkan kernel takes (Q3_K weights here) runs on the CPU: the
/// backend names the node (the runtime's loader then re-plans for the CPU, with a warning,
/// rather than failing to load); an all-GPU plan stays.
#[test]
fn plans_with_cpu_nodes_fall_back_to_the_cpu_backend() {
    use hrx::backend::Backend;
    let Some(dev) = vulkan_common::device() else { return };
    let mut g = Graph::new("q3");
    let x = g.input("x", DType::F32, [256, 2, 1, 1], None).unwrap();
    let w = g.weight("w", DType::Q3K, [256, 8, 1, 1]).unwrap();
    let y = g.matmul(w, x, "q3_proj").unwrap();
    g.mark_output(y);
    let backend = Backend::Vulkan(dev);
    let mixed = Plan::new(g, &VulkanRegistry::PORTABLE).unwrap();
    let node = backend.cpu_node(std::slice::from_ref(&mixed)).expect("a CPU node");
    assert!(node.contains("q3_proj") && node.contains("MUL_MAT"), "{node}");
    // A CPU executor refuses the Vulkan plan; the CPU's own plan of the graph runs.
    assert!(CpuExecutor::new(vec![mixed.clone()], &[], Kernels::Reference).is_err());
    let (graph, _) = block();
    let gpu = Plan::new(graph, &VulkanRegistry::PORTABLE).unwrap();
    assert_eq!(backend.cpu_node(&[gpu]), None);
}

/// The runtime's loader builds a model's graphs for the cache type of the backend that runs
/// them: f16 rows on a Vulkan device (f32 in the exact mode), and where a plan leaves a node to
/// the CPU (Q3_K weights) the graphs again with f32 rows, which the CPU executor binds (it
/// keeps no f16 storages) and runs.
#[test]
fn the_loader_builds_caches_for_the_backend_that_runs_them() {
    use hrx::backend::Backend;
    use hrx::runtime::{loader, RuntimeError};
    let Some(dev) = vulkan_common::device() else { return };
    let backend = Backend::Vulkan(dev);
    let (k, n, slots) = (256, 8, 4);
    // A row of x into slot ids[0] of a cache, and a product of `wtype` weights with x.
    let graph = |wtype: DType, cache: DType| -> Result<Vec<Graph>, RuntimeError> {
        let mut g = Graph::new("cached");
        let x = g.input("x", DType::F32, [k, 1, 1, 1], None)?;
        let ids = g.input("ids", DType::I32, [1, 1, 1, 1], None)?;
        let size = cache.block_bytes();
        let storage = g.external_storage("cache", cache, k * slots * size, false);
        let nb = [size, k * size, k * slots * size, k * slots * size];
        let rows = g.external_window("cache", storage, 0, [k, slots, 1, 1], nb, None)?;
        let written = g.set_rows(rows, x, ids, "write")?;
        let w = g.weight(&format!("w_{}", wtype.name()), wtype, [k, n, 1, 1])?;
        let y = g.matmul(w, x, "proj")?;
        g.mark_output(y);
        g.mark_output(written);
        Ok(vec![g])
    };
    let mut file = GgufWriter::new();
    for wtype in [DType::Q4K, DType::Q3K] {
        let bytes = vec![0; wtype.row_bytes(k as u64).unwrap() as usize * n];
        file.add_tensor(&format!("w_{}", wtype.name()), wtype, &[k as u64, n as u64], bytes).unwrap();
    }
    let file = Arc::new(GgufFile::from_bytes("cached.gguf", file.to_bytes()).unwrap());
    // f16, or with HRX_VK_KV_F32=1 (scripts/test runs this test so too) or HRX_VK_EXACT=1 f32.
    let want = backend.registry().cache_dtype();
    let f32 = ["HRX_VK_KV_F32", "HRX_VK_EXACT"].iter().any(|v| std::env::var(v).is_ok_and(|v| v == "1"));
    assert_eq!(want, if f32 { DType::F32 } else { DType::F16 }, "the registry's cache values");
    for (wtype, device, cache) in [(DType::Q4K, "vulkan", want), (DType::Q3K, "cpu", DType::F32)] {
        let (ran_on, _, graphs) = loader::load(|c| graph(wtype, c), &backend, &[Arc::clone(&file)]).unwrap();
        let built = graphs[0].externals.iter().find(|e| e.name == "cache").map(|e| e.dtype);
        eprintln!("{wtype} weights: {} with a cache of {built:?}", ran_on.describe());
        assert!(ran_on.describe().starts_with(device), "{wtype}: {}", ran_on.describe());
        assert_eq!(built, Some(cache), "{wtype} weights");
    }
}

/// Independent nodes recorded back to back share one barrier: four ops that each read only
/// `x`, then two sums of pairs, then their product. The recording has fewer barriers than
/// dispatches and still matches the CPU executor.
#[test]
fn independent_nodes_share_barriers_and_match_the_cpu() {
    let Some(dev) = vulkan_common::device() else { return };
    let mut g = Graph::new("fan-out");
    let x = g.input("x", DType::F32, [N, 3, 1, 1], None).unwrap();
    let a = g.gelu(x, Gelu::Tanh, "gelu_tanh").unwrap();
    let b = g.gelu(x, Gelu::Erf, "gelu_erf").unwrap();
    let c = g.mul(x, x, "square").unwrap();
    let d = g.add(x, x, "double").unwrap();
    let ab = g.add(a, b, "sum_ab").unwrap();
    let cd = g.add(c, d, "sum_cd").unwrap();
    let out = g.mul(ab, cd, "product").unwrap();
    g.mark_output(out);
    let mut gpu =
        VulkanExecutor::new(&dev, vec![Plan::new(g.clone(), &VulkanRegistry::PORTABLE).unwrap()], &[]).unwrap();
    let mut cpu = CpuExecutor::new(vec![Plan::new(g, &CpuRegistry).unwrap()], &[], Kernels::Reference).unwrap();
    let stats = &gpu.recording_stats()[0];
    eprintln!("{stats:?}");
    assert_eq!(stats.dispatches, 7);
    assert_eq!(stats.profile, None, "profiling is off unless asked for");
    // At least: before the sums (they read the first four), before the product, and the one
    // after the last dispatch.
    assert!((3..stats.dispatches).contains(&stats.barriers), "{stats:?}");
    let xs = Rng::new(14).vec(3 * N);
    gpu.write_f32(PlanId(0), "x", 0, &xs).unwrap();
    cpu.f32_buffer(PlanId(0), "x").unwrap().copy_from_slice(&xs);
    for _ in 0..2 {
        gpu.run(PlanId(0), &[]).unwrap();
        cpu.run(PlanId(0), &[]).unwrap();
        let got = gpu.output(PlanId(0), out, &[]).unwrap();
        let e = nmse(&got, cpu.output(PlanId(0), out, &[]).unwrap());
        assert!(e < 1e-6, "nmse {e}");
    }
}

/// With profiling on, every dispatch is timed alone (a barrier between every two) and its
/// time added to its kernel's, run after run; the results still match the CPU.
#[test]
fn profiled_runs_time_every_kernel() {
    let options = DeviceOptions { profile: true, ..vulkan_common::options("executor-profile") };
    let Some(dev) = vulkan_common::device_with(options) else { return };
    if !dev.profiling() {
        eprintln!("\n!!!!! {} cannot write timestamps: profiling is not checked !!!!!\n", dev.info().name);
        return;
    }
    let mut rng = Rng::new(15);
    let file = weights(&mut rng);
    let (graph, out) = block();
    let mut gpu = VulkanExecutor::new(
        &dev,
        vec![Plan::new(graph.clone(), &VulkanRegistry::PORTABLE).unwrap()],
        std::slice::from_ref(&file),
    )
    .unwrap();
    let mut cpu = CpuExecutor::new(vec![Plan::new(graph, &CpuRegistry).unwrap()], &[file], Kernels::Reference).unwrap();
    let runs = 3;
    for t in (1..=runs).map(|r| r * 5) {
        let x: Vec<f32> = rng.vec(N * t);
        gpu.write_f32(PlanId(0), "x", 0, &x).unwrap();
        cpu.f32_buffer(PlanId(0), "x").unwrap()[..N * t].copy_from_slice(&x);
        gpu.run(PlanId(0), &[t]).unwrap();
        cpu.run(PlanId(0), &[t]).unwrap();
        let e = nmse(&gpu.output(PlanId(0), out, &[t]).unwrap(), cpu.output(PlanId(0), out, &[t]).unwrap());
        assert!(e < 5e-4, "tokens={t}: nmse {e}");
    }
    let stats = &gpu.recording_stats()[0];
    let profile = stats.profile.as_ref().expect("a profile");
    eprintln!("{stats:?}");
    // One between every two dispatches and one after the last, and on a discrete GPU one
    // after the upload of the run's sizes that starts the recording.
    assert!((stats.dispatches..=stats.dispatches + 1).contains(&stats.barriers), "{} barriers", stats.barriers);
    assert_eq!(profile.runs, runs);
    assert_eq!(profile.kernels.iter().map(|k| k.dispatches).sum::<usize>(), stats.dispatches);
    let names: Vec<&str> = profile.kernels.iter().map(|k| k.kernel.as_str()).collect();
    // Eight compute nodes, seven dispatches: the residual ADD runs inside the down product.
    assert_eq!(stats.dispatches, 7, "{names:?}");
    assert!(!names.contains(&"add"), "{names:?}");
    for kernel in ["rms_norm", "swiglu", "mul"] {
        assert!(names.contains(&kernel), "{names:?}");
    }
    // A product is timed under its kernel and weight shape: `mul_mat_..._q4_k KxN`.
    let product = |n: &&str| {
        n.split_once(' ').is_some_and(|(k, shape)| {
            k.starts_with("mul_mat") && k.ends_with("q4_k") && shape.split('x').all(|d| d.parse::<usize>().is_ok())
        })
    };
    assert!(names.iter().any(product), "{names:?}");
    assert!(profile.kernels.iter().all(|k| k.nanos > 0.0), "{:?}", profile.kernels);
    assert!(profile.kernels.windows(2).all(|w| w[0].nanos >= w[1].nanos), "largest first");
}

/// A product whose input dies at the product and whose ADD's output the arena places on that
/// input's bytes: fusing them would make the product overwrite what other workgroups still
/// read, so the pair runs as two dispatches; where the bytes differ it fuses. Both match the
/// CPU.
#[test]
fn products_fuse_with_their_add_only_where_the_output_is_clear_of_their_inputs() {
    use hrx::dispatcher::Loc;
    let Some(dev) = vulkan_common::device() else { return };
    let mut rng = Rng::new(17);
    let file = weights(&mut rng);
    let build = |through_gelu: bool| {
        let mut g = Graph::new("fusion");
        let x = g.input("x", DType::F32, [N, 12, 1, 1], None).unwrap();
        let r = g.input("r", DType::F32, [N, 12, 1, 1], None).unwrap();
        let proj = g.weight("proj", DType::F16, [N, N, 1, 1]).unwrap();
        // Through a GELU the product's input is an arena value that dies at the product.
        let h = if through_gelu { g.gelu(x, Gelu::Erf, "act").unwrap() } else { x };
        let m = g.matmul(proj, h, "proj").unwrap();
        let y = g.add(r, m, "residual").unwrap();
        g.mark_output(y);
        (g, h, y)
    };
    for through_gelu in [true, false] {
        let (g, h, y) = build(through_gelu);
        let plan = Plan::new(g.clone(), &VulkanRegistry::PORTABLE).unwrap();
        let overlap = match (plan.locs[h.0], plan.locs[y.0]) {
            (Some(Loc::Arena { offset: a }), Some(Loc::Arena { offset: b })) => {
                a < b + 4 * N * 12 && b < a + 4 * N * 12
            }
            _ => false,
        };
        assert_eq!(overlap, through_gelu, "the arena reuses the dying input's bytes (the case under test)");
        let mut gpu = VulkanExecutor::new(&dev, vec![plan], std::slice::from_ref(&file)).unwrap();
        let mut cpu = CpuExecutor::new(
            vec![Plan::new(g, &CpuRegistry).unwrap()],
            std::slice::from_ref(&file),
            Kernels::Reference,
        )
        .unwrap();
        let computes = if through_gelu { 3 } else { 2 };
        let fused = if overlap { 0 } else { 1 };
        assert_eq!(gpu.recording_stats()[0].dispatches, computes - fused, "through_gelu {through_gelu}");
        for name in ["x", "r"] {
            let v = rng.vec(N * 12);
            gpu.write_f32(PlanId(0), name, 0, &v).unwrap();
            cpu.f32_buffer(PlanId(0), name).unwrap().copy_from_slice(&v);
        }
        for _ in 0..3 {
            gpu.run(PlanId(0), &[]).unwrap();
            cpu.run(PlanId(0), &[]).unwrap();
            let e = nmse(&gpu.output(PlanId(0), y, &[]).unwrap(), cpu.output(PlanId(0), y, &[]).unwrap());
            assert!(e < 1e-9, "through_gelu {through_gelu}: nmse {e}");
        }
    }
}

/// A layer's K path in miniature: RMS_NORM and ROPE of the heads of x, their rows written into
/// a cache by SET_ROWS (one dispatch on the GPU); returns the graph and the cache after.
fn rows_into_cache(max_t: usize, cache_rows: usize) -> (Graph, NodeId) {
    let (hd, heads) = (16, 2);
    let mut g = Graph::new("cache");
    let t = g.symbol("tokens", max_t);
    let tokens = DynAxis { axis: 1, sym: t, num: 1, den: 1 };
    let x = g.input("x", DType::F32, [hd * heads, max_t, 1, 1], Some(tokens)).unwrap();
    let positions = g.input("positions", DType::I32, [max_t, 3, 1, 1], Some(DynAxis { axis: 0, ..tokens })).unwrap();
    let slots = g.input("slots", DType::I32, [max_t, 1, 1, 1], Some(DynAxis { axis: 0, ..tokens })).unwrap();
    let norm = g.weight("norm", DType::F32, [hd, 1, 1, 1]).unwrap();
    let storage = g.external_storage("cache", DType::F32, hd * heads * cache_rows * 4, false);
    let row = 4 * hd * heads;
    let cache = g
        .external_window(
            "cache",
            storage,
            0,
            [hd * heads, cache_rows, 1, 1],
            [4, row, row * cache_rows, row * cache_rows],
            None,
        )
        .unwrap();
    let heads_of = g.reshape(x, [hd, heads, max_t, 1], "heads").unwrap();
    let normed = g.rms_norm(heads_of, norm, 1e-6, "k_norm").unwrap();
    let kind = hrx::graph::RopeKind::MropeInterleaved { sections: [3, 3, 2] };
    let rotated = g.rope(normed, positions, kind, 10_000.0, hd, "k_rope").unwrap();
    let rows = g.reshape(rotated, [hd * heads, max_t, 1, 1], "rows").unwrap();
    let written = g.set_rows(cache, rows, slots, "write").unwrap();
    g.mark_output(written);
    (g, written)
}

/// The cache the fused norm-rope-set_rows dispatch writes is device memory (never the host
/// memory of inputs), and holds what the CPU writes; with device memory unmapped, as on a
/// discrete GPU, where the two differ.
#[test]
fn a_cache_written_by_a_fused_dispatch_is_device_memory() {
    let options = DeviceOptions { map_device_memory: false, ..vulkan_common::options("executor-cache") };
    let Some(dev) = vulkan_common::device_with(options) else { return };
    let (max_t, cache_rows) = (4, 6);
    let (graph, written) = rows_into_cache(max_t, cache_rows);
    let mut rng = Rng::new(5);
    let mut w = GgufWriter::new();
    let norm: Vec<u8> = rng.vec(16).iter().flat_map(|v| (1.0 + 0.1 * v).to_le_bytes()).collect();
    w.add_tensor("norm", DType::F32, &[16], norm).unwrap();
    let file = Arc::new(GgufFile::from_bytes("norm.gguf", w.to_bytes()).unwrap());
    let plan = Plan::new(graph.clone(), &VulkanRegistry::PORTABLE).unwrap();
    let fused = (hrx::dispatcher::Where::Gpu, "rms_norm_rope (RMS_NORM+ROPE+SET_ROWS)".to_owned());
    assert_eq!(plan.census().by_kernel.get(&fused), Some(&1), "{:?}", plan.census().by_kernel);
    let mut gpu = VulkanExecutor::new(&dev, vec![plan], std::slice::from_ref(&file)).unwrap();
    assert_eq!(gpu.location(PlanId(0), "cache").unwrap(), Location::Device);
    assert_eq!(gpu.location(PlanId(0), "x").unwrap(), Location::Input);
    let mut cpu = CpuExecutor::new(vec![Plan::new(graph, &CpuRegistry).unwrap()], &[file], Kernels::Reference).unwrap();
    let t = 3;
    let x: Vec<f32> = rng.vec(32 * t);
    let positions: Vec<i32> =
        [7, 8, 9, 0, 0, 0, 7, 8, 9, 0, 0, 0, 1, 2, 3, 0].iter().take(3 * max_t).copied().collect();
    let slots = [5, 0, 2, 0];
    gpu.write_f32(PlanId(0), "x", 0, &x).unwrap();
    gpu.write_i32(PlanId(0), "positions", 0, &positions).unwrap();
    gpu.write_i32(PlanId(0), "slots", 0, &slots).unwrap();
    cpu.f32_buffer(PlanId(0), "x").unwrap()[..32 * t].copy_from_slice(&x);
    cpu.i32_buffer(PlanId(0), "positions").unwrap().copy_from_slice(&positions);
    cpu.i32_buffer(PlanId(0), "slots").unwrap().copy_from_slice(&slots);
    gpu.run(PlanId(0), &[t]).unwrap();
    cpu.run(PlanId(0), &[t]).unwrap();
    let got = gpu.output(PlanId(0), written, &[t]).unwrap();
    let want = cpu.output(PlanId(0), written, &[t]).unwrap();
    assert_eq!(got.len(), 32 * cache_rows);
    let e = nmse(&got, want);
    assert!(e < 1e-8, "nmse {e}");
}
