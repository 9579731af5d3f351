//! Installing a snapshot: a shard's (or a group's shards') state cleared,
//! staged writes and cached counts dropped, then the file's chunks put in,
//! each checked as it is read (`walk`); and forgetting a shard that left.

use super::walk;
use super::{snap_err, SnapshotStats};
use crate::commit_epoch::Committing;
use crate::keys;
use crate::state::{Result, StateStore};
use crate::trees::TreeRef;
use std::io::Read;
use std::sync::atomic::Ordering;

impl StateStore {
    /// Replaces `shard`'s state (and the registry, with `registry`) with the
    /// snapshot `input` (positioned after its header; see `read_header`).
    /// Staged writes of the shard are dropped and its cached counts
    /// forgotten. An install that fails part-way leaves the shard's state
    /// incomplete: the caller stops the shard (the file is installed again
    /// at restart).
    pub fn install(
        &self,
        shard: u32,
        registry: bool,
        input: &mut impl Read,
    ) -> Result<SnapshotStats> {
        self.install_many(&[shard], registry, input)
    }

    /// `install` of a snapshot of several shards (`export_many`): every
    /// one of them is replaced, a shard the file holds nothing of by an
    /// empty state.
    pub fn install_many(
        &self,
        shards: &[u32],
        registry: bool,
        input: &mut impl Read,
    ) -> Result<SnapshotStats> {
        self.clear_then(shards, registry, || {
            walk(shards, registry, input, |tree, items| {
                self.tree(tree).apply(items.into_iter().map(|(k, v)| (k, Some(v))));
            })
        })
    }

    /// Removes all of `shard`'s applied state from memory, as if it had
    /// never applied anything: for a node no longer holding the shard (its
    /// replica moved away). Other shards and the registry are untouched
    /// (registry writes the shard staged stay staged). The shard's slot and
    /// its empty meta tree stay, a few bytes. Fails, changing nothing,
    /// while a snapshot export holds the shard still: the caller drops the
    /// shard's `Frozen` first. Clears `is_incomplete`: empty is whole.
    pub fn forget(&self, shard: u32) -> Result<()> {
        self.clear_then(&[shard], false, || Ok(()))
    }

    /// Removes `shards`' state (and the registry, with `registry`), staged
    /// and stored, then runs `load` to put the new state in (`install`;
    /// `forget` puts nothing). Holds the shards' checkpoint locks
    /// throughout, so no checkpoint writes the dropped staged writes back
    /// meanwhile. If `load` fails, the shards are left marked incomplete.
    fn clear_then<T>(
        &self,
        shards: &[u32],
        registry: bool,
        load: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        let slots: Vec<_> = shards.iter().map(|&s| self.slot(s)).collect();
        // Taken in the order given; only a group's installs take several,
        // always in its own order, and nothing holds one while taking
        // another elsewhere.
        let _no_checkpoint: Vec<_> =
            slots.iter().map(|s| s.checkpoint.lock().unwrap_or_else(|e| e.into_inner())).collect();
        if let Some(i) = slots.iter().position(|s| s.frozen.load(Ordering::Acquire)) {
            return Err(snap_err(format!("shard {} is being exported", shards[i])));
        }
        let mut installing = Vec::with_capacity(shards.len());
        for (i, (&shard, slot)) in shards.iter().zip(&slots).enumerate() {
            {
                let mut layers = slot.layers();
                layers.active.drop_shard(&keys::shard_prefix(shard), TreeRef::Shard(shard));
                if registry && i == 0 {
                    layers.active.drop_tree(TreeRef::Registry);
                }
                layers.flushing = None;
                if layers.active.is_empty() {
                    layers.since = None;
                }
            }
            // Counts and states change behind the caches: hold the shard's
            // epoch odd throughout so no read refills them, and drop what they
            // hold (`commit_epoch.rs`: reads wait at most a moment for it).
            installing.push(Committing::begin(self.counts_cache.epoch(shard)));
            self.counts_cache.drop_shard(shard);
            self.states_cache.drop_shard(shard);
            slot.incomplete.store(true, Ordering::Release);
            for (tree, range) in self.slices(shard, registry && i == 0) {
                if let Some(t) = self.find_tree(tree) {
                    t.remove_range(&range);
                }
            }
        }
        let res = load();
        if res.is_ok() {
            for slot in &slots {
                slot.incomplete.store(false, Ordering::Release);
            }
        }
        res
    }

    /// Whether an install into `shard` is under way or failed part-way (its
    /// state is then neither the old one nor the new one).
    pub fn is_incomplete(&self, shard: u32) -> bool {
        self.slot(shard).incomplete.load(Ordering::Acquire)
    }
}
