//! Which models.toml entry a model file is, and what that sets. One rule whatever the path (the
//! default model found in the search folders, or a file given with -m): a file named as an
//! entry's model file, whose facts models.toml records hold, is that entry and takes its
//! generation defaults, image budget and name; a file so named whose facts do not hold is
//! refused, naming the fact; any other file gets hrx's own defaults. `--help` says both.

use super::flags::GenerationDefaults;
use super::CliError;
use crate::catalog::{locate, search_dirs, Catalog, ModelEntry};
use crate::gguf::GgufFile;
use crate::image::PreprocessConfig;
use crate::runtime::sampler::SamplerConfig;
use std::fmt::Display;
use std::path::{Path, PathBuf};

/// What a model file's settings are: its entry's, or hrx's own.
#[derive(Clone, Debug)]
pub struct ModelSettings {
    /// The entry's name, or None for a file models.toml does not list.
    pub entry: Option<String>,
    pub defaults: GenerationDefaults,
    /// The image budget: (--image-min-pixels, --image-max-pixels) defaults.
    pub min_pixels: usize,
    pub max_pixels: usize,
}

impl ModelSettings {
    /// hrx's own, for a file models.toml does not list.
    pub fn own() -> ModelSettings {
        ModelSettings {
            entry: None,
            defaults: GenerationDefaults::default(),
            min_pixels: PreprocessConfig::HF_MIN_PIXELS,
            max_pixels: PreprocessConfig::KIOSK_MAX_PIXELS,
        }
    }

    /// An entry's.
    fn of(entry: &ModelEntry) -> ModelSettings {
        let sampler = SamplerConfig {
            temperature: entry.temperature,
            top_k: entry.top_k,
            top_p: entry.top_p,
            repeat_penalty: entry.repeat_penalty,
            ..SamplerConfig::default()
        };
        ModelSettings {
            entry: Some(entry.name.clone()),
            defaults: GenerationDefaults { sampler, max_tokens: entry.max_tokens },
            min_pixels: entry.image_min_pixels,
            max_pixels: entry.image_max_pixels,
        }
    }

    /// The settings of the model file at `model` (with the projector `mmproj`, checked too when
    /// it is named as the entry's): see the module's rule.
    pub fn of_file(model: &Path, mmproj: Option<&Path>) -> Result<ModelSettings, CliError> {
        Self::of_file_in(&Catalog::load()?.0, model, mmproj)
    }

    fn of_file_in(catalog: &Catalog, model: &Path, mmproj: Option<&Path>) -> Result<ModelSettings, CliError> {
        let Some(entry) = catalog.by_model_file(model) else { return Ok(Self::own()) };
        entry.check_model(&GgufFile::open(model).map_err(CliError::Gguf)?, model)?;
        if let Some(p) = mmproj.filter(|p| p.file_name().is_some_and(|n| *n == *entry.mmproj_file)) {
            entry.check_mmproj(&GgufFile::open(p).map_err(CliError::Gguf)?, p)?;
        }
        Ok(Self::of(entry))
    }
}

/// The default model's two files, found in the search folders (the message names the folders
/// and where the files come from when they are not there).
pub fn default_model_files() -> Result<(PathBuf, PathBuf), CliError> {
    let (catalog, _) = Catalog::load()?;
    let entry = catalog.default_entry().ok_or_else(|| CliError::Failed("models.toml has no default model".into()))?;
    let dirs = search_dirs();
    let dir_list = || dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ");
    let (model, mmproj) = match (locate(&entry.model_file, &dirs), locate(&entry.mmproj_file, &dirs)) {
        (Some(m), Some(p)) => return Ok((m, p)),
        // One of the two is there: the other belongs beside it.
        (Some(m), None) => (format!("{} is at {}, but", entry.model_file, m.display()), &entry.mmproj_file),
        (None, Some(p)) => (format!("{} is at {}, but", entry.mmproj_file, p.display()), &entry.model_file),
        (None, None) => {
            return Err(CliError::NoModel(format!(
                "no model given and the default model {} is not installed: put {} and {} (from {}) into one of: {} (folders in $HRX_MODELS, colon-separated, are searched too); or pass -m and --mmproj",
                entry.name,
                entry.model_file,
                entry.mmproj_file,
                entry.source,
                dir_list()
            )))
        }
    };
    Err(CliError::NoModel(format!(
        "no model given and the default model {} is half installed: {model} {mmproj} (from {}) is in none of: {}; put it beside the other, or pass -m and --mmproj",
        entry.name,
        entry.source,
        dir_list()
    )))
}

/// A setting's default as `--help` says it: hrx's `own`, and the models.toml entries' (each
/// entry's value by `of`) where they differ from it.
pub fn default_text<T: PartialEq + Display>(own: T, of: impl Fn(&ModelSettings) -> T) -> String {
    // A system models.toml that does not load is the command's error, said when it runs; its
    // help still gives the built-in entries' defaults.
    let catalog = Catalog::load().map_or_else(|_| Catalog::builtin(), |(c, _)| c);
    default_text_in(&catalog, own, of)
}

fn default_text_in<T: PartialEq + Display>(catalog: &Catalog, own: T, of: impl Fn(&ModelSettings) -> T) -> String {
    let values: Vec<T> = catalog.models.iter().map(|e| of(&ModelSettings::of(e))).collect();
    match values.first() {
        None => format!("default {own}"),
        Some(_) if values.iter().all(|v| *v == own) => format!("default {own}"),
        Some(first) if values.iter().all(|v| v == first) => {
            format!("default {first} for the models of models.toml, else {own}")
        }
        Some(_) => format!("default: the model's models.toml value, `hrx models` lists them; else {own}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::{GgufWriter, Value};

    const CATALOG: &str = r#"
default = "a"
[[model]]
name = "a"
description = "d"
source = "s"
model_file = "qwen3vl-tiny-F16.gguf"
mmproj_file = "mmproj-qwen3vl-tiny-F16.gguf"
model_sha256 = ""
mmproj_sha256 = ""
model_architecture = "qwen3vl"
model_block_count = 2
temperature = 0.7
top_p = 0.8
top_k = 20
repeat_penalty = 1.0
max_tokens = 99
image_max_pixels = 500000
image_min_pixels = 65536
"#;

    /// Writes a GGUF of metadata only (what the facts read) as `dir/name`.
    fn gguf(dir: &Path, name: &str, meta: &[(&str, Value)]) -> PathBuf {
        let mut w = GgufWriter::new();
        for (key, value) in meta {
            w.set(key, value.clone());
        }
        let path = dir.join(name);
        std::fs::write(&path, w.to_bytes()).unwrap();
        path
    }

    #[test]
    fn a_file_named_as_an_entry_takes_its_settings_only_if_its_facts_hold() {
        let catalog = Catalog::parse(CATALOG).unwrap();
        let dir = std::env::temp_dir().join(format!("hrx-registry-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let text = [("general.architecture", Value::String("qwen3vl".into())), ("qwen3vl.block_count", Value::U32(2))];
        let model = gguf(&dir, "qwen3vl-tiny-F16.gguf", &text);
        // Named as entry a and with its 2 blocks: a's defaults and budget, from any folder.
        let s = ModelSettings::of_file_in(&catalog, &model, None).unwrap();
        assert_eq!(s.entry.as_deref(), Some("a"));
        assert_eq!((s.defaults.sampler.temperature, s.defaults.sampler.top_k, s.defaults.max_tokens), (0.7, 20, 99));
        assert_eq!((s.min_pixels, s.max_pixels), (65_536, 500_000));
        // Another name: hrx's own.
        let other = gguf(&dir, "mine.gguf", &text);
        let s = ModelSettings::of_file_in(&catalog, &other, None).unwrap();
        assert_eq!((s.entry, s.defaults.sampler.temperature), (None, 0.0));
        // The right name and the wrong shape: refused, naming the fact.
        let wrong = Catalog::parse(&CATALOG.replace("model_block_count = 2", "model_block_count = 28")).unwrap();
        let e = ModelSettings::of_file_in(&wrong, &model, None).unwrap_err().to_string();
        assert!(e.contains("its model_block_count is 2, models.toml records 28"), "{e}");
        // The projector is checked when it is named as the entry's.
        let mmproj = gguf(&dir, "mmproj-qwen3vl-tiny-F16.gguf", &[("clip.vision.projection_dim", Value::U32(64))]);
        let proj =
            Catalog::parse(&CATALOG.replace("max_tokens = 99", "max_tokens = 99\nmmproj_projection_dim = 7")).unwrap();
        let e = ModelSettings::of_file_in(&proj, &model, Some(&mmproj)).unwrap_err().to_string();
        assert!(e.contains("its mmproj_projection_dim is 64, models.toml records 7"), "{e}");
        assert!(ModelSettings::of_file_in(&proj, &model, Some(&other)).is_ok(), "a projector of another name is not");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn help_gives_hrxs_default_and_the_entries_where_they_differ() {
        let catalog = Catalog::parse(CATALOG).unwrap();
        assert_eq!(
            default_text_in(&catalog, 0.0, |s| s.defaults.sampler.temperature),
            "default 0.7 for the models of models.toml, else 0"
        );
        assert_eq!(default_text_in(&catalog, 65_536, |s| s.min_pixels), "default 65536");
        let two = format!("{CATALOG}{}", &CATALOG[CATALOG.find("[[model]]").unwrap()..])
            .replacen("name = \"a\"", "name = \"b\"", 1)
            .replacen("temperature = 0.7", "temperature = 0.5", 1);
        let catalog = Catalog::parse(&two).unwrap();
        assert!(default_text_in(&catalog, 0.0, |s| s.defaults.sampler.temperature).contains("`hrx models` lists them"));
    }
}
