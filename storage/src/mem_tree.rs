//! `MemTree`, one ordered map of applied state held in memory: what a
//! checkpoint has moved out of a shard's overlay (`pending.rs`). It replaces
//! the sled trees that held applied state before: a checkpoint into sled
//! copied a leaf node per insert and was a sixth of the likes mix's CPU and
//! a third of cold scoring's, and reads walked sled's tree from the root
//! (docs/benchmarks.md). Applied state is durable through the Raft log and
//! the shard's newest snapshot file instead: a restart loads the snapshot
//! and openraft replays the log after it (`state.rs` has the whole story).
//!
//! Keys are `Bytes` (`compact.rs`): short ones are held in the map's own
//! nodes, long ones boxed; values are boxed slices without spare capacity.
//! Scans copy the entries out in chunks under the read lock, so a scan's
//! callback never runs with the lock held (it may read other keys, and a
//! writer waiting for the lock would otherwise deadlock it).

use crate::compact::Bytes;
use crate::pending::{as_slice, KeyRange};
use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Keys in place when short (`Bytes`); values boxed. Values in place too
/// made every slot of the map's nodes 64 bytes, and nodes are partly empty:
/// 2M like records took 829 MiB of RSS against 714 with boxed values, for
/// no measurable gain in time.
type Map = BTreeMap<Bytes, Box<[u8]>>;

/// Entries a scan copies out per visit to the map.
const SCAN_CHUNK: usize = 64;

/// One tree of applied state. Cheap to clone (a shared handle).
#[derive(Clone, Default)]
pub(crate) struct MemTree(Arc<RwLock<Map>>);

impl MemTree {
    // Only map operations run under the lock, and they do not panic on
    // their own; a poisoned lock still holds a consistent map.
    fn read(&self) -> RwLockReadGuard<'_, Map> {
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Map> {
        self.0.write().unwrap_or_else(|e| e.into_inner())
    }

    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.read().get(key).map(|v| v.to_vec())
    }

    #[cfg(test)]
    pub fn insert(&self, key: &[u8], value: &[u8]) {
        self.write().insert(Bytes::from(key), value.into());
    }

    /// Writes several puts (`Some`) and removals (`None`) under one lock.
    /// Borrowed or owned: an owned long key or value is boxed without
    /// another copy. One search per put: a short key costs no allocation
    /// to look up with (`Bytes`).
    pub fn apply<K, V>(&self, ops: impl IntoIterator<Item = (K, Option<V>)>)
    where
        K: AsRef<[u8]> + Into<Bytes>,
        V: Into<Box<[u8]>>,
    {
        let mut map = self.write();
        for (k, v) in ops {
            match v {
                Some(v) => {
                    map.insert(k.into(), v.into());
                }
                None => {
                    map.remove(k.as_ref());
                }
            }
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Removes every key in `range`.
    pub fn remove_range(&self, range: &KeyRange) {
        if is_empty_range(&range.0, &range.1) {
            return;
        }
        let mut map = self.write();
        let doomed: Vec<Bytes> =
            map.range::<[u8], _>(as_slices(range)).map(|(k, _)| k.clone()).collect();
        for k in doomed {
            map.remove(&k);
        }
    }

    /// The entries in `range`, ascending or (with `rev`) descending, read
    /// a chunk at a time. Entries written during the walk may or may not be
    /// seen; callers that need a fixed view hold the shard frozen.
    pub fn scan(&self, range: KeyRange, rev: bool) -> Scan {
        Scan {
            tree: self.clone(),
            lo: range.0,
            hi: range.1,
            rev,
            buf: VecDeque::new(),
            done: false,
        }
    }
}

/// A walk over a range of a `MemTree` (see `MemTree::scan`).
pub(crate) struct Scan {
    tree: MemTree,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    rev: bool,
    buf: VecDeque<(Vec<u8>, Vec<u8>)>,
    done: bool,
}

impl Scan {
    fn refill(&mut self) {
        if is_empty_range(&self.lo, &self.hi) {
            // BTreeMap::range panics on bounds that cross.
            self.done = true;
            return;
        }
        let map = self.tree.read();
        let range = map.range::<[u8], _>(as_slices(&(self.lo.clone(), self.hi.clone())));
        #[allow(clippy::borrowed_box)] // the map's own item type
        let copy = |(k, v): (&Bytes, &Box<[u8]>)| (k.to_vec(), v.to_vec());
        if self.rev {
            self.buf.extend(range.rev().take(SCAN_CHUNK).map(copy));
        } else {
            self.buf.extend(range.take(SCAN_CHUNK).map(copy));
        }
        drop(map);
        if self.buf.len() < SCAN_CHUNK {
            self.done = true;
        }
        // The next chunk starts after the last key copied.
        if let Some((last, _)) = self.buf.back() {
            if self.rev {
                self.hi = Bound::Excluded(last.clone());
            } else {
                self.lo = Bound::Excluded(last.clone());
            }
        }
    }
}

impl Iterator for Scan {
    type Item = (Vec<u8>, Vec<u8>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.buf.is_empty() && !self.done {
            self.refill();
        }
        self.buf.pop_front()
    }
}

/// Whether no key can lie between `lo` and `hi`.
fn is_empty_range(lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    use Bound::*;
    match (lo, hi) {
        (Included(l), Included(h)) => l > h,
        (Included(l) | Excluded(l), Excluded(h)) | (Excluded(l), Included(h)) => l >= h,
        _ => false,
    }
}

fn as_slices(r: &KeyRange) -> (Bound<&[u8]>, Bound<&[u8]>) {
    (as_slice(&r.0), as_slice(&r.1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pending::prefix_range;
    use proptest::prelude::*;

    fn all() -> KeyRange {
        (Bound::Unbounded, Bound::Unbounded)
    }

    #[test]
    fn puts_replace_and_removals_hide() {
        let t = MemTree::default();
        t.insert(b"a", b"1");
        t.apply([(&b"a"[..], Some(&b"2"[..])), (&b"b"[..], Some(&b"3"[..])), (&b"c"[..], None)]);
        assert_eq!(t.get(b"a"), Some(b"2".to_vec()));
        t.apply([(&b"b"[..], None::<&[u8]>)]);
        assert_eq!(t.get(b"b"), None);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn removing_a_prefix_keeps_its_neighbours() {
        let t = MemTree::default();
        for k in [&b"aa"[..], b"ab", b"ab\x00", b"ab\xff", b"ac"] {
            t.insert(k, b"");
        }
        t.remove_range(&prefix_range(b"ab"));
        let keys: Vec<_> = t.scan(all(), false).map(|(k, _)| k).collect();
        assert_eq!(keys, vec![b"aa".to_vec(), b"ac".to_vec()]);
    }

    #[test]
    fn a_scan_may_write_the_tree_it_walks() {
        // The callback of a scan runs without the lock: writing from it
        // must neither deadlock nor lose the walk's place.
        let t = MemTree::default();
        for i in 0u32..200 {
            t.insert(&i.to_be_bytes(), b"x");
        }
        let mut seen = 0;
        for (k, _) in t.scan(all(), false) {
            t.apply([(&k[..], None::<&[u8]>)]);
            seen += 1;
        }
        assert_eq!((seen, t.len()), (200, 0));
    }

    proptest! {
        /// Scans in chunks give what one walk over a BTreeMap gives, in
        /// both directions and for any bounds.
        #[test]
        fn chunked_scans_match_the_map(
            keys in proptest::collection::btree_set(proptest::collection::vec(0u8..4, 0..4), 0..300),
            lo in proptest::collection::vec(0u8..4, 0..3),
            hi in proptest::collection::vec(0u8..4, 0..3),
            rev: bool,
        ) {
            let t = MemTree::default();
            let mut model = BTreeMap::new();
            for k in &keys {
                t.insert(k, &[k.len() as u8]);
                model.insert(k.clone(), vec![k.len() as u8]);
            }
            let range = (Bound::Included(lo.clone()), Bound::Excluded(hi.clone()));
            let want: Vec<(Vec<u8>, Vec<u8>)> = if lo >= hi {
                Vec::new()
            } else if rev {
                model.range(lo.clone()..hi.clone()).rev().map(|(k, v)| (k.clone(), v.clone())).collect()
            } else {
                model.range(lo.clone()..hi.clone()).map(|(k, v)| (k.clone(), v.clone())).collect()
            };
            let got: Vec<_> = t.scan(range, rev).collect();
            prop_assert_eq!(got, want);
        }
    }
}
