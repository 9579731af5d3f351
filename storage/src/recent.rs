//! The newest entries of one group's log, as they were appended, so that
//! reading them back costs a clone instead of a `pread` and a decode.
//!
//! Why: openraft applies committed entries by reading them from the log,
//! a round after it appended them, and followers are sent entries the
//! same way. Reading each entry from the write-ahead log and decoding it
//! again was 3–5% of a scoring node's CPU (docs/benchmarks.md); the
//! entries' commands are shared (`Arc`), so a clone is a few counters.
//!
//! The cache holds a contiguous run of indexes ending at the log's last
//! entry, at most `budget` encoded bytes of them (always the last entry).
//! Truncation drops the tail it removes; a purge drops the head; an append
//! that does not follow the newest cached index starts the run afresh.
//! Readers use it only for ranges it covers entirely.

use std::collections::VecDeque;

pub(crate) struct Recent<E> {
    /// `(index, encoded bytes, entry)`, indexes ascending by one.
    entries: VecDeque<(u64, usize, E)>,
    bytes: usize,
    budget: usize,
}

impl<E: Clone> Recent<E> {
    pub fn new(budget: usize) -> Recent<E> {
        Recent { entries: VecDeque::new(), bytes: 0, budget }
    }

    /// Records an appended entry. The entries it lets go are moved to
    /// `gone`, for the caller to drop once it holds no lock: dropping a
    /// large batch takes a while, and the append that evicts it should not
    /// wait for that before it asks for its sync.
    pub fn push(&mut self, index: u64, size: usize, entry: E, gone: &mut Vec<E>) {
        if self.entries.back().is_some_and(|(last, _, _)| last + 1 != index) {
            gone.extend(self.entries.drain(..).map(|(_, _, e)| e));
            self.bytes = 0;
        }
        self.entries.push_back((index, size, entry));
        self.bytes += size;
        while self.bytes > self.budget && self.entries.len() > 1 {
            if let Some((_, n, e)) = self.entries.pop_front() {
                self.bytes -= n;
                gone.push(e);
            }
        }
    }

    /// Forgets every entry from `index` on (a truncation).
    pub fn truncate(&mut self, index: u64) {
        while self.entries.back().is_some_and(|(i, _, _)| *i >= index) {
            if let Some((_, n, _)) = self.entries.pop_back() {
                self.bytes -= n;
            }
        }
    }

    /// Forgets every entry up to and including `index` (a purge).
    pub fn purge(&mut self, index: u64) {
        while self.entries.front().is_some_and(|(i, _, _)| *i <= index) {
            if let Some((_, n, _)) = self.entries.pop_front() {
                self.bytes -= n;
            }
        }
    }

    /// The newest cached index, if any.
    pub fn last(&self) -> Option<u64> {
        self.entries.back().map(|(i, _, _)| *i)
    }

    /// Clones of the entries from `start` up to `end` (exclusive; `None`:
    /// to the newest), stopping after `budget` encoded bytes (at least one
    /// entry), if the cache holds `start`; `None` if it does not.
    pub fn read(&self, start: u64, end: Option<u64>, budget: usize) -> Option<Vec<E>> {
        let first = self.entries.front()?.0;
        if start < first || self.last().is_some_and(|last| start > last) {
            return None;
        }
        let mut out = Vec::new();
        let mut bytes = 0;
        for (index, size, e) in self.entries.range((start - first) as usize..) {
            if end.is_some_and(|end| *index >= end) {
                break;
            }
            out.push(e.clone());
            bytes += size;
            if bytes >= budget {
                break;
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    proptest! {
        /// Against a plain map of the log: whatever the appends, truncations
        /// and purges, a read the cache answers is what the log holds.
        #[test]
        fn answers_only_what_the_log_holds(
            ops in proptest::collection::vec((0u8..4, 0u64..40, 1usize..50), 0..200),
            budget in 1usize..200,
        ) {
            let mut log: BTreeMap<u64, u64> = BTreeMap::new();
            let mut r = Recent::new(budget);
            let mut version = 0u64;
            for (op, n, size) in ops {
                match op {
                    0 | 1 => {
                        // Appends go after the log's end, as openraft's do.
                        let index = log.keys().next_back().map_or(n, |l| l + 1);
                        version += 1;
                        log.insert(index, version);
                        r.push(index, size, version, &mut Vec::new());
                    }
                    2 => {
                        log.retain(|&i, _| i < n);
                        r.truncate(n);
                    }
                    _ => {
                        log.retain(|&i, _| i > n);
                        r.purge(n);
                    }
                }
                prop_assert!(r.last().is_none() || r.last() == log.keys().next_back().copied());
                for start in 0..45 {
                    if let Some(got) = r.read(start, Some(start + 5), usize::MAX) {
                        let want: Vec<u64> = log.range(start..start + 5).map(|(_, v)| *v).collect();
                        prop_assert_eq!(got, want);
                    }
                }
            }
        }
    }

    #[test]
    fn keeps_the_last_entry_whatever_its_size_and_reads_within_a_budget() {
        let mut r = Recent::new(10);
        let mut gone = Vec::new();
        r.push(1, 4, 'a', &mut gone);
        r.push(2, 4, 'b', &mut gone);
        r.push(3, 4, 'c', &mut gone); // over budget: 1 goes
        assert_eq!(gone, vec!['a']);
        assert_eq!(r.read(1, None, usize::MAX), None);
        assert_eq!(r.read(2, None, usize::MAX), Some(vec!['b', 'c']));
        assert_eq!(r.read(2, None, 1), Some(vec!['b']), "at least one entry");
        r.push(4, 100, 'd', &mut gone);
        assert_eq!(r.read(4, None, usize::MAX), Some(vec!['d']));
        r.push(9, 1, 'x', &mut gone); // a gap: the run starts afresh
        assert_eq!(gone, vec!['a', 'b', 'c', 'd']);
        assert_eq!(r.read(4, None, usize::MAX), None);
        assert_eq!(r.last(), Some(9));
    }
}
