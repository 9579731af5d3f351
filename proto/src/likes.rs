//! Like commands: the four actions, state and count lookups, the paged lists
//! and received totals, with their validation and the opaque page cursor.

use crate::error::WireError;
use crate::ids::{BizId, EntityId, Millis, UserId};
use crate::limits::{MAX_BATCH, MAX_PAGE};
use serde::{Deserialize, Serialize};

/// What one user thinks of one entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum LikeState {
    #[default]
    None,
    Like,
    Dislike,
}

impl LikeState {
    /// Declaration order: a state's index here is its wire index.
    pub const ALL: [LikeState; 3] = [LikeState::None, LikeState::Like, LikeState::Dislike];

    pub fn as_str(self) -> &'static str {
        match self {
            LikeState::None => "none",
            LikeState::Like => "like",
            LikeState::Dislike => "dislike",
        }
    }
}

/// A user's action on an entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LikeAction {
    Like,
    Unlike,
    Dislike,
    Undislike,
}

impl LikeAction {
    pub const ALL: [LikeAction; 4] =
        [LikeAction::Like, LikeAction::Unlike, LikeAction::Dislike, LikeAction::Undislike];

    pub fn as_str(self) -> &'static str {
        match self {
            LikeAction::Like => "like",
            LikeAction::Unlike => "unlike",
            LikeAction::Dislike => "dislike",
            LikeAction::Undislike => "undislike",
        }
    }

    /// Whether the action needs the business to allow dislikes.
    pub fn is_dislike(self) -> bool {
        matches!(self, LikeAction::Dislike | LikeAction::Undislike)
    }
}

/// like / unlike / dislike / undislike of `(biz, entity, user)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LikeRequest {
    pub biz: BizId,
    pub entity: EntityId,
    pub user: UserId,
    /// The entity's author; received totals are credited to the owner the
    /// entity first learned.
    pub owner: Option<UserId>,
    pub action: LikeAction,
}

/// The result of a like action: the transition the user's shard applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LikeReply {
    pub prev: LikeState,
    pub now: LikeState,
    /// False when the action was a repeat (a harmless no-op).
    pub changed: bool,
    /// When the current state was set (unchanged on a no-op).
    pub mtime: Millis,
}

/// The states of up to `MAX_BATCH` entities for one user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusRequest {
    pub biz: BizId,
    pub user: UserId,
    pub entities: Vec<EntityId>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntityState {
    pub entity: EntityId,
    pub state: LikeState,
    /// 0 when the state is `None` and was never set.
    pub mtime: Millis,
}

/// Like and dislike counts of up to `MAX_BATCH` entities.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountsRequest {
    pub biz: BizId,
    pub entities: Vec<EntityId>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct EntityCounts {
    pub entity: EntityId,
    pub likes: u64,
    pub dislikes: u64,
}

/// A page of a user's liked entities, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserLikesRequest {
    pub biz: BizId,
    pub user: UserId,
    pub cursor: Option<String>,
    pub limit: u32,
}

/// A page of an entity's likers, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LikersRequest {
    pub biz: BizId,
    pub entity: EntityId,
    pub cursor: Option<String>,
    pub limit: u32,
}

/// One item of a paged list: the other side's id and when the like was set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListItem {
    /// An entity id in a user's list, a user id in a liker list.
    pub id: u64,
    pub mtime: Millis,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page {
    pub items: Vec<ListItem>,
    /// Pass back as `cursor` for the next page; `None` at the end.
    pub next: Option<String>,
}

/// Total likes on every entity a user owns in one business.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceivedRequest {
    pub biz: BizId,
    pub user: UserId,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceivedReply {
    pub user: UserId,
    pub likes: u64,
}

/// The position after which a page continues: items strictly older than
/// `(mtime, id)` in newest-first order. Opaque to clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct PageCursor {
    pub mtime: Millis,
    pub id: u64,
}

impl PageCursor {
    pub fn encode(self) -> String {
        format!("{:x}.{:x}", self.mtime, self.id)
    }

    pub fn decode(s: &str) -> Result<PageCursor, WireError> {
        let bad = || WireError::bad_request(format!("malformed cursor {s:?}"));
        let (m, i) = s.split_once('.').ok_or_else(bad)?;
        if m.len() > 16 || i.len() > 16 {
            return Err(bad());
        }
        let mtime = u64::from_str_radix(m, 16).map_err(|_| bad())?;
        let id = u64::from_str_radix(i, 16).map_err(|_| bad())?;
        Ok(PageCursor { mtime, id })
    }
}

fn validate_batch(entities: &[EntityId]) -> Result<(), WireError> {
    if entities.is_empty() {
        return Err(WireError::bad_request("at least one entity is required"));
    }
    if entities.len() > MAX_BATCH {
        return Err(WireError::bad_request(format!(
            "batch of {} entities exceeds the limit of {MAX_BATCH}",
            entities.len()
        )));
    }
    Ok(())
}

fn validate_page(cursor: &Option<String>, limit: u32) -> Result<(), WireError> {
    if limit == 0 || limit > MAX_PAGE {
        return Err(WireError::bad_request(format!("limit must be in 1..={MAX_PAGE}")));
    }
    if let Some(c) = cursor {
        PageCursor::decode(c)?;
    }
    Ok(())
}

impl StatusRequest {
    pub fn validate(&self) -> Result<(), WireError> {
        validate_batch(&self.entities)
    }
}

impl CountsRequest {
    pub fn validate(&self) -> Result<(), WireError> {
        validate_batch(&self.entities)
    }
}

impl UserLikesRequest {
    pub fn validate(&self) -> Result<(), WireError> {
        validate_page(&self.cursor, self.limit)
    }
}

impl LikersRequest {
    pub fn validate(&self) -> Result<(), WireError> {
        validate_page(&self.cursor, self.limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn cursor_round_trips(mtime: u64, id: u64) {
            let c = PageCursor { mtime, id };
            prop_assert_eq!(PageCursor::decode(&c.encode()).unwrap(), c);
        }

        #[test]
        fn cursor_decode_never_panics(s in ".{0,40}") {
            let _ = PageCursor::decode(&s);
        }
    }

    #[test]
    fn batch_limits_are_enforced() {
        let ok = CountsRequest { biz: 1, entities: vec![1; MAX_BATCH] };
        assert!(ok.validate().is_ok());
        let big = CountsRequest { biz: 1, entities: vec![1; MAX_BATCH + 1] };
        assert!(big.validate().is_err());
        let empty = StatusRequest { biz: 1, user: 1, entities: vec![] };
        assert!(empty.validate().is_err());
    }

    #[test]
    fn page_limits_are_enforced() {
        let mut r = UserLikesRequest { biz: 1, user: 1, cursor: None, limit: 0 };
        assert!(r.validate().is_err());
        r.limit = MAX_PAGE + 1;
        assert!(r.validate().is_err());
        r.limit = MAX_PAGE;
        assert!(r.validate().is_ok());
        r.cursor = Some("zz".into());
        assert!(r.validate().is_err());
    }
}
