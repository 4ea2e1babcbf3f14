//! `hrx tokenize -m MODEL.gguf [--special] [--json]`: text on stdin, token ids out.

use super::{CliError, Command};
use crate::cli::args::Args;
use crate::gguf::GgufFile;
use crate::json::Json;
use crate::runtime::RuntimeError;
use crate::tokenizer::Tokenizer;
use std::io::{Read, Write};

pub const HELP: &str = "\
hrx tokenize: turn text into the model's token ids

usage: hrx tokenize -m MODEL.gguf [--special] [--no-nfc] [--json] < text.txt

Reads all of standard input (UTF-8) and prints its token ids, space-separated.
The vocabulary comes from the GGUF file's tokenizer.ggml.* metadata.

  -m, --model FILE   the GGUF file whose vocabulary to use
  --special          recognise special tokens written in the text (<|im_start|>...),
                     as chat templates need; without it they are plain text
  --no-nfc           skip Unicode NFC normalisation (what llama.cpp does; HF normalises)
  --json             print {\"ids\":[...],\"tokens\":[...]} (tokens in the vocabulary's spelling)

example: echo -n 'Hello world' | hrx tokenize -m qwen3vl-tiny-F16.gguf";

pub const COMMAND: Command =
    Command { name: "tokenize", summary: "print the token ids of text on stdin", help: || HELP.to_owned(), run };

fn run(mut args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    let model = args.value(&["-m", "--model"])?.ok_or_else(|| CliError::usage("tokenize needs -m MODEL.gguf"))?;
    let special = args.flag(&["--special"]);
    let no_nfc = args.flag(&["--no-nfc"]);
    let json = args.flag(&["--json"]);
    if !args.finish()?.is_empty() {
        return Err(CliError::usage("tokenize reads its text from standard input, not from arguments"));
    }
    let file = GgufFile::open(&model)?;
    let tokenizer = Tokenizer::from_gguf(&file)
        .map_err(|source| RuntimeError::Tokenizer { file: model.clone().into(), source })?
        .with_nfc(!no_nfc);
    let mut bytes = Vec::new();
    std::io::stdin().read_to_end(&mut bytes)?;
    let text = String::from_utf8(bytes).map_err(|e| {
        CliError::Failed(format!("standard input is not UTF-8 (byte {})", e.utf8_error().valid_up_to()))
    })?;
    let ids = tokenizer.encode(&text, special);
    if json {
        let tokens = ids.iter().map(|&id| Json::str(tokenizer.token_str(id).unwrap_or(""))).collect();
        let ids_json = ids.iter().map(|&id| Json::Int(id.into())).collect();
        writeln!(
            out,
            "{}",
            Json::obj([("ids", Json::Arr(ids_json)), ("tokens", Json::Arr(tokens))]).to_string_compact()
        )?;
    } else {
        let line = ids.iter().map(u32::to_string).collect::<Vec<_>>().join(" ");
        writeln!(out, "{line}")?;
    }
    Ok(())
}
