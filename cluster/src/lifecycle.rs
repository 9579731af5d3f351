//! What the metadata group's leader changes in the cluster state on its
//! own, from what it sees of the nodes: a pure function of the state, the
//! nodes seen and the policy (`membership.rs` runs it every second and
//! proposes what it returns).
//!
//! ```text
//! a node up that is not a member            ─> member, Active (it joined)
//! a member up under a new incarnation       ─> the old one Dead (its replicas are
//!                                              replaced); once it holds nothing, the
//!                                              new one takes its place, Active
//! a member up under another address         ─> the map's address follows
//! a member down past dead_after             ─> Dead
//! a Dead member up again, same incarnation  ─> Active (its disk is intact)
//! Decommissioning and holding nothing       ─> Decommissioned
//! the metadata group's voters               ─> up to three Active members, current ones kept
//! replicas on members that cannot keep them, shards short of replicas,
//! uneven load                               ─> moves (`rebalance::plan`)
//! nothing moving, nothing to move           ─> leaderships spread (`rebalance::spread_leaders`)
//! ```
//!
//! Why a new incarnation is not simply given the old one's replicas: its
//! data directory is new, so it lacks entries it once acknowledged. Raft
//! counted those acknowledgements; a follower whose log went backwards can
//! lose committed writes (and openraft panics a leader that sees it). So
//! the old member's replicas are moved to other nodes first, as for a dead
//! node, and the new one starts with none; meanwhile every Raft message to
//! that node id names the old incarnation, which the new one refuses
//! (`wire::Fence`).

use crate::placement::META_VOTERS;
use crate::rebalance;
use crate::types::NodeId;
use plaudit_proto::cluster::NodeInfo;
use plaudit_proto::membership::{ClusterState, Incarnation, Member, MemberState};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// A node that is up, as it describes itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpNode {
    pub info: NodeInfo,
    pub incarnation: Incarnation,
    pub zone: Option<String>,
}

/// What the leader sees of the nodes now.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    /// Nodes up (the leader included), by id.
    pub up: BTreeMap<NodeId, UpNode>,
    /// For members not up: how long the leader has seen them down.
    pub down_for: BTreeMap<NodeId, Duration>,
    /// Nodes in the metadata group's membership (voters and learners).
    pub meta_nodes: BTreeSet<NodeId>,
}

#[derive(Debug, Clone)]
pub struct Policy {
    pub rf: usize,
    pub dead_after: Duration,
    /// Moves in flight per node (as source or target).
    pub per_node: usize,
    /// Which group hosts which shard: moves and leaderships are planned
    /// per group, on the groups' own shards (`Layout::own`), and every
    /// shard is placed as its group (`Layout::spread`).
    pub layout: crate::layout::Layout,
}

/// Whether `id` still has a part in `state`: a replica, a move, a vote in
/// the metadata group.
pub fn holds(state: &ClusterState, id: NodeId) -> bool {
    state.map.shards.iter().any(|r| r.contains(&id))
        || state.moves.iter().any(|m| m.to == id || m.from == Some(id))
        || state.map.meta_voters.contains(&id)
}

/// The next state, if anything changes (with the epoch raised by one).
pub fn next(state: &ClusterState, seen: &Seen, policy: &Policy) -> Option<ClusterState> {
    let mut s = state.clone();
    members(&mut s, seen, policy);
    meta_voters(&mut s);
    let up: BTreeSet<NodeId> = seen.up.keys().copied().collect();
    let own = policy.layout.own(&s.map.shards);
    let moves = rebalance::plan(own, &s.members, &up, policy.rf, &s.moves, policy.per_node);
    s.moves.extend(moves);
    if s.moves.is_empty() && s == *state {
        let spread = rebalance::spread_leaders(policy.layout.own(&s.map.shards));
        s.map.shards[..spread.len()].clone_from_slice(&spread);
    }
    policy.layout.spread(&mut s.map.shards);
    if s == *state {
        return None;
    }
    s.map.epoch = state.map.epoch + 1;
    Some(s)
}

/// Joins, incarnations, addresses, dead members, finished decommissions.
fn members(s: &mut ClusterState, seen: &Seen, policy: &Policy) {
    for (id, node) in &seen.up {
        let holds_now = holds(s, *id) || seen.meta_nodes.contains(id);
        match s.members.iter().position(|m| m.id == *id) {
            None => {
                s.members.push(Member {
                    id: *id,
                    incarnation: node.incarnation,
                    zone: node.zone.clone(),
                    state: MemberState::Active,
                });
            }
            Some(i) => {
                let m = &mut s.members[i];
                if m.incarnation == 0 {
                    // Recorded before incarnations were: this is its first.
                    m.incarnation = node.incarnation;
                } else if m.incarnation != node.incarnation {
                    if holds_now {
                        m.state = MemberState::Dead;
                        continue; // the old member's address stays until it is replaced
                    }
                    m.incarnation = node.incarnation;
                    if m.state != MemberState::Decommissioned {
                        m.state = MemberState::Active;
                    }
                } else if m.state == MemberState::Dead {
                    m.state = MemberState::Active;
                }
                m.zone = node.zone.clone();
            }
        }
        match s.map.nodes.iter_mut().find(|n| n.id == *id) {
            Some(n) => *n = node.info.clone(),
            None => {
                s.map.nodes.push(node.info.clone());
                s.map.nodes.sort_by_key(|n| n.id);
            }
        }
    }
    for m in &mut s.members {
        let down_long = seen.down_for.get(&m.id).is_some_and(|d| *d >= policy.dead_after);
        if down_long && matches!(m.state, MemberState::Active | MemberState::Decommissioning) {
            m.state = MemberState::Dead;
        }
    }
    let finished: Vec<NodeId> = s
        .members
        .iter()
        .filter(|m| m.state == MemberState::Decommissioning && !holds(s, m.id))
        .map(|m| m.id)
        .collect();
    for m in &mut s.members {
        if finished.contains(&m.id) {
            m.state = MemberState::Decommissioned;
        }
    }
}

/// Keeps the metadata voters Active members: current ones stay, the lowest
/// other Active ids fill up to `META_VOTERS`.
fn meta_voters(s: &mut ClusterState) {
    let active: Vec<NodeId> =
        s.members.iter().filter(|m| m.state == MemberState::Active).map(|m| m.id).collect();
    let mut voters: Vec<NodeId> =
        s.map.meta_voters.iter().copied().filter(|v| active.contains(v)).collect();
    let mut others: Vec<NodeId> = active.iter().copied().filter(|a| !voters.contains(a)).collect();
    others.sort_unstable();
    for o in others {
        if voters.len() >= META_VOTERS {
            break;
        }
        voters.push(o);
    }
    if voters.is_empty() {
        return; // no Active member at all: keep what there is
    }
    voters.sort_unstable();
    s.map.meta_voters = voters;
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaudit_proto::cluster::ClusterMap;
    use plaudit_proto::membership::{Move, MovePhase};

    fn info(id: NodeId) -> NodeInfo {
        NodeInfo {
            id,
            client: format!("127.0.0.1:{}", 7000 + id),
            peer: format!("127.0.0.1:{}", 8000 + id),
            admin: String::new(),
        }
    }

    fn up(ids: &[(NodeId, Incarnation)]) -> BTreeMap<NodeId, UpNode> {
        ids.iter()
            .map(|&(id, inc)| (id, UpNode { info: info(id), incarnation: inc, zone: None }))
            .collect()
    }

    fn cluster(ids: &[NodeId], shards: u32) -> ClusterState {
        let map = ClusterMap {
            epoch: 1,
            nodes: ids.iter().map(|&i| info(i)).collect(),
            shards: crate::placement::place(ids, shards, 3),
            meta_voters: crate::placement::meta_voters(ids),
        };
        let members = ids
            .iter()
            .map(|&id| Member { id, incarnation: id * 10, zone: None, state: MemberState::Active })
            .collect();
        ClusterState { map, members, moves: Vec::new() }
    }

    fn policy() -> Policy {
        Policy {
            rf: 3,
            dead_after: Duration::from_secs(300),
            per_node: 2,
            // One group per shard, for any shard count the tests use.
            layout: crate::layout::Layout::new(64, 0),
        }
    }

    /// Six shards in two groups, for `policy`'s layout.
    fn grouped() -> Policy {
        Policy { layout: crate::layout::Layout::new(6, 2), ..policy() }
    }

    #[test]
    fn moves_are_planned_per_group_and_every_shard_is_placed_as_its_group() {
        let mut s = cluster(&[1, 2, 3, 4], 6);
        grouped().layout.spread(&mut s.map.shards);
        let view = seen(&[(1, 10), (2, 20), (3, 30), (4, 40)]);
        s.members[3].state = MemberState::Decommissioning;
        let n = next(&s, &view, &grouped()).unwrap();
        assert!(!n.moves.is_empty());
        // Only the groups (0 and 1) move: a move of their own shard moves
        // every shard they host.
        assert!(n.moves.iter().all(|m| m.shard < 2), "{:?}", n.moves);
        for (i, r) in n.map.shards.iter().enumerate() {
            assert_eq!(*r, n.map.shards[i % 2], "shard {i}");
        }
    }

    fn seen(upn: &[(NodeId, Incarnation)]) -> Seen {
        Seen { up: up(upn), ..Seen::default() }
    }

    #[test]
    fn a_balanced_cluster_with_everyone_up_changes_nothing() {
        let s = cluster(&[1, 2, 3], 6);
        assert_eq!(next(&s, &seen(&[(1, 10), (2, 20), (3, 30)]), &policy()), None);
    }

    #[test]
    fn a_new_node_joins_and_gets_moves() {
        let s = cluster(&[1, 2, 3], 6);
        let n = next(&s, &seen(&[(1, 10), (2, 20), (3, 30), (4, 40)]), &policy()).unwrap();
        assert_eq!(n.map.epoch, 2);
        assert_eq!(n.member(4).map(|m| (m.incarnation, m.state)), Some((40, MemberState::Active)));
        assert!(n.map.node(4).is_some());
        assert_eq!(n.moves.len(), 2, "per_node bounds what node 4 takes at once: {:?}", n.moves);
        assert!(n.moves.iter().all(|m| m.to == 4 && m.phase == MovePhase::Learner));
    }

    #[test]
    fn a_new_incarnation_replaces_the_old_member_only_once_it_holds_nothing() {
        let s = cluster(&[1, 2, 3, 4], 8);
        let view = seen(&[(1, 10), (2, 20), (3, 30), (4, 41)]);
        let n = next(&s, &view, &policy()).unwrap();
        let m4 = n.member(4).unwrap();
        assert_eq!((m4.incarnation, m4.state), (40, MemberState::Dead), "old one replaced");
        assert!(n.moves.iter().all(|m| m.to != 4));
        assert!(n.moves.iter().any(|m| m.from == Some(4)), "its replicas move: {:?}", n.moves);
        // Once nothing is on node 4 (and it left the metadata group), the
        // new incarnation becomes the member.
        let mut empty = n.clone();
        for r in &mut empty.map.shards {
            if let Some(p) = r.iter().position(|x| *x == 4) {
                r[p] = if r.contains(&1) {
                    if r.contains(&2) {
                        3
                    } else {
                        2
                    }
                } else {
                    1
                };
            }
        }
        empty.moves.clear();
        let n2 = next(&empty, &view, &policy()).unwrap();
        let m4 = n2.member(4).unwrap();
        assert_eq!((m4.incarnation, m4.state), (41, MemberState::Active));
        let mut in_meta = view.clone();
        in_meta.meta_nodes.insert(4);
        let n3 = next(&empty, &in_meta, &policy());
        assert!(
            n3.is_none_or(|n| n.member(4).unwrap().incarnation == 40),
            "still in the metadata group"
        );
    }

    #[test]
    fn a_member_down_too_long_is_dead_and_its_replicas_move() {
        let s = cluster(&[1, 2, 3, 4], 8);
        let mut view = seen(&[(1, 10), (2, 20), (3, 30)]);
        view.down_for.insert(4, Duration::from_secs(60));
        let n = next(&s, &view, &policy());
        assert!(n.is_none(), "down a minute: nothing yet ({n:?})");
        view.down_for.insert(4, Duration::from_secs(300));
        let n = next(&s, &view, &policy()).unwrap();
        assert_eq!(n.member(4).unwrap().state, MemberState::Dead);
        assert!(n.moves.iter().all(|m| m.from == Some(4) && m.to != 4), "{:?}", n.moves);
        // It comes back with its disk: Active again.
        let back = next(&n, &seen(&[(1, 10), (2, 20), (3, 30), (4, 40)]), &policy()).unwrap();
        assert_eq!(back.member(4).unwrap().state, MemberState::Active);
    }

    #[test]
    fn a_decommission_ends_once_nothing_is_left() {
        let mut s = cluster(&[1, 2, 3, 4], 4);
        s.members[3].state = MemberState::Decommissioning;
        let view = seen(&[(1, 10), (2, 20), (3, 30), (4, 40)]);
        let n = next(&s, &view, &policy()).unwrap();
        assert_eq!(n.member(4).unwrap().state, MemberState::Decommissioning);
        assert!(!n.moves.is_empty());
        let mut done = n.clone();
        done.moves.clear();
        for r in &mut done.map.shards {
            r.retain(|x| *x != 4);
            for c in [1, 2, 3] {
                if r.len() < 3 && !r.contains(&c) {
                    r.push(c);
                }
            }
        }
        let end = next(&done, &view, &policy()).unwrap();
        assert_eq!(end.member(4).unwrap().state, MemberState::Decommissioned);
    }

    #[test]
    fn metadata_voters_stay_active_members() {
        let mut s = cluster(&[1, 2, 3, 4, 5], 5);
        s.members[0].state = MemberState::Decommissioning;
        let view = seen(&[(1, 10), (2, 20), (3, 30), (4, 40), (5, 50)]);
        let n = next(&s, &view, &policy()).unwrap();
        assert_eq!(n.map.meta_voters, vec![2, 3, 4]);
        // A one-node cluster grown to three gets three voters.
        let one = cluster(&[1], 2);
        let n = next(&one, &seen(&[(1, 10), (2, 20), (3, 30)]), &policy()).unwrap();
        assert_eq!(n.map.meta_voters, vec![1, 2, 3]);
        assert!(n.moves.iter().all(|m| m.from.is_none()), "shards gain replicas: {:?}", n.moves);
    }

    #[test]
    fn moves_under_way_are_kept() {
        let mut s = cluster(&[1, 2, 3], 3);
        s.members.push(Member { id: 4, incarnation: 40, zone: None, state: MemberState::Active });
        s.map.nodes.push(info(4));
        s.moves.push(Move { shard: 0, from: Some(1), to: 4, phase: MovePhase::Promoting });
        let view = seen(&[(1, 10), (2, 20), (3, 30), (4, 40)]);
        if let Some(n) = next(&s, &view, &policy()) {
            assert_eq!(n.moves[0], s.moves[0]);
        }
    }
}
