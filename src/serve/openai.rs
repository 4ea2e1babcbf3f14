//! OpenAI's chat-completions format: requests read into the chat template's messages and
//! sampling settings, and the JSON of answers, stream chunks, model lists and errors.

use super::http::HttpError;
use super::image_url::{self, ImageSource};
use crate::json::{self, Json};
use crate::runtime::chat::{Content, Message};
use crate::runtime::generate::{GenerateConfig, StopReason};
use std::collections::HashMap;
use tinyjson::JsonValue;

/// The most images one request may carry.
pub const MAX_IMAGES: usize = 16;
/// The most pixels all of a request's images may declare together (each is also within the
/// image limits): two of the largest images the decoder takes, about 700 MB of decoding.
pub const MAX_REQUEST_PIXELS: u64 = 2 * crate::image::Limits::DEFAULT_MAX_PIXELS;

/// A chat request: the conversation (its `Content::Image`s take `images` in order) and the
/// generation settings, the server's defaults overridden by the request's fields.
#[derive(Debug)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
    pub images: Vec<ImageSource>,
    pub config: GenerateConfig,
    pub stream: bool,
    pub include_usage: bool,
}

type Object = HashMap<String, JsonValue>;

fn bad(message: impl Into<String>) -> HttpError {
    HttpError::new(400, message)
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
    let field = |name: &str| root.get(name).filter(|v| !matches!(v, JsonValue::Null));
    let list: &Vec<JsonValue> =
        field("messages").and_then(|v| v.get()).ok_or_else(|| bad("messages must be an array of messages"))?;
    if list.is_empty() {
        return Err(bad("messages is empty"));
    }
    let mut images = Vec::new();
    let messages = list.iter().map(|m| message(m, &mut images, allow_files)).collect::<Result<Vec<_>, _>>()?;

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
    let stream = match field("stream") {
        None => false,
        Some(v) => *v.get::<bool>().ok_or_else(|| bad("stream must be true or false"))?,
    };
    let include_usage = field("stream_options")
        .and_then(|o| o.get::<Object>())
        .and_then(|o| o.get("include_usage"))
        .and_then(|v| v.get::<bool>())
        .is_some_and(|&b| b);
    Ok(ChatRequest { messages, images, config, stream, include_usage })
}

fn message(value: &JsonValue, images: &mut Vec<ImageSource>, allow_files: bool) -> Result<Message, HttpError> {
    let m: &Object = value.get().ok_or_else(|| bad("each message must be an object"))?;
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
            parts.iter().map(|p| part(p, images, allow_files)).collect::<Result<_, _>>()?
        }
        Some(_) => return Err(bad("a message's content must be a string or an array of parts")),
    };
    Ok(Message { role: role.to_owned(), content })
}

fn part(value: &JsonValue, images: &mut Vec<ImageSource>, allow_files: bool) -> Result<Content, HttpError> {
    let p: &Object = value.get().ok_or_else(|| bad("each content part must be an object"))?;
    let kind = p.get("type").and_then(|t| t.get::<String>()).map(String::as_str);
    match kind {
        Some("text") => {
            let text =
                p.get("text").and_then(|t| t.get::<String>()).ok_or_else(|| bad("a text part needs \"text\""))?;
            Ok(Content::Text(text.clone()))
        }
        Some("image_url") => {
            let url = match p.get("image_url") {
                Some(JsonValue::String(url)) => Some(url),
                Some(JsonValue::Object(o)) => o.get("url").and_then(|u| u.get::<String>()),
                _ => None,
            };
            let url = url.ok_or_else(|| bad("an image_url part needs \"image_url\": {\"url\": ...}"))?;
            if images.len() == MAX_IMAGES {
                return Err(bad(format!("a request may carry at most {MAX_IMAGES} images")));
            }
            images.push(image_url::resolve(url, allow_files)?);
            Ok(Content::Image)
        }
        other => {
            Err(bad(format!("content parts of type {:?} are not supported (text, image_url)", other.unwrap_or(""))))
        }
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
        StopReason::Length | StopReason::ContextFull => "length",
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

    /// The whole answer (`chat.completion`).
    pub fn completion(&self, text: &str, stop: StopReason, prompt_tokens: usize, completion_tokens: usize) -> Json {
        let mut fields = self.head("chat.completion");
        let message = Json::obj([("role", Json::str("assistant")), ("content", Json::str(text))]);
        let choice = Json::obj([
            ("index", Json::Int(0)),
            ("message", message),
            ("finish_reason", Json::str(finish_reason(stop))),
        ]);
        fields.push(("choices".into(), Json::Arr(vec![choice])));
        fields.push(("usage".into(), usage(prompt_tokens, completion_tokens)));
        Json::Obj(fields)
    }

    /// One `chat.completion.chunk` with a delta (`{}` for the last, which has the reason).
    pub fn chunk(&self, delta: Json, finish: Option<StopReason>) -> Json {
        let mut fields = self.head("chat.completion.chunk");
        let reason = finish.map_or(Json::Null, |s| Json::str(finish_reason(s)));
        let choice = Json::obj([("index", Json::Int(0)), ("delta", delta), ("finish_reason", reason)]);
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

/// `GET /v1/models`.
pub fn models(name: &str) -> Json {
    let model = Json::obj([
        ("id", Json::str(name)),
        ("object", Json::str("model")),
        ("created", Json::Int(0)),
        ("owned_by", Json::str("hrx")),
    ]);
    Json::obj([("object", Json::str("list")), ("data", Json::Arr(vec![model]))])
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
            "stream_options":{"include_usage":true},"presence_penalty":0}"#;
        let r = parse_chat(body, &defaults(), 4096, false).unwrap();
        assert_eq!(r.messages.len(), 4);
        assert_eq!(r.messages[1].content, vec![Content::Image, Content::Text("What?".into())]);
        assert_eq!(r.messages[3].content, vec![Content::Text("And ".into()), Content::Image]);
        assert_eq!(r.images.len(), 2);
        assert_eq!((r.config.max_new_tokens, r.config.sampler.top_k, r.config.sampler.seed), (7, 5, u64::MAX));
        assert_eq!((r.config.sampler.temperature, r.config.sampler.top_p), (0.5, 0.9));
        assert_eq!(r.config.stop_strings, vec!["\n".to_string()]);
        assert!(r.stream && r.include_usage);
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
        let c = r.completion("hi", StopReason::Length, 10, 2).to_string_compact();
        assert_eq!(
            c,
            r#"{"id":"chatcmpl-1","object":"chat.completion","created":5,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"length"}],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}"#
        );
        let k = r.chunk(Json::obj([("content", Json::str("x"))]), None).to_string_compact();
        assert!(
            k.contains(r#""object":"chat.completion.chunk""#)
                && k.ends_with(r#""delta":{"content":"x"},"finish_reason":null}]}"#),
            "{k}"
        );
    }
}
