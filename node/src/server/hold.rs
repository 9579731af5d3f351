//! A read pass's replies leave together: once a pass proposes writes to a
//! group whose only voter is this node (or, for a pipeline's pass, to any
//! group), the connection writes nothing
//! until those writes have ended, and then writes every reply that is
//! ready (its inline reads, its writes, and whatever came meanwhile) in
//! one `sendto`.
//!
//! Why: a pass of reads and writes otherwise costs a `sendto` for its
//! reads at once and one or two more as its groups' writes end, and on
//! loopback a `sendto` also runs the receiver's TCP path, about 8 µs of
//! the node's core. Measured on one core (`docs/benchmarks.md`), holding
//! raised the rankings mix from 148–163k to 168–194k ops/s and the likes
//! mix by 7–11%.
//!
//! What it costs: a read that arrives in the same read as a write waits
//! for that write to be durable (one group-commit round, ~2 ms under
//! load), as every reply of an event-loop pass does in Redis with
//! `appendfsync always`. A replicated group's write waits for its
//! followers too (a round trip and their syncs: 3 to 10 ms and more under
//! load on three nodes), and holding an independent caller's read that
//! long costs more than the `sendto` saves: measured on three nodes with
//! independent callers (`docs/benchmarks.md`, "Reads held for replicated
//! writes"), 8–14% more operations a second without it. So a replicated
//! write holds its pass's replies only when every request of the pass came
//! in a pipeline (`PIPELINED` in its id): that caller waits for all its
//! replies anyway, and gets them in one `sendto` instead of two or more
//! (`docs/benchmarks.md`, "Pipelines answered in one write"). The wait is
//! bounded: only the first pass's
//! writes hold the replies, never the writes of passes read while they
//! wait (so a busy connection cannot hold its replies forever), and a
//! hold ends after [`MAX_HOLD`] whether its writes have or not. Reads that
//! arrive alone are written at once.
//!
//! Why the time bound: a write proposed on a leader that has just been cut
//! off waits until its request timeout (it may still commit, so it cannot
//! be answered before), and it held every reply of its connection with
//! it, pings and redirects included: a client could not even learn to go
//! elsewhere (a silent partition's first writes took 1.5 s to reach the
//! new leaders, the SDK's stalled-node probe; `docs/benchmarks.md`).

use std::time::{Duration, Instant};

/// The longest replies wait for their pass's writes: many group-commit
/// rounds, so a hold that ends by it has lost nothing of its batching.
pub const MAX_HOLD: Duration = Duration::from_millis(20);

/// The bookkeeping of one connection's hold; pure.
#[derive(Debug, Default)]
pub(super) struct PassHold {
    /// The read pass under way (numbered from 1).
    pass: u64,
    /// The pass whose writes hold the replies.
    holding: u64,
    /// Its writes (one future per group) still in flight.
    waiting: usize,
    /// When the hold ends at the latest.
    until: Option<Instant>,
}

impl PassHold {
    /// A new read pass begins.
    pub(super) fn next_pass(&mut self) {
        self.pass += 1;
    }

    /// A future of the pass under way carries writes; returns the tag it
    /// ends with. It holds the replies unless an earlier pass does, until
    /// `now + MAX_HOLD` at the latest.
    pub(super) fn submitted(&mut self, now: Instant) -> u64 {
        if self.waiting == 0 {
            self.until = Some(now + MAX_HOLD);
        }
        if self.waiting == 0 || self.holding == self.pass {
            self.holding = self.pass;
            self.waiting += 1;
        }
        self.pass
    }

    /// A future tagged `pass` ended.
    pub(super) fn ended(&mut self, pass: u64) {
        if pass == self.holding && self.waiting > 0 {
            self.waiting -= 1;
        }
    }

    /// Whether replies wait (at `now`, which is read only while a hold
    /// is on).
    pub(super) fn holds(&self, now: impl FnOnce() -> Instant) -> bool {
        self.waiting > 0 && self.until.is_some_and(|u| now() < u)
    }

    /// When the hold under way ends at the latest.
    pub(super) fn deadline(&self) -> Option<Instant> {
        if self.waiting > 0 {
            self.until
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> Instant {
        Instant::now()
    }

    #[test]
    fn a_pass_holds_until_all_its_writes_end() {
        let now = t0();
        let mut h = PassHold::default();
        h.next_pass();
        assert!(!h.holds(|| now), "reads alone are written at once");
        let (a, b) = (h.submitted(now), h.submitted(now));
        assert!(h.holds(|| now));
        h.ended(a);
        assert!(h.holds(|| now), "one group's writes are still in flight");
        h.ended(b);
        assert!(!h.holds(|| now));
    }

    #[test]
    fn a_hold_ends_at_its_deadline_whatever_its_writes_do() {
        let now = t0();
        let mut h = PassHold::default();
        h.next_pass();
        let a = h.submitted(now);
        assert_eq!(h.deadline(), Some(now + MAX_HOLD));
        assert!(h.holds(|| now + MAX_HOLD - Duration::from_millis(1)));
        assert!(!h.holds(|| now + MAX_HOLD), "a write stuck past the bound holds nothing");
        // A later pass's writes do not start a new hold while one is counted.
        h.next_pass();
        h.submitted(now + MAX_HOLD);
        assert!(!h.holds(|| now + MAX_HOLD));
        h.ended(a);
        assert_eq!(h.deadline(), None);
    }

    #[test]
    fn later_passes_do_not_extend_the_hold() {
        let now = t0();
        let mut h = PassHold::default();
        h.next_pass();
        let first = h.submitted(now);
        h.next_pass();
        let second = h.submitted(now);
        h.ended(first);
        assert!(!h.holds(|| now), "only the first pass's writes hold");
        // The second pass's end is not counted against a later hold.
        h.next_pass();
        let third = h.submitted(now);
        h.ended(second);
        assert!(h.holds(|| now));
        h.ended(third);
        assert!(!h.holds(|| now));
    }

    #[test]
    fn a_new_hold_begins_after_one_ends() {
        let now = t0();
        let mut h = PassHold::default();
        h.next_pass();
        let a = h.submitted(now);
        h.ended(a);
        h.ended(a); // a stray end neither underflows nor holds
        assert!(!h.holds(|| now));
        h.next_pass();
        let b = h.submitted(now);
        assert!(h.holds(|| now));
        h.ended(b);
        assert!(!h.holds(|| now));
    }

    #[test]
    fn an_untagged_end_changes_nothing() {
        let now = t0();
        let mut h = PassHold::default();
        h.next_pass();
        h.submitted(now);
        h.ended(0); // answered without being proposed: never tagged
        assert!(h.holds(|| now));
    }
}
