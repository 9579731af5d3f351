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
use std::collections::{HashSet, VecDeque};

/// A client-chosen id, unique per event (e.g. a hash of the gift order id).
pub type EventId = u64;

#[derive(Debug, Clone)]
pub struct EventMemory {
    cap: usize,
    order: VecDeque<EventId>,
    /// Ids are chosen by clients: a keyed hash (`plaudit_proto::keyed_hash`).
    seen: HashSet<EventId, KeyedHash>,
}

impl EventMemory {
    pub fn new(cap: usize) -> EventMemory {
        EventMemory { cap, order: VecDeque::new(), seen: HashSet::default() }
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
        if !self.seen.insert(id) {
            return false;
        }
        self.order.push_back(id);
        while self.order.len() > self.cap {
            if let Some(old) = self.order.pop_front() {
                self.seen.remove(&old);
            }
        }
        true
    }

    pub fn contains(&self, id: EventId) -> bool {
        self.seen.contains(&id)
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
        #[test]
        fn remembers_exactly_the_newest_distinct_ids(
            ids in prop::collection::vec(0u64..30, 0..200),
            cap in 1usize..10,
        ) {
            let mut m = EventMemory::new(cap);
            let mut model: Vec<u64> = Vec::new();
            for id in ids {
                let fresh = !model.contains(&id);
                prop_assert_eq!(m.insert(id), fresh);
                if fresh {
                    model.push(id);
                    if model.len() > cap {
                        model.remove(0);
                    }
                }
                prop_assert_eq!(m.iter().collect::<Vec<_>>(), model.clone());
            }
            let reloaded = EventMemory::from_loaded(m.iter(), cap);
            prop_assert_eq!(reloaded.iter().collect::<Vec<_>>(), model);
        }
    }
}
