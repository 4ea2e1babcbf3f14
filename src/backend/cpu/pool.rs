//! Parked worker threads for the CPU kernels' parallel loops, and for the host's side of GPU
//! runs (a prompt's rows, copies to and from mapped memory): a spawn took ~0.13 ms on the
//! H100's host, several per call.
//!
//! A decode step runs a few hundred small ops; spawning threads for each (about 20-50 µs a
//! spawn) costs as much as the work of the smaller ones. These workers are started once and
//! wait on a condition variable between jobs.
//!
//! A worker that finishes a job, and a caller waiting for the workers, spin for a while
//! (`SPIN`) before sleeping: a decode step's jobs follow each other within microseconds, and a
//! sleeping worker took longer to wake than the caller took to run out of work items alone
//! (the 2B shape's decode ran at 1.44 times its one-thread speed on two threads).
//!
//! A job is a borrowed closure that every taking thread (the caller included) runs once;
//! the closure itself hands out the work items (see `par_items` in fast.rs). The pool
//! erases the closure's lifetime to pass it to the workers, which is sound because
//! [`Pool::run`] does not return, nor unwind, before every worker that took the job has
//! finished with it, and no worker can take it after that (see `run`).

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

type Task = dyn Fn() + Sync;

/// How long a thread polls before it sleeps: a few decode steps' gaps between jobs.
const SPIN: Duration = Duration::from_micros(200);

pub struct Pool {
    state: Mutex<State>,
    /// Workers wait here for a job.
    wake: Condvar,
    /// The caller waits here for the workers that took its job.
    done: Condvar,
    workers: usize,
    /// `State::generation` and `State::running`, written under the lock, for the spinning
    /// threads to poll without it.
    posted: AtomicU64,
    busy: AtomicUsize,
}

struct State {
    /// The job of the current generation, while it may still be taken.
    job: Option<Job>,
    generation: u64,
    /// Workers that may still take the current job.
    slots: usize,
    /// Workers running the current job.
    running: usize,
    /// A worker's run of the current job panicked.
    panic: Option<Box<dyn std::any::Any + Send>>,
}

/// The caller's closure with its lifetime erased.
#[derive(Clone, Copy)]
struct Job(*const Task);

// SAFETY: the pointee is `Sync` (so `&Task` may be sent to other threads), and `run` keeps
// it alive for as long as any worker holds a `Job` (see `Pool::run`).
unsafe impl Send for Job {}

impl Pool {
    /// The process's pool: one worker per core beyond the caller's.
    pub fn global() -> &'static Pool {
        static POOL: OnceLock<&'static Pool> = OnceLock::new();
        POOL.get_or_init(|| {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            let pool: &'static Pool = Box::leak(Box::new(Pool {
                state: Mutex::new(State { job: None, generation: 0, slots: 0, running: 0, panic: None }),
                wake: Condvar::new(),
                done: Condvar::new(),
                workers: cores.saturating_sub(1),
                posted: AtomicU64::new(0),
                busy: AtomicUsize::new(0),
            }));
            for i in 0..pool.workers {
                let spawned = std::thread::Builder::new().name(format!("hrx-cpu-{i}")).spawn(move || pool.work());
                if spawned.is_err() {
                    // Fewer workers only means less parallelism: jobs never wait for a
                    // worker that has not taken them.
                    break;
                }
            }
            pool
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the calling thread and on up to `threads - 1` workers at once, returning
    /// when all of them are done; a panic in any of them is raised here after that. `f`
    /// runs only on the caller when the pool is busy (a nested or concurrent call).
    pub fn run(&self, threads: usize, f: &(dyn Fn() + Sync)) {
        if !self.try_run(threads, f) {
            f();
        }
    }

    /// As `run` where the pool is free, or where `threads` asks for no worker (`f` then runs
    /// on the caller alone): true. False, `f` not run, where the pool is busy: the caller
    /// may find threads of its own (two models' weights going up side by side at load).
    pub fn try_run(&self, threads: usize, f: &(dyn Fn() + Sync)) -> bool {
        let helpers = threads.saturating_sub(1).min(self.workers);
        {
            let mut st = self.lock();
            if helpers == 0 {
                drop(st);
                f();
                return true;
            }
            if st.job.is_some() || st.running > 0 {
                return false;
            }
            // SAFETY: lifetime erasure only; see the comment at the end of this function.
            let erased: *const Task = unsafe { std::mem::transmute::<*const (dyn Fn() + Sync + '_), *const Task>(f) };
            st.job = Some(Job(erased));
            st.generation += 1;
            st.slots = helpers;
            self.posted.store(st.generation, Ordering::Release);
        }
        self.wake.notify_all();
        let mine = catch_unwind(AssertUnwindSafe(f));
        {
            let mut st = self.lock();
            // Workers that have not taken the job by now will not: the caller has run out of
            // work items, so there would be nothing left for them.
            st.slots = 0;
            st.job = None;
        }
        spin_while(|| self.busy.load(Ordering::Acquire) > 0);
        let theirs = {
            let mut st = self.lock();
            while st.running > 0 {
                st = self.done.wait(st).unwrap_or_else(PoisonError::into_inner);
            }
            st.panic.take()
        };
        // Here no worker holds the job: `job` is None, so none can take it, and `running`
        // is 0, so every one that took it has returned from it. Only now may `f` go out of
        // scope, by returning or unwinding.
        if let Err(p) = mine {
            resume_unwind(p);
        }
        if let Some(p) = theirs {
            resume_unwind(p);
        }
        true
    }

    fn work(&self) {
        let mut seen = 0;
        let mut st = self.lock();
        loop {
            if st.generation != seen {
                seen = st.generation;
                if let (Some(job), true) = (st.job, st.slots > 0) {
                    st.slots -= 1;
                    st.running += 1;
                    self.busy.store(st.running, Ordering::Release);
                    drop(st);
                    // SAFETY: the caller of `run` waits for `running` to drop to 0 before its
                    // closure can go out of scope, so the pointer is live until we decrement it.
                    let result = catch_unwind(AssertUnwindSafe(|| unsafe { (*job.0)() }));
                    st = self.lock();
                    st.running -= 1;
                    self.busy.store(st.running, Ordering::Release);
                    if let Err(p) = result {
                        st.panic.get_or_insert(p);
                    }
                    if st.running == 0 {
                        self.done.notify_all();
                    }
                }
                continue;
            }
            // The next job is most likely a few microseconds away: poll for it unlocked first.
            drop(st);
            spin_while(|| self.posted.load(Ordering::Acquire) == seen);
            st = self.lock();
            if st.generation == seen {
                st = self.wake.wait(st).unwrap_or_else(PoisonError::into_inner);
            }
        }
    }
}

/// Polls `busy` until it is false or `SPIN` has passed.
fn spin_while(busy: impl Fn() -> bool) {
    let start = Instant::now();
    while busy() {
        for _ in 0..64 {
            std::hint::spin_loop();
        }
        if start.elapsed() > SPIN {
            return;
        }
    }
}

/// Hands the items out one at a time to up to `threads` threads of the process's pool, the
/// caller included, each running `f` on the ones it takes: a thread that falls behind
/// (descheduled on a busy machine, say) just takes fewer. Callers pass no more threads than
/// items: one item runs on the caller without waking the pool (a decode step's row-wise ops).
pub fn par_items<T: Send>(threads: usize, items: impl Iterator<Item = T> + Send, f: impl Fn(T) + Sync) {
    let items = Mutex::new(items);
    let work = || loop {
        let Some(item) = items.lock().unwrap_or_else(PoisonError::into_inner).next() else { break };
        f(item);
    };
    if threads <= 1 {
        return work();
    }
    Pool::global().run(threads, &work);
}
