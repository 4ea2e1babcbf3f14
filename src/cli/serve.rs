//! `hrx serve`: the OpenAI-compatible HTTP server (see src/serve).

use super::describe::DescriberFlags;
use super::{CliError, Command};
use crate::cli::args::Args;
use crate::serve::handler::App;
use std::io::Write;
use std::net::TcpListener;
use std::sync::Arc;

pub const HELP: &str = "\
hrx serve: an OpenAI-compatible chat server, offline, for local clients

usage: hrx serve [-m MODEL.gguf --mmproj MMPROJ.gguf] [--host 127.0.0.1] [--port 8080]
                 [--allow-files] [options]

Loads the model once, then answers:
  POST /v1/chat/completions  OpenAI's chat format: system/user/assistant messages whose
                             content is a string or parts {\"type\":\"text\"} and
                             {\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,...\"}};
                             max_tokens, temperature, top_p, top_k, seed, stop;
                             \"stream\": true for server-sent events ending with [DONE]
  GET /v1/models             the model's name
  GET /health                {\"status\":\"ok\"}
One request runs at a time; the others wait their turn. hrx never fetches http(s) image
URLs. Request bodies are limited to 64 MiB, heads to 16 KiB; slow clients time out.
Prints `listening on http://HOST:PORT` once ready, then one line per request on stderr.

  --host ADDR              address to listen on (default 127.0.0.1: this machine only)
  --port N                 port (default 8080; 0 picks a free one)
  --allow-files            also accept file:///absolute/path image URLs (files the
                           server can read: only for trusted clients)
  -m, --model FILE         the text model GGUF (default: models.toml's, as hrx describe)
  --mmproj FILE            the vision projector GGUF
  --image-max-pixels N --image-min-pixels N --max-image-mp N
                           image budget and limits, as in `hrx describe`
  -n, --max-tokens N       answer length when a request gives no max_tokens
  --temp T --top-k K --top-p P --min-p P --repeat-penalty R --seed S --stop STR --ignore-eos
                           sampling when a request does not say (default: greedy)
  --ctx N                  context length (default 4096)
  --threads N              CPU threads

example:
  hrx serve --port 8080 &
  curl -s localhost:8080/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"max_tokens\":32}'";

pub const COMMAND: Command = Command { name: "serve", summary: "serve an OpenAI-compatible chat API", help: HELP, run };

fn run(mut args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    let host = args.value(&["--host"])?.unwrap_or_else(|| "127.0.0.1".to_owned());
    let port: u16 = args.parsed(&["--port"])?.unwrap_or(8080);
    let allow_files = args.flag(&["--allow-files"]);
    let flags = DescriberFlags::parse(&mut args)?;
    if !args.finish()?.is_empty() {
        return Err(CliError::usage("serve takes no positional arguments"));
    }
    let describer = flags.load()?;
    let listener = TcpListener::bind((host.as_str(), port)).map_err(|e| CliError::Failed(format!("cannot listen on {host}:{port}: {e}")))?;
    let addr = listener.local_addr()?;
    writeln!(out, "hrx serve: listening on http://{addr} (model {})", flags.name)?;
    out.flush()?;
    crate::serve::serve(listener, Arc::new(App::new(describer, flags.config, flags.name, allow_files)));
    Ok(())
}
