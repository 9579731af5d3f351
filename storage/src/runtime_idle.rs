//! Whether the async runtime has run out of work: lets a shared flush
//! round start as soon as nothing more can join it, instead of sitting
//! out the rest of its floor.
//!
//! Why: a shared round waits up to `MIN_ROUND` after the previous one
//! began, so that the appends of a busy core share one `fdatasync`. But
//! once every runtime worker has parked, no task is left to append
//! anything: every request the node holds is waiting on this very round,
//! and the core idles until the floor is up (10–25% of the core in the
//! rankings mix and cold scoring). The node's runtime reports its workers'
//! parks here (`on_thread_park` and `on_thread_unpark`); the flusher waits
//! for the floor or for all workers parked, whichever comes first. A
//! process whose runtime does not report (tests, tools) never counts as
//! idle and keeps the plain floor.
//!
//! "All parked" must also be news: the flusher's own callbacks wake tasks
//! from outside the runtime, and a worker parked before them still counts
//! as parked until it wakes. So the flusher notes the count of parks after
//! its callbacks, and only a park after that one counts. (Blocking-pool
//! threads, e.g. a snapshot's writer, are not counted: they append
//! nothing to the log.)

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Parked workers out of how many, and a flusher that waits for them.
pub struct IdleGate {
    workers: AtomicUsize,
    parked: AtomicUsize,
    /// Parks so far.
    parks: AtomicU64,
    /// Threads in `sleep_unless_idle`: a park takes the lock only then.
    waiters: AtomicUsize,
    lock: Mutex<()>,
    parked_all: Condvar,
}

/// The process's runtime (the node has one).
pub static RUNTIME: IdleGate = IdleGate::new();

impl IdleGate {
    pub const fn new() -> IdleGate {
        IdleGate {
            workers: AtomicUsize::new(0),
            parked: AtomicUsize::new(0),
            parks: AtomicU64::new(0),
            waiters: AtomicUsize::new(0),
            lock: Mutex::new(()),
            parked_all: Condvar::new(),
        }
    }

    /// The runtime has `n` workers and will report their parks.
    pub fn set_workers(&self, n: usize) {
        self.workers.store(n, Ordering::SeqCst);
    }

    /// A worker is about to park: it found nothing to run.
    pub fn parked(&self) {
        self.parks.fetch_add(1, Ordering::SeqCst);
        let parked = self.parked.fetch_add(1, Ordering::SeqCst) + 1;
        let workers = self.workers.load(Ordering::SeqCst);
        if workers > 0 && parked >= workers && self.waiters.load(Ordering::SeqCst) > 0 {
            // Under the lock: a waiter that saw the runtime busy is then
            // inside `wait_timeout` and cannot miss this.
            let _held = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.parked_all.notify_all();
        }
    }

    /// A worker woke up (it may have work again).
    pub fn unparked(&self) {
        self.parked.fetch_sub(1, Ordering::SeqCst);
    }

    /// Parks so far: what `sleep_unless_idle` counts from.
    pub fn parks(&self) -> u64 {
        self.parks.load(Ordering::SeqCst)
    }

    fn is_idle_since(&self, mark: u64) -> bool {
        let workers = self.workers.load(Ordering::SeqCst);
        workers > 0
            && self.parked.load(Ordering::SeqCst) >= workers
            && self.parks.load(Ordering::SeqCst) > mark
    }

    /// Sleeps for `wait`, or less once every worker is parked and one has
    /// parked since `mark` (a value of `parks()`).
    pub fn sleep_unless_idle(&self, wait: Duration, mark: u64) {
        let deadline = Instant::now() + wait;
        if self.workers.load(Ordering::SeqCst) == 0 {
            std::thread::sleep(wait);
            return;
        }
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let mut held = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let now = Instant::now();
            if self.is_idle_since(mark) || now >= deadline {
                break;
            }
            held = match self.parked_all.wait_timeout(held, deadline - now) {
                Ok((held, _)) => held,
                Err(e) => e.into_inner().0,
            };
        }
        drop(held);
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Default for IdleGate {
    fn default() -> Self {
        IdleGate::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Whether `sleep_unless_idle(30 ms, mark)` sleeps all of it.
    fn waits_whole(gate: &IdleGate, mark: u64) -> bool {
        let start = Instant::now();
        gate.sleep_unless_idle(Duration::from_millis(30), mark);
        start.elapsed() >= Duration::from_millis(30)
    }

    #[test]
    fn a_runtime_that_does_not_report_keeps_the_whole_wait() {
        let gate = IdleGate::new();
        gate.parked();
        assert!(waits_whole(&gate, 0));
    }

    #[test]
    fn a_busy_runtime_keeps_the_whole_wait() {
        let gate = IdleGate::new();
        gate.set_workers(2);
        gate.parked(); // one of two
        assert!(waits_whole(&gate, 0));
    }

    /// Parked before the mark (before the flusher's callbacks woke tasks
    /// it has not run yet) is not idle.
    #[test]
    fn a_park_before_the_mark_keeps_the_whole_wait() {
        let gate = IdleGate::new();
        gate.set_workers(1);
        gate.parked();
        assert!(waits_whole(&gate, gate.parks()));
    }

    #[test]
    fn an_idle_runtime_ends_the_wait_at_once() {
        let gate = IdleGate::new();
        gate.set_workers(1);
        let mark = gate.parks();
        gate.parked();
        let start = Instant::now();
        gate.sleep_unless_idle(Duration::from_secs(60), mark);
        assert!(start.elapsed() < Duration::from_secs(30));
    }

    #[test]
    fn the_last_park_wakes_a_waiter() {
        let gate = Arc::new(IdleGate::new());
        gate.set_workers(2);
        gate.parked();
        let mark = gate.parks();
        let waiter = {
            let gate = gate.clone();
            std::thread::spawn(move || {
                let start = Instant::now();
                gate.sleep_unless_idle(Duration::from_secs(60), mark);
                start.elapsed()
            })
        };
        // Whether the waiter is already waiting or not yet: it must end.
        std::thread::sleep(Duration::from_millis(20));
        gate.parked();
        assert!(waiter.join().unwrap() < Duration::from_secs(30));
        gate.unparked();
        assert!(!gate.is_idle_since(mark));
    }
}
