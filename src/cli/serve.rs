//! `hrx serve`: the OpenAI-compatible HTTP server (see src/serve).

use super::describe::DescriberFlags;
use super::flags::{self, Flag, Help, PARALLEL};
use super::{CliError, Command};
use crate::cli::args::Args;
use crate::serve::handler::{App, AppSettings};
use crate::serve::http::Limits;
use std::io::Write;
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

fn help() -> String {
    let mut options = vec![
        HOST.help("address to listen on (default 127.0.0.1: this machine only)"),
        PORT.help("port (default 8080; 0 picks a free one)"),
        ALLOW_FILES.help(
            "also accept file:///absolute/path image URLs of regular files under DIR (repeatable; symbolic links are followed before the check; every unusable file gets the same answer)",
        ),
        MAX_CONNECTIONS.help(
            "connections open at once (default 1024); past it the one that has waited longest without a whole request (idle, or its head or body still arriving) is closed, and with none such a new one may only ask for /health or /metrics (8 such at once; others 503 after 0.1 s)",
        ),
        HEAD_TIMEOUT.help(
            "seconds a client has, from connecting or from its last answer on a kept connection, to send its request head (default 10; a trickle does not extend it)",
        ),
        MIN_BODY_RATE.help(
            "KiB a second a request body must arrive at, at least (default 64: a 64 MiB body over half a megabit a second): its deadline is --head-timeout after its head plus its length at this rate, and a trickle does not extend it (408)",
        ),
        SEND_TIMEOUT.help(
            "seconds one event of a streamed answer may wait to be sent (default 15): a client that stops reading is cut off that long after the socket's buffers (some 160 KB) are full, and its generation stops (logged 499)",
        ),
        PARALLEL.help(format!(
            "chat requests decoded together, each in its own KV cache of --ctx slots, so a second\n\
             client does not wait for the first to finish ({}); 1 answers one request at a time",
            flags::sequences_default_help()
        )),
        QUEUE.help("chat requests that may wait for a free sequence (default 64); past it, 503 with Retry-After"),
        QUEUE_WAIT.help("seconds a chat request may wait for a free sequence (default 60); then 503 with Retry-After"),
        MEMORY_BUDGET.help(
            "MiB that chat requests in flight may hold together: bodies from their head on, decoded images (default 2048); past it, 503 with Retry-After before the body is read. Half of it, at most 700 MB (100 MP at 7 bytes a pixel), is kept for decoding the images of the request the model is taking on (one at a time), so requests waiting never starve it; bodies share the rest, and a request's images may hold at most the pixels the share decodes (else 400)",
        ),
        MAX_TOKENS_CAP.help(format!(
            "the most tokens a request's max_tokens may ask for (default {DEFAULT_MAX_TOKENS_CAP}); more: 400 naming this cap"
        )),
        NO_PAGE.help("do not serve the kiosk page at / and /kiosk (404 there)"),
        CORS_ORIGIN.help(
            "let pages of ORIGIN (scheme://host[:port], or * for any) call the API from a browser: CORS headers and OPTIONS preflights (repeatable; default none)",
        ),
    ];
    options.extend(DescriberFlags::help());
    Help {
        title: "hrx serve: an OpenAI-compatible chat server, offline, for local clients",
        usage: "hrx serve [-m MODEL.gguf --mmproj MMPROJ.gguf] [--host 127.0.0.1] [--port 8080]\n\
                \x20                [--allow-files DIR] [options]",
        about: "Loads the model once, then answers:\n\
                \x20 GET / (and /kiosk)        the kiosk page: a camera's picture (or one chosen or dropped)\n\
                \x20                            described as it streams in, full screen; query parameters\n\
                \x20                            prompt, lang, every (seconds between pictures), max_tokens;\n\
                \x20                            it talks to this server only (--no-page: off)\n\
                \x20 POST /v1/chat/completions  OpenAI's chat format: system/user/assistant messages whose\n\
                \x20                            content is a string or parts {\"type\":\"text\"} and\n\
                \x20                            {\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,...\"}}\n\
                \x20                            (\"detail\": \"low\" resizes to at most 512x512 pixels' worth,\n\
                \x20                            \"high\" and \"auto\", the default, to --image-max-pixels);\n\
                \x20                            max_tokens (at most --max-tokens-cap), temperature, top_p,\n\
                \x20                            top_k, seed, stop, frequency_penalty, presence_penalty (what\n\
                \x20                            a request leaves out: the flags); logprobs and top_logprobs\n\
                \x20                            (<= 20: the model's log-softmax, before penalties and\n\
                \x20                            temperature); response_format {\"type\": \"text\"},\n\
                \x20                            \"json_object\" or \"json_schema\" (Structured output in\n\
                \x20                            README.md); \"stream\": true for server-sent events ending\n\
                \x20                            with [DONE]. Any other field (tools, tool_choice, n > 1,\n\
                \x20                            ...) is a 400 naming it; model is read and changes nothing\n\
                \x20                            (one model here)\n\
                \x20 GET /v1/models             the model's name\n\
                \x20 GET /v1/models/{id}        the model, if id is its name (else 404)\n\
                \x20 GET /health                {\"status\":\"ok\",\"backend\":WHERE}; 503\n\
                \x20                            {\"status\":\"recovering\"} while the models are loaded\n\
                \x20                            again after the device was lost\n\
                \x20 OPTIONS on each            a browser's preflight (CORS headers for --cors-origin pages)\n\
                \x20 GET /metrics               Prometheus text: requests by outcome, queue depth, sequences\n\
                \x20                            in use, model busy time, memory held by requests\n\
                --parallel requests are decoded together (each its own sampling settings, limits,\n\
                stop strings and schema; streams go token by token); the others wait their turn in\n\
                arrival order (--queue, --queue-wait; past them 503 with Retry-After). A new request\n\
                takes a free sequence between decode steps (its images encoded, its prompt\n\
                prefilled), and one that ends frees it at once. A request is counted before any work:\n\
                a prompt longer than the context (images counted from their headers) or images of\n\
                over 100 MP together (fewer under a --memory-budget below 1336) get 400 at once; a\n\
                client that hangs up stops its generation.\n\
                hrx never fetches http(s) image URLs. Request bodies are limited to 64 MiB, heads to\n\
                16 KiB; a body is read only where the endpoint takes one (POST /v1/chat/completions),\n\
                within --memory-budget; slow clients time out (heads: --head-timeout, bodies:\n\
                --min-body-rate), and idle or trickling connections cannot lock others out: /health\n\
                and /metrics answer whatever the model and other connections do. Connections persist\n\
                for clients that reuse them (HTTP/1.1 keep-alive; not after a stream of events, or a\n\
                request not read whole): one waiting for its next request has --head-timeout from its\n\
                last answer and is the first closed to make room past --max-connections.\n\
                Prints `listening on http://HOST:PORT (model NAME, --parallel N)` once ready, then\n\
                one line per request on stderr: client address, request, status, seconds, and the\n\
                reason of every refusal.\n\
                A lost GPU (VK_ERROR_DEVICE_LOST, or a submission past HRX_VK_TIMEOUT) does not\n\
                stop the server: the requests in flight get 503 with Retry-After, the models are\n\
                loaded again on a new device (after three losses in ten minutes, on the CPU) and\n\
                serving goes on.\n\
                Sampling flags apply when a request does not say.",
        options,
        footer: "example:\n  hrx serve --port 8080 &\n  curl -s localhost:8080/v1/chat/completions -H 'Content-Type: application/json' \\\n    -d '{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"max_tokens\":32}'",
    }
    .render()
}

const HOST: Flag = Flag { names: &["--host"], value: "ADDR" };
const PORT: Flag = Flag { names: &["--port"], value: "N" };
const ALLOW_FILES: Flag = Flag { names: &["--allow-files"], value: "DIR" };
const MAX_CONNECTIONS: Flag = Flag { names: &["--max-connections"], value: "N" };
const HEAD_TIMEOUT: Flag = Flag { names: &["--head-timeout"], value: "SECONDS" };
const MIN_BODY_RATE: Flag = Flag { names: &["--min-body-rate"], value: "KIB" };
const SEND_TIMEOUT: Flag = Flag { names: &["--send-timeout"], value: "SECONDS" };
const QUEUE: Flag = Flag { names: &["--queue"], value: "N" };
const QUEUE_WAIT: Flag = Flag { names: &["--queue-wait"], value: "SECONDS" };
const MEMORY_BUDGET: Flag = Flag { names: &["--memory-budget"], value: "MIB" };
const MAX_TOKENS_CAP: Flag = Flag { names: &["--max-tokens-cap"], value: "N" };
const NO_PAGE: Flag = Flag { names: &["--no-page"], value: "" };
const CORS_ORIGIN: Flag = Flag { names: &["--cors-origin"], value: "ORIGIN" };
/// `--max-tokens-cap`'s default: a long answer, far short of filling a default context.
const DEFAULT_MAX_TOKENS_CAP: usize = 2048;

pub const COMMAND: Command = Command { name: "serve", summary: "serve an OpenAI-compatible chat API", help, run };

fn run(mut args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    let host = HOST.string(&mut args)?.unwrap_or_else(|| "127.0.0.1".to_owned());
    let port: u16 = PORT.parse(&mut args)?.unwrap_or(8080);
    let file_folders = ALLOW_FILES
        .strings(&mut args)?
        .iter()
        .map(|dir| match std::fs::canonicalize(dir) {
            Ok(p) if p.is_dir() => Ok(p),
            _ => Err(CliError::usage(format!("--allow-files {dir}: not a folder"))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let defaults = Limits::default();
    let max_open: usize = MAX_CONNECTIONS.parse(&mut args)?.unwrap_or(defaults.max_open);
    let head_timeout: u64 = HEAD_TIMEOUT.parse(&mut args)?.unwrap_or(defaults.head_timeout.as_secs());
    let send_timeout: u64 = SEND_TIMEOUT.parse(&mut args)?.unwrap_or(defaults.send_timeout.as_secs());
    let min_body_kib: u64 = MIN_BODY_RATE.parse(&mut args)?.unwrap_or(defaults.min_body_rate >> 10);
    let queue_len: usize = QUEUE.parse(&mut args)?.unwrap_or(defaults.queue_len);
    let queue_wait: f64 = QUEUE_WAIT.parse(&mut args)?.unwrap_or(defaults.queue_wait.as_secs_f64());
    let budget_mib: u64 = MEMORY_BUDGET.parse(&mut args)?.unwrap_or(defaults.memory_budget >> 20);
    if max_open == 0 || head_timeout == 0 || send_timeout == 0 || budget_mib == 0 || min_body_kib == 0 {
        return Err(CliError::usage(
            "--max-connections, --head-timeout, --min-body-rate, --send-timeout and --memory-budget must be at least 1",
        ));
    }
    if !(queue_wait.is_finite() && (0.0..=86_400.0).contains(&queue_wait)) {
        return Err(CliError::usage("--queue-wait must be 0 to 86400 seconds"));
    }
    let memory_budget =
        budget_mib.checked_mul(1 << 20).ok_or_else(|| CliError::usage("--memory-budget is too large"))?;
    let limits = Limits {
        max_open,
        head_timeout: Duration::from_secs(head_timeout),
        send_timeout: Duration::from_secs(send_timeout),
        min_body_rate: min_body_kib.saturating_mul(1 << 10),
        queue_len,
        queue_wait: Duration::from_secs_f64(queue_wait),
        memory_budget,
        ..defaults
    };
    let max_tokens: usize = MAX_TOKENS_CAP.parse(&mut args)?.unwrap_or(DEFAULT_MAX_TOKENS_CAP);
    let cors_origins = CORS_ORIGIN.strings(&mut args)?;
    let page = !NO_PAGE.present(&mut args);
    if let Some(bad) = cors_origins.iter().find(|o| !is_origin(o)) {
        return Err(CliError::usage(format!(
            "--cors-origin {bad}: not an origin (scheme://host[:port], as a browser sends it, or *)"
        )));
    }
    let parallel = flags::sequences(&mut args, &PARALLEL)?;
    let mut flags = DescriberFlags::parse(&mut args)?;
    if !args.finish()?.is_empty() {
        return Err(CliError::usage("serve takes no positional arguments"));
    }
    if max_tokens == 0 || flags.config.max_new_tokens > max_tokens {
        return Err(CliError::usage(format!(
            "--max-tokens-cap {max_tokens}: must be at least 1 and at least the default answer length ({} tokens, -n)",
            flags.config.max_new_tokens
        )));
    }
    let (describer, parallel) = flags.load_batched(parallel, &PARALLEL)?;
    let listener =
        TcpListener::bind((host.as_str(), port)).map_err(CliError::os(format!("cannot listen on {host}:{port}")))?;
    let addr = listener.local_addr()?;
    let name = flags.name.clone();
    let settings = AppSettings {
        defaults: flags.config,
        schema_prompt: flags.schema_prompt,
        max_tokens,
        cors_origins,
        model_name: flags.name,
        file_folders,
        page,
        limits,
    };
    let app = Arc::new(App::new(describer, settings));
    app.start_model().map_err(CliError::os("cannot start the model's thread"))?;
    writeln!(out, "hrx serve: listening on http://{addr} (model {name}, --parallel {parallel})")?;
    out.flush()?;
    crate::serve::serve(listener, app);
    Ok(())
}

/// `*`, or an origin as a browser's `Origin` header gives it: http(s)://host[:port], no path.
fn is_origin(origin: &str) -> bool {
    let rest = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://"));
    origin == "*"
        || rest.is_some_and(|host| {
            !host.is_empty() && host.bytes().all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b))
        })
}
