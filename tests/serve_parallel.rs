//! `hrx serve --parallel N` on the oracle's tiny model, on the CPU: a second client streams
//! while the first's answer is still under way; answers equal to `--parallel 1`'s, each request
//! with its own settings (on Vulkan too: lavapipe in CI); a client that hangs up mid-stream
//! frees its sequence; bad values of the flag refused naming it.

mod common;
mod vulkan_common;

use common::server::{at, await_metric, chat_request, json, metric, number, post, string, Server};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tinyjson::JsonValue;

fn tiny() -> Option<PathBuf> {
    Some(common::oracle()?.join("models/tiny"))
}

/// A server of the tiny model on the CPU decoding `parallel` requests together.
fn server(model: &Path, parallel: &str, extra: &[&str]) -> Server {
    server_on("cpu", model, parallel, extra)
}

/// The same on `device` (a --device value).
fn server_on(device: &str, model: &Path, parallel: &str, extra: &[&str]) -> Server {
    let server = Server::start(model, &[&["--device", device, "--parallel", parallel][..], extra].concat());
    let (_, page) = server.get("/metrics");
    assert_eq!(metric(&page, "hrx_sequences"), parallel.parse::<f64>().unwrap(), "{page}");
    server
}

/// A streamed answer read an event at a time.
struct Events {
    reader: BufReader<TcpStream>,
}

impl Events {
    /// Sends `body` (a streamed chat request) and reads the response head, which must be 200.
    fn open(addr: &str, body: &str) -> Events {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        s.write_all(&chat_request(body)).unwrap();
        let mut reader = BufReader::new(s);
        let mut status = String::new();
        reader.read_line(&mut status).unwrap();
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if line.trim_end().is_empty() {
                break;
            }
        }
        Events { reader }
    }

    /// The next event's data, None once `[DONE]` has come.
    fn next(&mut self) -> Option<JsonValue> {
        loop {
            let mut line = String::new();
            let n = self.reader.read_line(&mut line).unwrap();
            assert!(n > 0, "the stream ended without [DONE]");
            let Some(data) = line.trim_end().strip_prefix("data: ") else { continue };
            return (data != "[DONE]").then(|| json(data));
        }
    }

    /// Events up to the first that carries text.
    fn first_text(&mut self) -> String {
        loop {
            let event = self.next().expect("an event with text before [DONE]");
            if let Some(text) = content(&event).filter(|t| !t.is_empty()) {
                return text;
            }
        }
    }

    /// The rest of the stream: its text, its finish reason and its usage's completion tokens
    /// (the request asks for usage).
    fn rest(&mut self) -> (String, String, f64) {
        let (mut text, mut finish, mut tokens) = (String::new(), String::new(), -1.0);
        while let Some(event) = self.next() {
            let choices = at(&event, &["choices"]).get::<Vec<JsonValue>>().unwrap().clone();
            if let Some(choice) = choices.first() {
                text += &content(&event).unwrap_or_default();
                if let JsonValue::String(reason) = at(choice, &["finish_reason"]) {
                    finish = reason.clone();
                }
            } else {
                tokens = number(&event, &["usage", "completion_tokens"]);
            }
        }
        (text, finish, tokens)
    }
}

/// A chunk's text, if it has any.
fn content(event: &JsonValue) -> Option<String> {
    let choices = at(event, &["choices"]).get::<Vec<JsonValue>>()?;
    match at(choices.first()?, &["delta"]).get::<std::collections::HashMap<String, JsonValue>>()?.get("content") {
        Some(JsonValue::String(text)) => Some(text.clone()),
        _ => None,
    }
}

/// A streamed request of `max_tokens`, with usage.
fn streamed(text: &str, max_tokens: usize) -> String {
    format!(
        r#"{{"messages":[{{"role":"user","content":"{text}"}}],"max_tokens":{max_tokens},"stream":true,"stream_options":{{"include_usage":true}}}}"#
    )
}

/// Server flags for answers left unread: long enough never to end while the test runs, never
/// cut off (--send-timeout past --queue-wait), so a request with no free sequence gets the 503
/// of --queue-wait.
const HELD_ANSWERS: [&str; 9] =
    ["--ctx", "16384", "--max-tokens-cap", "100000", "--ignore-eos", "--queue-wait", "30", "--send-timeout", "600"];

#[test]
fn a_second_client_streams_while_the_first_answer_is_under_way() {
    // The first client asks for a long answer and reads only its first token: its answer cannot
    // end before it reads on (its events fill the socket buffers long before the end, and the
    // server holds its sequence then). Under --parallel 2 the second client's answer streams
    // token by token and ends meanwhile; one at a time it would wait behind the first, which
    // never ends (nor is it cut off: --send-timeout is past --queue-wait), and get a 503 at
    // --queue-wait. Then the first reads on to its own end.
    let Some(model) = tiny() else { return };
    let server = server(&model, "2", &HELD_ANSWERS);
    let mut first = Events::open(&server.addr, &streamed("a long answer", 12000));
    assert!(!first.first_text().is_empty());
    let mut second = Events::open(&server.addr, &streamed("a short one", 5));
    let mut texts = 0;
    let mut order = Vec::new();
    while let Some(event) = second.next() {
        if content(&event).is_some_and(|t| !t.is_empty()) {
            texts += 1;
        }
        order.push(event);
    }
    assert!(texts >= 2, "the second answer came as several events of text: {order:?}");
    let usage = order.last().expect("a usage chunk");
    assert_eq!(number(usage, &["usage", "completion_tokens"]), 5.0, "the second request's own max_tokens");
    // The second is done and gave its sequence back; the first still has its own.
    await_metric(&server, "hrx_sequences_in_use", 1.0);
    let (text, finish, tokens) = first.rest();
    assert!(!text.is_empty());
    assert_eq!((finish.as_str(), tokens), ("length", 12000.0), "the first request's own max_tokens");
    await_metric(&server, "hrx_sequences_in_use", 0.0);
}

/// A chat body (greedy unless `extra` says) of a prompt and `extra` fields.
fn chat(text: &str, extra: &str) -> String {
    format!(r#"{{"messages":[{{"role":"user","content":"{text}"}}]{extra}}}"#)
}

/// Each request's answer: its choice and its usage (what does not change from run to run).
fn answers(addr: &str, bodies: &[String], at_once: bool) -> Vec<(JsonValue, JsonValue)> {
    let ask = |addr: String, body: String| {
        let (status, answer) = post(&addr, "/v1/chat/completions", &body);
        assert_eq!(status, 200, "{body}: {answer}");
        let answer = json(&answer);
        (at(&answer, &["choices", "0"]).clone(), at(&answer, &["usage"]).clone())
    };
    if !at_once {
        return bodies.iter().map(|b| ask(addr.to_owned(), b.clone())).collect();
    }
    let asking: Vec<_> = bodies
        .iter()
        .map(|b| {
            let (addr, body) = (addr.to_owned(), b.clone());
            std::thread::spawn(move || ask(addr, body))
        })
        .collect();
    asking.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn answers_together_equal_answers_one_at_a_time_each_with_its_own_settings() {
    together_equals_one_at_a_time("cpu");
}

#[test]
fn answers_together_equal_answers_one_at_a_time_on_vulkan() {
    if vulkan_common::device().is_none() {
        return;
    }
    // The device the Vulkan tests run on: HRX_DEVICE's index, else the first (lavapipe in CI,
    // which `auto` would pass over for the CPU backend).
    let index = std::env::var("HRX_DEVICE").ok().filter(|v| v.parse::<usize>().is_ok()).unwrap_or_else(|| "0".into());
    together_equals_one_at_a_time(&index);
}

fn together_equals_one_at_a_time(device: &str) {
    // The same requests, each with settings of its own (lengths, a sampled one with a seed, a
    // stop string, logprobs, a JSON schema, an image), sent at once to --parallel 3 (fewer
    // than the requests: some wait for a free sequence) and one after the other to
    // --parallel 1: the same answers, and each as its own settings say.
    let Some(model) = tiny() else { return };
    let image = common::oracle().unwrap().join("images/tie-400x272.png");
    let url = format!(
        "data:image/png;base64,{}",
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, std::fs::read(image).unwrap())
    );
    let bodies = [
        chat("one", r#","max_tokens":3"#),
        chat("two", r#","max_tokens":40"#),
        chat("three", r#","max_tokens":17,"temperature":1.0,"top_p":1.0,"seed":7"#),
        chat("four", r#","max_tokens":25,"logprobs":true,"top_logprobs":2"#),
        chat("five", r#","max_tokens":30,"stop":["a"]"#),
        chat("six", r#","max_tokens":24,"response_format":{"type":"json_object"}"#),
        format!(
            r#"{{"messages":[{{"role":"user","content":[{{"type":"image_url","image_url":{{"url":"{url}"}}}},{{"type":"text","text":"seven"}}]}}],"max_tokens":9}}"#
        ),
    ];
    let args = ["--ctx", "2048", "--ignore-eos"];
    let one = answers(&server_on(device, &model, "1", &args).addr, &bodies, false);
    let together = answers(&server_on(device, &model, "3", &args).addr, &bodies, true);
    for (i, (a, b)) in one.iter().zip(&together).enumerate() {
        assert_eq!(a, b, "request {i}: --parallel 3 and --parallel 1 on --device {device}");
    }
    let tokens: Vec<f64> = together.iter().map(|(_, usage)| number(usage, &["completion_tokens"])).collect();
    assert_eq!(tokens[..4], [3.0, 40.0, 17.0, 25.0], "each request's own max_tokens: {together:?}");
    assert_eq!(tokens[6], 9.0);
    let text = |i: usize| string(&together[i].0, &["message", "content"]);
    let finish = |i: usize| string(&together[i].0, &["finish_reason"]);
    assert!(!text(4).contains('a') && finish(4) == "stop" && tokens[4] < 30.0, "the stop string: {:?}", together[4]);
    let has_logprobs = |i: usize| !matches!(at(&together[i].0, &["logprobs"]), JsonValue::Null);
    assert!(has_logprobs(3) && (0..7).filter(|&i| i != 3).all(|i| !has_logprobs(i)), "logprobs only where asked");
    assert!(text(5).parse::<JsonValue>().is_ok(), "a JSON answer for the one that asked: {}", text(5));
    assert!(text(5).starts_with('{') && text(1).parse::<JsonValue>().is_err(), "{} / {}", text(5), text(1));
    assert_ne!(text(1), text(2), "different prompts, different answers");
}

#[test]
fn a_client_that_hangs_up_mid_stream_frees_its_sequence() {
    // Both sequences of --parallel 2 stream long answers; the first client hangs up after its
    // first token. Its request ends (499 in the log) and its sequence is free: a third request
    // is answered while the second still streams. Were it not freed, the third would wait
    // behind two answers that cannot end (nobody reads them, and --send-timeout is past
    // --queue-wait) and get a 503 at --queue-wait.
    let Some(model) = tiny() else { return };
    let server = server(&model, "2", &HELD_ANSWERS);
    let mut first = Events::open(&server.addr, &streamed("hang up", 12000));
    first.first_text();
    let mut second = Events::open(&server.addr, &streamed("go on", 12000));
    second.first_text();
    await_metric(&server, "hrx_sequences_in_use", 2.0);
    drop(first);
    let (gone, made) = server.hung_up();
    assert!(made < 12000, "its generation stopped short of its max_tokens: {gone}");
    await_metric(&server, "hrx_sequences_in_use", 1.0);
    let (status, answer) = server.post("/v1/chat/completions", &chat("next", r#","max_tokens":4"#));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(number(&json(&answer), &["usage", "completion_tokens"]), 4.0);
    let (_, page) = server.get("/metrics");
    assert_eq!(metric(&page, "hrx_chat_requests_total{outcome=\"client_gone\"}"), 1.0, "{page}");
    assert_eq!(metric(&page, "hrx_sequences_in_use"), 1.0, "the second still streams: {page}");
    // The second reads on to its end.
    let (_, finish, tokens) = second.rest();
    assert_eq!((finish.as_str(), tokens), ("length", 12000.0));
}

#[test]
fn bad_values_of_parallel_are_refused_naming_the_flag() {
    let Some(model) = tiny() else { return };
    let (m, mm) = (model.join("qwen3vl-tiny-F16.gguf"), model.join("mmproj-qwen3vl-tiny-F16.gguf"));
    let refused = |value: &str, extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_hrx"))
            .args(["serve", "--port", "0", "--device", "cpu", "--parallel", value, "-m"])
            .arg(&m)
            .arg("--mmproj")
            .arg(&mm)
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "--parallel {value} {extra:?} is a usage error");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    for value in ["0", "257"] {
        let err = refused(value, &[]);
        assert!(err.contains("--parallel must be in 1..=256"), "{value}: {err}");
    }
    let err = refused("two", &[]);
    assert!(err.contains("--parallel") && err.contains("\"two\""), "{err}");
    // 200 KV caches of a million slots: past any memory.
    let err = refused("200", &["--ctx", "1048576"]);
    assert!(err.contains("--parallel 200: 200 KV caches of --ctx 1048576 slots take"), "{err}");
    assert!(err.contains("at most"), "{err}");
}
