//! The bounded memory of event ids a sub-board has applied, which makes
//! scoring idempotent: a client that retries an event after a timeout or a
//! node crash gets `duplicate` instead of a second increment.
//!
//! It remembers the most recent `cap` ids in arrival (log) order. The bound
//! is the contract: a retry that arrives after `cap` newer events on the
//! same sub-board is applied again. Replicas apply the same log, so they
//! remember the same ids; the ids are stored with the board (its image,
//! `plaudit_storage::board_image`), so the memory survives passivation and
//! restarts.

use plaudit_proto::keyed_hash::KeyedHash;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};

/// A client-chosen id, unique per event (e.g. a hash of the gift order id).
pub type EventId = u64;

#[derive(Debug, Clone)]
pub struct EventMemory {
    cap: usize,
    order: VecDeque<EventId>,
    /// Ids are chosen by clients: a keyed hash (`plaudit_proto::keyed_hash`).
    /// A map rather than a set for its entry API (`apply_new`).
    seen: HashMap<EventId, (), KeyedHash>,
}

impl EventMemory {
    pub fn new(cap: usize) -> EventMemory {
        EventMemory { cap, order: VecDeque::new(), seen: HashMap::default() }
    }

    /// From stored ids, oldest first; keeps the newest `cap`.
    pub fn from_loaded(ids: impl IntoIterator<Item = EventId>, cap: usize) -> EventMemory {
        let mut m = EventMemory::new(cap);
        for id in ids {
            m.insert(id);
        }
        m
    }

    /// Records `id`; false if it is already remembered (a duplicate).
    pub fn insert(&mut self, id: EventId) -> bool {
        if self.cap == 0 {
            return true; // remembering nothing: every event is new
        }
        if self.seen.insert(id, ()).is_some() {
            return false;
        }
        self.remember(id);
        true
    }

    /// Runs `apply` for an id not remembered, and records the id if it
    /// succeeds; `None` (nothing run) for a remembered one. What
    /// `contains`, then `apply`, then `insert` do, with one lookup of the
    /// id instead of two (a hot board's apply spent a fifth of its time in
    /// this memory).
    pub fn apply_new<T, E>(
        &mut self,
        id: EventId,
        apply: impl FnOnce() -> Result<T, E>,
    ) -> Option<Result<T, E>> {
        if self.cap == 0 {
            return Some(apply());
        }
        let Entry::Vacant(slot) = self.seen.entry(id) else { return None };
        let res = apply();
        if res.is_ok() {
            slot.insert(());
            self.remember(id);
        }
        Some(res)
    }

    /// Puts a newly seen id last, forgetting the oldest past `cap`.
    fn remember(&mut self, id: EventId) {
        self.order.push_back(id);
        while self.order.len() > self.cap {
            if let Some(old) = self.order.pop_front() {
                self.seen.remove(&old);
            }
        }
    }

    pub fn contains(&self, id: EventId) -> bool {
        self.seen.contains_key(&id)
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The remembered ids, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = EventId> + '_ {
        self.order.iter().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn repeats_are_refused_until_forgotten() {
        let mut m = EventMemory::new(2);
        assert!(m.insert(1));
        assert!(!m.insert(1));
        assert!(m.insert(2));
        assert!(m.insert(3)); // forgets 1
        assert!(m.insert(1));
        assert_eq!(m.iter().collect::<Vec<_>>(), vec![3, 1]);
    }

    #[test]
    fn a_zero_cap_remembers_nothing() {
        let mut m = EventMemory::new(0);
        assert!(m.insert(1));
        assert!(m.insert(1));
        assert!(m.is_empty());
    }

    proptest! {
        /// `insert`, and `apply_new` whose apply succeeds or fails, against
        /// a list of the newest ids: a failed apply records nothing.
        #[test]
        fn remembers_exactly_the_newest_distinct_ids(
            ids in prop::collection::vec((0u64..30, 0u8..3), 0..200),
            cap in 1usize..10,
        ) {
            let mut m = EventMemory::new(cap);
            let mut model: Vec<u64> = Vec::new();
            for (id, how) in ids {
                let fresh = !model.contains(&id);
                let recorded = match how {
                    0 => m.insert(id),
                    1 => m.apply_new(id, || Ok::<(), ()>(())).is_some(),
                    _ => {
                        let mut ran = false;
                        let got = m.apply_new(id, || {
                            ran = true;
                            Err::<(), ()>(())
                        });
                        prop_assert_eq!(ran, fresh);
                        prop_assert_eq!(got.is_some(), fresh);
                        false
                    }
                };
                if how < 2 {
                    prop_assert_eq!(recorded, fresh);
                }
                if fresh && how < 2 {
                    model.push(id);
                    if model.len() > cap {
                        model.remove(0);
                    }
                }
                prop_assert_eq!(m.iter().collect::<Vec<_>>(), model.clone());
                prop_assert!(model.iter().all(|&i| m.contains(i)));
                prop_assert_eq!(m.contains(id), model.contains(&id));
            }
            let reloaded = EventMemory::from_loaded(m.iter(), cap);
            prop_assert_eq!(reloaded.iter().collect::<Vec<_>>(), model);
        }
    }
}
