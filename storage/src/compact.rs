//! `Bytes`, the key and value type of applied state in memory: up to
//! `INLINE` bytes are held in place, longer ones in a box.
//!
//! Why: nearly every key of applied state is short (a board member's key
//! is 14–30 bytes, its value 17; a like's key and value are shorter still),
//! and with boxed slices every comparison of a lookup in a map of millions
//! of keys chased a pointer to a cold allocation, and every new key and
//! value were two allocations. Held in place, a lookup compares bytes that
//! sit in the map's own node, and an entry takes 64 bytes instead of 32
//! plus two allocations of at least 16 bytes each (docs/benchmarks.md).
//!
//! Ordering, equality and hashing are those of the byte slice, so a map
//! keyed by `Bytes` is searched with `&[u8]` (`Borrow<[u8]>`).

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

/// Bytes held in place; one less than a whole 32-byte value, for the tag.
pub(crate) const INLINE: usize = 30;

#[derive(Clone)]
pub(crate) enum Bytes {
    Inline(u8, [u8; INLINE]),
    Heap(Box<[u8]>),
}

const _: () = assert!(std::mem::size_of::<Bytes>() == 32);

impl Bytes {
    pub fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Inline(len, buf) => &buf[..*len as usize],
            Bytes::Heap(b) => b,
        }
    }
}

impl From<&[u8]> for Bytes {
    fn from(s: &[u8]) -> Bytes {
        if s.len() <= INLINE {
            let mut buf = [0u8; INLINE];
            buf[..s.len()].copy_from_slice(s);
            Bytes::Inline(s.len() as u8, buf)
        } else {
            Bytes::Heap(s.into())
        }
    }
}

impl From<Vec<u8>> for Bytes {
    /// A long vector is boxed without another copy (when it has no spare
    /// capacity); a short one is copied in place and freed.
    fn from(v: Vec<u8>) -> Bytes {
        if v.len() <= INLINE {
            Bytes::from(&v[..])
        } else {
            Bytes::Heap(v.into_boxed_slice())
        }
    }
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl Borrow<[u8]> for Bytes {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl PartialEq for Bytes {
    fn eq(&self, other: &Bytes) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Bytes {}

impl PartialOrd for Bytes {
    fn partial_cmp(&self, other: &Bytes) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Bytes {
    fn cmp(&self, other: &Bytes) -> Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

impl Hash for Bytes {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.as_slice().hash(h)
    }
}

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_slice().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn short_bytes_stay_in_place_and_long_ones_are_boxed() {
        assert!(matches!(Bytes::from(&[7u8; INLINE][..]), Bytes::Inline(30, _)));
        assert!(matches!(Bytes::from(vec![7u8; INLINE + 1]), Bytes::Heap(_)));
        assert_eq!(&*Bytes::from(Vec::new()), &[] as &[u8]);
    }

    proptest! {
        /// Whatever the lengths on either side of `INLINE`, `Bytes` orders
        /// and compares as its slice, so a map of `Bytes` is searched by
        /// slices.
        #[test]
        fn orders_as_its_slice(
            keys in proptest::collection::vec(proptest::collection::vec(0u8..3, 0..40), 0..60),
            probe in proptest::collection::vec(0u8..3, 0..40),
        ) {
            let mut model = BTreeMap::new();
            let mut map = BTreeMap::new();
            for (i, k) in keys.iter().enumerate() {
                model.insert(k.clone(), i);
                map.insert(Bytes::from(k.clone()), i);
            }
            let got: Vec<(Vec<u8>, usize)> = map.iter().map(|(k, v)| (k.to_vec(), *v)).collect();
            let want: Vec<(Vec<u8>, usize)> = model.iter().map(|(k, v)| (k.clone(), *v)).collect();
            prop_assert_eq!(got, want);
            prop_assert_eq!(map.get(&probe[..]), model.get(&probe));
            let after: Vec<usize> = map.range::<[u8], _>((std::ops::Bound::Excluded(&probe[..]), std::ops::Bound::Unbounded)).map(|(_, v)| *v).collect();
            let want_after: Vec<usize> = model.range::<Vec<u8>, _>((std::ops::Bound::Excluded(&probe), std::ops::Bound::Unbounded)).map(|(_, v)| *v).collect();
            prop_assert_eq!(after, want_after);
        }
    }
}
