//! Routes a request and answers it; chat requests go to the model's thread (model.rs), as many
//! at once as it has sequences, and their answers come back from it.

use super::admission::{self, Budget, Counters, Refusal, Turns};
use super::http::{self, EventStream, HangUp, HttpError, Request, StreamFailure};
use super::images;
use super::model::{self, Answer, Following, Health, Job};
use super::openai::{self, ChatImage, ChatRequest, Reply};
use crate::json::Json;
use crate::runtime::chat::{self, Message, Uncounted};
use crate::runtime::describe::{Describer, EncodedImage};
use crate::runtime::generate::{GenerateConfig, StopReason};
use crate::runtime::sampler::TokenLogprob;
use crate::runtime::structured::JsonConstraint;
use crate::tokenizer::{Beyond, Tokenizer, Within};
use std::net::TcpStream;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// What every connection shares: the way to the model's thread and the server's settings.
pub struct App {
    /// Chat requests for the model's thread.
    jobs: Sender<Job>,
    /// The describer and the other end of `jobs`, until [`App::start_model`] gives them to the
    /// model's thread.
    idle: Mutex<Option<(Describer, Receiver<Job>)>>,
    /// The model's vocabulary, to count prompts and name the tokens of logprobs.
    tokenizer: Arc<Tokenizer>,
    /// The tokens a prompt may take (the context).
    n_ctx: usize,
    /// Generation settings of requests that do not set them.
    defaults: GenerateConfig,
    /// Whether a JSON answer's schema is told the model in the system turn (true unless
    /// --no-schema-prompt).
    schema_prompt: bool,
    /// The schemas of recent requests, most recent last, with the masks they filled: a
    /// client sends the same schema again and again, and a schema's first answer pays for
    /// walking the vocabulary (milliseconds a token where strings have a maxLength).
    schemas: Mutex<Vec<Arc<JsonConstraint>>>,
    /// The most tokens a request may ask for (`max_tokens`; --max-tokens-cap).
    max_tokens: usize,
    /// Origins whose pages may call the API from a browser (`--cors-origin`; `*`: any).
    cors_origins: Vec<String>,
    model_name: String,
    /// Folders (canonical) whose image files `file://` URLs may name; none: file URLs are off.
    file_folders: Vec<PathBuf>,
    /// The kiosk page (`GET /`), with the server's pixel budget in it; None: --no-page.
    page: Option<String>,
    pub(super) limits: http::Limits,
    requests: AtomicU64,
    /// The queue for the model's sequences.
    turns: Turns,
    /// What chat requests in flight may hold.
    budget: Budget,
    counters: Counters,
    /// Whether the model serves, or is being loaded again after its device was lost.
    health: Mutex<Health>,
}

/// What became of a request, for the log: its request line (`-` when none arrived), the status
/// sent, and for errors the reason given to the client.
pub struct Outcome {
    pub line: String,
    pub status: u16,
    pub reason: Option<String>,
}

/// A response sent: its status, and whether the connection may carry the client's next request
/// (not after a stream of events, which ends with the connection).
#[derive(Clone, Copy, Debug)]
pub struct Sent {
    pub status: u16,
    pub open: bool,
}

/// What a connection's thread tells the server about it as it goes.
pub trait Watch {
    /// It waits for its next request head from `since` (the server may close it to make room).
    fn waiting(&self, stream: &TcpStream, since: Instant);
    /// A whole request is in: it is busy with it.
    fn working(&self);
    /// A request was answered or refused, its wait having begun at `since`.
    fn answered(&self, outcome: &Outcome, since: Instant);
}

/// The server's settings, from its flags.
pub struct AppSettings {
    /// Generation settings of requests that do not set them.
    pub defaults: GenerateConfig,
    /// Whether a JSON answer's schema is told the model in the system turn (true unless
    /// --no-schema-prompt).
    pub schema_prompt: bool,
    /// The most tokens a request may ask for (`max_tokens`; --max-tokens-cap).
    pub max_tokens: usize,
    /// Origins whose pages may call the API from a browser (`--cors-origin`; `*`: any).
    pub cors_origins: Vec<String>,
    /// The name every answer gives the model.
    pub model_name: String,
    /// Folders (canonical) whose image files `file://` URLs may name; none: file URLs are off.
    pub file_folders: Vec<PathBuf>,
    /// Whether `GET /` serves the kiosk page (not with --no-page).
    pub page: bool,
    pub limits: http::Limits,
}

impl model::Host for App {
    fn encode(
        &self,
        d: &mut Describer,
        prompt: &[u32],
        requested: &[ChatImage],
    ) -> Result<Vec<EncodedImage>, HttpError> {
        let over = |bytes| self.over_budget(bytes, "decoding its images", self.budget.limit());
        images::encode(d, prompt, requested, &self.file_folders, &self.budget, over)
    }

    /// Says what `/health` answers from now on (around a recovery).
    fn set_health(&self, health: Health) {
        *self.health.lock().unwrap_or_else(PoisonError::into_inner) = health;
    }

    fn lost_request(&self) {
        Counters::add(&self.counters.device_lost);
    }
}

impl App {
    pub fn new(describer: Describer, settings: AppSettings) -> App {
        let AppSettings { defaults, schema_prompt, max_tokens, cors_origins, model_name, file_folders, page, limits } =
            settings;
        let page = page.then(|| KIOSK_PAGE.replace("__HRX_MAX_PIXELS__", &describer.max_pixels().to_string()));
        let (jobs, incoming) = mpsc::channel();
        let sequences = describer.text().options().n_seq;
        let health = Mutex::new(Health::Serving(describer.text().backend().describe()));
        App {
            jobs,
            tokenizer: Arc::clone(describer.text().tokenizer()),
            n_ctx: describer.text().options().n_ctx,
            idle: Mutex::new(Some((describer, incoming))),
            defaults,
            schema_prompt,
            schemas: Mutex::new(Vec::new()),
            max_tokens,
            cors_origins,
            model_name,
            file_folders,
            page,
            limits,
            requests: AtomicU64::new(0),
            turns: Turns::new(sequences, limits.queue_len, limits.queue_wait),
            budget: Budget::new(limits.memory_budget, images::decode_share(limits.memory_budget)),
            counters: Counters::default(),
            health,
        }
    }

    /// Starts the model's thread, which answers the chat requests from then on (once; later
    /// calls do nothing).
    pub fn start_model(self: &Arc<Self>) -> std::io::Result<()> {
        let Some((describer, incoming)) = self.idle.lock().unwrap_or_else(PoisonError::into_inner).take() else {
            return Ok(());
        };
        let app = Arc::clone(self);
        // Generation runs on this thread: give it the main thread's stack size.
        std::thread::Builder::new()
            .name("model".into())
            .stack_size(8 << 20)
            .spawn(move || model::run(describer, &incoming, &*app))
            .map(drop)
    }

    /// Answers the requests of a connection accepted at `accepted`, one after the other while
    /// the client keeps it (each wait for a request head held to `--head-timeout` from the end of
    /// the last answer, as the first is from the accept), then closes it. A body is read only
    /// where the route takes one (a chat request's), and only within the memory budget (its
    /// bytes are held until the answer is out). A `spare` connection, let in past
    /// --max-connections, is answered once, and only for /health or /metrics.
    pub fn handle(&self, mut stream: TcpStream, accepted: Instant, spare: bool, watch: &impl Watch) {
        let mut pending = Vec::new();
        let mut since = accepted;
        // A probe sends its head at once: a spare connection cannot be held by a slow one.
        let limits = match spare {
            true => http::Limits { head_timeout: SPARE_HEAD_TIMEOUT, ..self.limits },
            false => self.limits,
        };
        for served in 0usize.. {
            let admit = |head: &http::Head| self.admit(head, spare);
            // A kept connection the client closes, or leaves quiet past the deadline, before a
            // byte of its next request just ends.
            let read = http::read_request(&mut stream, &mut pending, &limits, since, served > 0, admit);
            let (line, cors, keep_alive, result) = match read {
                Ok(None) => break,
                Ok(Some((request, _body))) => {
                    watch.working();
                    let keep_alive = request.keep_alive && !spare;
                    let cors = self.cors(request.origin.as_deref());
                    let result = self.route(&request, &mut stream, &cors);
                    if Route::of(&request.path).map(|r| r.endpoint) == Some(Endpoint::Chat) {
                        self.count(&result);
                    }
                    (format!("{} {}", request.method, request.path), cors, keep_alive, result)
                }
                // The request was not read whole: what follows on the connection is not a request.
                Err(e) => ("-".into(), String::new(), false, Err(e)),
            };
            let (outcome, open) = match result {
                Ok(sent) => (Outcome { line, status: sent.status, reason: None }, sent.open),
                // A client that hung up is not answered: there is nobody to read it.
                Err(e) if e.status == CLIENT_GONE => {
                    (Outcome { line, status: e.status, reason: Some(e.message) }, false)
                }
                Err(e) => {
                    send_error(&mut stream, &e, &cors, keep_alive);
                    (Outcome { line, status: e.status, reason: Some(e.message) }, keep_alive)
                }
            };
            // Waiting for the next head from the end of this answer, before its log line: the
            // client may already be counting on it.
            let answered = Instant::now();
            if open {
                watch.waiting(&stream, answered);
            }
            watch.answered(&outcome, since);
            if !open {
                break;
            }
            since = answered;
        }
        http::close_gently(&mut stream);
    }

    /// What a request's head lets in, before any of its body is read: a body only where the
    /// route takes one (a chat request's, within the memory budget: its reservation returned);
    /// on a spare connection, only /health and /metrics.
    fn admit(&self, head: &http::Head, spare: bool) -> Result<Option<admission::Reservation<'_>>, HttpError> {
        let route = Route::of(head.path);
        let probe = matches!(route.map(|r| &r.endpoint), Some(Endpoint::Health | Endpoint::Metrics));
        if spare && !probe {
            let max = self.limits.max_open;
            let e = HttpError::new(503, format!("hrx serve has {max} connections open; try again"));
            return Err(e.with_retry_after(1));
        }
        if route.is_some_and(|r| r.endpoint == Endpoint::Chat && head.method == r.method) {
            let bytes = body_bytes(head.length);
            return self.budget.reserve(bytes).map(Some).ok_or_else(|| {
                self.over_budget(bytes, "its body and what parsing it makes", self.budget.body_limit())
            });
        }
        if head.length == 0 {
            return Ok(None);
        }
        // Not read: a body where none is taken would hold memory outside the budget.
        let Some(route) = route else {
            return Err(no_such_endpoint(head.path, self.page.is_some()));
        };
        if head.method != route.method && head.method != "OPTIONS" {
            return Err(method_not_allowed(head.path, route.method, head.method));
        }
        Err(HttpError::new(413, format!("{} {} takes no body", head.method, head.path)))
    }

    /// `c`, or the same schema of a recent request with the masks it filled.
    fn known_schema(&self, c: Arc<JsonConstraint>) -> Arc<JsonConstraint> {
        let mut known = self.schemas.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // The instruction holds the whole schema, compact: the same text is the same schema.
        let c = match known.iter().position(|k| k.instruction() == c.instruction()) {
            Some(i) => known.remove(i),
            None => c,
        };
        known.push(Arc::clone(&c));
        if known.len() > KNOWN_SCHEMAS {
            known.remove(0);
        }
        c
    }

    /// The 503 (with Retry-After) for `what`, which needs `bytes` more than the `limit` (of the
    /// memory budget) it may take from leaves.
    fn over_budget(&self, bytes: u64, what: &str, limit: u64) -> HttpError {
        Counters::add(&self.counters.over_budget);
        let (used, budget, share) = (self.budget.used(), self.budget.limit(), self.budget.decode_share());
        HttpError::new(
            503,
            format!(
                "hrx serve holds {used} bytes for requests in flight, of the {limit} this may take (--memory-budget {budget}, {share} of it kept for decoding the images of the request on the model); {what} needs {bytes} more: try again shortly"
            ),
        )
        .with_retry_after(1)
    }

    /// Counts a chat request's outcome (refusals for the queue and the budget are counted where
    /// they happen).
    fn count(&self, result: &Result<Sent, HttpError>) {
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
    fn route(&self, request: &Request, stream: &mut TcpStream, cors: &str) -> Result<Sent, HttpError> {
        let keep = request.keep_alive;
        let route = Route::of(&request.path).filter(|r| r.endpoint != Endpoint::Page || self.page.is_some());
        let Some(route) = route else {
            return Err(no_such_endpoint(&request.path, self.page.is_some()));
        };
        let allowed = route.method;
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
            let _ = http::write_response(stream, 204, "text/plain", &headers, keep, b"");
            return Ok(Sent { status: 204, open: keep });
        }
        if request.method != allowed {
            return Err(method_not_allowed(&request.path, allowed, &request.method));
        }
        match route.endpoint {
            Endpoint::Health => {
                let health = self.health.lock().unwrap_or_else(PoisonError::into_inner).clone();
                let (status, word, field, detail, retry) = match health {
                    Health::Serving(backend) => (200, "ok", "backend", backend, ""),
                    Health::Recovering(why) => (503, "recovering", "reason", why, "Retry-After: 1\r\n"),
                    Health::Failed(why) => (503, "failed", "reason", why, ""),
                };
                let body = Json::obj([("status", Json::str(word)), (field, Json::str(detail))]);
                send_json(stream, status, &body, &format!("{cors}{retry}"), keep)
            }
            Endpoint::Page => {
                let page = self.page.as_deref().unwrap_or_default();
                let headers = format!("{cors}Content-Security-Policy: {KIOSK_CSP}\r\n");
                let _ = http::write_response(stream, 200, "text/html; charset=utf-8", &headers, keep, page.as_bytes());
                Ok(Sent { status: 200, open: keep })
            }
            Endpoint::Models => send_json(stream, 200, &openai::models(&self.model_name), cors, keep),
            Endpoint::Model => {
                let id = request.path.strip_prefix(MODELS).unwrap_or_default();
                if id != self.model_name {
                    return Err(HttpError::new(
                        404,
                        format!("no model {id:?} here: this server has one, {:?}", self.model_name),
                    ));
                }
                send_json(stream, 200, &openai::model(&self.model_name), cors, keep)
            }
            Endpoint::Metrics => {
                let text = admission::metrics(&self.turns, &self.budget, &self.counters);
                let _ = http::write_response(stream, 200, "text/plain; version=0.0.4", cors, keep, text.as_bytes());
                Ok(Sent { status: 200, open: keep })
            }
            Endpoint::Chat => {
                let mut chat =
                    openai::parse_chat(&request.body, &self.defaults, self.max_tokens, !self.file_folders.is_empty())?;
                if let Some(user) = &chat.user {
                    log::info!("a chat request for end user {user:?}");
                }
                if let Some(c) = chat.config.json.take() {
                    let c = self.known_schema(c);
                    if self.schema_prompt {
                        c.instruct(&mut chat.messages);
                    }
                    chat.config.json = Some(c);
                }
                // Counted here, before the queue: a huge prompt costs its own connection's
                // thread a pass over its bytes, and nobody else any wait.
                let prompt = self.count_prompt(&chat.messages)?;
                let _turn = self.turns.take().map_err(|r| self.refusal(r))?;
                self.chat(chat, prompt, stream, cors, keep)
            }
        }
    }

    /// The chat template's ids of `messages`: a text whose bytes alone make more tokens than
    /// the context holds is refused before any of it is tokenized, one with a run of letters
    /// (or other pre-token) past `MAX_PIECE_BYTES` before that run's BPE; each a 400. (The
    /// model's thread refuses a prompt that, with its images, does not fit, with its size.)
    fn count_prompt(&self, messages: &[Message]) -> Result<Vec<u32>, HttpError> {
        let within = Within { tokens: self.n_ctx, piece_bytes: MAX_PIECE_BYTES };
        chat::tokens(messages, true, &self.tokenizer, Some(within)).map_err(|e| match e {
            Uncounted::Beyond(Beyond::Tokens { at_least }) => HttpError::new(
                400,
                format!(
                    "the context holds {} tokens and at least {at_least} are needed, by the bytes of the messages' text alone (raise --ctx)",
                    self.n_ctx
                ),
            ),
            Uncounted::Beyond(Beyond::Piece(_)) => HttpError::new(400, e.to_string()),
            Uncounted::NoToken(_) => HttpError::new(500, e.to_string()),
        })
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

    /// Answers a chat request; `keep`: whether a plain answer leaves the connection open (a
    /// stream of events ends with it).
    fn chat(
        &self,
        chat: ChatRequest,
        prompt: Vec<u32>,
        stream: &mut TcpStream,
        cors: &str,
        keep: bool,
    ) -> Result<Sent, HttpError> {
        let n = self.requests.fetch_add(1, Ordering::Relaxed);
        let created = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let reply = Reply { id: format!("chatcmpl-{created:x}{n:04x}"), created, model: &self.model_name };
        let tokenizer = &self.tokenizer;
        let asked = chat.config.logprobs;
        let logprobs = |entries: &[TokenLogprob]| asked.map(|_| openai::logprobs(entries, tokenizer));
        let following = Following::start(&self.jobs, prompt, chat.images, chat.config)?;
        if !chat.stream {
            // A client that hung up stops the generation: nobody is waiting for the answer.
            let mut hang_up = HangUp::default();
            let Answer { prompt_tokens, generation: g } = following.answer(|_, _| match hang_up.gone(stream) {
                true => ControlFlow::Break(()),
                false => ControlFlow::Continue(()),
            })?;
            if g.stop == StopReason::Cancelled {
                return Err(gone(g.tokens.len()));
            }
            let answer = reply.completion(&g.text, g.stop, (prompt_tokens, g.tokens.len()), logprobs(&g.logprobs));
            return send_json(stream, 200, &answer, cors, keep);
        }
        let mut events = EventStream::new(stream, cors, self.limits.send_timeout);
        let mut hang_up = HangUp::default();
        let result = following.answer(|text, logprob| {
            if !events.started() {
                let role = Json::obj([("role", Json::str("assistant")), ("content", Json::str(""))]);
                events.send(&reply.chunk(role, None, None).to_string_compact());
            }
            // A token whose text is held back (an unfinished character or stop string) still
            // has its logprobs sent, with an empty content.
            if !text.is_empty() || logprob.is_some() {
                let content = Json::obj([("content", Json::str(text))]);
                let entry = logprob.and_then(|e| logprobs(std::slice::from_ref(e)));
                events.send(&reply.chunk(content, entry, None).to_string_compact());
            }
            // A client that went away or stopped reading stops the generation: nobody reads the
            // rest. A write fails once it has gone, or waits past the send timeout once it has
            // stopped reading; one that hung up while its reads were buffered is looked for too.
            if events.failure().is_some() || hang_up.gone(events.stream()) {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        match result {
            Ok(Answer { generation: g, .. }) if g.stop == StopReason::Cancelled => {
                return Err(match events.failure() {
                    Some(StreamFailure::Stalled) => stalled(g.tokens.len(), self.limits.send_timeout),
                    _ => gone(g.tokens.len()),
                })
            }
            Ok(Answer { prompt_tokens, generation: g }) => {
                events.send(&reply.chunk(Json::obj::<String>([]), None, Some(g.stop)).to_string_compact());
                if chat.include_usage {
                    events.send(&reply.usage_chunk(prompt_tokens, g.tokens.len()).to_string_compact());
                }
            }
            // Nothing sent yet: a plain error response with its status.
            Err(e) if !events.started() => return Err(e),
            Err(e) => events.send(&openai::error(&e).to_string_compact()),
        }
        events.send("[DONE]");
        Ok(Sent { status: 200, open: false })
    }
}

/// Schemas whose masks are kept (each up to some 30 MB of them on Qwen's vocabulary).
const KNOWN_SCHEMAS: usize = 2;

/// What a chat body of `length` bytes may hold from its head until it is answered: the body,
/// the JSON strings parsed from it (at most its length, while it is parsed) and the images
/// base64-decoded from those (three quarters of it). Counting the body alone let 16 requests
/// with 64 MiB bodies hold 1.4 GiB under a 1 GiB budget (scripts/soak).
/// The kiosk page (`GET /` and `/kiosk`): a camera (or a chosen picture) described as it
/// streams in, for a browser in full-screen mode. Its pixel budget is filled in when served.
const KIOSK_PAGE: &str = include_str!("kiosk.html");

/// What the kiosk page may load and talk to: this server only (its own script and style
/// inline, pictures as data and blob URLs).
const KIOSK_CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data: blob:; media-src blob: mediastream:; connect-src 'self'; base-uri 'none'; form-action 'none'";

/// The longest pre-token (a run of letters, say) a request's text may have: BPE over it holds
/// some 48 bytes a byte; words, numbers and code are far shorter.
const MAX_PIECE_BYTES: usize = 64 << 10;

/// The time a spare connection (`App::handle`) has to send its request head.
const SPARE_HEAD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// The 404 for `path`, naming the endpoints served (the kiosk page's where `page`).
fn no_such_endpoint(path: &str, page: bool) -> HttpError {
    let served = ROUTES.iter().filter(|r| page || r.endpoint != Endpoint::Page);
    let served: Vec<String> = served.map(|r| format!("{} {}", r.method, r.path)).collect();
    HttpError::new(404, format!("no such endpoint {path}: hrx serves {}", served.join(", ")))
}

fn method_not_allowed(path: &str, allowed: &'static str, method: &str) -> HttpError {
    let e = HttpError::new(405, format!("{path} takes {allowed}, not {method}"));
    HttpError { allow: Some(allowed), ..e }
}

fn body_bytes(length: usize) -> u64 {
    (length as u64).saturating_mul(11).div_ceil(4)
}

/// The outcome of a request whose client hung up before its answer: 499 (nginx's "client
/// closed request") in the log; nothing is sent.
fn gone(tokens: usize) -> HttpError {
    HttpError::new(CLIENT_GONE, format!("the client went away; generation stopped after {tokens} tokens"))
}

/// The outcome of a streamed request whose client stopped reading: an event waited `timeout` to
/// be written, and the generation stopped (499 too: nobody reads the answer).
fn stalled(tokens: usize, timeout: std::time::Duration) -> HttpError {
    HttpError::new(
        CLIENT_GONE,
        format!(
            "the client stopped reading: an event waited {} s to be sent (--send-timeout); generation stopped after {tokens} tokens",
            timeout.as_secs_f64()
        ),
    )
}

const CLIENT_GONE: u16 = 499;

const CHAT: &str = "/v1/chat/completions";
/// `GET /v1/models/{id}`: the model of that id.
const MODELS: &str = "/v1/models/";

/// What `hrx serve` answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Endpoint {
    Page,
    Chat,
    Models,
    Model,
    Health,
    Metrics,
}

/// A path, the one method it takes (and OPTIONS, a browser's preflight), what answers it.
struct Route {
    path: &'static str,
    method: &'static str,
    endpoint: Endpoint,
}

/// Every endpoint: routing, the 404's list and each 405's `Allow` come from here.
const ROUTES: &[Route] = &[
    Route { path: "/", method: "GET", endpoint: Endpoint::Page },
    Route { path: "/kiosk", method: "GET", endpoint: Endpoint::Page },
    Route { path: CHAT, method: "POST", endpoint: Endpoint::Chat },
    Route { path: "/v1/models", method: "GET", endpoint: Endpoint::Models },
    Route { path: "/v1/models/{id}", method: "GET", endpoint: Endpoint::Model },
    Route { path: "/health", method: "GET", endpoint: Endpoint::Health },
    Route { path: "/metrics", method: "GET", endpoint: Endpoint::Metrics },
];

impl Route {
    /// The route of `path`: its own, or a `{id}` route's whose prefix it extends.
    fn of(path: &str) -> Option<&'static Route> {
        ROUTES.iter().find(|r| match r.path.split_once("{") {
            Some((prefix, _)) => path.len() > prefix.len() && path.starts_with(prefix),
            None => r.path == path,
        })
    }
}

/// `headers`: more header lines (each ending in CRLF), as for every answer below; `keep`:
/// whether the connection stays open after it.
fn send_json(stream: &mut TcpStream, status: u16, body: &Json, headers: &str, keep: bool) -> Result<Sent, HttpError> {
    // A client gone before its answer is written is not an error to anyone.
    let _ =
        http::write_response(stream, status, "application/json", headers, keep, body.to_string_compact().as_bytes());
    Ok(Sent { status, open: keep })
}

pub fn send_error(stream: &mut TcpStream, e: &HttpError, headers: &str, keep: bool) {
    let mut headers = match e.allow {
        Some(method) => format!("Allow: {method}, OPTIONS\r\n{headers}"),
        None => headers.to_owned(),
    };
    if let Some(seconds) = e.retry_after {
        headers += &format!("Retry-After: {seconds}\r\n");
    }
    let _ = http::write_response(
        stream,
        e.status,
        "application/json",
        &headers,
        keep,
        openai::error(e).to_string_compact().as_bytes(),
    );
}
