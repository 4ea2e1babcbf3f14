//! The text decoder on shapes the oracle lacks (random weights from `hrx synth`'s writer):
//! other head counts, head_dim, kv heads, layer and deepstack counts; the fast kernels agree
//! with the reference ones, chunked prefill agrees with one-call prefill, and prompts prefilled
//! together agree with each alone.

mod common;

use hrx::backend::cpu::Kernels;
use hrx::backend::DeviceChoice;
use hrx::model::synth::{text_model, TextSpec, WeightFormat};
use hrx::runtime::session::{PromptPiece, Session};
use hrx::runtime::text_model::{TextModel, TextOptions};
use std::path::PathBuf;

fn write(spec: &TextSpec, name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("hrx-shapes-{}-{name}.gguf", std::process::id()));
    std::fs::write(&path, text_model(spec, None).expect("synth")).expect("write");
    path
}

fn last_logits(path: &std::path::Path, kernels: Kernels, chunk: usize, prompt: &[u32]) -> Vec<f32> {
    let mut model = TextModel::load(
        path,
        TextOptions { n_ctx: 64, n_seq: 1, chunk, max_outputs: 1, kernels, device: DeviceChoice::Cpu, check: false },
    )
    .expect("loads");
    let pieces: Vec<PromptPiece> = prompt.iter().map(|&t| PromptPiece::Token(t)).collect();
    Session::new().feed(&mut model, &pieces).expect("runs")
}

fn nmse(a: &[f32], b: &[f32]) -> f64 {
    let e: f64 = a.iter().zip(b).map(|(x, y)| f64::from(x - y).powi(2)).sum();
    e / b.iter().map(|y| f64::from(*y).powi(2)).sum::<f64>()
}

#[test]
fn other_shapes_run_and_fast_agrees_with_reference() {
    let specs = [
        TextSpec {
            n_layer: 3,
            n_embd: 96,
            n_ff: 160,
            n_head: 6,
            n_head_kv: 3,
            head_dim: 32,
            n_vocab: 300,
            n_deepstack: 2,
            rope_sections: [6, 5, 5],
            weights: WeightFormat::F16,
            tied_output: true,
            seed: 3,
        },
        TextSpec {
            n_layer: 1,
            n_embd: 64,
            n_ff: 96,
            n_head: 2,
            n_head_kv: 1,
            head_dim: 48,
            n_vocab: 270,
            n_deepstack: 3,
            rope_sections: [8, 4, 4],
            weights: WeightFormat::Q8_0,
            tied_output: false,
            seed: 4,
        },
        TextSpec {
            n_layer: 2,
            n_embd: 256,
            n_ff: 256,
            n_head: 8,
            n_head_kv: 4,
            head_dim: 32,
            n_vocab: 280,
            n_deepstack: 0,
            rope_sections: [6, 5, 5],
            weights: WeightFormat::Q4KM,
            tied_output: true,
            seed: 5,
        },
    ];
    let prompt: Vec<u32> = (0..11).map(|i| (i * 37 + 5) % 260).collect();
    for (i, spec) in specs.iter().enumerate() {
        let path = write(spec, &i.to_string());
        let reference = last_logits(&path, Kernels::Reference, 16, &prompt);
        assert_eq!(reference.len(), spec.n_vocab);
        assert!(reference.iter().all(|x| x.is_finite()));
        let fast = last_logits(&path, Kernels::Fast, 16, &prompt);
        let chunked = last_logits(&path, Kernels::Fast, 4, &prompt);
        let (e_fast, e_chunk) = (nmse(&fast, &reference), nmse(&chunked, &fast));
        eprintln!("spec {i}: fast vs reference nmse {e_fast:.2e}, chunked vs one call {e_chunk:.2e}");
        // 16-bit activation rounding in the fast path: ~1e-8 on quantized weights.
        assert!(e_fast < 1e-6, "spec {i}: fast vs reference {e_fast:.2e}");
        assert!(e_chunk < 1e-12, "spec {i}: chunked prefill differs {e_chunk:.2e}");
        std::fs::remove_file(&path).ok();
    }
}

#[test]
fn inconsistent_files_are_refused_with_the_tensor_named() {
    let spec = TextSpec {
        n_layer: 1,
        n_embd: 64,
        n_ff: 64,
        n_head: 2,
        n_head_kv: 2,
        head_dim: 32,
        n_vocab: 270,
        n_deepstack: 0,
        rope_sections: [4, 4, 4],
        weights: WeightFormat::F16,
        tied_output: true,
        seed: 6,
    };
    let bytes = text_model(&spec, None).unwrap();
    // Claim a wider feed-forward than the tensors have.
    let file = hrx::gguf::GgufFile::from_bytes("bad.gguf", bytes).unwrap();
    let mut w = hrx::gguf::GgufWriter::new();
    for (k, v) in file.metadata() {
        w.set(k, v.clone());
    }
    w.set("qwen3vl.feed_forward_length", hrx::gguf::Value::U32(128));
    for t in file.tensors() {
        w.add_tensor(&t.name, t.dtype, t.shape(), file.tensor_data(t).to_vec()).unwrap();
    }
    let bad = hrx::gguf::GgufFile::from_bytes("bad.gguf", w.to_bytes()).unwrap();
    let err = hrx::model::TextParams::from_gguf(&bad).expect_err("refused").to_string();
    assert!(
        err.contains("bad.gguf") && err.contains("blk.0.ffn_gate.weight") && err.contains("expected [64, 128]"),
        "{err}"
    );
}

#[test]
fn a_caller_can_stop_the_generation_between_tokens() {
    // What serve does when a streaming client goes away and generate when stdout closes.
    use hrx::runtime::generate::{generate, GenerateConfig, StopReason};
    use hrx::runtime::sampler::SamplerConfig;
    use std::ops::ControlFlow;
    let spec = TextSpec {
        n_layer: 1,
        n_embd: 64,
        n_ff: 64,
        n_head: 2,
        n_head_kv: 1,
        head_dim: 32,
        n_vocab: 300,
        n_deepstack: 0,
        rope_sections: [4, 4, 4],
        weights: WeightFormat::F16,
        tied_output: true,
        seed: 8,
    };
    let path = write(&spec, "cancel");
    let mut model = TextModel::load(
        &path,
        TextOptions {
            n_ctx: 64,
            n_seq: 1,
            chunk: 8,
            max_outputs: 1,
            kernels: Kernels::Fast,
            device: DeviceChoice::Cpu,
            check: false,
        },
    )
    .expect("loads");
    let pieces: Vec<PromptPiece> = [5u32, 17, 40].iter().map(|&t| PromptPiece::Token(t)).collect();
    let config = GenerateConfig {
        max_new_tokens: 20,
        sampler: SamplerConfig::default(),
        stop_strings: vec![],
        stop_at_eog: false,
        logprobs: None,
        json: None,
    };
    let whole =
        generate(&mut model, &mut Session::new(), &pieces, &config, |_| ControlFlow::Continue(())).expect("generates");
    assert_eq!((whole.tokens.len(), whole.stop), (20, StopReason::Length));
    let mut calls = 0;
    let stopped = generate(&mut model, &mut Session::new(), &pieces, &config, |_| {
        calls += 1;
        if calls == 3 {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
    .expect("generates");
    assert_eq!((stopped.tokens.len(), stopped.stop, calls), (3, StopReason::Cancelled, 3));
    assert_eq!(stopped.tokens, whole.tokens[..3], "the same tokens up to the stop");
    std::fs::remove_file(&path).ok();
}

#[test]
fn prompts_prefilled_together_match_each_alone_on_the_cpu() {
    let spec = TextSpec {
        n_layer: 2,
        n_embd: 64,
        n_ff: 96,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 16,
        n_vocab: 300,
        n_deepstack: 2,
        rope_sections: [2, 3, 3],
        weights: WeightFormat::Q8_0,
        tied_output: false,
        seed: 9,
    };
    let path = write(&spec, "together");
    // The fast kernels take another product for 16 rows and more (x86_gemm's GEMM_MIN_ROWS),
    // so a prompt in a fuller chunk may round differently: far below fast-vs-reference's 1e-6.
    for (kernels, tolerance) in [(Kernels::Reference, 1e-12), (Kernels::Fast, 1e-7)] {
        let options = TextOptions {
            n_ctx: 48,
            n_seq: 4,
            chunk: 16,
            max_outputs: 1,
            kernels,
            device: DeviceChoice::Cpu,
            check: false,
        };
        let mut model = TextModel::load(&path, options).expect("loads");
        common::together::prompts_fed_together_match_each_alone(&mut model, tolerance);
    }
    std::fs::remove_file(&path).ok();
}
