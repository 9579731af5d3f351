//! Applied writes that are not in the shard's trees yet: the overlay of one
//! shard.
//!
//! Applying a Raft batch *stages* its writes here (newest value per key
//! wins); a *checkpoint* later moves the overlay into the trees (see
//! `StateStore::checkpoint`). Between the two, every read looks here first.
//! A key written many times between checkpoints (a hot board's header, a
//! hot member, an outbox record that is pushed and acknowledged) reaches
//! the trees once or not at all, and while a snapshot export holds the
//! trees still, apply goes on here.
//!
//! An overlay has two layers: `active`, which staging writes, and
//! `flushing`, the previous `active` while a checkpoint moves it. Readers
//! consult `active`, then `flushing`, then the trees; a checkpoint drops
//! `flushing` only after the trees hold all of it, so no read ever misses a
//! write that was staged before it started.

use crate::compact::Bytes;
use crate::trees::TreeRef;
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::Arc;
use std::time::Instant;

/// Staged values of one tree: `None` is a deletion. Keys and values are
/// held in place when short (`compact.rs`): staging a board member or a
/// like allocates nothing, and a lookup compares bytes in the map's nodes.
pub(crate) type Staged = BTreeMap<Bytes, Option<Bytes>>;

/// Staged values copied out of the layers for a reader: `None` is a deletion.
pub(crate) type Entries = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// A range of keys.
pub(crate) type KeyRange = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// The staged writes of one layer, per tree.
#[derive(Debug, Default)]
pub(crate) struct Overlay {
    trees: HashMap<TreeRef, Staged>,
    keys: usize,
}

impl Overlay {
    pub fn is_empty(&self) -> bool {
        self.keys == 0
    }

    /// Distinct keys staged.
    pub fn keys(&self) -> usize {
        self.keys
    }

    pub fn put(&mut self, tree: TreeRef, key: Bytes, value: Option<Bytes>) {
        if self.trees.entry(tree).or_default().insert(key, value).is_none() {
            self.keys += 1;
        }
    }

    /// `Some(None)`: staged as deleted; `None`: not staged here.
    pub fn get(&self, tree: TreeRef, key: &[u8]) -> Option<Option<&[u8]>> {
        self.trees.get(&tree)?.get(key).map(Option::as_deref)
    }

    /// Adds the entries of `tree` within `range` to `out`, keeping what
    /// `out` already has (a newer layer, read first).
    pub fn collect_range(&self, tree: TreeRef, range: &KeyRange, out: &mut Entries) {
        let Some(entries) = self.trees.get(&tree) else { return };
        let bounds = (as_slice(&range.0), as_slice(&range.1));
        for (k, v) in entries.range::<[u8], _>(bounds) {
            out.entry(k.to_vec()).or_insert_with(|| v.as_deref().map(<[u8]>::to_vec));
        }
    }

    /// Every staged write, grouped by tree, keys ascending.
    pub fn trees(&self) -> impl Iterator<Item = (&TreeRef, &Staged)> {
        self.trees.iter()
    }

    /// Drops every staged write of one tree.
    pub fn drop_tree(&mut self, tree: TreeRef) {
        if let Some(entries) = self.trees.remove(&tree) {
            self.keys -= entries.len();
        }
    }

    /// Drops every staged write of one shard's slice: keys starting with
    /// `prefix` in the business and ranking trees, and the whole shard meta
    /// tree `meta`.
    pub fn drop_shard(&mut self, prefix: &[u8], meta: TreeRef) {
        for (tree, entries) in self.trees.iter_mut() {
            let before = entries.len();
            if *tree == meta {
                entries.clear();
            } else if matches!(tree, TreeRef::Biz(_) | TreeRef::Rank(_)) {
                entries.retain(|k, _| !k.starts_with(prefix));
            }
            self.keys -= before - entries.len();
        }
    }
}

pub(crate) fn as_slice(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(v) => Bound::Included(v.as_slice()),
        Bound::Excluded(v) => Bound::Excluded(v.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// The keys that start with `prefix`, as a range.
pub(crate) fn prefix_range(prefix: &[u8]) -> KeyRange {
    // The first key after every key with this prefix: the prefix with its
    // last non-0xff byte incremented (and what follows it cut off).
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return (Bound::Included(prefix.to_vec()), Bound::Excluded(end));
        }
    }
    (Bound::Included(prefix.to_vec()), Bound::Unbounded)
}

/// One shard's two layers and the age of the oldest staged write.
#[derive(Debug, Default)]
pub(crate) struct Layers {
    pub active: Overlay,
    pub flushing: Option<Arc<Overlay>>,
    /// When `active` received its first write since it was last empty.
    pub since: Option<Instant>,
}

impl Layers {
    /// The newest staged value of a key, if any layer has one.
    pub fn get(&self, tree: TreeRef, key: &[u8]) -> Option<Option<Vec<u8>>> {
        if let Some(v) = self.active.get(tree, key) {
            return Some(v.map(<[u8]>::to_vec));
        }
        let v = self.flushing.as_ref()?.get(tree, key)?;
        Some(v.map(<[u8]>::to_vec))
    }

    /// Staged entries of `tree` in `range`, newest layer first.
    pub fn range(&self, tree: TreeRef, range: &KeyRange) -> Entries {
        let mut out = Entries::new();
        self.active.collect_range(tree, range, &mut out);
        if let Some(f) = &self.flushing {
            f.collect_range(tree, range, &mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_write_wins_and_deletions_are_remembered() {
        let mut o = Overlay::default();
        o.put(TreeRef::Biz(1), b"a".to_vec().into(), Some(b"1".to_vec().into()));
        o.put(TreeRef::Biz(1), b"a".to_vec().into(), Some(b"2".to_vec().into()));
        o.put(TreeRef::Biz(1), b"b".to_vec().into(), None);
        assert_eq!(o.keys(), 2);
        assert_eq!(o.get(TreeRef::Biz(1), b"a"), Some(Some(&b"2"[..])));
        assert_eq!(o.get(TreeRef::Biz(1), b"b"), Some(None));
        assert_eq!(o.get(TreeRef::Biz(2), b"a"), None, "trees are separate");
    }

    #[test]
    fn the_active_layer_shadows_the_flushing_one() {
        let mut old = Overlay::default();
        old.put(TreeRef::Rank(3), b"k1".to_vec().into(), Some(b"old".to_vec().into()));
        old.put(TreeRef::Rank(3), b"k2".to_vec().into(), Some(b"kept".to_vec().into()));
        let mut l = Layers { flushing: Some(Arc::new(old)), ..Layers::default() };
        l.active.put(TreeRef::Rank(3), b"k1".to_vec().into(), None);
        assert_eq!(l.get(TreeRef::Rank(3), b"k1"), Some(None));
        assert_eq!(l.get(TreeRef::Rank(3), b"k2"), Some(Some(b"kept".to_vec())));
        let all = l.range(TreeRef::Rank(3), &prefix_range(b"k"));
        assert_eq!(
            all.into_iter().collect::<Vec<_>>(),
            vec![(b"k1".to_vec(), None), (b"k2".to_vec(), Some(b"kept".to_vec()))]
        );
    }

    #[test]
    fn prefix_ranges_cover_exactly_the_prefix() {
        let mut o = Overlay::default();
        for k in [&b"ab"[..], b"ab\x00", b"ab\xff\xff", b"ac", b"aa\xff"] {
            o.put(TreeRef::Registry, k.to_vec().into(), Some(vec![].into()));
        }
        let mut out = Entries::new();
        o.collect_range(TreeRef::Registry, &prefix_range(b"ab"), &mut out);
        let keys: Vec<_> = out.keys().cloned().collect();
        assert_eq!(keys, vec![b"ab".to_vec(), b"ab\x00".to_vec(), b"ab\xff\xff".to_vec()]);
        assert_eq!(prefix_range(b"\xff\xff").1, Bound::Unbounded);
        assert_eq!(prefix_range(b"a\xff").1, Bound::Excluded(b"b".to_vec()));
    }

    #[test]
    fn dropping_a_shard_keeps_other_shards_and_the_registry() {
        let mut o = Overlay::default();
        o.put(TreeRef::Biz(1), [0, 0, 0, 5, 1].to_vec().into(), None);
        o.put(TreeRef::Biz(1), [0, 0, 0, 6, 1].to_vec().into(), None);
        o.put(TreeRef::Rank(2), [0, 0, 0, 5, 9].to_vec().into(), None);
        o.put(TreeRef::Shard(5), b"a:applied".to_vec().into(), Some(vec![1].into()));
        o.put(TreeRef::Shard(6), b"a:applied".to_vec().into(), Some(vec![1].into()));
        o.put(TreeRef::Registry, [0, 0, 0, 5].to_vec().into(), Some(vec![1].into()));
        o.drop_shard(&[0, 0, 0, 5], TreeRef::Shard(5));
        assert_eq!(o.keys(), 3);
        assert!(o.get(TreeRef::Biz(1), &[0, 0, 0, 6, 1]).is_some());
        assert!(o.get(TreeRef::Shard(6), b"a:applied").is_some());
        assert!(o.get(TreeRef::Registry, &[0, 0, 0, 5]).is_some());
    }
}
