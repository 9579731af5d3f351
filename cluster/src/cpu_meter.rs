//! The CPU time a request costs the node that received it, for `admin
//! hotkeys --by cpu`: the time each poll of the request's future runs,
//! summed, or the time of the work done for it in place on the connection
//! (an answer read in place, a staged write). A poll runs on its thread
//! without blocking, so its duration is CPU time, unless the kernel takes
//! the core away in the middle (counted too). Why not the thread's CPU
//! clock (`CLOCK_THREAD_CPUTIME_ID`): here it is a system call, ~540 ns a
//! read, against ~25 ns for the monotonic clock (vDSO); two reads per poll
//! of one request in `hot_keys::SAMPLE` would have cost a single node ~7%
//! of its CPU, where this costs well under 1%.
//!
//! What it does not count: work other tasks do on the request's behalf (a
//! shard actor's apply, Raft's replication, a peer's part of a fan-out). A
//! key's figure is the cost of the requests naming it where they arrive.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

/// This process's CPU time (user and system), in microseconds.
pub fn process_cpu_us() -> u64 {
    // SAFETY: an all-zero `rusage` is a valid value to be overwritten.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0;
    }
    let us = |t: libc::timeval| (t.tv_sec as u64) * 1_000_000 + t.tv_usec as u64;
    us(ru.ru_utime) + us(ru.ru_stime)
}

/// A future whose polls' durations are summed; it yields its inner output
/// with the nanoseconds spent.
pub struct Metered<F> {
    inner: Pin<Box<F>>,
    spent_ns: u64,
}

impl<F: Future> Metered<F> {
    pub fn new(inner: F) -> Self {
        Metered { inner: Box::pin(inner), spent_ns: 0 }
    }
}

impl<F: Future> Future for Metered<F> {
    type Output = (F::Output, u64);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let t0 = Instant::now();
        let polled = self.inner.as_mut().poll(cx);
        let spent = t0.elapsed().as_nanos() as u64;
        self.spent_ns = self.spent_ns.saturating_add(spent);
        let total = self.spent_ns;
        polled.map(|out| (out, total))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spin(ms: u64) {
        let until = std::time::Instant::now() + std::time::Duration::from_millis(ms);
        let mut x = 0u64;
        while std::time::Instant::now() < until {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    }

    #[tokio::test]
    async fn a_metered_future_counts_its_polls_work_not_its_waits() {
        let (out, ns) = Metered::new(async {
            spin(20);
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            spin(20);
            7
        })
        .await;
        assert_eq!(out, 7);
        // About 40 ms of work, and the 50 ms sleep not counted.
        assert!((35_000_000..90_000_000).contains(&ns), "{ns} ns");
    }

    #[test]
    fn the_process_clock_moves_forward() {
        let p0 = process_cpu_us();
        spin(10);
        assert!(process_cpu_us() > p0);
    }
}
