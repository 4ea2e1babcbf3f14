//! `hrx serve` on the oracle's tiny model for the tests: a server started on a free port and
//! killed when dropped, requests over loopback, and readers of its JSON and metrics.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use tinyjson::JsonValue;

/// A running server, killed when dropped, and what it has written to stderr (its log).
pub struct Server {
    child: Child,
    pub addr: String,
    pub log: Arc<Mutex<String>>,
}

impl Server {
    pub fn start(model: &Path, extra: &[&str]) -> Server {
        Server::start_with(model, extra, &[])
    }

    /// As `start`, with `env` set for the server.
    pub fn start_with(model: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let m = model.join("qwen3vl-tiny-F16.gguf");
        let mm = model.join("mmproj-qwen3vl-tiny-F16.gguf");
        let mut child = Command::new(env!("CARGO_BIN_EXE_hrx"))
            .args(["serve", "-m", m.to_str().unwrap(), "--mmproj", mm.to_str().unwrap(), "--port", "0"])
            .args(extra)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start hrx serve");
        let stdout = child.stdout.take().unwrap();
        let (stderr, log) = (child.stderr.take().unwrap(), Arc::new(Mutex::new(String::new())));
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(Duration::from_secs(120)).unwrap_or_default();
        // Killed on drop, also when the checks below fail.
        let mut server = Server { child, addr: String::new(), log };
        let addr = line.split("http://").nth(1).and_then(|r| r.split_whitespace().next()).map(str::to_owned);
        server.addr = addr.unwrap_or_else(|| panic!("no address in {line:?}"));
        assert!(server.addr.starts_with("127.0.0.1:"), "{}", server.addr);
        server
    }

    pub fn raw_response(&self, request: &[u8]) -> String {
        raw_response(&self.addr, request)
    }

    pub fn raw(&self, request: &[u8]) -> (u16, String) {
        raw(&self.addr, request)
    }

    /// The first log line containing `text`, waiting up to `wait` for it.
    pub fn log_line(&self, text: &str, wait: Duration) -> Option<String> {
        let until = Instant::now() + wait;
        loop {
            if let Some(line) = self.log.lock().unwrap().lines().find(|l| l.contains(text)) {
                return Some(line.to_owned());
            }
            if Instant::now() > until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The log line of a request whose client hung up (a 499), waiting up to a minute for it,
    /// and the tokens it had generated then (the line's `after N tokens`).
    pub fn hung_up(&self) -> (String, usize) {
        let line = self.log_line(" 499 ", Duration::from_secs(60));
        let line = line.unwrap_or_else(|| panic!("no 499 in the log:\n{}", self.log.lock().unwrap()));
        let tokens = line
            .split("after ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        (line, tokens)
    }

    pub fn post(&self, path: &str, body: &str) -> (u16, String) {
        post(&self.addr, path, body)
    }

    pub fn get(&self, path: &str) -> (u16, String) {
        self.raw(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
    }
}

/// Sends raw bytes (from another thread, so an early answer such as a 413 is read while the
/// body is still going out); returns the status and the body. The response is read until the
/// server closes: requests that it answers whole say `Connection: close` (it keeps HTTP/1.1
/// connections otherwise).
pub fn raw(addr: &str, request: &[u8]) -> (u16, String) {
    let text = raw_response(addr, request);
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no status in {text:?}"));
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

/// The whole response to raw bytes sent as `raw` sends them.
pub fn raw_response(addr: &str, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(120))).unwrap();
    let mut writer = s.try_clone().unwrap();
    let request = request.to_vec();
    // The server may close before taking the whole body: a failed write is fine.
    let sending = std::thread::spawn(move || {
        let _ = writer.write_all(&request);
    });
    let mut response = Vec::new();
    let _ = s.read_to_end(&mut response);
    let _ = sending.join();
    String::from_utf8(response).expect("UTF-8 response")
}

/// A chat request's bytes.
pub fn chat_request(body: &str) -> Vec<u8> {
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

pub fn post(addr: &str, path: &str, body: &str) -> (u16, String) {
    raw(
        addr,
        format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn json(text: &str) -> JsonValue {
    text.parse().unwrap_or_else(|e| panic!("{text:?}: {e:?}"))
}

/// `v.a.b.c` by keys and array indices.
pub fn at<'a>(v: &'a JsonValue, path: &[&str]) -> &'a JsonValue {
    path.iter().fold(v, |v, key| match v {
        JsonValue::Array(items) => &items[key.parse::<usize>().unwrap()],
        _ => v
            .get::<HashMap<String, JsonValue>>()
            .and_then(|o| o.get(*key))
            .unwrap_or_else(|| panic!("no {key} in {v:?}")),
    })
}

pub fn string(v: &JsonValue, path: &[&str]) -> String {
    at(v, path).get::<String>().unwrap_or_else(|| panic!("{path:?} is not a string")).clone()
}

pub fn number(v: &JsonValue, path: &[&str]) -> f64 {
    *at(v, path).get::<f64>().unwrap_or_else(|| panic!("{path:?} is not a number"))
}

/// The value of metric `name` (with its labels) in a /metrics page.
pub fn metric(page: &str, name: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {page}"))
}

/// Waits (up to a minute) until `/metrics` shows `name` at `value`.
pub fn await_metric(server: &Server, name: &str, value: f64) {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, page) = server.get("/metrics");
        if metric(&page, name) == value {
            return;
        }
        assert!(Instant::now() < until, "{name} never became {value}:\n{page}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
