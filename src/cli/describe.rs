//! `hrx describe IMG [IMG...]`: one description per image, the model loaded once.

use super::flags::{
    ctx_help, json_schema, json_schema_help, no_schema_prompt_help, text_options, DeviceFlags, Flag,
    GenerationDefaults, Help, ImageFlags, IMAGE, JSON, MMPROJ, MODEL, NO_SCHEMA_PROMPT, PROMPT, SYSTEM,
};
use super::model_defaults::{default_model_files, ModelSettings};
use super::{CliError, Command};
use crate::backend::Backend;
use crate::cli::args::Args;
use crate::image::{self, Limits};
use crate::json::Json;
use crate::model::TextParams;
use crate::runtime::batch::{default_sequences, kv_bytes_per_sequence, most_sequences};
use crate::runtime::describe::{Describer, ImageOptions};
use crate::runtime::generate::GenerateConfig;
use crate::runtime::progress::Notice;
use crate::runtime::text_model::{TextFile, TextOptions};
use crate::runtime::RuntimeError;
use std::io::Write;
use std::path::{Path, PathBuf};

fn help() -> String {
    let mut options = vec![
        IMAGE.help("an image, like a positional IMAGE (llama.cpp's spelling; repeatable; these come first)"),
        PROMPT.help("what to ask (default: \"Describe this image.\")"),
        SYSTEM.help("a system turn"),
        JSON.help("one JSON object per image per line: {\"image\",\"prompt_ids\",\"tokens\",\"text\",\"stop\",\"timings\"} or {\"image\",\"error\"}; with --json-schema also \"json\", the answer as a JSON value"),
        json_schema_help(),
    ];
    options.extend(DescriberFlags::help());
    Help {
        title: "hrx describe: describe images with Qwen3-VL",
        usage: "hrx describe IMAGE [IMAGE...] [-p PROMPT] [-m MODEL.gguf --mmproj MMPROJ.gguf] [options]",
        about: "Streams one description per image; the model is loaded once. Images: PNG, JPEG\n\
                (EXIF orientation applied), WebP. Transparent pixels are composited on white, as\n\
                the model's own processor does. A bad image is reported (exit code 1 at the end)\n\
                and the next one is still described. IMAGE `-` is read from standard input (once,\n\
                within the --max-image-mp and file size limits). Options every image would fail with\n\
                (a prompt that does not fit --ctx even with the smallest image, a --json-schema\n\
                whose shortest document does not fit -n) are refused before any image: exit code 2.\n\
                \n\
                Without -m, the default model of models.toml is looked for in ./models,\n\
                $HRX_MODELS, ~/.local/share/hrx/models and /var/lib/hrx/models (`hrx models`\n\
                lists them).",
        options,
        footer: "examples:\n  hrx describe photo.jpg\n  hrx describe a.png b.jpg -p 'What is written on the sign?' --json\n  \
                 camera-snapshot | hrx describe -",
    }
    .render()
}

pub const COMMAND: Command = Command { name: "describe", summary: "describe images", help, run };

/// The model files: both given, or the default model of models.toml found in the search folders.
pub(super) fn model_files(model: Option<String>, mmproj: Option<String>) -> Result<(PathBuf, PathBuf), CliError> {
    match (model, mmproj) {
        (Some(m), Some(p)) => Ok((m.into(), p.into())),
        (None, None) => default_model_files(),
        _ => Err(CliError::usage(
            "give both -m MODEL.gguf and --mmproj MMPROJ.gguf, or neither (to use the default model)",
        )),
    }
}

/// The flags that load a describer, shared by `describe`, `caption` and `serve`: model files
/// (or the models.toml default), sampling, image budget, context, device, threads.
pub(super) struct DescriberFlags {
    pub model: PathBuf,
    pub mmproj: PathBuf,
    /// What `serve` calls the model: its models.toml entry's name, else the model file's stem.
    pub name: String,
    pub config: GenerateConfig,
    /// With a schema, whether the system turn tells the model it (not `--no-schema-prompt`).
    pub schema_prompt: bool,
    text: TextOptions,
    images: ImageOptions,
    threads: Option<usize>,
}

impl DescriberFlags {
    pub fn help() -> Vec<(String, String)> {
        let mut lines = vec![
            MODEL.help("the text model GGUF (default: models.toml's default model)"),
            MMPROJ.help("the vision projector GGUF"),
        ];
        lines.extend(ImageFlags::help());
        lines.extend(GenerationDefaults::help());
        lines.push(no_schema_prompt_help());
        lines.push(ctx_help());
        lines.extend(DeviceFlags::help());
        lines
    }

    /// Takes the flags out of `args` (before `args.finish()`, so typos fail before loading).
    pub fn parse(args: &mut Args) -> Result<DescriberFlags, CliError> {
        let (model, mmproj) = model_files(MODEL.string(args)?, MMPROJ.string(args)?)?;
        let settings = ModelSettings::of_file(&model, Some(&mmproj))?;
        let config = settings.defaults.parse(args)?;
        let schema_prompt = !NO_SCHEMA_PROMPT.present(args);
        let images = ImageFlags::parse(args, &settings)?;
        let stem = || model.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let name = settings.entry.clone().unwrap_or_else(stem);
        let placement = DeviceFlags::parse(args)?;
        let text = text_options(args, &placement)?;
        Ok(DescriberFlags { model, mmproj, name, config, schema_prompt, text, images, threads: placement.threads })
    }

    /// Takes `--json-schema` (describe and caption): the answers are JSON documents of it, and
    /// the system turn, unless --no-schema-prompt, gives the model the schema after `system`.
    pub fn with_json_schema(&mut self, args: &mut Args, system: Option<String>) -> Result<Option<String>, CliError> {
        let Some(c) = json_schema(args)? else {
            if !self.schema_prompt {
                return Err(CliError::usage("--no-schema-prompt goes with --json-schema"));
            }
            return Ok(system);
        };
        if !self.config.stop_strings.is_empty() {
            return Err(CliError::usage("--stop cannot go with --json-schema: a stop string could cut the document"));
        }
        let system = match self.schema_prompt {
            true => Some(c.system_with_instruction(system.as_deref())),
            false => system,
        };
        self.config.json = Some(c);
        Ok(system)
    }

    pub fn load(&self) -> Result<Describer, CliError> {
        let file = TextFile::open(&self.model)?;
        self.load_on(file, &Backend::open(self.text.device, self.text.kernels, self.text.check))
    }

    /// Loads with `batch` sequences decoded together (None: the default for the device's
    /// memory and the model, [`default_sequences`]); returns the describer and the batch. A
    /// batch whose KV caches the device's memory cannot hold beside the model files is refused
    /// naming `flag` (`--batch`, `--parallel`).
    pub fn load_batched(&mut self, batch: Option<usize>, flag: &Flag) -> Result<(Describer, usize), CliError> {
        let file = TextFile::open(&self.model)?;
        let backend = Backend::open(self.text.device, self.text.kernels, self.text.check);
        let params = TextParams::from_gguf(file.gguf()).map_err(RuntimeError::from)?;
        let size = |path: &Path| std::fs::metadata(path).map_or(0, |m| m.len());
        let weights = size(&self.model) + size(&self.mmproj);
        let memory = backend.memory_bytes();
        let n_ctx = self.text.n_ctx;
        let per_sequence = kv_bytes_per_sequence(&params, n_ctx, backend.registry().cache_dtype());
        let n_seq = match (batch, memory) {
            (None, memory) => memory.map_or(1, |memory| default_sequences(per_sequence, memory, weights)),
            (Some(n), Some(memory)) if n > most_sequences(per_sequence, memory, weights) => {
                let mib = |bytes: u64| bytes >> 20;
                return Err(CliError::usage(format!(
                    "{} {n}: {n} KV caches of --ctx {n_ctx} slots take {} MiB, and the device's {} MiB hold {} MiB beside the model files: at most {}",
                    flag.names[0],
                    mib(per_sequence.saturating_mul(n as u64)),
                    mib(memory),
                    mib(memory.saturating_sub(weights)),
                    most_sequences(per_sequence, memory, weights)
                )));
            }
            (Some(n), _) => n,
        };
        self.text = self.text.with_sequences(n_seq);
        Ok((self.load_on(file, &backend)?, n_seq))
    }

    fn load_on(&self, file: TextFile, backend: &Backend) -> Result<Describer, CliError> {
        let mut d = Describer::load_file_on(file, &self.mmproj, self.text, self.images.clone(), backend)?;
        if let Some(n) = self.threads {
            d.set_threads(n);
        }
        Ok(d)
    }
}

/// Word on stderr of an image that takes over a second to read and encode, for the commands
/// someone waits on at a terminal (describe, caption, generate; not serve, whose log is a line
/// per connection).
pub(super) fn stderr_notice() -> Notice {
    Notice::to(|line| eprintln!("hrx: {line}"))
}

fn run(mut args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    let prompt = PROMPT.string(&mut args)?.unwrap_or_else(|| "Describe this image.".to_owned());
    let system = SYSTEM.string(&mut args)?;
    let mut flags = DescriberFlags::parse(&mut args)?;
    let system = flags.with_json_schema(&mut args, system)?;
    let json = JSON.present(&mut args);
    let mut files = IMAGE.strings(&mut args)?;
    files.extend(args.finish()?);
    if files.is_empty() {
        return Err(CliError::usage("describe needs at least one IMAGE"));
    }
    if files.iter().filter(|f| *f == STDIN).count() > 1 {
        return Err(CliError::usage("IMAGE - (standard input) can be given once"));
    }
    let mut d = flags.load()?;
    d.set_progress(stderr_notice());
    let config = flags.config;
    // A configuration every image would fail is one error, before any image.
    d.check_job(&prompt, system.as_deref(), &config)
        .map_err(|e| CliError::usage(format!("every image would fail: {e}")))?;
    let mut failures = 0;
    for file in &files {
        match describe_one(&mut d, file, &prompt, system.as_deref(), &config, json, out) {
            Ok(()) => {}
            Err(CliError::Io(e)) => return Err(CliError::Io(e)),
            Err(e) => {
                failures += 1;
                if json {
                    let j = Json::obj([("image", Json::str(file)), ("error", Json::str(e.to_string()))]);
                    writeln!(out, "{}", j.to_string_compact())?;
                }
                eprintln!("hrx: error: {e}");
            }
        }
    }
    out.flush()?;
    d.leave();
    match failures {
        0 => Ok(()),
        n => Err(CliError::Quiet(format!("{n} of {} images failed", files.len()))),
    }
}

/// A JSON answer as a value of the record, keys in their order (null were it not JSON, which a
/// constrained answer always is).
pub(super) fn answer_json(text: &str) -> Json {
    crate::json::parse_ordered(text, 64).unwrap_or(Json::Null)
}

/// The IMAGE that names standard input.
const STDIN: &str = "-";

/// An IMAGE argument's name for errors and its bytes: a file, or `-` for standard input.
fn read_image(arg: &str, limits: &Limits) -> Result<(String, Vec<u8>), RuntimeError> {
    if arg == STDIN {
        let name = "standard input";
        return Ok((name.to_owned(), image::read_from(name, std::io::stdin().lock(), limits)?));
    }
    Ok((arg.to_owned(), image::read_file(Path::new(arg), limits)?))
}

/// Describes the image `file` names; its `path:` header is written only once the image is
/// encoded, so a failed image leaves nothing on standard output.
fn describe_one(
    d: &mut Describer,
    file: &str,
    prompt: &str,
    system: Option<&str>,
    config: &GenerateConfig,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let t = std::time::Instant::now();
    let (name, bytes) = read_image(file, &d.image_limits())?;
    let images = d.encode_images_for(&[(name.clone(), bytes)], prompt, system)?;
    let encode_seconds = t.elapsed().as_secs_f64();
    log::info!("{name}: read and encoded in {encode_seconds:.3} s");
    if !json {
        writeln!(out, "{name}:")?;
    }
    let mut write_error = None;
    let (ids, g) = d.run(&images, prompt, system, config, |delta| {
        super::generate::stream(json, &mut write_error, out, delta.text)
    })?;
    if let Some(e) = write_error {
        return Err(e.into());
    }
    super::generate::log_timings(&g);
    if json {
        let mut j = super::generate::generation_json(&ids, &g);
        if let Json::Obj(fields) = &mut j {
            fields.insert(0, ("image".into(), Json::str(file)));
            fields.push(("image_encode_seconds".into(), Json::Num(encode_seconds)));
            if config.json.is_some() {
                fields.push(("json".into(), answer_json(&g.text)));
            }
        }
        writeln!(out, "{}", j.to_string_compact())?;
    } else {
        writeln!(out, "\n")?;
    }
    Ok(())
}
