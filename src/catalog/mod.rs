//! models.toml: the registry of known models (compiled into the binary, or the system copy in
//! /etc/hrx) and where their files are looked for. The file is a strict subset of TOML, parsed
//! here: `key = value` lines, `[[model]]` entries, strings, numbers, booleans and comments.

pub mod facts;

use crate::gguf::GgufFile;
use facts::{FileFacts, Mismatch};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

const BUILTIN: &str = include_str!("../../models.toml");

/// The system copy of models.toml, which the Debian package installs as a configuration file:
/// on a box that cannot rebuild hrx, an administrator records the sha256 of the files they
/// copied, or adds a model, here. When it exists it replaces the built-in registry whole.
pub const SYSTEM_CATALOG: &str = "/etc/hrx/models.toml";

/// Where the services' models go (the package's units run hrx as a dynamic user with no home,
/// so neither ./models nor ~/.local/share is theirs): searched last.
pub const SYSTEM_MODELS: &str = "/var/lib/hrx/models";

#[derive(Clone, Debug, PartialEq)]
pub struct ModelEntry {
    pub name: String,
    pub description: String,
    pub source: String,
    pub model_file: String,
    pub mmproj_file: String,
    /// Hex digests; empty when not recorded.
    pub model_sha256: String,
    pub mmproj_sha256: String,
    pub temperature: f32,
    pub top_p: f32,
    pub top_k: usize,
    pub repeat_penalty: f32,
    pub max_tokens: usize,
    pub image_max_pixels: usize,
    pub image_min_pixels: usize,
    /// What is recorded of each file (`model_block_count`, `mmproj_projection_dim`, ...).
    pub model_facts: FileFacts,
    pub mmproj_facts: FileFacts,
}

impl ModelEntry {
    /// Whether `file`, at `path` (named as this entry's model file), is this entry's model:
    /// every recorded fact holds.
    pub fn check_model(&self, file: &GgufFile, path: &Path) -> Result<(), Mismatch> {
        facts::check(&self.model_facts, file, path, &self.name, "model_")
    }

    /// The same for its projector.
    pub fn check_mmproj(&self, file: &GgufFile, path: &Path) -> Result<(), Mismatch> {
        facts::check(&self.mmproj_facts, file, path, &self.name, "mmproj_")
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Catalog {
    pub default: String,
    pub models: Vec<ModelEntry>,
    /// Whether hrx checks its kernels on a Vulkan device before a model first runs there
    /// (`self_check = false` turns it off for this box, as `--no-check` does per command).
    pub self_check: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CatalogError {
    pub line: usize,
    pub message: String,
}

impl fmt::Display for CatalogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "models.toml line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for CatalogError {}

/// Where the registry in use came from.
#[derive(Clone, Debug, PartialEq)]
pub enum CatalogSource {
    Builtin,
    File(PathBuf),
}

impl fmt::Display for CatalogSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CatalogSource::Builtin => f.write_str("built into hrx"),
            CatalogSource::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// A system models.toml that exists but cannot be used: hrx refuses it rather than quietly
/// falling back to the built-in registry, so an administrator's edit is never ignored.
#[derive(Debug)]
pub enum LoadError {
    Read { path: PathBuf, source: io::Error },
    Parse { path: PathBuf, error: CatalogError },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Read { path, source } => write!(f, "{}: {source}", path.display()),
            LoadError::Parse { path, error } => write!(f, "{}: line {}: {}", path.display(), error.line, error.message),
        }
    }
}

impl std::error::Error for LoadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LoadError::Read { source, .. } => Some(source),
            LoadError::Parse { error, .. } => Some(error),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Scalar {
    Str(String),
    Num(f64),
    Bool(bool),
}

fn parse_value(text: &str) -> Option<Scalar> {
    let text = text.trim();
    if let Some(body) = text.strip_prefix('"') {
        let body = body.strip_suffix('"')?;
        if body.contains('"') || body.contains('\\') {
            return None;
        }
        return Some(Scalar::Str(body.to_owned()));
    }
    match text {
        "true" => Some(Scalar::Bool(true)),
        "false" => Some(Scalar::Bool(false)),
        _ => text.replace('_', "").parse::<f64>().ok().filter(|x| x.is_finite()).map(Scalar::Num),
    }
}

/// Strips a `#` comment that is not inside a string.
fn strip_comment(line: &str) -> &str {
    let mut in_string = false;
    for (i, c) in line.char_indices() {
        match c {
            '"' => in_string = !in_string,
            '#' if !in_string => return &line[..i],
            _ => {}
        }
    }
    line
}

impl Catalog {
    /// The registry compiled into hrx.
    pub fn builtin() -> Catalog {
        // The built-in file is tested to parse (catalog tests); an empty catalog is the
        // harmless answer if it somehow did not.
        Catalog::parse(BUILTIN).unwrap_or(Catalog { default: String::new(), models: Vec::new(), self_check: true })
    }

    /// The registry hrx uses: the system copy ([`SYSTEM_CATALOG`]) when there is one, else the
    /// built-in one.
    pub fn load() -> Result<(Catalog, CatalogSource), LoadError> {
        Catalog::load_from(Path::new(SYSTEM_CATALOG))
    }

    /// [`Catalog::load`] with the system copy at `system`.
    pub fn load_from(system: &Path) -> Result<(Catalog, CatalogSource), LoadError> {
        match std::fs::read_to_string(system) {
            Ok(text) => Catalog::parse(&text)
                .map(|c| (c, CatalogSource::File(system.to_owned())))
                .map_err(|error| LoadError::Parse { path: system.to_owned(), error }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok((Catalog::builtin(), CatalogSource::Builtin)),
            Err(source) => Err(LoadError::Read { path: system.to_owned(), source }),
        }
    }

    pub fn parse(text: &str) -> Result<Catalog, CatalogError> {
        let mut default = None;
        let mut self_check = None;
        let mut entries: Vec<(usize, Vec<(String, Scalar)>)> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line_no = i + 1;
            let err = |message: String| CatalogError { line: line_no, message };
            let line = strip_comment(raw).trim();
            if line.is_empty() {
                continue;
            }
            if line == "[[model]]" {
                entries.push((line_no, Vec::new()));
                continue;
            }
            let (key, value) = line
                .split_once('=')
                .ok_or_else(|| err(format!("expected `key = value` or [[model]], found {line:?}")))?;
            let key = key.trim().to_owned();
            let value =
                parse_value(value).ok_or_else(|| err(format!("{key}: cannot read the value {:?}", value.trim())))?;
            match entries.last_mut() {
                None if key == "default" => match value {
                    Scalar::Str(s) => default = Some(s),
                    _ => return Err(err("default must be a string".into())),
                },
                None if key == "self_check" => match (value, self_check) {
                    (Scalar::Bool(b), None) => self_check = Some(b),
                    (Scalar::Bool(_), Some(_)) => return Err(err("self_check given twice".into())),
                    _ => return Err(err("self_check must be true or false".into())),
                },
                None => return Err(err(format!("unknown top-level key {key:?}"))),
                Some((_, fields)) => {
                    if fields.iter().any(|(k, _)| *k == key) {
                        return Err(err(format!("{key} given twice")));
                    }
                    fields.push((key, value));
                }
            }
        }
        let models = entries.into_iter().map(|(line, fields)| entry(line, fields)).collect::<Result<Vec<_>, _>>()?;
        let default = default.ok_or(CatalogError { line: 0, message: "no `default = \"NAME\"`".into() })?;
        if !models.iter().any(|m| m.name == default) {
            return Err(CatalogError { line: 0, message: format!("default {default:?} names no [[model]]") });
        }
        Ok(Catalog { default, models, self_check: self_check.unwrap_or(true) })
    }

    pub fn get(&self, name: &str) -> Option<&ModelEntry> {
        self.models.iter().find(|m| m.name == name)
    }

    pub fn default_entry(&self) -> Option<&ModelEntry> {
        self.get(&self.default)
    }

    /// The entry whose model file has the name of the file at `path` (whatever its folder):
    /// the file is that model if its facts hold too ([`ModelEntry::check_model`]).
    pub fn by_model_file(&self, path: &Path) -> Option<&ModelEntry> {
        let name = path.file_name()?;
        self.models.iter().find(|m| std::ffi::OsStr::new(&m.model_file) == name)
    }
}

fn entry(line: usize, mut fields: Vec<(String, Scalar)>) -> Result<ModelEntry, CatalogError> {
    let err = |message: String| CatalogError { line, message };
    let mut take = |key: &str| fields.iter().position(|(k, _)| k == key).map(|i| fields.remove(i).1);
    let mut string = |key: &str| match take(key) {
        Some(Scalar::Str(s)) => Ok(s),
        Some(_) => Err(err(format!("{key} must be a string"))),
        None => Err(err(format!("[[model]] needs {key}"))),
    };
    let (name, description, source) = (string("name")?, string("description")?, string("source")?);
    let (model_file, mmproj_file) = (string("model_file")?, string("mmproj_file")?);
    let (model_sha256, mmproj_sha256) = (string("model_sha256")?, string("mmproj_sha256")?);
    let mut facts = |prefix: &str| -> Result<FileFacts, CatalogError> {
        // Absent where not known: only what a source states is recorded (models.toml says which).
        let mut count = |name: &str| match take(&format!("{prefix}{name}")) {
            None => Ok(None),
            Some(Scalar::Num(x)) if x >= 1.0 && x.fract() == 0.0 && x < 2f64.powi(53) => Ok(Some(x as u64)),
            Some(_) => Err(err(format!("{prefix}{name} must be a positive integer"))),
        };
        let (size, block_count, embedding_length) = (count("size")?, count("block_count")?, count("embedding_length")?);
        let (vocab_size, projection_dim) = (count("vocab_size")?, count("projection_dim")?);
        let architecture = match take(&format!("{prefix}architecture")) {
            None => None,
            Some(Scalar::Str(s)) => Some(s),
            Some(_) => return Err(err(format!("{prefix}architecture must be a string"))),
        };
        Ok(FileFacts { size, architecture, block_count, embedding_length, vocab_size, projection_dim })
    };
    let (model_facts, mmproj_facts) = (facts("model_")?, facts("mmproj_")?);
    let mut number = |key: &str| match take(key) {
        Some(Scalar::Num(x)) if x >= 0.0 => Ok(x),
        Some(_) => Err(err(format!("{key} must be a non-negative number"))),
        None => Err(err(format!("[[model]] needs {key}"))),
    };
    let e = ModelEntry {
        model_facts,
        mmproj_facts,
        temperature: number("temperature")? as f32,
        top_p: number("top_p")? as f32,
        top_k: number("top_k")? as usize,
        repeat_penalty: number("repeat_penalty")? as f32,
        max_tokens: number("max_tokens")? as usize,
        image_max_pixels: number("image_max_pixels")? as usize,
        image_min_pixels: number("image_min_pixels")? as usize,
        name,
        description,
        source,
        model_file,
        mmproj_file,
        model_sha256,
        mmproj_sha256,
    };
    if let Some((k, _)) = fields.first() {
        return Err(err(format!("unknown key {k:?} in [[model]] {:?}", e.name)));
    }
    Ok(e)
}

/// Where model files are looked for, in order: ./models, each folder of $HRX_MODELS
/// (colon-separated), the models/ folder of the checkout a binary was built in,
/// ~/.local/share/hrx/models, /var/lib/hrx/models.
pub fn search_dirs() -> Vec<PathBuf> {
    let mut dirs = vec![PathBuf::from("models")];
    if let Some(v) = crate::settings::settings().paths(&crate::settings::MODELS) {
        dirs.extend(std::env::split_paths(v));
    }
    dirs.extend(checkout_models());
    if let Some(home) = std::env::var_os("HOME") {
        dirs.push(Path::new(&home).join(".local/share/hrx/models"));
    }
    dirs.push(PathBuf::from(SYSTEM_MODELS));
    dirs
}

/// The repository's models/ folder, for a binary built in a checkout (`REPO/target/PROFILE/hrx`
/// beside `REPO/models.toml`): where README's set-up puts the model files.
fn checkout_models() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let repo = exe.parent()?.parent()?.parent()?;
    let built_here = exe.parent()?.parent()?.file_name()? == "target" && repo.join("models.toml").is_file();
    built_here.then(|| repo.join("models"))
}

/// The first folder of `dirs` holding `file`.
pub fn locate(file: &str, dirs: &[PathBuf]) -> Option<PathBuf> {
    dirs.iter().map(|d| d.join(file)).find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_models_toml_parses() {
        let c = Catalog::parse(BUILTIN).expect("models.toml parses");
        assert!(c.models.len() >= 3);
        let d = c.default_entry().expect("default entry");
        assert!(d.model_file.ends_with(".gguf") && d.mmproj_file.starts_with("mmproj"));
        assert!(d.image_max_pixels >= d.image_min_pixels);
    }

    #[test]
    fn facts_are_read_where_recorded_and_bad_ones_named() {
        let c = Catalog::parse(BUILTIN).unwrap();
        let d = c.default_entry().unwrap();
        assert_eq!(d.model_facts.block_count, Some(28));
        assert_eq!(d.model_facts.architecture.as_deref(), Some("qwen3vl"));
        assert_eq!((d.model_facts.size, d.mmproj_facts.projection_dim), (None, Some(2048)));
        let entry = |extra: &str| {
            format!(
                "default = \"a\"\n[[model]]\nname = \"a\"\ndescription = \"\"\nsource = \"\"\nmodel_file = \"m\"\nmmproj_file = \"p\"\nmodel_sha256 = \"\"\nmmproj_sha256 = \"\"\ntemperature = 0\ntop_p = 1\ntop_k = 0\nrepeat_penalty = 1\nmax_tokens = 1\nimage_max_pixels = 1\nimage_min_pixels = 1\n{extra}"
            )
        };
        assert_eq!(Catalog::parse(&entry("model_size = 12")).unwrap().models[0].model_facts.size, Some(12));
        let e = Catalog::parse(&entry("model_block_count = 2.5")).unwrap_err();
        assert!(e.message.contains("model_block_count must be a positive integer"), "{e}");
        let e = Catalog::parse(&entry("mmproj_architecture = 3")).unwrap_err();
        assert!(e.message.contains("mmproj_architecture must be a string"), "{e}");
        let e = Catalog::parse(&entry("model_blocks = 3")).unwrap_err();
        assert!(e.message.contains("unknown key \"model_blocks\""), "{e}");
    }

    #[test]
    fn errors_name_the_line() {
        let e = Catalog::parse("default = \"a\"\n[[model]]\nname = 3\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.contains("name must be a string"));
        let e = Catalog::parse("default = \"a\"\nnonsense\n").unwrap_err();
        assert_eq!(e.line, 2);
        let e = Catalog::parse("default = \"missing\"\n").unwrap_err();
        assert!(e.message.contains("names no"));
    }

    /// No system copy: the built-in registry. A system copy replaces it whole; one that does not
    /// parse is an error naming the file and line, never a quiet fallback.
    #[test]
    fn the_system_copy_replaces_the_builtin_registry_and_its_errors_name_it() {
        let dir = std::env::temp_dir().join(format!("hrx-catalog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("models.toml");
        let (c, source) = Catalog::load_from(&path).unwrap();
        assert_eq!((c, source), (Catalog::builtin(), CatalogSource::Builtin));
        let own = BUILTIN.replace("default = \"qwen3-vl-2b-instruct\"", "default = \"qwen3-vl-4b-instruct\"");
        std::fs::write(&path, own).unwrap();
        let (c, source) = Catalog::load_from(&path).unwrap();
        assert_eq!(c.default, "qwen3-vl-4b-instruct");
        assert_eq!(source, CatalogSource::File(path.clone()));
        std::fs::write(&path, "default = \"a\"\nnonsense\n").unwrap();
        let e = Catalog::load_from(&path).unwrap_err();
        assert!(matches!(e, LoadError::Parse { ref error, .. } if error.line == 2), "{e}");
        assert!(e.to_string().starts_with(&format!("{}: line 2:", path.display())), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_services_model_folder_is_searched_last() {
        assert_eq!(search_dirs().last().map(PathBuf::as_path), Some(Path::new("/var/lib/hrx/models")));
    }

    #[test]
    fn comments_and_strings_with_hashes() {
        assert_eq!(strip_comment("a = \"x#y\" # c"), "a = \"x#y\" ");
        assert_eq!(parse_value(" 1_048_576 "), Some(Scalar::Num(1048576.0)));
        assert_eq!(parse_value("\"a\\\"b\""), None);
    }
}
