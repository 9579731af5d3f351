//! The registry tree: businesses, rankings, the cluster map and the memory
//! of at-most-once requests, as the metadata group writes them
//! (`actors/src/directory.rs` and `actors/src/shard/once.rs` have the key
//! layouts and the values). Unlike
//! the other trees its keys do not start with a shard id, so a read merges
//! the staged registry writes of every shard.

use crate::pending::Entries;
use crate::state::{Result, StateStore, WriteSet};
use crate::trees::TreeRef;
use std::ops::Bound;

impl StateStore {
    /// Every registry entry (businesses and rankings), staged or stored.
    /// The registry is written by the metadata group only, but which shard
    /// id that is stays the cluster's business: every shard's staged
    /// registry writes are merged (other shards have none).
    pub fn registry_entries(&self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let all = (Bound::Unbounded, Bound::Unbounded);
        let mut staged = Entries::new();
        let slots: Vec<_> =
            self.pending.read().unwrap_or_else(|e| e.into_inner()).values().cloned().collect();
        for slot in slots {
            for (k, v) in slot.layers().range(TreeRef::Registry, &all) {
                staged.entry(k).or_insert(v);
            }
        }
        let mut out = Vec::new();
        self.scan_over(TreeRef::Registry, all, staged, false, |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            Ok(true)
        })?;
        Ok(out)
    }
}

impl StateStore {
    /// One registry entry as the metadata group `shard` applied it.
    pub fn registry_get(&self, shard: u32, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.get(shard, TreeRef::Registry, key)
    }
}

impl WriteSet {
    pub fn put_registry(&mut self, key: &[u8], value: &[u8]) {
        self.put(TreeRef::Registry, key.to_vec(), value);
    }

    pub fn del_registry(&mut self, key: &[u8]) {
        self.del(TreeRef::Registry, key.to_vec());
    }
}
