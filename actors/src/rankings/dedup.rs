//! The memory of event ids a sub-board has applied, which makes scoring
//! idempotent: a client that retries an event after a timeout or a node
//! crash gets `duplicate` instead of a second increment.
//!
//! **The contract.** An id is remembered for `window_s` seconds after the
//! batch that applied it (by the leader's stamp, `Batch::now`), so a retry
//! within that time is a duplicate whatever the board's rate — up to
//! `max_ids` ids per board, past which the oldest are forgotten first. The
//! default (`Dedup::DEFAULT`) is ten minutes and 1,048,576 ids: a board
//! keeps its full window up to ~1,750 events a second sustained; a busier
//! one remembers its newest million (e.g. the last 4 s at 250k events/s),
//! and says so in its gauges. Both bounds ride in every score command, so
//! every replica forgets the same ids at the same point of the log.
//!
//! **Why by time, in one-second runs.** A retry comes some seconds after
//! the first attempt, not some number of events after it: the count bound
//! alone (10,000 ids, before this) covered a few milliseconds of a hot
//! board. Ids are kept in arrival order with the second they arrived in,
//! as runs of `(second, count)`, so forgetting by time pops whole runs
//! from the front, and a board's stored image (`board_image.rs`) holds the
//! same runs: a replica that reloads the board from storage forgets
//! exactly what one that held it throughout forgets.
//!
//! **What an id costs.** 8 bytes in the arrival queue and a slot of 8
//! bytes in the lookup table (`id_set.rs`), at most 3/4 full, both doubling
//! as they grow: 19–37 bytes per id at their growth points, ~27 on
//! average; a board at the bound holds 19–37 MiB (`heap_bytes`, counted in
//! the shard's board gauges). Stored, an id is 8 bytes in records of up to
//! 64.

use super::id_set::IdSet;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// A client-chosen id, unique per event (e.g. a hash of the gift order id).
pub type EventId = u64;

/// How long a board remembers an event id, and how many it may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Dedup {
    /// Seconds an id is remembered after the batch that applied it; 0
    /// only for commands logged before the window existed (`LEGACY`).
    pub window_s: u32,
    /// Ids a board holds at most; past it the oldest are forgotten first.
    pub max_ids: u32,
}

impl Dedup {
    /// Ten minutes: longer than every retry the SDK and the CLI make.
    pub const DEFAULT: Dedup = Dedup { window_s: 600, max_ids: 1 << 20 };
    /// How score commands logged before the window existed are applied:
    /// the newest 10,000 ids, untimed (recorded in the newest run).
    pub const LEGACY: Dedup = Dedup { window_s: 0, max_ids: 10_000 };
}

#[derive(Debug, Clone)]
pub struct EventMemory {
    /// Remembered ids, oldest first.
    ids: VecDeque<EventId>,
    /// `(second, count)` runs over `ids`, oldest first; no count is 0.
    runs: VecDeque<(u64, u32)>,
    /// The same ids, to look them up.
    seen: IdSet,
    /// The rules of the command being applied.
    dedup: Dedup,
    /// The second new ids are recorded under.
    now_s: u64,
}

impl Default for EventMemory {
    fn default() -> Self {
        EventMemory::new()
    }
}

impl EventMemory {
    pub fn new() -> EventMemory {
        EventMemory {
            ids: VecDeque::new(),
            runs: VecDeque::new(),
            seen: IdSet::new(),
            dedup: Dedup::DEFAULT,
            now_s: 0,
        }
    }

    /// From stored runs `(second, ids)`, oldest first. Nothing is forgotten
    /// here: the next `begin` applies the bounds of its command.
    pub fn from_loaded(runs: impl IntoIterator<Item = (u64, Vec<EventId>)>) -> EventMemory {
        let mut m = EventMemory::new();
        for (second, ids) in runs {
            m.now_s = m.now_s.max(second);
            for id in ids {
                if m.seen.insert(id) {
                    m.push(id);
                }
            }
        }
        m
    }

    /// Takes the rules of the next command, applied at `now_ms` (the
    /// batch's stamp): forgets the ids whose window has passed, and the
    /// oldest past the bound.
    pub fn begin(&mut self, now_ms: u64, dedup: Dedup) {
        self.dedup = dedup;
        let newest = self.runs.back().map_or(0, |r| r.0);
        if dedup.window_s == 0 {
            // Untimed: the newest run takes the ids.
            self.now_s = newest;
        } else {
            self.now_s = (now_ms / 1000).max(newest);
            let last_kept = self.now_s.saturating_sub(u64::from(dedup.window_s));
            while let Some(&(second, count)) = self.runs.front() {
                if second >= last_kept {
                    break;
                }
                for _ in 0..count {
                    self.forget_oldest();
                }
            }
        }
        self.shrink_to(dedup.max_ids as usize);
    }

    /// Records `id`; false if it is already remembered (a duplicate).
    pub fn insert(&mut self, id: EventId) -> bool {
        if self.dedup.max_ids == 0 {
            return true; // remembering nothing: every event is new
        }
        if !self.seen.insert(id) {
            return false;
        }
        self.remember(id);
        true
    }

    /// Runs `apply` for an id not remembered, and records the id if it
    /// succeeds; `None` (nothing run) for a remembered one.
    pub fn apply_new<T, E>(
        &mut self,
        id: EventId,
        apply: impl FnOnce() -> Result<T, E>,
    ) -> Option<Result<T, E>> {
        if self.dedup.max_ids == 0 {
            return Some(apply());
        }
        let at = self.seen.vacancy(id)?;
        let res = apply();
        if res.is_ok() {
            // `apply` touched nothing of this memory: the place still holds.
            self.seen.put(at, id);
            self.remember(id);
        }
        Some(res)
    }

    /// Starts loading what applying `ids` will touch: their slots, and
    /// those of the oldest ids they would push out at a bound of
    /// `max_ids`. A hint (changes nothing): the misses of a batch then
    /// overlap instead of coming one after another. At most `PREFETCH` of
    /// each.
    pub fn prefetch(&self, ids: impl Iterator<Item = EventId>, max_ids: u32) {
        const PREFETCH: usize = 256;
        if !self.seen.is_large() {
            return; // in the caches already: a second pass would only cost
        }
        let mut n = 0;
        for id in ids.take(PREFETCH) {
            self.seen.prefetch(id);
            n += 1;
        }
        let over = (self.ids.len() + n).saturating_sub(max_ids as usize);
        for &old in self.ids.iter().take(over.min(PREFETCH)) {
            self.seen.prefetch(old);
        }
    }

    /// Puts a newly seen id last, forgetting the oldest past the bound.
    fn remember(&mut self, id: EventId) {
        self.push(id);
        self.shrink_to(self.dedup.max_ids as usize);
    }

    /// Appends `id` (already in `seen`) to the run of `now_s`.
    fn push(&mut self, id: EventId) {
        self.ids.push_back(id);
        match self.runs.back_mut() {
            Some((second, count)) if *second == self.now_s => *count += 1,
            _ => self.runs.push_back((self.now_s, 1)),
        }
    }

    fn shrink_to(&mut self, max: usize) {
        while self.ids.len() > max {
            self.forget_oldest();
        }
    }

    fn forget_oldest(&mut self) {
        let Some(old) = self.ids.pop_front() else { return };
        self.seen.remove(old);
        if let Some(front) = self.runs.front_mut() {
            front.1 -= 1;
            if front.1 == 0 {
                self.runs.pop_front();
            }
        }
    }

    pub fn contains(&self, id: EventId) -> bool {
        self.seen.contains(id)
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The remembered ids, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = EventId> + '_ {
        self.ids.iter().copied()
    }

    /// The remembered ids as `(second, ids)` runs, oldest first: what
    /// `from_loaded` takes back.
    pub fn runs(&self) -> Vec<(u64, Vec<EventId>)> {
        let mut out = Vec::with_capacity(self.runs.len());
        let mut at = 0;
        for &(second, count) in &self.runs {
            let count = count as usize;
            out.push((second, self.ids.range(at..at + count).copied().collect()));
            at += count;
        }
        out
    }

    /// The seconds the oldest remembered id has been kept, at the last
    /// `begin`: below the window, a board forgets early (it is at its bound).
    pub fn kept_s(&self) -> u64 {
        self.runs.front().map_or(0, |r| self.now_s - r.0)
    }

    /// Bytes this memory holds on the heap.
    pub fn heap_bytes(&self) -> usize {
        self.ids.capacity() * 8 + self.runs.capacity() * 16 + self.seen.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rules(window_s: u32, max_ids: u32) -> Dedup {
        Dedup { window_s, max_ids }
    }

    #[test]
    fn repeats_are_refused_until_forgotten_by_count() {
        let mut m = EventMemory::new();
        m.begin(0, rules(600, 2));
        assert!(m.insert(1));
        assert!(!m.insert(1));
        assert!(m.insert(2));
        assert!(m.insert(3)); // forgets 1
        assert!(m.insert(1));
        assert_eq!(m.iter().collect::<Vec<_>>(), vec![3, 1]);
    }

    #[test]
    fn an_id_is_remembered_for_its_window_and_then_forgotten() {
        let mut m = EventMemory::new();
        m.begin(10_500, rules(60, 1000));
        assert!(m.insert(7));
        m.begin(70_999, rules(60, 1000)); // 60.5 s later: within the window
        assert!(!m.insert(7));
        assert!(m.insert(8));
        m.begin(71_000, rules(60, 1000)); // second 71: second 10 is past
        assert!(!m.contains(7));
        assert!(m.contains(8));
        assert_eq!(m.runs(), vec![(70, vec![8])]);
        assert_eq!(m.kept_s(), 1);
    }

    #[test]
    fn a_zero_bound_remembers_nothing() {
        let mut m = EventMemory::new();
        m.begin(0, rules(600, 0));
        assert!(m.insert(1));
        assert!(m.insert(1));
        assert!(m.is_empty());
    }

    #[test]
    fn untimed_commands_keep_the_newest_run_and_the_count() {
        let mut m = EventMemory::new();
        m.begin(5_000, rules(600, 100));
        m.insert(1);
        m.begin(99_000, Dedup::LEGACY);
        m.insert(2);
        assert_eq!(m.runs(), vec![(5, vec![1, 2])], "no time passes for an untimed command");
        let mut fresh = EventMemory::new();
        fresh.begin(99_000, Dedup::LEGACY);
        fresh.insert(3);
        assert_eq!(fresh.runs(), vec![(0, vec![3])]);
    }

    #[test]
    fn two_hundred_thousand_newer_events_do_not_push_an_id_out() {
        let mut m = EventMemory::new();
        m.begin(1_000, Dedup::DEFAULT);
        assert!(m.insert(u64::MAX));
        for i in 0..200_000u64 {
            m.begin(1_000 + i / 100, Dedup::DEFAULT); // 2 s of a hot board
            assert!(m.insert(i));
        }
        assert!(!m.insert(u64::MAX));
        let per_id = m.heap_bytes() as f64 / m.len() as f64;
        assert!((10.0..40.0).contains(&per_id), "{per_id} bytes per id");
    }

    /// A model: every applied id with its second, in order.
    fn model_keep(model: &mut Vec<(u64, u64)>, now_s: u64, d: Dedup) {
        if d.window_s > 0 {
            let last_kept = now_s.saturating_sub(u64::from(d.window_s));
            model.retain(|&(_, s)| s >= last_kept);
        }
        while model.len() > d.max_ids as usize {
            model.remove(0);
        }
    }

    proptest! {
        /// Against a list of `(id, second)`: which ids are duplicates, what
        /// is forgotten by time and by count, and that a reload from the
        /// runs behaves the same from then on.
        #[test]
        fn remembers_exactly_the_ids_of_the_window_and_bound(
            steps in prop::collection::vec((0u64..40, 0u64..3_000, 0u8..3, any::<bool>()), 0..250),
            window in 1u32..5,
            max in 1u32..12,
        ) {
            let mut m = EventMemory::new();
            let mut model: Vec<(u64, u64)> = Vec::new();
            let mut now = 0u64;
            let mut reloaded: Option<EventMemory> = None;
            for (id, dt, how, reload) in steps {
                now += dt;
                let d = rules(window, max);
                m.begin(now, d);
                let now_s = (now / 1000).max(model.last().map_or(0, |l| l.1));
                model_keep(&mut model, now_s, d);
                if let Some(r) = reloaded.as_mut() {
                    r.begin(now, d);
                }
                let fresh = !model.iter().any(|&(i, _)| i == id);
                let got = match how {
                    0 => m.insert(id),
                    1 => m.apply_new(id, || Ok::<(), ()>(())).is_some(),
                    _ => {
                        let got = m.apply_new(id, || Err::<(), ()>(()));
                        prop_assert_eq!(got.is_some(), fresh);
                        false
                    }
                };
                if let Some(r) = reloaded.as_mut() {
                    let again = match how {
                        0 => r.insert(id),
                        1 => r.apply_new(id, || Ok::<(), ()>(())).is_some(),
                        _ => { r.apply_new(id, || Err::<(), ()>(())); false }
                    };
                    prop_assert_eq!(again, got);
                }
                if how < 2 {
                    prop_assert_eq!(got, fresh);
                    if fresh {
                        model.push((id, now_s));
                        model_keep(&mut model, now_s, d);
                    }
                }
                prop_assert_eq!(m.iter().collect::<Vec<_>>(), model.iter().map(|p| p.0).collect::<Vec<_>>());
                if reload {
                    reloaded = Some(EventMemory::from_loaded(m.runs()));
                }
                if let Some(r) = &reloaded {
                    prop_assert_eq!(r.runs(), m.runs());
                }
            }
        }
    }
}
