//! Routes a request and answers it; the model answers one chat request at a time.

use super::admission::{self, Budget, Counters, Refusal, Reservation, Turns};
use super::http::{self, EventStream, HangUp, HttpError, Request};
use super::image_url::{self, ImageSource};
use super::openai::{self, ChatImage, ChatRequest, Reply};
use crate::image::{self, Limits};
use crate::json::Json;
use crate::runtime::describe::{Describer, SizedImage};
use crate::runtime::generate::{GenerateConfig, StopReason};
use crate::runtime::sampler::TokenLogprob;
use crate::runtime::RuntimeError;
use std::borrow::Cow;
use std::net::TcpStream;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// What every connection shares: the model behind its lock and the server's settings.
pub struct App {
    pub describer: Mutex<Describer>,
    /// Generation settings of requests that do not set them.
    pub defaults: GenerateConfig,
    /// The most tokens a request may ask for (`max_tokens`; --max-tokens-cap).
    pub max_tokens: usize,
    /// Origins whose pages may call the API from a browser (`--cors-origin`; `*`: any).
    pub cors_origins: Vec<String>,
    pub model_name: String,
    /// Folders (canonical) whose image files `file://` URLs may name; none: file URLs are off.
    pub file_folders: Vec<PathBuf>,
    pub limits: http::Limits,
    requests: AtomicU64,
    /// The model's queue.
    turns: Turns,
    /// What chat requests in flight may hold.
    budget: Budget,
    counters: Counters,
}

/// What became of a connection, for the log: its request line (`-` when none arrived), the
/// status sent, and for errors the reason given to the client.
pub struct Outcome {
    pub line: String,
    pub status: u16,
    pub reason: Option<String>,
}

impl App {
    pub fn new(
        describer: Describer,
        defaults: GenerateConfig,
        max_tokens: usize,
        cors_origins: Vec<String>,
        model_name: String,
        file_folders: Vec<PathBuf>,
        limits: http::Limits,
    ) -> App {
        App {
            describer: Mutex::new(describer),
            defaults,
            max_tokens,
            cors_origins,
            model_name,
            file_folders,
            limits,
            requests: AtomicU64::new(0),
            turns: Turns::new(limits.queue_len, limits.queue_wait),
            budget: Budget::new(limits.memory_budget),
            counters: Counters::default(),
        }
    }

    /// Reads one request from the connection (accepted at `accepted`; `on_head` is called once
    /// its head is in), answers it and closes. A chat request's body is read only within the
    /// memory budget (its bytes are held until the answer is out).
    pub fn handle(&self, mut stream: TcpStream, accepted: Instant, on_head: impl FnOnce()) -> Outcome {
        let admit = |head: &http::Head| {
            on_head();
            if head.path != CHAT {
                return Ok(None);
            }
            self.reserve(body_bytes(head.length), "its body and what parsing it makes").map(Some)
        };
        let (line, cors, result) = match http::read_request(&mut stream, &self.limits, accepted, admit) {
            Ok((request, _body)) => {
                let cors = self.cors(request.origin.as_deref());
                let result = self.route(&request, &mut stream, &cors);
                if request.path == CHAT {
                    self.count(&result);
                }
                (format!("{} {}", request.method, request.path), cors, result)
            }
            Err(e) => ("-".into(), String::new(), Err(e)),
        };
        let outcome = match result {
            Ok(status) => Outcome { line, status, reason: None },
            Err(e) => {
                // A client that hung up is not answered: there is nobody to read it.
                if e.status != CLIENT_GONE {
                    send_error(&mut stream, &e, &cors);
                }
                Outcome { line, status: e.status, reason: Some(e.message) }
            }
        };
        http::close_gently(&mut stream);
        outcome
    }

    /// `bytes` more of the memory budget, or 503 (with Retry-After) naming `what` needs them.
    fn reserve(&self, bytes: u64, what: &str) -> Result<Reservation<'_>, HttpError> {
        self.budget.reserve(bytes).ok_or_else(|| {
            Counters::add(&self.counters.over_budget);
            let (used, limit) = (self.budget.used(), self.budget.limit());
            HttpError::new(
                503,
                format!(
                    "hrx serve holds {used} of its {limit} bytes for requests in flight; {what} needs {bytes} more: try again shortly (--memory-budget)"
                ),
            )
            .with_retry_after(1)
        })
    }

    /// Counts a chat request's outcome (refusals for the queue and the budget are counted where
    /// they happen).
    fn count(&self, result: &Result<u16, HttpError>) {
        let c = &self.counters;
        match result {
            Ok(_) => Counters::add(&c.answered),
            Err(e) if e.status == CLIENT_GONE => Counters::add(&c.client_gone),
            Err(e) if e.status == 503 => {}
            Err(e) if e.status < 500 => Counters::add(&c.client_errors),
            Err(_) => Counters::add(&c.server_errors),
        }
    }

    /// The CORS header lines of every response to a browser's page at `origin`: the origin
    /// allowed where --cors-origin names it (or `*`), else none (the browser then keeps the
    /// answer from the page).
    fn cors(&self, origin: Option<&str>) -> String {
        let Some(origin) = origin else { return String::new() };
        match self.cors_origins.iter().find(|o| *o == "*" || o.eq_ignore_ascii_case(origin)) {
            Some(o) if o == "*" => "Access-Control-Allow-Origin: *\r\n".to_owned(),
            Some(o) => format!("Access-Control-Allow-Origin: {o}\r\nVary: Origin\r\n"),
            None => String::new(),
        }
    }

    /// Answers a request, or says what is wrong with it (before anything was sent); `cors`:
    /// header lines every response carries.
    fn route(&self, request: &Request, stream: &mut TcpStream, cors: &str) -> Result<u16, HttpError> {
        let allowed = match request.path.as_str() {
            "/health" | "/v1/models" | "/metrics" => "GET",
            path if path.starts_with(MODELS) => "GET",
            CHAT => "POST",
            path => {
                return Err(HttpError::new(
                    404,
                    format!(
                        "no such endpoint {path}: hrx serves POST /v1/chat/completions, GET /v1/models, GET /v1/models/{{id}}, GET /health, GET /metrics"
                    ),
                ))
            }
        };
        if request.method == "OPTIONS" {
            // A browser's preflight: what the endpoint takes and, for an allowed origin, that
            // its page may send it (with a JSON body).
            let mut headers = format!("Allow: {allowed}, OPTIONS\r\n");
            if !cors.is_empty() {
                headers += cors;
                headers += &format!(
                    "Access-Control-Allow-Methods: {allowed}, OPTIONS\r\nAccess-Control-Allow-Headers: Content-Type, Authorization\r\nAccess-Control-Max-Age: 600\r\n"
                );
            }
            let _ = http::write_response(stream, 204, "text/plain", &headers, b"");
            return Ok(204);
        }
        if request.method != allowed {
            return Err(HttpError::new(405, format!("{} takes {allowed}, not {}", request.path, request.method)));
        }
        match request.path.as_str() {
            "/health" => send_json(stream, 200, &Json::obj([("status", Json::str("ok"))]), cors),
            "/v1/models" => send_json(stream, 200, &openai::models(&self.model_name), cors),
            path if path.starts_with(MODELS) => {
                let id = path.strip_prefix(MODELS).unwrap_or_default();
                if id != self.model_name {
                    return Err(HttpError::new(
                        404,
                        format!("no model {id:?} here: this server has one, {:?}", self.model_name),
                    ));
                }
                send_json(stream, 200, &openai::model(&self.model_name), cors)
            }
            "/metrics" => {
                let text = admission::metrics(&self.turns, &self.budget, &self.counters);
                let _ = http::write_response(stream, 200, "text/plain; version=0.0.4", cors, text.as_bytes());
                Ok(200)
            }
            _ => {
                let chat =
                    openai::parse_chat(&request.body, &self.defaults, self.max_tokens, !self.file_folders.is_empty())?;
                let _turn = self.turns.take().map_err(|r| self.refusal(r))?;
                self.chat(chat, stream, cors)
            }
        }
    }

    /// The 503 for a request the queue did not take.
    fn refusal(&self, r: Refusal) -> HttpError {
        let message = match r {
            Refusal::QueueFull => {
                Counters::add(&self.counters.queue_full);
                format!(
                    "hrx serve has {} chat requests waiting for the model; try again shortly (--queue)",
                    self.turns.max_waiting()
                )
            }
            Refusal::Waited => {
                Counters::add(&self.counters.queue_timeout);
                format!(
                    "the request waited {} s for the model; try again shortly (--queue-wait)",
                    self.turns.max_wait().as_secs_f64()
                )
            }
        };
        HttpError::new(503, message).with_retry_after(1)
    }

    fn chat(&self, chat: ChatRequest, stream: &mut TcpStream, cors: &str) -> Result<u16, HttpError> {
        let n = self.requests.fetch_add(1, Ordering::Relaxed);
        let created = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let reply = Reply { id: format!("chatcmpl-{created:x}{n:04x}"), created, model: &self.model_name };
        // A panic while the lock was held leaves nothing half-done: every request starts a new
        // session, so the model is still good.
        // Each image's bytes once, sized from its header: a prompt too long for the context, or
        // too many pixels, is refused before any pixel is decoded or any token runs.
        let mut d = self.describer.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let images = read_images(&chat.images, &self.file_folders, &d.image_limits())?;
        let sized = size_images(&d, &images, &chat.images)?;
        d.check_prompt(&chat.messages, &sized).map_err(runtime)?;
        // Decoding holds the image (up to 4 bytes a pixel) and its RGB copy (3).
        let pixels: u64 = sized.iter().map(|s| (s.size.0 * s.size.1) as u64).sum();
        let _decoded = self.reserve(7 * pixels, "decoding its images")?;
        let images = images
            .iter()
            .zip(&sized)
            .map(|(i, s)| d.encode_bytes(&i.name, &i.bytes, s.max_pixels).map_err(|e| i.error(runtime(e))))
            .collect::<Result<Vec<_>, _>>()?;
        // The vocabulary apart from the model: tokens are named while the model runs.
        let tokenizer = Arc::clone(d.text().tokenizer());
        let logprobs = |entries: &[TokenLogprob]| chat.config.logprobs.map(|_| openai::logprobs(entries, &tokenizer));
        if !chat.stream {
            // A client that hung up stops the generation: nobody is waiting for the answer.
            let mut hang_up = HangUp::default();
            let (ids, g) = d
                .run_messages(&chat.messages, &images, &chat.config, |_| {
                    if hang_up.gone(stream) {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                })
                .map_err(runtime)?;
            if g.stop == StopReason::Cancelled {
                return Err(gone(g.tokens.len()));
            }
            let answer = reply.completion(&g.text, g.stop, (ids.len(), g.tokens.len()), logprobs(&g.logprobs));
            return send_json(stream, 200, &answer, cors);
        }
        let mut events = EventStream::new(stream, cors);
        let mut hang_up = HangUp::default();
        let result = d.run_messages(&chat.messages, &images, &chat.config, |delta| {
            if !events.started() {
                let role = Json::obj([("role", Json::str("assistant")), ("content", Json::str(""))]);
                events.send(&reply.chunk(role, None, None).to_string_compact());
            }
            // A token whose text is held back (an unfinished character or stop string) still
            // has its logprobs sent, with an empty content.
            if !delta.text.is_empty() || delta.logprob.is_some() {
                let content = Json::obj([("content", Json::str(delta.text))]);
                let entry = delta.logprob.and_then(|e| logprobs(std::slice::from_ref(e)));
                events.send(&reply.chunk(content, entry, None).to_string_compact());
            }
            // A client that went away stops the generation: nobody reads the rest. A write
            // fails once it has gone; one that hung up while its reads were buffered is looked
            // for as well.
            if hang_up.gone(events.stream()) {
                return ControlFlow::Break(());
            }
            if events.failed() {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        match result {
            Ok((_, g)) if g.stop == StopReason::Cancelled => return Err(gone(g.tokens.len())),
            Ok((ids, g)) => {
                events.send(&reply.chunk(Json::obj::<String>([]), None, Some(g.stop)).to_string_compact());
                if chat.include_usage {
                    events.send(&reply.usage_chunk(ids.len(), g.tokens.len()).to_string_compact());
                }
            }
            // Nothing sent yet: a plain error response with its status.
            Err(e) if !events.started() => return Err(runtime(e)),
            Err(e) => events.send(&openai::error(&runtime(e)).to_string_compact()),
        }
        events.send("[DONE]");
        Ok(200)
    }
}

/// What a chat body of `length` bytes may hold from its head until it is answered: the body,
/// the JSON strings parsed from it (at most its length, while it is parsed) and the images
/// base64-decoded from those (three quarters of it). Counting the body alone let 16 requests
/// with 64 MiB bodies hold 1.4 GiB under a 1 GiB budget (scripts/soak).
fn body_bytes(length: usize) -> u64 {
    (length as u64).saturating_mul(11).div_ceil(4)
}

/// A request's image as read: the name errors call it, its bytes, and the file it came from.
struct RequestImage<'a> {
    name: String,
    bytes: Cow<'a, [u8]>,
    file: Option<&'a Path>,
}

impl RequestImage<'_> {
    /// The answer for `e` about this image: for a file, the one message every unusable file
    /// gets (a client learns nothing of the server's files), else `e`.
    fn error(&self, e: HttpError) -> HttpError {
        self.file.map_or(e, image_url::unusable_file)
    }
}

/// The request's images: data URLs as sent, files (under `folders`) read once.
fn read_images<'a>(
    images: &'a [ChatImage],
    folders: &[PathBuf],
    limits: &Limits,
) -> Result<Vec<RequestImage<'a>>, HttpError> {
    images
        .iter()
        .enumerate()
        .map(|(i, image)| match &image.source {
            ImageSource::Bytes(bytes) => Ok(RequestImage {
                name: format!("image {}", i + 1),
                bytes: Cow::Borrowed(bytes.as_slice()),
                file: None,
            }),
            ImageSource::File(path) => {
                let bytes = image_url::read_allowed(path, folders, limits.max_file_bytes)?;
                Ok(RequestImage { name: path.display().to_string(), bytes: Cow::Owned(bytes), file: Some(path) })
            }
        })
        .collect()
}

/// Each image's name and upright size from its header, within the request's pixel budget, and
/// the budget it is resized within (its `detail`'s).
fn size_images<'a>(
    d: &Describer,
    images: &'a [RequestImage],
    requested: &[ChatImage],
) -> Result<Vec<SizedImage<'a>>, HttpError> {
    let limits = d.image_limits();
    let mut pixels = 0u64;
    let mut sized = Vec::with_capacity(images.len());
    for (i, asked) in images.iter().zip(requested) {
        let (name, bytes) = (&i.name, &i.bytes);
        let (w, h) = image::probe_bytes(name, bytes, &limits).map_err(|e| i.error(image_error(e)))?;
        pixels += (w * h) as u64;
        if pixels > openai::MAX_REQUEST_PIXELS {
            return Err(HttpError::new(
                400,
                format!(
                    "the request's images hold more than {} pixels (at {name}): send fewer or smaller images",
                    openai::MAX_REQUEST_PIXELS
                ),
            ));
        }
        let max_pixels = asked.detail.max_pixels(d.min_pixels(), d.max_pixels());
        sized.push(SizedImage { name, size: (w, h), max_pixels });
    }
    Ok(sized)
}

fn image_error(e: image::ImageError) -> HttpError {
    runtime(RuntimeError::Image(e))
}

/// The outcome of a request whose client hung up before its answer: 499 (nginx's "client
/// closed request") in the log; nothing is sent.
fn gone(tokens: usize) -> HttpError {
    HttpError::new(CLIENT_GONE, format!("the client went away; generation stopped after {tokens} tokens"))
}

const CLIENT_GONE: u16 = 499;

const CHAT: &str = "/v1/chat/completions";
/// `GET /v1/models/{id}`: the model of that id.
const MODELS: &str = "/v1/models/";

/// A bad image or prompt is the client's (400); anything else is the server's (500).
fn runtime(e: RuntimeError) -> HttpError {
    let status = match e {
        // The client's own input: its images and the length of its conversation.
        RuntimeError::Usage(_) | RuntimeError::Image(_) | RuntimeError::ContextFull { .. } => 400,
        _ => 500,
    };
    HttpError::new(status, e.to_string())
}

/// `headers`: more header lines (each ending in CRLF), as for every answer below.
fn send_json(stream: &mut TcpStream, status: u16, body: &Json, headers: &str) -> Result<u16, HttpError> {
    // A client gone before its answer is written is not an error to anyone.
    let _ = http::write_response(stream, status, "application/json", headers, body.to_string_compact().as_bytes());
    Ok(status)
}

pub fn send_error(stream: &mut TcpStream, e: &HttpError, headers: &str) {
    let mut headers = match e.status {
        405 => format!("Allow: GET, POST, OPTIONS\r\n{headers}"),
        _ => headers.to_owned(),
    };
    if let Some(seconds) = e.retry_after {
        headers += &format!("Retry-After: {seconds}\r\n");
    }
    let _ = http::write_response(
        stream,
        e.status,
        "application/json",
        &headers,
        openai::error(e).to_string_compact().as_bytes(),
    );
}
