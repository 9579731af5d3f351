//! The trees that hold applied state in memory (`mem_tree.rs`) and the
//! maps of their handles: one tree per business (`biz/{id}`) and one per
//! ranking (`rank/{id}`), so a tenant's or a ranking's data is isolated and
//! can be dropped whole (`boards.rs` has the ranking layout), one meta tree
//! per shard (`shard/{id}/meta`: applied log id, membership, inbox and
//! outbox; see `shard_meta.rs`), and the registry. The names are those of
//! the sled trees that held the same state before (`legacy.rs` reads them).
//!
//! `TreeRef` names one of them in staged writes and snapshot chunks.

use crate::mem_tree::MemTree;
use crate::state::StateStore;
use plaudit_proto::BizId;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::RwLock;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(crate) enum TreeRef {
    Biz(BizId),
    Shard(u32),
    Registry,
    /// Appended: snapshot chunks name trees by variant index.
    Rank(u32),
}

/// The tree under `id` in `all`, made on first use.
fn tree_in<K: Hash + Eq + Copy>(all: &RwLock<HashMap<K, MemTree>>, id: K) -> MemTree {
    // The lock guards a map of handles; nothing under it can panic.
    if let Some(t) = all.read().unwrap_or_else(|e| e.into_inner()).get(&id) {
        return t.clone();
    }
    all.write().unwrap_or_else(|e| e.into_inner()).entry(id).or_default().clone()
}

fn ids_in<K: Copy>(all: &RwLock<HashMap<K, MemTree>>) -> Vec<K> {
    all.read().unwrap_or_else(|e| e.into_inner()).keys().copied().collect()
}

impl StateStore {
    pub(crate) fn tree(&self, t: TreeRef) -> MemTree {
        match t {
            TreeRef::Biz(b) => tree_in(&self.bizs, b),
            TreeRef::Shard(s) => tree_in(&self.shards, s),
            TreeRef::Registry => self.registry.clone(),
            TreeRef::Rank(r) => tree_in(&self.ranks, r),
        }
    }

    /// The tree `t` if it exists (reads do not make empty trees).
    pub(crate) fn find_tree(&self, t: TreeRef) -> Option<MemTree> {
        let find = |all: &RwLock<HashMap<_, MemTree>>, id| {
            all.read().unwrap_or_else(|e| e.into_inner()).get(&id).cloned()
        };
        match t {
            TreeRef::Biz(b) => find(&self.bizs, b),
            TreeRef::Shard(s) => find(&self.shards, s),
            TreeRef::Registry => Some(self.registry.clone()),
            TreeRef::Rank(r) => find(&self.ranks, r),
        }
    }

    /// Every business that has a tree, by id.
    pub fn biz_ids(&self) -> Vec<BizId> {
        ids_in(&self.bizs)
    }

    /// Every ranking that has a tree, by id.
    pub fn rank_ids(&self) -> Vec<u32> {
        ids_in(&self.ranks)
    }
}
