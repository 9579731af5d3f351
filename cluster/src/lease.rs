//! A leader's lease for reads: while a quorum of the group's voters has
//! accepted this leader's AppendEntries recently enough, no other node can
//! have been elected, so the leader serves a linearizable read from its own
//! state with no read-index round (Raft thesis §6.4.1; TiKV's lease read).
//!
//! ```text
//! leader L sends AppendEntries at S ──► follower F accepts: F's vote clock := now ≥ S
//!   F grants no vote until S + election_timeout_max (openraft's leader lease)
//!   F starts no election until S + election_timeout_min (its own timer)
//! L's own vote: a vote L grants retires its lease for good (`retire`), as
//!   does handing its leadership over (`TakeLead`), so L's vote cannot make
//!   another leader behind the lease's back
//! ⇒ until S_q + read_lease (S_q: the time by which a quorum, L counted, had
//!   accepted; read_lease < election_timeout_min), L is the only leader
//! ```
//!
//! A follower's own campaigns: openraft's election timer waits the lease
//! plus the election timeout after the leader was last heard; the
//! campaigns this node starts itself are fenced (`failover.rs` refuses
//! AppendEntries while it triggers one, after checking the leader is
//! silent; a `TakeLead` names the vote it ends). openraft restores a
//! restarted voter's vote time as its start, so a restart grants no vote
//! for the lease either.
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
    /// Votes up to this one are done with: no lease under them again.
    retired: Option<Vote<NodeId>>,
}

impl Lease {
    /// `from` accepted an AppendEntries of `vote` sent at `sent`. A newer
    /// vote (a new leadership) starts afresh; an older one's late replies
    /// are ignored.
    pub fn accepted(&self, from: NodeId, vote: &Vote<NodeId>, sent: Instant) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.is_retired(vote) {
            return;
        }
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

    /// No lease again under `current` (this node's vote now), the vote
    /// acceptances were last recorded for, or any older one: this node
    /// granted another candidate its vote, or is handing its leadership
    /// over. Called before the grant or the hand-over leaves this node, so
    /// no leader it helps elect can meet a lease still held here; late
    /// acceptances of an old vote (openraft's replication tasks outlive a
    /// step-down) are ignored.
    pub fn retire(&self, current: &Vote<NodeId>) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        for v in [Some(*current), s.vote].into_iter().flatten() {
            if !s.is_retired(&v) {
                s.retired = Some(v);
            }
        }
        s.acks.clear();
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
            if s.vote != Some(*vote) || s.is_retired(vote) {
                return false;
            }
            // Read after the state: a later clock only shortens the lease.
            let now = Instant::now();
            quorum_time(&s.acks, me, voters, now)
        };
        since.is_some_and(|t| t.elapsed() < read_lease)
    }
}

impl State {
    fn is_retired(&self, vote: &Vote<NodeId>) -> bool {
        // `LeaderId` orders totally (openraft's default, not the
        // single-term-leader feature), so `partial_cmp` always answers.
        self.retired.is_some_and(|r| vote.partial_cmp(&r) != Some(std::cmp::Ordering::Greater))
    }
}

/// The latest time `t` such that a quorum of `voters` accepted a request
/// sent at or after `t`, the leader `me` counting as `now`. `None` if no
/// quorum has.
fn quorum_time(
    acks: &[(NodeId, Instant)],
    me: NodeId,
    voters: &BTreeSet<NodeId>,
    now: Instant,
) -> Option<Instant> {
    let quorum = voters.len() / 2 + 1;
    let mut times: Vec<Instant> = voters
        .iter()
        .filter_map(|&v| {
            if v == me {
                return Some(now);
            }
            acks.iter().find(|(n, _)| *n == v).map(|(_, t)| *t)
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
        assert_eq!(quorum_time(&acks, 1, &voters(&[1, 2, 3]), now), Some(at(30)));
        // Of five, the leader and the two latest followers; the leader and
        // one follower are no quorum of five.
        let acks5 = [(2, at(10)), (3, at(30)), (4, at(20))];
        assert_eq!(quorum_time(&acks5, 1, &voters(&[1, 2, 3, 4, 5]), now), Some(at(20)));
        assert_eq!(quorum_time(&acks[..1], 1, &voters(&[1, 2, 3, 4, 5]), now), None);
        // A single voter is its own quorum.
        assert_eq!(quorum_time(&[], 1, &voters(&[1]), now), Some(now));
        // A leader outside the voters counts for nothing: two followers of
        // three are a quorum by themselves, one is not.
        assert_eq!(quorum_time(&acks, 9, &voters(&[1, 2, 3]), now), Some(at(10)));
        assert_eq!(quorum_time(&acks[..1], 9, &voters(&[1, 2, 3]), now), None);
    }

    #[test]
    fn the_lease_is_per_vote_and_retired_for_good() {
        let lease = Lease::default();
        let (v1, v2, v3) = (committed(3, 1), committed(4, 1), committed(5, 1));
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
        // Retired (a vote granted, a hand-over): never again under v2,
        // whatever is accepted later; a later leadership has its own.
        lease.retire(&v1);
        assert!(!lease.holds(&v2, 1, &three, long));
        lease.accepted(2, &v2, Instant::now());
        assert!(!lease.holds(&v2, 1, &three, long));
        lease.accepted(2, &v1, Instant::now());
        assert!(!lease.holds(&v1, 1, &three, long));
        lease.accepted(2, &v3, Instant::now());
        assert!(lease.holds(&v3, 1, &three, long));
        // Retiring the node's current vote covers a leadership no
        // acceptance was recorded for yet.
        let (v4, v5) = (committed(6, 1), committed(7, 1));
        lease.retire(&v4);
        lease.accepted(2, &v4, Instant::now());
        assert!(!lease.holds(&v4, 1, &three, long));
        lease.accepted(2, &v5, Instant::now());
        assert!(lease.holds(&v5, 1, &three, long));
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
