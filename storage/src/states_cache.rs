//! The in-memory read cache of users' like states, for `status`.
//!
//! A status asks for one user's states of ~20 entities; without a cache it
//! is a walk over the user's states in sled, whose iterator descends the
//! tree again for every step (13% of the node's CPU in the likes mix,
//! docs/benchmarks.md). A cached user holds every state it has (at most
//! [`STATES_SCAN`](crate::likes::STATES_SCAN)), sorted by entity, so any
//! status of that user is answered from memory.
//!
//! Coherence is the counts cache's (`counts_cache.rs`): `StateStore::stage`
//! holds the shard's commit epoch odd while it applies a write set and
//! writes every staged state through to a cached user; a read that missed
//! installs what it walked only if no commit of the shard ran meanwhile; a
//! snapshot install drops the shard's users. Sizes are bounded in states,
//! not users: a user may hold up to 256.

use plaudit_proto::keyed_hash::KeyedHash;
use plaudit_proto::{BizId, EntityId, LikeState, Millis, UserId};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// One user's states, sorted by entity.
pub(crate) type UserStates = Vec<(EntityId, (LikeState, Millis))>;

/// `(biz, shard, user) -> states`, and the states it holds in all.
#[derive(Default)]
pub(crate) struct StatesPart {
    users: HashMap<(BizId, u32, UserId), UserStates, KeyedHash>,
    states: usize,
}

/// States per part before it is dropped and refilled (64 parts: ~1M
/// states, ~24 MiB of entries at most).
const PART_STATES: usize = 16_384;
const PARTS: usize = 64;

pub(crate) struct StatesCache {
    parts: Vec<Mutex<StatesPart>>,
}

impl StatesCache {
    pub(crate) fn new() -> StatesCache {
        StatesCache { parts: (0..PARTS).map(|_| Mutex::default()).collect() }
    }

    pub(crate) fn part(&self, shard: u32, user: UserId) -> MutexGuard<'_, StatesPart> {
        let i = (user as usize ^ shard as usize) % PARTS;
        // Only plain map operations run under the lock.
        self.parts[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Drops every user of `shard` (its state was replaced).
    pub(crate) fn drop_shard(&self, shard: u32) {
        for part in &self.parts {
            let mut p = part.lock().unwrap_or_else(|e| e.into_inner());
            p.users.retain(|k, _| k.1 != shard);
            p.states = p.users.values().map(Vec::len).sum();
        }
    }
}

impl StatesPart {
    pub(crate) fn get(&self, k: &(BizId, u32, UserId)) -> Option<&UserStates> {
        self.users.get(k)
    }

    /// Caches a user's complete states (sorted by entity).
    pub(crate) fn install(&mut self, k: (BizId, u32, UserId), states: UserStates) {
        if self.states + states.len() > PART_STATES {
            self.users.clear();
            self.states = 0;
        }
        self.states += states.len();
        if let Some(old) = self.users.insert(k, states) {
            self.states -= old.len();
        }
    }

    /// A staged state: written through if its user is cached; a user who
    /// grows past `max` states leaves the cache (reads walk again, or look
    /// up entity by entity).
    pub(crate) fn write(
        &mut self,
        k: (BizId, u32, UserId),
        entity: EntityId,
        state: (LikeState, Millis),
        max: usize,
    ) {
        let Some(states) = self.users.get_mut(&k) else { return };
        match states.binary_search_by_key(&entity, |s| s.0) {
            Ok(i) => states[i].1 = state,
            Err(i) if states.len() < max => {
                states.insert(i, (entity, state));
                self.states += 1;
            }
            Err(_) => {
                let n = states.len();
                self.users.remove(&k);
                self.states -= n;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::state::test_store as store;
    use crate::WriteSet;
    use plaudit_proto::LikeState;

    #[test]
    fn status_from_the_cache_follows_commits_and_installs() {
        let (_d, s) = store();
        let entities: Vec<u64> = (1..=5).collect();
        let stage = |entity, state, mtime| {
            let mut ws = WriteSet::new(0);
            ws.put_state(1, 0, 7, entity, state, mtime);
            ws.put_applied(0, b"x");
            s.stage(ws);
        };
        stage(2, LikeState::Like, 10);
        // The first read walks and fills; the later ones are served from
        // memory and must see every commit since.
        let first = s.get_states(1, 0, 7, &entities).unwrap();
        assert_eq!(first[1], Some((LikeState::Like, 10)));
        assert!(s.states_cache.part(0, 7).get(&(1, 0, 7)).is_some(), "filled");
        stage(2, LikeState::Dislike, 11);
        stage(4, LikeState::Like, 12);
        let got = s.get_states(1, 0, 7, &entities).unwrap();
        assert_eq!(
            got,
            vec![None, Some((LikeState::Dislike, 11)), None, Some((LikeState::Like, 12)), None]
        );
        // What a snapshot holds agrees with what the cache served.
        let (_e, fresh) = crate::state::reloaded(&s, 0);
        assert_eq!(fresh.get_states(1, 0, 7, &entities).unwrap(), got);
        // A snapshot install replaces the shard's state: nothing stale stays.
        s.install_bytes(0, &crate::snapshot::empty_snapshot());
        assert_eq!(s.get_states(1, 0, 7, &entities).unwrap(), vec![None; 5]);
    }

    #[test]
    fn a_user_past_the_walk_limit_leaves_the_cache() {
        let (_d, s) = store();
        let many: Vec<u64> = (0..crate::likes::STATES_SCAN as u64).collect();
        let mut ws = WriteSet::new(0);
        for &e in &many {
            ws.put_state(1, 0, 9, e, LikeState::Like, 5);
        }
        s.stage(ws);
        assert_eq!(s.get_states(1, 0, 9, &many[..8]).unwrap(), vec![Some((LikeState::Like, 5)); 8]);
        assert!(s.states_cache.part(0, 9).get(&(1, 0, 9)).is_some());
        let mut ws = WriteSet::new(0);
        ws.put_state(1, 0, 9, 100_000, LikeState::Dislike, 6);
        s.stage(ws);
        assert!(s.states_cache.part(0, 9).get(&(1, 0, 9)).is_none(), "257 states: gone");
        let got = s.get_states(1, 0, 9, &[100_000, 3, 4, 5]).unwrap();
        assert_eq!(got[0], Some((LikeState::Dislike, 6)));
    }
}
