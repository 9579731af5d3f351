//! A leader's lease for reads: while a quorum of the group's voters has
//! accepted this leader's AppendEntries recently enough, no other node can
//! have been elected, so the leader serves a linearizable read from its own
//! state with no read-index round (Raft thesis §6.4.1; TiKV's lease read).
//!
//! ```text
//! leader L sends AppendEntries at S ──► follower F accepts: F's vote clock := now ≥ S
//!   F grants no vote until S + election_timeout_max (openraft's leader lease)
//!   F starts no election until S + election_timeout_min (its own timer)
//! L's own vote: every vote request L handles voids the lease so far (`void`),
//!   so a vote L grants cannot make another leader behind the lease's back
//! ⇒ until S_q + read_lease (S_q: the time by which a quorum, L counted, had
//!   accepted; read_lease < election_timeout_min), L is the only leader
//! ```
//!
//! The times are the sender's: an acceptance counts from when its request
//! was sent (before the follower's clock moved), never from when the reply
//! arrived, so a slow network only shortens the lease. Clocks are each
//! node's monotonic clock; only their rates must agree, to far better than
//! the margin between `read_lease` and the election timeout.
//!
//! The state here is pure bookkeeping (`quorum_time` is the rule); the
//! group (`group.rs`) adds what Raft's metrics say: that this node leads
//! under the vote the acceptances were given to, has applied an entry of
//! its term, and is not handing its leadership over.

use crate::types::NodeId;
use openraft::Vote;
use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Acceptances of one leader's AppendEntries, by voter.
#[derive(Debug, Default)]
pub struct Lease {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The leader's vote the acceptances were given under.
    vote: Option<Vote<NodeId>>,
    /// Per voter, the send time of the latest AppendEntries it accepted.
    acks: Vec<(NodeId, Instant)>,
    /// Acceptances of requests sent at or before this do not count: this
    /// node handled a vote request then (and may have granted it).
    void_before: Option<Instant>,
}

impl Lease {
    /// `from` accepted an AppendEntries of `vote` sent at `sent`. A newer
    /// vote (a new leadership) starts afresh; an older one's late replies
    /// are ignored.
    pub fn accepted(&self, from: NodeId, vote: &Vote<NodeId>, sent: Instant) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match s.vote {
            Some(v) if v == *vote => {}
            // Not newer (older, or incomparable): a late reply of another leadership.
            Some(v) if vote.partial_cmp(&v) != Some(std::cmp::Ordering::Greater) => return,
            _ => {
                s.vote = Some(*vote);
                s.acks.clear();
            }
        }
        match s.acks.iter_mut().find(|(n, _)| *n == from) {
            Some((_, t)) => *t = (*t).max(sent),
            None => s.acks.push((from, sent)),
        }
    }

    /// This node just handled a vote request (whatever it answered): no
    /// acceptance of a request sent until now counts any more. Called after
    /// Raft handled it and before the answer leaves, so a vote this node
    /// granted can elect nobody while the lease still stands, and a leader
    /// that granted one sends no AppendEntries of its old vote afterwards.
    pub fn void(&self, now: Instant) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.void_before = Some(s.void_before.map_or(now, |v| v.max(now)));
    }

    /// Whether a read may rely on the lease now: `me` leads under `vote`,
    /// whose voters are `voters` (one configuration, not a joint one), and
    /// a quorum of them, `me` included, accepted a request sent within
    /// `read_lease` of now.
    pub fn holds(
        &self,
        vote: &Vote<NodeId>,
        me: NodeId,
        voters: &BTreeSet<NodeId>,
        read_lease: Duration,
    ) -> bool {
        let since = {
            let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if s.vote != Some(*vote) {
                return false;
            }
            // Read after the state: a later clock only shortens the lease.
            let now = Instant::now();
            quorum_time(&s.acks, me, voters, now, s.void_before)
        };
        since.is_some_and(|t| t.elapsed() < read_lease)
    }
}

/// The latest time `t` such that a quorum of `voters` accepted a request
/// sent at or after `t`: the leader `me` counts as `now`, acceptances sent
/// at or before `void_before` not at all. `None` if no quorum has.
fn quorum_time(
    acks: &[(NodeId, Instant)],
    me: NodeId,
    voters: &BTreeSet<NodeId>,
    now: Instant,
    void_before: Option<Instant>,
) -> Option<Instant> {
    let quorum = voters.len() / 2 + 1;
    let mut times: Vec<Instant> = voters
        .iter()
        .filter_map(|&v| {
            if v == me {
                return Some(now);
            }
            let (_, t) = acks.iter().find(|(n, _)| *n == v)?;
            void_before.is_none_or(|void| *t > void).then_some(*t)
        })
        .collect();
    if times.len() < quorum {
        return None;
    }
    times.sort_unstable_by(|a, b| b.cmp(a));
    Some(times[quorum - 1])
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::Vote;

    fn voters(ids: &[NodeId]) -> BTreeSet<NodeId> {
        ids.iter().copied().collect()
    }

    fn committed(term: u64, node: NodeId) -> Vote<NodeId> {
        let mut v = Vote::new(term, node);
        v.commit();
        v
    }

    #[test]
    fn a_quorum_counts_the_leader_as_now_and_the_kth_latest_follower() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let acks = [(2, at(10)), (3, at(30))];
        let now = at(50);
        // Of three, the leader and the latest follower.
        assert_eq!(quorum_time(&acks, 1, &voters(&[1, 2, 3]), now, None), Some(at(30)));
        // Of five, the leader and the two latest followers; the leader and
        // one follower are no quorum of five.
        let acks5 = [(2, at(10)), (3, at(30)), (4, at(20))];
        assert_eq!(quorum_time(&acks5, 1, &voters(&[1, 2, 3, 4, 5]), now, None), Some(at(20)));
        assert_eq!(quorum_time(&acks[..1], 1, &voters(&[1, 2, 3, 4, 5]), now, None), None);
        // A single voter is its own quorum.
        assert_eq!(quorum_time(&[], 1, &voters(&[1]), now, None), Some(now));
        // A leader outside the voters counts for nothing: two followers of
        // three are a quorum by themselves, one is not.
        assert_eq!(quorum_time(&acks, 9, &voters(&[1, 2, 3]), now, None), Some(at(10)));
        assert_eq!(quorum_time(&acks[..1], 9, &voters(&[1, 2, 3]), now, None), None);
    }

    #[test]
    fn acceptances_sent_before_a_handled_vote_request_do_not_count() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let acks = [(2, at(10)), (3, at(30))];
        let v = voters(&[1, 2, 3]);
        assert_eq!(quorum_time(&acks, 1, &v, at(50), Some(at(20))), Some(at(30)));
        assert_eq!(quorum_time(&acks, 1, &v, at(50), Some(at(30))), None);
    }

    #[test]
    fn the_lease_is_per_vote_and_voided_by_a_vote_request() {
        let lease = Lease::default();
        let (v1, v2) = (committed(3, 1), committed(4, 1));
        let three = voters(&[1, 2, 3]);
        let long = Duration::from_secs(60);
        assert!(!lease.holds(&v1, 1, &three, long), "no acceptance yet");
        lease.accepted(2, &v1, Instant::now());
        assert!(lease.holds(&v1, 1, &three, long));
        assert!(!lease.holds(&v2, 1, &three, long), "another vote's acceptances");
        // A newer vote starts afresh; the old one's late replies are ignored.
        lease.accepted(3, &v2, Instant::now());
        lease.accepted(2, &v1, Instant::now());
        assert!(lease.holds(&v2, 1, &three, long));
        assert!(!lease.holds(&v1, 1, &three, long));
        // A handled vote request voids what was accepted before it...
        lease.void(Instant::now());
        assert!(!lease.holds(&v2, 1, &three, long));
        // ...and what is accepted after it counts again.
        std::thread::sleep(Duration::from_millis(2));
        lease.accepted(2, &v2, Instant::now());
        assert!(lease.holds(&v2, 1, &three, long));
    }

    #[test]
    fn the_lease_runs_out() {
        let lease = Lease::default();
        let v = committed(3, 1);
        lease.accepted(2, &v, Instant::now());
        std::thread::sleep(Duration::from_millis(20));
        assert!(!lease.holds(&v, 1, &voters(&[1, 2, 3]), Duration::from_millis(10)));
        assert!(lease.holds(&v, 1, &voters(&[1, 2, 3]), Duration::from_secs(10)));
    }
}
