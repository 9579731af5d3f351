//! Which peers are alive, from what this node has heard of them lately.
//!
//! ractor_cluster reports a session gone when its TCP connection breaks:
//! a crash or a reset is seen in milliseconds, but a silent partition
//! (packets dropped, no RST) leaves the session open until TCP gives up,
//! many minutes later. So every node sends each peer a beat on the control
//! session every [`BEAT_EVERY`], and a peer not heard from (beat, gossip,
//! or a new session) within the deadline is declared down whatever TCP
//! says: the control plane then drops its sessions and its data
//! connections and redials, failover starts, and routing stops choosing
//! it. Session events stay the fast path for a crash.
//!
//! Pure: the control loop tells it what it heard and asks who is overdue.

use crate::types::NodeId;
use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// How often a node beats to every peer it has a session with.
pub const BEAT_EVERY: Duration = Duration::from_millis(200);

#[derive(Debug)]
pub struct Liveness {
    deadline: Duration,
    heard: HashMap<NodeId, Instant>,
}

impl Liveness {
    /// A peer silent for `deadline` is down.
    pub fn new(deadline: Duration) -> Liveness {
        Liveness { deadline, heard: HashMap::new() }
    }

    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// Something arrived from `node` at `now`.
    pub fn heard(&mut self, node: NodeId, now: Instant) {
        self.heard.insert(node, now);
    }

    /// The nodes of `up` not heard from within the deadline at `now`
    /// (a node never heard from counts from when it came up: callers
    /// record that with `heard`).
    pub fn overdue(&self, up: &BTreeSet<NodeId>, now: Instant) -> Vec<NodeId> {
        up.iter()
            .copied()
            .filter(|n| {
                self.heard
                    .get(n)
                    .is_none_or(|&at| now.saturating_duration_since(at) >= self.deadline)
            })
            .collect()
    }

    /// How long since `node` was last heard from.
    pub fn silent_for(&self, node: NodeId, now: Instant) -> Option<Duration> {
        self.heard.get(&node).map(|&at| now.saturating_duration_since(at))
    }

    pub fn forget(&mut self, node: NodeId) {
        self.heard.remove(&node);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_is_overdue_once_silent_for_the_deadline() {
        let t0 = Instant::now();
        let mut l = Liveness::new(Duration::from_millis(1000));
        let up: BTreeSet<NodeId> = [2, 3, 4].into_iter().collect();
        l.heard(2, t0);
        l.heard(3, t0);
        // 4 was never heard from: overdue at once.
        assert_eq!(l.overdue(&up, t0), vec![4]);
        let later = t0 + Duration::from_millis(999);
        l.heard(3, later);
        assert_eq!(l.overdue(&up, later), vec![4]);
        let at = t0 + Duration::from_millis(1000);
        assert_eq!(l.overdue(&up, at), vec![2, 4]);
        assert_eq!(l.silent_for(3, at), Some(Duration::from_millis(1)));
        l.forget(2);
        assert_eq!(l.silent_for(2, at), None);
        // Only nodes that are up are reported.
        let only3: BTreeSet<NodeId> = [3].into_iter().collect();
        assert!(l.overdue(&only3, at).is_empty());
    }
}
