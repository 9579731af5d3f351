//! The like state of a business tree: the values of states, user lists,
//! likers, counts and received totals, their encoders (on `WriteSet`) and
//! their reads (on `StateStore`). The keys they sit under, and the byte
//! layout of each value, are the table in `keys.rs`; every key starts with
//! the shard id, so each read names the shard whose overlay it consults.
//!
//! Counts are read through the counts cache (`counts_cache.rs`): `put_counts`
//! records what it wrote so that staging can write it through.

use crate::commit_epoch::read_between;
use crate::keys::{self, decode_u64_value, read_u32, read_u64, u64_value, VALUE_V1};
use crate::pending::prefix_range;
use crate::state::{corrupt, Result, StateStore, WriteSet};
use crate::trees::TreeRef;
use plaudit_proto::likes::{ListItem, PageCursor};
use plaudit_proto::{BizId, EntityId, LikeState, Millis, UserId};
use std::ops::Bound;
use std::sync::atomic::Ordering;

/// An entity's stored counters and owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CountsRec {
    pub likes: u64,
    pub dislikes: u64,
    pub owner: Option<UserId>,
}

/// The most states of one user `get_states` walks before it looks the
/// entities up one by one instead.
pub const STATES_SCAN: usize = 256;
/// Fewer entities than this are looked up one by one.
const STATES_SCAN_FROM: usize = 4;

/// The states of `entities` among a user's states sorted by entity.
fn answer(
    held: &[(EntityId, (LikeState, Millis))],
    entities: &[EntityId],
) -> Vec<Option<(LikeState, Millis)>> {
    let find = |e: &EntityId| held.binary_search_by_key(e, |h| h.0).ok().map(|i| held[i].1);
    entities.iter().map(find).collect()
}

impl StateStore {
    pub fn get_state(
        &self,
        biz: BizId,
        shard: u32,
        mid: UserId,
        entity: EntityId,
    ) -> Result<Option<(LikeState, Millis)>> {
        // Between commits: a status of more entities reads the states
        // cache, which a commit writes after the store (`commit_epoch.rs`).
        let key = keys::state(shard, mid, entity);
        let read = || match self.get(shard, TreeRef::Biz(biz), &key)? {
            None => Ok(None),
            Some(v) => decode_state(&v).map(Some),
        };
        Ok(read_between(self.counts_cache.epoch(shard), read)?.0)
    }

    /// The states of `entities` for one user, in order. A user's states
    /// are adjacent keys, so when the user has at most [`STATES_SCAN`] of
    /// them one walk over them answers every entity; a status of 20
    /// entities was 20 lookups from the root of sled's tree, a quarter of
    /// a node's CPU in the likes mix (docs/benchmarks.md). A user with more
    /// states is answered one lookup per entity.
    pub fn get_states(
        &self,
        biz: BizId,
        shard: u32,
        mid: UserId,
        entities: &[EntityId],
    ) -> Result<Vec<Option<(LikeState, Millis)>>> {
        let one_by_one = || entities.iter().map(|&e| self.get_state(biz, shard, mid, e)).collect();
        if entities.len() < STATES_SCAN_FROM {
            return one_by_one();
        }
        let key = (biz, shard, mid);
        if let Some(held) = self.states_cache.part(shard, mid).get(&key) {
            return Ok(answer(held, entities));
        }
        let prefix = keys::state_prefix(shard, mid);
        let at = prefix.len();
        // The walk runs between commits (`commit_epoch.rs`); `before` is
        // the epoch it ran at.
        let walk = || -> Result<_> {
            let mut held: Vec<(EntityId, (LikeState, Millis))> = Vec::new();
            let mut complete = true;
            self.scan(shard, TreeRef::Biz(biz), prefix_range(&prefix), false, |k, v| {
                if held.len() == STATES_SCAN {
                    complete = false;
                    return Ok(false);
                }
                let entity = read_u64(k, at).ok_or_else(|| corrupt("state key", k))?;
                held.push((entity, decode_state(v)?));
                Ok(true)
            })?;
            Ok((held, complete))
        };
        let ((held, complete), before) = read_between(self.counts_cache.epoch(shard), walk)?;
        if !complete {
            return one_by_one();
        }
        // The walk is in key order, which is entity order.
        let out = answer(&held, entities);
        // Cached only if no commit of the shard ran during the walk.
        let mut part = self.states_cache.part(shard, mid);
        let epoch = self.counts_cache.epoch(shard).load(Ordering::Acquire);
        if before.is_multiple_of(2) && epoch == before {
            part.install(key, held);
        }
        Ok(out)
    }

    pub fn get_counts(&self, biz: BizId, shard: u32, entity: EntityId) -> Result<CountsRec> {
        let cache = &self.counts_cache;
        let key = (biz, shard, entity);
        if let Some(c) = cache.get(key) {
            return Ok(c);
        }
        // Between commits, so that a hit on a value a commit has not
        // written through yet cannot follow it (`commit_epoch.rs`).
        let counts_key = keys::counts(shard, entity);
        let read = || match self.get(shard, TreeRef::Biz(biz), &counts_key)? {
            None => Ok(CountsRec::default()),
            Some(v) => decode_counts(&v),
        };
        let (c, before) = read_between(cache.epoch(shard), read)?;
        self.fill_counts(key, c, before);
        Ok(c)
    }

    /// Caches counts read from the store while the shard's commit epoch
    /// was `before`, unless a commit of the shard has run since (it wrote
    /// newer counts through, which this must not overwrite).
    pub(crate) fn fill_counts(&self, key: (BizId, u32, EntityId), c: CountsRec, before: u64) {
        let epoch = self.counts_cache.epoch(key.1);
        let unchanged = || before.is_multiple_of(2) && epoch.load(Ordering::Acquire) == before;
        self.counts_cache.put_if(key, c, unchanged);
    }

    /// Starts loading where `get_counts` of this entity looks first: a
    /// request that reads many counts prefetches them all, then reads, so
    /// their cache misses overlap (`counts_cache.rs`).
    pub fn prefetch_counts(&self, biz: BizId, shard: u32, entity: EntityId) {
        self.counts_cache.prefetch((biz, shard, entity));
    }

    pub fn get_received(&self, biz: BizId, shard: u32, owner: UserId) -> Result<u64> {
        match self.get(shard, TreeRef::Biz(biz), &keys::received(shard, owner))? {
            None => Ok(0),
            Some(v) => decode_u64_value(&v, "received"),
        }
    }

    /// A user's liked entities, newest first, strictly after `after`.
    pub fn user_list(
        &self,
        biz: BizId,
        shard: u32,
        mid: UserId,
        after: Option<PageCursor>,
        limit: usize,
    ) -> Result<Vec<ListItem>> {
        self.list_page(biz, keys::user_list_prefix(shard, mid), after, limit)
    }

    /// An entity's likers, newest first, strictly after `after`.
    pub fn likers(
        &self,
        biz: BizId,
        shard: u32,
        entity: EntityId,
        after: Option<PageCursor>,
        limit: usize,
    ) -> Result<Vec<ListItem>> {
        self.list_page(biz, keys::likers_prefix(shard, entity), after, limit)
    }

    /// Every liker of an entity, newest first (a move's copy): read in
    /// pages, so no page is allocated for more than it holds.
    pub fn all_likers(&self, biz: BizId, shard: u32, entity: EntityId) -> Result<Vec<ListItem>> {
        const PAGE: usize = 4096;
        let mut out: Vec<ListItem> = Vec::new();
        loop {
            let after = out.last().map(|i| PageCursor { mtime: i.mtime, id: i.id });
            let page = self.likers(biz, shard, entity, after, PAGE)?;
            let full = page.len() == PAGE;
            out.extend(page);
            if !full {
                return Ok(out);
            }
        }
    }

    /// Both list layouts are `prefix, mtime, id`: walk backwards from the
    /// cursor (exclusive) or from the end of the prefix.
    fn list_page(
        &self,
        biz: BizId,
        prefix: Vec<u8>,
        after: Option<PageCursor>,
        limit: usize,
    ) -> Result<Vec<ListItem>> {
        let shard = read_u32(&prefix).ok_or_else(|| corrupt("list prefix", &prefix))?;
        let end = match after {
            Some(c) => {
                let mut k = prefix.clone();
                k.extend_from_slice(&c.mtime.to_be_bytes());
                k.extend_from_slice(&c.id.to_be_bytes());
                Bound::Excluded(k)
            }
            None => prefix_range(&prefix).1,
        };
        let range = (Bound::Included(prefix.clone()), end);
        let mut out = Vec::with_capacity(limit);
        if limit == 0 {
            return Ok(out);
        }
        let at = prefix.len();
        self.scan(shard, TreeRef::Biz(biz), range, true, |k, _| {
            match (read_u64(k, at), read_u64(k, at + 8)) {
                (Some(mtime), Some(id)) => out.push(ListItem { id, mtime }),
                _ => return Err(corrupt("list key", k)),
            }
            Ok(out.len() < limit)
        })?;
        Ok(out)
    }
}

fn decode_state(v: &[u8]) -> Result<(LikeState, Millis)> {
    match v {
        [VALUE_V1, s, rest @ ..] if rest.len() == 8 => {
            let state = match s {
                0 => LikeState::None,
                1 => LikeState::Like,
                2 => LikeState::Dislike,
                _ => return Err(corrupt("state", v)),
            };
            Ok((state, read_u64(rest, 0).unwrap_or(0)))
        }
        _ => Err(corrupt("state", v)),
    }
}

fn decode_counts(v: &[u8]) -> Result<CountsRec> {
    match v {
        [VALUE_V1, rest @ ..] if rest.len() == 24 => {
            let owner = read_u64(rest, 16).unwrap_or(0);
            Ok(CountsRec {
                likes: read_u64(rest, 0).unwrap_or(0),
                dislikes: read_u64(rest, 8).unwrap_or(0),
                owner: (owner != 0).then_some(owner),
            })
        }
        _ => Err(corrupt("counts", v)),
    }
}

impl WriteSet {
    /// Stores a state with the time it was set. A cleared state (`None`)
    /// keeps its row: `status` reports when it was cleared, and a repeated
    /// unlike reports that time whether or not the user's actor is active.
    pub fn put_state(
        &mut self,
        biz: BizId,
        shard: u32,
        mid: UserId,
        entity: EntityId,
        state: LikeState,
        mtime: Millis,
    ) {
        let mut v = [0u8; 10];
        v[0] = VALUE_V1;
        v[1] = match state {
            LikeState::None => 0,
            LikeState::Like => 1,
            LikeState::Dislike => 2,
        };
        v[2..].copy_from_slice(&mtime.to_be_bytes());
        self.put(TreeRef::Biz(biz), keys::state(shard, mid, entity), &v);
        self.states.push((biz, shard, mid, entity, (state, mtime)));
    }

    pub fn add_user_item(
        &mut self,
        biz: BizId,
        shard: u32,
        mid: UserId,
        mtime: Millis,
        entity: EntityId,
    ) {
        self.put(TreeRef::Biz(biz), keys::user_item(shard, mid, mtime, entity), &[]);
    }

    pub fn del_user_item(
        &mut self,
        biz: BizId,
        shard: u32,
        mid: UserId,
        mtime: Millis,
        entity: EntityId,
    ) {
        self.del(TreeRef::Biz(biz), keys::user_item(shard, mid, mtime, entity));
    }

    pub fn add_liker(
        &mut self,
        biz: BizId,
        shard: u32,
        entity: EntityId,
        mtime: Millis,
        mid: UserId,
    ) {
        self.put(TreeRef::Biz(biz), keys::liker(shard, entity, mtime, mid), &[]);
    }

    pub fn del_liker(
        &mut self,
        biz: BizId,
        shard: u32,
        entity: EntityId,
        mtime: Millis,
        mid: UserId,
    ) {
        self.del(TreeRef::Biz(biz), keys::liker(shard, entity, mtime, mid));
    }

    pub fn put_counts(&mut self, biz: BizId, shard: u32, entity: EntityId, c: CountsRec) {
        let mut v = [0u8; 25];
        v[0] = VALUE_V1;
        v[1..9].copy_from_slice(&c.likes.to_be_bytes());
        v[9..17].copy_from_slice(&c.dislikes.to_be_bytes());
        v[17..25].copy_from_slice(&c.owner.unwrap_or(0).to_be_bytes());
        self.put(TreeRef::Biz(biz), keys::counts(shard, entity), &v);
        self.counts.push((biz, shard, entity, c));
    }

    /// Removes an entity's counts (it moved away).
    pub fn del_counts(&mut self, biz: BizId, shard: u32, entity: EntityId) {
        self.del(TreeRef::Biz(biz), keys::counts(shard, entity));
        self.counts.push((biz, shard, entity, CountsRec::default()));
    }

    pub fn put_received(&mut self, biz: BizId, shard: u32, owner: UserId, total: u64) {
        self.put(TreeRef::Biz(biz), keys::received(shard, owner), &u64_value(total));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::state::test_store as store;

    #[test]
    fn state_counts_and_received_round_trip() {
        let (_d, s) = store();
        let mut ws = WriteSet::new(0);
        ws.put_state(1, 0, 10, 20, LikeState::Dislike, 99);
        ws.put_counts(1, 0, 20, CountsRec { likes: 3, dislikes: 4, owner: Some(7) });
        ws.put_received(1, 0, 7, 12);
        ws.put_applied(0, b"x");
        s.stage(ws);
        assert_eq!(s.get_state(1, 0, 10, 20).unwrap(), Some((LikeState::Dislike, 99)));
        assert_eq!(
            s.get_counts(1, 0, 20).unwrap(),
            CountsRec { likes: 3, dislikes: 4, owner: Some(7) }
        );
        assert_eq!(s.get_received(1, 0, 7).unwrap(), 12);
        assert_eq!(s.applied(0).unwrap().as_deref(), Some(&b"x"[..]));
        // Another business sees nothing: data is isolated per tree.
        assert_eq!(s.get_state(2, 0, 10, 20).unwrap(), None);
    }

    /// `get_states` answers as `get_state` does, entity by entity: over
    /// stored and staged states, for another user's neighbouring keys, and
    /// past the walk's bound (one lookup per entity then).
    #[test]
    fn states_of_many_entities_match_one_by_one() {
        let (_d, s) = store();
        let mut ws = WriteSet::new(3);
        for e in (0..40u64).step_by(3) {
            ws.put_state(1, 3, 10, e, LikeState::Like, 100 + e);
        }
        ws.put_state(1, 3, 11, 5, LikeState::Dislike, 7); // the next user
        ws.put_state(1, 3, 9, 6, LikeState::Like, 8); // the previous one
        s.stage(ws);
        s.checkpoint(3).unwrap();
        let mut ws = WriteSet::new(3);
        ws.put_state(1, 3, 10, 4, LikeState::None, 300); // staged over nothing
        ws.put_state(1, 3, 10, 3, LikeState::Dislike, 301); // staged over stored
        s.stage(ws);
        let asked: Vec<u64> = vec![41, 0, 3, 4, 5, 6, 39, 40, 2, 3];
        let one_by_one = |user, asked: &[u64]| -> Vec<_> {
            asked.iter().map(|&e| s.get_state(1, 3, user, e).unwrap()).collect()
        };
        for user in [9, 10, 11, 12] {
            let got = s.get_states(1, 3, user, &asked).unwrap();
            assert_eq!(got, one_by_one(user, &asked), "user {user}");
        }
        assert_eq!(
            s.get_states(1, 3, 10, &asked[..4]).unwrap()[2..],
            [Some((LikeState::Dislike, 301)), Some((LikeState::None, 300))]
        );
        // More states than one walk takes: the answer is the same.
        let mut ws = WriteSet::new(3);
        for e in 1000..1000 + STATES_SCAN as u64 + 5 {
            ws.put_state(1, 3, 10, e, LikeState::Like, e);
        }
        s.stage(ws);
        let asked: Vec<u64> = vec![3, 1001, 1000 + STATES_SCAN as u64 + 4, 7777, 6];
        assert_eq!(s.get_states(1, 3, 10, &asked).unwrap(), one_by_one(10, &asked));
        assert_eq!(s.get_states(1, 3, 10, &asked).unwrap()[2], Some((LikeState::Like, 1260)));
    }

    #[test]
    fn lists_page_newest_first() {
        let (_d, s) = store();
        let mut ws = WriteSet::new(2);
        for i in 0..10u64 {
            ws.add_user_item(1, 2, 5, 100 + i / 2, i);
        }
        ws.add_user_item(1, 2, 6, 500, 1); // another user
        s.stage(ws);
        let p1 = s.user_list(1, 2, 5, None, 4).unwrap();
        assert_eq!(p1.iter().map(|i| i.id).collect::<Vec<_>>(), vec![9, 8, 7, 6]);
        let c = PageCursor { mtime: p1[3].mtime, id: p1[3].id };
        let p2 = s.user_list(1, 2, 5, Some(c), 100).unwrap();
        assert_eq!(p2.iter().map(|i| i.id).collect::<Vec<_>>(), vec![5, 4, 3, 2, 1, 0]);
    }
}
