//! models.toml: the registry of known models (compiled into the binary) and where their files
//! are looked for. The file is a strict subset of TOML, parsed here: `key = value` lines,
//! `[[model]]` entries, strings, numbers, booleans and comments.

pub mod facts;

use crate::gguf::GgufFile;
use facts::{FileFacts, Mismatch};
use std::fmt;
use std::path::{Path, PathBuf};

const BUILTIN: &str = include_str!("../../models.toml");

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
        Catalog::parse(BUILTIN).unwrap_or(Catalog { default: String::new(), models: Vec::new() })
    }

    pub fn parse(text: &str) -> Result<Catalog, CatalogError> {
        let mut default = None;
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
        Ok(Catalog { default, models })
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
/// (colon-separated), ~/.local/share/hrx/models.
pub fn search_dirs() -> Vec<PathBuf> {
    let mut dirs = vec![PathBuf::from("models")];
    if let Some(v) = std::env::var_os("HRX_MODELS") {
        dirs.extend(std::env::split_paths(&v));
    }
    if let Some(home) = std::env::var_os("HOME") {
        dirs.push(Path::new(&home).join(".local/share/hrx/models"));
    }
    dirs
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

    #[test]
    fn comments_and_strings_with_hashes() {
        assert_eq!(strip_comment("a = \"x#y\" # c"), "a = \"x#y\" ");
        assert_eq!(parse_value(" 1_048_576 "), Some(Scalar::Num(1048576.0)));
        assert_eq!(parse_value("\"a\\\"b\""), None);
    }
}
