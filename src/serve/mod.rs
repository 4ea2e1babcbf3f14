//! `hrx serve`: an OpenAI-compatible chat-completions server for local clients, on plain
//! threads (no async runtime): one thread per connection, and one thread that owns the model
//! and decodes up to `--parallel` chat requests together (model.rs) while the others wait
//! their turn.
//!
//! Connections that have not sent a whole request cannot lock clients out: the head has a
//! deadline from the accept, and the body one from the head (its length at `--min-body-rate`),
//! that trickling bytes do not extend; when `max_open` connections are open the one that has
//! waited longest without a whole request is closed to make room. A connection kept for a
//! client's next request is one of those while it waits: the same deadline from the end of its
//! last answer, and closed first to make room when it has waited longest. With every
//! connection at work, a few spare ones (`SPARE_CONNECTIONS`, a second to send their head)
//! answer /health and /metrics and refuse the rest. Chat requests hold the memory budget from their head on (their bodies; the request
//! whose images the model's thread decodes those too, from a share bodies cannot take) and wait
//! for a sequence of the model in a bounded first-come queue (admission.rs); other
//! requests need neither, so `/health` and `/metrics` answer whatever the model is doing.

pub mod admission;
pub mod handler;
pub mod http;
pub mod image_url;
pub mod images;
pub mod model;
pub mod openai;

use handler::{App, Outcome, Watch};
use std::collections::BTreeMap;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Serves connections from `listener` until the process ends.
pub fn serve(listener: TcpListener, app: Arc<App>) {
    let open = Arc::new(AtomicUsize::new(0));
    let spares = Arc::new(AtomicUsize::new(0));
    let heads = Arc::new(Heads::default());
    for (id, conn) in (0u64..).zip(listener.incoming()) {
        let mut stream = match conn {
            Ok(stream) => stream,
            Err(e) => {
                // Out of file descriptors and the like: wait a little instead of spinning.
                log::warn!("accepting a connection: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let accepted = Instant::now();
        let peer = peer(&stream);
        let mut spare = false;
        if open.load(Ordering::SeqCst) >= app.limits.max_open {
            match heads.make_room(&open, app.limits.max_open) {
                Room::Free => {}
                Room::Closed(addr, waited) => eprintln!(
                    "hrx serve: {addr} closed after {:.1} s without a whole request, to make room for {peer}",
                    waited.as_secs_f64()
                ),
                Room::None if spares.load(Ordering::SeqCst) < SPARE_CONNECTIONS => spare = true,
                Room::None => {
                    refuse(&mut stream, app.limits.max_open);
                    eprintln!("hrx serve: {peer} refused 503: {} connections open", app.limits.max_open);
                    continue;
                }
            }
        }
        let counted = if spare { &spares } else { &open };
        counted.fetch_add(1, Ordering::SeqCst);
        if !spare {
            heads.enter(id, &stream, peer.clone(), accepted);
        }
        let (app, heads, slot) = (Arc::clone(&app), Arc::clone(&heads), Slot(Arc::clone(counted)));
        // Generation runs on this thread: give it the main thread's stack size.
        let spawned = std::thread::Builder::new().stack_size(8 << 20).spawn(move || {
            let _slot = slot;
            app.handle(stream, accepted, spare, &Connection { id, peer, heads: &heads });
            heads.leave(id);
        });
        if let Err(e) = spawned {
            log::warn!("starting a connection thread: {e}");
        }
    }
}

/// A connection as its thread tells of it: in the list of those waiting for a head while it
/// waits, and a log line per request.
struct Connection<'a> {
    id: u64,
    peer: String,
    heads: &'a Heads,
}

impl Watch for Connection<'_> {
    fn waiting(&self, stream: &TcpStream, since: Instant) {
        self.heads.enter(self.id, stream, self.peer.clone(), since);
    }

    fn working(&self) {
        self.heads.leave(self.id);
    }

    fn answered(&self, outcome: &Outcome, since: Instant) {
        let reason = outcome.reason.as_ref().map_or(String::new(), |r| format!(": {r}"));
        let seconds = since.elapsed().as_secs_f64();
        eprintln!("hrx serve: {} {} {} {seconds:.2} s{reason}", self.peer, outcome.line, outcome.status);
    }
}

/// A connection waiting for (or still sending) a request: a handle to close it, who, and since
/// when (its accept, or the end of its last answer).
struct Waiting {
    stream: Option<TcpStream>,
    peer: String,
    since: Instant,
}

/// The connections waiting for a whole request (its head or its body), by id.
#[derive(Default)]
struct Heads(Mutex<BTreeMap<u64, Waiting>>);

impl Heads {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Waiting>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn enter(&self, id: u64, stream: &TcpStream, peer: String, since: Instant) {
        self.lock().insert(id, Waiting { stream: stream.try_clone().ok(), peer, since });
    }

    fn leave(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// Room for one more connection when `open` has reached `max_open`: a slot given back, or
    /// the connection that has waited longest for a head closed; either looked for up to
    /// `ROOM_GRACE`, since a kept connection between its answer and its next wait is about to
    /// wait (its client may have the answer already and be the one connecting).
    fn make_room(&self, open: &AtomicUsize, max_open: usize) -> Room {
        let until = Instant::now() + ROOM_GRACE;
        loop {
            if open.load(Ordering::SeqCst) < max_open {
                return Room::Free;
            }
            if let Some((addr, waited)) = self.close_oldest() {
                return Room::Closed(addr, waited);
            }
            if Instant::now() >= until {
                return Room::None;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Shuts down the one that has waited longest (its read fails, its thread ends): a kept
    /// connection's wait counts from its last answer, not its accept. Its address and wait.
    fn close_oldest(&self) -> Option<(String, Duration)> {
        let mut waiting = self.lock();
        let id = waiting.iter().min_by_key(|(_, w)| w.since).map(|(&id, _)| id)?;
        let w = waiting.remove(&id)?;
        drop(waiting);
        if let Some(s) = w.stream {
            let _ = s.shutdown(Shutdown::Both);
        }
        Some((w.peer, w.since.elapsed()))
    }
}

/// Connections past `max_open`, with every other at work, that may ask for /health or
/// /metrics (each answered once; they have a second to send their head).
const SPARE_CONNECTIONS: usize = 8;

/// How long a new connection past `max_open` waits for room before its 503: enough for a kept
/// connection's thread to go from sending an answer to waiting on a loaded machine, short
/// enough that refusals under a flood stay quick.
const ROOM_GRACE: Duration = Duration::from_millis(100);

/// What `Heads::make_room` found.
enum Room {
    /// A connection ended meanwhile.
    Free,
    /// This one (address, wait) was closed.
    Closed(String, Duration),
    /// Every connection is at work.
    None,
}

fn peer(stream: &TcpStream) -> String {
    stream.peer_addr().map_or_else(|_| "?".to_owned(), |a: SocketAddr| a.to_string())
}

/// A connection's place in the count, given back however its thread ends.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn refuse(stream: &mut TcpStream, max_open: usize) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let e = http::HttpError::new(503, format!("hrx serve has {max_open} connections open; try again"));
    handler::send_error(stream, &e.with_retry_after(1), "", false);
}
