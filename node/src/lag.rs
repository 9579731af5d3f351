//! A stall probe: tells a stalled runtime (a task that blocks a worker
//! thread) from a paused process or machine.
//!
//! Why: in the 3-node bench, leaders' read-index heartbeats sometimes time
//! out (100 ms) on every node at the same instant (docs/benchmarks.md). A
//! node cannot tell from that alone whether its own runtime stood still or
//! the whole VM did. Two clocks watch: a Tokio task and a plain thread,
//! each sleeping `TICK` and logging when it wakes `LATE` or more after it
//! should have. A late task with an on-time thread is a blocked worker;
//! both late together is a pause of the process or the machine.
//!
//! Cost: two wake-ups every 10 ms, nothing else.

use std::time::{Duration, Instant};

/// How long each watcher sleeps.
const TICK: Duration = Duration::from_millis(10);
/// How late a wake-up must be to be logged: well above scheduling noise,
/// well below the Raft heartbeat timeout it is meant to explain.
pub const LATE: Duration = Duration::from_millis(50);

/// How much later than `slept` a sleep of `TICK` took, if `LATE` or more.
pub fn lateness(slept: Duration) -> Option<Duration> {
    slept.checked_sub(TICK).filter(|late| *late >= LATE)
}

/// Starts both watchers; they run until the process exits. Call from
/// inside the runtime.
pub fn start() {
    tokio::spawn(async {
        loop {
            let t = Instant::now();
            tokio::time::sleep(TICK).await;
            if let Some(late) = lateness(t.elapsed()) {
                tracing::warn!(
                    late_ms = late.as_millis() as u64,
                    "the runtime woke a timer late: a task blocked a worker thread, or the \
                     process was paused (see the plain thread's warning, if any)"
                );
            }
        }
    });
    let spawned = std::thread::Builder::new().name("plaudit-lag".into()).spawn(|| loop {
        let t = Instant::now();
        std::thread::sleep(TICK);
        if let Some(late) = lateness(t.elapsed()) {
            tracing::warn!(
                late_ms = late.as_millis() as u64,
                "a plain thread woke late: the process or the machine was paused"
            );
        }
    });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "the stall probe's thread did not start");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_wake_ups_late_by_the_threshold_count() {
        assert_eq!(lateness(TICK), None);
        assert_eq!(lateness(TICK + LATE - Duration::from_millis(1)), None);
        assert_eq!(lateness(TICK + LATE), Some(LATE));
        assert_eq!(lateness(Duration::from_millis(250)), Some(Duration::from_millis(240)));
        assert_eq!(lateness(Duration::ZERO), None, "an early wake-up is not late");
    }
}
