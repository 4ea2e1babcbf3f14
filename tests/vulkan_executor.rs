//! `VulkanExecutor` on a small hand-built block (norm, three quantized projections, SwiGLU,
//! residual add, scale) against the CPU executor with reference kernels, the same GGUF
//! weights and the same inputs; one recording replayed for several token counts.

mod vulkan_common;

use hrx::backend::cpu::{CpuExecutor, Kernels, PlanId};
use hrx::backend::vulkan::{VulkanExecutor, VulkanRegistry, VkError};
use hrx::gguf::{GgufFile, GgufWriter};
use hrx::graph::{DynAxis, Gelu, Graph, NodeId};
use hrx::hrx::{CpuRegistry, Plan};
use hrx::quant::{quantize_row, DType};
use std::sync::Arc;
use vulkan_common::{nmse, Rng};

const N: usize = 256;
const FF: usize = 512;
const MAX_T: usize = 20;

/// The block and its output node.
fn block() -> (Graph, NodeId) {
    let mut g = Graph::new("block");
    let t = g.symbol("tokens", MAX_T);
    let dyn_t = Some(DynAxis { axis: 1, sym: t, num: 1, den: 1 });
    let x = g.input("x", DType::F32, [N, MAX_T, 1, 1], dyn_t).unwrap();
    let norm = g.weight("norm", DType::F32, [N, 1, 1, 1]).unwrap();
    let gate = g.weight("gate", DType::Q4K, [N, FF, 1, 1]).unwrap();
    let up = g.weight("up", DType::Q6K, [N, FF, 1, 1]).unwrap();
    let down = g.weight("down", DType::Q8_0, [FF, N, 1, 1]).unwrap();
    let proj = g.weight("proj", DType::F16, [N, N, 1, 1]).unwrap();
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
    let mut w = GgufWriter::new();
    for (name, dtype, k, n) in [("norm", DType::F32, N, 1), ("gate", DType::Q4K, N, FF), ("up", DType::Q6K, N, FF), ("down", DType::Q8_0, FF, N), ("proj", DType::F16, N, N)] {
        let row = dtype.row_bytes(k as u64).unwrap() as usize;
        let mut data = vec![0u8; row * n];
        for r in 0..n {
            // Norm weights near 1, projections scaled like trained ones.
            let v: Vec<f32> = (0..k).map(|_| if n == 1 { 1.0 + 0.1 * rng.uniform() } else { rng.uniform() / (k as f32).sqrt() }).collect();
            quantize_row(dtype, &v, &mut data[r * row..(r + 1) * row]).unwrap();
        }
        let shape: Vec<u64> = if n == 1 { vec![k as u64] } else { vec![k as u64, n as u64] };
        w.add_tensor(name, dtype, &shape, data).unwrap();
    }
    Arc::new(GgufFile::from_bytes("block.gguf", w.to_bytes()).unwrap())
}

#[test]
fn a_recorded_plan_matches_the_cpu_executor_at_every_token_count() {
    let Some(dev) = vulkan_common::device("executor") else { return };
    let mut rng = Rng(11);
    let file = weights(&mut rng);
    let (graph, out) = block();
    let gpu_plan = Plan::new(graph.clone(), &VulkanRegistry).unwrap();
    assert_eq!(gpu_plan.census().cpu_nodes, 0);
    let mut gpu = VulkanExecutor::new(&dev, vec![gpu_plan], std::slice::from_ref(&file)).unwrap();
    let mut cpu = CpuExecutor::new(vec![Plan::new(graph, &CpuRegistry).unwrap()], &[file], Kernels::Reference).unwrap();
    for t in [MAX_T, 1, 7, MAX_T] {
        let x: Vec<f32> = rng.vec(N * t);
        gpu.write_f32(PlanId(0), "x", 0, &x).unwrap();
        cpu.f32_buffer(PlanId(0), "x").unwrap()[..N * t].copy_from_slice(&x);
        gpu.run(PlanId(0), &[t]).unwrap();
        cpu.run(PlanId(0), &[t]).unwrap();
        let got = gpu.output(PlanId(0), out, &[t]).unwrap();
        let want = cpu.output(PlanId(0), out, &[t]).unwrap();
        let e = nmse(&got, want);
        eprintln!("executor tokens={t}: nmse {e:.3e}");
        assert_eq!(got.len(), N * t);
        assert!(e < 5e-4, "tokens={t}: nmse {e}");
    }
    assert!(matches!(gpu.run(PlanId(0), &[MAX_T + 1]), Err(VkError::Invalid(_))));
}

#[test]
fn a_plan_with_cpu_nodes_is_refused_by_name() {
    let Some(dev) = vulkan_common::device("executor-mixed") else { return };
    let mut g = Graph::new("mixed");
    let x = g.input("x", DType::F32, [8, 2, 1, 1], None).unwrap();
    let y = g.gelu(x, Gelu::Tanh, "act").unwrap();
    g.mark_output(y);
    // Planned for the CPU: every compute node is a CPU node.
    let plan = Plan::new(g, &CpuRegistry).unwrap();
    match VulkanExecutor::new(&dev, vec![plan], &[]) {
        Err(VkError::Invalid(m)) => assert!(m.contains("act"), "{m}"),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("a plan with a CPU node was accepted"),
    }
}
