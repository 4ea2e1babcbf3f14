//! `hrx describe IMG [IMG...]`: one description per image, the model loaded once.

use super::generate::{generation_flags, GenerationDefaults};
use super::{CliError, Command};
use crate::catalog::{locate, search_dirs, Catalog};
use crate::cli::args::Args;
use crate::json::Json;
use crate::runtime::describe::{Describer, ImageOptions};
use crate::runtime::generate::GenerateConfig;
use crate::runtime::sampler::SamplerConfig;
use crate::backend::DeviceChoice;
use crate::runtime::text_model::TextOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

pub const HELP: &str = "\
hrx describe: describe images with Qwen3-VL

usage: hrx describe IMAGE [IMAGE...] [-p PROMPT] [-m MODEL.gguf --mmproj MMPROJ.gguf] [options]

Streams one description per image; the model is loaded once. Images: PNG, JPEG
(EXIF orientation applied), WebP. Transparent pixels are composited on white, as
the model's own processor does. A bad image is reported (exit code 1 at the end)
and the next one is still described.

Without -m, the default model of models.toml is looked for in ./models,
$HRX_MODELS and ~/.local/share/hrx/models (`hrx models` lists them).

  -p, --prompt TEXT        what to ask (default: \"Describe this image.\")
  --system TEXT            a system turn
  -m, --model FILE         the text model GGUF
  --mmproj FILE            the vision projector GGUF
  --image-max-pixels N     resize larger images down to about N pixels (default 1048576:
                           ~1 MP keeps a kiosk answer near a second; HF's own is 16777216)
  --image-min-pixels N     resize smaller images up to N pixels (default 65536)
  --max-image-mp N         refuse images whose header declares more than N megapixels,
                           before decoding (default 50)
  -n, --max-tokens N       tokens per description (default from models.toml, else 256)
  --temp T --top-k K --top-p P --min-p P --repeat-penalty R --seed S --stop STR --ignore-eos
                           sampling, as in `hrx generate` (default: greedy)
  --ctx N                  context length (default 4096)
  --threads N              CPU threads
  --device D               where to run: auto (default: the best Vulkan GPU, else the
                           CPU; a CPU Vulkan driver such as lavapipe only when named),
                           N (Vulkan device N, see `hrx doctor`) or cpu; also HRX_DEVICE
  --json                   one JSON object per image per line:
                           {\"image\",\"prompt_ids\",\"tokens\",\"text\",\"stop\",\"timings\"} or {\"image\",\"error\"}

examples:
  hrx describe photo.jpg
  hrx describe a.png b.jpg -p 'What is written on the sign?' --json";

pub const COMMAND: Command = Command { name: "describe", summary: "describe images", help: HELP, run };

/// What the default model's catalog entry sets: sampling defaults, image budget, name.
type CatalogDefaults = (GenerationDefaults, usize, String);

/// The model files: given, or the catalog default found in the search folders (then with its
/// catalog settings).
fn model_files(model: Option<String>, mmproj: Option<String>) -> Result<(PathBuf, PathBuf, Option<CatalogDefaults>), CliError> {
    if let (Some(m), Some(p)) = (&model, &mmproj) {
        return Ok((m.into(), p.into(), None));
    }
    if model.is_some() || mmproj.is_some() {
        return Err(CliError::usage("give both -m MODEL.gguf and --mmproj MMPROJ.gguf, or neither (to use the default model)"));
    }
    let catalog = Catalog::builtin();
    let entry = catalog.default_entry().ok_or_else(|| CliError::Failed("models.toml has no default model".into()))?;
    let dirs = search_dirs();
    let found = (locate(&entry.model_file, &dirs), locate(&entry.mmproj_file, &dirs));
    let (Some(m), Some(p)) = found else {
        let dir_list = dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ");
        return Err(CliError::Failed(format!(
            "no model given and the default model {} is not installed: put {} and {} (from {}) into one of: {dir_list}; or pass -m and --mmproj",
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
/// (or the models.toml default), sampling, image budget, context, threads.
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
    /// Takes the flags out of `args` (before `args.finish()`, so typos fail before loading).
    pub fn parse(args: &mut Args) -> Result<DescriberFlags, CliError> {
        let (model, mmproj, catalog) = model_files(args.value(&["-m", "--model"])?, args.value(&["--mmproj"])?)?;
        let (defaults, max_pixels, name) = match catalog {
            Some((defaults, max_pixels, name)) => (defaults, Some(max_pixels), name),
            None => (GenerationDefaults::default(), None, model.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()),
        };
        let config = generation_flags(args, &defaults)?;
        let mut images = ImageOptions::default();
        images.max_pixels = args.parsed(&["--image-max-pixels"])?.or(max_pixels).unwrap_or(images.max_pixels);
        images.min_pixels = args.parsed(&["--image-min-pixels"])?.unwrap_or(images.min_pixels);
        if let Some(mp) = args.parsed::<f64>(&["--max-image-mp"])? {
            if !(mp > 0.0 && mp <= 1e4) {
                return Err(CliError::usage("--max-image-mp must be in (0, 10000]"));
            }
            images.limits.max_pixels = (mp * 1e6) as u64;
        }
        let mut text = TextOptions::default();
        text.n_ctx = args.parsed(&["--ctx"])?.unwrap_or(text.n_ctx);
        if let Some(d) = args.value(&["--device"])? {
            text.device = DeviceChoice::parse(&d).map_err(CliError::usage)?;
        }
        if text.n_ctx == 0 || text.n_ctx > 1 << 20 || images.max_pixels > 1 << 28 {
            return Err(CliError::usage("--ctx or --image-max-pixels is out of range"));
        }
        let threads = args.parsed(&["--threads"])?;
        Ok(DescriberFlags { model, mmproj, name, config, text, images, threads })
    }

    pub fn load(&self) -> Result<Describer, CliError> {
        let mut d = Describer::load(&self.model, &self.mmproj, self.text, self.images.clone()).map_err(|e| CliError::Failed(e.to_string()))?;
        if let Some(n) = self.threads {
            d.text.set_threads(n);
            d.vision.set_threads(n);
        }
        Ok(d)
    }
}

fn run(mut args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    let prompt = args.value(&["-p", "--prompt"])?.unwrap_or_else(|| "Describe this image.".to_owned());
    let system = args.value(&["--system"])?;
    let flags = DescriberFlags::parse(&mut args)?;
    let json = args.flag(&["--json"]);
    let files = args.finish()?;
    if files.is_empty() {
        return Err(CliError::usage("describe needs at least one IMAGE"));
    }
    let mut d = flags.load()?;
    let config = flags.config;
    let mut failures = 0;
    for file in &files {
        match describe_one(&mut d, Path::new(file), &prompt, system.as_deref(), &config, json, out) {
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

fn describe_one(
    d: &mut Describer,
    file: &Path,
    prompt: &str,
    system: Option<&str>,
    config: &GenerateConfig,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let failed = |e: crate::runtime::RuntimeError| CliError::Failed(e.to_string());
    let t = std::time::Instant::now();
    let image = d.encode_file(file).map_err(failed)?;
    let encode_seconds = t.elapsed().as_secs_f64();
    if !json {
        writeln!(out, "{}:", file.display())?;
    }
    let mut write_error = None;
    let images = [image];
    let (ids, g) = d
        .run(&images, prompt, system, config, |text| super::generate::stream(json, &mut write_error, out, text))
        .map_err(failed)?;
    if let Some(e) = write_error {
        return Err(e.into());
    }
    if json {
        let mut j = super::generate::generation_json(&ids, &g);
        if let Json::Obj(fields) = &mut j {
            fields.insert(0, ("image".into(), Json::str(file.display().to_string())));
            fields.push(("image_encode_seconds".into(), Json::Num(encode_seconds)));
        }
        writeln!(out, "{}", j.to_string_compact())?;
    } else {
        writeln!(out, "\n")?;
    }
    Ok(())
}
