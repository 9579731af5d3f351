//! The index of an order list's chunks (`order.rs`): a Fenwick (binary
//! indexed) tree over their lengths.

/// A Fenwick (binary indexed) tree of chunk lengths: prefix sums and the
/// chunk holding a position in O(log chunks), rebuilt in O(chunks) when
/// chunks split or merge (once per ~LOAD inserts).
#[derive(Clone, Default)]
pub(super) struct Fenwick {
    /// 1-based: `tree[i]` sums the `i & -i` lengths ending at chunk `i - 1`;
    /// `tree[0]` is unused.
    pub(super) tree: Vec<usize>,
}

fn lowbit(i: usize) -> usize {
    i & i.wrapping_neg()
}

impl Fenwick {
    pub(super) fn rebuild<K>(&mut self, chunks: &[Vec<K>]) {
        self.tree.clear();
        self.tree.push(0);
        self.tree.extend(chunks.iter().map(Vec::len));
        let n = chunks.len();
        for i in 1..=n {
            let parent = i + lowbit(i);
            if parent <= n {
                self.tree[parent] += self.tree[i];
            }
        }
    }

    pub(super) fn inc(&mut self, ci: usize) {
        let mut i = ci + 1;
        while i < self.tree.len() {
            self.tree[i] += 1;
            i += lowbit(i);
        }
    }

    pub(super) fn dec(&mut self, ci: usize) {
        let mut i = ci + 1;
        while i < self.tree.len() {
            self.tree[i] -= 1;
            i += lowbit(i);
        }
    }

    /// Total length of the chunks before `ci`.
    pub(super) fn prefix(&self, ci: usize) -> usize {
        let (mut i, mut sum) = (ci, 0);
        while i > 0 {
            sum += self.tree[i];
            i -= lowbit(i);
        }
        sum
    }

    /// The chunk holding position `pos` and the offset in it. Descends from
    /// the largest power of two, keeping the longest prefix that ends at or
    /// before `pos`; `pos` must be below the total length.
    pub(super) fn find(&self, pos: usize) -> (usize, usize) {
        let n = self.tree.len().saturating_sub(1);
        let (mut idx, mut rem) = (0, pos);
        let mut step = n.checked_ilog2().map_or(0, |b| 1usize << b);
        while step > 0 {
            let next = idx + step;
            if next <= n && self.tree[next] <= rem {
                idx = next;
                rem -= self.tree[next];
            }
            step >>= 1;
        }
        (idx, rem)
    }
}
