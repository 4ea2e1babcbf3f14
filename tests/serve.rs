//! `hrx serve` on the oracle's tiny model, over loopback: OpenAI-format answers equal to
//! `hrx describe`'s, streaming, and a JSON error with the right status for each bad request.

mod common;

use base64::Engine;
use common::server::{at, await_metric, chat_request, json, metric, number, post, raw, raw_response, string, Server};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use tinyjson::JsonValue;

const PROMPT: &str = "What is in this picture?";

fn data_url(path: &Path) -> String {
    format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(std::fs::read(path).unwrap()))
}

fn image_request(url: &str, extra: &str) -> String {
    format!(
        r#"{{"model":"tiny","messages":[{{"role":"user","content":[{{"type":"image_url","image_url":{{"url":"{url}"}}}},{{"type":"text","text":"{PROMPT}"}}]}}],"max_tokens":6{extra}}}"#
    )
}

#[test]
fn answers_equal_describe_and_stream_the_same_text() {
    let Some(oracle) = common::oracle() else { return };
    let model = oracle.join("models/tiny");
    let image = oracle.join("images/tie-400x272.png");
    let describe = Command::new(env!("CARGO_BIN_EXE_hrx"))
        .args(["describe", image.to_str().unwrap(), "-p", PROMPT, "-n", "6", "--json", "-m"])
        .arg(model.join("qwen3vl-tiny-F16.gguf"))
        .arg("--mmproj")
        .arg(model.join("mmproj-qwen3vl-tiny-F16.gguf"))
        .output()
        .unwrap();
    assert!(describe.status.success());
    let want = json(String::from_utf8(describe.stdout).unwrap().trim());
    let want_tokens = at(&want, &["tokens"]).get::<Vec<JsonValue>>().unwrap().len() as f64;
    let want_prompt = at(&want, &["prompt_ids"]).get::<Vec<JsonValue>>().unwrap().len() as f64;

    let server = Server::start(&model, &[]);
    let request = image_request(&data_url(&image), "");
    let (status, body) = server.post("/v1/chat/completions", &request);
    assert_eq!(status, 200, "{body}");
    let answer = json(&body);
    assert_eq!(string(&answer, &["object"]), "chat.completion");
    assert_eq!(string(&answer, &["choices", "0", "message", "role"]), "assistant");
    let text = string(&answer, &["choices", "0", "message", "content"]);
    assert_eq!(text, string(&want, &["text"]), "the server answers as hrx describe does");
    assert_eq!(number(&answer, &["usage", "completion_tokens"]), want_tokens);
    assert_eq!(number(&answer, &["usage", "prompt_tokens"]), want_prompt);
    assert_eq!(number(&answer, &["usage", "total_tokens"]), want_tokens + want_prompt);

    // Two at once (decoded together, or one after the other under --parallel 1): both get the
    // greedy answer.
    let requests: Vec<_> = (0..2)
        .map(|_| {
            let (addr, request) = (server.addr.clone(), request.clone());
            std::thread::spawn(move || post(&addr, "/v1/chat/completions", &request))
        })
        .collect();
    for r in requests {
        let (status, body) = r.join().unwrap();
        assert_eq!(status, 200);
        assert_eq!(string(&json(&body), &["choices", "0", "message", "content"]), text);
    }

    let (status, body) = server.post(
        "/v1/chat/completions",
        &image_request(&data_url(&image), r#","stream":true,"stream_options":{"include_usage":true}"#),
    );
    assert_eq!(status, 200);
    let events: Vec<&str> = body.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(events.last(), Some(&"data: [DONE]"));
    let chunks: Vec<JsonValue> =
        events[..events.len() - 1].iter().map(|e| json(e.strip_prefix("data: ").expect("data: line"))).collect();
    let mut streamed = String::new();
    for c in &chunks {
        assert_eq!(string(c, &["object"]), "chat.completion.chunk");
        if let Some(JsonValue::String(piece)) = at(c, &["choices"])
            .get::<Vec<JsonValue>>()
            .unwrap()
            .first()
            .map(|ch| at(ch, &["delta"]))
            .and_then(|d| d.get::<HashMap<String, JsonValue>>().unwrap().get("content"))
        {
            streamed.push_str(piece);
        }
    }
    assert_eq!(streamed, text);
    assert_eq!(string(&chunks[0], &["choices", "0", "delta", "role"]), "assistant");
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(string(finish, &["choices", "0", "finish_reason"]), "length");
    assert_eq!(number(chunks.last().unwrap(), &["usage", "completion_tokens"]), want_tokens);
}

#[test]
fn multi_turn_chats_with_several_images_fit_the_template() {
    let Some(oracle) = common::oracle() else { return };
    let images = oracle.join("images");
    let server = Server::start(&oracle.join("models/tiny"), &["--allow-files", images.to_str().unwrap()]);
    let (a, b) = (data_url(&oracle.join("images/tiny-40x30.png")), oracle.join("images/gray-256x256.png"));
    let body = format!(
        r#"{{"messages":[{{"role":"system","content":"Be brief."}},
            {{"role":"user","content":[{{"type":"image_url","image_url":{{"url":"{a}"}}}},{{"type":"text","text":"And this?"}}]}},
            {{"role":"assistant","content":"A tie."}},
            {{"role":"user","content":[{{"type":"text","text":"Compare with "}},{{"type":"image_url","image_url":{{"url":"file://{}"}}}}]}}],
            "max_tokens":3,"temperature":0.8,"top_p":0.9,"top_k":20,"seed":7,"stop":["zzzz"]}}"#,
        b.display()
    );
    let (status, text) = server.post("/v1/chat/completions", &body);
    assert_eq!(status, 200, "{text}");
    let answer = json(&text);
    assert!(number(&answer, &["usage", "completion_tokens"]) <= 3.0);
    // Template tokens plus 1 (tiny: 2x2 merged) and 64 (gray: 8x8) image tokens.
    assert!(number(&answer, &["usage", "prompt_tokens"]) > 64.0 + 20.0, "{text}");
    // Files outside the allowed folder, missing, or a folder: one answer, saying nothing more.
    for path in ["/etc/hostname".to_owned(), format!("{}/missing.png", images.display()), images.display().to_string()]
    {
        let request = format!(
            r#"{{"messages":[{{"role":"user","content":[{{"type":"image_url","image_url":{{"url":"file://{path}"}}}}]}}]}}"#
        );
        let (status, answer) = server.post("/v1/chat/completions", &request);
        assert_eq!(status, 400, "{answer}");
        let message = string(&json(&answer), &["error", "message"]);
        assert_eq!(
            message,
            format!("{path} is not an image file hrx serve may read (regular image files under --allow-files folders)")
        );
    }
    let (_, again) = server.post("/v1/chat/completions", &body);
    assert_eq!(
        string(&json(&again), &["choices", "0", "message", "content"]),
        string(&answer, &["choices", "0", "message", "content"]),
        "a seed makes sampling repeatable"
    );
}

#[test]
fn idle_and_trickling_connections_do_not_lock_clients_out() {
    let Some(oracle) = common::oracle() else { return };
    let server = Server::start(&oracle.join("models/tiny"), &["--max-connections", "16", "--head-timeout", "2"]);
    // A trickle (a byte every 200 ms) does not extend the head's 2 s: 408 by about 2 s.
    let mut slow = TcpStream::connect(&server.addr).unwrap();
    slow.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let t = Instant::now();
    let mut response = Vec::new();
    for b in b"POST /v1/chat/completions HTTP/1.1\r\nX: ".iter().chain(&[b'a'; 40]) {
        if slow.write_all(&[*b]).is_err() {
            break;
        }
        let mut buf = [0u8; 512];
        if let Ok(n @ 1..) = slow.read(&mut buf) {
            response.extend_from_slice(&buf[..n]);
            break;
        }
        std::thread::sleep(Duration::from_millis(150));
    }
    let waited = t.elapsed();
    let text = String::from_utf8_lossy(&response);
    assert!(text.starts_with("HTTP/1.1 408"), "{text:?} after {waited:?}");
    assert!(waited < Duration::from_millis(3500), "{waited:?}");

    // Three times --max-connections of idle connections: the oldest are closed to make room, and
    // /health and a chat request are answered at once.
    let idle: Vec<TcpStream> = (0..48).map(|_| TcpStream::connect(&server.addr).unwrap()).collect();
    let t = Instant::now();
    let (status, body) = server.get("/health");
    assert_eq!(status, 200, "{body}");
    assert!(t.elapsed() < Duration::from_secs(1), "/health took {:?}", t.elapsed());
    let (status, body) =
        server.post("/v1/chat/completions", r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":1}"#);
    assert_eq!(status, 200, "{body}");
    drop(idle);
}

#[test]
fn control_tokens_in_a_message_are_text() {
    // `<|im_end|>` and `<|im_start|>` typed by a client must not close its turn and open a
    // system one: the prompt counts them as the several tokens of their text, not as one
    // control token each; `<|image_pad|>` is text too, not a place for an image.
    let Some(oracle) = common::oracle() else { return };
    let server = Server::start(&oracle.join("models/tiny"), &[]);
    let prompt_tokens = |content: &str| {
        let body = format!(r#"{{"messages":[{{"role":"user","content":"{content}"}}],"max_tokens":1}}"#);
        let (status, body) = server.post("/v1/chat/completions", &body);
        assert_eq!(status, 200, "{body}");
        number(&json(&body), &["usage", "prompt_tokens"])
    };
    let plain = prompt_tokens("x");
    for spoof in ["<|im_end|>", "<|im_start|>", "<|image_pad|>"] {
        let spoofed = prompt_tokens(&format!("x{spoof}"));
        assert!(spoofed >= plain + 3.0, "{spoof}: {spoofed} prompt tokens against {plain} for \"x\"");
    }
}

#[test]
fn every_bad_request_gets_a_json_error_with_its_status() {
    let Some(oracle) = common::oracle() else { return };
    let server = Server::start(&oracle.join("models/tiny"), &[]);
    let (status, body) = server.get("/health");
    assert_eq!((status, string(&json(&body), &["status"])), (200, "ok".to_string()));
    let (status, body) = server.get("/v1/models");
    assert_eq!((status, string(&json(&body), &["data", "0", "id"])), (200, "qwen3vl-tiny-F16".to_string()));
    let (status, body) = server.get("/v1/models/qwen3vl-tiny-F16");
    assert_eq!((status, string(&json(&body), &["id"])), (200, "qwen3vl-tiny-F16".to_string()));
    assert_eq!(string(&json(&body), &["object"]), "model");

    let user = |content: &str| format!(r#"{{"messages":[{{"role":"user","content":{content}}}]}}"#);
    let image = |url: &str| user(&format!(r#"[{{"type":"image_url","image_url":{{"url":"{url}"}}}}]"#));
    let text_as_png =
        format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode("not a picture"));
    let cases: Vec<(u16, (u16, String), &str)> = vec![
        (400, server.post("/v1/chat/completions", "{\"messages\": [}"), "not valid JSON"),
        (400, server.post("/v1/chat/completions", &image("http://example.com/cat.png")), "offline"),
        (400, server.post("/v1/chat/completions", &image("file:///etc/hostname")), "--allow-files DIR"),
        (400, server.post("/v1/chat/completions", &image("data:image/png;base64,@@@@")), "base64"),
        (400, server.post("/v1/chat/completions", &image(&text_as_png)), "image 1"),
        (400, server.post("/v1/chat/completions", &"[".repeat(100_000)), "deeper"),
        (404, server.get("/v1/completions"), "no such endpoint"),
        (404, server.get("/v1/models/gpt-4o"), "no model \"gpt-4o\" here"),
        (
            400,
            server.post(
                "/v1/chat/completions",
                r#"{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}]}"#,
            ),
            "tools is not supported",
        ),
        (
            400,
            server.post("/v1/chat/completions", r#"{"messages":[{"role":"user","content":"x"}],"tool_choice":"none"}"#),
            "tool_choice is not supported",
        ),
        (
            400,
            server.post("/v1/chat/completions", r#"{"messages":[{"role":"user","content":"x"}],"logit_bias":{"1":5}}"#),
            "logit_bias is not supported",
        ),
        (405, server.get("/v1/chat/completions"), "takes POST"),
        (411, server.raw(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n"), "Content-Length"),
        (
            413,
            server.raw(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 67108865\r\n\r\n{\"messages\":"),
            "limit",
        ),
        (400, server.raw(b"\x16\x03\x01 not http\r\n\r\n"), "malformed"),
    ];
    for (want, (status, body), says) in cases {
        assert_eq!(status, want, "{body}");
        let message = string(&json(&body), &["error", "message"]);
        assert!(message.contains(says), "{want}: {message}");
    }
    // An oversized body that is really sent: refused without reading it all.
    let big =
        format!("POST /v1/chat/completions HTTP/1.1\r\nContent-Length: {}\r\n\r\n{}", 65 << 20, "x".repeat(65 << 20));
    assert_eq!(server.raw(big.as_bytes()).0, 413);
    // And the server still answers after all of that.
    assert_eq!(server.get("/health").0, 200);
    // A 405 says the method the path takes (RFC 9110), and a 404 lists every endpoint.
    for (request, allow) in [
        ("POST /health", "Allow: GET, OPTIONS\r\n"),
        ("DELETE /v1/models/tiny", "Allow: GET, OPTIONS\r\n"),
        ("GET /v1/chat/completions", "Allow: POST, OPTIONS\r\n"),
    ] {
        let response = server
            .raw_response(format!("{request} HTTP/1.1\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").as_bytes());
        assert!(response.starts_with("HTTP/1.1 405") && response.contains(allow), "{request}: {response}");
    }
    let (status, body) = server.get("/v1/chat");
    assert_eq!(status, 404, "{body}");
    let message = string(&json(&body), &["error", "message"]);
    for endpoint in
        ["POST /v1/chat/completions", "GET /v1/models,", "GET /v1/models/{id}", "GET /health", "GET /metrics"]
    {
        assert!(message.contains(endpoint), "{endpoint} not in {message}");
    }
}

#[test]
fn max_tokens_past_the_servers_cap_is_refused_naming_it() {
    let Some(oracle) = common::oracle() else { return };
    let server = Server::start(&oracle.join("models/tiny"), &["--max-tokens-cap", "8", "-n", "4"]);
    let ask = |n: usize| {
        server.post(
            "/v1/chat/completions",
            &format!(r#"{{"messages":[{{"role":"user","content":"hi"}}],"max_tokens":{n}}}"#),
        )
    };
    let (status, body) = ask(9);
    let message = string(&json(&body), &["error", "message"]);
    assert_eq!(status, 400, "{body}");
    assert!(message.contains("cap of 8") && message.contains("--max-tokens-cap"), "{message}");
    let (status, body) = ask(8);
    assert_eq!(status, 200, "{body}");
    assert!(number(&json(&body), &["usage", "completion_tokens"]) <= 8.0, "{body}");
    // A default answer longer than the cap is a usage error at start.
    let (m, mm) =
        (oracle.join("models/tiny/qwen3vl-tiny-F16.gguf"), oracle.join("models/tiny/mmproj-qwen3vl-tiny-F16.gguf"));
    let out = Command::new(env!("CARGO_BIN_EXE_hrx"))
        .args(["serve", "-m", m.to_str().unwrap(), "--mmproj", mm.to_str().unwrap()])
        .args(["--max-tokens-cap", "8", "-n", "9", "--port", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-tokens-cap 8"));
}

#[test]
fn pages_of_an_allowed_origin_get_cors_headers_and_preflights() {
    let Some(oracle) = common::oracle() else { return };
    let server = Server::start(&oracle.join("models/tiny"), &["--cors-origin", "http://kiosk.local:8000", "-n", "2"]);
    let allowed = "Access-Control-Allow-Origin: http://kiosk.local:8000\r\n";
    let preflight = |origin: &str| {
        server.raw_response(
            format!("OPTIONS /v1/chat/completions HTTP/1.1\r\nConnection: close\r\nOrigin: {origin}\r\nAccess-Control-Request-Method: POST\r\n\r\n")
                .as_bytes(),
        )
    };
    let ok = preflight("http://kiosk.local:8000");
    assert!(ok.starts_with("HTTP/1.1 204"), "{ok}");
    assert!(ok.contains(allowed) && ok.contains("Access-Control-Allow-Methods: POST, OPTIONS"), "{ok}");
    assert!(ok.contains("Access-Control-Allow-Headers: Content-Type"), "{ok}");
    // Another origin: the preflight says what the endpoint takes, and allows nothing.
    let other = preflight("http://elsewhere.example");
    assert!(other.starts_with("HTTP/1.1 204") && !other.contains("Access-Control"), "{other}");
    // The answers themselves carry the header for the allowed origin only: plain, error, chat.
    let get = |origin: &str| {
        server.raw_response(format!("GET /health HTTP/1.1\r\nConnection: close\r\nOrigin: {origin}\r\n\r\n").as_bytes())
    };
    assert!(get("http://kiosk.local:8000").contains(allowed));
    assert!(!get("http://elsewhere.example").contains("Access-Control"));
    let missing = server
        .raw_response(b"GET /v1/nothing HTTP/1.1\r\nConnection: close\r\nOrigin: http://kiosk.local:8000\r\n\r\n");
    assert!(missing.starts_with("HTTP/1.1 404") && missing.contains(allowed), "{missing}");
    for stream in [false, true] {
        let body = format!(r#"{{"messages":[{{"role":"user","content":"hi"}}],"stream":{stream}}}"#);
        let request = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nConnection: close\r\nOrigin: http://kiosk.local:8000\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let answer = server.raw_response(request.as_bytes());
        assert!(answer.starts_with("HTTP/1.1 200") && answer.contains(allowed), "{answer}");
    }
    // An origin is scheme://host[:port]: anything else is a usage error at start.
    let (m, mm) =
        (oracle.join("models/tiny/qwen3vl-tiny-F16.gguf"), oracle.join("models/tiny/mmproj-qwen3vl-tiny-F16.gguf"));
    let out = Command::new(env!("CARGO_BIN_EXE_hrx"))
        .args([
            "serve",
            "-m",
            m.to_str().unwrap(),
            "--mmproj",
            mm.to_str().unwrap(),
            "--cors-origin",
            "kiosk.local/app",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--cors-origin kiosk.local/app"));
}

/// "the context holds N tokens and M are needed": (N, M).
fn context_numbers(message: &str) -> (f64, f64) {
    let numbers: Vec<f64> = message.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect();
    assert!(message.contains("are needed") && numbers.len() >= 2, "{message}");
    (numbers[0], numbers[1])
}

#[test]
fn prompts_too_long_or_too_many_pixels_are_refused_with_their_real_size() {
    let Some(oracle) = common::oracle() else { return };
    let model = oracle.join("models/tiny");
    let tie = data_url(&oracle.join("images/tie-400x272.png"));
    let long_text =
        format!(r#"{{"messages":[{{"role":"user","content":"{}"}}],"max_tokens":1}}"#, "word ".repeat(3000));
    // The prompts' real sizes, from a server whose context holds them.
    let roomy = Server::start(&model, &["--ctx", "8192"]);
    let size = |body: &str| {
        let (status, answer) = roomy.post("/v1/chat/completions", body);
        assert_eq!(status, 200, "{answer}");
        number(&json(&answer), &["usage", "prompt_tokens"])
    };
    let (text_tokens, image_tokens) = (size(&long_text), size(&image_request(&tie, "")));
    assert!(text_tokens >= 3000.0 && image_tokens > 64.0, "{text_tokens} {image_tokens}");
    drop(roomy);

    // A context of 64: both are refused before any token runs (not where a prefill chunk
    // overflowed): the image's with its whole size, counted from its header before it is
    // decoded; the long text's by its bytes alone, before it is tokenized (at least its bytes
    // over the longest token's).
    let server = Server::start(&model, &["--ctx", "64"]);
    let (status, answer) = server.post("/v1/chat/completions", &image_request(&tie, ""));
    assert_eq!(status, 400, "{answer}");
    let message = string(&json(&answer), &["error", "message"]);
    assert_eq!(context_numbers(&message), (64.0, image_tokens), "{message}");
    let (status, answer) = server.post("/v1/chat/completions", &long_text);
    assert_eq!(status, 400, "{answer}");
    let message = string(&json(&answer), &["error", "message"]);
    let (n_ctx, at_least) = context_numbers(&message);
    assert!(n_ctx == 64.0 && at_least > 64.0 && at_least <= text_tokens, "{message}");
    assert!(message.contains("at least") && message.contains("by the bytes of the messages' text alone"), "{message}");
    // Three 49-megapixel images (each within the decoder's 50 MP, a few KB each) hold more
    // pixels than one request may: refused from their headers, naming the limit.
    let bomb = format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(common::black_png(7000, 7000))
    );
    let part = format!(r#"{{"type":"image_url","image_url":{{"url":"{bomb}"}}}}"#);
    let body = format!(r#"{{"messages":[{{"role":"user","content":[{part},{part},{part}]}}],"max_tokens":1}}"#);
    let (status, answer) = server.post("/v1/chat/completions", &body);
    assert_eq!(status, 400, "{answer}");
    let message = string(&json(&answer), &["error", "message"]);
    assert!(message.contains("100000000 pixels") && message.contains("image 3"), "{message}");
    assert_eq!(server.get("/health").0, 200);
}

#[test]
fn a_client_that_hangs_up_stops_its_generation() {
    // Asked for far more tokens than the model makes in the test's time, the client closes
    // after a moment (streaming or not): the server notices, stops generating, and says so in
    // its log (499, the tokens made); the model is free for the next request at once.
    let Some(oracle) = common::oracle() else { return };
    let server = Server::start(&oracle.join("models/tiny"), &["--ctx", "32768", "--max-tokens-cap", "1000000"]);
    for (n, stream) in [(1, false), (2, true)] {
        let body = format!(
            r#"{{"messages":[{{"role":"user","content":"hang up {n}"}}],"max_tokens":1000000,"stream":{stream}}}"#
        );
        let request =
            format!("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}", body.len());
        let mut s = TcpStream::connect(&server.addr).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        drop(s);
        let (line, tokens) = server.hung_up();
        assert!(tokens < 32768, "{line}");
        server.log.lock().unwrap().clear();
    }
    let (status, body) =
        server.post("/v1/chat/completions", r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":1}"#);
    assert_eq!(status, 200, "{body}");
}

#[test]
fn a_streaming_client_that_stops_reading_stops_its_generation() {
    // Asked for a long streamed answer, the client never reads: once the socket buffers hold
    // what they can (the server keeps its own small), an event waits past --send-timeout and
    // the server stops generating (499, the tokens made, in its log); the model is free for the
    // next request at once. Before, the server's send buffer grew to 4 MiB, some 28,000 tokens
    // of events, all generated for nobody before a write waited.
    let Some(oracle) = common::oracle() else { return };
    let server = Server::start(
        &oracle.join("models/tiny"),
        &["--ctx", "32768", "--max-tokens-cap", "1000000", "--send-timeout", "1", "--ignore-eos"],
    );
    let body = r#"{"messages":[{"role":"user","content":"never read"}],"max_tokens":1000000,"stream":true}"#;
    let mut s = TcpStream::connect(&server.addr).unwrap();
    s.write_all(&chat_request(body)).unwrap();
    let line = server.log_line(" 499 ", Duration::from_secs(120));
    let line = line.unwrap_or_else(|| panic!("no 499 in the log:\n{}", server.log.lock().unwrap()));
    assert!(line.contains("the client stopped reading") && line.contains("--send-timeout"), "{line}");
    let tokens: usize = line
        .split("after ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(tokens < 8000, "stopped once the buffers were full, not megabytes later: {line}");
    let (status, answer) =
        server.post("/v1/chat/completions", r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":1}"#);
    assert_eq!(status, 200, "{answer}");
    drop(s);
}

#[test]
fn a_bounded_queue_a_memory_budget_and_metrics() {
    let Some(oracle) = common::oracle() else { return };
    let model = oracle.join("models/tiny");
    let server = Server::start(&model, &["--parallel", "1", "--queue", "1", "--memory-budget", "1", "--ctx", "4096"]);
    let long = r#"{"messages":[{"role":"user","content":"a long answer"}],"max_tokens":2000}"#;
    let short = r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":1}"#;
    // A body over the budget: 503 with Retry-After, before the body is read.
    let big = format!(r#"{{"messages":[{{"role":"user","content":"{}"}}]}}"#, "x".repeat(3 << 19));
    let refused = raw_response(&server.addr, &chat_request(&big));
    assert!(refused.starts_with("HTTP/1.1 503") && refused.contains("Retry-After: 1"), "{refused}");
    assert!(refused.contains("--memory-budget"), "{refused}");
    // A body of 0.4 MiB counts what parsing it makes too (its strings, their images decoded:
    // 2.75 times its bytes), over the 1 MiB (scripts/soak found bodies held 1.4x the budget).
    let parsed = format!(r#"{{"messages":[{{"role":"user","content":"{}"}}]}}"#, "x".repeat(400 << 10));
    let refused = raw_response(&server.addr, &chat_request(&parsed));
    assert!(refused.starts_with("HTTP/1.1 503") && refused.contains("what parsing it makes"), "{refused}");

    // One runs, one waits, a third is refused at once (503, Retry-After); the one that waited
    // is answered when the first is done.
    let (addr, addr2) = (server.addr.clone(), server.addr.clone());
    let first = std::thread::spawn(move || raw(&addr, &chat_request(long)));
    await_metric(&server, "hrx_model_busy", 1.0);
    let second = std::thread::spawn(move || raw(&addr2, &chat_request(short)));
    await_metric(&server, "hrx_queue_depth", 1.0);
    let third = raw_response(&server.addr, &chat_request(short));
    assert!(third.starts_with("HTTP/1.1 503") && third.contains("Retry-After: 1"), "{third}");
    assert!(third.contains("waiting for the model"), "{third}");
    assert_eq!(server.get("/health").0, 200, "/health answers while the model is busy");
    assert_eq!(first.join().unwrap().0, 200);
    assert_eq!(second.join().unwrap().0, 200);
    let (status, page) = server.get("/metrics");
    assert_eq!(status, 200);
    assert_eq!(metric(&page, "hrx_chat_requests_total{outcome=\"answered\"}"), 2.0, "{page}");
    assert_eq!(metric(&page, "hrx_chat_requests_total{outcome=\"queue_full\"}"), 1.0, "{page}");
    assert_eq!(metric(&page, "hrx_chat_requests_total{outcome=\"over_memory_budget\"}"), 2.0, "{page}");
    assert_eq!(metric(&page, "hrx_queue_depth"), 0.0);
    assert_eq!(metric(&page, "hrx_memory_reserved_bytes"), 0.0, "every reservation given back");
    assert!(metric(&page, "hrx_model_busy_seconds_total") > 0.0);
    // Every refusal is in the log with its reason.
    let logged = |text: &str| server.log_line(text, Duration::from_secs(5)).is_some_and(|l| l.contains(" 503 "));
    assert!(logged("waiting for the model") && logged("--memory-budget"), "{}", server.log.lock().unwrap());

    // A wait past --queue-wait: 503 naming it.
    let impatient = Server::start(&model, &["--parallel", "1", "--queue-wait", "0.2", "--ctx", "4096"]);
    let addr = impatient.addr.clone();
    let first = std::thread::spawn(move || raw(&addr, &chat_request(long)));
    await_metric(&impatient, "hrx_model_busy", 1.0);
    let waited = raw_response(&impatient.addr, &chat_request(short));
    assert!(waited.starts_with("HTTP/1.1 503") && waited.contains("--queue-wait"), "{waited}");
    assert_eq!(first.join().unwrap().0, 200);
}

#[test]
fn requests_waiting_behind_the_one_on_the_model_cannot_starve_its_image_decode() {
    // A budget of 8 MiB keeps 4 for decoding the images of the request on the model; bodies
    // share the other 4. While a long answer holds the model, an image request (700x700, 3.3
    // MiB to decode) waits, and so does a body of 1.4 MiB (3.9 MiB with what parsing it makes);
    // a second such body is refused at its head. From one pool both bodies got in and left the
    // image request, when its turn came, 0.3 MiB to decode in: a 503 after all its waiting.
    let Some(oracle) = common::oracle() else { return };
    let server = Server::start(
        &oracle.join("models/tiny"),
        &["--parallel", "1", "--memory-budget", "8", "--ctx", "4096", "--ignore-eos"],
    );
    let (_, page) = server.get("/metrics");
    assert_eq!(metric(&page, "hrx_memory_decode_share_bytes"), (4 << 20) as f64, "{page}");
    let long = r#"{"messages":[{"role":"user","content":"a long answer"}],"max_tokens":2000}"#;
    let image = image_request(
        &format!(
            "data:image/png;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(common::black_png(700, 700))
        ),
        "",
    );
    let padded =
        format!(r#"{{"messages":[{{"role":"user","content":"x"}}],"max_tokens":1}}{}"#, " ".repeat(1400 << 10));
    let send = |body: String| {
        let addr = server.addr.clone();
        std::thread::spawn(move || raw(&addr, &chat_request(&body)))
    };
    let first = send(long.to_owned());
    await_metric(&server, "hrx_model_busy", 1.0);
    let second = send(image);
    await_metric(&server, "hrx_queue_depth", 1.0);
    let third = send(padded.clone());
    await_metric(&server, "hrx_queue_depth", 2.0);
    let fourth = server.raw_response(&chat_request(&padded));
    assert!(fourth.starts_with("HTTP/1.1 503") && fourth.contains("--memory-budget"), "{fourth}");
    assert_eq!(first.join().unwrap().0, 200);
    let (status, answer) = second.join().unwrap();
    assert_eq!(status, 200, "the image request decodes in its share: {answer}");
    assert!(!string(&json(&answer), &["choices", "0", "message", "content"]).is_empty(), "{answer}");
    assert_eq!(third.join().unwrap().0, 200);
    let (_, page) = server.get("/metrics");
    assert_eq!(metric(&page, "hrx_memory_reserved_bytes"), 0.0, "every reservation given back");
}

/// A chat answer's `choices[0].logprobs.content` entries.
fn logprob_entries(answer: &JsonValue) -> Vec<JsonValue> {
    at(answer, &["choices", "0", "logprobs", "content"]).get::<Vec<JsonValue>>().expect("logprobs.content").clone()
}

/// An entry's (token, logprob).
fn token_logprob(entry: &JsonValue) -> (String, f64) {
    (string(entry, &["token"]), number(entry, &["logprob"]))
}

#[test]
fn logprobs_come_with_plain_and_streamed_answers_in_openais_shape() {
    let Some(oracle) = common::oracle() else { return };
    let server = Server::start(&oracle.join("models/tiny"), &[]);
    let body = |extra: &str| {
        format!(
            r#"{{"messages":[{{"role":"user","content":"hello there"}}],"max_tokens":8,"logprobs":true,"top_logprobs":3{extra}}}"#
        )
    };
    let (status, text) = server.post("/v1/chat/completions", &body(""));
    assert_eq!(status, 200, "{text}");
    let answer = json(&text);
    assert_eq!(string(&answer, &["choices", "0", "finish_reason"]), "length", "{text}");
    assert!(matches!(at(&answer, &["choices", "0", "logprobs", "refusal"]), JsonValue::Null));
    let entries = logprob_entries(&answer);
    assert_eq!(entries.len() as f64, number(&answer, &["usage", "completion_tokens"]), "one entry per token");
    let mut bytes = Vec::new();
    for e in &entries {
        let top = at(e, &["top_logprobs"]).get::<Vec<JsonValue>>().unwrap();
        assert_eq!(top.len(), 3, "{e:?}");
        let logprobs: Vec<f64> = top.iter().map(|t| number(t, &["logprob"])).collect();
        assert!(logprobs.windows(2).all(|w| w[0] >= w[1]) && logprobs[0] < 0.0, "most likely first: {logprobs:?}");
        // Greedy (the server's default here): the chosen token is the most likely one.
        assert_eq!(token_logprob(e), token_logprob(&top[0]));
        for b in at(e, &["bytes"]).get::<Vec<JsonValue>>().unwrap() {
            bytes.push(*b.get::<f64>().unwrap() as u8);
        }
    }
    let content = string(&answer, &["choices", "0", "message", "content"]);
    // (A byte that starts no whole character is U+FFFD in the text, as the bytes' lossy UTF-8.)
    assert_eq!(String::from_utf8_lossy(&bytes), content, "the tokens' bytes spell the answer");

    // Streamed: each chunk carries its token's entry; together they are the plain answer's.
    let (status, text) = server.post("/v1/chat/completions", &body(r#","stream":true"#));
    assert_eq!(status, 200, "{text}");
    let mut streamed = Vec::new();
    for event in text.split("\n\n").filter_map(|e| e.strip_prefix("data: ")).filter(|e| *e != "[DONE]") {
        let chunk = json(event);
        if let JsonValue::Object(l) = at(&chunk, &["choices", "0", "logprobs"]) {
            streamed.extend(l["content"].get::<Vec<JsonValue>>().unwrap().iter().cloned());
        }
    }
    assert_eq!(streamed, entries);

    // Not asked for: null, as OpenAI's.
    let (_, text) =
        server.post("/v1/chat/completions", r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":2}"#);
    assert!(matches!(at(&json(&text), &["choices", "0", "logprobs"]), JsonValue::Null), "{text}");
}

#[test]
fn frequency_and_presence_penalties_follow_openais_formula() {
    // Greedy with penalties: at each step the token chosen is the best of the model's logprobs
    // less count x frequency_penalty and, for a token the answer already has, presence_penalty
    // (the logprobs themselves are the model's, unpenalized).
    let Some(oracle) = common::oracle() else { return };
    let server = Server::start(&oracle.join("models/tiny"), &[]);
    let ask = |penalties: &str| {
        let body = format!(
            r#"{{"messages":[{{"role":"user","content":"hello there"}}],"max_tokens":60,"logprobs":true,"top_logprobs":20{penalties}}}"#
        );
        let (status, text) = server.post("/v1/chat/completions", &body);
        assert_eq!(status, 200, "{text}");
        logprob_entries(&json(&text))
    };
    let plain = ask("");
    let (frequency, presence) = (0.02, 0.05);
    let penalized = ask(&format!(r#","frequency_penalty":{frequency},"presence_penalty":{presence}"#));
    let mut counts: HashMap<String, f64> = HashMap::new();
    let mut moved = 0;
    for e in &penalized {
        let (chosen, _) = token_logprob(e);
        let score = |t: &JsonValue| {
            let (token, logprob) = token_logprob(t);
            let n = counts.get(&token).copied().unwrap_or(0.0);
            logprob - n * frequency - if n > 0.0 { presence } else { 0.0 }
        };
        let top = at(e, &["top_logprobs"]).get::<Vec<JsonValue>>().unwrap();
        let best = top.iter().map(score).fold(f64::NEG_INFINITY, f64::max);
        let mine = top.iter().find(|t| string(t, &["token"]) == chosen).map(score);
        assert!(mine.is_some_and(|m| m >= best - 1e-5), "{chosen:?} is not the best penalized token");
        if string(&top[0], &["token"]) != chosen {
            moved += 1;
        }
        *counts.entry(chosen).or_default() += 1.0;
    }
    assert!(moved > 0, "the penalties never changed a choice");
    assert_ne!(plain, penalized);
    let plain_distinct: std::collections::HashSet<String> = plain.iter().map(|e| token_logprob(e).0).collect();
    assert!(
        counts.len() > plain_distinct.len(),
        "{} distinct tokens, {} without penalties",
        counts.len(),
        plain_distinct.len()
    );
}

#[test]
fn image_detail_low_resizes_to_512_by_512_and_high_to_the_servers_budget() {
    let Some(oracle) = common::oracle() else { return };
    let server = Server::start(&oracle.join("models/tiny"), &["-n", "1"]);
    let url = format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(common::black_png(1024, 1024))
    );
    let prompt_tokens = |detail: &str| {
        let body = format!(
            r#"{{"messages":[{{"role":"user","content":[{{"type":"image_url","image_url":{{"url":"{url}"{detail}}}}}]}}]}}"#
        );
        let (status, text) = server.post("/v1/chat/completions", &body);
        assert_eq!(status, 200, "{text}");
        number(&json(&text), &["usage", "prompt_tokens"])
    };
    let (low, high, auto, none) = (
        prompt_tokens(r#","detail":"low""#),
        prompt_tokens(r#","detail":"high""#),
        prompt_tokens(r#","detail":"auto""#),
        prompt_tokens(""),
    );
    // Patches of 16 merged 2 x 2: 1024 x 1024 is 32 x 32 tokens at the 1 MP budget, 16 x 16 at 512 x 512.
    assert_eq!(high - low, 1024.0 - 256.0, "low {low}, high {high}");
    assert_eq!((auto, none), (high, high));
}

/// One response read off a kept connection: its status, head and body (by Content-Length).
fn read_one(s: &mut TcpStream) -> (u16, String, String) {
    let mut data = Vec::new();
    let mut byte = [0u8; 1];
    while !data.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).expect("a response head"), 1, "closed after {:?}", String::from_utf8_lossy(&data));
        data.push(byte[0]);
    }
    let head = String::from_utf8(data).unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no Content-Length in {head}"));
    let mut body = vec![0u8; length];
    s.read_exact(&mut body).unwrap();
    (head[9..12].parse().unwrap(), head, String::from_utf8(body).unwrap())
}

#[test]
fn a_kept_connection_carries_request_after_request_and_an_idle_one_ends_at_the_head_deadline() {
    let Some(oracle) = common::oracle() else { return };
    let server = Server::start(&oracle.join("models/tiny"), &["--head-timeout", "2", "-n", "2"]);
    let connect = |server: &Server| {
        let s = TcpStream::connect(&server.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s
    };
    let chat = |extra: &str| {
        let body = format!(r#"{{"messages":[{{"role":"user","content":"hi"}}]{extra}}}"#);
        format!("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}", body.len())
    };
    let mut s = connect(&server);
    // A plain answer, then a chat, then two requests sent in one write: all on one connection.
    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let (status, head, _) = read_one(&mut s);
    assert!(status == 200 && head.contains("Connection: keep-alive"), "{head}");
    s.write_all(chat("").as_bytes()).unwrap();
    let (status, _, body) = read_one(&mut s);
    assert_eq!(status, 200, "{body}");
    assert_eq!(number(&json(&body), &["usage", "completion_tokens"]), 2.0);
    s.write_all(b"GET /v1/models HTTP/1.1\r\n\r\nGET /v1/nothing HTTP/1.1\r\n\r\n").unwrap();
    assert_eq!(read_one(&mut s).0, 200);
    let (status, head, _) = read_one(&mut s);
    assert!(
        status == 404 && head.contains("Connection: keep-alive"),
        "an error after a whole request keeps it too: {head}"
    );
    // A stream of events ends its connection.
    s.write_all(chat(r#","stream":true"#).as_bytes()).unwrap();
    let mut rest = String::new();
    s.read_to_string(&mut rest).unwrap();
    assert!(rest.contains("Connection: close") && rest.trim_end().ends_with("data: [DONE]"), "{rest}");

    // A client's Connection: close, and HTTP/1.0 without keep-alive, end it after the answer.
    for request in ["GET /health HTTP/1.1\r\nConnection: close\r\n\r\n", "GET /health HTTP/1.0\r\n\r\n"] {
        let mut s = connect(&server);
        s.write_all(request.as_bytes()).unwrap();
        let mut all = String::new();
        s.read_to_string(&mut all).unwrap();
        assert!(all.starts_with("HTTP/1.1 200") && all.contains("Connection: close"), "{all}");
    }

    // Kept and idle: closed at the 2 s head deadline from the end of its answer, without a 408.
    let mut idle = connect(&server);
    idle.write_all(b"GET /health HTTP/1.1\r\n\r\n").unwrap();
    assert_eq!(read_one(&mut idle).0, 200);
    let t = Instant::now();
    let mut after = Vec::new();
    idle.read_to_end(&mut after).unwrap();
    assert!(after.is_empty(), "{:?}", String::from_utf8_lossy(&after));
    assert!(t.elapsed() < Duration::from_secs(10), "closed after {:?}", t.elapsed());

    // Idle kept connections cannot lock others out: past --max-connections the one that has
    // waited longest is closed to make room, and a new client is answered at once. (A server
    // of its own: connections still closing from the checks above count as open.)
    let server = Server::start(&oracle.join("models/tiny"), &["--max-connections", "3"]);
    let kept: Vec<TcpStream> = (0..3)
        .map(|_| {
            let mut s = connect(&server);
            s.write_all(b"GET /health HTTP/1.1\r\n\r\n").unwrap();
            assert_eq!(read_one(&mut s).0, 200);
            s
        })
        .collect();
    let t = Instant::now();
    let (status, body) = server.get("/health");
    assert_eq!(status, 200, "{body}");
    assert!(t.elapsed() < Duration::from_secs(1), "/health took {:?}", t.elapsed());
    assert!(server.log_line("to make room", Duration::from_secs(5)).is_some(), "{}", server.log.lock().unwrap());
    drop(kept);
}

#[test]
fn json_answers_follow_their_schema_plain_and_streamed_and_unsupported_keywords_are_400() {
    let Some(oracle) = common::oracle() else { return };
    let server = Server::start(&oracle.join("models/tiny"), &["--temp", "1", "--top-k", "0", "-n", "40"]);
    let ask = |format: &str, extra: &str| {
        format!(
            r#"{{"messages":[{{"role":"user","content":"Is anyone at the door?"}}],"response_format":{format}{extra}}}"#
        )
    };
    let schema = r#"{"type":"json_schema","json_schema":{"name":"door","strict":true,"schema":{"type":"object","properties":{"answer":{"enum":["yes","no"]},"who":{"type":"string","maxLength":8}},"required":["answer","who"],"additionalProperties":false}}}"#;
    for seed in 0..3 {
        let (status, body) = server.post("/v1/chat/completions", &ask(schema, &format!(r#","seed":{seed}"#)));
        assert_eq!(status, 200, "{body}");
        let answer = json(&string(&json(&body), &["choices", "0", "message", "content"]));
        assert!(["yes", "no"].contains(&string(&answer, &["answer"]).as_str()), "{answer:?}");
        assert!(string(&answer, &["who"]).chars().count() <= 8, "{answer:?}");
    }
    // Streamed: the chunks make one object; a limit that cuts it closes it, finish_reason length.
    let (status, body) =
        server.post("/v1/chat/completions", &ask(r#"{"type":"json_object"}"#, r#","stream":true,"max_tokens":6"#));
    assert_eq!(status, 200, "{body}");
    let events: Vec<JsonValue> =
        body.split("\n\n").filter_map(|e| e.strip_prefix("data: ")).filter(|e| *e != "[DONE]").map(json).collect();
    let text: String = events
        .iter()
        .filter_map(|c| match &c["choices"][0]["delta"] {
            JsonValue::Object(d) => d.get("content").and_then(|t| t.get::<String>()).cloned(),
            _ => None,
        })
        .collect();
    assert!(matches!(json(&text), JsonValue::Object(_)), "{text:?}");
    let finish = string(&events[events.len() - 1], &["choices", "0", "finish_reason"]);
    assert!(["stop", "length"].contains(&finish.as_str()), "{finish}");

    for (keyword, s) in common::schemas::UNSUPPORTED {
        let format = format!(r#"{{"type":"json_schema","json_schema":{{"name":"x","schema":{s}}}}}"#);
        let (status, body) = server.post("/v1/chat/completions", &ask(&format, ""));
        assert_eq!(status, 400, "{keyword}: {body}");
        let message = string(&json(&body), &["error", "message"]);
        assert!(
            message.contains(keyword) && message.starts_with("response_format.json_schema.schema"),
            "{keyword}: {message}"
        );
    }
}
