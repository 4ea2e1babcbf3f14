//! `hrx synth`: write a random-weight Qwen3-VL text model or vision projector of any shape.

use super::{CliError, Command};
use crate::cli::args::Args;
use crate::gguf::GgufFile;
use crate::model::synth::{text_model, vision_model, TextSpec, VisionSpec, WeightFormat};
use crate::quant::DType;
use std::io::Write;

pub const HELP: &str = "\
hrx synth: write a random-weight Qwen3-VL model (for tests and benchmarks)

usage: hrx synth -o OUT.gguf [--preset 2b] [shape options] [--type F] [--vocab-from FILE.gguf]
       hrx synth --mmproj -o MMPROJ.gguf [--preset 2b] [--type F]

Weights are random (embeddings N(0, 0.02), matrices N(0, 1/fan_in), norms 1 + N(0, 0.1)),
so the text it generates is noise; shapes, file layout and speed are those of a real model.
With --mmproj it writes a vision projector instead, laid out as llama.cpp's converter writes
Qwen3-VL's (the 2B preset: 24 blocks of width 1024, MLP 4096, 16 heads, 16x16 patches over 2
frames, 2x2 merges, 48x48 position embeddings, deepstack after blocks 5, 11, 17, projecting
to 2048; about 819 MB in F16); the default shape is tiny and feeds the default text shape.

  -o, --out FILE        where to write the GGUF file
  --preset 2b           Qwen3-VL-2B-Instruct's text shape (the default shape is tiny)
  --layers N --embd N --ff N --heads N --kv-heads N --head-dim N --vocab N --deepstack N
                        override the shape
  --type F              f16, bf16, q8_0, q4_k_m or q5_k_m (default q4_k_m; K-quants need
                        multiples of 256); with --mmproj f16 (default), bf16 or f32
  --mmproj              write a vision projector (no shape options but --preset)
  --vocab-from FILE     copy the tokenizer (and so the vocabulary size) from a GGUF file;
                        without it the vocabulary is the 256 byte tokens, Qwen's chat tokens
                        and unused padding up to --vocab
  --seed S              random seed (default 1)

examples:
  hrx synth -o /tmp/qwen3vl-2b-synth.gguf --preset 2b --vocab-from qwen3vl-tiny-F16.gguf
  hrx synth --mmproj -o /tmp/mmproj-2b-synth.gguf --preset 2b";

pub const COMMAND: Command =
    Command { name: "synth", summary: "write a random-weight model of any shape", help: || HELP.to_owned(), run };

fn run(mut args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    let path = args.value(&["-o", "--out"])?.ok_or_else(|| CliError::usage("synth needs -o OUT.gguf"))?;
    let preset = args.value(&["--preset"])?;
    if args.flag(&["--mmproj"]) {
        return projector(&path, preset.as_deref(), args, out);
    }
    let mut spec = match preset.as_deref() {
        Some("2b") => TextSpec::qwen3vl_2b(),
        Some(other) => return Err(CliError::usage(format!("unknown preset {other:?} (known: 2b)"))),
        None => TextSpec {
            n_layer: 2,
            n_embd: 256,
            n_ff: 512,
            n_head: 4,
            n_head_kv: 2,
            head_dim: 64,
            n_vocab: 512,
            n_deepstack: 3,
            rope_sections: [16, 8, 8],
            weights: WeightFormat::Q4KM,
            tied_output: true,
            seed: 1,
        },
    };
    let sizes: [(&str, &mut usize); 8] = [
        ("--layers", &mut spec.n_layer),
        ("--embd", &mut spec.n_embd),
        ("--ff", &mut spec.n_ff),
        ("--heads", &mut spec.n_head),
        ("--kv-heads", &mut spec.n_head_kv),
        ("--head-dim", &mut spec.head_dim),
        ("--vocab", &mut spec.n_vocab),
        ("--deepstack", &mut spec.n_deepstack),
    ];
    for (flag, slot) in sizes {
        if let Some(v) = args.parsed::<usize>(&[flag])? {
            if v == 0 && flag != "--deepstack" || v > 1 << 20 {
                return Err(CliError::usage(format!("{flag} {v} is out of range")));
            }
            *slot = v;
        }
    }
    spec.weights = match args.value(&["--type"])?.as_deref() {
        None | Some("q4_k_m") => WeightFormat::Q4KM,
        Some("q8_0") => WeightFormat::Q8_0,
        Some("f16") => WeightFormat::F16,
        Some("bf16") => WeightFormat::BF16,
        Some("q5_k_m") => WeightFormat::Q5KM,
        Some(other) => {
            return Err(CliError::usage(format!("--type {other:?}: expected f16, bf16, q8_0, q4_k_m or q5_k_m")))
        }
    };
    spec.seed = args.parsed(&["--seed"])?.unwrap_or(spec.seed);
    let vocab = args.value(&["--vocab-from"])?.map(GgufFile::open).transpose()?;
    if !args.finish()?.is_empty() {
        return Err(CliError::usage("synth takes no positional arguments"));
    }
    // Rotary sections keep the 2B's proportions for other head sizes.
    let half = spec.head_dim / 2;
    if spec.rope_sections.iter().sum::<usize>() > half {
        spec.rope_sections = [half - 2 * (half * 5 / 16), half * 5 / 16, half * 5 / 16];
    }
    let bytes = text_model(&spec, vocab.as_ref()).map_err(CliError::Failed)?;
    std::fs::write(&path, &bytes).map_err(CliError::os(&path))?;
    writeln!(out, "wrote {path}: {} bytes, {} layers, n_embd {}", bytes.len(), spec.n_layer, spec.n_embd)?;
    Ok(())
}

/// `--mmproj`: a vision projector of the preset's shape (or a tiny one feeding the default text
/// shape).
fn projector(path: &str, preset: Option<&str>, mut args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    let mut spec = match preset {
        Some("2b") => VisionSpec::qwen3vl_2b(),
        Some(other) => return Err(CliError::usage(format!("unknown preset {other:?} (known: 2b)"))),
        None => VisionSpec {
            n_layer: 4,
            n_embd: 64,
            n_ff: 128,
            n_head: 2,
            pos_side: 8,
            n_out: 256,
            deepstack: vec![1, 2, 3],
            ..VisionSpec::qwen3vl_2b()
        },
    };
    spec.dtype = match args.value(&["--type"])?.as_deref() {
        None | Some("f16") => DType::F16,
        Some("bf16") => DType::BF16,
        Some("f32") => DType::F32,
        Some(other) => return Err(CliError::usage(format!("--type {other:?}: a projector is f16, bf16 or f32"))),
    };
    spec.seed = args.parsed(&["--seed"])?.unwrap_or(spec.seed);
    if !args.finish()?.is_empty() {
        return Err(CliError::usage("synth --mmproj takes no positional arguments nor text-model shape options"));
    }
    let bytes = vision_model(&spec).map_err(CliError::Failed)?;
    std::fs::write(path, &bytes).map_err(CliError::os(path))?;
    writeln!(
        out,
        "wrote {path}: {} bytes, a vision projector of {} blocks, width {}",
        bytes.len(),
        spec.n_layer,
        spec.n_embd
    )?;
    Ok(())
}
