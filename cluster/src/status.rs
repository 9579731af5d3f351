//! What a node tells clients and operators about the cluster: the routing
//! table smart clients route by, and the status `plaudit admin status`
//! prints (every node up or down, every group's replicas and their
//! progress, gathered from every reachable node).

use crate::engine::Engine;
use crate::peer::wire::{GroupReport, PeerRequest, PeerResponse};
use crate::router::Leader;
use crate::types::NodeId;
use plaudit_proto::cluster::{
    ClusterStatus, GroupStatus, NodeState, NodeStatus, ReplicaStatus, RoutingTable,
};
use std::collections::BTreeMap;
use std::time::Duration;

/// How long a status request waits for each node's report.
const REPORT_TIMEOUT: Duration = Duration::from_secs(1);

impl Engine {
    pub(crate) fn routing_table(&self) -> RoutingTable {
        let map = self.directory.cluster().map(|m| (*m).clone()).unwrap_or_default();
        let leader = |g| match self.router.leader(g) {
            Leader::Here(_) => Some(self.node_id()),
            Leader::There(n) => Some(n),
            Leader::Unknown => None,
        };
        RoutingTable {
            leaders: (0..self.cfg.shards).map(leader).collect(),
            meta_leader: leader(self.router.meta_id),
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
            let leader_report = mine.iter().find(|(_, x)| x.role == "leader");
            let leader = leader_report.map(|(n, _)| *n);
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
                        role: "down".into(),
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
        let nodes = map
            .nodes
            .iter()
            .map(|n| NodeStatus {
                info: n.clone(),
                state: if n.id == me || up.contains(&n.id) {
                    NodeState::Up
                } else {
                    NodeState::Down
                },
                shards_led: shards.iter().filter(|s| s.leader == Some(n.id)).count() as u32,
            })
            .collect();
        ClusterStatus { reporter: me, epoch: map.epoch, nodes, meta, shards }
    }
}
