//! `hrx generate`: text in, tokens out, on the CPU backend. Its flags are how hrx is checked
//! against other engines: keep them stable.

use super::{CliError, Command};
use crate::cli::args::Args;
use crate::json::Json;
use crate::runtime::chat::{self, Message};
use crate::runtime::describe::{Describer, ImageOptions};
use crate::runtime::generate::{generate, GenerateConfig, Generation};
use crate::runtime::sampler::SamplerConfig;
use crate::runtime::session::{PromptPiece, Session};
use crate::backend::DeviceChoice;
use crate::runtime::text_model::{TextModel, TextOptions};
use std::io::Write;
use std::path::Path;

pub const HELP: &str = "\
hrx generate: continue a prompt with a Qwen3-VL text model

usage: hrx generate -m MODEL.gguf (--prompt TEXT [--raw] | --prompt-ids 1,2,3) [options]
       hrx generate -m MODEL.gguf --mmproj MMPROJ.gguf --image IMG [--image IMG...] --prompt TEXT

The prompt is wrapped in the model's chat template (one user turn, then the
assistant's turn) unless --raw is given; --prompt-ids sends ids as they are.
Text is streamed to standard output as it is generated.

  -m, --model FILE        the text model GGUF (e.g. Qwen3-VL-2B-Instruct-Q4_K_M.gguf)
  -p, --prompt TEXT       the prompt text
  --raw                   send the prompt without the chat template
  --system TEXT           a system turn before the user's (chat template only)
  --prompt-ids LIST       comma-separated token ids instead of text
  --image FILE            an image before the prompt text in the user turn (repeatable;
                          needs --mmproj); its pads are expanded as HF's processor does
  --mmproj FILE           the vision projector GGUF
  --image-max-pixels N    image pixel budget (default 16777216, HF's; see hrx describe)
  -n, --max-tokens N      tokens to generate at most (default 256)
  --temp T                sampling temperature; 0 = greedy (default 0)
  --top-k K               keep the K most likely tokens (default 40; 0 = all)
  --top-p P               keep the smallest set with probability >= P (default 0.95)
  --min-p P               drop tokens below P x the best one's probability (default 0.05)
  --repeat-penalty R      penalise recently seen tokens (default 1.0 = off)
  --seed S                random seed for sampling (default 0)
  --stop STR              stop before this text (repeatable)
  --ignore-eos            keep going past end-of-generation tokens
  --ctx N                 context length in tokens (default 4096)
  --threads N             CPU threads (default: all cores)
  --device D              where to run: auto (default: the best Vulkan GPU, else the
                          CPU; a CPU Vulkan driver such as lavapipe only when named),
                          N (Vulkan device N, see `hrx doctor`) or cpu; also HRX_DEVICE
  --json                  print one JSON object: prompt_ids, tokens, text, stop, timings
  --dump-logits FILE      write the last prompt position's logits (little-endian f32)

environment: HRX_KERNELS=reference selects the plain reference kernels;
             HRX_LOG_DISPATCH=1 logs every node's placement.

examples:
  hrx generate -m qwen3vl-2b-q4_k_m.gguf -p 'Write a haiku about rain.'
  hrx generate -m model.gguf --prompt-ids 785,6722,315,9625,374 -n 16 --json";

pub const COMMAND: Command = Command { name: "generate", summary: "generate text from a prompt", help: HELP, run };

/// Defaults of the sampling flags (a model's catalog entry can change them).
pub struct GenerationDefaults {
    pub sampler: SamplerConfig,
    pub max_tokens: usize,
}

impl Default for GenerationDefaults {
    fn default() -> Self {
        GenerationDefaults { sampler: SamplerConfig::default(), max_tokens: 256 }
    }
}

/// The flags shared by `generate` and `describe`: length, sampling, stops.
pub fn generation_flags(args: &mut Args, d: &GenerationDefaults) -> Result<GenerateConfig, CliError> {
    let s = &d.sampler;
    let sampler = SamplerConfig {
        temperature: args.parsed(&["--temp"])?.unwrap_or(s.temperature),
        top_k: args.parsed(&["--top-k"])?.unwrap_or(s.top_k),
        top_p: args.parsed(&["--top-p"])?.unwrap_or(s.top_p),
        min_p: args.parsed(&["--min-p"])?.unwrap_or(s.min_p),
        repeat_penalty: args.parsed(&["--repeat-penalty"])?.unwrap_or(s.repeat_penalty),
        seed: args.parsed(&["--seed"])?.unwrap_or(s.seed),
        ..s.clone()
    };
    sampler.validate().map_err(CliError::usage)?;
    Ok(GenerateConfig {
        max_new_tokens: args.parsed(&["-n", "--max-tokens"])?.unwrap_or(d.max_tokens),
        sampler,
        stop_strings: args.values(&["--stop"])?,
        stop_at_eog: !args.flag(&["--ignore-eos"]),
    })
}

fn parse_ids(list: &str) -> Result<Vec<u32>, CliError> {
    list.split(',')
        .map(|s| s.trim().parse::<u32>().map_err(|_| CliError::usage(format!("--prompt-ids: {s:?} is not a token id"))))
        .collect()
}

fn run(mut args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    let model_path = args.value(&["-m", "--model"])?.ok_or_else(|| CliError::usage("generate needs -m MODEL.gguf"))?;
    let prompt = args.value(&["-p", "--prompt"])?;
    let raw = args.flag(&["--raw"]);
    let system = args.value(&["--system"])?;
    let prompt_ids = args.value(&["--prompt-ids"])?;
    let config = generation_flags(&mut args, &GenerationDefaults::default())?;
    let mut options = TextOptions::default();
    options.n_ctx = args.parsed(&["--ctx"])?.unwrap_or(options.n_ctx);
    if let Some(d) = args.value(&["--device"])? {
        options.device = DeviceChoice::parse(&d).map_err(CliError::usage)?;
    }
    let threads: Option<usize> = args.parsed(&["--threads"])?;
    let json = args.flag(&["--json"]);
    let dump_logits = args.value(&["--dump-logits"])?;
    let images = args.values(&["--image"])?;
    let mmproj = args.value(&["--mmproj"])?;
    let image_max_pixels = args.parsed(&["--image-max-pixels"])?.unwrap_or(crate::image::PreprocessConfig::HF_MAX_PIXELS);
    if !args.finish()?.is_empty() {
        return Err(CliError::usage("generate takes no positional arguments (use --prompt)"));
    }
    if options.n_ctx == 0 || options.n_ctx > 1 << 20 {
        return Err(CliError::usage("--ctx must be in 1..=1048576"));
    }

    if !images.is_empty() {
        let Some(mmproj) = mmproj else {
            return Err(CliError::usage("--image needs --mmproj MMPROJ.gguf"));
        };
        let (Some(text), None, false) = (prompt, prompt_ids, raw) else {
            return Err(CliError::usage("--image goes with --prompt TEXT (chat template; not --raw or --prompt-ids)"));
        };
        let image_options = ImageOptions { max_pixels: image_max_pixels, ..ImageOptions::default() };
        let mut d = Describer::load(Path::new(&model_path), Path::new(&mmproj), options, image_options).map_err(|e| CliError::Failed(e.to_string()))?;
        if let Some(n) = threads {
            d.text.set_threads(n);
            d.vision.set_threads(n);
        }
        let encoded = images
            .iter()
            .map(|f| d.encode_file(Path::new(f)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| CliError::Failed(e.to_string()))?;
        let mut write_error = None;
        let (ids, result) = d
            .run(&encoded, &text, system.as_deref(), &config, |t| stream(json, &mut write_error, out, t))
            .map_err(|e| CliError::Failed(e.to_string()))?;
        return finish(out, write_error, &ids, &result, json, dump_logits);
    }
    let mut model = TextModel::load(Path::new(&model_path), options).map_err(|e| CliError::Failed(e.to_string()))?;
    if let Some(n) = threads {
        model.set_threads(n);
    }
    let ids = match (prompt, prompt_ids) {
        (Some(_), Some(_)) => return Err(CliError::usage("give --prompt or --prompt-ids, not both")),
        (None, None) => return Err(CliError::usage("generate needs --prompt TEXT or --prompt-ids LIST")),
        (None, Some(list)) => parse_ids(&list)?,
        (Some(text), None) => {
            let text = if raw {
                text
            } else {
                let mut messages = Vec::new();
                if let Some(s) = system {
                    messages.push(Message::text("system", &s));
                }
                messages.push(Message::text("user", &text));
                chat::render(&messages, true)
            };
            model.tokenizer.encode(&text, !raw)
        }
    };
    let pieces: Vec<PromptPiece> = ids.iter().map(|&id| PromptPiece::Token(id)).collect();
    let mut session = Session::new();
    let mut write_error = None;
    let result = generate(&mut model, &mut session, &pieces, &config, |t| stream(json, &mut write_error, out, t))
        .map_err(|e| CliError::Failed(e.to_string()))?;
    finish(out, write_error, &ids, &result, json, dump_logits)
}

/// Streams generated text unless the output is JSON; keeps the first write error, and stops
/// the generation there (a closed pipe: nobody reads the rest).
pub(super) fn stream(json: bool, write_error: &mut Option<std::io::Error>, out: &mut dyn Write, text: &str) -> std::ops::ControlFlow<()> {
    if !json && write_error.is_none() {
        if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
            *write_error = Some(e);
        }
    }
    if write_error.is_some() {
        std::ops::ControlFlow::Break(())
    } else {
        std::ops::ControlFlow::Continue(())
    }
}

fn finish(out: &mut dyn Write, write_error: Option<std::io::Error>, ids: &[u32], result: &Generation, json: bool, dump_logits: Option<String>) -> Result<(), CliError> {
    if let Some(e) = write_error {
        return Err(e.into());
    }
    if let Some(path) = dump_logits {
        let bytes: Vec<u8> = result.prompt_logits.iter().flat_map(|x| x.to_le_bytes()).collect();
        std::fs::write(&path, bytes).map_err(|e| CliError::Failed(format!("{path}: {e}")))?;
    }
    if json {
        writeln!(out, "{}", generation_json(ids, result).to_string_compact())?;
    } else {
        writeln!(out)?;
        log::info!(
            "prompt: {} tokens in {:.3} s; generated {} tokens in {:.3} s",
            result.n_prompt,
            result.prompt_seconds,
            result.tokens.len(),
            result.generate_seconds
        );
    }
    Ok(())
}

pub fn generation_json(prompt_ids: &[u32], g: &Generation) -> Json {
    let ids = |v: &[u32]| Json::Arr(v.iter().map(|&i| Json::Int(i.into())).collect());
    let rate = |n: usize, s: f64| if s > 0.0 { Json::Num(n as f64 / s) } else { Json::Null };
    Json::obj([
        ("prompt_ids", ids(prompt_ids)),
        ("tokens", ids(&g.tokens)),
        ("text", Json::str(&g.text)),
        ("stop", Json::str(g.stop.name())),
        (
            "timings",
            Json::obj([
                ("prompt_tokens", Json::Int(g.n_prompt as i128)),
                ("prompt_seconds", Json::Num(g.prompt_seconds)),
                ("prompt_tokens_per_second", rate(g.n_prompt, g.prompt_seconds)),
                ("generated_tokens", Json::Int(g.tokens.len() as i128)),
                ("generate_seconds", Json::Num(g.generate_seconds)),
                ("generate_tokens_per_second", rate(g.tokens.len(), g.generate_seconds)),
            ]),
        ),
    ])
}
