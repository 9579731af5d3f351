//! The active set of one kind of virtual actor in a shard: which keys have a
//! running actor, in least-recently-used order, so the shard can passivate
//! the coldest when it is over budget or idle. Pure bookkeeping, generic over
//! what it tracks so it is tested without actors.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::time::Instant;

pub struct ActiveSet<K, V> {
    map: HashMap<K, (V, u64, Instant)>,
    /// tick of last use -> key; the first entry is the coldest.
    lru: BTreeMap<u64, K>,
    tick: u64,
}

impl<K: Hash + Eq + Clone, V: Clone> Default for ActiveSet<K, V> {
    fn default() -> Self {
        ActiveSet { map: HashMap::new(), lru: BTreeMap::new(), tick: 0 }
    }
}

impl<K: Hash + Eq + Clone, V: Clone> ActiveSet<K, V> {
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The value for `k`, marking it most recently used.
    pub fn touch(&mut self, k: &K, now: Instant) -> Option<V> {
        self.tick += 1;
        let tick = self.tick;
        let (v, t, at) = self.map.get_mut(k)?;
        self.lru.remove(t);
        *t = tick;
        *at = now;
        self.lru.insert(tick, k.clone());
        Some(v.clone())
    }

    pub fn insert(&mut self, k: K, v: V, now: Instant) {
        self.remove(&k);
        self.tick += 1;
        self.lru.insert(self.tick, k.clone());
        self.map.insert(k, (v, self.tick, now));
    }

    pub fn remove(&mut self, k: &K) -> Option<V> {
        let (v, t, _) = self.map.remove(k)?;
        self.lru.remove(&t);
        Some(v)
    }

    /// Removes the first entry whose value matches (e.g. an actor that died).
    pub fn remove_where(&mut self, pred: impl Fn(&V) -> bool) -> Option<K> {
        let k = self.map.iter().find(|(_, (v, _, _))| pred(v)).map(|(k, _)| k.clone())?;
        self.remove(&k);
        Some(k)
    }

    /// Pops the coldest entries until at most `budget` remain.
    pub fn evict_over(&mut self, budget: usize) -> Vec<V> {
        let mut out = Vec::new();
        while self.map.len() > budget {
            let Some((_, k)) = self.lru.pop_first() else { break };
            if let Some((v, _, _)) = self.map.remove(&k) {
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
        self.map.drain().map(|(_, (v, _, _))| v).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
        assert_eq!(s.remove_where(|v| *v == 1), Some("a"));
        assert!(s.is_empty());
    }
}
