//! The bound of a group's proposal queue, one share per shard it hosts:
//! each shard may have `per_shard` commands waiting (`max_pending_per_shard`),
//! so a shard whose writes flood in fills its own share and is answered
//! `Overloaded`, while the other shards of its group keep theirs. With one
//! shard to a group (the default layout) this is the bound as it always
//! was; with several, one shared bound let a single hot shard take the
//! whole queue from its neighbours.
//!
//! A proposal holds its share's permits until the proposer has handed its
//! entry to Raft (`proposer.rs`): until then it counts as waiting.

use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub(crate) struct ShardQueues {
    /// Each hosted shard with its share, in the group's order.
    shares: Vec<(u32, Arc<Semaphore>)>,
    per_shard: usize,
}

impl ShardQueues {
    pub(crate) fn new(shards: impl IntoIterator<Item = u32>, per_shard: usize) -> ShardQueues {
        let shares = shards.into_iter().map(|s| (s, Arc::new(Semaphore::new(per_shard)))).collect();
        ShardQueues { shares, per_shard }
    }

    fn share(&self, shard: u32) -> Option<&Arc<Semaphore>> {
        self.shares.iter().find(|(s, _)| *s == shard).map(|(_, q)| q)
    }

    /// Room for `n` commands of `shard`, or `None` when its share has less
    /// (or the group does not host it).
    pub(crate) fn take(&self, shard: u32, n: usize) -> Option<OwnedSemaphorePermit> {
        let n = u32::try_from(n).ok()?;
        self.share(shard)?.clone().try_acquire_many_owned(n).ok()
    }

    /// Commands of `shard` waiting, out of `per_shard`.
    pub(crate) fn used(&self, shard: u32) -> usize {
        self.share(shard).map_or(0, |q| self.per_shard - q.available_permits())
    }

    /// The commands each shard may have waiting.
    pub(crate) fn per_shard(&self) -> usize {
        self.per_shard
    }

    /// Whether no command of any shard waits.
    pub(crate) fn empty(&self) -> bool {
        self.shares.iter().all(|(_, q)| q.available_permits() == self.per_shard)
    }

    /// Commands the whole group may have waiting: the proposal channel's
    /// capacity, which the permits then never let fill.
    pub(crate) fn capacity(&self) -> usize {
        self.per_shard * self.shares.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_shard_leaves_its_neighbours_their_room() {
        let q = ShardQueues::new([0, 2, 4], 10);
        assert_eq!(q.capacity(), 30);
        let hot = q.take(2, 10).expect("a shard's whole share");
        assert!(q.take(2, 1).is_none(), "its share is full");
        assert_eq!(q.used(2), 10);
        let other = q.take(4, 10).expect("a neighbour keeps its share");
        assert!(q.take(0, 1).is_some());
        assert!(!q.empty());
        drop((hot, other));
        assert_eq!(q.used(2), 0);
        assert!(q.empty(), "every permit given back");
    }

    #[test]
    fn more_than_a_share_or_an_unhosted_shard_gets_no_room() {
        let q = ShardQueues::new([1], 4);
        assert!(q.take(1, 5).is_none(), "more than a share at once");
        assert!(q.take(3, 1).is_none(), "not hosted");
        assert_eq!(q.used(3), 0);
        assert!(q.take(1, 4).is_some());
    }
}
