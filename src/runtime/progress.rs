//! Word of work that runs long: nothing for work done within `after`, else a line once it has
//! run that long, more after `every`, then twice as long each time (a minute at most between
//! two), and one when it ends, so a 12 MP photo encoded on
//! a CPU does not sit silent for minutes. A thread of its own waits beside the work: the work
//! itself (one run of a plan) has no point at which to report.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

/// When to speak, and where the lines go.
#[derive(Clone, Copy)]
pub struct Notice {
    pub after: Duration,
    pub every: Duration,
    pub sink: fn(&str),
}

impl Notice {
    /// The longest silence between two lines (unless `every` is longer).
    const LONGEST_WAIT: Duration = Duration::from_secs(60);

    /// After a second, then after 10 s, 20 s, 40 s, ... (60 s at most) on `sink`.
    pub fn to(sink: fn(&str)) -> Notice {
        Notice { after: Duration::from_secs(1), every: Duration::from_secs(10), sink }
    }

    /// Runs `work`, saying `what` is under way (`what` like "encoding photo.jpg ...") if it
    /// takes longer than `after`.
    pub fn around<T>(&self, what: &str, work: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let (done, finished) = mpsc::channel::<()>();
        std::thread::scope(|scope| {
            scope.spawn(move || {
                if finished.recv_timeout(self.after) != Err(RecvTimeoutError::Timeout) {
                    return;
                }
                (self.sink)(&format!("{what} ..."));
                let mut wait = self.every;
                while finished.recv_timeout(wait) == Err(RecvTimeoutError::Timeout) {
                    (self.sink)(&format!("{what}: {:.0} s so far", start.elapsed().as_secs_f64()));
                    wait = wait.saturating_mul(2).min(Self::LONGEST_WAIT.max(self.every));
                }
                (self.sink)(&format!("{what}: ended after {:.1} s", start.elapsed().as_secs_f64()));
            });
            let out = work();
            // Dropping the sender wakes the watcher whether or not it has spoken.
            drop(done);
            out
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());

    fn keep(line: &str) {
        LINES.lock().unwrap().push(line.to_owned());
    }

    #[test]
    fn long_work_is_announced_and_its_end_told_and_short_work_is_silent() {
        let quick = Notice { after: Duration::from_secs(30), every: Duration::from_secs(30), sink: keep };
        assert_eq!(quick.around("quick", || 7), 7);
        assert!(LINES.lock().unwrap().is_empty());
        let slow = Notice { after: Duration::ZERO, every: Duration::from_secs(30), sink: keep };
        // The work lasts until the watcher has spoken (10 s at most): no race with its thread.
        slow.around("encoding x.png", || {
            let until = Instant::now() + Duration::from_secs(10);
            while LINES.lock().unwrap().is_empty() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        let lines = LINES.lock().unwrap().clone();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[0], "encoding x.png ...");
        assert!(lines[1].starts_with("encoding x.png: ended after "), "{lines:?}");
    }
}
