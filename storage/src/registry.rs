//! The registry tree: businesses and rankings, as the metadata group writes
//! them (`actors/src/directory.rs` has the key layout and the values). Unlike
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

impl WriteSet {
    pub fn put_registry(&mut self, key: &[u8], value: &[u8]) {
        self.put(TreeRef::Registry, key.to_vec(), value);
    }
}
