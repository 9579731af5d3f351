//! What should move next so that every shard has its replicas on active
//! members, spread evenly: a pure function of the placement, the members
//! and the moves under way, which the metadata group's leader calls
//! (`membership.rs`) and an operator reads the result of.
//!
//! ```text
//! replicas on a member that is not active (decommissioning, dead, gone)
//!     ─> move to the least loaded active member that can take it        (first)
//! a shard with fewer than rf replicas      ─> add one on the least loaded (next)
//! some member holds more than its share    ─> move one of its replicas to the least
//!                                             loaded member that can take it (last)
//! "can take it": active, not holding the shard, not the target of a move of it, and
//! not in a zone that holds the shard while another zone could
//! ```
//!
//! Bounds: one move per shard at a time, and at most `per_node` moves in
//! flight that involve any one member (as source or target), so a new node
//! is not flooded with snapshots and a leaving one is drained at a pace
//! (a source that is down is not counted: it sends nothing).
//! Each member ends with `shards × rf / members` replicas, ±1.
//!
//! Leaderships follow the placement's first replica (`leaders.rs`);
//! `spread_leaders` reorders each shard's replicas so those firsts are
//! spread evenly too (each member leads `shards / members`, ±1), which
//! moves no data.

use crate::types::NodeId;
use plaudit_proto::membership::{Member, Move, MovePhase};
use std::collections::{BTreeMap, BTreeSet};

/// The moves to start now, given the current `placement` (replicas per
/// shard), the `members`, which nodes are `up`, the replication factor,
/// the moves under way and the most moves one member may take part in at
/// once. An active member that is down keeps its replicas (it may be
/// restarting) but is given none, and none of its are balanced away.
pub fn plan(
    placement: &[Vec<NodeId>],
    members: &[Member],
    up: &BTreeSet<NodeId>,
    rf: usize,
    under_way: &[Move],
    per_node: usize,
) -> Vec<Move> {
    let active: Vec<&Member> = members.iter().filter(|m| m.state.takes_replicas()).collect();
    if active.is_empty() {
        return Vec::new();
    }
    let zone = |id: NodeId| -> Option<String> {
        members
            .iter()
            .find(|m| m.id == id)
            .map(|m| m.zone.clone().unwrap_or_else(|| format!("#{id}")))
    };
    let rf = rf.min(active.len());
    // Replicas each member holds or will hold once the moves under way end.
    let mut load: BTreeMap<NodeId, usize> = active.iter().map(|m| (m.id, 0)).collect();
    let mut held: Vec<BTreeSet<NodeId>> =
        placement.iter().map(|r| r.iter().copied().collect()).collect();
    for m in under_way {
        if let Some(h) = held.get_mut(m.shard as usize) {
            h.insert(m.to);
            if let Some(f) = m.from {
                h.remove(&f);
            }
        }
    }
    for h in &held {
        for n in h {
            if let Some(l) = load.get_mut(n) {
                *l += 1;
            }
        }
    }
    let mut busy: BTreeMap<NodeId, usize> = BTreeMap::new();
    let mut shard_busy: BTreeSet<u32> = BTreeSet::new();
    for m in under_way {
        shard_busy.insert(m.shard);
        *busy.entry(m.to).or_default() += 1;
        if let Some(f) = m.from {
            *busy.entry(f).or_default() += 1;
        }
    }
    let is_active = |id: NodeId| active.iter().any(|m| m.id == id);
    let total: usize = held.iter().map(|h| h.iter().filter(|n| is_active(**n)).count()).sum();
    let ceil = total.div_ceil(active.len()).max(1);
    let mut out = Vec::new();

    // The member to take a replica of shard `s` (held by `h`), if any: the
    // least loaded, in a zone the shard is not in if one has room.
    let pick_target = |h: &BTreeSet<NodeId>,
                       load: &BTreeMap<NodeId, usize>,
                       busy: &BTreeMap<NodeId, usize>,
                       leaving: Option<NodeId>|
     -> Option<NodeId> {
        let zones: BTreeSet<Option<String>> =
            h.iter().filter(|n| Some(**n) != leaving).map(|n| zone(*n)).collect();
        let candidates = load.iter().filter(|(n, _)| {
            up.contains(n) && !h.contains(n) && busy.get(n).copied().unwrap_or(0) < per_node
        });
        let fresh_zone = |n: &NodeId| !zones.contains(&zone(*n));
        let best = |c: &mut dyn Iterator<Item = (&NodeId, &usize)>| {
            c.min_by_key(|(n, l)| (**l, **n)).map(|(n, _)| *n)
        };
        let mut in_fresh = candidates.clone().filter(|(n, _)| fresh_zone(n));
        best(&mut in_fresh).or_else(|| best(&mut candidates.clone()))
    };

    // 1. Replicas on members that are not active leave first.
    for (s, h) in held.clone().iter().enumerate() {
        let s32 = s as u32;
        if shard_busy.contains(&s32) {
            continue;
        }
        let Some(&leaving) = h.iter().find(|n| !is_active(**n)) else { continue };
        // A source that is up sends the snapshot, so it is paced; one that
        // is down or gone sends nothing (the target is still paced).
        let sends = up.contains(&leaving) && is_known(members, leaving);
        if sends && busy.get(&leaving).copied().unwrap_or(0) >= per_node {
            continue;
        }
        if let Some(to) = pick_target(h, &load, &busy, Some(leaving)) {
            push(
                &mut out,
                &mut held,
                &mut load,
                &mut busy,
                &mut shard_busy,
                s32,
                Some(leaving),
                to,
            );
        }
    }
    // 2. Shards below the replication factor gain one.
    for (s, h) in held.clone().iter().enumerate() {
        let s32 = s as u32;
        // Replicas on members leaving are replaced one for one by step 1.
        if shard_busy.contains(&s32) || h.len() >= rf {
            continue;
        }
        if let Some(to) = pick_target(h, &load, &busy, None) {
            push(&mut out, &mut held, &mut load, &mut busy, &mut shard_busy, s32, None, to);
        }
    }
    // 3. Members above their share give one to the least loaded.
    while let Some((&from, &most)) = load
        .iter()
        .filter(|(n, _)| up.contains(n) && busy.get(n).copied().unwrap_or(0) < per_node)
        .max_by_key(|(n, l)| (**l, std::cmp::Reverse(**n)))
    {
        let least = load.iter().filter(|(n, _)| up.contains(n)).map(|(_, l)| *l).min().unwrap_or(0);
        if most <= ceil && most <= least + 1 {
            break;
        }
        let candidate = held.iter().enumerate().find_map(|(s, h)| {
            let s32 = s as u32;
            if shard_busy.contains(&s32) || !h.contains(&from) {
                return None;
            }
            let to = pick_target(h, &load, &busy, Some(from))?;
            (load[&to] + 1 < most).then_some((s32, to))
        });
        let Some((s, to)) = candidate else { break };
        push(&mut out, &mut held, &mut load, &mut busy, &mut shard_busy, s, Some(from), to);
    }
    out
}

fn is_known(members: &[Member], id: NodeId) -> bool {
    members.iter().any(|m| m.id == id)
}

#[allow(clippy::too_many_arguments)]
fn push(
    out: &mut Vec<Move>,
    held: &mut [BTreeSet<NodeId>],
    load: &mut BTreeMap<NodeId, usize>,
    busy: &mut BTreeMap<NodeId, usize>,
    shard_busy: &mut BTreeSet<u32>,
    shard: u32,
    from: Option<NodeId>,
    to: NodeId,
) {
    out.push(Move { shard, from, to, phase: MovePhase::Learner });
    let h = &mut held[shard as usize];
    h.insert(to);
    *load.entry(to).or_default() += 1;
    *busy.entry(to).or_default() += 1;
    if let Some(f) = from {
        h.remove(&f);
        if let Some(l) = load.get_mut(&f) {
            *l = l.saturating_sub(1);
        }
        *busy.entry(f).or_default() += 1;
    }
    shard_busy.insert(shard);
}

/// Reorders each shard's replicas so that the first ones (the nodes meant
/// to lead) spread evenly over the members: a shard keeps its first
/// replica unless that member already leads more than its share.
pub fn spread_leaders(placement: &[Vec<NodeId>]) -> Vec<Vec<NodeId>> {
    let nodes: BTreeSet<NodeId> = placement.iter().flatten().copied().collect();
    if nodes.is_empty() {
        return placement.to_vec();
    }
    let share = placement.len().div_ceil(nodes.len());
    let mut leads: BTreeMap<NodeId, usize> = nodes.iter().map(|n| (*n, 0)).collect();
    let mut out = placement.to_vec();
    // Keep the current first replica where it is within its share.
    let mut open = Vec::new();
    for (s, r) in out.iter().enumerate() {
        match r.first() {
            Some(f) if leads[f] < share => *leads.get_mut(f).expect("a member") += 1,
            Some(_) => open.push(s),
            None => {}
        }
    }
    for s in open {
        let r = &mut out[s];
        let Some(pos) = (0..r.len()).min_by_key(|&i| (leads[&r[i]], i)) else { continue };
        *leads.get_mut(&r[pos]).expect("a member") += 1;
        let chosen = r.remove(pos);
        r.insert(0, chosen);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaudit_proto::membership::MemberState;
    use proptest::prelude::*;

    fn member(id: NodeId, state: MemberState) -> Member {
        Member { id, incarnation: 1, zone: None, state }
    }

    fn active(ids: &[NodeId]) -> Vec<Member> {
        ids.iter().map(|&i| member(i, MemberState::Active)).collect()
    }

    fn all_up(members: &[Member]) -> BTreeSet<NodeId> {
        members.iter().map(|m| m.id).collect()
    }

    /// Applies moves to a placement, as the mover would in the end.
    fn apply(placement: &mut [Vec<NodeId>], moves: &[Move]) {
        for m in moves {
            let r = &mut placement[m.shard as usize];
            if let Some(f) = m.from {
                r.retain(|n| *n != f);
            }
            r.push(m.to);
        }
    }

    fn loads(placement: &[Vec<NodeId>]) -> BTreeMap<NodeId, usize> {
        let mut l = BTreeMap::new();
        for r in placement {
            for n in r {
                *l.entry(*n).or_default() += 1;
            }
        }
        l
    }

    /// Plans and applies until nothing is left to do (bounded).
    fn settle(placement: &mut Vec<Vec<NodeId>>, members: &[Member], rf: usize, per_node: usize) {
        for _ in 0..200 {
            let moves = plan(placement, members, &all_up(members), rf, &[], per_node);
            if moves.is_empty() {
                return;
            }
            apply(placement, &moves);
        }
        panic!("the plan never settled: {placement:?}");
    }

    #[test]
    fn a_new_node_takes_its_share_at_a_bounded_pace() {
        let mut p = crate::placement::place(&[1, 2, 3], 6, 3);
        let members = active(&[1, 2, 3, 4]);
        let first = plan(&p, &members, &all_up(&members), 3, &[], 2);
        assert_eq!(first.len(), 2, "at most two moves involve node 4 at once: {first:?}");
        assert!(first.iter().all(|m| m.to == 4 && m.from.is_some()));
        settle(&mut p, &members, 3, 2);
        let l = loads(&p);
        assert_eq!(l.len(), 4);
        assert!(l.values().all(|&n| n == 4 || n == 5), "18 replicas on 4 nodes: {l:?}");
        assert!(p.iter().all(|r| r.len() == 3 && r.iter().collect::<BTreeSet<_>>().len() == 3));
    }

    #[test]
    fn a_decommissioning_node_is_emptied_and_a_shard_below_rf_is_filled() {
        let mut p = crate::placement::place(&[1, 2, 3, 4], 8, 3);
        let mut members = active(&[1, 2, 3, 4]);
        members[3].state = MemberState::Decommissioning;
        settle(&mut p, &members, 3, 8);
        assert!(p.iter().all(|r| !r.contains(&4) && r.len() == 3), "{p:?}");
        // A shard that lost a replica (its node removed) gains one back.
        let gone = p[0][0];
        p[0].retain(|n| *n != gone);
        settle(&mut p, &active(&[1, 2, 3]), 3, 8);
        assert_eq!(p[0].len(), 3);
    }

    #[test]
    fn moves_under_way_are_counted_and_their_shards_left_alone() {
        let p = crate::placement::place(&[1, 2, 3], 3, 3);
        let members = active(&[1, 2, 3, 4]);
        let under_way = vec![Move { shard: 0, from: Some(1), to: 4, phase: MovePhase::Learner }];
        let next = plan(&p, &members, &all_up(&members), 3, &under_way, 1);
        assert!(next.iter().all(|m| m.shard != 0 && m.to != 4 && m.from != Some(1)), "{next:?}");
    }

    #[test]
    fn a_member_that_is_down_keeps_its_replicas_and_gets_none() {
        let p = crate::placement::place(&[1, 2, 3], 6, 2);
        let members = active(&[1, 2, 3, 4]);
        let up: BTreeSet<NodeId> = [1, 2, 4].into();
        let moves = plan(&p, &members, &up, 2, &[], 6);
        assert!(!moves.is_empty(), "node 4 is given replicas");
        assert!(moves.iter().all(|m| m.from != Some(3) && m.to != 3), "{moves:?}");
        let none_up = plan(&p, &members, &[1, 2, 3].into(), 2, &[], 6);
        assert!(none_up.iter().all(|m| m.to != 4), "node 4 is down: {none_up:?}");
    }

    #[test]
    fn replicas_avoid_sharing_a_zone_while_another_has_room() {
        let mut members = active(&[1, 2, 3, 4, 5, 6]);
        for m in &mut members {
            m.zone = Some(format!("z{}", m.id.div_ceil(2))); // z1: 1,2  z2: 3,4  z3: 5,6
        }
        // Every shard starts in zones z1 and z2 only.
        let mut p: Vec<Vec<NodeId>> = (0..6).map(|s| vec![1 + s % 2, 3 + s % 2]).collect();
        settle(&mut p, &members, 3, 6);
        for r in &p {
            let zones: BTreeSet<u64> = r.iter().map(|n| n.div_ceil(2)).collect();
            assert_eq!(zones.len(), 3, "one replica per zone: {r:?}");
        }
    }

    #[test]
    fn leaders_spread_without_moving_data() {
        let p = vec![
            vec![1, 2, 3],
            vec![1, 3, 2],
            vec![1, 2, 3],
            vec![2, 1, 3],
            vec![1, 2, 3],
            vec![1, 3, 2],
        ];
        let s = spread_leaders(&p);
        let mut leads: BTreeMap<NodeId, usize> = BTreeMap::new();
        for (r, old) in s.iter().zip(&p) {
            *leads.entry(r[0]).or_default() += 1;
            let (mut a, mut b) = (r.clone(), old.clone());
            a.sort_unstable();
            b.sort_unstable();
            assert_eq!(a, b, "the same replicas");
        }
        assert!(leads.values().all(|&n| n == 2), "{leads:?}");
    }

    proptest! {
        /// From any placement on any members, settling reaches: every shard
        /// with min(rf, members) replicas on distinct active members, loads
        /// within one of each other.
        #[test]
        fn settling_balances(
            nodes in prop::collection::btree_set(1u64..12, 1..7),
            extra in prop::collection::btree_set(1u64..12, 0..4),
            shards in 1usize..24,
            rf in 1usize..4,
        ) {
            let start: Vec<NodeId> = nodes.iter().copied().collect();
            let mut p = crate::placement::place(&start, shards as u32, rf as u32);
            let all: BTreeSet<NodeId> = nodes.union(&extra).copied().collect();
            let members = active(&all.iter().copied().collect::<Vec<_>>());
            settle(&mut p, &members, rf, 3);
            let want = rf.min(all.len());
            for r in &p {
                prop_assert_eq!(r.len(), want);
                prop_assert_eq!(r.iter().collect::<BTreeSet<_>>().len(), want);
            }
            let l = loads(&p);
            let (min, max) = (
                all.iter().map(|n| l.get(n).copied().unwrap_or(0)).min().unwrap(),
                all.iter().map(|n| l.get(n).copied().unwrap_or(0)).max().unwrap(),
            );
            prop_assert!(max - min <= 1, "loads {:?}", l);
        }
    }
}
