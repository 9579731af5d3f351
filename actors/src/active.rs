//! The active set of one kind of virtual actor in a shard: which keys have a
//! running actor, in least-recently-used order, so the shard can passivate
//! the coldest when it is over budget or idle. Pure bookkeeping, generic over
//! what it tracks so it is tested without actors.
//!
//! Every value also has an id (an actor's id), indexed, because the shard
//! learns that an actor stopped by its id alone, once per passivated actor:
//! finding it by scanning every active actor cost 7% of a like's CPU with a
//! thousand users active per shard.

use plaudit_proto::keyed_hash::KeyedHash;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// How many actors of each kind a shard may keep active: its share of its
/// node's budget. One value shared by every shard of a node, which the
/// node changes as it starts replicas, so a shard reads it at each check.
#[derive(Debug, Clone)]
pub struct Budget(Arc<AtomicUsize>);

impl Budget {
    pub fn new(per_shard: usize) -> Budget {
        Budget(Arc::new(AtomicUsize::new(per_shard)))
    }

    pub fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    /// Sets the share; returns the one it replaces.
    pub fn set(&self, per_shard: usize) -> usize {
        self.0.swap(per_shard, Ordering::Relaxed)
    }
}

/// A value with an identity of its own (an actor's id).
pub trait Identified {
    type Id: Hash + Eq;
    fn id(&self) -> Self::Id;
}

pub struct ActiveSet<K, V: Identified> {
    /// Keyed-hashed (`keyed_hash.rs`): clients choose the ids in `K`.
    map: HashMap<K, Entry<V>, KeyedHash>,
    /// tick -> key, one per entry, under the tick it was *registered* at
    /// (which may be older than its last use); the first is the coldest
    /// candidate.
    lru: BTreeMap<u64, K>,
    /// value id -> key, for every entry of `map`.
    ids: HashMap<V::Id, K, KeyedHash>,
    tick: u64,
}

struct Entry<V> {
    value: V,
    /// The tick of the entry's place in `lru`.
    registered: u64,
    /// The tick of its last use.
    last: u64,
    at: Instant,
}

impl<K: Hash + Eq + Clone, V: Identified> Default for ActiveSet<K, V> {
    fn default() -> Self {
        ActiveSet {
            map: HashMap::default(),
            lru: BTreeMap::new(),
            ids: HashMap::default(),
            tick: 0,
        }
    }
}

impl<K: Hash + Eq + Clone, V: Identified> ActiveSet<K, V> {
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn contains(&self, k: &K) -> bool {
        self.map.contains_key(k)
    }

    /// Every value, in no particular order (marks none used).
    pub fn values(&self) -> impl Iterator<Item = &V> + '_ {
        self.map.values().map(|e| &e.value)
    }

    /// The value for `k`, marking it most recently used.
    pub fn touch(&mut self, k: &K, now: Instant) -> Option<V>
    where
        V: Clone,
    {
        self.touch_mut(k, now).map(|v| v.clone())
    }

    /// [`touch`](Self::touch) for a value the set owns outright (a board
    /// held by its shard), lent rather than cloned.
    ///
    /// A touch only notes the tick: moving the key in `lru` on every use
    /// was a BTreeMap remove and insert per board per batch (4% of cold
    /// scoring's CPU with 10,000 boards). An entry found stale at the head
    /// of `lru` is moved to its last use then (`coldest`).
    pub fn touch_mut(&mut self, k: &K, now: Instant) -> Option<&mut V> {
        self.tick += 1;
        let e = self.map.get_mut(k)?;
        e.last = self.tick;
        e.at = now;
        Some(&mut e.value)
    }

    pub fn insert(&mut self, k: K, v: V, now: Instant) {
        self.remove(&k);
        self.tick += 1;
        self.lru.insert(self.tick, k.clone());
        self.ids.insert(v.id(), k.clone());
        self.map.insert(k, Entry { value: v, registered: self.tick, last: self.tick, at: now });
    }

    pub fn remove(&mut self, k: &K) -> Option<V> {
        let e = self.map.remove(k)?;
        self.lru.remove(&e.registered);
        self.ids.remove(&e.value.id());
        Some(e.value)
    }

    /// Removes the entry whose value has id `id` (an actor that stopped),
    /// if it is still here.
    pub fn remove_id(&mut self, id: &V::Id) -> Option<K> {
        let k = self.ids.get(id)?.clone();
        self.remove(&k);
        Some(k)
    }

    /// The least recently used entry: its key and when it was last used.
    /// Moves stale heads of `lru` to their last use on the way.
    fn coldest(&mut self) -> Option<(K, Instant)> {
        loop {
            let (&tick, k) = self.lru.first_key_value()?;
            let k = k.clone();
            let Some(e) = self.map.get_mut(&k) else {
                self.lru.pop_first(); // not reachable: every key in lru is mapped
                continue;
            };
            if e.last == tick {
                return Some((k, e.at));
            }
            self.lru.pop_first();
            e.registered = e.last;
            self.lru.insert(e.last, k);
        }
    }

    /// Pops the coldest entries until at most `budget` remain.
    pub fn evict_over(&mut self, budget: usize) -> Vec<V> {
        let mut out = Vec::new();
        while self.map.len() > budget {
            let Some((k, _)) = self.coldest() else { break };
            out.extend(self.remove(&k));
        }
        out
    }

    /// Pops every entry last used before `cutoff`.
    pub fn evict_idle(&mut self, cutoff: Instant) -> Vec<V> {
        let mut out = Vec::new();
        while let Some((k, at)) = self.coldest() {
            if at >= cutoff {
                break;
            }
            out.extend(self.remove(&k));
        }
        out
    }

    /// Removes everything (e.g. before installing a snapshot).
    pub fn drain(&mut self) -> Vec<V> {
        self.lru.clear();
        self.ids.clear();
        self.map.drain().map(|(_, e)| e.value).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    // In these tests a value is its own id.
    impl Identified for i32 {
        type Id = i32;
        fn id(&self) -> i32 {
            *self
        }
    }

    #[test]
    fn evicts_least_recently_used_first() {
        let t0 = Instant::now();
        let mut s = ActiveSet::default();
        for k in 0..5 {
            s.insert(k, k * 10, t0);
        }
        s.touch(&0, t0);
        assert_eq!(s.evict_over(3), vec![10, 20]);
        assert_eq!(s.len(), 3);
        assert_eq!(s.touch(&0, t0), Some(0));
    }

    #[test]
    fn evicts_idle_entries_only() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(10);
        let mut s = ActiveSet::default();
        s.insert("a", 1, t0);
        s.insert("b", 2, t0);
        s.touch(&"a", t1);
        assert_eq!(s.evict_idle(t0 + Duration::from_secs(5)), vec![2]);
        assert_eq!(s.len(), 1);
        assert_eq!(s.remove_id(&1), Some("a"));
        assert!(s.is_empty());
    }

    #[test]
    fn ids_follow_every_way_out() {
        let t0 = Instant::now();
        let mut s = ActiveSet::default();
        for k in 0..4 {
            s.insert(k, k + 100, t0);
        }
        // Replacing a key's value forgets the old value's id.
        s.insert(0, 200, t0);
        assert_eq!(s.remove_id(&100), None);
        assert_eq!(s.evict_over(3), vec![101]);
        assert_eq!(s.remove_id(&101), None, "an evicted value is gone from the index");
        assert_eq!(s.remove_id(&102), Some(2));
        assert_eq!(s.evict_idle(t0 + Duration::from_secs(1)).len(), 2);
        assert!(s.ids.is_empty() && s.is_empty());
        s.insert(9, 300, t0);
        assert_eq!(s.drain(), vec![300]);
        assert!(s.ids.is_empty());
    }

    proptest::proptest! {
        /// Against a plain recency list: the same values leave, in the same
        /// order, whatever mix of inserts, touches, removals and evictions.
        #[test]
        fn evicts_exactly_like_a_recency_list(
            ops in proptest::collection::vec((0u8..4, 0i32..12), 0..300),
        ) {
            let t0 = Instant::now();
            let mut s = ActiveSet::default();
            let mut model: Vec<i32> = Vec::new(); // coldest first
            for (op, k) in ops {
                match op {
                    0 => {
                        s.insert(k, k, t0);
                        model.retain(|&m| m != k);
                        model.push(k);
                    }
                    1 => {
                        let hit = s.touch(&k, t0);
                        let pos = model.iter().position(|&m| m == k);
                        proptest::prop_assert_eq!(hit, pos.map(|_| k));
                        if let Some(p) = pos {
                            model.remove(p);
                            model.push(k);
                        }
                    }
                    2 => {
                        proptest::prop_assert_eq!(s.remove(&k), model.contains(&k).then_some(k));
                        model.retain(|&m| m != k);
                    }
                    _ => {
                        let budget = (k as usize) % 6;
                        let n = model.len().saturating_sub(budget);
                        let want: Vec<i32> = model.drain(..n).collect();
                        proptest::prop_assert_eq!(s.evict_over(budget), want);
                    }
                }
                proptest::prop_assert_eq!(s.len(), model.len());
                proptest::prop_assert_eq!(s.lru.len(), model.len());
            }
        }
    }
}
