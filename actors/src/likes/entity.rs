//! An entity's derived state: counts, owner and likers, built from the
//! deltas its likers' shards deliver.

use super::recent::Recent;
use crate::command::EntityDelta;
use plaudit_proto::likes::ListItem;
use plaudit_proto::UserId;
use plaudit_storage::CountsRec;

/// A change to the liker list, for the host to persist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LikerChange {
    Add(ListItem),
    Remove(ListItem),
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeltaEffects {
    pub likers: Vec<LikerChange>,
    /// Received-likes deltas for the owner: `(owner, Δlikes)`.
    pub owner_delta: Option<(UserId, i64)>,
}

#[derive(Debug, Clone)]
pub struct EntityLikes {
    counts: CountsRec,
    recent: Recent,
}

impl EntityLikes {
    pub fn new(counts: CountsRec, recent: Recent) -> EntityLikes {
        EntityLikes { counts, recent }
    }

    pub fn counts(&self) -> CountsRec {
        self.counts
    }

    pub fn recent(&self) -> &Recent {
        &self.recent
    }

    /// Applies one delta. The first owner an entity learns is kept: an owner
    /// is the author, which does not change, and a later conflicting claim
    /// must not move received totals between users. When the owner is learned
    /// after likes were counted, the owner is credited with those too, so a
    /// later unlike never takes away a like that was never given.
    pub fn apply(&mut self, d: &EntityDelta) -> DeltaEffects {
        let learned_owner = self.counts.owner.is_none() && d.owner.is_some();
        let likes_before = self.counts.likes;
        if learned_owner {
            self.counts.owner = d.owner;
        }
        // Deltas are applied exactly once, so counts cannot go negative;
        // saturating keeps a corrupted history from wrapping to 2^64.
        self.counts.likes = self.counts.likes.saturating_add_signed(d.d_likes);
        self.counts.dislikes = self.counts.dislikes.saturating_add_signed(d.d_dislikes);
        let mut fx = DeltaEffects::default();
        if let Some(m) = d.liker_removed {
            let item = ListItem { id: d.user, mtime: m };
            self.recent.remove(item);
            fx.likers.push(LikerChange::Remove(item));
        }
        if let Some(m) = d.liker_added {
            let item = ListItem { id: d.user, mtime: m };
            self.recent.insert(item);
            fx.likers.push(LikerChange::Add(item));
        }
        let credit = if learned_owner {
            i64::try_from(likes_before).unwrap_or(i64::MAX).saturating_add(d.d_likes)
        } else {
            d.d_likes
        };
        if credit != 0 {
            fx.owner_delta = self.counts.owner.map(|o| (o, credit));
        }
        fx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delta(user: UserId, d_likes: i64, owner: Option<UserId>) -> EntityDelta {
        EntityDelta {
            biz: 1,
            entity: 5,
            owner,
            user,
            d_likes,
            d_dislikes: 0,
            liker_added: (d_likes > 0).then_some(100 + user),
            liker_removed: (d_likes < 0).then_some(100 + user),
        }
    }

    #[test]
    fn first_owner_wins_and_receives_likes() {
        let mut e = EntityLikes::new(CountsRec::default(), Recent::from_loaded(vec![], 10));
        let fx = e.apply(&delta(1, 1, Some(7)));
        assert_eq!(fx.owner_delta, Some((7, 1)));
        let fx = e.apply(&delta(2, 1, Some(8)));
        assert_eq!(fx.owner_delta, Some((7, 1)));
        assert_eq!(e.counts().likes, 2);
        let fx = e.apply(&delta(1, -1, None));
        assert_eq!(fx.owner_delta, Some((7, -1)));
        assert_eq!(e.recent().page(None, 10).unwrap(), vec![ListItem { id: 2, mtime: 102 }]);
    }

    #[test]
    fn an_owner_learned_late_is_credited_with_earlier_likes() {
        let mut e = EntityLikes::new(CountsRec::default(), Recent::from_loaded(vec![], 10));
        assert_eq!(e.apply(&delta(1, 1, None)).owner_delta, None);
        // The second like names the owner: both likes are credited at once.
        assert_eq!(e.apply(&delta(2, 1, Some(77))).owner_delta, Some((77, 2)));
        // The unlike of the first like is then debited from the same owner.
        assert_eq!(e.apply(&delta(1, -1, None)).owner_delta, Some((77, -1)));
        assert_eq!(e.counts().likes, 1);
    }

    #[test]
    fn no_owner_means_no_owner_delta() {
        let mut e = EntityLikes::new(CountsRec::default(), Recent::from_loaded(vec![], 10));
        assert_eq!(e.apply(&delta(1, 1, None)).owner_delta, None);
    }
}
