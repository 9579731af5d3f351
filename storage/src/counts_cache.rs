//! The in-memory read cache of entity counts.
//!
//! Counts are the hottest read (every feed item asks for them) and a few
//! entities take most of it, so they are cached in memory. Commits write
//! through; a read that misses fills the cache only if no commit of that
//! shard ran meanwhile (a seqlock-style epoch per shard: odd while a commit
//! is applying), so a stale value is never installed, and reads the
//! store only between two commits (`commit_epoch.rs`), so that it never
//! sees a commit the cache does not show yet. `StateStore::stage`
//! writes through, `StateStore::get_counts` fills, and
//! a snapshot install drops a shard's entries.
//!
//! Layout: 64 parts, each a fixed array of four-way sets of 192 bytes
//! (three cache lines), most recently used first. A counts request asks
//! for ~20 entities at once; with a hash map per part each lookup was two
//! dependent cache misses (control bytes, then the bucket) behind a lock,
//! about 65 ns, and 11% of the node on the likes mix. Here the place of a
//! key is known from its hash alone, so a request's lookups are
//! prefetched together ([`CountsCache::prefetch`]) and their misses
//! overlap. A set that is full drops its least recently used entry
//! instead of the whole part starting over.

use crate::likes::CountsRec;
use plaudit_proto::keyed_hash::KeyedHash;
use plaudit_proto::prefetch::prefetch;
use plaudit_proto::{BizId, EntityId};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// `(biz, shard, entity)`.
pub(crate) type CountsKey = (BizId, u32, EntityId);

const PARTS: usize = 64;
/// Sets per part: 4,096 entries a part, 262,144 in all (12 MiB once
/// every part has been written).
const SETS: usize = 1024;
const WAYS: usize = 4;
const EPOCHS: usize = 1025;

const USED: u8 = 1;
const HAS_OWNER: u8 = 2;

/// One cached entity, 48 bytes (`CountsRec` as it is would take 56).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Slot {
    entity: EntityId,
    likes: u64,
    dislikes: u64,
    owner: u64,
    biz: BizId,
    shard: u32,
    flags: u8,
}

impl Slot {
    fn new((biz, shard, entity): CountsKey, c: CountsRec) -> Slot {
        let owner_flag = if c.owner.is_some() { HAS_OWNER } else { 0 };
        Slot {
            entity,
            likes: c.likes,
            dislikes: c.dislikes,
            owner: c.owner.unwrap_or(0),
            biz,
            shard,
            flags: USED | owner_flag,
        }
    }

    fn is(&self, (biz, shard, entity): CountsKey) -> bool {
        self.flags & USED != 0 && self.entity == entity && self.biz == biz && self.shard == shard
    }

    fn counts(&self) -> CountsRec {
        let owner = (self.flags & HAS_OWNER != 0).then_some(self.owner);
        CountsRec { likes: self.likes, dislikes: self.dislikes, owner }
    }
}

/// Entries that share a place, most recently used first; aligned so a
/// set spans exactly three cache lines.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(64))]
struct Set([Slot; WAYS]);

impl Set {
    fn get(&mut self, k: CountsKey) -> Option<CountsRec> {
        let i = self.0.iter().position(|s| s.is(k))?;
        self.0[..=i].rotate_right(1);
        Some(self.0[0].counts())
    }

    fn put(&mut self, k: CountsKey, c: CountsRec) {
        // An entry already here moves to the front; a new one takes a free
        // slot (a dropped shard leaves some) or pushes the least recently
        // used out.
        let i = self.0.iter().position(|s| s.is(k));
        let i = i.or_else(|| self.0.iter().position(|s| s.flags & USED == 0)).unwrap_or(WAYS - 1);
        self.0[..=i].rotate_right(1);
        self.0[0] = Slot::new(k, c);
    }
}

struct Part {
    /// Empty until the part's first write, then `SETS` long for good.
    sets: Mutex<Vec<Set>>,
    /// The sets' address once allocated (null before): prefetches read it
    /// without the lock. The `Vec` never grows after, so it never moves.
    base: AtomicPtr<Set>,
}

/// Cached counts in parts, and the commit epochs per shard.
pub(crate) struct CountsCache {
    epochs: Vec<AtomicU64>,
    parts: Vec<Part>,
    hasher: KeyedHash,
}

impl CountsCache {
    pub(crate) fn new() -> CountsCache {
        let part = || Part { sets: Mutex::new(Vec::new()), base: AtomicPtr::default() };
        CountsCache {
            epochs: (0..EPOCHS).map(|_| AtomicU64::new(0)).collect(),
            parts: (0..PARTS).map(|_| part()).collect(),
            hasher: KeyedHash::default(),
        }
    }

    pub(crate) fn epoch(&self, shard: u32) -> &AtomicU64 {
        &self.epochs[shard as usize % EPOCHS]
    }

    /// The part and set of `k`, from its keyed hash (clients choose entity
    /// ids; the key keeps them from aiming many at one set).
    fn place(&self, k: CountsKey) -> (usize, usize) {
        let h = self.hasher.hash_one(k);
        ((h as usize) % PARTS, ((h >> 32) as usize) % SETS)
    }

    fn lock(&self, part: usize) -> MutexGuard<'_, Vec<Set>> {
        // Only plain array operations run under the lock; a poisoned lock
        // still holds consistent entries.
        self.parts[part].sets.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts loading the set `k` would be in, so that a lookup soon after
    /// finds it in cache: a request's lookups then wait for memory
    /// together instead of one after another.
    pub(crate) fn prefetch(&self, k: CountsKey) {
        let (part, set) = self.place(k);
        let base = self.parts[part].base.load(Ordering::Relaxed);
        if !base.is_null() {
            // The first line only: it holds the most recently used entry,
            // where a hot entity is, and more prefetches per lookup filled
            // the core's miss buffers (3% of the likes mix for three lines).
            prefetch(base.wrapping_add(set).cast::<u8>());
        }
    }

    pub(crate) fn get(&self, k: CountsKey) -> Option<CountsRec> {
        let (part, set) = self.place(k);
        self.lock(part).get_mut(set)?.get(k)
    }

    /// Caches `c` as `k`'s counts.
    pub(crate) fn put(&self, k: CountsKey, c: CountsRec) {
        self.put_if(k, c, || true);
    }

    /// Caches `c` as `k`'s counts if `still()` holds, asked under the
    /// part's lock: a commit that writes `k` through waits for that lock,
    /// so it cannot land between the check and the write.
    pub(crate) fn put_if(&self, k: CountsKey, c: CountsRec, still: impl FnOnce() -> bool) {
        let (part, set) = self.place(k);
        let mut sets = self.lock(part);
        if !still() {
            return;
        }
        if sets.is_empty() {
            sets.resize(SETS, Set::default());
            self.parts[part].base.store(sets.as_mut_ptr(), Ordering::Release);
        }
        sets[set].put(k, c);
    }

    /// Drops every entry of `shard` (its state was replaced).
    pub(crate) fn drop_shard(&self, shard: u32) {
        for part in 0..PARTS {
            for set in self.lock(part).iter_mut() {
                for slot in &mut set.0 {
                    if slot.flags & USED != 0 && slot.shard == shard {
                        *slot = Slot::default();
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CountsRec, WriteSet};

    use crate::state::test_store as store;

    fn rec(likes: u64, owner: Option<u64>) -> CountsRec {
        CountsRec { likes, dislikes: likes / 2, owner }
    }

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

    #[test]
    fn entries_round_trip_with_and_without_owner() {
        let c = CountsCache::new();
        c.put((1, 2, 3), rec(10, Some(0)));
        c.put((1, 2, 4), rec(11, None));
        c.put((2, 2, 3), rec(12, Some(u64::MAX)));
        assert_eq!(c.get((1, 2, 3)), Some(rec(10, Some(0))));
        assert_eq!(c.get((1, 2, 4)), Some(rec(11, None)));
        assert_eq!(c.get((2, 2, 3)), Some(rec(12, Some(u64::MAX))));
        assert_eq!(c.get((1, 3, 3)), None, "another shard's entity is another key");
        c.put((1, 2, 3), rec(13, None));
        assert_eq!(c.get((1, 2, 3)), Some(rec(13, None)), "a write replaces the entry");
    }

    #[test]
    fn a_full_set_drops_its_least_recently_used_entry() {
        let mut set = Set::default();
        let key = |e: u64| (1, 0, e);
        for e in 0..WAYS as u64 {
            set.put(key(e), rec(e, None));
        }
        // Entity 0 is the oldest; reading it makes 1 the oldest.
        assert_eq!(set.get(key(0)), Some(rec(0, None)));
        set.put(key(99), rec(99, None));
        assert_eq!(set.get(key(1)), None);
        for e in [0, 2, 3, 99] {
            assert_eq!(set.get(key(e)), Some(rec(e, None)), "entity {e}");
        }
        // Writing an entry that is there keeps the others.
        set.put(key(2), rec(7, None));
        for e in [0, 3, 99] {
            assert_eq!(set.get(key(e)), Some(rec(e, None)), "entity {e}");
        }
        assert_eq!(set.get(key(2)), Some(rec(7, None)));
    }

    #[test]
    fn a_new_entry_takes_a_free_slot_before_pushing_one_out() {
        let mut set = Set::default();
        for e in 0..WAYS as u64 {
            set.put((1, e as u32 % 2, e), rec(e, None));
        }
        // Shard 1's entries (1 and 3) go, as a snapshot install drops them.
        for slot in &mut set.0 {
            if slot.shard == 1 {
                *slot = Slot::default();
            }
        }
        set.put((1, 0, 10), rec(10, None));
        set.put((1, 0, 11), rec(11, None));
        for e in [0, 2, 10, 11] {
            assert_eq!(set.get((1, 0, e)), Some(rec(e, None)), "entity {e}");
        }
    }

    #[test]
    fn a_fill_that_raced_a_commit_is_refused() {
        let (_d, s) = store();
        let commit = |likes| {
            let mut ws = WriteSet::new(0);
            ws.put_counts(1, 0, 5, CountsRec { likes, dislikes: 0, owner: None });
            ws.put_applied(0, b"x");
            s.stage(ws);
        };
        commit(1);
        s.counts_cache.drop_shard(0);
        // A reader misses and reads 1 from the store; a commit of 2 lands
        // (and is written through) before the reader fills the cache.
        let before = s.counts_cache.epoch(0).load(std::sync::atomic::Ordering::Acquire);
        let read = s.get_counts(1, 0, 5).unwrap();
        assert_eq!(read.likes, 1);
        commit(2);
        s.fill_counts((1, 0, 5), read, before);
        assert_eq!(s.get_counts(1, 0, 5).unwrap().likes, 2);
        // With no commit between, the fill is kept.
        s.counts_cache.drop_shard(0);
        let before = s.counts_cache.epoch(0).load(std::sync::atomic::Ordering::Acquire);
        let read = CountsRec { likes: 2, dislikes: 0, owner: None };
        s.fill_counts((1, 0, 5), read, before);
        assert_eq!(s.counts_cache.get((1, 0, 5)), Some(read));
    }

    #[test]
    fn reads_beside_commits_never_go_back() {
        // One thread commits rising counts for a few entities; readers
        // must never see a count fall (a fill that raced a commit and
        // installed the older value would show as one).
        let (_d, s) = store();
        let s = std::sync::Arc::new(s);
        let writer = {
            let s = s.clone();
            std::thread::spawn(move || {
                for likes in 1..=2_000u64 {
                    let mut ws = WriteSet::new(0);
                    for e in 0..4 {
                        ws.put_counts(1, 0, e, CountsRec { likes, dislikes: 0, owner: None });
                    }
                    ws.put_applied(0, b"x");
                    s.stage(ws);
                    if likes % 500 == 0 {
                        s.checkpoint(0).unwrap();
                        // Dropped as an install drops them, then refilled by reads.
                        s.counts_cache.drop_shard(0);
                    }
                }
            })
        };
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || {
                    let mut seen = [0u64; 4];
                    for i in 0..20_000 {
                        let e = i % 4;
                        let likes = s.get_counts(1, 0, e as u64).unwrap().likes;
                        assert!(likes >= seen[e], "entity {e}: {likes} after {}", seen[e]);
                        seen[e] = likes;
                    }
                })
            })
            .collect();
        writer.join().unwrap();
        readers.into_iter().for_each(|r| r.join().unwrap());
        assert_eq!(s.get_counts(1, 0, 3).unwrap().likes, 2_000);
    }

    #[test]
    fn a_set_tells_keys_that_share_it_apart() {
        // Keys that differ in one field only, all in one set.
        let mut set = Set::default();
        let keys = [(1, 0, 5), (2, 0, 5), (1, 1, 5), (1, 0, 6)];
        for (i, &k) in keys.iter().enumerate() {
            set.put(k, rec(i as u64, None));
        }
        for (i, &k) in keys.iter().enumerate() {
            assert_eq!(set.get(k), Some(rec(i as u64, None)), "key {k:?}");
        }
        assert_eq!(set.get((2, 1, 6)), None);
    }

    #[test]
    fn dropping_a_shard_keeps_the_others() {
        let c = CountsCache::new();
        for e in 0..1000 {
            c.put((1, (e % 3) as u32, e), rec(e, None));
        }
        c.drop_shard(1);
        for e in 0..1000 {
            let got = c.get((1, (e % 3) as u32, e));
            if e % 3 == 1 {
                assert_eq!(got, None);
            } else {
                // Four ways per set: a few entries may have been pushed out.
                assert!(got.is_none_or(|g| g == rec(e, None)), "entity {e}");
            }
        }
    }

    #[test]
    fn a_refused_fill_writes_nothing() {
        let c = CountsCache::new();
        c.put_if((1, 0, 5), rec(1, None), || false);
        assert_eq!(c.get((1, 0, 5)), None);
        c.prefetch((1, 0, 5)); // nothing allocated yet: a no-op
        c.put_if((1, 0, 5), rec(2, None), || true);
        c.prefetch((1, 0, 5));
        assert_eq!(c.get((1, 0, 5)), Some(rec(2, None)));
    }

    proptest::proptest! {
        /// Against a map: a lookup finds the newest value written or
        /// nothing, never an older one or another key's; what was just
        /// written is found; a dropped shard's keys are gone.
        #[test]
        fn never_serves_a_stale_or_foreign_value(
            ops in proptest::collection::vec((0u8..8, 0u32..3, 0u64..40, 0u64..1000), 1..400)
        ) {
            let c = CountsCache::new();
            let mut model = std::collections::HashMap::new();
            for (op, shard, entity, likes) in ops {
                let k = (1 + (entity % 2) as u32, shard, entity / 2);
                match op {
                    0..=3 => {
                        let owner = (likes % 3 == 0).then_some(likes);
                        c.put(k, rec(likes, owner));
                        model.insert(k, rec(likes, owner));
                        proptest::prop_assert_eq!(c.get(k), Some(rec(likes, owner)));
                    }
                    4 => {
                        c.drop_shard(shard);
                        model.retain(|m: &CountsKey, _| m.1 != shard);
                    }
                    _ => {
                        c.prefetch(k);
                        let got = c.get(k);
                        proptest::prop_assert!(got.is_none() || got == model.get(&k).copied());
                    }
                }
            }
        }
    }

    #[test]
    fn a_set_spans_three_cache_lines() {
        assert_eq!(std::mem::size_of::<Slot>(), 48);
        assert_eq!(std::mem::size_of::<Set>(), 192);
        assert_eq!(std::mem::align_of::<Set>(), 64);
    }
}
