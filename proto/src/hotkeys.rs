//! Hot keys: the keys that take the most requests on each node over the
//! last seconds, as `plaudit admin hotkeys` lists them (the shape of Redis's
//! `HOTKEYS`).

use crate::cluster::NodeId;
use crate::ids::{BizId, EntityId, ShardId, UserId};
use crate::rankings::RankId;
use serde::{Deserialize, Serialize};

/// The most rows a `HotKeys` request may ask for.
pub const MAX_HOT_KEYS: u32 = 1000;

/// A key the load concentrates on.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum HotKey {
    /// An entity: likes of it, its counts, its likers.
    Entity { biz: BizId, entity: EntityId },
    /// A user: their likes, states, lists and totals.
    User { biz: BizId, user: UserId },
    /// A board of a ranking: by its type id when a request names it, else
    /// by the dimensions a scoring event or a window query carries
    /// (`room=7`).
    Board { rank: RankId, board: String },
}

impl HotKey {
    /// `entity`, `user` or `board`.
    pub fn kind(&self) -> &'static str {
        match self {
            HotKey::Entity { .. } => "entity",
            HotKey::User { .. } => "user",
            HotKey::Board { .. } => "board",
        }
    }

    /// The key within its kind, as text: the entity or user id, or the board.
    pub fn name(&self) -> String {
        match self {
            HotKey::Entity { entity, .. } => entity.to_string(),
            HotKey::User { user, .. } => user.to_string(),
            HotKey::Board { board, .. } => board.clone(),
        }
    }
}

/// What relieves a hot key. Detection comes first; every key is `None`
/// until read replicas, the client cache and moves exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Relief {
    None,
}

impl Relief {
    pub fn name(self) -> &'static str {
        match self {
            Relief::None => "none",
        }
    }
}

/// One hot key as one node sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HotKeyRow {
    pub key: HotKey,
    /// The node that counted these requests (each node counts what its
    /// clients send it).
    pub node: NodeId,
    /// The shard the key lives on; `None` for a board named by dimensions
    /// (its shard depends on the ranking's windows).
    pub shard: Option<ShardId>,
    /// Requests a second over the node's window (about 10 s), estimated
    /// from a sample, rounded.
    pub requests_per_s: u64,
    pub relief: Relief,
}
