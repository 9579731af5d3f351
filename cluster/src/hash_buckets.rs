//! A bounded map from a 64-bit hash to entries that carry their own full
//! key, shared by the thread memos of `score_route.rs` and `board_memo.rs`:
//! they look an entry up by a hash of borrowed parts (no owned key built
//! per lookup, which would cost the allocation the memos exist to save)
//! and compare the full key of each candidate. Past `CAP` entries it
//! starts over.
//!
//! The first entry of a hash lives in the map's own slot, and only entries
//! that share a hash with it (with 64 bits, practically none) in a `Vec`:
//! a lookup is one cache miss rather than two (the slot, then the `Vec`'s
//! heap), which was about 1.5% of the node on the rankings mix.

use plaudit_proto::keyed_hash::KeyedHash;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};

pub struct HashBuckets<E, const CAP: usize> {
    map: HashMap<u64, Bucket<E>, KeyedHash>,
    len: usize,
    hasher: KeyedHash,
}

/// The entries filed under one hash, in insertion order.
struct Bucket<E> {
    first: E,
    more: Vec<E>,
}

impl<E> Bucket<E> {
    fn get(&self, i: usize) -> Option<&E> {
        match i {
            0 => Some(&self.first),
            _ => self.more.get(i - 1),
        }
    }

    fn iter(&self) -> impl Iterator<Item = &E> {
        std::iter::once(&self.first).chain(&self.more)
    }
}

impl<E, const CAP: usize> Default for HashBuckets<E, CAP> {
    fn default() -> Self {
        HashBuckets { map: HashMap::default(), len: 0, hasher: KeyedHash::default() }
    }
}

impl<E, const CAP: usize> HashBuckets<E, CAP> {
    /// The hash entries of `key` are filed under (keyed per process).
    pub fn hash(&self, key: impl Hash) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The entry filed under `h` that `is` accepts, and its place.
    pub fn find(&self, h: u64, is: impl Fn(&E) -> bool) -> Option<(usize, &E)> {
        self.map.get(&h)?.iter().enumerate().find(|(_, e)| is(e))
    }

    /// The entry at a place `find` gave, if the map has not started over
    /// since (entries are only added until then, so places hold).
    pub fn at(&self, h: u64, i: usize) -> Option<&E> {
        self.map.get(&h)?.get(i)
    }

    /// Files `e` under `h`; true if the map was full and started over first.
    pub fn insert(&mut self, h: u64, e: E) -> bool {
        let full = self.len >= CAP;
        if full {
            self.clear();
        }
        match self.map.entry(h) {
            Entry::Occupied(mut b) => b.get_mut().more.push(e),
            Entry::Vacant(v) => {
                v.insert(Bucket { first: e, more: Vec::new() });
            }
        }
        self.len += 1;
        full
    }

    pub fn clear(&mut self) {
        self.map.clear();
        self.len = 0;
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_found_by_hash_and_key_and_the_map_starts_over_when_full() {
        let mut b: HashBuckets<(u32, &str), 3> = HashBuckets::default();
        // Two keys filed under one hash: the full key tells them apart.
        assert!(!b.insert(7, (1, "a")));
        assert!(!b.insert(7, (2, "b")));
        assert_eq!(b.find(7, |e| e.0 == 2), Some((1, &(2, "b"))));
        assert_eq!(b.at(7, 0), Some(&(1, "a")));
        assert_eq!(b.at(7, 1), Some(&(2, "b")));
        assert_eq!(b.at(7, 2), None);
        assert_eq!(b.find(7, |e| e.0 == 3), None);
        assert_eq!(b.find(8, |_| true), None);
        assert!(!b.insert(b.hash("c"), (3, "c")));
        assert_eq!(b.len(), 3);
        assert!(b.insert(9, (4, "d")), "full: it starts over");
        assert_eq!((b.len(), b.at(7, 0)), (1, None));
        assert_eq!(b.hash(("x", 1u8)), b.hash(("x", 1u8)));
    }
}
