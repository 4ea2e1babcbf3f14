//! Who gets the model and what they may hold: a memory budget for the bodies and decoded images
//! of the chat requests in flight, a bounded first-come queue for the model's sequences (as
//! many requests on the model at once as `--parallel` says) with a longest wait, and the
//! counters `/metrics` shows.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Bytes the requests in flight hold, within a limit, a share of which only the request whose
/// images the model is encoding may take, to decode them. Bodies are reserved from their head on and decodes
/// only once a request has the model, so from one pool the bodies of requests waiting behind it
/// could leave no room for the decode of the one that runs (scripts/soak saw it): the share
/// keeps that room. Images are decoded on the model's thread, one request's at a time, so the
/// share is never contended.
pub struct Budget {
    limit: u64,
    /// What bodies may not take: kept for the decode of the request on the model.
    decode_share: u64,
    used: AtomicU64,
}

/// Bytes taken from a budget, given back when dropped.
pub struct Reservation<'a> {
    budget: &'a Budget,
    bytes: u64,
}

impl Budget {
    /// `limit` bytes, `decode_share` of them (at most all) kept for decodes.
    pub fn new(limit: u64, decode_share: u64) -> Budget {
        Budget { limit, decode_share: decode_share.min(limit), used: AtomicU64::new(0) }
    }

    /// `bytes` more for a body (anything but a decode), or None when they would take the total
    /// into the decode share.
    pub fn reserve(&self, bytes: u64) -> Option<Reservation<'_>> {
        self.reserve_within(bytes, self.body_limit())
    }

    /// What bodies may hold together: the limit less the decode share.
    pub fn body_limit(&self) -> u64 {
        self.limit - self.decode_share
    }

    /// `bytes` more for decoding the images of the request on the model (one at a time), from
    /// the whole limit: at most the decode share, they always fit whatever the requests waiting
    /// behind it hold.
    pub fn reserve_decode(&self, bytes: u64) -> Option<Reservation<'_>> {
        self.reserve_within(bytes, self.limit)
    }

    fn reserve_within(&self, bytes: u64, limit: u64) -> Option<Reservation<'_>> {
        let mut used = self.used.load(Ordering::SeqCst);
        loop {
            let total = used.checked_add(bytes).filter(|&t| t <= limit)?;
            match self.used.compare_exchange(used, total, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return Some(Reservation { budget: self, bytes }),
                Err(now) => used = now,
            }
        }
    }

    pub fn used(&self) -> u64 {
        self.used.load(Ordering::SeqCst)
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    pub fn decode_share(&self) -> u64 {
        self.decode_share
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::SeqCst);
    }
}

/// Why a request did not get the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The queue already holds its most.
    QueueFull,
    /// It waited its longest.
    Waited,
}

#[derive(Default)]
struct QueueState {
    /// Requests holding a sequence of the model.
    in_use: usize,
    /// Since when one has, while any does.
    busy_since: Option<Instant>,
    /// Tickets of the requests waiting, first come first.
    waiting: VecDeque<u64>,
    next_ticket: u64,
}

/// The model's sequences, a request on each, the others waiting in arrival order.
pub struct Turns {
    state: Mutex<QueueState>,
    wake: Condvar,
    /// Sequences: requests on the model at once.
    sequences: usize,
    max_waiting: usize,
    max_wait: Duration,
    /// Time some request has been on the model (microseconds; requests at once count once).
    busy_micros: AtomicU64,
}

/// A sequence of the model, given to the next in line when dropped.
pub struct Turn<'a> {
    turns: &'a Turns,
}

impl Turns {
    /// `sequences` (at least 1) requests on the model at once.
    pub fn new(sequences: usize, max_waiting: usize, max_wait: Duration) -> Turns {
        Turns {
            state: Mutex::new(QueueState::default()),
            wake: Condvar::new(),
            sequences: sequences.max(1),
            max_waiting,
            max_wait,
            busy_micros: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for a sequence of the model: at once when one is free and nobody waits, else in
    /// line, at most `max_wait`; refused when `max_waiting` already wait.
    pub fn take(&self) -> Result<Turn<'_>, Refusal> {
        let mut s = self.lock();
        if s.in_use < self.sequences && s.waiting.is_empty() {
            return Ok(self.enter(&mut s));
        }
        if s.waiting.len() >= self.max_waiting {
            return Err(Refusal::QueueFull);
        }
        let ticket = s.next_ticket;
        s.next_ticket += 1;
        s.waiting.push_back(ticket);
        let deadline = Instant::now() + self.max_wait;
        loop {
            if s.in_use < self.sequences && s.waiting.front() == Some(&ticket) {
                s.waiting.pop_front();
                // The next in line may take another free sequence.
                self.wake.notify_all();
                return Ok(self.enter(&mut s));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                s.waiting.retain(|&t| t != ticket);
                // The next in line may be free to go now that this one left.
                self.wake.notify_all();
                return Err(Refusal::Waited);
            }
            s = self.wake.wait_timeout(s, left).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    fn enter(&self, s: &mut QueueState) -> Turn<'_> {
        s.in_use += 1;
        s.busy_since.get_or_insert_with(Instant::now);
        Turn { turns: self }
    }

    /// Requests waiting now.
    pub fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }

    /// Requests on the model now (each on a sequence).
    pub fn in_use(&self) -> usize {
        self.lock().in_use
    }

    /// Requests the model takes at once.
    pub fn sequences(&self) -> usize {
        self.sequences
    }

    /// Seconds the model has had requests, until the last time it had none.
    pub fn busy_seconds(&self) -> f64 {
        self.busy_micros.load(Ordering::Relaxed) as f64 / 1e6
    }

    pub fn max_wait(&self) -> Duration {
        self.max_wait
    }

    pub fn max_waiting(&self) -> usize {
        self.max_waiting
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut s = self.turns.lock();
        s.in_use -= 1;
        if s.in_use == 0 {
            if let Some(since) = s.busy_since.take() {
                let micros = u64::try_from(since.elapsed().as_micros()).unwrap_or(u64::MAX);
                self.turns.busy_micros.fetch_add(micros, Ordering::Relaxed);
            }
        }
        drop(s);
        self.turns.wake.notify_all();
    }
}

/// Counts of what became of the chat requests, by outcome, for `/metrics`.
#[derive(Default)]
pub struct Counters {
    pub answered: AtomicU64,
    pub client_errors: AtomicU64,
    pub server_errors: AtomicU64,
    pub client_gone: AtomicU64,
    pub queue_full: AtomicU64,
    pub queue_timeout: AtomicU64,
    pub over_budget: AtomicU64,
    /// Ended with a 503 by the loss of the device under them.
    pub device_lost: AtomicU64,
}

impl Counters {
    pub fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// The Prometheus text format of the server's state.
pub fn metrics(turns: &Turns, budget: &Budget, c: &Counters) -> String {
    let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, samples: &[(&str, String)]| {
        out += &format!("# HELP {name} {help}\n# TYPE {name} {kind}\n");
        for (labels, value) in samples {
            out += &format!("{name}{labels} {value}\n");
        }
    };
    metric(
        "hrx_chat_requests_total",
        "counter",
        "Chat requests by outcome.",
        &[
            ("{outcome=\"answered\"}", n(&c.answered).to_string()),
            ("{outcome=\"client_error\"}", n(&c.client_errors).to_string()),
            ("{outcome=\"server_error\"}", n(&c.server_errors).to_string()),
            ("{outcome=\"client_gone\"}", n(&c.client_gone).to_string()),
            ("{outcome=\"queue_full\"}", n(&c.queue_full).to_string()),
            ("{outcome=\"queue_timeout\"}", n(&c.queue_timeout).to_string()),
            ("{outcome=\"over_memory_budget\"}", n(&c.over_budget).to_string()),
            ("{outcome=\"device_lost\"}", n(&c.device_lost).to_string()),
        ],
    );
    metric("hrx_queue_depth", "gauge", "Chat requests waiting for the model.", &[("", turns.waiting().to_string())]);
    metric(
        "hrx_queue_capacity",
        "gauge",
        "Most chat requests that may wait.",
        &[("", turns.max_waiting().to_string())],
    );
    let in_use = turns.in_use();
    metric("hrx_model_busy", "gauge", "1 while a request has the model.", &[("", u8::from(in_use > 0).to_string())]);
    metric(
        "hrx_sequences_in_use",
        "gauge",
        "Chat requests on the model now, each on a sequence of its batch.",
        &[("", in_use.to_string())],
    );
    metric(
        "hrx_sequences",
        "gauge",
        "Chat requests the model takes at once (--parallel).",
        &[("", turns.sequences().to_string())],
    );
    metric(
        "hrx_model_busy_seconds_total",
        "counter",
        "Seconds the model has spent on requests.",
        &[("", format!("{:.3}", turns.busy_seconds()))],
    );
    metric(
        "hrx_memory_reserved_bytes",
        "gauge",
        "Bytes held by chat requests in flight (bodies, decoded images).",
        &[("", budget.used().to_string())],
    );
    metric("hrx_memory_budget_bytes", "gauge", "The most they may hold.", &[("", budget.limit().to_string())]);
    metric(
        "hrx_memory_decode_share_bytes",
        "gauge",
        "Of the budget, what is kept for decoding the images of the request the model is encoding.",
        &[("", budget.decode_share().to_string())],
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_budget_gives_what_it_has_and_takes_it_back() {
        let b = Budget::new(100, 0);
        let a = b.reserve(60).unwrap();
        assert!(b.reserve(41).is_none());
        let c = b.reserve(40).unwrap();
        assert_eq!(b.used(), 100);
        drop(a);
        assert_eq!(b.used(), 40);
        drop(c);
        assert!(b.reserve(100).is_some());
        assert!(b.reserve(u64::MAX).is_none());
    }

    #[test]
    fn bodies_leave_the_decode_share_to_the_request_on_the_model() {
        let b = Budget::new(100, 30);
        let bodies = b.reserve(70).unwrap();
        assert!(b.reserve(1).is_none(), "bodies stop at limit - share");
        let decode = b.reserve_decode(30).expect("the share is there whatever the bodies hold");
        assert!(b.reserve_decode(1).is_none(), "and no more than the limit");
        drop((bodies, decode));
        assert_eq!(b.used(), 0);
        assert_eq!(Budget::new(10, 20).decode_share(), 10, "a share is at most the limit");
    }

    #[test]
    fn turns_go_in_arrival_order_within_the_queue_and_its_wait() {
        let turns = Arc::new(Turns::new(1, 2, Duration::from_secs(5)));
        let first = turns.take().unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let waiters: Vec<_> = (0..2)
            .map(|i| {
                let (mine, order) = (Arc::clone(&turns), Arc::clone(&order));
                let w = std::thread::spawn(move || {
                    let _turn = mine.take().unwrap();
                    order.lock().unwrap().push(i);
                });
                // The next waiter arrives after this one is in line.
                while turns.waiting() <= i {
                    std::thread::yield_now();
                }
                w
            })
            .collect();
        // Two wait: a third is refused at once.
        assert_eq!(turns.take().err(), Some(Refusal::QueueFull));
        drop(first);
        for w in waiters {
            w.join().unwrap();
        }
        assert_eq!(*order.lock().unwrap(), [0, 1]);
        assert!(turns.in_use() == 0 && turns.waiting() == 0);

        // Two sequences: two requests at once, a third in line until one ends.
        let two = Turns::new(2, 1, Duration::from_secs(5));
        let (a, b) = (two.take().unwrap(), two.take().unwrap());
        assert_eq!(two.in_use(), 2);
        std::thread::scope(|s| {
            let third = s.spawn(|| two.take().map(|_| two.in_use()));
            while two.waiting() == 0 {
                std::thread::yield_now();
            }
            assert_eq!(two.take().err(), Some(Refusal::QueueFull), "one may wait");
            drop(a);
            assert_eq!(third.join().unwrap(), Ok(2), "the third took the freed sequence");
        });
        drop(b);
        assert_eq!(two.in_use(), 0);

        // A wait past its longest is refused, and leaves the line.
        let short = Turns::new(1, 4, Duration::from_millis(50));
        let held = short.take().unwrap();
        assert_eq!(short.take().err(), Some(Refusal::Waited));
        assert_eq!(short.waiting(), 0);
        drop(held);
        assert!(short.take().is_ok());
    }
}
