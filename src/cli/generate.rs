//! `hrx generate`: text in, tokens out. Its flags are how hrx is checked against other engines:
//! keep them stable.

use super::flags::{
    ctx_help, text_options, DeviceFlags, Flag, GenerationDefaults, Help, ImageFlags, IMAGE, JSON, MMPROJ, MODEL,
    PROMPT, SYSTEM,
};
use super::model_defaults::ModelSettings;
use super::{CliError, Command};
use crate::cli::args::Args;
use crate::json::Json;
use crate::runtime::chat::{self, Message};
use crate::runtime::describe::Describer;
use crate::runtime::generate::{generate, Generation};
use crate::runtime::session::{PromptPiece, Session};
use crate::runtime::text_model::TextModel;
use std::io::Write;
use std::path::Path;

fn help() -> String {
    let mut options = vec![
        MODEL.help("the text model GGUF (e.g. Qwen3-VL-2B-Instruct-Q4_K_M.gguf)"),
        PROMPT.help("the prompt text"),
        RAW.help("send the prompt without the chat template"),
        SYSTEM.help("a system turn before the user's (chat template only)"),
        PROMPT_IDS.help("comma-separated token ids instead of text"),
        IMAGE.help("an image before the prompt text in the user turn (repeatable; needs --mmproj); its pads are expanded as HF's processor does"),
        MMPROJ.help("the vision projector GGUF"),
    ];
    options.extend(ImageFlags::help());
    options.extend(GenerationDefaults::help());
    options.push(ctx_help());
    options.extend(DeviceFlags::help());
    options.push(JSON.help("print one JSON object: prompt_ids, tokens, text, stop, timings"));
    options.push(DUMP_LOGITS.help("write the last prompt position's logits (little-endian f32)"));
    Help {
        title: "hrx generate: continue a prompt with a Qwen3-VL text model",
        usage: "hrx generate -m MODEL.gguf (--prompt TEXT [--raw] | --prompt-ids 1,2,3) [options]\n\
                \x20      hrx generate -m MODEL.gguf --mmproj MMPROJ.gguf --image IMG [--image IMG...] --prompt TEXT",
        about: "The prompt is wrapped in the model's chat template (one user turn, then the\n\
                assistant's turn) unless --raw is given; --prompt-ids sends ids as they are.\n\
                Prompt text is always tokenized as plain text: control tokens written in it\n\
                (<|im_start|>, <|image_pad|>, ...) stay text, only the template inserts them.\n\
                Text is streamed to standard output as it is generated.",
        options,
        footer: "environment: HRX_KERNELS=reference selects the plain reference kernels;\n\
                 \x20            HRX_LOG_DISPATCH=1 logs every node's placement.\n\
                 \n\
                 examples:\n\
                 \x20 hrx generate -m qwen3vl-2b-q4_k_m.gguf -p 'Write a haiku about rain.'\n\
                 \x20 hrx generate -m model.gguf --prompt-ids 785,6722,315,9625,374 -n 16 --json",
    }
    .render()
}

pub const COMMAND: Command = Command { name: "generate", summary: "generate text from a prompt", help, run };

const RAW: Flag = Flag { names: &["--raw"], value: "" };
const PROMPT_IDS: Flag = Flag { names: &["--prompt-ids"], value: "LIST" };
const DUMP_LOGITS: Flag = Flag { names: &["--dump-logits"], value: "FILE" };

fn parse_ids(list: &str) -> Result<Vec<u32>, CliError> {
    list.split(',')
        .map(|s| s.trim().parse::<u32>().map_err(|_| CliError::usage(format!("--prompt-ids: {s:?} is not a token id"))))
        .collect()
}

fn run(mut args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    let model_path = MODEL.string(&mut args)?.ok_or_else(|| CliError::usage("generate needs -m MODEL.gguf"))?;
    let prompt = PROMPT.string(&mut args)?;
    let raw = RAW.present(&mut args);
    let system = SYSTEM.string(&mut args)?;
    let prompt_ids = PROMPT_IDS.string(&mut args)?;
    let mmproj = MMPROJ.string(&mut args)?;
    // One rule for defaults, as describe's: a file that is a models.toml entry takes its.
    let settings = ModelSettings::of_file(Path::new(&model_path), mmproj.as_deref().map(Path::new))?;
    let config = settings.defaults.parse(&mut args)?;
    let placement = DeviceFlags::parse(&mut args)?;
    let options = text_options(&mut args, &placement)?;
    let json = JSON.present(&mut args);
    let dump_logits = DUMP_LOGITS.string(&mut args)?;
    let images = IMAGE.strings(&mut args)?;
    let image_options = ImageFlags::parse(&mut args, &settings)?;
    if !args.finish()?.is_empty() {
        return Err(CliError::usage("generate takes no positional arguments (use --prompt)"));
    }

    if !images.is_empty() {
        let Some(mmproj) = mmproj else {
            return Err(CliError::usage("--image needs --mmproj MMPROJ.gguf"));
        };
        let (Some(text), None, false) = (prompt, prompt_ids, raw) else {
            return Err(CliError::usage("--image goes with --prompt TEXT (chat template; not --raw or --prompt-ids)"));
        };
        let mut d = Describer::load(Path::new(&model_path), Path::new(&mmproj), options, image_options)?;
        if let Some(n) = placement.threads {
            d.set_threads(n);
        }
        d.set_progress(super::describe::stderr_notice());
        let paths: Vec<&Path> = images.iter().map(Path::new).collect();
        let encoded = d.encode_files_for(&paths, &text, system.as_deref())?;
        let mut write_error = None;
        let (ids, result) =
            d.run(&encoded, &text, system.as_deref(), &config, |t| stream(json, &mut write_error, out, t.text))?;
        return finish(out, write_error, &ids, &result, json, dump_logits);
    }
    if mmproj.is_some() {
        return Err(CliError::usage("--mmproj goes with --image"));
    }
    let mut model = TextModel::load(Path::new(&model_path), options)?;
    if let Some(n) = placement.threads {
        model.set_threads(n);
    }
    let ids = match (prompt, prompt_ids) {
        (Some(_), Some(_)) => return Err(CliError::usage("give --prompt or --prompt-ids, not both")),
        (None, None) => return Err(CliError::usage("generate needs --prompt TEXT or --prompt-ids LIST")),
        (None, Some(list)) => parse_ids(&list)?,
        // --raw: the text alone, no template.
        (Some(text), None) if raw => model.tokenizer().encode(&text, false),
        (Some(text), None) => {
            let mut messages = Vec::new();
            if let Some(s) = system {
                messages.push(Message::text("system", &s));
            }
            messages.push(Message::text("user", &text));
            chat::tokens(&messages, true, model.tokenizer(), None).map_err(|e| CliError::usage(e.to_string()))?
        }
    };
    let pieces: Vec<PromptPiece> = ids.iter().map(|&id| PromptPiece::Token(id)).collect();
    let mut session = Session::new();
    let mut write_error = None;
    let result = generate(&mut model, &mut session, &pieces, &config, |t| stream(json, &mut write_error, out, t.text))?;
    finish(out, write_error, &ids, &result, json, dump_logits)
}

/// Streams generated text unless the output is JSON; keeps the first write error, and stops
/// the generation there (a closed pipe: nobody reads the rest).
pub(super) fn stream(
    json: bool,
    write_error: &mut Option<std::io::Error>,
    out: &mut dyn Write,
    text: &str,
) -> std::ops::ControlFlow<()> {
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

fn finish(
    out: &mut dyn Write,
    write_error: Option<std::io::Error>,
    ids: &[u32],
    result: &Generation,
    json: bool,
    dump_logits: Option<String>,
) -> Result<(), CliError> {
    if let Some(e) = write_error {
        return Err(e.into());
    }
    if let Some(path) = dump_logits {
        let bytes: Vec<u8> = result.prompt_logits.iter().flat_map(|x| x.to_le_bytes()).collect();
        std::fs::write(&path, bytes).map_err(CliError::os(&path))?;
    }
    if json {
        writeln!(out, "{}", generation_json(ids, result).to_string_compact())?;
    } else {
        writeln!(out)?;
    }
    log_timings(result);
    Ok(())
}

/// The timings at info level (`RUST_LOG=info`), for every command that generates.
pub(super) fn log_timings(g: &Generation) {
    log::info!(
        "prompt: {} tokens in {:.3} s; generated {} tokens in {:.3} s",
        g.n_prompt,
        g.prompt_seconds,
        g.tokens.len(),
        g.generate_seconds
    );
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
