//! The heaviest keys of a stream in bounded memory, over a sliding window:
//! Space-Saving (Metwally, Agrawal and El Abbadi, 2005) per one-second
//! bucket, the buckets of the window summed when asked.
//!
//! ```text
//! add(key, w) ─ tracked? count += w
//!             └ room?    track (count w)
//!             └ else     replace the smallest: count = min + w, err = min
//! ```
//!
//! With `cap` slots, a key whose weight in a bucket exceeds the bucket's
//! total / `cap` is always tracked, and a tracked key's count is over its
//! true weight by at most its `err`. The window is the last `span` buckets;
//! a key missing from a bucket counts zero there, so a key that was hot
//! in part of the window is under-counted by at most the smallest counts
//! of those buckets. Pure: the caller passes the second.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// One bucket's summary.
#[derive(Debug, Clone)]
pub struct SpaceSaving<K> {
    slots: Vec<Slot<K>>,
    index: HashMap<K, usize>,
    cap: usize,
}

#[derive(Debug, Clone)]
struct Slot<K> {
    key: K,
    count: u64,
    err: u64,
}

impl<K: Hash + Eq + Clone> SpaceSaving<K> {
    pub fn new(cap: usize) -> Self {
        let cap = cap.max(1);
        SpaceSaving { slots: Vec::with_capacity(cap), index: HashMap::with_capacity(cap), cap }
    }

    /// Adds `w` to `key`'s weight.
    pub fn add(&mut self, key: &K, w: u64) {
        if let Some(&i) = self.index.get(key) {
            self.slots[i].count += w;
            return;
        }
        if self.slots.len() < self.cap {
            self.index.insert(key.clone(), self.slots.len());
            self.slots.push(Slot { key: key.clone(), count: w, err: 0 });
            return;
        }
        // A linear scan: `cap` is small (tens), and the common case (a
        // tracked key) never gets here.
        let (i, min) = self
            .slots
            .iter()
            .enumerate()
            .map(|(i, s)| (i, s.count))
            .min_by_key(|&(_, c)| c)
            .expect("cap >= 1");
        self.index.remove(&self.slots[i].key);
        self.slots[i] = Slot { key: key.clone(), count: min + w, err: min };
        self.index.insert(key.clone(), i);
    }

    /// `key`'s count, if it is tracked.
    pub fn count_of(&self, key: &K) -> Option<u64> {
        self.index.get(key).map(|&i| self.slots[i].count)
    }

    /// Every tracked key: `(key, count, err)`.
    pub fn iter(&self) -> impl Iterator<Item = (&K, u64, u64)> {
        self.slots.iter().map(|s| (&s.key, s.count, s.err))
    }
}

/// The last `span` one-second buckets of a stream.
#[derive(Debug, Clone)]
pub struct Window<K> {
    buckets: VecDeque<(u64, SpaceSaving<K>)>,
    span: u64,
    cap: usize,
}

/// A key's weight over the window, as `Window::top` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heavy<K> {
    pub key: K,
    /// Summed over the window's buckets: at least the true weight in the
    /// buckets that tracked it.
    pub count: u64,
    /// How much of `count` may be over-estimate.
    pub err: u64,
}

impl<K: Hash + Eq + Clone> Window<K> {
    /// A window of `span` seconds (at least 1) of `cap` slots each.
    pub fn new(span: u64, cap: usize) -> Self {
        Window { buckets: VecDeque::new(), span: span.max(1), cap }
    }

    /// Adds `w` to `key` in second `now`. A second older than the newest
    /// bucket counts in the newest (clocks read by different threads).
    pub fn add(&mut self, now: u64, key: &K, w: u64) {
        let newest = self.buckets.back().map(|(s, _)| *s);
        if newest.is_none_or(|s| now > s) {
            self.buckets.push_back((now, SpaceSaving::new(self.cap)));
            self.expire(now);
        }
        if let Some((_, b)) = self.buckets.back_mut() {
            b.add(key, w);
        }
    }

    fn expire(&mut self, now: u64) {
        while self.buckets.front().is_some_and(|(s, _)| s + self.span <= now) {
            self.buckets.pop_front();
        }
    }

    /// `key`'s count over the seconds `(now - span, now]` (0 in the buckets
    /// that did not track it).
    pub fn count_of(&self, now: u64, key: &K) -> u64 {
        self.buckets
            .iter()
            .filter(|(s, _)| s + self.span > now && *s <= now)
            .filter_map(|(_, b)| b.count_of(key))
            .sum()
    }

    /// The `n` heaviest keys of the seconds `(now - span, now]`, heaviest
    /// first (ties by key order of first appearance).
    pub fn top(&self, now: u64, n: usize) -> Vec<Heavy<K>> {
        self.top_over(now, self.span, n)
    }

    /// `top` over the last `secs` seconds of the window only (at most its
    /// span): what is hot now, not over the whole window.
    pub fn top_over(&self, now: u64, secs: u64, n: usize) -> Vec<Heavy<K>> {
        let secs = secs.min(self.span);
        let mut sum: HashMap<&K, (u64, u64)> = HashMap::new();
        let mut order: Vec<&K> = Vec::new();
        for (_, b) in self.buckets.iter().filter(|(s, _)| s + secs > now && *s <= now) {
            for (k, c, e) in b.iter() {
                let entry = sum.entry(k).or_insert_with(|| {
                    order.push(k);
                    (0, 0)
                });
                entry.0 += c;
                entry.1 += e;
            }
        }
        let mut out: Vec<Heavy<K>> = order
            .into_iter()
            .map(|k| Heavy { key: k.clone(), count: sum[k].0, err: sum[k].1 })
            .collect();
        out.sort_by_key(|h| std::cmp::Reverse(h.count));
        out.truncate(n);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn tracked_keys_count_exactly_until_the_slots_run_out() {
        let mut s = SpaceSaving::new(2);
        s.add(&"a", 3);
        s.add(&"b", 1);
        s.add(&"a", 2);
        let got: Vec<_> = s.iter().map(|(k, c, e)| (*k, c, e)).collect();
        assert_eq!(got, [("a", 5, 0), ("b", 1, 0)]);
        // A new key takes the smallest slot and inherits its count as error.
        s.add(&"c", 1);
        let got: Vec<_> = s.iter().map(|(k, c, e)| (*k, c, e)).collect();
        assert_eq!(got, [("a", 5, 0), ("c", 2, 1)]);
    }

    #[test]
    fn the_window_forgets_old_seconds() {
        let mut w = Window::new(10, 4);
        w.add(100, &"old", 50);
        w.add(105, &"new", 5);
        assert_eq!(w.top(105, 1)[0].key, "old");
        assert_eq!(w.top(109, 2).len(), 2);
        // At 110 the second 100 has left the window (110 - 10).
        let top = w.top(110, 2);
        assert_eq!(top, vec![Heavy { key: "new", count: 5, err: 0 }]);
        w.add(120, &"newer", 1);
        assert_eq!(w.buckets.len(), 1, "expired buckets are dropped");
    }

    #[test]
    fn a_shorter_span_sees_only_the_last_seconds() {
        let mut w = Window::new(10, 4);
        w.add(100, &"old", 50);
        w.add(104, &"now", 3);
        w.add(105, &"now", 4);
        assert_eq!(w.top_over(105, 2, 5), vec![Heavy { key: "now", count: 7, err: 0 }]);
        assert_eq!(w.top_over(105, 99, 1)[0].key, "old", "capped at the window's span");
    }

    #[test]
    fn a_late_second_counts_in_the_newest_bucket() {
        let mut w = Window::new(10, 4);
        w.add(100, &"a", 1);
        w.add(99, &"a", 1);
        assert_eq!(w.top(100, 1)[0].count, 2);
    }

    proptest! {
        /// Space-Saving's guarantees, against exact counting: every key
        /// heavier than total / cap is tracked, and every tracked count is
        /// between the true weight and the true weight plus its error.
        #[test]
        fn heavy_keys_are_found_and_counts_are_bounded(
            stream in proptest::collection::vec((0u8..40, 1u64..5), 1..600),
            cap in 1usize..12,
        ) {
            let mut s = SpaceSaving::new(cap);
            let mut exact: HashMap<u8, u64> = HashMap::new();
            for (k, w) in &stream {
                s.add(k, *w);
                *exact.entry(*k).or_default() += w;
            }
            let total: u64 = exact.values().sum();
            let tracked: HashMap<u8, (u64, u64)> =
                s.iter().map(|(k, c, e)| (*k, (c, e))).collect();
            for (k, &w) in &exact {
                if w * cap as u64 > total {
                    prop_assert!(tracked.contains_key(k), "key {} of {} / {} missed", k, w, total);
                }
                if let Some(&(c, e)) = tracked.get(k) {
                    prop_assert!(c >= w && c - e <= w, "key {}: {} - {} vs {}", k, c, e, w);
                }
            }
        }
    }
}
