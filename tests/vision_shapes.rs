//! The vision encoder on random mmproj files of shapes the oracle does not have (other widths,
//! heads, depths, deepstack blocks, patch and merge sizes, channels, temporal slices): checked
//! against a plain f64 re-implementation, Fast against Reference kernels, and every way a file
//! or an input can be wrong.

mod vision_shapes {
    pub mod mmproj;
    pub mod naive;
}

use hrx::backend::cpu::Kernels;
use hrx::backend::Backend;
use hrx::dispatcher::{CpuRegistry, Kernel, Registry, Where};
use hrx::gguf::{Value, ValueType};
use hrx::graph::{Graph, NodeId};
use hrx::model::{vision, VisionParams};
use hrx::quant::DType;
use hrx::runtime::vision_model::{fit_patches, plan_vision, VisionModel};
use hrx::runtime::RuntimeError;
use vision_shapes::mmproj::{Mmproj, Random, Shape};
use vision_shapes::naive;

/// Three blocks, deepstack after the first and last, 3 heads of 16, temporal patch 1.
fn shape_a() -> Shape {
    Shape {
        vh: 48,
        heads: 3,
        ff: 80,
        deepstack: vec![true, false, true],
        out: 40,
        patch: 4,
        channels: 3,
        temporal: 1,
        merge: 2,
        side: 5,
    }
}

/// Merge 3x3, one channel, three temporal slices, two blocks with no deepstack, 1 head of 32.
fn shape_b() -> Shape {
    Shape {
        vh: 32,
        heads: 1,
        ff: 24,
        deepstack: vec![false, false],
        out: 16,
        patch: 2,
        channels: 1,
        temporal: 3,
        merge: 3,
        side: 4,
    }
}

fn rel_err(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "output length");
    let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
    let err = got.iter().zip(want).fold(0f64, |m, (g, w)| m.max((f64::from(*g) - w).abs()));
    assert!(scale > 0.0 && err.is_finite(), "degenerate output");
    err / scale
}

/// For each (grid_h, grid_w), largest first: encodes with both kernel sets and compares with
/// the f64 re-implementation.
fn check_shape(s: &Shape, grids: &[(usize, usize)]) {
    let file = Mmproj::random(s, 7).file("random.gguf");
    let max = grids.iter().map(|(h, w)| h * w).max().unwrap_or(0);
    let mut models: Vec<VisionModel> = [Kernels::Reference, Kernels::Fast]
        .into_iter()
        .map(|k| VisionModel::load_on(file.clone(), max, &Backend::Cpu(k)).expect("load the random mmproj"))
        .collect();
    let p = &models[0].params();
    assert_eq!(
        (p.n_temporal, p.n_channels, p.pos_side, p.deepstack_blocks.len()),
        (s.temporal, s.channels, s.side, s.deepstack.iter().filter(|&&b| b).count())
    );
    let mut r = Random::new(99);
    for &(gh, gw) in grids {
        let pixels = r.values(gh * gw * s.patch_row(), 1.0, 0.0);
        let want = naive::encode(&file, s, &pixels, gh, gw);
        let outs: Vec<Vec<f32>> =
            models.iter_mut().map(|m| m.encode(&pixels, gh, gw).expect("encode").to_vec()).collect();
        let (e_ref, e_fast) = (rel_err(&outs[0], &want), rel_err(&outs[1], &want));
        let between = rel_err(&outs[1], &outs[0].iter().map(|&v| f64::from(v)).collect::<Vec<_>>());
        eprintln!(
            "{gh}x{gw}: reference {e_ref:.1e}, fast {e_fast:.1e} from the f64 model; fast vs reference {between:.1e}"
        );
        assert!(e_ref < 1e-5 && e_fast < 1e-5 && between < 1e-5, "{gh}x{gw}: {e_ref} {e_fast} {between}");
    }
}

#[test]
fn other_widths_heads_depths_and_deepstack_blocks() {
    // 6x8 fills the plan; 2x2 is one merge block; 2x6 and 4x2 are wide and tall.
    check_shape(&shape_a(), &[(6, 8), (2, 2), (2, 6), (4, 2)]);
}

#[test]
fn merge_three_one_channel_three_frames_no_deepstack() {
    check_shape(&shape_b(), &[(6, 9), (3, 3), (9, 3)]);
}

#[test]
fn the_plan_is_made_once_with_no_refusal_and_binds_the_pixels_from_their_buffer() {
    let s = shape_a();
    let file = Mmproj::random(&s, 1).file("random.gguf");
    let params = VisionParams::from_gguf(&file).expect("params");
    let plan = plan_vision(&params, 48, &CpuRegistry).expect("plan");
    let census = plan.census();
    assert_eq!(census.refused, 0);
    // Rule 3: the per-frame views of the external pixel buffer are bound, not computed.
    assert_eq!(census.skipped, s.temporal, "{census:?}");
    // q, k, v splits and the row reshapes alias their inputs.
    assert!(census.elided >= 3 * s.depth(), "{census:?}");
    assert_eq!(census.cpu_nodes + census.gpu_nodes + census.elided + census.skipped + census.bound, census.nodes);
    assert_eq!(plan.graph.symbols, vec![("n_patches".to_owned(), 48)]);
    // A plan for a size that is not whole merge blocks is refused up front.
    assert!(plan_vision(&params, 47, &CpuRegistry).is_err());
}

/// The CPU's kernels, planned as for a device that binds at most this many bytes per value
/// (a GPU's storage-buffer range).
struct SmallWindows(usize);

impl Registry for SmallWindows {
    fn device(&self) -> Where {
        CpuRegistry.device()
    }
    fn kernel(&self, graph: &Graph, id: NodeId) -> Option<Kernel> {
        CpuRegistry.kernel(graph, id)
    }
    fn max_value_bytes(&self) -> Option<usize> {
        Some(self.0)
    }
}

fn largest_value(params: &VisionParams, patches: usize) -> usize {
    vision::build(params, patches).expect("graph").graph.largest_run_value().expect("values").1
}

/// Issue 11 item 13: a device whose storage-buffer range cannot hold the values of the
/// budget's largest image gets a plan for the most patches it can hold, not a failure.
#[test]
fn a_device_with_small_windows_gets_the_most_patches_it_can_bind() {
    for s in [shape_a(), shape_b()] {
        let params = VisionParams::from_gguf(&Mmproj::random(&s, 1).file("random.gguf")).expect("params");
        let merge = params.merge_patches();
        let asked = 1000 / merge * merge;
        // No limit: every patch asked for (whole merge blocks).
        assert_eq!(fit_patches(&params, 1000, &CpuRegistry).expect("fits"), (asked, None));
        let whole = largest_value(&params, asked);
        assert_eq!(fit_patches(&params, 1000, &SmallWindows(whole)).expect("fits"), (asked, None));
        // A third of the largest value: fewer patches, every value within the limit, and one
        // more merge block would not be.
        let limit = whole / 3;
        let (fitted, why) = fit_patches(&params, 1000, &SmallWindows(limit)).expect("fits");
        assert!(fitted > 0 && fitted < asked && fitted.is_multiple_of(merge), "{fitted} of {asked}");
        assert!(largest_value(&params, fitted) <= limit);
        assert!(largest_value(&params, fitted + merge) > limit);
        let why = why.expect("a reason");
        assert_eq!((why.asked, why.bytes, why.max_bytes), (asked, whole, limit));
        // Not even one merge block: an error at load, naming the limit.
        let err = fit_patches(&params, 1000, &SmallWindows(8)).expect_err("nothing fits");
        assert!(err.to_string().contains("more than the 8 bytes"), "{err}");
    }
}

fn load_error(edit: impl FnOnce(&mut Mmproj)) -> String {
    let mut m = Mmproj::random(&shape_a(), 3);
    edit(&mut m);
    match VisionModel::load_on(m.file("broken-mmproj.gguf"), 48, &Backend::Cpu(Kernels::Reference)) {
        Ok(_) => panic!("a broken file loaded"),
        Err(e) => {
            assert!(matches!(e, RuntimeError::Model(_)), "{e}");
            e.to_string()
        }
    }
}

#[test]
fn broken_files_are_errors_naming_the_file_and_the_key_or_tensor() {
    type Edit = Box<dyn FnOnce(&mut Mmproj)>;
    let cases: Vec<(&str, Edit)> = vec![
        ("general.architecture", Box::new(|m| m.set("general.architecture", Value::String("qwen3vl".into())))),
        ("clip.projector_type", Box::new(|m| m.set("clip.projector_type", Value::String("mlp".into())))),
        ("clip.vision.block_count", Box::new(|m| m.remove("clip.vision.block_count"))),
        ("clip.vision.attention.head_count", Box::new(|m| m.set("clip.vision.attention.head_count", Value::U32(5)))),
        (
            "clip.vision.is_deepstack_layers",
            Box::new(|m| {
                m.set("clip.vision.is_deepstack_layers", Value::Array(ValueType::Bool, vec![Value::Bool(true)]))
            }),
        ),
        (
            "clip.vision.image_mean",
            Box::new(|m| m.set("clip.vision.image_mean", Value::Array(ValueType::F32, vec![Value::F32(0.5)]))),
        ),
        ("clip.vision.image_size", Box::new(|m| m.set("clip.vision.image_size", Value::U32(768)))),
        (
            "clip.vision.attention.layer_norm_epsilon",
            Box::new(|m| m.set("clip.vision.attention.layer_norm_epsilon", Value::F32(-1.0))),
        ),
        ("v.blk.1.attn_qkv.weight", Box::new(|m| m.tensor_mut("v.blk.1.attn_qkv.weight").shape = vec![96, 72])),
        ("v.position_embd.weight", Box::new(|m| m.tensor_mut("v.position_embd.weight").shape = vec![48, 5, 5])),
        ("v.patch_embd.weight", Box::new(|m| m.tensor_mut("v.patch_embd.weight").shape = vec![4, 2, 6, 48])),
        ("v.deepstack.2.fc2.weight", Box::new(|m| m.tensors.retain(|t| t.name != "v.deepstack.2.fc2.weight"))),
        ("v.blk.2.ln2.bias", Box::new(|m| m.tensor_mut("v.blk.2.ln2.bias").dtype = DType::F16)),
    ];
    for (what, edit) in cases {
        let msg = load_error(edit);
        assert!(msg.contains("broken-mmproj.gguf") && msg.contains(what), "error for {what}: {msg}");
    }
}

#[test]
fn inputs_that_do_not_fit_are_errors() {
    let s = shape_a();
    let mut model = VisionModel::load_on(Mmproj::random(&s, 5).file("random.gguf"), 16, &Backend::Cpu(Kernels::Fast))
        .expect("load");
    let row = s.patch_row();
    let cases = [
        ((3, 4), 12 * row, "merge blocks"),
        ((4, 6), 24 * row, "exceed"),
        ((2, 4), 8 * row - 1, "pixel values"),
        ((0, 4), 0, "merge blocks"),
    ];
    for ((gh, gw), len, what) in cases {
        match model.encode(&vec![0.25; len], gh, gw) {
            Err(RuntimeError::Usage(m)) => assert!(m.contains(what), "{gh}x{gw}: {m}"),
            other => panic!("{gh}x{gw} with {len} values: {other:?}"),
        }
    }
    // The model still runs after refusing them.
    let out = model.encode(&vec![0.25; 16 * row], 4, 4).expect("a fitting image");
    assert_eq!(out.len(), 4 * model.params().wide_width());
    assert!(out.iter().all(|v| v.is_finite()));
}
