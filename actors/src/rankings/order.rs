//! An order-statistic list: the members of one sub-board in rank order, with
//! the rank of a key and the key at a position both in O(log n).
//!
//! It is a chunked sorted list in the style of Python's
//! `sortedcontainers.SortedList`: sorted chunks of about `LOAD` keys, a dense
//! array of each chunk's largest key to binary-search for a chunk, and a
//! Fenwick tree over chunk lengths to map positions to chunks and back. A
//! `BTreeMap` would store the keys as compactly but cannot answer "what
//! position is this key" without walking the tree; a skiplist (or an
//! augmented tree) can, but pays about two pointers and a span count per key,
//! more than the key itself. Here the overhead is a few words per chunk, so a
//! 24-byte key costs about 26 bytes, and inserts move at most `2 * LOAD` keys
//! with one `memmove`, which is cheap next to the cache misses of a tree.

use super::fenwick::Fenwick;
use super::search::search;
use std::fmt;
use std::mem::size_of;

/// Keys per chunk the list aims for. Chunks split above `2 * LOAD` and merge
/// below `LOAD / 2`; 512 keeps an insert's `memmove` within a few pages while
/// the per-chunk arrays stay around a thousand entries for a million keys.
pub const DEFAULT_LOAD: usize = 128;

/// Sorted, unique keys with positional access; see the module docs.
#[derive(Clone)]
pub struct OrderList<K, const LOAD: usize = DEFAULT_LOAD> {
    /// Sorted, non-empty chunks; every key of a chunk is below every key of
    /// the next. With more than one chunk each holds `LOAD / 2..=2 * LOAD`.
    chunks: Vec<Vec<K>>,
    /// `maxes[i]` is the last key of `chunks[i]`: one dense array to search,
    /// instead of a cache miss on every probed chunk's allocation.
    maxes: Vec<K>,
    /// Chunk lengths, so positions map to chunks in O(log chunks).
    index: Fenwick,
    len: usize,
}

impl<K: Ord + Copy, const LOAD: usize> Default for OrderList<K, LOAD> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: fmt::Debug, const LOAD: usize> fmt::Debug for OrderList<K, LOAD> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.chunks.iter().flatten()).finish()
    }
}

impl<K: Ord + Copy, const LOAD: usize> OrderList<K, LOAD> {
    pub fn new() -> Self {
        // Smaller loads would split a chunk into empty halves.
        const { assert!(LOAD >= 2, "LOAD must be at least 2") };
        OrderList { chunks: Vec::new(), maxes: Vec::new(), index: Fenwick::default(), len: 0 }
    }

    /// Builds from keys already sorted ascending and unique (activation loads
    /// a whole board at once); O(n). Unsorted input is a bug, checked in
    /// debug builds only.
    pub fn from_sorted(keys: Vec<K>) -> Self {
        debug_assert!(keys.windows(2).all(|w| w[0] < w[1]), "keys must be sorted and unique");
        let mut list = Self::new();
        let n = keys.len();
        if n == 0 {
            return list;
        }
        // Spread the keys evenly: every chunk then holds at least LOAD / 2
        // when there are several, and exact allocations waste nothing.
        let count = n.div_ceil(LOAD);
        let (base, extra) = (n / count, n % count);
        list.chunks.reserve_exact(count);
        list.maxes.reserve_exact(count);
        let mut start = 0;
        for c in 0..count {
            let end = start + base + usize::from(c < extra);
            list.chunks.push(keys[start..end].to_vec());
            // `end > start` because base >= 1 (count <= n).
            list.maxes.push(keys[end - 1]);
            start = end;
        }
        list.index.rebuild(&list.chunks);
        list.len = n;
        list
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Inserts `k`; false if already present.
    pub fn insert(&mut self, k: K) -> bool {
        if self.chunks.is_empty() {
            self.chunks.push(vec![k]);
            self.maxes.push(k);
            self.index.rebuild(&self.chunks);
            self.len = 1;
            return true;
        }
        // The first chunk whose max is >= k; a new maximum goes at the end of
        // the last chunk.
        let ci = self.maxes.partition_point(|m| *m < k).min(self.chunks.len() - 1);
        let chunk = &mut self.chunks[ci];
        let Err(j) = search(chunk, &k) else { return false };
        if chunk.len() == chunk.capacity() {
            // Grow by an eighth rather than doubling: spare capacity stays
            // small, and the extra copies cost less than the insert's memmove.
            let room = (chunk.len() / 8).max(8).min(2 * LOAD + 1 - chunk.len());
            chunk.reserve_exact(room);
        }
        chunk.insert(j, k);
        if j + 1 == chunk.len() {
            self.maxes[ci] = k;
        }
        self.len += 1;
        if chunk.len() > 2 * LOAD {
            self.split(ci);
        } else {
            self.index.inc(ci);
        }
        true
    }

    /// Moves `old` to `new` (a member whose score changed): what
    /// `remove(old)` then `insert(new)` do. When `new` belongs in `old`'s
    /// chunk, the keys between the two shift by one in place: one chunk
    /// search, no chunk length or index to update (a member's move on a
    /// board usually stays within its chunk of ~`LOAD` neighbours). False,
    /// changing nothing, if `old` is absent or `new` is present (and not
    /// `old`).
    pub fn replace(&mut self, old: &K, new: K) -> bool {
        let Some((ci, j)) = self.locate(old) else { return false };
        if new == *old {
            return true;
        }
        // `new` may stay in chunk `ci` if it sorts after the previous
        // chunk and before the next one (below this chunk's max is enough:
        // that is below every key of the next chunk).
        let after_prev = ci == 0 || self.maxes[ci - 1] < new;
        let before_next = ci + 1 == self.chunks.len() || new < self.maxes[ci];
        if !(after_prev && before_next) {
            self.remove_at(ci, j);
            if self.insert(new) {
                return true;
            }
            // `new` was there already: put `old` back (no search for `new`
            // up front, which would cost every move to another chunk).
            self.insert(*old);
            return false;
        }
        let chunk = &mut self.chunks[ci];
        let Err(p) = search(chunk, &new) else { return false };
        // One `memmove` of the keys between (`rotate_*` was slower here).
        if p > j {
            chunk.copy_within(j + 1..p, j);
            chunk[p - 1] = new;
        } else {
            chunk.copy_within(p..j, p + 1);
            chunk[p] = new;
        }
        if let Some(&m) = chunk.last() {
            self.maxes[ci] = m;
        }
        true
    }

    /// Removes `k`; false if absent.
    pub fn remove(&mut self, k: &K) -> bool {
        match self.locate(k) {
            Some((ci, j)) => {
                self.remove_at(ci, j);
                true
            }
            None => false,
        }
    }

    pub fn contains(&self, k: &K) -> bool {
        self.locate(k).is_some()
    }

    /// 0-based position of `k` if present (number of smaller keys). O(log n).
    pub fn rank(&self, k: &K) -> Option<usize> {
        let (ci, j) = self.locate(k)?;
        Some(self.index.prefix(ci) + j)
    }

    /// The key at 0-based position `i`. O(log n).
    pub fn get(&self, i: usize) -> Option<&K> {
        if i >= self.len {
            return None;
        }
        let (ci, off) = self.index.find(i);
        self.chunks.get(ci)?.get(off)
    }

    pub fn first(&self) -> Option<&K> {
        self.chunks.first()?.first()
    }

    pub fn last(&self) -> Option<&K> {
        self.maxes.last()
    }

    pub fn pop_last(&mut self) -> Option<K> {
        let ci = self.chunks.len().checked_sub(1)?;
        // Chunks are never empty, so the last one has a last key.
        let j = self.chunks[ci].len() - 1;
        Some(self.remove_at(ci, j))
    }

    /// Keys from position `i` on, ascending (for top-N with offset and
    /// neighbours); O(log n + len). Empty when `i >= len`.
    pub fn iter_from(&self, i: usize) -> impl Iterator<Item = &K> + '_ {
        let (ci, off) = if i < self.len { self.index.find(i) } else { (self.chunks.len(), 0) };
        let head = self.chunks.get(ci).map_or(&[][..], |c| &c[off..]);
        let rest = self.chunks.get(ci + 1..).unwrap_or(&[]);
        head.iter().chain(rest.iter().flatten())
    }

    pub fn iter(&self) -> impl Iterator<Item = &K> + '_ {
        self.chunks.iter().flatten()
    }

    /// Bytes allocated on the heap by this list (capacity-based), for memory
    /// reporting; allocator rounding is not counted.
    pub fn heap_bytes(&self) -> usize {
        let keys: usize = self.chunks.iter().map(Vec::capacity).sum();
        self.chunks.capacity() * size_of::<Vec<K>>()
            + (keys + self.maxes.capacity()) * size_of::<K>()
            + self.index.tree.capacity() * size_of::<usize>()
    }

    /// The chunk and offset holding `k`, if present.
    fn locate(&self, k: &K) -> Option<(usize, usize)> {
        let ci = self.maxes.partition_point(|m| m < k);
        let j = search(self.chunks.get(ci)?, k).ok()?;
        Some((ci, j))
    }

    fn remove_at(&mut self, ci: usize, j: usize) -> K {
        let several = self.chunks.len() > 1;
        let chunk = &mut self.chunks[ci];
        let k = chunk.remove(j);
        self.len -= 1;
        if let Some(&m) = chunk.last() {
            self.maxes[ci] = m;
        }
        if chunk.is_empty() {
            self.chunks.remove(ci);
            self.maxes.remove(ci);
            if self.chunks.is_empty() {
                // Hand the outer arrays back too: an emptied board may idle.
                *self = Self::new();
            } else {
                self.index.rebuild(&self.chunks);
            }
        } else if chunk.len() < LOAD / 2 && several {
            self.merge(ci);
        } else {
            // Give back capacity a shrinking chunk no longer needs. Shrinking
            // only past half spare, to an eighth spare, keeps alternating
            // inserts and removes from reallocating each time.
            let len = chunk.len();
            if chunk.capacity() - len > len / 2 + 8 {
                chunk.shrink_to(len + (len / 8).max(8));
            }
            self.index.dec(ci);
        }
        k
    }

    /// Splits an overfull chunk in two halves.
    fn split(&mut self, ci: usize) {
        let chunk = &mut self.chunks[ci];
        let half = chunk.len() / 2;
        // The right half gets an exact allocation and the left one gives its
        // tail back, so a split leaves no half-empty allocation behind.
        let right = chunk[half..].to_vec();
        chunk.truncate(half);
        chunk.shrink_to_fit();
        // `half >= LOAD >= 2`, since the chunk held more than 2 * LOAD keys.
        let left_max = chunk[half - 1];
        let right_max = self.maxes[ci];
        self.maxes[ci] = left_max;
        self.maxes.insert(ci + 1, right_max);
        self.chunks.insert(ci + 1, right);
        self.index.rebuild(&self.chunks);
    }

    /// Folds the short chunk `ci` into its left neighbour (the first chunk
    /// takes in the second), splitting the result if it is overfull.
    fn merge(&mut self, ci: usize) {
        let (left, right) = if ci == 0 { (0, 1) } else { (ci - 1, ci) };
        let moved = self.chunks.remove(right);
        self.maxes[left] = self.maxes.remove(right);
        let dst = &mut self.chunks[left];
        dst.reserve_exact(moved.len());
        dst.extend_from_slice(&moved);
        if dst.len() > 2 * LOAD {
            self.split(left);
        } else {
            self.index.rebuild(&self.chunks);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;
    use std::fmt::Debug;
    use std::time::Instant;

    /// Structural invariants, on top of what the model comparison checks.
    fn check_shape<K: Ord + Copy + Debug, const L: usize>(l: &OrderList<K, L>) {
        assert_eq!(l.chunks.len(), l.maxes.len());
        assert_eq!(l.index.tree.len().saturating_sub(1), l.chunks.len());
        let mut total = 0;
        for (ci, c) in l.chunks.iter().enumerate() {
            assert!(!c.is_empty() && c.len() <= 2 * L, "chunk {ci} has {} keys", c.len());
            assert!(l.chunks.len() == 1 || c.len() >= L / 2, "chunk {ci} too short");
            assert!(c.windows(2).all(|w| w[0] < w[1]));
            assert_eq!(c.last(), Some(&l.maxes[ci]));
            assert_eq!(l.index.prefix(ci), total);
            total += c.len();
        }
        assert!(l.maxes.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(total, l.len());
    }

    fn check<K: Ord + Copy + Debug, const L: usize>(
        l: &OrderList<K, L>,
        model: &BTreeSet<K>,
        absent: K,
        from: usize,
    ) {
        check_shape(l);
        assert_eq!(l.len(), model.len());
        assert_eq!(l.is_empty(), model.is_empty());
        assert!(l.iter().eq(model.iter()));
        for (i, k) in model.iter().enumerate() {
            assert_eq!(l.get(i), Some(k));
            assert_eq!(l.rank(k), Some(i));
            assert!(l.contains(k));
        }
        assert_eq!(l.get(model.len()), None);
        if !model.contains(&absent) {
            assert_eq!(l.rank(&absent), None);
            assert!(!l.contains(&absent));
        }
        assert_eq!(l.first(), model.first());
        assert_eq!(l.last(), model.last());
        let from = from % (model.len() + 2);
        assert!(l.iter_from(from).eq(model.iter().skip(from)));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u32),
        Remove(u32),
        Replace(u32, u32),
        PopLast,
    }

    fn ops(keys: u32) -> impl Strategy<Value = Vec<(Op, u32, usize)>> {
        let op = prop_oneof![
            4 => (0..keys).prop_map(Op::Insert),
            2 => (0..keys).prop_map(Op::Remove),
            3 => (0..keys, 0..keys).prop_map(|(a, b)| Op::Replace(a, b)),
            1 => Just(Op::PopLast),
        ];
        proptest::collection::vec((op, 0..keys, any::<usize>()), 0..250)
    }

    fn apply<K: Ord + Copy + Debug, const L: usize>(
        l: &mut OrderList<K, L>,
        model: &mut BTreeSet<K>,
        ops: &[(Op, u32, usize)],
        key: fn(u32) -> K,
    ) {
        for (op, probe, from) in ops {
            match *op {
                Op::Insert(k) => assert_eq!(l.insert(key(k)), model.insert(key(k))),
                Op::Remove(k) => assert_eq!(l.remove(&key(k)), model.remove(&key(k))),
                Op::Replace(a, b) => {
                    let (a, b) = (key(a), key(b));
                    let moves = model.contains(&a) && (a == b || !model.contains(&b));
                    if moves {
                        model.remove(&a);
                        model.insert(b);
                    }
                    assert_eq!(l.replace(&a, b), moves);
                }
                Op::PopLast => assert_eq!(l.pop_last(), model.pop_last()),
            }
            check(l, model, key(*probe), *from);
        }
    }

    /// Runs `ops` from empty, then again from a `from_sorted` copy.
    fn run<K: Ord + Copy + Debug, const L: usize>(ops: &[(Op, u32, usize)], key: fn(u32) -> K) {
        let (mut l, mut model) = (OrderList::<K, L>::new(), BTreeSet::new());
        apply(&mut l, &mut model, ops, key);
        let mut rebuilt = OrderList::<K, L>::from_sorted(model.iter().copied().collect());
        check(&rebuilt, &model, key(0), 0);
        apply(&mut rebuilt, &mut model, ops, key);
    }

    proptest! {
        #[test]
        fn matches_model_load_2(ops in ops(120)) {
            run::<u32, 2>(&ops, |k| k);
        }

        #[test]
        fn matches_model_load_4(ops in ops(160)) {
            run::<u32, 4>(&ops, |k| k);
        }

        #[test]
        fn matches_model_load_8_pairs(ops in ops(200)) {
            run::<(u16, u16), 8>(&ops, |k| ((k % 13) as u16, (k / 13) as u16));
        }
    }

    #[test]
    fn empty_list() {
        let mut l = OrderList::<u32>::new();
        assert!(l.is_empty() && l.get(0).is_none() && l.first().is_none() && l.last().is_none());
        assert_eq!((l.rank(&1), l.remove(&1), l.pop_last()), (None, false, None));
        assert_eq!(l.iter_from(0).count() + l.iter().count(), 0);
        assert_eq!(l.heap_bytes(), 0);
        assert_eq!(OrderList::<u32>::from_sorted(Vec::new()).len(), 0);
        assert!(l.insert(1) && l.remove(&1) && l.is_empty());
        assert_eq!(l.heap_bytes(), 0, "an emptied list gives its memory back");
    }

    #[test]
    fn duplicates_and_out_of_range() {
        let mut l = OrderList::<u32, 4>::from_sorted((0..20).collect());
        assert!(!l.insert(7));
        assert_eq!(l.len(), 20);
        assert_eq!((l.get(19), l.get(20), l.get(usize::MAX)), (Some(&19), None, None));
        assert_eq!(l.iter_from(20).count() + l.iter_from(usize::MAX).count(), 0);
        assert!(l.iter_from(18).eq([18, 19].iter()));
    }

    #[test]
    fn removing_a_chunks_last_key_updates_its_max() {
        let mut l = OrderList::<u32, 4>::from_sorted((0..20).collect());
        let max0 = l.maxes[0];
        assert!(l.remove(&max0));
        assert_eq!(l.maxes[0], max0 - 1);
        assert_eq!((l.rank(&(max0 + 1)), l.rank(&max0)), (Some(max0 as usize), None));
        // Down to single-key chunks at LOAD = 2: emptied chunks are dropped.
        let mut l = OrderList::<u32, 2>::from_sorted((0..9).collect());
        for k in (0..9).rev().step_by(2) {
            assert!(l.remove(&k));
            check_shape(&l);
        }
        assert!(l.iter().eq([1, 3, 5, 7].iter()));
        assert_eq!(l.rank(&7), Some(3));
    }

    /// A splitmix64 step: deterministic keys without a `rand` dependency.
    fn next(state: &mut u64) -> u64 {
        *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    type Key24 = (u64, u64, u64);

    #[test]
    fn memory_per_24_byte_key() {
        // A million keys take ~5 s unoptimised; the ratio is the same at 200k.
        let n = if cfg!(debug_assertions) { 200_000 } else { 1_000_000 };
        let mut seed = 1;
        let keys: Vec<Key24> =
            (0..n).map(|_| (next(&mut seed) >> 44, next(&mut seed), 0)).collect();
        let mut l = OrderList::<Key24>::new();
        for k in &keys {
            l.insert(*k);
        }
        assert_eq!(l.len(), n);
        let per_key = l.heap_bytes() as f64 / n as f64;
        for k in keys.iter().step_by(2) {
            l.remove(k);
        }
        let after_removes = l.heap_bytes() as f64 / l.len() as f64;
        let mut sorted = keys;
        sorted.sort_unstable();
        let loaded = OrderList::<Key24>::from_sorted(sorted);
        let per_loaded = loaded.heap_bytes() as f64 / n as f64;
        eprintln!(
            "bytes/key: {per_key:.1} after {n} random inserts, {after_removes:.1} after removing \
             half, {per_loaded:.1} from_sorted"
        );
        assert!(per_key <= 40.0 && after_removes <= 40.0 && per_loaded <= 40.0);
    }

    #[test]
    fn timing_200k() {
        let n = 200_000;
        let mut seed = 2;
        let keys: Vec<Key24> = (0..n).map(|_| (next(&mut seed), next(&mut seed), 0)).collect();
        let mut l = OrderList::<Key24>::new();
        let t = Instant::now();
        for k in &keys {
            l.insert(*k);
        }
        let insert = t.elapsed().as_nanos() / n as u128;
        let t = Instant::now();
        let ranks: usize = keys.iter().filter_map(|k| l.rank(k)).sum();
        let rank = t.elapsed().as_nanos() / n as u128;
        let t = Instant::now();
        let got = (0..n).step_by(7).filter_map(|i| l.get(i)).count();
        let get = t.elapsed().as_nanos() / got as u128;
        assert!(ranks > 0);
        let build = if cfg!(debug_assertions) { "debug" } else { "release" };
        eprintln!("ns/op at 200k keys ({build}): insert {insert}, rank {rank}, get {get}");
    }
}
