//! `hrx serve`: an OpenAI-compatible chat-completions server for local clients, on plain
//! threads (no async runtime): one thread per connection, up to a limit, and one request at a
//! time on the model while the others wait their turn.

pub mod handler;
pub mod http;
pub mod image_url;
pub mod openai;

use handler::App;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Connections served at once; more get 503 at once.
pub const MAX_CONNECTIONS: usize = 64;

/// Serves connections from `listener` until the process ends.
pub fn serve(listener: TcpListener, app: Arc<App>) {
    let open = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        let mut stream = match conn {
            Ok(stream) => stream,
            Err(e) => {
                // Out of file descriptors and the like: wait a little instead of spinning.
                log::warn!("accepting a connection: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if open.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            open.fetch_sub(1, Ordering::SeqCst);
            refuse(&mut stream);
            continue;
        }
        let (app, slot) = (Arc::clone(&app), Slot(Arc::clone(&open)));
        // Generation runs on this thread: give it the main thread's stack size.
        let spawned = std::thread::Builder::new().stack_size(8 << 20).spawn(move || {
            let _slot = slot;
            let t = Instant::now();
            let (line, status) = app.handle(stream);
            eprintln!("hrx serve: {line} {status} {:.2} s", t.elapsed().as_secs_f64());
        });
        if let Err(e) = spawned {
            log::warn!("starting a connection thread: {e}");
        }
    }
}

/// A connection's place in the count, given back however its thread ends.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn refuse(stream: &mut TcpStream) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let e = http::HttpError::new(503, "hrx serve has too many open connections; try again");
    let _ = http::write_response(stream, 503, "application/json", "", openai::error(&e).to_string_compact().as_bytes());
}
