//! `hrx describe IMG [IMG...]`: one description per image, the model loaded once.

use super::flags::{
    ctx_help, text_options, GenerationDefaults, Help, ImageFlags, Placement, IMAGE, JSON, MMPROJ, MODEL, PROMPT, SYSTEM,
};
use super::{CliError, Command};
use crate::catalog::{locate, search_dirs, Catalog};
use crate::cli::args::Args;
use crate::image::{self, Limits, PreprocessConfig};
use crate::json::Json;
use crate::runtime::describe::{Describer, ImageOptions};
use crate::runtime::generate::GenerateConfig;
use crate::runtime::progress::Notice;
use crate::runtime::sampler::SamplerConfig;
use crate::runtime::text_model::TextOptions;
use crate::runtime::RuntimeError;
use std::io::Write;
use std::path::{Path, PathBuf};

fn help() -> String {
    let mut options = vec![
        IMAGE.help("an image, like a positional IMAGE (llama.cpp's spelling; repeatable; these come first)"),
        PROMPT.help("what to ask (default: \"Describe this image.\")"),
        SYSTEM.help("a system turn"),
        JSON.help("one JSON object per image per line: {\"image\",\"prompt_ids\",\"tokens\",\"text\",\"stop\",\"timings\"} or {\"image\",\"error\"}"),
    ];
    options.extend(DescriberFlags::help());
    Help {
        title: "hrx describe: describe images with Qwen3-VL",
        usage: "hrx describe IMAGE [IMAGE...] [-p PROMPT] [-m MODEL.gguf --mmproj MMPROJ.gguf] [options]",
        about: "Streams one description per image; the model is loaded once. Images: PNG, JPEG\n\
                (EXIF orientation applied), WebP. Transparent pixels are composited on white, as\n\
                the model's own processor does. A bad image is reported (exit code 1 at the end)\n\
                and the next one is still described. IMAGE `-` is read from standard input (once,\n\
                within the --max-image-mp and file size limits).\n\
                \n\
                Without -m, the default model of models.toml is looked for in ./models,\n\
                $HRX_MODELS and ~/.local/share/hrx/models (`hrx models` lists them).",
        options,
        footer: "examples:\n  hrx describe photo.jpg\n  hrx describe a.png b.jpg -p 'What is written on the sign?' --json\n  \
                 camera-snapshot | hrx describe -",
    }
    .render()
}

pub const COMMAND: Command = Command { name: "describe", summary: "describe images", help, run };

/// What the default model's catalog entry sets: sampling defaults, image budget, name.
type CatalogDefaults = (GenerationDefaults, usize, String);

/// The model files: given, or the catalog default found in the search folders (then with its
/// catalog settings).
fn model_files(
    model: Option<String>,
    mmproj: Option<String>,
) -> Result<(PathBuf, PathBuf, Option<CatalogDefaults>), CliError> {
    if let (Some(m), Some(p)) = (&model, &mmproj) {
        return Ok((m.into(), p.into(), None));
    }
    if model.is_some() || mmproj.is_some() {
        return Err(CliError::usage(
            "give both -m MODEL.gguf and --mmproj MMPROJ.gguf, or neither (to use the default model)",
        ));
    }
    let catalog = Catalog::builtin();
    let entry = catalog.default_entry().ok_or_else(|| CliError::Failed("models.toml has no default model".into()))?;
    let dirs = search_dirs();
    let found = (locate(&entry.model_file, &dirs), locate(&entry.mmproj_file, &dirs));
    let (Some(m), Some(p)) = found else {
        let dir_list = dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ");
        return Err(CliError::Failed(format!(
            "no model given and the default model {} is not installed: put {} and {} (from {}) into one of: {dir_list} (folders in $HRX_MODELS, colon-separated, are searched too); or pass -m and --mmproj",
            entry.name, entry.model_file, entry.mmproj_file, entry.source
        )));
    };
    let defaults = GenerationDefaults {
        sampler: SamplerConfig {
            temperature: entry.temperature,
            top_k: entry.top_k,
            top_p: entry.top_p,
            repeat_penalty: entry.repeat_penalty,
            ..SamplerConfig::default()
        },
        max_tokens: entry.max_tokens,
    };
    Ok((m, p, Some((defaults, entry.image_max_pixels, entry.name.clone()))))
}

/// The flags that load a describer, shared by `describe`, `caption` and `serve`: model files
/// (or the models.toml default), sampling, image budget, context, device, threads.
pub(super) struct DescriberFlags {
    pub model: PathBuf,
    pub mmproj: PathBuf,
    /// What `serve` calls the model: the catalog name, else the model file's stem.
    pub name: String,
    pub config: GenerateConfig,
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
        lines.extend(ImageFlags::help(PreprocessConfig::KIOSK_MAX_PIXELS));
        lines.extend(GenerationDefaults::default().help(Some("(default from models.toml for its model, else 256)")));
        lines.push(ctx_help());
        lines.extend(Placement::help());
        lines
    }

    /// Takes the flags out of `args` (before `args.finish()`, so typos fail before loading).
    pub fn parse(args: &mut Args) -> Result<DescriberFlags, CliError> {
        let (model, mmproj, catalog) = model_files(MODEL.string(args)?, MMPROJ.string(args)?)?;
        let (defaults, max_pixels, name) = match catalog {
            Some((defaults, max_pixels, name)) => (defaults, max_pixels, name),
            None => (
                GenerationDefaults::default(),
                PreprocessConfig::KIOSK_MAX_PIXELS,
                model.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
            ),
        };
        let config = defaults.parse(args)?;
        let images = ImageFlags::parse(args, max_pixels)?;
        let placement = Placement::parse(args)?;
        let text = text_options(args, placement.device)?;
        Ok(DescriberFlags { model, mmproj, name, config, text, images, threads: placement.threads })
    }

    pub fn load(&self) -> Result<Describer, CliError> {
        let mut d = Describer::load(&self.model, &self.mmproj, self.text, self.images.clone())?;
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
    let flags = DescriberFlags::parse(&mut args)?;
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
    match failures {
        0 => Ok(()),
        n => Err(CliError::Quiet(format!("{n} of {} images failed", files.len()))),
    }
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
        }
        writeln!(out, "{}", j.to_string_compact())?;
    } else {
        writeln!(out, "\n")?;
    }
    Ok(())
}
