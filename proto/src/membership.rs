//! Who belongs to the cluster, as the metadata group replicates it beside
//! the cluster map (`cluster.rs`): each member's identity and lifecycle, and
//! the replica moves under way.
//!
//! **Identity is `(id, incarnation)`.** The incarnation is a random number
//! a node makes when it creates its data directory. A node that comes back
//! with its id but an empty directory has a new incarnation: it is a new
//! member, and the old one's replicas are replaced, never resumed (a Raft
//! leader whose follower's log went backwards would fail).
//!
//! ```text
//!            decommission                  replicas all moved off
//! Active ─────────────────> Decommissioning ───────────────────────> Decommissioned
//!   ^  │ <───────────────── recommission
//!   │  │ down past dead_node_timeout_secs
//!   │  └──────────────────> Dead  (its replicas rebuilt elsewhere; if it comes back,
//!   │                              it joins again as a new incarnation)
//!   └── joined (a node the cluster did not have, or a new incarnation)
//! ```
//!
//! Whether a member is up, down or draining its leaderships is not
//! replicated: every node sees that for itself (`cluster::NodeState`).

use crate::cluster::{ClusterMap, NodeId};
use crate::ids::ShardId;
use serde::{Deserialize, Serialize};

/// What a data directory's creation made: tells a node's lives apart.
pub type Incarnation = u64;

/// Variants are only appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MemberState {
    /// Holds and takes replicas.
    Active,
    /// Its replicas are being moved off; it takes no new ones.
    Decommissioning,
    /// Holds no replica; may be stopped for good, or recommissioned.
    Decommissioned,
    /// Down past `dead_node_timeout_secs`: its replicas are rebuilt on
    /// other nodes.
    Dead,
}

impl MemberState {
    pub fn as_str(self) -> &'static str {
        match self {
            MemberState::Active => "active",
            MemberState::Decommissioning => "decommissioning",
            MemberState::Decommissioned => "decommissioned",
            MemberState::Dead => "dead",
        }
    }

    /// Whether the member may be given replicas.
    pub fn takes_replicas(self) -> bool {
        self == MemberState::Active
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub id: NodeId,
    /// 0 for a member recorded before incarnations existed.
    pub incarnation: Incarnation,
    /// The failure domain (`--zone`), if given: two replicas of a shard are
    /// never placed in one zone while another zone has room.
    pub zone: Option<String>,
    pub state: MemberState,
}

/// Where a replica move stands. Variants are only appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MovePhase {
    /// The target is being added to the group as a learner and catches up.
    Learner,
    /// The target becomes a voter and the source leaves the group.
    Promoting,
}

impl MovePhase {
    pub fn as_str(self) -> &'static str {
        match self {
            MovePhase::Learner => "learner",
            MovePhase::Promoting => "promoting",
        }
    }
}

/// One replica of a shard going from one node to another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    pub shard: ShardId,
    /// `None`: a replica added (a shard below its replication factor).
    pub from: Option<NodeId>,
    pub to: NodeId,
    pub phase: MovePhase,
}

/// A move as the status shows it (`admin status`, `moves`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveStatus {
    pub shard: ShardId,
    pub from: Option<NodeId>,
    pub to: NodeId,
    /// `learner` or `promoting` (`MovePhase::as_str`).
    pub phase: String,
    /// Of the snapshot sent to the target (0 and 0 before one is sent).
    pub bytes_done: u64,
    pub bytes_total: u64,
}

/// What `Request::Members` asks of the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MemberOp {
    /// Moves every replica off the node, then marks it decommissioned
    /// (refused when too few active members would be left).
    Decommission(NodeId),
    /// Makes a decommissioning or decommissioned member active again.
    Recommission(NodeId),
    /// Plans moves now instead of at the next round.
    Rebalance,
}

/// The cluster map with its members and moves: what the metadata group
/// holds, under one epoch (the map's).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ClusterState {
    pub map: ClusterMap,
    /// One per node of `map.nodes`, same order not implied.
    pub members: Vec<Member>,
    pub moves: Vec<Move>,
}

impl ClusterState {
    /// The state of a map recorded before members were: every node an
    /// active member of unknown incarnation, no move.
    pub fn from_map(map: ClusterMap) -> ClusterState {
        let members = map
            .nodes
            .iter()
            .map(|n| Member { id: n.id, incarnation: 0, zone: None, state: MemberState::Active })
            .collect();
        ClusterState { map, members, moves: Vec::new() }
    }

    pub fn member(&self, id: NodeId) -> Option<&Member> {
        self.members.iter().find(|m| m.id == id)
    }

    pub fn epoch(&self) -> u64 {
        self.map.epoch
    }
}

/// A node as `plaudit admin nodes` shows it. Variants are only appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeLife {
    Up,
    Down,
    /// Thought alive, but it did not report in time.
    Unreachable,
    /// Handing its leaderships away (`admin drain`, a SIGTERM).
    Draining,
    Decommissioning,
    Decommissioned,
    Dead,
}

impl NodeLife {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeLife::Up => "up",
            NodeLife::Down => "down",
            NodeLife::Unreachable => "unreachable",
            NodeLife::Draining => "draining",
            NodeLife::Decommissioning => "decommissioning",
            NodeLife::Decommissioned => "decommissioned",
            NodeLife::Dead => "dead",
        }
    }
}

/// One row of `plaudit admin nodes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRow {
    pub id: NodeId,
    pub incarnation: Incarnation,
    /// Its client address.
    pub addr: String,
    pub peer: String,
    pub zone: Option<String>,
    pub state: NodeLife,
    /// Data shards it holds a replica of.
    pub replicas: u32,
    /// Data shards it leads.
    pub leaders: u32,
}

/// The JSON shape of `plaudit admin nodes --json`, which tests and scripts
/// rely on: `{"nodes":[{"id":1,"incarnation":"…","addr":"…","state":"up",
/// "replicas":4,"leaders":2,"peer":"…","zone":null}]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodesView {
    pub nodes: Vec<NodeView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeView {
    pub id: NodeId,
    /// 16 hex digits.
    pub incarnation: String,
    pub addr: String,
    pub state: &'static str,
    pub replicas: u32,
    pub leaders: u32,
    pub peer: String,
    pub zone: Option<String>,
}

impl From<&[NodeRow]> for NodesView {
    fn from(rows: &[NodeRow]) -> NodesView {
        NodesView {
            nodes: rows
                .iter()
                .map(|r| NodeView {
                    id: r.id,
                    incarnation: format!("{:016x}", r.incarnation),
                    addr: r.addr.clone(),
                    state: r.state.as_str(),
                    replicas: r.replicas,
                    leaders: r.leaders,
                    peer: r.peer.clone(),
                    zone: r.zone.clone(),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::NodeInfo;

    #[test]
    fn a_map_from_before_members_makes_every_node_active() {
        let info = |id| NodeInfo {
            id,
            client: format!("c{id}"),
            peer: format!("p{id}"),
            admin: format!("a{id}"),
        };
        let map = ClusterMap {
            epoch: 3,
            nodes: vec![info(1), info(2)],
            shards: vec![vec![1, 2]],
            meta_voters: vec![1, 2],
        };
        let s = ClusterState::from_map(map.clone());
        assert_eq!(s.epoch(), 3);
        assert_eq!(s.map, map);
        assert_eq!(s.member(2).map(|m| (m.incarnation, m.state)), Some((0, MemberState::Active)));
        assert!(s.moves.is_empty());
    }
}
