//! `hrx models`: the known models (models.toml), which are present, and (--verify) intact.

use super::{CliError, Command};
use crate::catalog::facts::Mismatch;
use crate::catalog::{locate, search_dirs, Catalog, ModelEntry};
use crate::cli::args::Args;
use crate::gguf::GgufFile;
use crate::json::Json;
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::Path;

pub const HELP: &str = "\
hrx models: list the known models and whether their files are here

usage: hrx models [--verify] [--json]

Known models come from models.toml: /etc/hrx/models.toml when it exists (the
Debian package installs it), else the copy built into hrx. Files are looked for
in ./models, then each folder of $HRX_MODELS (colon-separated), then
~/.local/share/hrx/models, then /var/lib/hrx/models (where the services' models
go). hrx never downloads: copy the files named here from each model's source
into one of those folders. Each entry's line of defaults is what a file that is
that model takes (with -m too); `--help` of a command gives hrx's own for any
other file.

  --verify   check each file present against what models.toml records of it (size,
             architecture, block count, embedding width, vocabulary size, projector
             width: a mismatch is one line naming the field), then its sha256 where
             one is recorded; exit code 1 when a file does not match
  --json     {\"catalog\":...,\"default\":...,\"search_dirs\":[...],\"models\":[{\"name\",\"model_file\",\"model_path\",...}]}

example: hrx models --verify";

pub const COMMAND: Command =
    Command { name: "models", summary: "list known models and which are present", help: || HELP.to_owned(), run };

pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// A file's state: "missing", "present" (not verified), or under --verify its recorded facts
/// checked (`check`) and then its sha256; the bool: whether it failed verification.
fn verdict(
    path: Option<&Path>,
    recorded: &str,
    verify: bool,
    check: impl Fn(&GgufFile, &Path) -> Result<(), Mismatch>,
) -> Result<(String, bool), CliError> {
    let Some(p) = path else { return Ok(("missing".into(), false)) };
    if !verify {
        return Ok(("present".into(), false));
    }
    let facts = GgufFile::open(p).map_err(|e| e.to_string()).and_then(|f| check(&f, p).map_err(|m| m.what()));
    if let Err(why) = facts {
        return Ok((format!("MISMATCH: {why}"), true));
    }
    if recorded.is_empty() {
        return Ok(("facts match (no sha256 recorded)".into(), false));
    }
    let got = sha256_file(p).map_err(CliError::os(p.display()))?;
    Ok(if got.eq_ignore_ascii_case(recorded) {
        ("verified (facts and sha256)".into(), false)
    } else {
        ("SHA256 MISMATCH".into(), true)
    })
}

/// An entry's defaults, as a file that is that model takes them.
fn defaults_line(m: &ModelEntry) -> String {
    format!(
        "temperature {}, top_p {}, top_k {}, repeat_penalty {}, max_tokens {}, image pixels {}..{}",
        m.temperature, m.top_p, m.top_k, m.repeat_penalty, m.max_tokens, m.image_min_pixels, m.image_max_pixels
    )
}

fn run(mut args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    let verify = args.flag(&["--verify"]);
    let json = args.flag(&["--json"]);
    if !args.finish()?.is_empty() {
        return Err(CliError::usage("models takes no positional arguments"));
    }
    let (catalog, source) = Catalog::load()?;
    let dirs = search_dirs();
    let mut rows = Vec::new();
    let mut failed = 0;
    for m in &catalog.models {
        let model_path = locate(&m.model_file, &dirs);
        let mmproj_path = locate(&m.mmproj_file, &dirs);
        let (model_state, bad_model) =
            verdict(model_path.as_deref(), &m.model_sha256, verify, |f, p| m.check_model(f, p))?;
        let (mmproj_state, bad_mmproj) =
            verdict(mmproj_path.as_deref(), &m.mmproj_sha256, verify, |f, p| m.check_mmproj(f, p))?;
        failed += usize::from(bad_model) + usize::from(bad_mmproj);
        if json {
            let path =
                |p: &Option<std::path::PathBuf>| p.as_ref().map_or(Json::Null, |p| Json::str(p.display().to_string()));
            rows.push(Json::obj([
                ("name", Json::str(&m.name)),
                ("default", Json::Bool(m.name == catalog.default)),
                ("description", Json::str(&m.description)),
                ("source", Json::str(&m.source)),
                ("model_file", Json::str(&m.model_file)),
                ("model_path", path(&model_path)),
                ("model_state", Json::str(model_state)),
                ("mmproj_file", Json::str(&m.mmproj_file)),
                ("mmproj_path", path(&mmproj_path)),
                ("mmproj_state", Json::str(mmproj_state)),
                ("defaults", Json::str(defaults_line(m))),
            ]));
        } else {
            let mark = if m.name == catalog.default { " (default)" } else { "" };
            writeln!(out, "{}{mark}: {}", m.name, m.description)?;
            writeln!(out, "  {:<44} {model_state}", m.model_file)?;
            writeln!(out, "  {:<44} {mmproj_state}", m.mmproj_file)?;
            writeln!(out, "  defaults: {}", defaults_line(m))?;
            writeln!(out, "  source: {}", m.source)?;
        }
    }
    let dir_list: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    if json {
        let j = Json::obj([
            ("catalog", Json::str(source.to_string())),
            ("default", Json::str(&catalog.default)),
            ("search_dirs", Json::Arr(dir_list.iter().map(Json::str).collect())),
            ("models", Json::Arr(rows)),
        ]);
        writeln!(out, "{}", j.to_string_compact())?;
    } else {
        writeln!(out, "models.toml: {source}")?;
        writeln!(out, "searched: {}", dir_list.join(", "))?;
    }
    match failed {
        0 => Ok(()),
        n => Err(CliError::Failed(format!("{n} files do not match what models.toml records of them (see above)"))),
    }
}
