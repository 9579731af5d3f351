//! A shard's slice of applied state as a flat list of keys, for Raft
//! snapshots: every key of the shard in every business and ranking tree
//! (each of their keys starts with the shard id, so the slice is one prefix
//! scan per tree) and its meta tree. Exporting checkpoints first, so the
//! export holds everything applied; importing replaces the slice and drops
//! what is staged for it, and the shard's counts from the read cache.

use crate::keys;
use crate::shard_meta::meta;
use crate::state::{Result, StateStore};
use crate::trees::TreeRef;
use std::sync::atomic::Ordering;

/// One key of an exported shard: `(tree name, key, value)`.
pub type ExportItem = (String, Vec<u8>, Vec<u8>);

impl StateStore {
    /// Every key of `shard` in every business tree and its meta tree, for a
    /// snapshot: `(tree name, key, value)`. Checkpoints first, so the export
    /// holds everything applied.
    pub fn export_shard(&self, shard: u32) -> Result<Vec<ExportItem>> {
        self.checkpoint(shard)?;
        let mut out = Vec::new();
        for biz in self.biz_ids_on_disk() {
            let tree = self.biz_tree(biz)?;
            for kv in tree.scan_prefix(keys::shard_prefix(shard)) {
                let (k, v) = kv?;
                out.push((format!("biz/{biz}"), k.to_vec(), v.to_vec()));
            }
        }
        for rank in self.rank_ids_on_disk() {
            let tree = self.rank_tree(rank)?;
            for kv in tree.scan_prefix(keys::shard_prefix(shard)) {
                let (k, v) = kv?;
                out.push((format!("rank/{rank}"), k.to_vec(), v.to_vec()));
            }
        }
        for kv in self.shard_tree(shard)?.iter() {
            let (k, v) = kv?;
            if k.as_ref() != meta::SNAPSHOT {
                out.push((format!("shard/{shard}/meta"), k.to_vec(), v.to_vec()));
            }
        }
        Ok(out)
    }

    /// Replaces every key of `shard` with `items` (from `export_shard`),
    /// dropping what is staged for it. Not atomic: a crash part-way leaves
    /// the shard to be re-installed from a snapshot.
    pub fn import_shard(&self, shard: u32, items: Vec<ExportItem>) -> Result<()> {
        let slot = self.slot(shard);
        let _no_checkpoint = slot.checkpoint.lock().unwrap_or_else(|e| e.into_inner());
        {
            let mut layers = slot.layers();
            layers.active.drop_shard(&keys::shard_prefix(shard), TreeRef::Shard(shard));
            layers.flushing = None;
            if layers.active.is_empty() {
                layers.since = None;
            }
        }
        // The import rewrites counts behind the cache: hold the shard's epoch
        // odd throughout so no read refills it, and drop what it holds.
        let epoch = self.counts_cache.epoch(shard);
        epoch.fetch_add(1, Ordering::AcqRel);
        for part in &self.counts_cache.parts {
            part.lock().unwrap_or_else(|e| e.into_inner()).retain(|k, _| k.1 != shard);
        }
        let res = self.import_shard_keys(shard, items);
        epoch.fetch_add(1, Ordering::AcqRel);
        res
    }

    fn import_shard_keys(&self, shard: u32, items: Vec<ExportItem>) -> Result<()> {
        for biz in self.biz_ids_on_disk() {
            let tree = self.biz_tree(biz)?;
            for kv in tree.scan_prefix(keys::shard_prefix(shard)) {
                tree.remove(kv?.0)?;
            }
        }
        for rank in self.rank_ids_on_disk() {
            let tree = self.rank_tree(rank)?;
            for kv in tree.scan_prefix(keys::shard_prefix(shard)) {
                tree.remove(kv?.0)?;
            }
        }
        self.shard_tree(shard)?.clear()?;
        let meta_name = format!("shard/{shard}/meta");
        for (name, k, v) in items {
            if name == meta_name {
                self.shard_tree(shard)?.insert(k, v)?;
            } else if let Some(biz) = name.strip_prefix("biz/").and_then(|b| b.parse().ok()) {
                self.biz_tree(biz)?.insert(k, v)?;
            } else if let Some(r) = name.strip_prefix("rank/").and_then(|r| r.parse().ok()) {
                self.rank_tree(r)?.insert(k, v)?;
            }
        }
        Ok(())
    }
}
