//! The active set of one kind of virtual actor in a shard: which keys have a
//! running actor, in least-recently-used order, so the shard can passivate
//! the coldest when it is over budget or idle. Pure bookkeeping, generic over
//! what it tracks so it is tested without actors.
//!
//! Every value also has an id (an actor's id), indexed, because the shard
//! learns that an actor stopped by its id alone, once per passivated actor:
//! finding it by scanning every active actor cost 7% of a like's CPU with a
//! thousand users active per shard.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::time::Instant;

/// A value with an identity of its own (an actor's id).
pub trait Identified {
    type Id: Hash + Eq;
    fn id(&self) -> Self::Id;
}

pub struct ActiveSet<K, V: Identified> {
    map: HashMap<K, (V, u64, Instant)>,
    /// tick of last use -> key; the first entry is the coldest.
    lru: BTreeMap<u64, K>,
    /// value id -> key, for every entry of `map`.
    ids: HashMap<V::Id, K>,
    tick: u64,
}

impl<K: Hash + Eq + Clone, V: Identified> Default for ActiveSet<K, V> {
    fn default() -> Self {
        ActiveSet { map: HashMap::new(), lru: BTreeMap::new(), ids: HashMap::new(), tick: 0 }
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

    /// The value for `k`, marking it most recently used.
    pub fn touch(&mut self, k: &K, now: Instant) -> Option<V>
    where
        V: Clone,
    {
        self.touch_mut(k, now).map(|v| v.clone())
    }

    /// [`touch`](Self::touch) for a value the set owns outright (a board
    /// held by its shard), lent rather than cloned.
    pub fn touch_mut(&mut self, k: &K, now: Instant) -> Option<&mut V> {
        self.tick += 1;
        let tick = self.tick;
        let (v, t, at) = self.map.get_mut(k)?;
        self.lru.remove(t);
        *t = tick;
        *at = now;
        self.lru.insert(tick, k.clone());
        Some(v)
    }

    pub fn insert(&mut self, k: K, v: V, now: Instant) {
        self.remove(&k);
        self.tick += 1;
        self.lru.insert(self.tick, k.clone());
        self.ids.insert(v.id(), k.clone());
        self.map.insert(k, (v, self.tick, now));
    }

    pub fn remove(&mut self, k: &K) -> Option<V> {
        let (v, t, _) = self.map.remove(k)?;
        self.lru.remove(&t);
        self.ids.remove(&v.id());
        Some(v)
    }

    /// Removes the entry whose value has id `id` (an actor that stopped),
    /// if it is still here.
    pub fn remove_id(&mut self, id: &V::Id) -> Option<K> {
        let k = self.ids.get(id)?.clone();
        self.remove(&k);
        Some(k)
    }

    /// Pops the coldest entries until at most `budget` remain.
    pub fn evict_over(&mut self, budget: usize) -> Vec<V> {
        let mut out = Vec::new();
        while self.map.len() > budget {
            let Some((_, k)) = self.lru.pop_first() else { break };
            if let Some((v, _, _)) = self.map.remove(&k) {
                self.ids.remove(&v.id());
                out.push(v);
            }
        }
        out
    }

    /// Pops every entry last used before `cutoff`.
    pub fn evict_idle(&mut self, cutoff: Instant) -> Vec<V> {
        let mut out = Vec::new();
        while let Some((_, k)) = self.lru.first_key_value() {
            let k = k.clone();
            match self.map.get(&k) {
                Some((_, _, at)) if *at < cutoff => {
                    self.lru.pop_first();
                    if let Some((v, _, _)) = self.map.remove(&k) {
                        self.ids.remove(&v.id());
                        out.push(v);
                    }
                }
                _ => break,
            }
        }
        out
    }

    /// Removes everything (e.g. before installing a snapshot).
    pub fn drain(&mut self) -> Vec<V> {
        self.lru.clear();
        self.ids.clear();
        self.map.drain().map(|(_, (v, _, _))| v).collect()
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
}
