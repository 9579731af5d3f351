//! Moving one replica of a shard from one node to another, driven by the
//! metadata group's leader, one task per move (`membership.rs` starts
//! them). Written for replicas; moving a hot actor between shards is the
//! same shape (a copy catches up, then ownership switches in one step).
//!
//! ```text
//! recorded (cluster state: move {shard, from, to, Learner})
//!   └─ shard leader: AddLearner(to)          the target starts an empty replica
//!        (`replicas.rs`) and receives a snapshot, then the log
//!   └─ caught up (within CAUGHT_UP entries)  ─> phase Promoting (recorded)
//!   └─ shard leader: SetVoters(voters - from + to)   joint, then uniform; a leaving
//!        leader hands over first (`group_members.rs`)
//!   └─ the map: `to` in `from`'s place, the move gone (recorded); `from` drops its replica
//! gave up (the target stopped being Active, or made no progress for STALL)
//!   └─ RemoveLearner(to), then the move gone (recorded)
//! ```
//!
//! Each step is recorded before the next begins and every step can be
//! asked again, so a new metadata leader resumes a move from its phase.
//! Order matters for the nodes' drops (`replicas.rs`): the map stops naming
//! a node only after the group removed it.

use crate::engine::Engine;
use crate::peer::wire::{GroupMembers, MembershipChange};
use crate::types::NodeId;
use plaudit_proto::membership::{ClusterState, MemberState, Move, MovePhase};
use plaudit_proto::WireError;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// A learner this close to the leader's log is promoted.
const CAUGHT_UP: u64 = 64;
/// A learner that gains no entry for this long is given up on.
const STALL: Duration = Duration::from_secs(120);
/// Between two looks at a learner's progress.
const POLL: Duration = Duration::from_millis(500);

/// The move of `shard` in `state`, if it is still there.
fn current(state: &ClusterState, shard: u32) -> Option<Move> {
    state.moves.iter().find(|m| m.shard == shard).cloned()
}

/// `replicas` with `m` done: `to` in `from`'s place (the first replica is
/// the one meant to lead), or added at the end.
pub(crate) fn replicas_after(replicas: &[NodeId], m: &Move) -> Vec<NodeId> {
    if replicas.contains(&m.to) && m.from.is_none_or(|f| !replicas.contains(&f)) {
        return replicas.to_vec(); // done already
    }
    let mut out: Vec<NodeId> = replicas.iter().copied().filter(|r| *r != m.to).collect();
    match m.from.and_then(|f| out.iter().position(|r| *r == f)) {
        Some(i) => out[i] = m.to,
        None => out.push(m.to),
    }
    out
}

impl Engine {
    /// Drives the move of `shard` until it is done, given up, or this node
    /// stops leading the metadata group.
    pub(crate) async fn drive_move(self: Arc<Self>, shard: u32) {
        let mut progress: Option<(u64, Instant)> = None;
        loop {
            if !self.leads_meta() {
                return;
            }
            let Some(state) = self.directory.cluster_state() else { return };
            let Some(m) = current(&state, shard) else { return };
            let target_ok = state.member(m.to).is_some_and(|t| t.state == MemberState::Active);
            let step = match m.phase {
                MovePhase::Learner if !target_ok => {
                    self.give_up(&m, "its target is not active").await
                }
                MovePhase::Learner => self.catch_up(&state, &m, &mut progress).await,
                MovePhase::Promoting => self.promote(&m).await,
            };
            match step {
                Ok(true) => continue,
                Ok(false) => tokio::time::sleep(POLL).await,
                Err(e) => {
                    debug!(shard, error = %e, "a move step failed; trying again");
                    tokio::time::sleep(POLL * 2).await;
                }
            }
        }
    }

    /// The learner step: adds it (again, idempotent) and watches it catch up.
    /// `Ok(true)`: it moved on to promotion.
    async fn catch_up(
        self: &Arc<Self>,
        state: &ClusterState,
        m: &Move,
        progress: &mut Option<(u64, Instant)>,
    ) -> Result<bool, WireError> {
        let addr = state.map.node(m.to).map(|n| n.peer.clone()).unwrap_or_default();
        let change = MembershipChange::AddLearner { node: m.to, addr };
        let now = self.members_call(m.shard, change).await?;
        let matched = matched(&now, m.to);
        if now.voters.contains(&m.to) || now.behind(m.to).is_some_and(|b| b <= CAUGHT_UP) {
            self.set_phase(m, MovePhase::Promoting).await?;
            return Ok(true);
        }
        match progress {
            Some((seen, since)) if *seen >= matched => {
                if since.elapsed() >= STALL {
                    let why = format!("no progress for {} s", STALL.as_secs());
                    return self.give_up(m, &why).await;
                }
            }
            _ => *progress = Some((matched, Instant::now())),
        }
        Ok(false)
    }

    /// The promotion step: the voters change, then the map.
    async fn promote(self: &Arc<Self>, m: &Move) -> Result<bool, WireError> {
        let now = self.members_call(m.shard, MembershipChange::Look).await?;
        let mut voters: Vec<NodeId> =
            now.voters.iter().copied().filter(|v| Some(*v) != m.from).collect();
        if !voters.contains(&m.to) {
            voters.push(m.to);
        }
        let change = MembershipChange::SetVoters { voters, retain: false };
        self.members_call(m.shard, change).await?;
        let done = m.clone();
        self.change_state(move |s| {
            let i = s.moves.iter().position(|x| *x == done)?;
            s.moves.remove(i);
            let shard = done.shard as usize;
            let replicas = replicas_after(s.map.shards.get(shard)?, &done);
            s.map.shards[shard] = replicas;
            Some(())
        })
        .await?;
        info!(shard = m.shard, from = ?m.from, to = m.to, "replica moved");
        Ok(true)
    }

    /// Gives a move up: its learner leaves the group, then the move the state.
    async fn give_up(self: &Arc<Self>, m: &Move, why: &str) -> Result<bool, WireError> {
        warn!(shard = m.shard, to = m.to, why, "giving up a replica move");
        self.members_call(m.shard, MembershipChange::RemoveLearner { node: m.to }).await?;
        let gone = m.clone();
        self.change_state(move |s| {
            let i = s.moves.iter().position(|x| *x == gone)?;
            s.moves.remove(i);
            Some(())
        })
        .await?;
        Ok(true)
    }

    async fn set_phase(self: &Arc<Self>, m: &Move, phase: MovePhase) -> Result<(), WireError> {
        let was = m.clone();
        self.change_state(move |s| {
            let x = s.moves.iter_mut().find(|x| **x == was)?;
            x.phase = phase;
            Some(())
        })
        .await
        .map(|_| ())
    }
}

fn matched(m: &GroupMembers, node: NodeId) -> u64 {
    m.matched.iter().find(|(n, _)| *n == node).and_then(|x| x.1).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mv(from: Option<NodeId>, to: NodeId) -> Move {
        Move { shard: 0, from, to, phase: MovePhase::Promoting }
    }

    #[test]
    fn the_target_takes_the_source_place_so_the_preferred_leader_is_kept_in_order() {
        assert_eq!(replicas_after(&[1, 2, 3], &mv(Some(1), 4)), vec![4, 2, 3]);
        assert_eq!(replicas_after(&[1, 2, 3], &mv(Some(3), 4)), vec![1, 2, 4]);
        assert_eq!(replicas_after(&[1, 2], &mv(None, 4)), vec![1, 2, 4]);
        // Done twice: the same map.
        assert_eq!(replicas_after(&[4, 2, 3], &mv(Some(1), 4)), vec![4, 2, 3]);
    }
}
