//! `hrx synth`: write a random-weight Qwen3-VL text model of any shape.

use super::{CliError, Command};
use crate::cli::args::Args;
use crate::gguf::GgufFile;
use crate::model::synth::{text_model, TextSpec, WeightFormat};
use std::io::Write;

pub const HELP: &str = "\
hrx synth: write a random-weight Qwen3-VL text model (for tests and benchmarks)

usage: hrx synth -o OUT.gguf [--preset 2b] [shape options] [--type F] [--vocab-from FILE.gguf]

Weights are random (embeddings N(0, 0.02), matrices N(0, 1/fan_in), norms 1 + N(0, 0.1)),
so the text it generates is noise; shapes, file layout and speed are those of a real model.

  -o, --out FILE        where to write the GGUF file
  --preset 2b           Qwen3-VL-2B-Instruct's text shape (the default shape is tiny)
  --layers N --embd N --ff N --heads N --kv-heads N --head-dim N --vocab N --deepstack N
                        override the shape
  --type F              f16, bf16, q8_0, q4_k_m or q5_k_m (default q4_k_m; K-quants need
                        multiples of 256)
  --vocab-from FILE     copy the tokenizer (and so the vocabulary size) from a GGUF file;
                        without it the vocabulary is the 256 byte tokens, Qwen's chat tokens
                        and unused padding up to --vocab
  --seed S              random seed (default 1)

example: hrx synth -o /tmp/qwen3vl-2b-synth.gguf --preset 2b --vocab-from qwen3vl-tiny-F16.gguf";

pub const COMMAND: Command =
    Command { name: "synth", summary: "write a random-weight model of any shape", help: || HELP.to_owned(), run };

fn run(mut args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    let path = args.value(&["-o", "--out"])?.ok_or_else(|| CliError::usage("synth needs -o OUT.gguf"))?;
    let mut spec = match args.value(&["--preset"])?.as_deref() {
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
