//! What an operator asks of the membership (`plaudit admin decommission`,
//! `recommission`, `rebalance`): checked and recorded in the cluster state
//! by the metadata group's leader; the moves that follow are the manager's
//! (`membership.rs`).
//!
//! A decommission is refused (`Refused`) when it would leave fewer active
//! members than the replication factor: every shard keeps its replicas on
//! distinct nodes, so there would be nowhere to move them, and taking the
//! node away anyway would leave shards a replica short of their quorum's
//! margin.

use crate::engine::Engine;
use crate::types::NodeId;
use plaudit_proto::membership::{ClusterState, MemberOp, MemberState};
use plaudit_proto::{Request, Response, WireError};

/// Whether `op` may be recorded in `state` with replication factor `rf`:
/// `Ok(true)` to record it, `Ok(false)` if it is recorded already. Pure.
pub fn check(state: &ClusterState, op: MemberOp, rf: usize) -> Result<bool, WireError> {
    let member = |n: NodeId| {
        state
            .member(n)
            .ok_or_else(|| WireError::not_found(format!("node {n} is not a member of the cluster")))
    };
    match op {
        MemberOp::Rebalance => Ok(true),
        MemberOp::Decommission(n) => {
            let m = member(n)?;
            if matches!(m.state, MemberState::Decommissioning | MemberState::Decommissioned) {
                return Ok(false);
            }
            let left = state
                .members
                .iter()
                .filter(|x| x.id != n && x.state == MemberState::Active)
                .count();
            if left < rf {
                return Err(WireError::refused(format!(
                    "decommissioning node {n} would leave {left} active member(s) for a \
                     replication factor of {rf}: add a node first"
                )));
            }
            Ok(true)
        }
        MemberOp::Recommission(n) => match member(n)?.state {
            MemberState::Active => Ok(false),
            MemberState::Decommissioning | MemberState::Decommissioned => Ok(true),
            MemberState::Dead => Err(WireError::refused(format!(
                "node {n} is dead: it becomes a member again by itself once it is up"
            ))),
        },
    }
}

/// `state` with `op` recorded (`check` said so).
fn record(state: &mut ClusterState, op: MemberOp) -> Option<()> {
    let (node, to) = match op {
        MemberOp::Rebalance => return None,
        MemberOp::Decommission(n) => (n, MemberState::Decommissioning),
        MemberOp::Recommission(n) => (n, MemberState::Active),
    };
    let m = state.members.iter_mut().find(|m| m.id == node)?;
    if m.state == to
        || (to == MemberState::Decommissioning && m.state == MemberState::Decommissioned)
    {
        return None;
    }
    m.state = to;
    Some(())
}

impl Engine {
    /// `Request::Members`, on the metadata group's leader (forwarded there).
    pub(crate) async fn member_op(
        &self,
        op: MemberOp,
        redirect: bool,
    ) -> Result<Response, WireError> {
        let meta = self.router.meta_id;
        self.router
            .on_leader(
                meta,
                redirect,
                |_| async move { self.member_op_here(op).await },
                |n| async move { self.router.forward(n, Request::Members(op)).await },
            )
            .await
    }

    async fn member_op_here(&self, op: MemberOp) -> Result<Response, WireError> {
        let state = self
            .directory
            .cluster_state()
            .ok_or_else(|| WireError::internal("the cluster has no map yet"))?;
        let rf = self.cfg.cluster.replication_factor as usize;
        if check(&state, op, rf)? {
            // Checked again on the state it is recorded in: a change that
            // got in first may have made it wrong.
            let mut refusal = None;
            self.change_state(|s| match check(s, op, rf) {
                Ok(true) => record(s, op),
                Ok(false) => None,
                Err(e) => {
                    refusal = Some(e);
                    None
                }
            })
            .await?;
            if let Some(e) = refusal {
                return Err(e);
            }
            tracing::info!(?op, "membership change recorded");
        }
        self.nudge.notify_one();
        Ok(Response::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaudit_proto::cluster::ClusterMap;
    use plaudit_proto::membership::Member;
    use plaudit_proto::ErrorCode;

    fn state(n: u64) -> ClusterState {
        let members = (1..=n)
            .map(|id| Member { id, incarnation: id, zone: None, state: MemberState::Active })
            .collect();
        ClusterState { map: ClusterMap::default(), members, moves: Vec::new() }
    }

    #[test]
    fn a_decommission_that_leaves_too_few_members_is_refused() {
        let three = state(3);
        let e = check(&three, MemberOp::Decommission(2), 3).unwrap_err();
        assert_eq!(e.code, ErrorCode::Refused, "{e}");
        let mut four = state(4);
        assert_eq!(check(&four, MemberOp::Decommission(4), 3), Ok(true));
        record(&mut four, MemberOp::Decommission(4)).unwrap();
        assert_eq!(four.member(4).unwrap().state, MemberState::Decommissioning);
        // Asked again: nothing more to record; a second node refused.
        assert_eq!(check(&four, MemberOp::Decommission(4), 3), Ok(false));
        let e = check(&four, MemberOp::Decommission(1), 3).unwrap_err();
        assert_eq!(e.code, ErrorCode::Refused);
        assert_eq!(
            check(&four, MemberOp::Decommission(9), 3).unwrap_err().code,
            ErrorCode::NotFound
        );
    }

    #[test]
    fn recommission_brings_a_leaving_member_back_but_not_a_dead_one() {
        let mut s = state(4);
        s.members[3].state = MemberState::Decommissioned;
        assert_eq!(check(&s, MemberOp::Recommission(4), 3), Ok(true));
        record(&mut s, MemberOp::Recommission(4)).unwrap();
        assert_eq!(s.member(4).unwrap().state, MemberState::Active);
        assert_eq!(check(&s, MemberOp::Recommission(4), 3), Ok(false));
        s.members[2].state = MemberState::Dead;
        assert_eq!(check(&s, MemberOp::Recommission(3), 3).unwrap_err().code, ErrorCode::Refused);
    }
}
