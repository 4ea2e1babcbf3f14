//! `VulkanRegistry` in a plan: nodes with a Vulkan kernel (by op, dtypes and layout) are placed
//! on the GPU with that kernel's name, every other compute node falls back to the CPU, and the
//! plan never fails because of it. Needs no device.

use hrx::backend::vulkan::VulkanRegistry;
use hrx::dispatcher::{Placement, Plan, Where};
use hrx::graph::{DynAxis, Gelu, Graph, NodeId, RopeKind};
use hrx::quant::DType;

fn kernel_of(plan: &Plan, id: NodeId) -> (Where, &str) {
    match &plan.placements[id.0] {
        Placement::Run { device, kernel, .. } => (device.clone(), kernel.name.as_str()),
        other => panic!("node {} is {other:?}", id.0),
    }
}

#[test]
fn supported_nodes_go_to_the_gpu_the_rest_to_the_cpu() {
    let mut g = Graph::new("block");
    let tokens = g.symbol("tokens", 32);
    let dyn_t = Some(DynAxis { axis: 1, sym: tokens, num: 1, den: 1 });
    let n = 256;
    let x = g.input("x", DType::F32, [n, 32, 1, 1], dyn_t).unwrap();
    let norm_w = g.weight("norm", DType::F32, [n, 1, 1, 1]).unwrap();
    let w_gate = g.weight("gate", DType::Q4K, [n, 512, 1, 1]).unwrap();
    let w_up = g.weight("up", DType::Q6K, [n, 512, 1, 1]).unwrap();
    let w_down = g.weight("down", DType::Q8_0, [512, n, 1, 1]).unwrap();
    let w_q3 = g.weight("q3", DType::Q3K, [n, 64, 1, 1]).unwrap();
    let w_f16 = g.weight("f16", DType::F16, [n, 8, 1, 1]).unwrap();
    let ln_b = g.weight("ln_b", DType::F32, [n, 1, 1, 1]).unwrap();
    let pos = g.input("pos", DType::I32, [3 * 32, 1, 1, 1], None).unwrap();

    let h = g.rms_norm(x, norm_w, 1e-6, "norm").unwrap();
    let gate = g.matmul(w_gate, h, "ffn_gate").unwrap();
    let up = g.matmul(w_up, h, "ffn_up").unwrap();
    let act = g.swiglu(gate, up, "swiglu").unwrap();
    let down = g.matmul(w_down, act, "ffn_down").unwrap();
    let y = g.add(x, down, "residual").unwrap();
    let scaled = g.mul(y, norm_w, "scale").unwrap();
    let q3 = g.matmul(w_q3, scaled, "q3_proj").unwrap();
    let f16 = g.matmul(w_f16, scaled, "f16_proj").unwrap();
    let gelu = g.gelu(q3, Gelu::Erf, "gelu").unwrap();
    let ln = g.layer_norm(scaled, norm_w, ln_b, 1e-5, "ln").unwrap();
    let heads = g.reshape(scaled, [64, 4, 32, 1], "heads").unwrap();
    let roped = g.rope(heads, pos, RopeKind::MropeInterleaved { sections: [8, 8, 8] }, 1e6, 64, "rope").unwrap();
    for out in [gelu, ln, roped, f16] {
        g.mark_output(out);
    }

    let plan = Plan::new(g, &VulkanRegistry::PORTABLE).expect("a plan with CPU fallback never fails");
    assert_eq!(kernel_of(&plan, h), (Where::Gpu, "rms_norm"));
    // 32 planned columns: the tiled kernel.
    assert_eq!(kernel_of(&plan, gate), (Where::Gpu, "mul_mat_q4_k"));
    assert_eq!(kernel_of(&plan, up), (Where::Gpu, "mul_mat_q6_k"));
    assert_eq!(kernel_of(&plan, down), (Where::Gpu, "mul_mat_q8_0"));
    assert_eq!(kernel_of(&plan, f16), (Where::Gpu, "mul_mat_f16"));
    assert_eq!(kernel_of(&plan, act), (Where::Gpu, "swiglu"));
    // The residual ADD runs in the product's dispatch where the arena keeps its output clear
    // of the product's input, else alone.
    match &plan.placements[y.0] {
        Placement::Fused { into } => {
            assert_eq!(*into, down);
            assert!(matches!(&plan.placements[down.0], Placement::Run { group, .. } if group.fused == Some(y)));
        }
        _ => assert_eq!(kernel_of(&plan, y), (Where::Gpu, "add")),
    }
    assert_eq!(kernel_of(&plan, scaled), (Where::Gpu, "mul"));
    assert_eq!(kernel_of(&plan, gelu), (Where::Gpu, "gelu_erf"));
    assert_eq!(kernel_of(&plan, ln), (Where::Gpu, "layer_norm"));
    assert_eq!(kernel_of(&plan, roped), (Where::Gpu, "rope"));
    // No kernel decodes Q3_K weights.
    assert_eq!(kernel_of(&plan, q3).0, Where::Cpu);
    let census = plan.census();
    assert_eq!((census.gpu_nodes, census.cpu_nodes), (11, 1));
}

#[test]
fn one_column_products_use_the_vector_kernel() {
    let mut g = Graph::new("decode");
    let x = g.input("x", DType::F32, [512, 1, 1, 1], None).unwrap();
    let w = g.weight("w", DType::Q4K, [512, 100, 1, 1]).unwrap();
    let y = g.matmul(w, x, "proj").unwrap();
    g.mark_output(y);
    let plan = Plan::new(g, &VulkanRegistry::PORTABLE).unwrap();
    assert_eq!(kernel_of(&plan, y), (Where::Gpu, "mul_mat_vec_q4_k"));
}

#[test]
fn a_misaligned_view_stays_on_the_cpu() {
    let mut g = Graph::new("views");
    let x = g.input("x", DType::F32, [9, 4, 1, 1], None).unwrap();
    let b = g.input("b", DType::F32, [8, 1, 1, 1], None).unwrap();
    let a = g.add(x, x, "a").unwrap();
    // A window 2 bytes into a transient: no kernel reads f32 at that offset.
    let odd = g.view(a, [8, 4, 1, 1], [4, 36, 144, 144], 2, None, "odd").unwrap();
    let fine = g.view(a, [8, 4, 1, 1], [4, 36, 144, 144], 4, None, "fine").unwrap();
    let s1 = g.add(odd, b, "s1").unwrap();
    let s2 = g.add(fine, b, "s2").unwrap();
    g.mark_output(s1);
    g.mark_output(s2);
    let plan = Plan::new(g, &VulkanRegistry::PORTABLE).unwrap();
    assert_eq!(kernel_of(&plan, s1).0, Where::Cpu);
    assert_eq!(kernel_of(&plan, s2), (Where::Gpu, "add"));
}

#[test]
fn a_bias_add_runs_in_its_products_dispatch() {
    // A vision block's linear layers: w · x + b over many columns, twice in a row (the first
    // one's input dies at its product, so only a reserved input keeps the fused store off it).
    let mut g = Graph::new("linear");
    let x = g.input("x", DType::F32, [256, 64, 1, 1], None).unwrap();
    let w1 = g.weight("w1", DType::F16, [256, 512, 1, 1]).unwrap();
    let b1 = g.weight("b1", DType::F32, [512, 1, 1, 1]).unwrap();
    let w2 = g.weight("w2", DType::F16, [512, 256, 1, 1]).unwrap();
    let b2 = g.weight("b2", DType::F32, [256, 1, 1, 1]).unwrap();
    let h = g.gelu(x, Gelu::Erf, "act").unwrap();
    let y1 = g.matmul(w1, h, "fc1").unwrap();
    let z1 = g.add(y1, b1, "fc1_bias").unwrap();
    let y2 = g.matmul(w2, z1, "fc2").unwrap();
    let z2 = g.add(y2, b2, "fc2_bias").unwrap();
    g.mark_output(z2);
    let plan = Plan::new(g, &VulkanRegistry::PORTABLE).unwrap();
    for (product, add) in [(y1, z1), (y2, z2)] {
        assert_eq!(plan.placements[add.0], Placement::Fused { into: product });
        assert!(matches!(&plan.placements[product.0], Placement::Run { group, .. } if group.fused == Some(add)));
    }
}
