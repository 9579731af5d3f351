//! What a shard's Raft log carries: batches of commands stamped by the leader,
//! and the per-command results every replica computes identically.

use plaudit_proto::business::{Business, CreateBiz, UpdateBiz};
use plaudit_proto::likes::{LikeReply, LikeRequest};
use plaudit_proto::rankings::{ItemId, RankDef, RankId, UpdateRank};
use plaudit_proto::scoring::Outcome;
use plaudit_proto::{BizId, EntityId, Millis, ShardId, UserId, WireError};
use serde::{Deserialize, Serialize};

/// One Raft entry's payload. `now` is stamped by the leader when it proposes,
/// so applying is deterministic (no clocks on replicas).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch {
    pub now: Millis,
    pub cmds: Vec<Command>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// A like action, applied by the user's shard (the truth).
    Like(LikeRequest),
    /// Derived deltas from another shard's outbox: one record per source
    /// batch, numbered by a seq per `(source, target)` that increases; a
    /// target ignores records whose seq it has applied.
    Deliver {
        source: ShardId,
        records: Vec<(u64, Vec<Delta>)>,
    },
    /// The source learns that `target` applied these outbox entries.
    Ack {
        target: ShardId,
        seqs: Vec<u64>,
    },
    /// Registry commands, applied by the metadata group only.
    CreateBiz(CreateBiz),
    UpdateBiz(UpdateBiz),
    CreateRank(RankDef),
    UpdateRank(UpdateRank),
    /// Scoring events for one member of one sub-board: one event as the
    /// edge proposes it, several once the leader has coalesced a batch
    /// (`coalesce.rs`). An event touching several sub-boards is one command
    /// per board, each on the board's shard.
    Score(ScoreCmd),
    /// Deletes a sub-board whose window has expired (proposed by the
    /// retention sweep on the board's shard).
    DropBoard {
        rank: RankId,
        type_key: Vec<u8>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScoreCmd {
    pub rank: RankId,
    /// The sub-board's binary type id (`TypeId::to_key`).
    pub type_key: Vec<u8>,
    pub item: ItemId,
    /// The ranking's length cap when the edge admitted the events. It rides
    /// in the log so that a replay applies them as they were applied first,
    /// whatever the ranking's settings are by then.
    pub cap: u32,
    /// In arrival order.
    pub events: Vec<ScoreEvent>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScoreEvent {
    pub score: i64,
    pub sub: Option<u32>,
    pub event_id: u64,
}

/// One scoring event's outcome on its board and the member's score after it.
pub type EventResult = Result<(Outcome, Option<i64>), WireError>;

/// A derived change travelling through an outbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Delta {
    /// To the entity's shard: counts and liker list.
    Entity(EntityDelta),
    /// To the owner's shard: received likes.
    Received { biz: BizId, owner: UserId, d_likes: i64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntityDelta {
    pub biz: BizId,
    pub entity: EntityId,
    pub owner: Option<UserId>,
    pub user: UserId,
    pub d_likes: i64,
    pub d_dislikes: i64,
    /// The user became a liker at this time.
    pub liker_added: Option<Millis>,
    /// The user stopped being a liker; the like had been set at this time.
    pub liker_removed: Option<Millis>,
}

/// The result of one command, as every replica computes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CmdResult {
    Like(LikeReply),
    Biz(Business),
    Rank(RankDef),
    /// Per event of a `Score` command, in its order.
    Scored(Vec<EventResult>),
    Done,
    Failed(WireError),
}
