//! The text decoder against HF transformers (float32): last-position logits and greedy tokens
//! for every text case, with the reference kernels and the fast ones.

mod common;

use common::cases::{greedy_agreement, max_abs_diff, top_logprob_gap, Case};
use hrx::backend::cpu::Kernels;
use hrx::runtime::generate::{generate, GenerateConfig};
use hrx::runtime::sampler::SamplerConfig;
use hrx::runtime::session::{PromptPiece, Session};
use hrx::runtime::text_model::{TextModel, TextOptions};

struct Variant {
    model: &'static str,
    cases: &'static str,
    /// Max abs logit error allowed for the reference and the fast kernels. The issue allows
    /// the fast path 1e-2 (Q8_0) and 3e-2 (Q4_K_M); with 16-bit activations it stays
    /// within 2e-4, so it is held to 1e-3 like the reference.
    tol_reference: f64,
    tol_fast: f64,
}

const VARIANTS: &[Variant] = &[
    Variant { model: "tiny/qwen3vl-tiny-F16.gguf", cases: "tiny", tol_reference: 1e-3, tol_fast: 1e-3 },
    Variant { model: "tiny/qwen3vl-tiny-Q8_0.gguf", cases: "tiny-q8", tol_reference: 1e-3, tol_fast: 1e-3 },
    Variant { model: "small/qwen3vl-small-Q4_K_M.gguf", cases: "small-q4km", tol_reference: 1e-3, tol_fast: 1e-3 },
];

fn check(variant: &Variant, kernels: Kernels) {
    let Some(oracle) = common::oracle() else { return };
    let tol = if kernels == Kernels::Reference { variant.tol_reference } else { variant.tol_fast };
    let options = TextOptions { n_ctx: 512, chunk: 128, kernels };
    let mut model = TextModel::load(&oracle.join("models").join(variant.model), options).expect("model loads");
    for name in ["T1", "T2", "T3"] {
        let case = Case::load(&oracle.join("cases").join(variant.cases), name);
        let ids = case.ids("input_ids");
        let pieces: Vec<PromptPiece> = ids.iter().map(|&id| PromptPiece::Token(id)).collect();
        let config = GenerateConfig { max_new_tokens: 16, sampler: SamplerConfig::default(), stop_strings: vec![], stop_at_eog: false };
        let out = generate(&mut model, &mut Session::new(), &pieces, &config, |_| {}).expect("generates");
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
        assert_eq!(equal, compared, "{} {name}: greedy tokens differ at step {equal}: {:?} vs {:?}", variant.cases, out.tokens, greedy);
    }
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
