//! Changing who replicates a group, on the group's leader: what a replica
//! move (`mover.rs`) asks of it, step by step, over `PeerRequest::Membership`.
//!
//! ```text
//! AddLearner(to)       the target receives the log (or a snapshot) and catches up
//! Look                 how far behind it is (`GroupMembers::behind`)
//! SetVoters(voters)    openraft's change_membership (joint, then uniform); a leader that
//!                      is leaving hands its leadership to a staying voter first
//! RemoveLearner(to)    a move given up
//! ```
//!
//! Every step is idempotent (asked again after a lost answer or by a new
//! metadata leader, it changes nothing more), and each answer says where
//! the group stands after it.

use crate::engine::{internal, Engine};
use crate::group::Group;
use crate::peer::wire::{GroupId, GroupMembers, MembershipChange, PeerRequest, PeerResponse};
use crate::router::{not_leader, Hop};
use crate::types::NodeId;
use openraft::error::{ChangeMembershipError, ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers};
use plaudit_proto::WireError;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tracing::info;

/// How long one change may take on the leader: a hand-off (≤ 5 s) and two
/// configuration entries committed.
const CHANGE_FOR: Duration = Duration::from_secs(15);

/// Where `g` stands, as its leader's metrics say.
pub(crate) fn members_of(g: &Group) -> GroupMembers {
    let m = g.raft.metrics().borrow().clone();
    let config = m.membership_config.membership();
    let voters: BTreeSet<NodeId> = config.voter_ids().collect();
    GroupMembers {
        leader: m.id,
        voters: voters.iter().copied().collect(),
        learners: config.learner_ids().collect(),
        joint: config.get_joint_config().len() > 1,
        last_log: m.last_log_index.unwrap_or(0),
        matched: m
            .replication
            .as_ref()
            .map(|r| r.iter().map(|(n, l)| (*n, l.as_ref().map(|l| l.index))).collect())
            .unwrap_or_default(),
    }
}

fn change_failed(
    g: GroupId,
    e: RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>,
) -> WireError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => not_leader(g, f.leader_id, 0),
        other => internal(format!("group {g}: membership change failed: {other}")),
    }
}

impl Engine {
    /// Runs `change` on this node's replica of `group`, which must lead it.
    pub(crate) async fn change_members(
        self: &Arc<Self>,
        group: GroupId,
        change: MembershipChange,
    ) -> Result<GroupMembers, WireError> {
        let g =
            self.router.group(group).ok_or_else(|| not_leader(group, None, self.router.epoch()))?;
        if !g.is_leader() {
            let leader = g.raft.metrics().borrow().current_leader;
            return Err(not_leader(group, leader, self.router.epoch()));
        }
        let now = members_of(&g);
        match change {
            MembershipChange::Look => {}
            MembershipChange::AddLearner { node, addr } => {
                if !now.voters.contains(&node) && !now.learners.contains(&node) {
                    let adding = g.raft.add_learner(node, BasicNode { addr }, false);
                    timed(group, adding).await?;
                    info!(group, node, "learner added");
                }
            }
            MembershipChange::RemoveLearner { node } => {
                if now.learners.contains(&node) {
                    let set = BTreeSet::from([node]);
                    timed(group, g.raft.change_membership(ChangeMembers::RemoveNodes(set), false))
                        .await?;
                    info!(group, node, "learner removed");
                }
            }
            MembershipChange::SetVoters { voters, retain } => {
                let want: BTreeSet<NodeId> = voters.iter().copied().collect();
                if want.is_empty() {
                    return Err(WireError::bad_request("a group needs at least one voter"));
                }
                let current: BTreeSet<NodeId> = now.voters.iter().copied().collect();
                if now.joint || current != want {
                    let me = self.node_id();
                    if !want.contains(&me) {
                        // Leaving: a staying voter leads first, so the group
                        // is never without a leader for an election timeout.
                        return self.hand_over_then(group, &g, &now, &want, retain).await;
                    }
                    self.set_voters(group, &g, want, retain).await?;
                }
            }
        }
        Ok(members_of(&g))
    }

    async fn set_voters(
        &self,
        group: GroupId,
        g: &Group,
        want: BTreeSet<NodeId>,
        retain: bool,
    ) -> Result<(), WireError> {
        // Asked twice when the group was left in a joint configuration:
        // the first call only finishes that one.
        for _ in 0..3 {
            let m = members_of(g);
            let current: BTreeSet<NodeId> = m.voters.iter().copied().collect();
            if !m.joint && current == want {
                return Ok(());
            }
            let change = ChangeMembers::ReplaceAllVoters(want.clone());
            timed(group, g.raft.change_membership(change, retain)).await?;
            info!(group, voters = ?want, "voters changed");
        }
        let m = members_of(g);
        let current: BTreeSet<NodeId> = m.voters.iter().copied().collect();
        if !m.joint && current == want {
            Ok(())
        } else {
            Err(internal(format!("group {group}: voters are {current:?}, not {want:?}")))
        }
    }

    /// This leader leaves the voters: hands its leadership to a voter that
    /// stays and has the group asked again there (the answer is the new
    /// leader's).
    async fn hand_over_then(
        self: &Arc<Self>,
        group: GroupId,
        g: &Group,
        now: &GroupMembers,
        want: &BTreeSet<NodeId>,
        retain: bool,
    ) -> Result<GroupMembers, WireError> {
        let staying: Vec<NodeId> =
            now.voters.iter().copied().filter(|v| want.contains(v)).collect();
        let matched: Vec<(NodeId, u64)> =
            now.matched.iter().map(|(n, m)| (*n, m.unwrap_or(0))).collect();
        let me = self.node_id();
        let usable = |n: NodeId| !self.peers.is_down(n);
        let Some(to) = crate::transfer::choose_target(me, &staying, &matched, usable, None) else {
            // No voter stays (one replica moving): the change itself
            // removes this leader, which steps down once it commits.
            self.set_voters(group, g, want.clone(), retain).await?;
            return Ok(members_of(g));
        };
        self.transfer_leader(group, to)
            .await
            .map_err(|e| internal(format!("group {group}: handing over before leaving: {e}")))?;
        let change = MembershipChange::SetVoters { voters: want.iter().copied().collect(), retain };
        self.members_call(group, change).await
    }

    /// Runs `change` on the leader of `group`, here or on another node.
    pub(crate) async fn members_call(
        self: &Arc<Self>,
        group: GroupId,
        change: MembershipChange,
    ) -> Result<GroupMembers, WireError> {
        let change = &change;
        self.router
            .on_leader(
                group,
                false,
                |_| async move { Box::pin(self.change_members(group, change.clone())).await },
                |n| async move {
                    let req = PeerRequest::Membership { group, change: change.clone() };
                    match self.peers.call(n, req, CHANGE_FOR + Duration::from_secs(5)).await {
                        Ok(PeerResponse::Membership(Ok(m))) => Ok(m),
                        Ok(PeerResponse::Membership(Err(e))) => Err(Hop::Answer(e)),
                        Ok(other) => Err(Hop::unexpected(other)),
                        Err(e) => Err(e.into()),
                    }
                },
            )
            .await
    }
}

/// Bounds one change: a leader that lost its quorum would never commit it.
async fn timed<T>(
    group: GroupId,
    f: impl std::future::Future<
        Output = Result<T, RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>>,
    >,
) -> Result<T, WireError> {
    match tokio::time::timeout(CHANGE_FOR, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(e)))) => {
            Err(refused(group, e))
        }
        Ok(Err(e)) => Err(change_failed(group, e)),
        Err(_) => Err(WireError::timeout(format!(
            "group {group}: the membership change did not commit within {} s; it may still",
            CHANGE_FOR.as_secs()
        ))),
    }
}

fn refused(group: GroupId, e: ChangeMembershipError<NodeId>) -> WireError {
    WireError::bad_request(format!("group {group}: {e}"))
}
