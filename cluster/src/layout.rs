//! Which Raft group hosts which shard. A shard is the unit of hashing,
//! state and actor placement; a group is the unit of replication and
//! leadership, and one Raft round of a group carries the writes of every
//! shard it hosts. `groups` data groups host the `shards` data shards,
//! shard `s` in group `s % groups`, whose id is its first shard's (so a
//! group id is a shard id, and a layout of one group per shard is the
//! identity). The metadata group (id `shards`) hosts itself alone.
//!
//! Fixed when a data directory is first used (`shard_count.rs` checks it
//! at every start), and the same on every node of a cluster.

use plaudit_proto::ShardId;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    shards: u32,
    groups: u32,
}

impl Layout {
    /// `groups` data groups for `shards` shards; 0, or more than the
    /// shards, is one group per shard.
    pub fn new(shards: u32, groups: u32) -> Layout {
        let groups = if groups == 0 || groups > shards { shards } else { groups };
        Layout { shards, groups: groups.max(1) }
    }

    pub fn groups(&self) -> u32 {
        self.groups
    }

    pub fn shards(&self) -> u32 {
        self.shards
    }

    /// The group that hosts `shard` (the metadata group hosts itself).
    pub fn group_of(&self, shard: ShardId) -> u32 {
        if shard >= self.shards {
            shard
        } else {
            shard % self.groups
        }
    }

    /// The shards group `group` hosts, its own id first; an id that is
    /// not a group's names that shard alone (what is on disk of a shard is
    /// never taken for a group's).
    pub fn shards_of(&self, group: u32) -> Vec<ShardId> {
        if group >= self.shards || !self.is_group(group) {
            return vec![group];
        }
        (group..self.shards).step_by(self.groups as usize).collect()
    }

    /// A placement (replicas per shard) with every shard placed as its
    /// group's own shard is: the replicas of a group are those of all the
    /// shards it hosts. What every change of the cluster state is made
    /// into before it is proposed.
    pub fn spread<T: Clone>(&self, placement: &mut [T]) {
        let groups = self.groups as usize;
        for s in groups..placement.len() {
            placement[s] = placement[s % groups].clone();
        }
    }

    /// The part of a placement that the groups' own shards make (the
    /// first `groups` entries): what moves and leaderships are planned on.
    pub fn own<'a, T>(&self, placement: &'a [T]) -> &'a [T] {
        &placement[..placement.len().min(self.groups as usize)]
    }

    /// The layout as one number, what a node declares in the peer
    /// handshake (`peer/auth.rs`, under both proofs): the shard count,
    /// with the group count in the upper half when there are fewer groups
    /// than shards. One group per shard declares the count alone, as nodes
    /// did before groups. Shards are at most 1024, so the halves never mix.
    pub fn declared(&self) -> u32 {
        if self.groups == self.shards {
            self.shards
        } else {
            self.shards | (self.groups << 16)
        }
    }

    /// A declared layout in words, for a refusal.
    pub fn describe(declared: u32) -> String {
        let (shards, groups) = (declared & 0xffff, declared >> 16);
        match groups {
            0 => format!("{shards} shards"),
            g => format!("{shards} shards in {g} groups"),
        }
    }

    /// Whether `id` names a group (a group's first shard, or the metadata group).
    pub fn is_group(&self, id: u32) -> bool {
        id >= self.shards || id < self.groups
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shard_is_hosted_by_exactly_one_group_that_lists_it() {
        for shards in 1..=12 {
            for groups in 0..=shards + 1 {
                let l = Layout::new(shards, groups);
                let mut seen = vec![0; shards as usize];
                for g in 0..l.groups() {
                    assert!(l.is_group(g));
                    let hosted = l.shards_of(g);
                    assert_eq!(hosted[0], g, "a group's id is its first shard");
                    for s in hosted {
                        assert_eq!(l.group_of(s), g);
                        seen[s as usize] += 1;
                    }
                }
                assert!(seen.iter().all(|&n| n == 1), "{shards}/{groups}: {seen:?}");
            }
        }
    }

    #[test]
    fn the_declared_layout_tells_groups_apart_and_keeps_the_old_count() {
        assert_eq!(Layout::new(6, 0).declared(), 6);
        assert_eq!(Layout::new(6, 6).declared(), 6);
        assert_ne!(Layout::new(6, 1).declared(), Layout::new(6, 2).declared());
        assert_eq!(Layout::describe(Layout::new(6, 2).declared()), "6 shards in 2 groups");
        assert_eq!(Layout::describe(6), "6 shards");
    }

    #[test]
    fn one_group_per_shard_is_the_identity_and_meta_hosts_itself() {
        let l = Layout::new(6, 0);
        assert_eq!(l.groups(), 6);
        assert!((0..6).all(|s| l.group_of(s) == s && l.shards_of(s) == vec![s]));
        let one = Layout::new(6, 1);
        assert_eq!(one.shards_of(0), vec![0, 1, 2, 3, 4, 5]);
        assert!(!one.is_group(3));
        assert_eq!((one.group_of(6), one.shards_of(6)), (6, vec![6]));
        assert!(one.is_group(6));
    }
}
