//! The sled trees that hold applied state, and the cache of their handles:
//! one tree per business (`biz/{id}`) and one per ranking (`rank/{id}`), so
//! a tenant's or a ranking's data is isolated and can be dropped whole
//! (`boards.rs` has the ranking layout), one meta tree per shard
//! (`shard/{id}/meta`: applied log id, membership, inbox and outbox; see
//! `shard_meta.rs`), and the registry.
//!
//! `TreeRef` names one of them in staged writes and redo records; the
//! handles are opened on first use and kept, so a read or a checkpoint does
//! not ask sled to open a tree by name each time.

use crate::state::{Result, StateStore};
use plaudit_proto::BizId;
use serde::{Deserialize, Serialize};
use sled::Tree;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(crate) enum TreeRef {
    Biz(BizId),
    Shard(u32),
    Registry,
    /// Appended: redo records name trees by variant index.
    Rank(u32),
}

impl StateStore {
    pub(crate) fn tree(&self, t: TreeRef) -> Result<Tree> {
        match t {
            TreeRef::Biz(b) => self.biz_tree(b),
            TreeRef::Shard(s) => self.shard_tree(s),
            TreeRef::Registry => Ok(self.registry.clone()),
            TreeRef::Rank(r) => self.rank_tree(r),
        }
    }

    /// The tree of one business, opened on first use.
    pub fn biz_tree(&self, biz: BizId) -> Result<Tree> {
        // The lock guards a map of handles only; poisoning would need a panic
        // while inserting, which sled's open_tree does not do under the lock.
        if let Some(t) = self.bizs.read().unwrap_or_else(|e| e.into_inner()).get(&biz) {
            return Ok(t.clone());
        }
        let tree = self.db.open_tree(format!("biz/{biz}"))?;
        self.bizs.write().unwrap_or_else(|e| e.into_inner()).insert(biz, tree.clone());
        Ok(tree)
    }

    /// Every business tree that exists on disk, by id.
    pub fn biz_ids_on_disk(&self) -> Vec<BizId> {
        self.db
            .tree_names()
            .iter()
            .filter_map(|n| std::str::from_utf8(n).ok()?.strip_prefix("biz/")?.parse().ok())
            .collect()
    }

    /// The tree of one ranking, opened on first use.
    pub fn rank_tree(&self, rank: u32) -> Result<Tree> {
        if let Some(t) = self.ranks.read().unwrap_or_else(|e| e.into_inner()).get(&rank) {
            return Ok(t.clone());
        }
        let tree = self.db.open_tree(format!("rank/{rank}"))?;
        self.ranks.write().unwrap_or_else(|e| e.into_inner()).insert(rank, tree.clone());
        Ok(tree)
    }

    /// Every ranking tree that exists on disk, by id.
    pub fn rank_ids_on_disk(&self) -> Vec<u32> {
        self.db
            .tree_names()
            .iter()
            .filter_map(|n| std::str::from_utf8(n).ok()?.strip_prefix("rank/")?.parse().ok())
            .collect()
    }

    pub fn shard_tree(&self, shard: u32) -> Result<Tree> {
        if let Some(t) = self.shards.read().unwrap_or_else(|e| e.into_inner()).get(&shard) {
            return Ok(t.clone());
        }
        let tree = self.db.open_tree(format!("shard/{shard}/meta"))?;
        self.shards.write().unwrap_or_else(|e| e.into_inner()).insert(shard, tree.clone());
        Ok(tree)
    }
}
