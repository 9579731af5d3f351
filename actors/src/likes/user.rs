//! A user's likes within one business: the source of truth for like state.
//! Also holds the user's received-likes total (the user as an owner), since
//! both route by `(biz, mid)`.

use super::recent::Recent;
use super::transition;
use crate::command::EntityDelta;
use plaudit_proto::likes::{LikeReply, ListItem};
use plaudit_proto::{BizId, EntityId, LikeAction, LikeState, Millis, UserId};
use std::collections::HashMap;

/// Most states cached per active user; beyond it the cache restarts (reads
/// fall back to storage, which is the truth either way).
const STATE_CACHE: usize = 4096;

/// What applying one action changed, for the host to persist and forward.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub entity: EntityId,
    pub state: LikeState,
    pub mtime: Millis,
    /// Add `(mtime, entity)` to the user's list.
    pub list_add: Option<Millis>,
    /// Remove `(mtime, entity)` from the user's list.
    pub list_del: Option<Millis>,
    /// For the entity's shard.
    pub delta: EntityDelta,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub reply: LikeReply,
    /// `None` when the action was a repeat.
    pub change: Option<Change>,
}

#[derive(Debug, Clone)]
pub struct UserLikes {
    biz: BizId,
    user: UserId,
    states: HashMap<EntityId, (LikeState, Millis)>,
    recent: Recent,
    received: u64,
}

impl UserLikes {
    /// `recent` holds the newest stored list items (up to cap + 1), `received`
    /// the stored total.
    pub fn new(biz: BizId, user: UserId, recent: Recent, received: u64) -> UserLikes {
        UserLikes { biz, user, states: HashMap::new(), recent, received }
    }

    /// The cached state of `entity`, if this activation has seen it.
    pub fn cached(&self, entity: EntityId) -> Option<(LikeState, Millis)> {
        self.states.get(&entity).copied()
    }

    pub fn recent(&self) -> &Recent {
        &self.recent
    }

    pub fn received(&self) -> u64 {
        self.received
    }

    /// Applies `action` given the stored previous state of `entity`.
    pub fn apply(
        &mut self,
        entity: EntityId,
        owner: Option<UserId>,
        action: LikeAction,
        now: Millis,
        prev: (LikeState, Millis),
    ) -> Applied {
        let (prev_state, prev_mtime) = prev;
        let state = transition::next(prev_state, action);
        if state == prev_state {
            self.remember(entity, prev);
            let reply =
                LikeReply { prev: prev_state, now: state, changed: false, mtime: prev_mtime };
            return Applied { reply, change: None };
        }
        self.remember(entity, (state, now));
        let (d_likes, d_dislikes) = transition::count_delta(prev_state, state);
        let was_like = prev_state == LikeState::Like;
        let is_like = state == LikeState::Like;
        let list_del = was_like.then_some(prev_mtime);
        let list_add = is_like.then_some(now);
        if let Some(m) = list_del {
            self.recent.remove(ListItem { id: entity, mtime: m });
        }
        if let Some(m) = list_add {
            self.recent.insert(ListItem { id: entity, mtime: m });
        }
        let delta = EntityDelta {
            biz: self.biz,
            entity,
            owner,
            user: self.user,
            d_likes,
            d_dislikes,
            liker_added: list_add,
            liker_removed: list_del,
        };
        Applied {
            reply: LikeReply { prev: prev_state, now: state, changed: true, mtime: now },
            change: Some(Change { entity, state, mtime: now, list_add, list_del, delta }),
        }
    }

    /// Adds a received-likes delta and returns the new total. Totals never go
    /// below zero: a negative delta only follows the positive one it undoes.
    pub fn add_received(&mut self, d_likes: i64) -> u64 {
        self.received = self.received.saturating_add_signed(d_likes);
        self.received
    }

    fn remember(&mut self, entity: EntityId, s: (LikeState, Millis)) {
        if self.states.len() >= STATE_CACHE && !self.states.contains_key(&entity) {
            self.states.clear();
        }
        self.states.insert(entity, s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use LikeAction::*;

    fn user() -> UserLikes {
        UserLikes::new(1, 10, Recent::from_loaded(vec![], 100), 0)
    }

    fn run(u: &mut UserLikes, entity: EntityId, action: LikeAction, now: Millis) -> Applied {
        let prev = u.cached(entity).unwrap_or_default();
        u.apply(entity, Some(99), action, now, prev)
    }

    #[test]
    fn like_then_unlike_round_trips_the_list_and_counts() {
        let mut u = user();
        let a = run(&mut u, 5, Like, 100);
        let c = a.change.unwrap();
        assert_eq!((c.delta.d_likes, c.delta.liker_added), (1, Some(100)));
        assert_eq!(u.recent().page(None, 10).unwrap(), vec![ListItem { id: 5, mtime: 100 }]);
        let b = run(&mut u, 5, Unlike, 200);
        let c = b.change.unwrap();
        assert_eq!(
            (c.delta.d_likes, c.delta.liker_removed, c.list_del),
            (-1, Some(100), Some(100))
        );
        assert!(u.recent().page(None, 10).unwrap().is_empty());
    }

    #[test]
    fn repeats_are_no_ops_that_keep_the_time() {
        let mut u = user();
        run(&mut u, 5, Like, 100);
        let again = run(&mut u, 5, Like, 300);
        assert!(!again.reply.changed);
        assert_eq!(again.reply.mtime, 100);
        assert!(again.change.is_none());
        let undis = run(&mut u, 5, Undislike, 400);
        assert!(!undis.reply.changed);
    }

    #[test]
    fn like_to_dislike_switches_in_one_step() {
        let mut u = user();
        run(&mut u, 5, Like, 100);
        let s = run(&mut u, 5, Dislike, 200);
        let c = s.change.unwrap();
        assert_eq!((s.reply.prev, s.reply.now), (LikeState::Like, LikeState::Dislike));
        assert_eq!((c.delta.d_likes, c.delta.d_dislikes), (-1, 1));
        assert_eq!(c.list_del, Some(100));
        assert_eq!(c.list_add, None);
    }

    #[test]
    fn received_never_goes_negative() {
        let mut u = user();
        assert_eq!(u.add_received(2), 2);
        assert_eq!(u.add_received(-5), 0);
    }
}
