//! A set of `u64` event ids for a board's event memory (`dedup.rs`):
//! open addressing with linear probing, the ids themselves in the slots
//! (0 marks an empty slot; id 0 is kept apart), at most 3/4 full, and a
//! way to prefetch an id's slot before it is needed.
//!
//! Why not `HashMap<u64, ()>`: a hot board remembers up to a million ids,
//! so every event's check misses the cache, and at the bound so does the
//! removal of the oldest id; hashbrown keeps its control bytes and its
//! keys in two arrays (two misses each), and offers no way to start those
//! loads early. Here a check is one line (the id is in the slot it probes),
//! a batch's ids and the ids it will push out are known before it is
//! applied, so their slots are prefetched together and their misses
//! overlap (`EventMemory::prefetch`). Measured on hot scoring: a million
//! ids in the std map cost 0.3 µs per event over 10,000
//! (docs/benchmarks.md).
//!
//! Deletion shifts the following entries of the cluster back (no
//! tombstones), so a set that churns through ids at its bound never
//! degrades. Ids are chosen by clients: slots come from the process's
//! keyed hash (`plaudit_proto::keyed_hash`), so a client cannot aim its ids
//! at one cluster.

use plaudit_proto::keyed_hash::KeyedHash;
use plaudit_proto::prefetch::prefetch;
use std::hash::BuildHasher;

const EMPTY: u64 = 0;
const MIN_SLOTS: usize = 16;

/// A free slot `IdSet::vacancy` found for an id.
#[derive(Debug, Clone, Copy)]
pub struct Vacancy(usize);

#[derive(Debug, Clone)]
pub struct IdSet {
    slots: Box<[u64]>,
    /// Ids in `slots` (not counting 0).
    len: usize,
    has_zero: bool,
    hash: KeyedHash,
}

impl Default for IdSet {
    fn default() -> Self {
        IdSet::new()
    }
}

impl IdSet {
    pub fn new() -> IdSet {
        IdSet { slots: Box::new([]), len: 0, has_zero: false, hash: KeyedHash::default() }
    }

    pub fn len(&self) -> usize {
        self.len + usize::from(self.has_zero)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes its table holds.
    pub fn heap_bytes(&self) -> usize {
        self.slots.len() * 8
    }

    /// The slot `id`'s probe starts at (the folded multiply mixes every
    /// bit into the low ones the mask keeps).
    fn home(&self, id: u64) -> usize {
        (self.hash.hash_one(id) as usize) & (self.slots.len() - 1)
    }

    /// Starts loading the line of `id`'s slot (a hint: changes nothing).
    pub fn prefetch(&self, id: u64) {
        if id != EMPTY && !self.slots.is_empty() {
            prefetch(&self.slots[self.home(id)]);
        }
    }

    /// Where `id` is (`Ok`), or the empty slot that ends its probe (`Err`).
    fn find(&self, id: u64) -> Result<usize, usize> {
        let mask = self.slots.len() - 1;
        let mut i = self.home(id);
        loop {
            match self.slots[i] {
                s if s == id => return Ok(i),
                EMPTY => return Err(i),
                _ => i = (i + 1) & mask,
            }
        }
    }

    pub fn contains(&self, id: u64) -> bool {
        if id == EMPTY {
            return self.has_zero;
        }
        !self.slots.is_empty() && self.find(id).is_ok()
    }

    /// Where `id` would go: `None` if it is there already, else a place
    /// for `put` (valid until the set next changes). One probe for what
    /// `contains` then `insert` would do with two.
    pub fn vacancy(&mut self, id: u64) -> Option<Vacancy> {
        if id == EMPTY {
            return (!self.has_zero).then_some(Vacancy(usize::MAX));
        }
        self.reserve_one();
        self.find(id).err().map(Vacancy)
    }

    /// Puts `id` where `vacancy` said (nothing else changed the set since).
    pub fn put(&mut self, at: Vacancy, id: u64) {
        if id == EMPTY {
            self.has_zero = true;
        } else {
            debug_assert_eq!(self.slots[at.0], EMPTY);
            self.slots[at.0] = id;
            self.len += 1;
        }
    }

    /// Whether the table is larger than the caches keep close: prefetching
    /// it is then worth its cost.
    pub fn is_large(&self) -> bool {
        self.heap_bytes() >= 1 << 20
    }

    /// Adds `id`; false if it was there already.
    pub fn insert(&mut self, id: u64) -> bool {
        if id == EMPTY {
            return !std::mem::replace(&mut self.has_zero, true);
        }
        self.reserve_one();
        match self.find(id) {
            Ok(_) => false,
            Err(free) => {
                self.slots[free] = id;
                self.len += 1;
                true
            }
        }
    }

    /// Takes `id` out; false if it was not there.
    pub fn remove(&mut self, id: u64) -> bool {
        if id == EMPTY {
            return std::mem::replace(&mut self.has_zero, false);
        }
        if self.slots.is_empty() {
            return false;
        }
        let Ok(mut hole) = self.find(id) else { return false };
        let mask = self.slots.len() - 1;
        // Backward shift: an entry after the hole moves into it unless its
        // home lies (cyclically) in (hole, at], where it already is on its
        // probe path.
        let mut at = hole;
        loop {
            at = (at + 1) & mask;
            let s = self.slots[at];
            if s == EMPTY {
                break;
            }
            let home = self.home(s);
            let stays =
                if hole <= at { hole < home && home <= at } else { hole < home || home <= at };
            if !stays {
                self.slots[hole] = s;
                hole = at;
            }
        }
        self.slots[hole] = EMPTY;
        self.len -= 1;
        true
    }

    /// Makes room for one more id, keeping the table at most 3/4 full.
    fn reserve_one(&mut self) {
        let cap = self.slots.len();
        if (self.len + 1) * 4 <= cap * 3 {
            return;
        }
        let new_cap = (cap * 2).max(MIN_SLOTS);
        let old = std::mem::replace(&mut self.slots, vec![EMPTY; new_cap].into_boxed_slice());
        let mask = new_cap - 1;
        for id in old.iter().copied().filter(|&s| s != EMPTY) {
            let mut i = self.home(id);
            while self.slots[i] != EMPTY {
                i = (i + 1) & mask;
            }
            self.slots[i] = id;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    #[test]
    fn zero_is_an_id_like_any_other() {
        let mut s = IdSet::new();
        assert!(!s.contains(0));
        assert!(s.insert(0));
        assert!(!s.insert(0));
        assert!(s.contains(0) && s.len() == 1);
        assert!(s.remove(0));
        assert!(!s.remove(0) && s.is_empty());
    }

    #[test]
    fn it_stays_at_most_three_quarters_full() {
        let mut s = IdSet::new();
        for i in 1..=100_000u64 {
            s.insert(i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        }
        assert_eq!(s.len(), 100_000);
        assert!(s.slots.len() * 3 >= s.len * 4);
        assert!(s.heap_bytes() <= 100_000 * 8 * 8 / 3, "{}", s.heap_bytes());
    }

    proptest! {
        /// Against `HashSet`: inserts, removals and lookups of ids from a
        /// small range (so they collide and clusters form, and removals
        /// shift them), in any order.
        #[test]
        fn behaves_as_a_set(ops in prop::collection::vec((0u8..3, 0u64..64), 0..600)) {
            let mut s = IdSet::new();
            let mut model = HashSet::new();
            for (op, id) in ops {
                match op {
                    0 => prop_assert_eq!(s.insert(id), model.insert(id)),
                    1 => prop_assert_eq!(s.remove(id), model.remove(&id)),
                    _ => prop_assert_eq!(s.contains(id), model.contains(&id)),
                }
                prop_assert_eq!(s.len(), model.len());
            }
            for id in 0..64 {
                prop_assert_eq!(s.contains(id), model.contains(&id));
            }
            // vacancy + put is insert.
            for id in 0..64 {
                match s.vacancy(id) {
                    Some(v) => {
                        prop_assert!(!model.contains(&id));
                        s.put(v, id);
                        model.insert(id);
                    }
                    None => prop_assert!(model.contains(&id)),
                }
                prop_assert_eq!(s.len(), model.len());
            }
            prop_assert!((0..64).all(|id| s.contains(id)));
        }
    }
}
