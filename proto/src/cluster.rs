//! The cluster as clients and nodes see it: its members, where each shard's
//! replicas live, who leads them, and the status an operator reads.
//!
//! The **cluster map** (members and placement) is replicated by the
//! metadata group and changes only through it; its `epoch` rises with every
//! change, so a client holding an older map can tell. Leaders change far
//! more often (a failover) and are not replicated: each node knows the
//! leaders of the groups it is part of, and hears about the others from its
//! peers, so a **routing table** is a map plus a node's best current guess
//! of each leader.

use crate::ids::ShardId;
use serde::{Deserialize, Serialize};

/// A node's id: unique in its cluster, stable across restarts, at least 1.
pub type NodeId = u64;

/// A member of the cluster and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NodeInfo {
    pub id: NodeId,
    /// The client protocol address.
    pub client: String,
    /// The peer address (Raft and the control plane).
    pub peer: String,
    /// The admin HTTP address.
    pub admin: String,
}

/// Members and placement, as the metadata group holds them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ClusterMap {
    /// Rises with every change of the map.
    pub epoch: u64,
    /// Members, by id.
    pub nodes: Vec<NodeInfo>,
    /// Per shard (index = shard id), its replicas; the first is the node
    /// meant to lead it (leaders spread evenly when every node is up).
    pub shards: Vec<Vec<NodeId>>,
    /// The voters of the metadata group; every other member is a learner.
    pub meta_voters: Vec<NodeId>,
}

impl ClusterMap {
    pub fn node(&self, id: NodeId) -> Option<&NodeInfo> {
        self.nodes.iter().find(|n| n.id == id)
    }

    pub fn replicas(&self, shard: ShardId) -> &[NodeId] {
        self.shards.get(shard as usize).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The shards `node` holds a replica of.
    pub fn shards_of(&self, node: NodeId) -> impl Iterator<Item = ShardId> + '_ {
        self.shards
            .iter()
            .enumerate()
            .filter(move |(_, r)| r.contains(&node))
            .map(|(s, _)| s as u32)
    }
}

/// A node's view of where to send requests: the map and its best guess of
/// every leader.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoutingTable {
    pub map: ClusterMap,
    /// Per shard, the leader this node last heard of.
    pub leaders: Vec<Option<NodeId>>,
    /// The metadata group's leader, if known.
    pub meta_leader: Option<NodeId>,
}

/// How a node treats a request for a shard it does not lead, per connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Routing {
    /// Forward it to the leader and relay the answer (simple clients).
    #[default]
    Forward,
    /// Answer `NotLeader` with a hint, so a smart client goes itself.
    Redirect,
}

/// Sent once per connection, before other requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ClientHello {
    pub routing: Routing,
}

/// A member as the node serving a status request sees it. Variants are
/// only appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeState {
    /// It sent its report.
    Up,
    /// The control plane declared it down: its sessions broke, or it was
    /// silent past `peer_timeout_ms`.
    Down,
    /// Thought alive, but its report did not come in time.
    Unreachable,
}

impl NodeState {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Up => "up",
            NodeState::Down => "down",
            NodeState::Unreachable => "unreachable",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    pub info: NodeInfo,
    pub state: NodeState,
    /// Shards (not counting the metadata group) this node leads.
    pub shards_led: u32,
    /// Its state as a member, with reachability and draining (what
    /// `admin nodes` shows).
    pub life: crate::membership::NodeLife,
}

/// One replica of a group, as the replica itself reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaStatus {
    pub node: NodeId,
    /// "leader", "follower", "candidate", "learner", or with no report
    /// "unreachable" (thought alive) or "down".
    pub role: String,
    pub term: u64,
    pub applied: Option<u64>,
    /// Entries the replica has that it has not applied yet.
    pub apply_lag: u64,
    /// Entries the leader has that this replica has not acknowledged
    /// (from the leader's replication progress), if the leader reported.
    pub behind_leader: Option<u64>,
}

/// One Raft group: a data shard, or the metadata group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupStatus {
    /// The shard id; the metadata group has `None`.
    pub shard: Option<ShardId>,
    pub leader: Option<NodeId>,
    pub replicas: Vec<NodeId>,
    pub states: Vec<ReplicaStatus>,
}

/// What `plaudit admin status` shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterStatus {
    /// The node that answered.
    pub reporter: NodeId,
    pub epoch: u64,
    pub nodes: Vec<NodeStatus>,
    pub meta: GroupStatus,
    pub shards: Vec<GroupStatus>,
    /// Replica moves under way.
    pub moves: Vec<crate::membership::MoveStatus>,
}

/// The JSON shape of a status, which scripts and tests rely on:
///
/// ```text
/// {"reporter":1,"epoch":1,
///  "nodes":[{"id":1,"state":"up","life":"up","shards_led":6,"client":"..","peer":"..","admin":".."}],
///  "meta":{"leader":1,"replicas":[1,2,3],"progress":[...]},
///  "shards":[{"shard":0,"leader":1,"replicas":[1,2,3],"term":3,
///             "progress":[{"node":1,"role":"leader","term":3,"applied":120,"apply_lag":0,"behind_leader":0}]}],
///  "moves":[{"shard":0,"from":3,"to":4,"phase":"learner","bytes_done":1048576,"bytes_total":4194304}]}
/// ```
///
/// `leader` is `null` while a group has none. A node's `state` is whether
/// it can be reached (`up`, `down`, `unreachable`); `life` adds what it is
/// as a member (`draining`, `decommissioning`, `decommissioned`, `dead`).
/// A move's `from` is `null` when it adds a replica; `bytes_total` is 0
/// until a snapshot transfer begins (a target that only needed the log).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatusView {
    pub reporter: NodeId,
    pub epoch: u64,
    pub nodes: Vec<NodeView>,
    pub meta: GroupView,
    pub shards: Vec<GroupView>,
    pub moves: Vec<crate::membership::MoveStatus>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeView {
    pub id: NodeId,
    pub state: &'static str,
    pub life: &'static str,
    pub shards_led: u32,
    pub client: String,
    pub peer: String,
    pub admin: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupView {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardId>,
    pub leader: Option<NodeId>,
    pub replicas: Vec<NodeId>,
    /// The highest term any replica reported.
    pub term: u64,
    pub progress: Vec<ReplicaStatus>,
}

impl From<&GroupStatus> for GroupView {
    fn from(g: &GroupStatus) -> GroupView {
        GroupView {
            shard: g.shard,
            leader: g.leader,
            replicas: g.replicas.clone(),
            term: g.states.iter().map(|s| s.term).max().unwrap_or(0),
            progress: g.states.clone(),
        }
    }
}

impl From<&ClusterStatus> for StatusView {
    fn from(s: &ClusterStatus) -> StatusView {
        StatusView {
            reporter: s.reporter,
            epoch: s.epoch,
            nodes: s
                .nodes
                .iter()
                .map(|n| NodeView {
                    id: n.info.id,
                    state: n.state.as_str(),
                    life: n.life.as_str(),
                    shards_led: n.shards_led,
                    client: n.info.client.clone(),
                    peer: n.info.peer.clone(),
                    admin: n.info.admin.clone(),
                })
                .collect(),
            meta: GroupView::from(&s.meta),
            shards: s.shards.iter().map(GroupView::from).collect(),
            moves: s.moves.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_lists_the_shards_it_holds() {
        let map = ClusterMap {
            epoch: 1,
            nodes: vec![],
            shards: vec![vec![1, 2], vec![2, 3], vec![3, 1]],
            meta_voters: vec![1, 2, 3],
        };
        assert_eq!(map.shards_of(1).collect::<Vec<_>>(), vec![0, 2]);
        assert_eq!(map.replicas(1), &[2, 3]);
        assert!(map.replicas(9).is_empty());
    }
}
