//! `hrx inspect FILE.gguf [--json]`: the metadata and the tensor table of a GGUF file.

use super::{CliError, Command};
use crate::cli::args::Args;
use crate::gguf::{GgufFile, TensorInfo, Value};
use crate::json::Json;
use std::io::Write;

pub const HELP: &str = "\
hrx inspect: show a GGUF file's metadata and tensor table

usage: hrx inspect FILE.gguf [--json]

Prints the format version, every metadata key (arrays longer than 8 items are
summarised as [type; length] and their first items), then one line per tensor:
name, dtype, shape (innermost dimension first, as ggml), data offset from the
start of the data section, and bytes.

  --json   one JSON object instead:
           {\"metadata\":{KEY:VALUE,...},\"tensors\":[{\"name\",\"dtype\",\"shape\",\"offset\",\"bytes\"},...]}
           arrays longer than 64 items become {\"type\",\"len\",\"head\"} (the first 8)

example: hrx inspect models/Qwen3-VL-2B-Instruct-Q4_K_M.gguf | less";

pub const COMMAND: Command =
    Command { name: "inspect", summary: "show a GGUF file's metadata and tensors", help: || HELP.to_owned(), run };

fn run(mut args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    let json = args.flag(&["--json"]);
    let files = args.finish()?;
    let [path] = files.as_slice() else {
        return Err(CliError::usage("inspect takes exactly one FILE.gguf"));
    };
    let file = GgufFile::open(path)?;
    if json {
        writeln!(out, "{}", inspect_json(&file).to_string_compact())?;
    } else {
        write_text(&file, out)?;
    }
    Ok(())
}

fn write_text(file: &GgufFile, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "{}: GGUF v{}, {} metadata keys, {} tensors, alignment {}, data at byte {}",
        file.path().display(),
        file.version(),
        file.metadata().len(),
        file.tensors().len(),
        file.alignment(),
        file.data_offset()
    )?;
    writeln!(out, "\nmetadata:")?;
    for (key, value) in file.metadata() {
        writeln!(out, "  {key:<44} {:<7} {value}", value.value_type().name())?;
    }
    writeln!(out, "\ntensors:")?;
    writeln!(out, "  {:>5}  {:<40} {:<6} {:<28} {:>14} {:>12}", "#", "name", "dtype", "shape", "offset", "bytes")?;
    for (i, t) in file.tensors().iter().enumerate() {
        let shape = t.shape().iter().map(u64::to_string).collect::<Vec<_>>().join(" x ");
        writeln!(out, "  {i:>5}  {:<40} {:<6} {shape:<28} {:>14} {:>12}", t.name, t.dtype.name(), t.offset, t.n_bytes)?;
    }
    let total: u64 = file.tensors().iter().map(|t| t.n_bytes).sum();
    writeln!(out, "\n{} tensors, {} bytes of data", file.tensors().len(), total)
}

pub fn inspect_json(file: &GgufFile) -> Json {
    let metadata = file.metadata().iter().map(|(k, v)| (k.clone(), value_json(v))).collect();
    let tensors = file.tensors().iter().map(tensor_json).collect();
    Json::obj([("metadata", Json::Obj(metadata)), ("tensors", Json::Arr(tensors))])
}

fn tensor_json(t: &TensorInfo) -> Json {
    Json::obj([
        ("name", Json::str(&t.name)),
        ("dtype", Json::str(t.dtype.name())),
        ("shape", Json::Arr(t.shape().iter().map(|&d| Json::Int(d.into())).collect())),
        ("offset", Json::Int(t.offset.into())),
        ("bytes", Json::Int(t.n_bytes.into())),
    ])
}

fn value_json(v: &Value) -> Json {
    const FULL_ARRAY_MAX: usize = 64;
    const HEAD: usize = 8;
    match v {
        Value::Array(ty, items) if items.len() > FULL_ARRAY_MAX => Json::obj([
            ("type", Json::str(ty.name())),
            ("len", Json::Int(items.len() as i128)),
            ("head", Json::Arr(items.iter().take(HEAD).map(value_json).collect())),
        ]),
        Value::Array(_, items) => Json::Arr(items.iter().map(value_json).collect()),
        Value::String(s) => Json::str(s),
        Value::Bool(b) => Json::Bool(*b),
        Value::F32(x) => Json::Num(f64::from(*x)),
        Value::F64(x) => Json::Num(*x),
        other => match (other.as_u64(), other.as_i64()) {
            (Some(u), _) => Json::Int(u.into()),
            (None, Some(i)) => Json::Int(i.into()),
            (None, None) => Json::Null,
        },
    }
}
