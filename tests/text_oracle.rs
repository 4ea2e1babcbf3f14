//! The text decoder against HF transformers (float32): last-position logits and greedy tokens
//! for every text case, with the reference kernels and the fast ones.

mod common;

use common::cases::{greedy_agreement, max_abs_diff, top_logprob_gap, Case};
use hrx::backend::cpu::Kernels;
use hrx::backend::DeviceChoice;
use hrx::runtime::generate::{generate, GenerateConfig};
use hrx::runtime::sampler::SamplerConfig;
use hrx::runtime::session::{PromptPiece, Session};
use hrx::runtime::text_model::{TextModel, TextOptions, TokenInput};

struct Variant {
    model: &'static str,
    cases: &'static str,
    /// llama.cpp's outputs for the same file.
    llamacpp: &'static str,
    /// Max abs logit error allowed for the reference and the fast kernels. The issue allows
    /// the fast path 1e-2 (Q8_0) and 3e-2 (Q4_K_M); with 16-bit activations it stays
    /// within 2e-4, so it is held to 1e-3 like the reference.
    tol_reference: f64,
    tol_fast: f64,
}

const VARIANTS: &[Variant] = &[
    Variant {
        model: "tiny/qwen3vl-tiny-F16.gguf",
        cases: "tiny",
        llamacpp: "tiny/F16",
        tol_reference: 1e-3,
        tol_fast: 1e-3,
    },
    Variant {
        model: "tiny/qwen3vl-tiny-Q8_0.gguf",
        cases: "tiny-q8",
        llamacpp: "tiny/Q8_0",
        tol_reference: 1e-3,
        tol_fast: 1e-3,
    },
    Variant {
        model: "small/qwen3vl-small-Q4_K_M.gguf",
        cases: "small-q4km",
        llamacpp: "small/Q4_K_M",
        tol_reference: 1e-3,
        tol_fast: 1e-3,
    },
];

fn check(variant: &Variant, kernels: Kernels) {
    let Some(oracle) = common::oracle() else { return };
    let tol = if kernels == Kernels::Reference { variant.tol_reference } else { variant.tol_fast };
    let options = TextOptions {
        n_ctx: 512,
        n_seq: 1,
        chunk: 128,
        max_outputs: 1,
        kernels,
        device: DeviceChoice::Cpu,
        check: false,
    };
    let mut model = TextModel::load(&oracle.join("models").join(variant.model), options).expect("model loads");
    for name in ["T1", "T2", "T3"] {
        let case = Case::load(&oracle.join("cases").join(variant.cases), name);
        let ids = case.ids("input_ids");
        let pieces: Vec<PromptPiece> = ids.iter().map(|&id| PromptPiece::Token(id)).collect();
        let config = GenerateConfig {
            max_new_tokens: 16,
            sampler: SamplerConfig::default(),
            stop_strings: vec![],
            stop_at_eog: false,
            logprobs: None,
            json: None,
        };
        let out = generate(&mut model, &mut Session::new(), &pieces, &config, |_| std::ops::ControlFlow::Continue(()))
            .expect("generates");
        let reference = case.f32_array("logits_last");
        let err = max_abs_diff(&out.prompt_logits, &reference);
        let gap = top_logprob_gap(&out.prompt_logits, &reference, 10);
        let (greedy, margins) = case.greedy();
        let (compared, equal) = greedy_agreement(&out.tokens, &greedy, &margins, tol);
        eprintln!(
            "{} {name} {kernels:?}: max abs logit error {err:.2e} (tol {tol:.0e}), top-10 logprob gap {gap:.2e}, greedy {equal}/{compared} comparable steps",
            variant.cases
        );
        assert!(err <= tol, "{} {name}: logits off by {err:.3e} > {tol:.0e}", variant.cases);
        let (ours, llama) = llamacpp_gaps(
            &oracle.join("llamacpp").join(variant.llamacpp).join(format!("{name}.json")),
            &out.prompt_logits,
            &reference,
        );
        eprintln!("{} {name} {kernels:?}: first-step top-10 log-prob gap to the reference over llama.cpp's top 10: hrx {ours:.2e}, llama.cpp {llama:.2e}", variant.cases);
        assert!(ours <= llama, "{} {name}: hrx is farther from the reference than llama.cpp", variant.cases);
        assert_eq!(
            equal, compared,
            "{} {name}: greedy tokens differ at step {equal}: {:?} vs {:?}",
            variant.cases, out.tokens, greedy
        );
        // The graph's ARGMAX (read alone by plain greedy steps) chooses what the sampler does
        // from the logits (read whole when logprobs are asked for).
        let with_logits = GenerateConfig { logprobs: Some(1), ..config };
        let hosted =
            generate(&mut model, &mut Session::new(), &pieces, &with_logits, |_| std::ops::ControlFlow::Continue(()))
                .expect("generates with logprobs");
        assert_eq!(out.tokens, hosted.tokens, "{} {name}: the graph's argmax against the sampler's", variant.cases);
    }
}

fn log_softmax(v: &[f32]) -> Vec<f64> {
    let m = v.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = m + v.iter().map(|&x| (x as f64 - m).exp()).sum::<f64>().ln();
    v.iter().map(|&x| x as f64 - lse).collect()
}

/// Max |log-prob - reference log-prob| over llama.cpp's first-step top 10, for hrx and for
/// llama.cpp.
fn llamacpp_gaps(path: &std::path::Path, ours: &[f32], reference: &[f32]) -> (f64, f64) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let json: tinyjson::JsonValue = text.parse().expect("llama.cpp case JSON");
    let steps: &Vec<tinyjson::JsonValue> = json["steps"].get().expect("steps");
    let top: &Vec<tinyjson::JsonValue> = steps[0]["top"].get().expect("top");
    let (lo, lr) = (log_softmax(ours), log_softmax(reference));
    let mut gaps = (0f64, 0f64);
    for t in top {
        let id = *t["id"].get::<f64>().expect("id") as usize;
        let lp = *t["logprob"].get::<f64>().expect("logprob");
        gaps.0 = gaps.0.max((lo[id] - lr[id]).abs());
        gaps.1 = gaps.1.max((lp - lr[id]).abs());
    }
    gaps
}

#[test]
fn tiny_f16_matches_hf() {
    check(&VARIANTS[0], Kernels::Reference);
    check(&VARIANTS[0], Kernels::Fast);
}

#[test]
fn tiny_q8_matches_the_exact_math_reference() {
    check(&VARIANTS[1], Kernels::Reference);
    check(&VARIANTS[1], Kernels::Fast);
}

#[test]
fn small_q4km_matches_the_exact_math_reference() {
    check(&VARIANTS[2], Kernels::Reference);
    check(&VARIANTS[2], Kernels::Fast);
}

/// A text prompt after an image's rows (nonzero deepstack parts) gives the logits it gives in a
/// fresh model: text rows are written without their deepstack part only where it is known to
/// be zero, so what an image's rows left there is cleared first.
#[test]
fn text_after_image_rows_matches_a_fresh_model() {
    let Some(oracle) = common::oracle() else { return };
    let path = oracle.join("models/tiny/qwen3vl-tiny-F16.gguf");
    let options = || TextOptions {
        n_ctx: 64,
        n_seq: 1,
        chunk: 16,
        max_outputs: 1,
        kernels: Kernels::Fast,
        device: DeviceChoice::Cpu,
        check: false,
    };
    let mut fresh = TextModel::load(&path, options()).expect("model loads");
    let mut used = TextModel::load(&path, options()).expect("model loads");
    let width = used.params().wide_width();
    assert!(width > used.params().n_embd, "the tiny model has deepstack layers");
    let image_row: Vec<f32> = (0..width).map(|i| ((i * 7 % 13) as f32 - 6.0) / 3.0).collect();
    let positions = |n: usize| (0..n).map(|t| [t as i32; 3]).collect::<Vec<_>>();
    let with_image = [TokenInput::Embedding(&image_row), TokenInput::Text(11), TokenInput::Embedding(&image_row)];
    used.forward(&with_image, &positions(3), 0, &[2]).expect("a prompt with image rows");
    // Prompts shorter than, as long as, and longer than the image's: each row's deepstack part
    // must read as zero.
    for n in [2, 3, 5] {
        let text: Vec<TokenInput> = (0..n).map(|t| TokenInput::Text(100 + t as u32)).collect();
        let want = fresh.forward(&text, &positions(n), 0, &[n - 1]).expect("fresh");
        let got = used.forward(&text, &positions(n), 0, &[n - 1]).expect("after the image");
        assert_eq!(got, want, "{n} text tokens after an image's rows");
    }
}
