//! How a sub-board stores the event ids it remembers: in numbered records of
//! up to `RECORD_IDS` ids. The newest record stays *open* while it has room
//! and every batch that applies events rewrites it; since applied state is
//! staged and checkpointed (storage `pending.rs`), a busy board writes one
//! record per checkpoint rather than one per batch. Old records are dropped
//! once the newer ones alone cover the memory bound.
//!
//! Records are small because the open one is copied out and encoded again
//! on every batch: with 10,000 cold boards each batch adds one id to most
//! boards it touches, and 512-id records made that ~2 KiB of copies per
//! event (docs/benchmarks.md). Records stored with more ids (by older
//! versions) load as they are and stay closed.
//!
//! Pure: it says which records to write and which to delete; the board
//! actor hands that to the shard's write set.

use std::collections::VecDeque;

/// Event ids per stored record.
pub const RECORD_IDS: usize = 64;

/// What one batch changes in storage.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RecordWrites {
    /// Records to store `(seq, ids)`: those the batch filled, then the open one.
    pub put: Vec<(u64, Vec<u64>)>,
    /// Records to delete.
    pub drop: Vec<u64>,
}

#[derive(Debug, Clone)]
pub struct EventRecords {
    /// Stored records, oldest first: `(seq, ids in it)`.
    records: VecDeque<(u64, usize)>,
    /// The newest record while it has room: `(seq, its ids)`.
    open: Option<(u64, Vec<u64>)>,
    /// The seq the next record gets.
    next: u64,
    /// Ids the kept records must cover (the board's event memory).
    keep: usize,
    /// Ids in `records`.
    total: usize,
}

impl EventRecords {
    /// From stored records, oldest first, and the stored next seq.
    pub fn from_loaded(stored: &[(u64, Vec<u64>)], next: u64, keep: usize) -> EventRecords {
        let records: VecDeque<_> = stored.iter().map(|(seq, ids)| (*seq, ids.len())).collect();
        let total = records.iter().map(|r| r.1).sum();
        let open = stored.last().filter(|(_, ids)| ids.len() < RECORD_IDS).cloned();
        let after_stored = stored.last().map_or(1, |(seq, _)| seq + 1);
        EventRecords { records, open, next: next.max(after_stored), keep, total }
    }

    /// The seq the next record will get (stored in the board's header).
    pub fn next_seq(&self) -> u64 {
        self.next
    }

    /// Records newly applied ids, in order.
    pub fn add(&mut self, ids: impl IntoIterator<Item = u64>) -> RecordWrites {
        let mut w = RecordWrites::default();
        let mut touched = false;
        for id in ids {
            touched = true;
            let (next, records) = (&mut self.next, &mut self.records);
            let (seq, open) = self.open.get_or_insert_with(|| {
                let seq = *next;
                *next += 1;
                records.push_back((seq, 0));
                (seq, Vec::with_capacity(RECORD_IDS))
            });
            open.push(id);
            if let Some(last) = records.back_mut() {
                last.1 += 1;
            }
            self.total += 1;
            if open.len() >= RECORD_IDS {
                w.put.push((*seq, std::mem::take(open)));
                self.open = None;
            }
        }
        if !touched {
            return w;
        }
        if let Some((seq, open)) = &self.open {
            w.put.push((*seq, open.clone()));
        }
        // Keep the fewest records that still cover `keep` ids.
        while let Some(&(old, n)) = self.records.front() {
            if self.total - n < self.keep || self.records.len() == 1 {
                break;
            }
            self.total -= n;
            self.records.pop_front();
            w.drop.push(old);
        }
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn the_open_record_is_rewritten_until_full() {
        let mut r = EventRecords::from_loaded(&[], 1, 10_000);
        assert_eq!(r.add([7, 8]).put, vec![(1, vec![7, 8])]);
        assert_eq!(r.add([9]).put, vec![(1, vec![7, 8, 9])]);
        assert_eq!(r.add([]), RecordWrites::default());
        let fill: Vec<u64> = (100..100 + RECORD_IDS as u64).collect();
        let w = r.add(fill);
        assert_eq!(w.put.len(), 2, "the filled record, then the new open one");
        assert_eq!((w.put[0].0, w.put[0].1.len()), (1, RECORD_IDS));
        assert_eq!((w.put[1].0, w.put[1].1.len()), (2, 3));
        assert_eq!(r.next_seq(), 3);
    }

    #[test]
    fn loading_reopens_a_record_with_room_and_never_reuses_a_seq() {
        let stored = vec![(4, vec![1; RECORD_IDS]), (5, vec![2, 3])];
        let mut r = EventRecords::from_loaded(&stored, 6, 10_000);
        assert_eq!(r.add([4]).put, vec![(5, vec![2, 3, 4])]);
        let full = vec![(4, vec![1; RECORD_IDS])];
        let mut r = EventRecords::from_loaded(&full, 0, 10_000);
        assert_eq!(r.add([4]).put, vec![(5, vec![4])], "a stale next seq is ignored");
    }

    proptest! {
        /// Replaying the writes into a map of stored records keeps: every
        /// record within size, seqs never reused, and the newest `keep` ids
        /// (all of them, if fewer) stored exactly once, in order.
        #[test]
        fn stored_records_cover_the_newest_ids(
            batches in proptest::collection::vec(0usize..1200, 1..40),
            keep in 1usize..3000,
            reload_every in 1usize..10,
        ) {
            let mut stored: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
            let mut next_header = 1;
            let mut r = EventRecords::from_loaded(&[], next_header, keep);
            let mut all: Vec<u64> = Vec::new();
            let mut seen_seqs = std::collections::HashSet::new();
            for (i, n) in batches.into_iter().enumerate() {
                if i % reload_every == 0 {
                    // Passivation or restart: rebuild from what is stored.
                    let loaded: Vec<_> = stored.iter().map(|(s, ids)| (*s, ids.clone())).collect();
                    r = EventRecords::from_loaded(&loaded, next_header, keep);
                }
                let ids: Vec<u64> = (0..n as u64).map(|k| all.len() as u64 + k).collect();
                all.extend(&ids);
                let w = r.add(ids);
                for (seq, ids) in w.put {
                    prop_assert!(ids.len() <= RECORD_IDS);
                    if !stored.contains_key(&seq) {
                        prop_assert!(seen_seqs.insert(seq), "seq {} reused", seq);
                    }
                    stored.insert(seq, ids);
                }
                for seq in w.drop {
                    prop_assert!(stored.remove(&seq).is_some());
                }
                next_header = r.next_seq();
                let flat: Vec<u64> = stored.values().flatten().copied().collect();
                let want = keep.min(all.len());
                prop_assert!(flat.len() >= want);
                prop_assert_eq!(&flat[..], &all[all.len() - flat.len()..]);
            }
        }
    }
}
