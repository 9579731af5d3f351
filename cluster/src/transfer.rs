//! Moving a group's leadership to a chosen voter, without an election
//! timeout seen by any client: what a drain (SIGTERM, `admin drain`) and
//! the leader balancer do. openraft 0.9 has no `transfer_leader` (0.10
//! does), so it is built from what 0.9 has:
//!
//! ```text
//! leader L, target T (a voter, caught up)
//! L: stop taking writes and reads (they get NotLeader, no leader: the SDK waits and
//!    routes again), wait until T has every entry, stop heartbeats
//! L ─ TakeLead{group, to: T} ─> every other voter
//!    T: trigger().elect() at once, again after 150 ms, 300 ms, ... (at most the
//!       election timeout apart: `campaign_pause`) while it does not lead
//!    others: their own election timers off until a new leader is known (≤ 3 s), so that
//!       T, not they, takes it
//! L: wait until someone else leads (≤ 3 s), then heartbeats on again (as a follower,
//!    they do nothing); past the deadline it keeps leading and says so
//! ```
//!
//! Why this shape: a voter refuses to vote while its lease of the current
//! leader runs (0.9 checks `leader_lease`, the election timeout's upper
//! bound, since it last heard from it) — but the leader's own lease runs
//! from when it last changed its vote, its election, so a leader of more
//! than a lease's standing grants T's vote at once, and with T's own that
//! is a majority of three: T leads within a round trip. A leader elected
//! less than a lease ago refuses, and T wins when the followers' leases of
//! the quiet L run out (about 600 ms). Writes must stop with the
//! heartbeats, or their replication would renew those leases, and so that
//! T has every entry when it is elected. Measured in `docs/benchmarks.md`.

use crate::engine::Engine;
use crate::group::Group;
use crate::peer::wire::{GroupId, PeerRequest, PeerResponse};
use crate::types::NodeId;
use openraft::Vote;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// How long the target may take to catch up before the hand-off begins.
const CATCH_UP: Duration = Duration::from_secs(2);
/// How long the old leader waits for another to lead before it takes the
/// group back.
const TAKE_OVER: Duration = Duration::from_secs(3);
/// Before the target's second attempt; each further pause doubles, up to
/// the election timeout (`campaign_pause`).
const RETRY: Duration = Duration::from_millis(150);

/// The pause after campaign number `attempt` (0 for the first) before the
/// next, when no leader is known yet: `first`, doubling, at most `most`.
/// Each campaign takes a new term, and the answers to an older one are
/// ignored, so a campaign whose round (the candidate's and each voter's
/// vote written to disk, two messages) takes longer than the pause is never
/// won: at a fixed 150 ms, a slow disk kept a target campaigning from term
/// 2 to 21 in 3 s without a leader. Doubling lets rounds of any length up
/// to `most` (the election timeout, which openraft's own timer waits too)
/// finish, while a quick refusal is still tried again soon.
pub(crate) fn campaign_pause(attempt: u32, first: Duration, most: Duration) -> Duration {
    first.saturating_mul(1u32 << attempt.min(16)).min(most.max(first))
}

/// Why a hand-off did not happen.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    #[error("group {0} is not led by this node")]
    NotLeader(GroupId),
    #[error("node {1} is not a voter of group {0}")]
    NotVoter(GroupId, NodeId),
    #[error("node {1} did not catch up with group {0} in time")]
    Behind(GroupId, NodeId),
    #[error("no other node took the lead of group {0} in time; this node leads it again")]
    NotTaken(GroupId),
}

/// The voter to hand a group to: among `voters` other than `me` that are
/// `up` and not `draining`, `preferred` if it is one, else the one with the
/// most entries replicated (`matched`), the lowest id on a tie. Pure.
pub fn choose_target(
    me: NodeId,
    voters: &[NodeId],
    matched: &[(NodeId, u64)],
    usable: impl Fn(NodeId) -> bool,
    preferred: Option<NodeId>,
) -> Option<NodeId> {
    let candidates: Vec<NodeId> =
        voters.iter().copied().filter(|&v| v != me && usable(v)).collect();
    if let Some(p) = preferred.filter(|p| candidates.contains(p)) {
        return Some(p);
    }
    let progress = |v: NodeId| matched.iter().find(|(n, _)| *n == v).map_or(0, |m| m.1);
    candidates.into_iter().max_by_key(|&v| (progress(v), std::cmp::Reverse(v)))
}

/// `(voters, (node, matched index) per follower, last log index)` of a group
/// this node leads.
fn progress(g: &Group) -> (Vec<NodeId>, Vec<(NodeId, u64)>, u64) {
    let m = g.raft.metrics().borrow().clone();
    let voters = m.membership_config.membership().voter_ids().collect();
    let matched = m
        .replication
        .as_ref()
        .map(|r| r.iter().map(|(n, l)| (*n, l.map_or(0, |l| l.index))).collect())
        .unwrap_or_default();
    (voters, matched, m.last_log_index.unwrap_or(0))
}

impl Engine {
    /// Hands the leadership of `g`, led here, to `to`; returns how long the
    /// group took no writes. On failure this node still leads (or an
    /// election moved the group elsewhere meanwhile).
    pub async fn transfer_leader(
        self: &Arc<Self>,
        g: GroupId,
        to: NodeId,
    ) -> Result<Duration, TransferError> {
        let me = self.node_id();
        let group =
            self.router.group(g).filter(|x| x.is_leader()).ok_or(TransferError::NotLeader(g))?;
        let (voters, _, _) = progress(&group);
        if to == me || !voters.contains(&to) {
            return Err(TransferError::NotVoter(g, to));
        }
        // Caught up first, while writes still flow: the pause is only the lease.
        self.wait_caught_up(&group, to, CATCH_UP).await?;
        let started = Instant::now();
        group.hand_over(to);
        let res = self.hand_over_quietly(&group, g, to, &voters).await;
        group.raft.runtime_config().heartbeat(true);
        group.raft.runtime_config().elect(true);
        group.hand_over_done();
        match res {
            Ok(()) => {
                let took = started.elapsed();
                info!(group = g, to, took_ms = took.as_millis() as u64, "leadership handed over");
                Ok(took)
            }
            Err(e) => {
                warn!(group = g, to, error = %e, "leadership not handed over");
                Err(e)
            }
        }
    }

    async fn hand_over_quietly(
        self: &Arc<Self>,
        group: &Arc<Group>,
        g: GroupId,
        to: NodeId,
        voters: &[NodeId],
    ) -> Result<(), TransferError> {
        let me = self.node_id();
        // The writes proposed before the hand-off began reach the target
        // too: the queue empties into the log, and the target has it all
        // (a target behind the leader would lose the vote, and its higher
        // term would depose the leader with no one to follow).
        let last = self.wait_quiet(group, to).await?;
        // The target will campaign: no read lease here under this vote
        // again, even if the hand-over fails and this node leads on.
        let vote = group.raft.metrics().borrow().vote;
        group.retire_lease();
        group.raft.runtime_config().heartbeat(false);
        // Deposed by the target's higher term, this node must not campaign
        // itself back before the target wins.
        group.raft.runtime_config().elect(false);
        let asks = voters.iter().copied().filter(|&v| v != me).map(|v| {
            let req = PeerRequest::TakeLead { group: g, to, last, vote };
            let peers = self.peers.clone();
            async move { (v, peers.call(v, req, Duration::from_secs(1)).await) }
        });
        for (v, r) in futures::future::join_all(asks).await {
            match r {
                Ok(PeerResponse::Done) => {}
                other => debug!(group = g, node = v, ?other, "a voter did not take TakeLead"),
            }
        }
        let deadline = tokio::time::Instant::now() + TAKE_OVER;
        loop {
            let leader = group.raft.metrics().borrow().current_leader;
            if leader.is_some_and(|l| l != me) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(TransferError::NotTaken(g));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until `group` (led here, taking no writes) has handed Raft all
    /// it was given, its log has stopped growing (Raft's metrics lag its
    /// log: a quiet spell of `SETTLE` on both sides is asked), and `to` has
    /// every entry. Returns the last log index.
    async fn wait_quiet(&self, group: &Group, to: NodeId) -> Result<u64, TransferError> {
        const SETTLE: Duration = Duration::from_millis(10);
        let deadline = tokio::time::Instant::now() + CATCH_UP;
        let mut seen = None;
        loop {
            if group.raft.metrics().borrow().current_leader != Some(self.node_id()) {
                return Err(TransferError::NotLeader(group.gid));
            }
            let (_, matched, last) = progress(group);
            let caught_up = matched.iter().any(|&(n, m)| n == to && m >= last);
            if group.queue_empty() && caught_up && seen == Some(last) {
                return Ok(last);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(TransferError::Behind(group.gid, to));
            }
            seen = group.queue_empty().then_some(last);
            tokio::time::sleep(SETTLE).await;
        }
    }

    /// Waits until `to` has every entry of `group` (led here).
    async fn wait_caught_up(
        &self,
        group: &Group,
        to: NodeId,
        within: Duration,
    ) -> Result<(), TransferError> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if group.raft.metrics().borrow().current_leader != Some(self.node_id()) {
                return Err(TransferError::NotLeader(group.gid));
            }
            let (_, matched, last) = progress(group);
            if matched.iter().any(|&(n, m)| n == to && m >= last) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(TransferError::Behind(group.gid, to));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// A leader hands `g` to `to`: the target campaigns at once and again
    /// until it leads; every other voter keeps its election timer off until
    /// a new leader is known (at most `TAKE_OVER`).
    /// The target campaigns only while it still follows `vote`, the
    /// leadership that asked: a `TakeLead` that arrives late (after another
    /// leader took over) starts nothing.
    pub(crate) fn take_lead(
        self: &Arc<Self>,
        g: GroupId,
        to: NodeId,
        last: u64,
        vote: Vote<NodeId>,
    ) -> bool {
        let Some(group) = self.router.group(g) else { return false };
        let me = self.node_id();
        let old = group.raft.metrics().borrow().current_leader;
        if to == me {
            let most = Duration::from_millis(self.cfg.group.election_min_ms);
            tokio::spawn(async move {
                let deadline = Instant::now() + TAKE_OVER;
                let mut attempt = 0;
                while Instant::now() < deadline {
                    let m = group.raft.metrics().borrow().clone();
                    let leader = m.current_leader;
                    // Still the asking leadership's, or this node's own
                    // campaign for it; anyone else's vote ends the task.
                    let own = m.vote.leader_id().voted_for() == Some(me) && !m.vote.is_committed();
                    if leader == Some(me) || (leader.is_some() && leader != old) {
                        return;
                    }
                    if m.vote != vote && !own {
                        debug!(group = g, vote = %m.vote, "TakeLead came from an older leadership");
                        return;
                    }
                    if m.last_log_index.unwrap_or(0) < last {
                        // Not every entry here yet: they are on their way.
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        continue;
                    }
                    if let Err(e) = group.raft.trigger().elect().await {
                        debug!(group = g, error = %e, "triggering an election failed");
                        return;
                    }
                    tokio::time::sleep(campaign_pause(attempt, RETRY, most)).await;
                    attempt += 1;
                }
            });
        } else {
            group.raft.runtime_config().elect(false);
            tokio::spawn(async move {
                let deadline = Instant::now() + TAKE_OVER;
                while Instant::now() < deadline {
                    let leader = group.raft.metrics().borrow().current_leader;
                    if leader.is_some() && leader != old {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                group.raft.runtime_config().elect(true);
            });
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn campaigns_are_tried_again_ever_later_up_to_the_election_timeout() {
        let ms = |n| campaign_pause(n, RETRY, Duration::from_millis(450)).as_millis();
        let pauses: Vec<u128> = (0..5).map(ms).collect();
        assert_eq!(pauses, [150, 300, 450, 450, 450]);
        assert_eq!(ms(u32::MAX), 450, "no overflow");
        let floor = campaign_pause(3, RETRY, Duration::from_millis(10));
        assert_eq!(floor, RETRY, "never below the first pause");
    }

    #[test]
    fn the_preferred_voter_first_else_the_most_caught_up() {
        let all_up = |_| true;
        let matched = [(2, 90), (3, 100), (4, 100)];
        assert_eq!(choose_target(1, &[1, 2, 3, 4], &matched, all_up, Some(2)), Some(2));
        // The lowest id among the most caught up.
        assert_eq!(choose_target(1, &[1, 2, 3, 4], &matched, all_up, None), Some(3));
        // A preferred one that is down, draining or not a voter is passed over.
        assert_eq!(choose_target(1, &[1, 2, 3, 4], &matched, |v| v != 3, Some(3)), Some(4));
        assert_eq!(choose_target(1, &[1, 2, 3], &matched, all_up, Some(9)), Some(3));
        assert_eq!(choose_target(1, &[1], &[], all_up, None), None, "no one to hand to");
    }
}
