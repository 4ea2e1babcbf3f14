//! Images end to end against HF transformers: the prompt ids HF's processor makes, the last
//! logits and the greedy tokens, for every image case of every oracle model — fed HF's own
//! pixel values, and from the image file through hrx's decoder and resizer.

mod common;

use common::cases::{greedy_agreement, ids_of, max_abs_diff, Case};
use hrx::backend::cpu::Kernels;
use hrx::backend::DeviceChoice;
use hrx::image::PreprocessConfig;
use hrx::runtime::describe::{Describer, ImageOptions};
use hrx::runtime::generate::GenerateConfig;
use hrx::runtime::sampler::SamplerConfig;
use hrx::runtime::session::Session;
use hrx::runtime::text_model::TextOptions;
use std::path::Path;
use tinyjson::JsonValue;

const CASES: [&str; 6] = ["I1", "I2", "I3", "I4", "I5", "I6"];

fn describer(oracle: &Path, model: &str, mmproj: &str, kernels: Kernels) -> Describer {
    let text = TextOptions {
        n_ctx: 512,
        n_seq: 1,
        chunk: 128,
        max_outputs: 1,
        kernels,
        device: DeviceChoice::Cpu,
        check: false,
    };
    let images = ImageOptions { max_pixels: PreprocessConfig::HF_MAX_PIXELS / 16, ..ImageOptions::default() };
    Describer::load(&oracle.join("models").join(model), &oracle.join("models").join(mmproj), text, images)
        .expect("models load")
}

/// Runs one case; `from_file` decodes the image file instead of using HF's pixel values.
fn check_case(d: &mut Describer, oracle: &Path, cases: &str, name: &str, tol: f64, from_file: bool) {
    let case = Case::load(&oracle.join("cases").join(cases), name);
    let image = if from_file {
        let file: &String = case.json["image"]["file"].get().unwrap();
        d.encode_file(&oracle.join("images").join(file)).expect("image encodes")
    } else {
        d.encode_patches(&case.hf_patches(oracle)).expect("pixels encode")
    };
    let text = case.user_text();
    let (ids, pieces) = d.prompt(std::slice::from_ref(&image), &text, None).unwrap();
    assert_eq!(ids, case.ids("input_ids"), "{cases} {name}: prompt ids");
    // M-RoPE positions as the reference's get_rope_index makes them.
    let layout = Session::new().layout(&pieces, d.text().params().wide_width()).unwrap();
    let (positions, next) = (layout.positions, layout.next_position);
    let rows: &Vec<JsonValue> = case.json["position_ids"].get().unwrap();
    for (c, row) in rows.iter().enumerate() {
        let want = ids_of(row);
        let got: Vec<u32> = positions.iter().map(|p| p[c] as u32).collect();
        assert_eq!(got, want, "{cases} {name}: position row {c}");
    }
    assert_eq!(next as f64, *case.json["next_position"].get::<f64>().unwrap(), "{cases} {name}: next position");
    let config = GenerateConfig {
        max_new_tokens: 16,
        sampler: SamplerConfig::default(),
        stop_strings: vec![],
        stop_at_eog: false,
        logprobs: None,
        json: None,
    };
    let (_, g) =
        d.run(std::slice::from_ref(&image), &text, None, &config, |_| std::ops::ControlFlow::Continue(())).unwrap();
    let err = max_abs_diff(&g.prompt_logits, &case.f32_array("logits_last"));
    let (greedy, margins) = case.greedy();
    let (compared, equal) = greedy_agreement(&g.tokens, &greedy, &margins, tol);
    let source = if from_file { "file" } else { "HF pixels" };
    eprintln!("{cases} {name} ({source}): max abs logit error {err:.2e} (tol {tol:.0e}), greedy {equal}/{compared} comparable steps");
    assert!(err <= tol, "{cases} {name} ({source}): logits off by {err:.3e}");
    assert_eq!(equal, compared, "{cases} {name} ({source}): greedy {:?} vs {:?}", g.tokens, greedy);
}

fn check_model(model: &str, mmproj: &str, cases: &str) {
    let Some(oracle) = common::oracle() else { return };
    let mut d = describer(&oracle, model, mmproj, Kernels::Fast);
    for name in CASES {
        check_case(&mut d, &oracle, cases, name, 1e-3, false);
        // From the file: PNGs decode exactly as Pillow does; JPEG decoders differ from
        // libjpeg-turbo by a level or two, so the JPEG case gets 10x the tolerance.
        let tol = if name == "I2" { 1e-2 } else { 1e-3 };
        check_case(&mut d, &oracle, cases, name, tol, true);
    }
}

#[test]
fn tiny_f16_image_cases_match_hf() {
    check_model("tiny/qwen3vl-tiny-F16.gguf", "tiny/mmproj-qwen3vl-tiny-F16.gguf", "tiny");
}

#[test]
fn tiny_q8_image_cases_match_the_exact_math_reference() {
    check_model("tiny/qwen3vl-tiny-Q8_0.gguf", "tiny/mmproj-qwen3vl-tiny-F16.gguf", "tiny-q8");
}

#[test]
fn small_q4km_image_cases_match_the_exact_math_reference() {
    check_model("small/qwen3vl-small-Q4_K_M.gguf", "small/mmproj-qwen3vl-small-F16.gguf", "small-q4km");
}

#[test]
fn reference_kernels_agree_on_the_smallest_image() {
    let Some(oracle) = common::oracle() else { return };
    let mut d =
        describer(&oracle, "tiny/qwen3vl-tiny-F16.gguf", "tiny/mmproj-qwen3vl-tiny-F16.gguf", Kernels::Reference);
    check_case(&mut d, &oracle, "tiny", "I4", 1e-3, false);
}

/// Several images in one vision run (the reference and the fast kernels) each get what they
/// get alone.
#[test]
fn images_encoded_together_match_each_alone_on_the_cpu() {
    let Some(oracle) = common::oracle() else { return };
    let mmproj = oracle.join("models/tiny/mmproj-qwen3vl-tiny-F16.gguf");
    // The fast kernels take another product for 16 rows and more (x86_gemm's GEMM_MIN_ROWS).
    for (kernels, tolerance) in [(Kernels::Reference, 1e-12), (Kernels::Fast, 1e-7)] {
        let mut vision = hrx::runtime::vision_model::VisionModel::load(&mmproj, 64, kernels).expect("loads");
        common::together::images_encoded_together_match_each_alone(&mut vision, tolerance);
    }
}
