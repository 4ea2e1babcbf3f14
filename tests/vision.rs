//! The vision encoder against HF transformers (the oracle's float32 references): merged
//! embeddings and every deepstack feature of every image case of both models, with both kernel
//! sets; and the bilinear position taps on small grids.

mod common;

use hrx::backend::cpu::Kernels;
use hrx::gguf::GgufFile;
use hrx::image::patch_positions as merge_block_order;
use hrx::model::vision_grid::{pos_taps, TAPS};
use hrx::model::{TextParams, VisionParams};
use hrx::runtime::vision_model::VisionModel;
use std::path::Path;
use tinyjson::JsonValue;

const CASES: [&str; 6] = ["I1", "I2", "I3", "I4", "I5", "I6"];
const TOLERANCE: f64 = 1e-3;

fn read_f32(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

/// One image case: HF's pixel values and grid, and the expected output slices (merged
/// embeddings, then deepstack features in order).
struct Case {
    name: String,
    grid: (usize, usize),
    pixels: Vec<f32>,
    slices: Vec<(String, Vec<f32>)>,
}

fn load_case(oracle: &Path, model: &str, case: &str) -> Case {
    let dir = oracle.join("cases").join(model);
    let path = dir.join(format!("{case}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let json: JsonValue = text.parse().unwrap_or_else(|e| panic!("{}: {e:?}", path.display()));
    let image = &json["image"];
    let thw: Vec<usize> = match &image["image_grid_thw"] {
        JsonValue::Array(a) => a.iter().map(|v| *v.get::<f64>().expect("grid number") as usize).collect(),
        v => panic!("{}: image_grid_thw {v:?}", path.display()),
    };
    assert_eq!(thw.len(), 3, "{}", path.display());
    assert_eq!(thw[0], 1, "{}: one frame", path.display());
    let pixel_file: &String = image["pixel_values"]["file"].get().expect("pixel_values file");
    let arrays = &json["arrays"];
    let mut slices = vec![("vision_embeds".to_owned(), read_f32(&dir.join(format!("{case}.vision_embeds.f32"))))];
    for k in 0.. {
        let name = format!("deepstack_{k}");
        if arrays.get::<std::collections::HashMap<String, JsonValue>>().is_some_and(|a| a.contains_key(&name)) {
            slices.push((name.clone(), read_f32(&dir.join(format!("{case}.{name}.f32")))));
        } else {
            break;
        }
    }
    let pixels = read_f32(&oracle.join("images").join(pixel_file));
    Case { name: case.to_owned(), grid: (thw[1], thw[2]), pixels, slices }
}

fn rel_err(got: &[f32], want: &[f32]) -> f64 {
    let scale = want.iter().fold(0f64, |m, v| m.max(f64::from(v.abs())));
    let err = got.iter().zip(want).fold(0f64, |m, (g, w)| m.max(f64::from((g - w).abs())));
    if got.len() != want.len() || !err.is_finite() {
        return f64::INFINITY;
    }
    err / scale
}

/// Encodes every image case of `model` (largest image first, so later, smaller images run on
/// buffers holding a previous image's data) and compares every output slice with HF's.
fn check_oracle(model: &str, kernels: Kernels) {
    let Some(oracle) = common::oracle() else { return };
    let mut cases: Vec<Case> = CASES.iter().map(|c| load_case(&oracle, model, c)).collect();
    cases.sort_by_key(|c| std::cmp::Reverse(c.grid.0 * c.grid.1));
    let max = cases[0].grid.0 * cases[0].grid.1;
    let path = oracle.join("models").join(model).join(format!("mmproj-qwen3vl-{model}-F16.gguf"));
    let mut vm = VisionModel::load(&path, max, kernels).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(vm.plan().census().refused, 0);
    let (width, n_out) = (vm.params().wide_width(), vm.params().n_out);
    let mut worst = 0f64;
    let mut last = Vec::new();
    for case in &cases {
        assert_eq!(case.slices.len(), 1 + vm.params().n_deepstack(), "{model} {}: slices", case.name);
        let wide =
            vm.encode(&case.pixels, case.grid.0, case.grid.1).unwrap_or_else(|e| panic!("{model} {}: {e}", case.name));
        assert_eq!(wide.len() / width * vm.params().merge_patches(), case.grid.0 * case.grid.1);
        let mut line = format!("{model} {} {kernels:?}:", case.name);
        for (s, (name, want)) in case.slices.iter().enumerate() {
            let got: Vec<f32> =
                wide.chunks_exact(width).flat_map(|row| row[s * n_out..(s + 1) * n_out].iter().copied()).collect();
            let err = rel_err(&got, want);
            line += &format!(" {name} {err:.1e}");
            assert!(err < TOLERANCE, "{model} {} {name}: relative error {err:e}", case.name);
            worst = worst.max(err);
        }
        eprintln!("{line}");
        last = wide.to_vec();
    }
    // Nothing carries over from one run to the next: the last image again gives the same bits.
    let case = &cases[cases.len() - 1];
    let again = vm.encode(&case.pixels, case.grid.0, case.grid.1).expect("encode again");
    assert!(again[..] == last[..], "{model} {}: a repeated image gave different output", case.name);
    eprintln!("{model} {kernels:?}: worst relative error {worst:.1e}");
}

#[test]
fn oracle_tiny_reference_kernels() {
    check_oracle("tiny", Kernels::Reference);
}

#[test]
fn oracle_small_reference_kernels() {
    check_oracle("small", Kernels::Reference);
}

#[test]
fn oracle_tiny_fast_kernels() {
    check_oracle("tiny", Kernels::Fast);
}

#[test]
fn oracle_small_fast_kernels() {
    check_oracle("small", Kernels::Fast);
}

#[test]
fn vision_rows_are_as_wide_as_the_text_models_input() {
    let Some(oracle) = common::oracle() else { return };
    // The small model's F16 text file is not shipped; its quantized one has the same shape.
    for (model, text) in [("tiny", "qwen3vl-tiny-F16.gguf"), ("small", "qwen3vl-small-Q4_K_M.gguf")] {
        let dir = oracle.join("models").join(model);
        let open = |name: &str| GgufFile::open(dir.join(name)).unwrap_or_else(|e| panic!("{e}"));
        let vision = VisionParams::from_gguf(&open(&format!("mmproj-qwen3vl-{model}-F16.gguf")))
            .unwrap_or_else(|e| panic!("{e}"));
        let text = TextParams::from_gguf(&open(text)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((vision.n_out, vision.n_deepstack()), (text.n_embd, text.n_deepstack), "{model}");
        assert_eq!(vision.wide_width(), text.wide_width(), "{model}");
        assert_eq!(
            (vision.n_temporal, vision.n_channels, vision.patch_row(), vision.pos_side),
            (2, 3, 1536, 48),
            "{model}"
        );
        assert_eq!(vision.deepstack_blocks, vec![1, 2, 3], "{model}");
    }
}

#[test]
fn merge_block_order_walks_blocks_then_patches_row_major() {
    let order = merge_block_order(4, 6, 2);
    assert_eq!(order.len(), 24);
    assert_eq!(&order[..8], &[(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (0, 3), (1, 2), (1, 3)]);
    assert_eq!(order[12], (2, 0));
    assert_eq!(order[23], (3, 5));
    let mut sorted = order.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), 24, "every patch once");
}

#[test]
fn bilinear_taps_align_corners_on_a_small_grid() {
    // A 3x3 grid resampled to 2 rows x 5 columns: rows sit at 0 and 2, columns at
    // 0, 0.5, 1, 1.5, 2 (align_corners=True: the corners coincide).
    let (side, gh, gw) = (3, 2, 5);
    let patches: Vec<(usize, usize)> = (0..gh).flat_map(|r| (0..gw).map(move |c| (r, c))).collect();
    let taps = pos_taps(side, gh, gw, &patches);
    assert_eq!(taps.ids.len(), patches.len() * TAPS);
    // Patch (0, 1): column 0.5 between grid columns 0 and 1, row 0 exactly.
    assert_eq!(&taps.ids[4..8], &[0, 1, 3, 4]);
    assert_eq!(&taps.weights[4..8], &[0.5, 0.5, 0.0, 0.0]);
    // Patch (1, 4): the last grid point exactly (upper taps clamped to the grid).
    assert_eq!(&taps.ids[36..40], &[8, 8, 8, 8]);
    assert_eq!(&taps.weights[36..40], &[1.0, 0.0, 0.0, 0.0]);
    // Interpolating a table that is linear in (row, col) gives the linear function at the
    // sample points i * (side - 1) / (n - 1).
    let (side, gh, gw) = (7, 5, 4);
    let f = |r: f64, c: f64| 3.0 * r - 2.0 * c + 1.0;
    let table: Vec<f64> = (0..side * side).map(|k| f((k / side) as f64, (k % side) as f64)).collect();
    let patches = merge_block_order(gh - 1, gw, 2).into_iter().chain([(4, 0), (4, 3)]).collect::<Vec<_>>();
    let taps = pos_taps(side, gh, gw, &patches);
    for (i, &(r, c)) in patches.iter().enumerate() {
        let ids = &taps.ids[i * TAPS..(i + 1) * TAPS];
        let ws = &taps.weights[i * TAPS..(i + 1) * TAPS];
        assert!((ws.iter().sum::<f32>() - 1.0).abs() < 1e-6 && ws.iter().all(|&w| w >= 0.0));
        let got: f64 = ids.iter().zip(ws).map(|(&id, &w)| f64::from(w) * table[id as usize]).sum();
        let want = f(r as f64 * 6.0 / 4.0, c as f64 * 6.0 / 3.0);
        assert!((got - want).abs() < 1e-5, "patch ({r}, {c}): {got} vs {want}");
    }
    // One row of patches samples grid row 0 only.
    let taps = pos_taps(4, 1, 2, &[(0, 0), (0, 1)]);
    assert_eq!(taps.ids, vec![0, 1, 0, 1, 3, 3, 3, 3]);
    assert_eq!(taps.weights, vec![1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]);
}
