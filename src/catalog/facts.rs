//! What models.toml records of a model's two files that can be checked without the network or
//! a hash: file size, architecture, block count, embedding width, vocabulary size, projector
//! width. A file named as an entry's is that entry only if every fact recorded for it holds, so
//! a random file under the 2B's name is not taken for the 2B (its defaults, its name in serve).

use crate::gguf::GgufFile;
use std::fmt;
use std::path::{Path, PathBuf};

/// The facts of one file, each None where models.toml does not record it (or, read from a
/// file, where the file does not say).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileFacts {
    /// Bytes.
    pub size: Option<u64>,
    /// `general.architecture`: `qwen3vl` for the text model, `clip` for the projector.
    pub architecture: Option<String>,
    /// `{arch}.block_count`: the text model's layers.
    pub block_count: Option<u64>,
    /// `{arch}.embedding_length`: the text model's width.
    pub embedding_length: Option<u64>,
    /// Tokens in `tokenizer.ggml.tokens`.
    pub vocab_size: Option<u64>,
    /// `clip.vision.projection_dim`: the width of the projector's image tokens (the text
    /// model's embedding width).
    pub projection_dim: Option<u64>,
}

/// The names of the facts as models.toml spells them after the file's prefix (`model_`,
/// `mmproj_`), in the order they are checked.
pub const FACTS: [&str; 6] =
    ["size", "architecture", "block_count", "embedding_length", "vocab_size", "projection_dim"];

impl FileFacts {
    /// What `file` says of itself.
    pub fn of(file: &GgufFile) -> FileFacts {
        let string = |key: &str| file.get(key).and_then(|v| v.as_str()).map(str::to_owned);
        let number = |key: &str| file.get(key).and_then(|v| v.as_u64());
        let architecture = string("general.architecture");
        let arch = architecture.clone().unwrap_or_default();
        FileFacts {
            size: Some(file.file_len()),
            block_count: number(&format!("{arch}.block_count")),
            embedding_length: number(&format!("{arch}.embedding_length")),
            vocab_size: file.get("tokenizer.ggml.tokens").and_then(|v| v.as_array()).map(|a| a.len() as u64),
            projection_dim: number("clip.vision.projection_dim"),
            architecture,
        }
    }

    /// A fact by its name in [`FACTS`], as text (None: not known).
    fn get(&self, name: &str) -> Option<String> {
        match name {
            "size" => self.size.map(|n| n.to_string()),
            "architecture" => self.architecture.clone(),
            "block_count" => self.block_count.map(|n| n.to_string()),
            "embedding_length" => self.embedding_length.map(|n| n.to_string()),
            "vocab_size" => self.vocab_size.map(|n| n.to_string()),
            "projection_dim" => self.projection_dim.map(|n| n.to_string()),
            _ => None,
        }
    }

    /// The first recorded fact (in [`FACTS`]' order) that `found` contradicts: its name and
    /// both values (the found one None where the file does not say).
    pub fn contradiction(&self, found: &FileFacts) -> Option<(&'static str, String, Option<String>)> {
        FACTS.iter().find_map(|&name| {
            let recorded = self.get(name)?;
            let seen = found.get(name);
            (seen.as_ref() != Some(&recorded)).then_some((name, recorded, seen))
        })
    }
}

/// A file named as an entry's whose facts are not the entry's: one line naming the field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    pub file: PathBuf,
    pub entry: String,
    /// The models.toml key (`model_block_count`).
    pub key: String,
    pub recorded: String,
    pub found: Option<String>,
}

impl Mismatch {
    /// The field and both values: `its model_block_count is 2, models.toml records 28`.
    pub fn what(&self) -> String {
        let found = self.found.as_deref().unwrap_or("not given");
        format!("its {} is {found}, models.toml records {}", self.key, self.recorded)
    }
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is not models.toml's {}: {} (rename the file if it is another model)",
            self.file.display(),
            self.entry,
            self.what()
        )
    }
}

impl std::error::Error for Mismatch {}

/// Checks `file` (at `path`) against `recorded`, the facts of entry `entry` whose keys start
/// with `prefix` (`model_`, `mmproj_`).
pub fn check(recorded: &FileFacts, file: &GgufFile, path: &Path, entry: &str, prefix: &str) -> Result<(), Mismatch> {
    match recorded.contradiction(&FileFacts::of(file)) {
        None => Ok(()),
        Some((name, recorded, found)) => Err(Mismatch {
            file: path.to_owned(),
            entry: entry.to_owned(),
            key: format!("{prefix}{name}"),
            recorded,
            found,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_recorded_fact_a_file_contradicts_is_named() {
        let recorded = FileFacts {
            architecture: Some("qwen3vl".into()),
            block_count: Some(28),
            vocab_size: Some(151_936),
            ..FileFacts::default()
        };
        let found = FileFacts {
            size: Some(5),
            architecture: Some("qwen3vl".into()),
            block_count: Some(2),
            embedding_length: Some(64),
            vocab_size: Some(7),
            projection_dim: None,
        };
        assert_eq!(recorded.contradiction(&found), Some(("block_count", "28".into(), Some("2".into()))));
        let same = FileFacts { block_count: Some(28), vocab_size: Some(151_936), ..found.clone() };
        assert_eq!(recorded.contradiction(&same), None, "facts not recorded are not checked");
        let unsaid = FileFacts { architecture: None, ..same };
        assert_eq!(recorded.contradiction(&unsaid), Some(("architecture", "qwen3vl".into(), None)));
        let m = Mismatch {
            file: "m/Qwen3VL-2B-Instruct-Q4_K_M.gguf".into(),
            entry: "qwen3-vl-2b-instruct".into(),
            key: "model_block_count".into(),
            recorded: "28".into(),
            found: Some("2".into()),
        };
        assert_eq!(
            m.to_string(),
            "m/Qwen3VL-2B-Instruct-Q4_K_M.gguf is not models.toml's qwen3-vl-2b-instruct: its model_block_count is 2, models.toml records 28 (rename the file if it is another model)"
        );
    }
}
