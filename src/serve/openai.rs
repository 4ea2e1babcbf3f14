//! OpenAI's chat-completions format: requests read into the chat template's messages and
//! sampling settings, and the JSON of answers, stream chunks, model lists and errors.
//!
//! No field is ignored: one this server does not read is refused by name (400), so a client
//! never believes a setting took effect when it did not. A field set to `null` is taken as left
//! out, as OpenAI takes it.

use super::http::HttpError;
use super::image_url::{self, ImageSource};
use crate::json::{self, Json};
use crate::runtime::chat::{Content, Message};
use crate::runtime::generate::{GenerateConfig, StopReason};
use crate::runtime::sampler::TokenLogprob;
use crate::runtime::structured::JsonConstraint;
use crate::tokenizer::Tokenizer;
use std::collections::HashMap;
use std::sync::Arc;
use tinyjson::JsonValue;

/// The most images one request may carry.
pub const MAX_IMAGES: usize = 16;
/// The most pixels all of a request's images may declare together (each is also within the
/// image limits): two of the largest images the decoder takes, about 700 MB of decoding.
pub const MAX_REQUEST_PIXELS: u64 = 2 * crate::image::Limits::DEFAULT_MAX_PIXELS;
/// `top_logprobs` at most, as OpenAI allows.
pub const MAX_TOP_LOGPROBS: usize = 20;
/// The pixel budget of an image sent with `"detail": "low"`: OpenAI's low detail is a 512 x 512
/// image; here about 256 image tokens (patch 16, 2 x 2 merge).
pub const LOW_DETAIL_PIXELS: usize = 512 * 512;

/// A chat request: the conversation (its `Content::Image`s take `images` in order) and the
/// generation settings, the server's defaults overridden by the request's fields.
#[derive(Debug)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
    pub images: Vec<ChatImage>,
    pub config: GenerateConfig,
    pub stream: bool,
    pub include_usage: bool,
    /// OpenAI's `user`: the client's id of its end user, logged with the request.
    pub user: Option<String>,
}

/// The longest `user` id taken (it goes into the log).
const MAX_USER_CHARS: usize = 256;

/// An image of a request: where its bytes are and how closely to look at it.
#[derive(Debug, PartialEq)]
pub struct ChatImage {
    pub source: ImageSource,
    pub detail: Detail,
}

/// `image_url.detail`: the pixel budget an image is resized within.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detail {
    /// At most [`LOW_DETAIL_PIXELS`] (never under the server's --image-min-pixels).
    Low,
    /// The server's budget (--image-max-pixels): what its vision plan holds.
    High,
    /// The default: the server's budget, as `High` (an image smaller than it keeps its size).
    Auto,
}

impl Detail {
    /// The pixel budget for an image with this detail, on a server whose budget is
    /// `min_pixels..=max_pixels`.
    pub fn max_pixels(self, min_pixels: usize, max_pixels: usize) -> usize {
        match self {
            Detail::Low => LOW_DETAIL_PIXELS.max(min_pixels).min(max_pixels),
            Detail::High | Detail::Auto => max_pixels,
        }
    }
}

type Object = HashMap<String, JsonValue>;

fn bad(message: impl Into<String>) -> HttpError {
    HttpError::new(400, message)
}

/// The request fields this server reads. `model` is read and changes nothing: the server has
/// one model, which every answer names.
const FIELDS: &[&str] = &[
    "model",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "stop",
    "n",
    "stream",
    "stream_options",
    "logprobs",
    "top_logprobs",
    "frequency_penalty",
    "presence_penalty",
    "response_format",
    "user",
];

/// The 400 for an object's first field (by name, so the answer is the same every time) that is
/// not one of `known` and not null; `at`: where the object is ("" for the request itself).
fn refuse_unknown(object: &Object, known: &[&str], at: &str) -> Result<(), HttpError> {
    let mut unknown: Vec<&str> = object
        .iter()
        .filter(|(k, v)| !known.contains(&k.as_str()) && !matches!(v, JsonValue::Null))
        .map(|(k, _)| k.as_str())
        .collect();
    unknown.sort_unstable();
    let Some(&name) = unknown.first() else { return Ok(()) };
    let why = match name {
        "tools" | "tool_choice" | "parallel_tool_calls" | "functions" | "function_call" | "tool_calls" => {
            "hrx serve does not call tools".to_owned()
        }
        _ => format!("this server reads {}", known.join(", ")),
    };
    Err(bad(format!("{at}{name} is not supported: {why}")))
}

/// Reads a `POST /v1/chat/completions` body; `max_tokens`: the most a request may ask for.
pub fn parse_chat(
    body: &[u8],
    defaults: &GenerateConfig,
    max_tokens: usize,
    allow_files: bool,
) -> Result<ChatRequest, HttpError> {
    let text = std::str::from_utf8(body).map_err(|_| bad("the request body is not UTF-8"))?;
    let value = json::parse_untrusted(text, 32).map_err(|e| bad(format!("the request body is not valid JSON: {e}")))?;
    let root: &Object = value.get().ok_or_else(|| bad("the request body must be a JSON object"))?;
    refuse_unknown(root, FIELDS, "")?;
    let field = |name: &str| root.get(name).filter(|v| !matches!(v, JsonValue::Null));
    let list: &Vec<JsonValue> =
        field("messages").and_then(|v| v.get()).ok_or_else(|| bad("messages must be an array of messages"))?;
    if list.is_empty() {
        return Err(bad("messages is empty"));
    }
    let mut images = Vec::new();
    let messages =
        list.iter().enumerate().map(|(i, m)| message(m, i, &mut images, allow_files)).collect::<Result<Vec<_>, _>>()?;

    let mut config = defaults.clone();
    if let Some(n) = field("max_completion_tokens").or_else(|| field("max_tokens")) {
        let n = integer(n, "max_tokens", 1.0, 1e9)? as usize;
        if n > max_tokens {
            return Err(bad(format!(
                "max_tokens {n} is over this server's cap of {max_tokens} (hrx serve --max-tokens-cap)"
            )));
        }
        config.max_new_tokens = n;
    }
    if let Some(t) = field("temperature") {
        config.sampler.temperature = number(t, "temperature", 0.0, 100.0)? as f32;
    }
    if let Some(p) = field("top_p") {
        config.sampler.top_p =
            number(p, "top_p", 0.0, 1.0)
                .and_then(|p| if p > 0.0 { Ok(p) } else { Err(bad("top_p must be in (0, 1]")) })? as f32;
    }
    if let Some(k) = field("top_k") {
        config.sampler.top_k = integer(k, "top_k", 0.0, 1e9)? as usize;
    }
    if let Some(f) = field("frequency_penalty") {
        config.sampler.frequency_penalty = number(f, "frequency_penalty", -2.0, 2.0)? as f32;
    }
    if let Some(p) = field("presence_penalty") {
        config.sampler.presence_penalty = number(p, "presence_penalty", -2.0, 2.0)? as f32;
    }
    if let Some(s) = field("seed") {
        // Any integer a double holds exactly; negative seeds wrap, as C's do.
        config.sampler.seed = integer(s, "seed", -9.007e15, 9.007e15)? as i64 as u64;
    }
    if let Some(stop) = field("stop") {
        config.stop_strings = stops(stop)?;
    }
    if let Some(n) = field("n") {
        if integer(n, "n", 1.0, 1.0).is_err() {
            return Err(bad("n must be 1: hrx answers once per request"));
        }
    }
    let logprobs = match field("logprobs") {
        None => false,
        Some(v) => *v.get::<bool>().ok_or_else(|| bad("logprobs must be true or false"))?,
    };
    let top = match field("top_logprobs") {
        None => 0,
        Some(_) if !logprobs => return Err(bad("top_logprobs needs \"logprobs\": true")),
        Some(n) => integer(n, "top_logprobs", 0.0, MAX_TOP_LOGPROBS as f64)? as usize,
    };
    config.logprobs = logprobs.then_some(top);
    let stream = match field("stream") {
        None => false,
        Some(v) => *v.get::<bool>().ok_or_else(|| bad("stream must be true or false"))?,
    };
    let include_usage = match field("stream_options") {
        None => false,
        Some(o) => {
            let o: &Object = o.get().ok_or_else(|| bad("stream_options must be an object"))?;
            refuse_unknown(o, &["include_usage"], "stream_options.")?;
            match o.get("include_usage") {
                None | Some(JsonValue::Null) => false,
                Some(v) => *v.get::<bool>().ok_or_else(|| bad("stream_options.include_usage must be true or false"))?,
            }
        }
    };
    if let Some(format) = field("response_format") {
        config.json = response_format(format, text)?.map(Arc::new);
        if config.json.is_some() && !config.stop_strings.is_empty() {
            return Err(bad("stop cannot go with a JSON response_format: a stop string could cut the document"));
        }
    }
    let user = match field("user") {
        None => None,
        Some(v) => match v.get::<String>() {
            Some(u) if u.chars().count() <= MAX_USER_CHARS => Some(u.clone()),
            _ => return Err(bad(format!("user must be a string of at most {MAX_USER_CHARS} characters"))),
        },
    };
    Ok(ChatRequest { messages, images, config, stream, include_usage, user })
}

/// `response_format`: `{"type":"text"}` (the default), `{"type":"json_object"}`, or
/// `{"type":"json_schema","json_schema":{"name":..,"schema":{..},"strict":..}}`; `body`: the
/// request's text, read again for the schema with its keys in order (its properties are
/// written in that order).
fn response_format(value: &JsonValue, body: &str) -> Result<Option<JsonConstraint>, HttpError> {
    let o: &Object = value.get().ok_or_else(|| bad("response_format must be an object"))?;
    match o.get("type").and_then(|t| t.get::<String>()).map(String::as_str) {
        Some("text") => {
            refuse_unknown(o, &["type"], "response_format.")?;
            Ok(None)
        }
        Some("json_object") => {
            refuse_unknown(o, &["type"], "response_format.")?;
            Ok(Some(JsonConstraint::any_object()))
        }
        Some("json_schema") => {
            refuse_unknown(o, &["type", "json_schema"], "response_format.")?;
            let spec: &Object = o
                .get("json_schema")
                .and_then(|j| j.get())
                .ok_or_else(|| bad("response_format.json_schema must be an object with a schema"))?;
            refuse_unknown(spec, &["name", "description", "schema", "strict"], "response_format.json_schema.")?;
            if spec.get("name").is_some_and(|n| n.get::<String>().is_none()) {
                return Err(bad("response_format.json_schema.name must be a string"));
            }
            if spec.get("strict").is_some_and(|n| !matches!(n, JsonValue::Boolean(_) | JsonValue::Null)) {
                return Err(bad("response_format.json_schema.strict must be true or false"));
            }
            // The same body parsed in order; it parsed once, so it does again.
            let ordered = json::parse_ordered(body, 32).map_err(|e| bad(format!("the request body: {e}")))?;
            let schema = ["response_format", "json_schema", "schema"]
                .iter()
                .try_fold(&ordered, |v, key| match v {
                    Json::Obj(pairs) => pairs.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v),
                    _ => None,
                })
                .ok_or_else(|| bad("response_format.json_schema needs a schema"))?;
            let c = JsonConstraint::from_schema(schema, "response_format.json_schema.schema")
                .map_err(|e| bad(e.to_string()))?;
            Ok(Some(c))
        }
        _ => Err(bad("response_format.type must be \"text\", \"json_object\" or \"json_schema\"")),
    }
}

fn message(
    value: &JsonValue,
    index: usize,
    images: &mut Vec<ChatImage>,
    allow_files: bool,
) -> Result<Message, HttpError> {
    let m: &Object = value.get().ok_or_else(|| bad("each message must be an object"))?;
    refuse_unknown(m, &["role", "content"], &format!("messages[{index}]."))?;
    let role = m.get("role").and_then(|r| r.get::<String>()).ok_or_else(|| bad("each message needs a role"))?;
    let role = match role.as_str() {
        "system" | "developer" => "system",
        "user" => "user",
        "assistant" => "assistant",
        other => return Err(bad(format!("messages with role {other:?} are not supported (system, user, assistant)"))),
    };
    let content = match m.get("content") {
        None | Some(JsonValue::Null) => Vec::new(),
        Some(JsonValue::String(s)) => vec![Content::Text(s.clone())],
        Some(JsonValue::Array(parts)) => {
            parts.iter().map(|p| part(p, index, images, allow_files)).collect::<Result<_, _>>()?
        }
        Some(_) => return Err(bad("a message's content must be a string or an array of parts")),
    };
    Ok(Message { role: role.to_owned(), content })
}

fn part(value: &JsonValue, index: usize, images: &mut Vec<ChatImage>, allow_files: bool) -> Result<Content, HttpError> {
    let p: &Object = value.get().ok_or_else(|| bad("each content part must be an object"))?;
    let kind = p.get("type").and_then(|t| t.get::<String>()).map(String::as_str);
    let at = format!("messages[{index}].content[].");
    match kind {
        Some("text") => {
            refuse_unknown(p, &["type", "text"], &at)?;
            let text =
                p.get("text").and_then(|t| t.get::<String>()).ok_or_else(|| bad("a text part needs \"text\""))?;
            Ok(Content::Text(text.clone()))
        }
        Some("image_url") => {
            refuse_unknown(p, &["type", "image_url"], &at)?;
            let (url, detail) = match p.get("image_url") {
                Some(JsonValue::String(url)) => (Some(url), Detail::Auto),
                Some(JsonValue::Object(o)) => {
                    refuse_unknown(o, &["url", "detail"], &format!("{at}image_url."))?;
                    (o.get("url").and_then(|u| u.get::<String>()), detail(o.get("detail"))?)
                }
                _ => (None, Detail::Auto),
            };
            let url = url.ok_or_else(|| bad("an image_url part needs \"image_url\": {\"url\": ...}"))?;
            if images.len() == MAX_IMAGES {
                return Err(bad(format!("a request may carry at most {MAX_IMAGES} images")));
            }
            images.push(ChatImage { source: image_url::resolve(url, allow_files)?, detail });
            Ok(Content::Image)
        }
        other => {
            Err(bad(format!("content parts of type {:?} are not supported (text, image_url)", other.unwrap_or(""))))
        }
    }
}

fn detail(value: Option<&JsonValue>) -> Result<Detail, HttpError> {
    match value {
        None | Some(JsonValue::Null) => Ok(Detail::Auto),
        Some(JsonValue::String(s)) if s == "low" => Ok(Detail::Low),
        Some(JsonValue::String(s)) if s == "high" => Ok(Detail::High),
        Some(JsonValue::String(s)) if s == "auto" => Ok(Detail::Auto),
        Some(_) => Err(bad("image_url.detail must be \"low\", \"high\" or \"auto\"")),
    }
}

fn number(v: &JsonValue, name: &str, min: f64, max: f64) -> Result<f64, HttpError> {
    v.get::<f64>()
        .copied()
        .filter(|x| (min..=max).contains(x))
        .ok_or_else(|| bad(format!("{name} must be a number in [{min}, {max}]")))
}

fn integer(v: &JsonValue, name: &str, min: f64, max: f64) -> Result<f64, HttpError> {
    number(v, name, min, max)
        .ok()
        .filter(|x| x.fract() == 0.0)
        .ok_or_else(|| bad(format!("{name} must be an integer in [{min}, {max}]")))
}

fn stops(v: &JsonValue) -> Result<Vec<String>, HttpError> {
    let list = match v {
        JsonValue::String(s) => vec![s.clone()],
        JsonValue::Array(items) => items
            .iter()
            .map(|s| s.get::<String>().cloned())
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad("stop must be a string or an array of strings"))?,
        _ => return Err(bad("stop must be a string or an array of strings")),
    };
    if list.len() > 16 || list.iter().any(|s| s.is_empty()) {
        return Err(bad("stop takes at most 16 non-empty strings"));
    }
    Ok(list)
}

/// The identity of one answer, shared by its chunks.
pub struct Reply<'a> {
    pub id: String,
    pub created: u64,
    pub model: &'a str,
}

pub fn finish_reason(stop: StopReason) -> &'static str {
    match stop {
        StopReason::EndOfGeneration | StopReason::StopString | StopReason::Cancelled => "stop",
        // A JSON answer cut short by the limit is whole (closed the shortest way), and cut.
        StopReason::Length | StopReason::ContextFull | StopReason::LengthClosed => "length",
    }
}

fn usage(prompt: usize, completion: usize) -> Json {
    let n = |x: usize| Json::Int(x as i128);
    Json::obj([
        ("prompt_tokens", n(prompt)),
        ("completion_tokens", n(completion)),
        ("total_tokens", n(prompt + completion)),
    ])
}

impl Reply<'_> {
    fn head(&self, object: &str) -> Vec<(String, Json)> {
        vec![
            ("id".into(), Json::str(&self.id)),
            ("object".into(), Json::str(object)),
            ("created".into(), Json::Int(self.created.into())),
            ("model".into(), Json::str(self.model)),
        ]
    }

    /// The whole answer (`chat.completion`); `logprobs`: the choice's (see [`logprobs`]), or
    /// None when the request did not ask.
    pub fn completion(
        &self,
        text: &str,
        stop: StopReason,
        (prompt_tokens, completion_tokens): (usize, usize),
        logprobs: Option<Json>,
    ) -> Json {
        let mut fields = self.head("chat.completion");
        let message = Json::obj([("role", Json::str("assistant")), ("content", Json::str(text))]);
        let choice = Json::obj([
            ("index", Json::Int(0)),
            ("message", message),
            ("logprobs", logprobs.unwrap_or(Json::Null)),
            ("finish_reason", Json::str(finish_reason(stop))),
        ]);
        fields.push(("choices".into(), Json::Arr(vec![choice])));
        fields.push(("usage".into(), usage(prompt_tokens, completion_tokens)));
        Json::Obj(fields)
    }

    /// One `chat.completion.chunk` with a delta (`{}` for the last, which has the reason) and
    /// the logprobs of the tokens it carries, when asked for.
    pub fn chunk(&self, delta: Json, logprobs: Option<Json>, finish: Option<StopReason>) -> Json {
        let mut fields = self.head("chat.completion.chunk");
        let reason = finish.map_or(Json::Null, |s| Json::str(finish_reason(s)));
        let choice = Json::obj([
            ("index", Json::Int(0)),
            ("delta", delta),
            ("logprobs", logprobs.unwrap_or(Json::Null)),
            ("finish_reason", reason),
        ]);
        fields.push(("choices".into(), Json::Arr(vec![choice])));
        Json::Obj(fields)
    }

    /// The chunk after the last one when the client asked for `stream_options.include_usage`.
    pub fn usage_chunk(&self, prompt_tokens: usize, completion_tokens: usize) -> Json {
        let mut fields = self.head("chat.completion.chunk");
        fields.push(("choices".into(), Json::Arr(Vec::new())));
        fields.push(("usage".into(), usage(prompt_tokens, completion_tokens)));
        Json::Obj(fields)
    }
}

/// A choice's `logprobs`, OpenAI's shape: `{"content":[{"token","logprob","bytes",
/// "top_logprobs":[{"token","logprob","bytes"}...]}...],"refusal":null}`, a token's text being
/// its bytes as UTF-8 (a piece of a character reads as U+FFFD there; `bytes` has it exactly).
pub fn logprobs(entries: &[TokenLogprob], tokenizer: &Tokenizer) -> Json {
    let token = |id: u32, logprob: f32| {
        // A head may have more rows than the vocabulary has tokens (padding): such an id has no
        // bytes, and reads as its number rather than failing the answer.
        let (text, bytes) = match tokenizer.token_to_bytes(id) {
            Ok(b) => {
                (String::from_utf8_lossy(b).into_owned(), Json::Arr(b.iter().map(|&x| Json::Int(x.into())).collect()))
            }
            Err(_) => (format!("<token {id}>"), Json::Null),
        };
        vec![
            ("token".to_owned(), Json::str(text)),
            ("logprob".to_owned(), Json::Num(f64::from(logprob))),
            ("bytes".to_owned(), bytes),
        ]
    };
    let content = entries
        .iter()
        .map(|e| {
            let mut fields = token(e.id, e.logprob);
            let top = e.top.iter().map(|&(id, l)| Json::Obj(token(id, l))).collect();
            fields.push(("top_logprobs".to_owned(), Json::Arr(top)));
            Json::Obj(fields)
        })
        .collect();
    Json::obj([("content", Json::Arr(content)), ("refusal", Json::Null)])
}

/// The model object of `GET /v1/models` and `GET /v1/models/{id}`.
pub fn model(name: &str) -> Json {
    Json::obj([
        ("id", Json::str(name)),
        ("object", Json::str("model")),
        ("created", Json::Int(0)),
        ("owned_by", Json::str("hrx")),
    ])
}

/// `GET /v1/models`.
pub fn models(name: &str) -> Json {
    Json::obj([("object", Json::str("list")), ("data", Json::Arr(vec![model(name)]))])
}

/// OpenAI's error object.
pub fn error(e: &HttpError) -> Json {
    let kind = match e.status {
        404 => "not_found_error",
        500.. => "server_error",
        _ => "invalid_request_error",
    };
    Json::obj([(
        "error",
        Json::obj([
            ("message", Json::str(&e.message)),
            ("type", Json::str(kind)),
            ("code", Json::Int(e.status.into())),
        ]),
    )])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::sampler::SamplerConfig;

    fn defaults() -> GenerateConfig {
        GenerateConfig {
            max_new_tokens: 256,
            sampler: SamplerConfig::default(),
            stop_strings: Vec::new(),
            stop_at_eog: true,
            logprobs: None,
            json: None,
        }
    }

    #[test]
    fn reads_a_multi_turn_chat_with_images_and_settings() {
        let body = br#"{"model":"x","messages":[
            {"role":"system","content":"Be brief."},
            {"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,aGk="}},{"type":"text","text":"What?"}]},
            {"role":"assistant","content":"A cat."},
            {"role":"user","content":[{"type":"text","text":"And "},{"type":"image_url","image_url":"data:;base64,aGk="}]}],
            "max_tokens":7,"temperature":0.5,"top_p":0.9,"top_k":5,"seed":-1,"stop":["\n"],"stream":true,
            "stream_options":{"include_usage":true},"presence_penalty":0,"user":"kiosk-7"}"#;
        let r = parse_chat(body, &defaults(), 4096, false).unwrap();
        assert_eq!(r.messages.len(), 4);
        assert_eq!(r.user.as_deref(), Some("kiosk-7"));
        assert_eq!(r.messages[1].content, vec![Content::Image, Content::Text("What?".into())]);
        assert_eq!(r.messages[3].content, vec![Content::Text("And ".into()), Content::Image]);
        assert_eq!(r.images.len(), 2);
        assert_eq!((r.config.max_new_tokens, r.config.sampler.top_k, r.config.sampler.seed), (7, 5, u64::MAX));
        assert_eq!((r.config.sampler.temperature, r.config.sampler.top_p), (0.5, 0.9));
        assert_eq!(r.config.stop_strings, vec!["\n".to_string()]);
        assert!(r.stream && r.include_usage);
        assert_eq!(r.config.logprobs, None);
        assert_eq!(r.images[0].detail, Detail::Auto);
    }

    #[test]
    fn logprobs_penalties_and_detail_are_read() {
        let body = br#"{"messages":[{"role":"user","content":[
            {"type":"image_url","image_url":{"url":"data:;base64,aGk=","detail":"low"}},
            {"type":"image_url","image_url":{"url":"data:;base64,aGk=","detail":"high"}},
            {"type":"image_url","image_url":{"url":"data:;base64,aGk=","detail":null}}]}],
            "logprobs":true,"top_logprobs":3,"frequency_penalty":0.5,"presence_penalty":-1.5,"tools":null}"#;
        let r = parse_chat(body, &defaults(), 4096, false).unwrap();
        assert_eq!(r.config.logprobs, Some(3));
        assert_eq!((r.config.sampler.frequency_penalty, r.config.sampler.presence_penalty), (0.5, -1.5));
        let details: Vec<Detail> = r.images.iter().map(|i| i.detail).collect();
        assert_eq!(details, [Detail::Low, Detail::High, Detail::Auto]);
        let r = parse_chat(br#"{"messages":[{"role":"user","content":"x"}],"logprobs":true}"#, &defaults(), 9, false);
        assert_eq!(r.unwrap().config.logprobs, Some(0));
        // Budgets: low is 512 x 512 within the server's; high and auto are the server's.
        assert_eq!(Detail::Low.max_pixels(65_536, 1 << 20), 262_144);
        assert_eq!(Detail::Low.max_pixels(65_536, 100_000), 100_000);
        assert_eq!(Detail::Low.max_pixels(300_000, 1 << 20), 300_000);
        assert_eq!((Detail::High.max_pixels(0, 1 << 20), Detail::Auto.max_pixels(0, 5)), (1 << 20, 5));
    }

    #[test]
    fn fields_it_does_not_read_are_refused_by_name() {
        let user = r#""messages":[{"role":"user","content":"x"}]"#;
        let cases = [
            (format!(r#"{{{user},"tools":[{{"type":"function"}}]}}"#), "tools is not supported: hrx serve does not call tools"),
            (format!(r#"{{{user},"tool_choice":"auto"}}"#), "tool_choice is not supported: hrx serve does not call tools"),
            (format!(r#"{{{user},"response_format":{{"type":"json_object","x":1}}}}"#), "response_format.x is not supported"),
            (format!(r#"{{{user},"response_format":{{"type":"xml"}}}}"#), "response_format.type must be"),
            (
                format!(r#"{{{user},"response_format":{{"type":"json_object"}},"stop":"}}"}}"#),
                "stop cannot go with a JSON response_format",
            ),
            (format!(r#"{{{user},"user":"u1","logit_bias":{{}}}}"#), "logit_bias is not supported: this server reads model, messages"),
            (format!(r#"{{{user},"user":7}}"#), "user must be a string"),
            (r#"{"messages":[{"role":"user","content":"x","name":"bob"}]}"#.to_owned(), "messages[0].name is not supported"),
            (
                r#"{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:;base64,aGk=","size":1}}]}]}"#.to_owned(),
                "messages[0].content[].image_url.size is not supported",
            ),
            (format!(r#"{{{user},"stream_options":{{"include_obfuscation":true}}}}"#), "stream_options.include_obfuscation"),
            (format!(r#"{{{user},"top_logprobs":2}}"#), "top_logprobs needs \"logprobs\": true"),
            (format!(r#"{{{user},"logprobs":true,"top_logprobs":21}}"#), "top_logprobs must be an integer in [0, 20]"),
            (format!(r#"{{{user},"frequency_penalty":2.5}}"#), "frequency_penalty must be a number in [-2, 2]"),
            (format!(r#"{{{user},"presence_penalty":"x"}}"#), "presence_penalty"),
            (
                r#"{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:;base64,aGk=","detail":"max"}}]}]}"#.to_owned(),
                "image_url.detail must be",
            ),
        ];
        for (body, want) in cases {
            let e = parse_chat(body.as_bytes(), &defaults(), 4096, false).unwrap_err();
            assert!(e.status == 400 && e.message.contains(want), "{body}: {}", e.message);
        }
    }

    #[test]
    fn response_formats_are_read_and_each_unsupported_keyword_named() {
        let user = r#""messages":[{"role":"user","content":"x"}]"#;
        let with = |format: &str| format!(r#"{{{user},"response_format":{format}}}"#);
        let r = parse_chat(with(r#"{"type":"text"}"#).as_bytes(), &defaults(), 9, false).unwrap();
        assert!(r.config.json.is_none());
        let r = parse_chat(with(r#"{"type":"json_object"}"#).as_bytes(), &defaults(), 9, false).unwrap();
        assert!(r.config.json.unwrap().instruction().contains("JSON object"));
        let schema = |s: &str| {
            with(&format!(r#"{{"type":"json_schema","json_schema":{{"name":"n","strict":true,"schema":{s}}}}}"#))
        };
        let r = parse_chat(
            schema(r#"{"type":"object","properties":{"z":{"type":"string"},"a":{"type":"integer"}}}"#).as_bytes(),
            &defaults(),
            9,
            false,
        )
        .unwrap();
        // The schema the model is told keeps the order it was written in.
        assert!(r
            .config
            .json
            .unwrap()
            .instruction()
            .ends_with(r#"{"type":"object","properties":{"z":{"type":"string"},"a":{"type":"integer"}}}"#));
        let e =
            parse_chat(schema(r#"{"type":"string","pattern":"^a"}"#).as_bytes(), &defaults(), 9, false).unwrap_err();
        assert_eq!(
            (e.status, e.message.as_str()),
            (400, "response_format.json_schema.schema: the keyword pattern is not supported on type string")
        );
    }

    #[test]
    fn bad_requests_are_400_with_a_reason() {
        let cases: &[(&[u8], &str)] = &[
            (b"{", "not valid JSON"),
            (b"[]", "JSON object"),
            (b"{\"messages\":[]}", "empty"),
            (b"{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", "tool"),
            (b"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"audio\"}]}]}", "audio"),
            (b"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":0}", "max_tokens"),
            (b"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_p\":0}", "top_p"),
            (b"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_k\":1.5}", "top_k"),
            (b"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":2}", "n must be 1"),
            (b"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":1}", "stream"),
            (b"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[1]}", "stop"),
            (b"\xff", "UTF-8"),
        ];
        for (body, want) in cases {
            let e = parse_chat(body, &defaults(), 4096, false).unwrap_err();
            assert!(e.status == 400 && e.message.contains(want), "{}: {}", String::from_utf8_lossy(body), e.message);
        }
        let many = format!(
            "{{\"messages\":[{{\"role\":\"user\",\"content\":[{}]}}]}}",
            vec![r#"{"type":"image_url","image_url":{"url":"data:;base64,aGk="}}"#; MAX_IMAGES + 1].join(",")
        );
        assert!(parse_chat(many.as_bytes(), &defaults(), 4096, false).unwrap_err().message.contains("at most"));
    }

    #[test]
    fn answers_and_chunks_have_openais_shape() {
        let r = Reply { id: "chatcmpl-1".into(), created: 5, model: "m" };
        let c = r.completion("hi", StopReason::Length, (10, 2), None).to_string_compact();
        assert_eq!(
            c,
            r#"{"id":"chatcmpl-1","object":"chat.completion","created":5,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}"#
        );
        let k = r.chunk(Json::obj([("content", Json::str("x"))]), None, None).to_string_compact();
        assert!(
            k.contains(r#""object":"chat.completion.chunk""#)
                && k.ends_with(r#""delta":{"content":"x"},"logprobs":null,"finish_reason":null}]}"#),
            "{k}"
        );
    }
}
