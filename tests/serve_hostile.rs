//! `hrx serve` against hostile clients (issue 54): a body trickled to hold a connection, a
//! prompt whose counting would be the expensive work, bodies sent where no body is taken.

mod common;

use common::server::Server;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The status line's code of what `s` answers, waiting up to `wait`.
fn status_of(s: &mut TcpStream, wait: Duration) -> Option<u16> {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 1024];
    let n = s.read(&mut buf).ok()?;
    std::str::from_utf8(&buf[..n]).ok()?.get(9..12)?.parse().ok()
}

/// Connections that send a whole head and then trickle their body, as many as
/// --max-connections: /health is answered at once (the trickler that has waited longest is
/// closed to make room) and a chat request too; a trickled body gets 408 at its deadline
/// (--head-timeout after its head plus its length at --min-body-rate), however steadily it
/// trickles.
#[test]
fn a_trickled_body_neither_holds_its_connection_nor_locks_others_out() {
    let Some(oracle) = common::oracle() else { return };
    let server = Server::start(
        &oracle.join("models/tiny"),
        &["--max-connections", "8", "--head-timeout", "2", "--min-body-rate", "4"],
    );
    let head = b"POST /v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 4000\r\n\r\n{";
    let mut tricklers: Vec<TcpStream> = (0..8)
        .map(|_| {
            let mut s = TcpStream::connect(&server.addr).unwrap();
            s.write_all(head).unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    for s in &mut tricklers {
        let _ = s.write_all(b" ");
    }
    for _ in 0..3 {
        let t = Instant::now();
        let (status, body) = server.get("/health");
        assert_eq!(status, 200, "{body}");
        assert!(t.elapsed() < Duration::from_millis(500), "/health took {:?}", t.elapsed());
    }
    let (status, body) =
        server.post("/v1/chat/completions", r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":1}"#);
    assert_eq!(status, 200, "{body}");
    assert!(server.log_line("without a whole request, to make room", Duration::from_secs(5)).is_some());

    // One trickler alone: 4,000 bytes at 4 KiB a second is about 1 s after the head's 2 s.
    let mut slow = TcpStream::connect(&server.addr).unwrap();
    slow.write_all(head).unwrap();
    let t = Instant::now();
    let mut answered = None;
    while t.elapsed() < Duration::from_secs(8) {
        let _ = slow.write_all(b" ");
        if let Some(status) = status_of(&mut slow, Duration::from_millis(250)) {
            answered = Some(status);
            break;
        }
    }
    assert_eq!(answered, Some(408), "after {:?}", t.elapsed());
    let took = t.elapsed();
    assert!(took > Duration::from_millis(2500) && took < Duration::from_millis(5000), "{took:?}");
}

/// A body sent where none is taken is not read: 405 for a method the path does not take, 413
/// for a body on a GET, 404 on an unknown path, each answered before any of the body is sent.
#[test]
fn a_body_where_none_is_taken_is_refused_unread() {
    let Some(oracle) = common::oracle() else { return };
    let server = Server::start(&oracle.join("models/tiny"), &[]);
    for (head, want) in [
        ("POST /v1/models HTTP/1.1\r\nContent-Length: 50000000\r\n\r\n", 405),
        ("GET /health HTTP/1.1\r\nContent-Length: 60000000\r\n\r\n", 413),
        ("POST /nowhere HTTP/1.1\r\nContent-Length: 60000000\r\n\r\n", 404),
        ("PUT /v1/chat/completions HTTP/1.1\r\nContent-Length: 60000000\r\n\r\n", 405),
    ] {
        let mut s = TcpStream::connect(&server.addr).unwrap();
        s.write_all(head.as_bytes()).unwrap();
        let t = Instant::now();
        assert_eq!(status_of(&mut s, Duration::from_secs(5)), Some(want), "{head:?}");
        assert!(t.elapsed() < Duration::from_secs(1), "{head:?}: {:?}", t.elapsed());
    }
    // No body: answered as ever.
    assert_eq!(server.get("/health").0, 200);
}

/// A prompt whose text alone is longer than the context is refused at once, on its own
/// connection's thread (a chat beside it is answered meanwhile), and one with a run of letters
/// longer than hrx tokenizes in a request likewise, naming it.
#[test]
fn a_prompt_too_long_to_count_is_refused_at_once_without_holding_others() {
    let Some(oracle) = common::oracle() else { return };
    let server = Server::start(&oracle.join("models/tiny"), &["--memory-budget", "512"]);
    let huge = format!(r#"{{"messages":[{{"role":"user","content":"{}"}}],"max_tokens":1}}"#, "a".repeat(30_000_000));
    let addr = server.addr.clone();
    let refused = std::thread::spawn(move || {
        let t = Instant::now();
        let (status, body) = common::server::post(&addr, "/v1/chat/completions", &huge);
        (status, body, t.elapsed())
    });
    let t = Instant::now();
    let (status, body) =
        server.post("/v1/chat/completions", r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":2}"#);
    assert_eq!(status, 200, "{body}");
    assert!(t.elapsed() < Duration::from_secs(10), "a chat beside it waited {:?}", t.elapsed());
    let (status, body, took) = refused.join().unwrap();
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("by the bytes of the messages' text alone"), "{body}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    // A run of letters within the context's bytes but past the bound.
    let run = format!(r#"{{"messages":[{{"role":"user","content":"{}"}}],"max_tokens":1}}"#, "a".repeat(100_000));
    let (status, body) = server.post("/v1/chat/completions", &run);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("a run of 100000 bytes without a break"), "{body}");
}

/// With every connection at work (chats generating or waiting for the model), a new one may
/// still ask for /health or /metrics (a spare connection), and is refused anything else.
#[test]
fn health_is_answered_when_every_connection_is_at_work() {
    let Some(oracle) = common::oracle() else { return };
    let server = Server::start(
        &oracle.join("models/tiny"),
        &["--max-connections", "2", "--parallel", "1", "--ignore-eos", "--queue-wait", "30"],
    );
    let long = r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":2000}"#;
    let busy: Vec<_> = (0..2)
        .map(|_| {
            let addr = server.addr.clone();
            std::thread::spawn(move || common::server::post(&addr, "/v1/chat/completions", long))
        })
        .collect();
    // Both chats in: one generating (some 3 s of tokens), one waiting for the model.
    std::thread::sleep(Duration::from_millis(300));
    for path in ["/health", "/metrics"] {
        let t = Instant::now();
        let (status, body) = server.get(path);
        assert_eq!(status, 200, "{path}: {body}");
        assert!(t.elapsed() < Duration::from_millis(500), "{path} took {:?}", t.elapsed());
    }
    let (status, body) = server.post("/v1/chat/completions", long);
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("connections open"), "{body}");
    for b in busy {
        assert_eq!(b.join().unwrap().0, 200);
    }
}
