//! A read pass's replies leave together: once a pass proposes writes, the
//! connection writes nothing until those writes have ended, and then
//! writes every reply that is ready (its inline reads, its writes, and
//! whatever came meanwhile) in one `sendto`.
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
//! `appendfsync always`. The wait is bounded: only the first pass's
//! writes hold the replies, never the writes of passes read while they
//! wait (so a busy connection cannot hold its replies forever), and each
//! of those writes ends by the request timeout. Reads that arrive alone
//! are written at once.

/// The bookkeeping of one connection's hold; pure.
#[derive(Debug, Default)]
pub(super) struct PassHold {
    /// The read pass under way (numbered from 1).
    pass: u64,
    /// The pass whose writes hold the replies.
    holding: u64,
    /// Its writes (one future per group) still in flight.
    waiting: usize,
}

impl PassHold {
    /// A new read pass begins.
    pub(super) fn next_pass(&mut self) {
        self.pass += 1;
    }

    /// A future of the pass under way carries writes; returns the tag it
    /// ends with. It holds the replies unless an earlier pass does.
    pub(super) fn submitted(&mut self) -> u64 {
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

    /// Whether replies wait.
    pub(super) fn holds(&self) -> bool {
        self.waiting > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_holds_until_all_its_writes_end() {
        let mut h = PassHold::default();
        h.next_pass();
        assert!(!h.holds(), "reads alone are written at once");
        let (a, b) = (h.submitted(), h.submitted());
        assert!(h.holds());
        h.ended(a);
        assert!(h.holds(), "one group's writes are still in flight");
        h.ended(b);
        assert!(!h.holds());
    }

    #[test]
    fn later_passes_do_not_extend_the_hold() {
        let mut h = PassHold::default();
        h.next_pass();
        let first = h.submitted();
        h.next_pass();
        let second = h.submitted();
        h.ended(first);
        assert!(!h.holds(), "only the first pass's writes hold");
        // The second pass's end is not counted against a later hold.
        h.next_pass();
        let third = h.submitted();
        h.ended(second);
        assert!(h.holds());
        h.ended(third);
        assert!(!h.holds());
    }

    #[test]
    fn a_new_hold_begins_after_one_ends() {
        let mut h = PassHold::default();
        h.next_pass();
        let a = h.submitted();
        h.ended(a);
        h.ended(a); // a stray end neither underflows nor holds
        assert!(!h.holds());
        h.next_pass();
        let b = h.submitted();
        assert!(h.holds());
        h.ended(b);
        assert!(!h.holds());
    }

    #[test]
    fn an_untagged_end_changes_nothing() {
        let mut h = PassHold::default();
        h.next_pass();
        h.submitted();
        h.ended(0); // answered without being proposed: never tagged
        assert!(h.holds());
    }
}
