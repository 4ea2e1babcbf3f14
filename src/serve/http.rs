//! Just enough HTTP/1.1 for a local API: persistent connections (a client may send its next
//! request on the connection of the last, as HTTP/1.1 clients and browsers do; HTTP/1.0 ones
//! with `Connection: keep-alive`), heads parsed by httparse within size and time limits, bodies
//! by Content-Length only. A connection waiting for its next request is held to the same head
//! deadline as a new one, from the end of the last answer.

use crate::runtime::RuntimeError;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

/// The most a request head (request line and headers) may take.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
pub const MAX_HEADERS: usize = 64;

#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_body: usize,
    /// The longest a single read or write may wait.
    pub io_timeout: Duration,
    /// The longest one event of a streamed answer may take to be written, all of it: a client
    /// that stops reading fills the (small) socket buffers, and is cut off that long after.
    pub send_timeout: Duration,
    /// The longest the request head may take to arrive, from the connection's accept: bytes
    /// trickling in do not extend it.
    pub head_timeout: Duration,
    /// The slowest a request body may arrive, in bytes a second: its deadline is
    /// `head_timeout` from its head, plus its length at this rate (a trickle does not extend it).
    pub min_body_rate: u64,
    /// Connections open at once; past it the one that has waited longest without a whole
    /// request (its head or its body still arriving, or idle between requests) is closed to
    /// make room, and with none such a new one may only ask for /health or /metrics
    /// (`SPARE_CONNECTIONS` of them at once), else it is refused.
    pub max_open: usize,
    /// Chat requests waiting for the model at most (past it, 503 with Retry-After).
    pub queue_len: usize,
    /// The longest a chat request waits for the model (then 503 with Retry-After).
    pub queue_wait: Duration,
    /// Bytes all chat requests in flight may hold together: their bodies, from the head on,
    /// and while they run their images decoded (past it, 503 with Retry-After before the body
    /// is read).
    pub memory_budget: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body: 64 << 20,
            io_timeout: Duration::from_secs(15),
            send_timeout: Duration::from_secs(15),
            head_timeout: Duration::from_secs(10),
            // A 64 MiB body over a link of half a megabit a second still arrives.
            min_body_rate: 64 << 10,
            max_open: 1024,
            queue_len: 64,
            queue_wait: Duration::from_secs(60),
            memory_budget: 2 << 30,
        }
    }
}

#[derive(Debug)]
pub struct Request {
    pub method: String,
    /// The path without its query string.
    pub path: String,
    /// The `Origin` header of a browser's request, if any.
    pub origin: Option<String>,
    /// Whether the client keeps the connection for another request (HTTP/1.1 unless it sends
    /// `Connection: close`; HTTP/1.0 only with `Connection: keep-alive`).
    pub keep_alive: bool,
    pub body: Vec<u8>,
}

/// A request that gets an error response: its status and a message for the client.
#[derive(Clone, Debug, PartialEq)]
pub struct HttpError {
    pub status: u16,
    pub message: String,
    /// Seconds after which to try again (a `Retry-After` header), for refusals under load.
    pub retry_after: Option<u32>,
    /// The method the path takes, for a 405's `Allow` header.
    pub allow: Option<&'static str>,
}

impl HttpError {
    pub fn new(status: u16, message: impl Into<String>) -> HttpError {
        HttpError { status, message: message.into(), retry_after: None, allow: None }
    }

    /// A bad image or prompt is the client's (400); a lost device a 503 to try again after
    /// (the model is being loaded again); anything else is the server's (500).
    pub fn runtime(e: RuntimeError) -> HttpError {
        if crate::runtime::recover::is_device_lost(&e) {
            return HttpError::new(503, format!("{e}; the model is being loaded again, try again")).with_retry_after(2);
        }
        let status = match e {
            // The client's own input: its images and the length of its conversation.
            RuntimeError::Usage(_) | RuntimeError::Image(_) | RuntimeError::ContextFull { .. } => 400,
            _ => 500,
        };
        HttpError::new(status, e.to_string())
    }

    pub fn with_retry_after(self, seconds: u32) -> HttpError {
        HttpError { retry_after: Some(seconds), ..self }
    }
}

pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

/// What a request's head says, for deciding whether to take its body.
pub struct Head<'a> {
    pub method: &'a str,
    pub path: &'a str,
    /// The body's length (Content-Length; 0 without one).
    pub length: usize,
}

/// Reads one request from `stream` (whose timeouts this sets), the wait for it starting at
/// `since` (the accept, or the end of the last answer on the connection); `pending` holds what
/// was read past the last request (a pipelined next one) and keeps what is read past this one.
/// Once the head is in, `admit` decides whether to read the body (an error is the answer
/// instead); what it gives back comes with the request. With `idle_ends`, a connection that
/// ends or goes quiet before a byte of a request is no error: None (a kept connection the client
/// is done with).
pub fn read_request<G>(
    stream: &mut TcpStream,
    pending: &mut Vec<u8>,
    limits: &Limits,
    since: Instant,
    idle_ends: bool,
    admit: impl FnOnce(&Head) -> Result<G, HttpError>,
) -> Result<Option<(Request, G)>, HttpError> {
    let head_deadline = since + limits.head_timeout;
    stream.set_write_timeout(Some(limits.io_timeout)).map_err(internal)?;
    let mut buf = std::mem::take(pending);
    buf.reserve(4096);
    let too_big = || HttpError::new(431, format!("the request head is over {MAX_HEAD_BYTES} bytes"));
    let (head_len, method, path, origin, length, expect_continue, keep_alive) = loop {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf) {
            Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD_BYTES => return Err(too_big()),
            Ok(httparse::Status::Partial) => {}
            Ok(httparse::Status::Complete(n)) if n > MAX_HEAD_BYTES => return Err(too_big()),
            Ok(httparse::Status::Complete(n)) => {
                let method = req.method.unwrap_or_default().to_owned();
                let path = req.path.unwrap_or_default();
                let path = path.split_once('?').map_or(path, |(p, _)| p).to_owned();
                let (length, expect_continue) = body_headers(req.headers, &method, limits)?;
                let header = |name: &str| {
                    req.headers
                        .iter()
                        .find(|h| h.name.eq_ignore_ascii_case(name))
                        .and_then(|h| std::str::from_utf8(h.value).ok())
                        .map(|v| v.trim().to_owned())
                };
                let origin = header("origin");
                let keep_alive = keeps_alive(req.version, header("connection").as_deref());
                break (n, method, path, origin, length, expect_continue, keep_alive);
            }
            Err(httparse::Error::TooManyHeaders) => {
                return Err(HttpError::new(431, format!("the request has over {MAX_HEADERS} headers")))
            }
            Err(e) => return Err(HttpError::new(400, format!("malformed HTTP request: {e}"))),
        }
        match read_some(stream, &mut buf, head_deadline, limits.io_timeout) {
            Err(_) if idle_ends && buf.is_empty() => return Ok(None),
            read => read?,
        }
    };
    let admitted = admit(&Head { method: &method, path: &path, length })?;
    if expect_continue && buf.len() == head_len {
        stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").map_err(internal)?;
    }
    let deadline = Instant::now() + body_time(length, limits);
    let mut body = buf.split_off(head_len);
    // The whole body at once (its bytes are within the budget): growing it by doubling held
    // up to 1.5 times its length while it moved, past the budget.
    body.reserve_exact(length.saturating_sub(body.len()));
    while body.len() < length {
        read_some(stream, &mut body, deadline, limits.io_timeout)?;
    }
    // What came past the body is the start of the next request.
    *pending = body.split_off(length);
    Ok(Some((Request { method, path, origin, keep_alive, body }, admitted)))
}

/// The time a body of `length` bytes has to arrive after its head.
fn body_time(length: usize, limits: &Limits) -> Duration {
    limits.head_timeout + Duration::from_secs_f64(length as f64 / limits.min_body_rate.max(1) as f64)
}

/// Whether a client keeps its connection: HTTP/1.1's default is to, HTTP/1.0's not to; a
/// `Connection` header's `close` or `keep-alive` token says otherwise.
fn keeps_alive(version: Option<u8>, connection: Option<&str>) -> bool {
    let has = |token: &str| connection.is_some_and(|c| c.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)));
    if has("close") {
        return false;
    }
    version == Some(1) || has("keep-alive")
}

/// The body's length from the headers, and whether the client waits for `100 Continue`.
fn body_headers(headers: &[httparse::Header], method: &str, limits: &Limits) -> Result<(usize, bool), HttpError> {
    let mut length: Option<usize> = None;
    let mut expect_continue = false;
    for h in headers {
        let value = std::str::from_utf8(h.value).unwrap_or("").trim();
        if h.name.eq_ignore_ascii_case("content-length") {
            let n = (!value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()))
                .then(|| value.parse::<u64>().ok())
                .flatten()
                .ok_or_else(|| HttpError::new(400, format!("bad Content-Length {value:?}")))?;
            let n = usize::try_from(n).ok().filter(|&n| n <= limits.max_body).ok_or_else(|| {
                HttpError::new(413, format!("the request body is {n} bytes; the limit is {} bytes", limits.max_body))
            })?;
            if length.is_some_and(|l| l != n) {
                return Err(HttpError::new(400, "conflicting Content-Length headers"));
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(HttpError::new(501, "Transfer-Encoding is not supported: send the body with a Content-Length"));
        } else if h.name.eq_ignore_ascii_case("expect") {
            expect_continue = value.eq_ignore_ascii_case("100-continue");
        }
    }
    match length {
        None if method == "POST" || method == "PUT" => {
            Err(HttpError::new(411, "a request body needs a Content-Length header"))
        }
        length => Ok((length.unwrap_or(0), expect_continue)),
    }
}

/// Appends what the next read brings, waiting at most `io_timeout` and never past
/// `deadline`; the end of the stream or a timeout is an error.
fn read_some(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    deadline: Instant,
    io_timeout: Duration,
) -> Result<(), HttpError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(HttpError::new(408, "the request took too long to arrive"));
    }
    stream.set_read_timeout(Some(left.min(io_timeout))).map_err(internal)?;
    let mut chunk = [0u8; 16 * 1024];
    match stream.read(&mut chunk) {
        Ok(0) => Err(HttpError::new(400, "the connection closed in the middle of the request")),
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            Ok(())
        }
        Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
            Err(HttpError::new(408, "the request took too long to arrive"))
        }
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
        Err(e) => Err(HttpError::new(400, format!("reading the request: {e}"))),
    }
}

fn internal(e: io::Error) -> HttpError {
    HttpError::new(500, e.to_string())
}

/// Writes a whole response, saying whether the connection stays open for another request.
pub fn write_response(
    stream: &mut impl Write,
    status: u16,
    content_type: &str,
    extra_headers: &str,
    keep_alive: bool,
    body: &[u8],
) -> io::Result<()> {
    let connection = if keep_alive { "keep-alive" } else { "close" };
    let head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{extra_headers}Connection: {connection}\r\n\r\n",
        reason(status),
        body.len()
    );
    let mut all = head.into_bytes();
    all.extend_from_slice(body);
    stream.write_all(&all)?;
    stream.flush()
}

/// Ends the connection so the client reads the response even when it was still sending (as
/// with a refused oversized body): stop writing, then drain its input briefly.
pub fn close_gently(stream: &mut TcpStream) {
    let _ = stream.shutdown(Shutdown::Write);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    let stop = Instant::now() + Duration::from_secs(1);
    let mut sink = [0u8; 16 * 1024];
    while Instant::now() < stop {
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
}

/// Whether the client has closed the connection (a read would find its end): looked at
/// without waiting and without taking anything it sent. A request is answered only once it
/// has all arrived, so whatever comes after it is the client hanging up.
pub fn client_closed(stream: &TcpStream) -> bool {
    if stream.set_nonblocking(true).is_err() {
        return false;
    }
    let mut byte = [0u8; 1];
    let closed = match stream.peek(&mut byte) {
        Ok(n) => n == 0,
        Err(e) => !matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted),
    };
    let _ = stream.set_nonblocking(false);
    closed
}

/// Looks with `client_closed` at most every 50 ms, for checks made once per generated token.
pub struct HangUp {
    next: Instant,
}

impl Default for HangUp {
    fn default() -> HangUp {
        HangUp { next: Instant::now() }
    }
}

impl HangUp {
    const EVERY: Duration = Duration::from_millis(50);

    /// Whether the client of `stream` is gone (looked at if 50 ms have passed since the last look).
    pub fn gone(&mut self, stream: &TcpStream) -> bool {
        let now = Instant::now();
        if now < self.next {
            return false;
        }
        self.next = now + Self::EVERY;
        client_closed(stream)
    }
}

/// The send buffer of an event stream: a client that stops reading leaves its events there
/// and in its own receive buffer (about 130 KB on Linux), and only then does a write wait. Left
/// to itself Linux grows a send buffer to 4 MiB, some 28,000 tokens of events: a long answer
/// fitted, and was generated to the end for nobody. Events are small and come at the model's
/// pace, so 16 KiB (32 once the kernel doubles it for its bookkeeping) never slows a reader.
const EVENT_SEND_BUFFER: usize = 16 << 10;

/// Why an event stream stopped sending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamFailure {
    /// A write failed: the client has gone.
    Gone,
    /// An event was not all written within the send timeout: the client stopped reading.
    Stalled,
}

/// A server-sent events response: the head goes out with the first event; the first failed
/// write (a client that went away, or stopped reading) silences the rest.
pub struct EventStream<'a> {
    stream: &'a mut TcpStream,
    headers: &'a str,
    send_timeout: Duration,
    started: bool,
    failure: Option<StreamFailure>,
}

impl<'a> EventStream<'a> {
    /// `headers`: more header lines of the response (each ending in CRLF); `send_timeout`: the
    /// longest writing one event may take.
    pub fn new(stream: &'a mut TcpStream, headers: &'a str, send_timeout: Duration) -> Self {
        // Where it cannot be set the stream still works: a stall is only noticed later.
        if let Err(e) = socket2::SockRef::from(&*stream).set_send_buffer_size(EVENT_SEND_BUFFER) {
            log::debug!("an event stream keeps its send buffer: {e}");
        }
        EventStream { stream, headers, send_timeout, started: false, failure: None }
    }

    pub fn started(&self) -> bool {
        self.started
    }

    /// Why the stream stopped sending, if it did.
    pub fn failure(&self) -> Option<StreamFailure> {
        self.failure
    }

    /// The connection, to look for a client that hung up (`HangUp`).
    pub fn stream(&self) -> &TcpStream {
        self.stream
    }

    /// Sends `data: DATA` and a blank line, within the send timeout.
    pub fn send(&mut self, data: &str) {
        if self.failure.is_some() {
            return;
        }
        let mut bytes = Vec::with_capacity(data.len() + 160);
        if !self.started {
            self.started = true;
            bytes.extend_from_slice(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n",
            );
            bytes.extend_from_slice(self.headers.as_bytes());
            bytes.extend_from_slice(b"Connection: close\r\n\r\n");
        }
        bytes.extend_from_slice(b"data: ");
        bytes.extend_from_slice(data.as_bytes());
        bytes.extend_from_slice(b"\n\n");
        self.failure = match write_within(self.stream, &bytes, Instant::now() + self.send_timeout) {
            Ok(()) => None,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                Some(StreamFailure::Stalled)
            }
            Err(_) => Some(StreamFailure::Gone),
        };
    }
}

/// Writes all of `bytes` by `deadline`: a socket's write timeout bounds each write, and a
/// client taking a few bytes now and then would extend it for ever.
fn write_within(stream: &mut TcpStream, mut bytes: &[u8], deadline: Instant) -> io::Result<()> {
    while !bytes.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        stream.set_write_timeout(Some(left))?;
        match stream.write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// Reads a request from `server` as the server does (no admission), `pending` as left.
    fn next(
        server: &mut TcpStream,
        pending: &mut Vec<u8>,
        limits: &Limits,
        idle_ends: bool,
    ) -> Result<Option<Request>, HttpError> {
        read_request(server, pending, limits, Instant::now(), idle_ends, |_| Ok(())).map(|r| r.map(|(r, ())| r))
    }

    /// Sends `raw` to a fresh loopback connection and reads it as a request.
    fn parse(raw: &[u8], limits: Limits) -> Result<Request, HttpError> {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        client.write_all(raw).unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        next(&mut server, &mut Vec::new(), &limits, false).map(|r| r.expect("a request"))
    }

    #[test]
    fn pipelined_requests_are_read_one_after_the_other_and_a_quiet_end_is_no_error() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        // Two requests in one write, the second's body cut across the first's.
        client
            .write_all(b"POST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET /b HTTP/1.1\r\nConnection: close\r\n\r\n")
            .unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        let (d, mut pending) = (Limits::default(), Vec::new());
        let a = next(&mut server, &mut pending, &d, false).unwrap().unwrap();
        assert_eq!((a.path.as_str(), a.body.as_slice(), a.keep_alive), ("/a", &b"abc"[..], true));
        let b = next(&mut server, &mut pending, &d, true).unwrap().unwrap();
        assert_eq!((b.path.as_str(), b.keep_alive), ("/b", false));
        // The client is done: the end of its stream before a byte of a request is no error when
        // idle connections may end, and is one otherwise.
        assert!(next(&mut server, &mut pending, &d, true).unwrap().is_none());
        assert_eq!(next(&mut server, &mut pending, &d, false).unwrap_err().status, 400);
    }

    #[test]
    fn connections_persist_as_http_versions_and_the_connection_header_say() {
        assert!(keeps_alive(Some(1), None));
        assert!(!keeps_alive(Some(1), Some("Close")));
        assert!(!keeps_alive(Some(0), None));
        assert!(keeps_alive(Some(0), Some("Keep-Alive")));
        assert!(!keeps_alive(Some(1), Some("keep-alive, close")));
    }

    #[test]
    fn reads_heads_and_bodies_and_refuses_what_it_must() {
        let r = parse(b"POST /v1/x?a=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello+extra", Limits::default())
            .unwrap();
        assert_eq!((r.method.as_str(), r.path.as_str(), r.body.as_slice()), ("POST", "/v1/x", &b"hello"[..]));
        let status = |raw: &[u8], limits| parse(raw, limits).unwrap_err().status;
        let d = Limits::default();
        assert_eq!(status(b"POST / HTTP/1.1\r\n\r\n", d), 411);
        assert_eq!(status(b"POST / HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n", d), 413);
        assert_eq!(status(b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nshort", d), 400);
        assert_eq!(status(b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", d), 400);
        assert_eq!(status(b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", d), 400);
        assert_eq!(status(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", d), 501);
        assert_eq!(status(b"GARBAGE\x01 / HTTP/1.1\r\n\r\n", d), 400);
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(MAX_HEAD_BYTES + 10));
        assert_eq!(status(big.as_bytes(), d), 431);
        let many = format!("GET / HTTP/1.1\r\n{}\r\n", "X: y\r\n".repeat(MAX_HEADERS + 1));
        assert_eq!(status(many.as_bytes(), d), 431);
    }

    #[test]
    fn a_silent_client_times_out() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        client.write_all(b"GET / HTTP/1.1\r\n").unwrap();
        let (mut server, _) = listener.accept().unwrap();
        let limits = Limits { io_timeout: Duration::from_millis(100), ..Limits::default() };
        let t = Instant::now();
        assert_eq!(read_request(&mut server, &mut Vec::new(), &limits, t, false, |_| Ok(())).unwrap_err().status, 408);
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_trickle_does_not_extend_the_head_deadline() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        // A byte every 50 ms, each read well within the 1 s wait for one read, for 3 s at most.
        let trickle = std::thread::spawn(move || {
            for b in b"GET / HTTP/1.1\r\nX: ".iter().chain(&[b'a'; 40]) {
                if client.write_all(&[*b]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let limits = Limits {
            io_timeout: Duration::from_secs(1),
            head_timeout: Duration::from_millis(300),
            ..Limits::default()
        };
        let t = Instant::now();
        let mut head_seen = false;
        let seen = |_: &Head| {
            head_seen = true;
            Ok(())
        };
        assert_eq!(read_request(&mut server, &mut Vec::new(), &limits, t, false, seen).unwrap_err().status, 408);
        assert!(t.elapsed() < Duration::from_millis(900), "{:?}", t.elapsed());
        assert!(!head_seen);
        drop(server);
        trickle.join().unwrap();
    }

    /// A body must arrive at the minimum rate: a trickle gets 408 at its deadline, the head's
    /// timeout plus its length at that rate, however steadily it trickles.
    #[test]
    fn a_trickled_body_times_out_at_its_deadline() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        client.write_all(b"POST /x HTTP/1.1\r\nContent-Length: 4000\r\n\r\n").unwrap();
        let trickle = std::thread::spawn(move || {
            for _ in 0..60 {
                if client.write_all(b"a").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        // 4,000 bytes at 10,000 a second: 0.4 s after the head's 0.3 s.
        let limits = Limits {
            io_timeout: Duration::from_secs(1),
            head_timeout: Duration::from_millis(300),
            min_body_rate: 10_000,
            ..Limits::default()
        };
        let t = Instant::now();
        let e = read_request(&mut server, &mut Vec::new(), &limits, t, false, |_| Ok(())).unwrap_err();
        assert_eq!(e.status, 408);
        let took = t.elapsed();
        assert!(took >= Duration::from_millis(650) && took < Duration::from_millis(1500), "{took:?}");
        drop(server);
        trickle.join().unwrap();
    }
}
