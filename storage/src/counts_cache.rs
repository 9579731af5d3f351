//! The in-memory read cache of entity counts.
//!
//! Counts are the hottest read (every feed item asks for them) and a few
//! entities take most of it, so they are cached in memory. Commits write
//! through; a read that misses fills the cache only if no commit of that
//! shard ran meanwhile (a seqlock-style epoch per shard: odd while a commit
//! is applying), so a stale value is never installed. `StateStore::stage`
//! writes through, `StateStore::get_counts` fills, and
//! a snapshot install drops a shard's entries.

use crate::likes::CountsRec;
use plaudit_proto::keyed_hash::KeyedHash;
use plaudit_proto::{BizId, EntityId};
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, MutexGuard};

/// Cached counts in parts by entity and shard, and the commit epochs per shard.
pub(crate) struct CountsCache {
    epochs: Vec<AtomicU64>,
    pub(crate) parts: Vec<Mutex<CountsPart>>,
}

/// `(biz, shard, entity) -> counts`.
pub(crate) type CountsPart = HashMap<(BizId, u32, EntityId), CountsRec, KeyedHash>;

/// Entries per cache part before it is dropped and refilled (64 parts).
const COUNTS_CACHE_PART: usize = 4096;
const COUNTS_CACHE_PARTS: usize = 64;
const EPOCHS: usize = 1025;

impl CountsCache {
    pub(crate) fn new() -> CountsCache {
        CountsCache {
            epochs: (0..EPOCHS).map(|_| AtomicU64::new(0)).collect(),
            parts: (0..COUNTS_CACHE_PARTS).map(|_| Mutex::new(HashMap::default())).collect(),
        }
    }

    pub(crate) fn epoch(&self, shard: u32) -> &AtomicU64 {
        &self.epochs[shard as usize % EPOCHS]
    }

    pub(crate) fn part(&self, shard: u32, entity: EntityId) -> MutexGuard<'_, CountsPart> {
        let i = (entity as usize ^ shard as usize) % COUNTS_CACHE_PARTS;
        // Only plain map operations run under the lock; a poisoned lock
        // still holds a consistent map.
        self.parts[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn put(&self, part: &mut CountsPart, k: (BizId, u32, EntityId), c: CountsRec) {
        if part.len() >= COUNTS_CACHE_PART && !part.contains_key(&k) {
            part.clear();
        }
        part.insert(k, c);
    }
}

#[cfg(test)]
mod tests {
    use crate::{CountsRec, WriteSet};

    use crate::state::test_store as store;

    #[test]
    fn counts_cache_follows_commits() {
        let (_d, s) = store();
        assert_eq!(s.get_counts(1, 0, 5).unwrap(), CountsRec::default());
        for likes in 1..=3 {
            let mut ws = WriteSet::new(0);
            ws.put_counts(1, 0, 5, CountsRec { likes, dislikes: 0, owner: None });
            ws.put_applied(0, b"x");
            s.stage(ws);
            // Served from the cache after the first read, and never stale.
            assert_eq!(s.get_counts(1, 0, 5).unwrap().likes, likes);
            assert_eq!(s.get_counts(1, 0, 5).unwrap().likes, likes);
        }
        // The stored value matches what the cache served.
        let (_e, fresh) = crate::state::reloaded(&s, 0);
        assert_eq!(fresh.get_counts(1, 0, 5).unwrap().likes, 3);
        s.install_bytes(0, &crate::snapshot::empty_snapshot());
        assert_eq!(s.get_counts(1, 0, 5).unwrap(), CountsRec::default());
    }
}
