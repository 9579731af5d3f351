//! Where shards live: which nodes hold each shard's replicas, and which of
//! them is meant to lead it. Pure, so a future rebalancer calls the same
//! function with the new member list.
//!
//! Shard `s` goes to `rf` consecutive nodes of the sorted member list,
//! starting at node `s mod n`, which is also its preferred leader:
//!
//! ```text
//! nodes 1..=5, rf 3:  shard 0 -> [1,2,3]  shard 1 -> [2,3,4]  shard 2 -> [3,4,5]
//!                     shard 3 -> [4,5,1]  shard 4 -> [5,1,2]  shard 5 -> [1,2,3] ...
//! ```
//!
//! So replicas of a shard are on distinct nodes, each node leads
//! `shards / n` shards (rounded either way), and holds about `shards * rf / n`
//! replicas. The metadata group's voters are the (up to) three lowest ids;
//! every other node follows it as a learner.

use crate::types::NodeId;

/// The most voters the metadata group has.
pub const META_VOTERS: usize = 3;

/// Replicas per shard for `nodes` (any order, no duplicates), `shards`
/// shards and replication factor `rf` (at most the number of nodes).
pub fn place(nodes: &[NodeId], shards: u32, rf: u32) -> Vec<Vec<NodeId>> {
    let mut sorted = nodes.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let n = sorted.len();
    if n == 0 {
        return vec![Vec::new(); shards as usize];
    }
    let rf = (rf.max(1) as usize).min(n);
    (0..shards as usize).map(|s| (0..rf).map(|k| sorted[(s + k) % n]).collect()).collect()
}

/// The metadata group's voters: the lowest ids, up to `META_VOTERS`.
pub fn meta_voters(nodes: &[NodeId]) -> Vec<NodeId> {
    let mut sorted = nodes.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    sorted.truncate(META_VOTERS);
    sorted
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    #[test]
    fn the_documented_example() {
        let p = place(&[3, 1, 2, 5, 4], 6, 3);
        assert_eq!(p[0], vec![1, 2, 3]);
        assert_eq!(p[3], vec![4, 5, 1]);
        assert_eq!(p[5], vec![1, 2, 3]);
        assert_eq!(meta_voters(&[9, 4, 7, 1]), vec![1, 4, 7]);
        assert_eq!(place(&[7], 2, 3), vec![vec![7], vec![7]], "one node: rf 1");
    }

    proptest! {
        #[test]
        fn replicas_are_distinct_and_load_is_even(
            nodes in prop::collection::btree_set(1u64..50, 1..9),
            shards in 1u32..200,
            rf in 1u32..6,
        ) {
            let nodes: Vec<NodeId> = nodes.into_iter().collect();
            let n = nodes.len();
            let want = (rf as usize).min(n);
            let p = place(&nodes, shards, rf);
            prop_assert_eq!(p.len(), shards as usize);
            let mut leads: BTreeMap<NodeId, usize> = nodes.iter().map(|&n| (n, 0)).collect();
            let mut holds = leads.clone();
            for replicas in &p {
                prop_assert_eq!(replicas.len(), want);
                let distinct: BTreeSet<_> = replicas.iter().collect();
                prop_assert_eq!(distinct.len(), want, "replicas on distinct nodes");
                prop_assert!(replicas.iter().all(|r| nodes.contains(r)));
                *leads.get_mut(&replicas[0]).unwrap() += 1;
                for r in replicas {
                    *holds.get_mut(r).unwrap() += 1;
                }
            }
            let spread = |m: &BTreeMap<NodeId, usize>| {
                m.values().max().unwrap() - m.values().min().unwrap()
            };
            prop_assert!(spread(&leads) <= 1, "leaders spread evenly: {leads:?}");
            prop_assert!(spread(&holds) <= want, "replicas spread evenly: {holds:?}");
            // The same input gives the same placement, whatever its order.
            let mut rev = nodes.clone();
            rev.reverse();
            prop_assert_eq!(place(&rev, shards, rf), p);
        }
    }
}
