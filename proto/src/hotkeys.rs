//! Hot keys: the keys that take the most requests on each node over the
//! last seconds, as `plaudit admin hotkeys` lists them (the shape of Redis's
//! `HOTKEYS`).

use crate::cluster::NodeId;
use crate::ids::{BizId, EntityId, ShardId, UserId};
use crate::rankings::RankId;
use crate::scoring::BoardRef;
use crate::WireError;
use serde::{Deserialize, Serialize};

/// The most rows a `HotKeys` request may ask for.
pub const MAX_HOT_KEYS: u32 = 1000;
/// The most businesses, and the most rankings, one `HotSet` may name.
pub const MAX_HOT_SCOPE: usize = 64;

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

    /// The board key a query on `board` of `rank` counts under.
    pub fn board(rank: RankId, board: &BoardRef) -> HotKey {
        let board = match board {
            BoardRef::TypeId(t) => t.clone(),
            BoardRef::At { dims, .. } => dims_name(dims),
        };
        HotKey::Board { rank, board }
    }

    /// The board key a scoring event with `dims` counts under.
    pub fn scored(rank: RankId, dims: &[(String, u64)]) -> HotKey {
        HotKey::Board { rank, board: dims_name(dims) }
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

/// `room=7,gift=2`: a board named by the dimensions an event carries.
fn dims_name(dims: &[(String, u64)]) -> String {
    let parts: Vec<String> = dims.iter().map(|(d, v)| format!("{d}={v}")).collect();
    parts.join(",")
}

/// What relieves a hot key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Relief {
    None,
    /// Hot enough that the node tells clients to serve it from their own
    /// memory (`HotSet`): an entity's counts, a board's pages.
    ClientCache,
    /// A board moved off its hash shard (`placement.rs`).
    Moved,
}

impl Relief {
    pub fn name(self) -> &'static str {
        match self {
            Relief::None => "none",
            Relief::ClientCache => "client_cache",
            Relief::Moved => "moved",
        }
    }
}

/// Asks a node which keys of these businesses (entities) and rankings
/// (boards) are hot enough for a client to cache; answered `HotSet`. A
/// business token may name only its own business and rankings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HotSetRequest {
    pub bizs: Vec<BizId>,
    pub ranks: Vec<RankId>,
}

impl HotSetRequest {
    pub fn validate(&self) -> Result<(), WireError> {
        if self.bizs.len() > MAX_HOT_SCOPE || self.ranks.len() > MAX_HOT_SCOPE {
            return Err(WireError::bad_request(format!(
                "hotset names at most {MAX_HOT_SCOPE} businesses and {MAX_HOT_SCOPE} rankings"
            )));
        }
        Ok(())
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
    /// CPU microseconds a second its requests cost the node that received
    /// them (estimated from the same sample; `cluster/src/cpu_meter.rs`).
    pub cpu_us_per_s: u64,
    /// The node's own CPU microseconds a second over the window (its
    /// `cpu_share` is `cpu_us_per_s / node_cpu_us_per_s`; 0: not known yet).
    pub node_cpu_us_per_s: u64,
}

impl HotKeyRow {
    /// The share of its node's CPU the key's requests took (0 when the
    /// node's CPU is not known yet).
    pub fn cpu_share(&self) -> f64 {
        if self.node_cpu_us_per_s == 0 {
            return 0.0;
        }
        self.cpu_us_per_s as f64 / self.node_cpu_us_per_s as f64
    }
}
