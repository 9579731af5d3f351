//! What a node tells clients and operators about the cluster: the routing
//! table smart clients route by, and the status `plaudit admin status`
//! prints (every node's state, every group's replicas and their progress,
//! gathered from every reachable node).
//!
//! The status says only what it knows: a node is `down` when the control
//! plane declared it so (`liveness.rs`), `unreachable` when it is thought
//! alive but its report did not arrive in time, `up` when it reported. A
//! group's leader is the one its replicas' reports name at the highest term
//! any of them has (`leader_of`): a node cut off from the others, still
//! believing it leads in an older term, is not shown as leader by a node
//! that can see the newer one.

use crate::engine::Engine;
use crate::peer::wire::{GroupReport, PeerRequest, PeerResponse};
use crate::router::Leader;
use crate::types::NodeId;
use plaudit_proto::cluster::{
    ClusterStatus, GroupStatus, NodeState, NodeStatus, ReplicaStatus, RoutingTable,
};
use plaudit_proto::membership::{MemberState, MovePhase, MoveStatus, NodeLife};
use std::collections::BTreeMap;
use std::time::Duration;

/// How long a status request waits for each node's report.
const REPORT_TIMEOUT: Duration = Duration::from_secs(1);

impl Engine {
    /// The node leading group `g`, as far as this node knows.
    pub(crate) fn leader_id(&self, g: u32) -> Option<NodeId> {
        match self.router.leader(g) {
            Leader::Here(_) => Some(self.node_id()),
            Leader::There(n) => Some(n),
            Leader::Unknown => None,
        }
    }

    pub(crate) fn routing_table(&self) -> RoutingTable {
        let map = self.directory.cluster().map(|m| (*m).clone()).unwrap_or_default();
        RoutingTable {
            leaders: (0..self.cfg.shards).map(|g| self.leader_id(g)).collect(),
            meta_leader: self.leader_id(self.router.meta_id),
            map,
        }
    }

    pub(crate) async fn cluster_status(&self) -> ClusterStatus {
        let map = self.directory.cluster().map(|m| (*m).clone()).unwrap_or_default();
        let me = self.node_id();
        let up: Vec<NodeId> = match self.control.lock().ok().and_then(|c| c.clone()) {
            Some(c) => c.view().up.into_iter().collect(),
            None => Vec::new(),
        };
        let live = |n: NodeId| n == me || up.contains(&n);
        let mut reports: BTreeMap<NodeId, Vec<GroupReport>> = BTreeMap::new();
        reports.insert(me, self.report());
        let asks =
            map.nodes.iter().filter(|n| n.id != me && up.contains(&n.id)).map(|n| async move {
                let r = self.peers.call(n.id, PeerRequest::Report, REPORT_TIMEOUT).await;
                (n.id, r)
            });
        for (id, r) in futures::future::join_all(asks).await {
            if let Ok(PeerResponse::Report(r)) = r {
                reports.insert(id, r);
            }
        }
        let group = |g: u32, replicas: Vec<NodeId>| {
            let mine: Vec<(NodeId, &GroupReport)> = replicas
                .iter()
                .filter_map(|r| reports.get(r)?.iter().find(|x| x.group == g).map(|x| (*r, x)))
                .collect();
            // Shown only if it is not down: a group whose leader died has
            // none until it elects one.
            let leader = leader_of(&mine).filter(|&l| live(l));
            let leader_report = mine.iter().find(|(n, _)| Some(*n) == leader);
            let states = replicas
                .iter()
                .map(|r| match mine.iter().find(|(n, _)| n == r) {
                    Some((_, x)) => ReplicaStatus {
                        node: *r,
                        role: x.role.clone(),
                        term: x.term,
                        applied: x.applied,
                        apply_lag: x.last_log.unwrap_or(0).saturating_sub(x.applied.unwrap_or(0)),
                        behind_leader: leader_report.and_then(|(_, l)| {
                            let last = l.last_log?;
                            if Some(*r) == leader {
                                return Some(0);
                            }
                            let matched = l.matched.iter().find(|(n, _)| n == r)?.1;
                            Some(last.saturating_sub(matched.unwrap_or(0)))
                        }),
                    },
                    None => ReplicaStatus {
                        node: *r,
                        role: if live(*r) { "unreachable" } else { "down" }.into(),
                        term: 0,
                        applied: None,
                        apply_lag: 0,
                        behind_leader: None,
                    },
                })
                .collect();
            GroupStatus { shard: None, leader, replicas, states }
        };
        let shards: Vec<GroupStatus> = (0..map.shards.len() as u32)
            .map(|s| GroupStatus { shard: Some(s), ..group(s, map.replicas(s).to_vec()) })
            .collect();
        let mut meta_members: Vec<NodeId> = map.nodes.iter().map(|n| n.id).collect();
        meta_members.sort_unstable();
        let meta = group(self.router.meta_id, meta_members);
        let state = self.directory.cluster_state();
        let view = self.control.lock().ok().and_then(|c| c.clone()).map(|c| c.view());
        let nodes = map
            .nodes
            .iter()
            .map(|n| {
                let reach = if reports.contains_key(&n.id) {
                    NodeState::Up
                } else if live(n.id) {
                    NodeState::Unreachable
                } else {
                    NodeState::Down
                };
                let draining = if n.id == me {
                    self.is_draining()
                } else {
                    view.as_ref().is_some_and(|v| v.draining.contains(&n.id))
                };
                let member = state.as_ref().and_then(|s| s.member(n.id)).map(|m| m.state);
                NodeStatus {
                    info: n.clone(),
                    state: reach,
                    shards_led: shards.iter().filter(|s| s.leader == Some(n.id)).count() as u32,
                    life: life(member, reach, draining),
                }
            })
            .collect();
        let moves = state.as_ref().map_or_else(Vec::new, |st| {
            st.moves
                .iter()
                .map(|m| {
                    let leader = shards.get(m.shard as usize).and_then(|g| g.leader);
                    let report = leader.and_then(|l| {
                        reports.get(&l)?.iter().find(|r| r.group == m.shard && r.role == "leader")
                    });
                    let total = report.map_or(0, |r| r.snapshot_bytes);
                    let sent = report
                        .and_then(|r| r.sending.iter().find(|(n, _)| *n == m.to))
                        .map(|(_, b)| *b);
                    let done = match (m.phase, sent) {
                        (MovePhase::Promoting, Some(_)) => total,
                        (_, Some(b)) => b.min(total),
                        (_, None) => 0,
                    };
                    MoveStatus {
                        shard: m.shard,
                        from: m.from,
                        to: m.to,
                        phase: m.phase.as_str().to_string(),
                        bytes_done: done,
                        bytes_total: if sent.is_some() { total } else { 0 },
                    }
                })
                .collect()
        });
        ClusterStatus { reporter: me, epoch: map.epoch, nodes, meta, shards, moves }
    }
}

/// A group's leader as its replicas report it: among the reports at the
/// highest term any of them has, the replica that says it leads, else the
/// leader a replica at that term names. (Raft has at most one leader per
/// term; a replica that leads in an older term has been deposed.)
pub(crate) fn leader_of(reports: &[(NodeId, &GroupReport)]) -> Option<NodeId> {
    let term = reports.iter().map(|(_, r)| r.term).max()?;
    let top = || reports.iter().filter(move |(_, r)| r.term == term);
    top()
        .find(|(_, r)| r.role == "leader")
        .map(|(n, _)| *n)
        .or_else(|| top().find_map(|(_, r)| r.leader))
}

impl Engine {
    /// `admin nodes`: every member, with what this node knows of it.
    pub(crate) async fn nodes(&self) -> Vec<plaudit_proto::membership::NodeRow> {
        use plaudit_proto::membership::NodeRow;
        let status = self.cluster_status().await;
        let state = self.directory.cluster_state();
        status
            .nodes
            .iter()
            .map(|n| {
                let id = n.info.id;
                let member = state.as_ref().and_then(|s| s.member(id).cloned());
                let replicas = status.shards.iter().filter(|g| g.replicas.contains(&id)).count();
                NodeRow {
                    id,
                    incarnation: member.as_ref().map_or(0, |m| m.incarnation),
                    addr: n.info.client.clone(),
                    peer: n.info.peer.clone(),
                    zone: member.and_then(|m| m.zone),
                    state: n.life,
                    replicas: replicas as u32,
                    leaders: n.shards_led,
                }
            })
            .collect()
    }
}

/// What a node is, as `admin nodes` shows it: its member state first, then
/// whether it can be reached, then whether it drains.
fn life(member: Option<MemberState>, reach: NodeState, draining: bool) -> NodeLife {
    match (member, reach) {
        (Some(MemberState::Dead), _) => NodeLife::Dead,
        (Some(MemberState::Decommissioned), _) => NodeLife::Decommissioned,
        (Some(MemberState::Decommissioning), _) => NodeLife::Decommissioning,
        (_, NodeState::Down) => NodeLife::Down,
        (_, NodeState::Unreachable) => NodeLife::Unreachable,
        (_, NodeState::Up) if draining => NodeLife::Draining,
        (_, NodeState::Up) => NodeLife::Up,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(role: &str, term: u64, leader: Option<NodeId>) -> GroupReport {
        GroupReport {
            group: 0,
            role: role.into(),
            term,
            leader,
            applied: None,
            last_log: None,
            matched: vec![],
            sending: vec![],
            snapshot_bytes: 0,
        }
    }

    #[test]
    fn the_leader_is_the_one_of_the_highest_term() {
        // Node 1 still believes it leads in term 4; 2 and 3 elected 2 in term 5.
        let (a, b, c) = (
            report("leader", 4, Some(1)),
            report("leader", 5, Some(2)),
            report("follower", 5, Some(2)),
        );
        assert_eq!(leader_of(&[(1, &a), (2, &b), (3, &c)]), Some(2));
        // Without the new leader's own report, its follower names it.
        assert_eq!(leader_of(&[(1, &a), (3, &c)]), Some(2));
        // Only the deposed one's report: it is all that is known.
        assert_eq!(leader_of(&[(1, &a)]), Some(1));
        // An election under way in term 6: nobody leads it yet.
        let cand = report("candidate", 6, None);
        assert_eq!(leader_of(&[(1, &a), (2, &b), (3, &cand)]), None);
        assert_eq!(leader_of(&[]), None);
    }
}
