//! What `plaudit-bench hot` checks every read against: for each counted key
//! (an entity's likes, a member's score on a board), the running totals of
//! what was sent and what was acknowledged, and the highest value a node
//! answered, with when. A value read is true for some moment after `since`
//! (when the read, or the read that filled the cache entry it came from,
//! was sent) and before `until` (when its answer arrived) only if it is at
//! most everything sent before `until`, and at least what a node answered
//! before `since` (values only grow, and a node's reads are linearizable)
//! and, for a board, everything acknowledged before `since`.
//!
//! An entity's count is not bounded by acknowledged likes: a like is
//! acknowledged by the user's shard, and reaches the entity's shard's count
//! shortly after, through the outbox (docs/architecture.md).
//!
//! Times are taken under the ledger's lock, so each key's entries are in
//! time order and can be searched.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

/// A counted key: `(board, member)` of a score, or `(ENTITY, entity)` of
/// an entity's likes.
pub type Key = (u64, u64);

const ENTITY: u64 = u64::MAX;

/// The entity key of `entity`.
pub fn entity(entity: u64) -> Key {
    (ENTITY, entity)
}

#[derive(Default)]
struct Totals {
    /// (when, running total) of sends and of acknowledgements.
    sent: Vec<(Instant, i64)>,
    acked: Vec<(Instant, i64)>,
    /// (when, the highest value a node answered so far).
    seen: Vec<(Instant, i64)>,
}

/// The total of `line` at `at`: the last entry before it.
fn total_before(line: &[(Instant, i64)], at: Instant) -> i64 {
    let n = line.partition_point(|(t, _)| *t < at);
    if n == 0 {
        0
    } else {
        line[n - 1].1
    }
}

fn add(line: &mut Vec<(Instant, i64)>, at: Instant, delta: i64) {
    let total = line.last().map_or(0, |(_, t)| *t) + delta;
    line.push((at, total));
}

#[derive(Default)]
pub struct Ledger {
    keys: Mutex<HashMap<Key, Totals>>,
}

/// A read outside its bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub key: Key,
    pub value: i64,
    pub at_least: i64,
    pub at_most: i64,
}

impl Ledger {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Totals>> {
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes of `delta` to each key are about to be sent.
    pub fn sent(&self, writes: &[(Key, i64)]) {
        let mut keys = self.lock();
        let now = Instant::now();
        for &(k, d) in writes {
            add(&mut keys.entry(k).or_default().sent, now, d);
        }
    }

    /// Writes were acknowledged as applied.
    pub fn acked(&self, writes: &[(Key, i64)]) {
        let mut keys = self.lock();
        let now = Instant::now();
        for &(k, d) in writes {
            add(&mut keys.entry(k).or_default().acked, now, d);
        }
    }

    /// Checks values read: each of `key` was true after `since` and before
    /// `until`. Returns the ones that cannot have been. A node's answers
    /// (`from_node`) raise the floor of later reads.
    pub fn check(
        &self,
        reads: &[(Key, i64)],
        since: Instant,
        until: Instant,
        from_node: bool,
    ) -> Vec<Violation> {
        let mut keys = self.lock();
        let now = Instant::now();
        let mut bad = Vec::new();
        for &(key, value) in reads {
            let t = keys.entry(key).or_default();
            let mut at_least = total_before(&t.seen, since);
            if key.0 != ENTITY {
                at_least = at_least.max(total_before(&t.acked, since));
            }
            let at_most = total_before(&t.sent, until);
            if value < at_least || value > at_most {
                bad.push(Violation { key, value, at_least, at_most });
            } else if from_node && t.seen.last().is_none_or(|(_, top)| value > *top) {
                t.seen.push((now, value));
            }
        }
        bad
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_board_read_must_show_what_was_acknowledged_before_it_and_nothing_not_yet_sent() {
        let l = Ledger::default();
        let k = (3, 7);
        let before_all = Instant::now();
        l.sent(&[(k, 1), (k, 1)]);
        let between = Instant::now();
        l.acked(&[(k, 1)]);
        std::thread::sleep(Duration::from_millis(2));
        let after_ack = Instant::now();
        // Before anything was sent, only 0 can have been read.
        assert!(l.check(&[(k, 0)], before_all, before_all, false).is_empty());
        assert_eq!(l.check(&[(k, 1)], before_all, before_all, false).len(), 1);
        // Sent, not acknowledged: 0, 1 or 2.
        for v in 0..=2 {
            assert!(l.check(&[(k, v)], between, between, false).is_empty(), "{v}");
        }
        assert_eq!(l.check(&[(k, 3)], between, after_ack, false)[0].at_most, 2);
        // A read sent after the acknowledgement must show it.
        let bad = l.check(&[(k, 0)], after_ack, after_ack, false);
        assert_eq!(bad, vec![Violation { key: k, value: 0, at_least: 1, at_most: 2 }]);
        assert!(l.check(&[(k, 1)], after_ack, after_ack, false).is_empty());
        // A key never written reads 0.
        assert_eq!(l.check(&[((3, 8), 1)], after_ack, after_ack, false).len(), 1);
    }

    #[test]
    fn an_entity_read_must_show_what_a_node_answered_before_it() {
        let l = Ledger::default();
        let k = entity(7);
        l.sent(&[(k, 1), (k, 1)]);
        l.acked(&[(k, 1), (k, 1)]);
        let acked = Instant::now();
        // Acknowledged likes may not have reached the count yet.
        assert!(l.check(&[(k, 0)], acked, acked, true).is_empty());
        assert!(l.check(&[(k, 2)], acked, acked, true).is_empty());
        std::thread::sleep(Duration::from_millis(2));
        let later = Instant::now();
        // A node answered 2 before this read was sent: 1 is older.
        let bad = l.check(&[(k, 1)], later, later, false);
        assert_eq!(bad, vec![Violation { key: k, value: 1, at_least: 2, at_most: 2 }]);
        // A read sent before that answer may be older.
        assert!(l.check(&[(k, 1)], acked, later, false).is_empty());
    }
}
