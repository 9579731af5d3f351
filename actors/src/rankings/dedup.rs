//! The bounded memory of event ids a sub-board has applied, which makes
//! scoring idempotent: a client that retries an event after a timeout or a
//! node crash gets `duplicate` instead of a second increment.
//!
//! It remembers the most recent `cap` ids in arrival (log) order. The bound
//! is the contract: a retry that arrives after `cap` newer events on the
//! same sub-board is applied again. Replicas apply the same log, so they
//! remember the same ids; the ids are stored with the board's changes, so
//! the memory survives passivation and restarts.

use std::collections::{HashSet, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

/// A client-chosen id, unique per event (e.g. a hash of the gift order id).
pub type EventId = u64;

#[derive(Debug, Clone)]
pub struct EventMemory {
    cap: usize,
    order: VecDeque<EventId>,
    seen: HashSet<EventId, IdHash>,
}

/// Hashes event ids for `seen`: a seeded 64-bit finalizer instead of
/// SipHash, which was a tenth of a hot board's apply (three hashes per
/// event: look up, insert, forget the oldest). Ids are chosen by clients,
/// so the seed is random per process: a client cannot aim its ids at one
/// bucket without knowing it. Only memory layout depends on it, never a
/// result, so replicas need not agree on it.
#[derive(Debug, Clone, Copy)]
pub struct IdHash {
    seed: u64,
}

impl Default for IdHash {
    fn default() -> Self {
        static SEED: OnceLock<u64> = OnceLock::new();
        let seed =
            *SEED.get_or_init(|| std::collections::hash_map::RandomState::new().hash_one(0u64));
        IdHash { seed }
    }
}

impl BuildHasher for IdHash {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher { state: self.seed }
    }
}

/// Mixes each written word into the state with murmur3's 64-bit finalizer.
#[derive(Debug, Clone, Copy)]
pub struct IdHasher {
    state: u64,
}

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, v: u64) {
        let mut h = self.state ^ v;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^= h >> 33;
        self.state = h;
    }

    fn finish(&self) -> u64 {
        self.state
    }
}

impl EventMemory {
    pub fn new(cap: usize) -> EventMemory {
        EventMemory { cap, order: VecDeque::new(), seen: HashSet::default() }
    }

    /// From stored ids, oldest first; keeps the newest `cap`.
    pub fn from_loaded(ids: impl IntoIterator<Item = EventId>, cap: usize) -> EventMemory {
        let mut m = EventMemory::new(cap);
        for id in ids {
            m.insert(id);
        }
        m
    }

    /// Records `id`; false if it is already remembered (a duplicate).
    pub fn insert(&mut self, id: EventId) -> bool {
        if self.cap == 0 {
            return true; // remembering nothing: every event is new
        }
        if !self.seen.insert(id) {
            return false;
        }
        self.order.push_back(id);
        while self.order.len() > self.cap {
            if let Some(old) = self.order.pop_front() {
                self.seen.remove(&old);
            }
        }
        true
    }

    pub fn contains(&self, id: EventId) -> bool {
        self.seen.contains(&id)
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The remembered ids, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = EventId> + '_ {
        self.order.iter().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn repeats_are_refused_until_forgotten() {
        let mut m = EventMemory::new(2);
        assert!(m.insert(1));
        assert!(!m.insert(1));
        assert!(m.insert(2));
        assert!(m.insert(3)); // forgets 1
        assert!(m.insert(1));
        assert_eq!(m.iter().collect::<Vec<_>>(), vec![3, 1]);
    }

    #[test]
    fn a_zero_cap_remembers_nothing() {
        let mut m = EventMemory::new(0);
        assert!(m.insert(1));
        assert!(m.insert(1));
        assert!(m.is_empty());
    }

    proptest! {
        #[test]
        fn remembers_exactly_the_newest_distinct_ids(
            ids in prop::collection::vec(0u64..30, 0..200),
            cap in 1usize..10,
        ) {
            let mut m = EventMemory::new(cap);
            let mut model: Vec<u64> = Vec::new();
            for id in ids {
                let fresh = !model.contains(&id);
                prop_assert_eq!(m.insert(id), fresh);
                if fresh {
                    model.push(id);
                    if model.len() > cap {
                        model.remove(0);
                    }
                }
                prop_assert_eq!(m.iter().collect::<Vec<_>>(), model.clone());
            }
            let reloaded = EventMemory::from_loaded(m.iter(), cap);
            prop_assert_eq!(reloaded.iter().collect::<Vec<_>>(), model);
        }
    }
}
