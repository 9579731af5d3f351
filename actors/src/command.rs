//! What a shard's Raft log carries: batches of commands stamped by the leader,
//! and the per-command results every replica computes identically.
//!
//! **Format versions.** A `Batch` is encoded as a versioned envelope
//! (`BatchFormat::V1 { now, cmds }`, bincode writes the variant index first),
//! so a later build can add `V2` and still read the entries a data directory
//! or a peer on the previous version holds. Within one version, `Command`
//! variants and their fields are only ever appended to: bincode encodes a
//! variant by its index. A change that cannot be expressed that way is a new
//! format version, decoded into the current types by `BatchFormat`.

use plaudit_proto::auth::{TokenId, TokenInfo};
use plaudit_proto::business::{Business, CreateBiz, UpdateBiz};
use plaudit_proto::cluster::ClusterMap;
use plaudit_proto::likes::{LikeReply, LikeRequest};
use plaudit_proto::rankings::{
    Aggregation, BoardLimit, ItemId, RankDef, RankId, RankInfo, TieMode, UpdateRank,
};
use plaudit_proto::scoring::Outcome;
use plaudit_proto::{BizId, EntityId, Millis, ShardId, UserId, WireError};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

pub use crate::rankings::dedup::Dedup;

/// One Raft entry's payload. `now` is stamped by the leader when it proposes,
/// so applying is deterministic (no clocks on replicas). Apply never lets
/// time go backwards within a shard: it uses `max(now, the shard's floor)`,
/// where the floor is the time of the previous entry, kept in the shard's
/// replicated state (a new leader's clock may be behind the old one's).
///
/// The commands are shared (`Arc`): the log store keeps the entries it just
/// appended and hands apply clones of them (`storage/src/file_log.rs`),
/// which must not copy every command.
///
/// **Shards.** A group that hosts one shard logs its commands untagged
/// (`V1`): they are all that shard's. A group that hosts several tags each
/// command with the shard that applies it (`V2`, `shards[i]` for
/// `cmds[i]`); its state machine hands each shard its own commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub now: Millis,
    pub cmds: Arc<Vec<Command>>,
    /// The shard of each command, when the group hosts several.
    pub shards: Option<Arc<Vec<ShardId>>>,
}

impl Batch {
    pub fn new(now: Millis, cmds: Vec<Command>) -> Batch {
        Batch { now, cmds: Arc::new(cmds), shards: None }
    }

    /// A batch whose commands belong to several shards, `shards[i]` being
    /// the shard of `cmds[i]`.
    pub fn tagged(now: Millis, cmds: Vec<Command>, shards: Vec<ShardId>) -> Batch {
        debug_assert_eq!(cmds.len(), shards.len());
        Batch { now, cmds: Arc::new(cmds), shards: Some(Arc::new(shards)) }
    }

    /// The commands of `shard` in this batch, in order, with their indexes
    /// in it; every command when the batch is untagged.
    pub fn part(&self, shard: ShardId) -> (Vec<Command>, Vec<usize>) {
        match &self.shards {
            None => (self.cmds.to_vec(), (0..self.cmds.len()).collect()),
            Some(tags) => {
                let at: Vec<usize> = (0..tags.len()).filter(|&i| tags[i] == shard).collect();
                (at.iter().map(|&i| self.cmds[i].clone()).collect(), at)
            }
        }
    }
}

/// How a `Batch` is written: the version tag first, then that version's
/// fields. Encoding borrows the commands (no copy of a large batch).
/// Variants are only appended.
#[derive(Serialize)]
enum BatchFormatRef<'a> {
    V1 { now: Millis, cmds: &'a [Command] },
    V2 { now: Millis, cmds: &'a [Command], shards: &'a [ShardId] },
}

/// How a `Batch` is read: every version this build understands.
#[derive(Deserialize)]
enum BatchFormat {
    V1 { now: Millis, cmds: Vec<Command> },
    V2 { now: Millis, cmds: Vec<Command>, shards: Vec<ShardId> },
}

impl Serialize for Batch {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.shards {
            None => BatchFormatRef::V1 { now: self.now, cmds: &self.cmds[..] }.serialize(s),
            Some(shards) => {
                BatchFormatRef::V2 { now: self.now, cmds: &self.cmds[..], shards: &shards[..] }
                    .serialize(s)
            }
        }
    }
}

impl<'de> Deserialize<'de> for Batch {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match BatchFormat::deserialize(d)? {
            BatchFormat::V1 { now, cmds } => Ok(Batch::new(now, cmds)),
            BatchFormat::V2 { now, cmds, shards } => {
                if shards.len() != cmds.len() {
                    return Err(serde::de::Error::custom(format!(
                        "a batch of {} commands with {} shard tags",
                        cmds.len(),
                        shards.len()
                    )));
                }
                Ok(Batch::tagged(now, cmds, shards))
            }
        }
    }
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
    /// Registry commands, applied by the metadata group only. `CreateBiz`
    /// assigns a missing id by `IdRule::AfterHighest`: entries of earlier
    /// builds replay as they were applied; new creates are `CreateBizV2`.
    CreateBiz(CreateBiz),
    UpdateBiz(UpdateBiz),
    CreateRank(Box<RankDef>),
    UpdateRank(Box<UpdateRank>),
    /// Scoring events for one member of one sub-board, as logged before
    /// commands carried their dedup rules: read only (as `Dedup::LEGACY`),
    /// never proposed. What the edge proposes is `ScoreV2`.
    #[serde(serialize_with = "score_v1::ser", deserialize_with = "score_v1::de")]
    Score(ScoreCmd),
    /// Deletes a sub-board whose window has expired (proposed by the
    /// retention sweep on the board's shard).
    DropBoard {
        rank: RankId,
        type_key: Vec<u8>,
    },
    /// Replaces the cluster map (members and placement), metadata group
    /// only; refused unless its epoch is above the current one.
    SetCluster(ClusterMap),
    /// A registry command applied at most once per `id`: a repeat returns
    /// the first result (metadata group only; see `shard/once.rs`).
    Once {
        id: u64,
        cmd: Box<Command>,
    },
    /// Registers a business, assigning a missing id by
    /// `IdRule::AfterHighestOrLowestFree` (an explicit id at the top of the
    /// range no longer uses up assigned ids). What the edge proposes since
    /// step 4; `CreateBiz` keeps the rule its entries were applied under
    /// (`IdRule::AfterHighest`), so a replay assigns what it assigned then.
    CreateBizV2(CreateBiz),
    /// Registers a business token (metadata group only). The edge hashed the
    /// secret: only its SHA-256 reaches the log.
    CreateToken(NewToken),
    /// Revokes a token (metadata group only); revoking twice is a no-op.
    RevokeToken {
        id: TokenId,
    },
    /// Scoring events for one member of one sub-board: one event as the
    /// edge proposes it, several once the leader has coalesced a batch
    /// (`coalesce.rs`). An event touching several sub-boards is one command
    /// per board, each on the board's shard.
    ScoreV2(ScoreCmd),
    /// Replaces the cluster state (map, members, moves), metadata group
    /// only; refused unless its epoch is above the current one. What every
    /// change of members and placement proposes since members existed;
    /// `SetCluster` (a map alone) is how older entries made the first map.
    SetClusterState(Box<plaudit_proto::membership::ClusterState>),
    /// Registers a ranking with its owner (metadata group only): the
    /// owner's business must exist; `owner` None is `CreateRank`.
    CreateRankInfo(Box<RankInfo>),
    /// Reserves new sub-boards of a ranking against its limit of live ones
    /// (metadata group only), all of `type_keys` or none; a key already
    /// reserved is not counted again. The limit is the ranking's own, else
    /// `default`: the proposer's `max_boards_per_ranking` (0: none), carried
    /// so that apply reads no node setting.
    ReserveBoards {
        rank: RankId,
        type_keys: Vec<Vec<u8>>,
        default: u32,
    },
    /// Sets or clears a ranking's own limit of live sub-boards (metadata
    /// group only).
    SetBoardLimit(BoardLimit),
    /// A step of moving a sub-board as written before moves had ids: read
    /// as a step of move 0 (`MoveBoardV2` is written).
    MoveBoard(crate::rankings::residence::MoveCmd),
    /// The boards' placements as written before moves had ids: read with
    /// every move's id 0 (`SetPlacementsV2` is written).
    SetPlacements(Box<plaudit_proto::placement::v1::PlacementsV1>),
    /// One step of moving an entity's counts and likers between shards, on
    /// the source or the target (`likes/residence.rs`), stamped with its
    /// move's id; proposed by the metadata leader's mover, never by a client.
    MoveEntity(crate::likes::residence::EntityStep),
    /// Replaces the placements of moved entities and the moves under way
    /// (metadata group only); refused unless its epoch is above the
    /// current one.
    SetEntityPlacements(Box<plaudit_proto::placement::EntityPlacements>),
    /// One step of moving a sub-board between shards, on the source or the
    /// target (`rankings/residence.rs`), stamped with its move's id;
    /// proposed by the metadata leader's mover, never by a client.
    MoveBoardV2(crate::rankings::residence::BoardStep),
    /// Replaces the placements of moved sub-boards and the moves under way
    /// (metadata group only); refused unless its epoch is above the
    /// current one.
    SetPlacementsV2(Box<plaudit_proto::placement::Placements>),
}

impl Command {
    /// The scoring events a command carries, whichever version it is.
    pub fn score(&self) -> Option<&ScoreCmd> {
        match self {
            Command::Score(c) | Command::ScoreV2(c) => Some(c),
            _ => None,
        }
    }
}

/// `Command::Score` as logged before `ScoreCmd::dedup` existed: the same
/// fields, without it.
mod score_v1 {
    use super::*;

    #[derive(Serialize)]
    struct Ref<'a> {
        rank: RankId,
        type_key: &'a [u8],
        item: ItemId,
        aggregation: Aggregation,
        ties: TieMode,
        cap: u32,
        events: &'a [ScoreEvent],
    }

    #[derive(Deserialize)]
    struct Owned {
        rank: RankId,
        type_key: Vec<u8>,
        item: ItemId,
        aggregation: Aggregation,
        ties: TieMode,
        cap: u32,
        events: Vec<ScoreEvent>,
    }

    pub fn ser<S: serde::Serializer>(c: &ScoreCmd, s: S) -> Result<S::Ok, S::Error> {
        Ref {
            rank: c.rank,
            type_key: &c.type_key,
            item: c.item,
            aggregation: c.aggregation,
            ties: c.ties,
            cap: c.cap,
            events: &c.events,
        }
        .serialize(s)
    }

    pub fn de<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ScoreCmd, D::Error> {
        let o = Owned::deserialize(d)?;
        Ok(ScoreCmd {
            rank: o.rank,
            type_key: o.type_key,
            item: o.item,
            aggregation: o.aggregation,
            ties: o.ties,
            cap: o.cap,
            events: o.events,
            dedup: Dedup::LEGACY,
        })
    }
}

/// A token as the edge proposes it: the secret's SHA-256 and the scope.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewToken {
    pub hash: [u8; 32],
    pub biz: BizId,
    pub ranks: Vec<RankId>,
    pub read_only: bool,
}

impl std::fmt::Debug for NewToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The hash is not the secret, but it has no business in logs either.
        f.debug_struct("NewToken")
            .field("biz", &self.biz)
            .field("ranks", &self.ranks)
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScoreCmd {
    pub rank: RankId,
    /// The sub-board's binary type id (`TypeId::to_key`).
    pub type_key: Vec<u8>,
    pub item: ItemId,
    /// How the board combines and orders scores, from the ranking's
    /// definition (fixed at creation). It rides in the command so that apply
    /// reads nothing the metadata group owns: a replica whose registry lags,
    /// or a replay that runs before the registry's, applies the same events
    /// the same way.
    pub aggregation: Aggregation,
    pub ties: TieMode,
    /// The ranking's length cap when the edge admitted the events. It rides
    /// in the log so that a replay applies them as they were applied first,
    /// whatever the ranking's settings are by then.
    pub cap: u32,
    /// In arrival order.
    pub events: Vec<ScoreEvent>,
    /// How long the board remembers these events' ids, and how many ids it
    /// holds at most (`rankings/dedup.rs`): set by the edge from its
    /// config, carried so every replica forgets the same ids.
    pub dedup: Dedup,
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
    /// From an entity's home to the shard it lives on, which is being
    /// moved on: every delta the home sent it before is ahead of this one
    /// (`residence.rs`, the `Hold` step of move `mv`).
    Barrier { biz: BizId, entity: EntityId, mv: plaudit_proto::placement::MoveId },
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
    Rank(Box<RankDef>),
    /// Per event of a `Score` command, in its order.
    Scored(Vec<EventResult>),
    Done,
    Failed(WireError),
    Token(TokenInfo),
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaudit_proto::codec;

    /// Commands and their results are moved through the proposer, the
    /// coalescer and the apply; a ranking definition inline made each 184
    /// bytes (see `requests_and_replies_stay_small` in the proto crate).
    /// A score command's dedup rules (8 bytes) took it from 80 to 88.
    #[test]
    fn commands_and_results_stay_small() {
        assert!(std::mem::size_of::<Command>() <= 88, "{}", std::mem::size_of::<Command>());
        assert!(std::mem::size_of::<CmdResult>() <= 72, "{}", std::mem::size_of::<CmdResult>());
    }

    #[test]
    fn a_batch_is_written_under_a_version_tag() {
        let b = Batch::new(7, vec![Command::Ack { target: 2, seqs: vec![3] }]);
        let bytes = codec::to_bytes(&b).unwrap();
        // Version tag V1 (variant 0), now, one command (Ack: variant 2,
        // target 2, one seq: 3). These exact bytes are what data directories
        // and peers of this version hold: they must stay readable.
        assert_eq!(bytes, vec![0, 7, 1, 2, 2, 1, 3]);
        assert_eq!(codec::from_bytes::<Batch>(&bytes).unwrap(), b);
    }

    #[test]
    fn a_tagged_batch_names_each_commands_shard() {
        let acks = |n| Command::Ack { target: 9, seqs: vec![n] };
        let b = Batch::tagged(7, vec![acks(1), acks(2), acks(3)], vec![4, 1, 4]);
        let bytes = codec::to_bytes(&b).unwrap();
        // Version tag V2 (variant 1), now, three commands, three tags.
        assert_eq!(bytes[..2], [1, 7]);
        assert_eq!(bytes[bytes.len() - 4..], [3, 4, 1, 4]);
        let back = codec::from_bytes::<Batch>(&bytes).unwrap();
        assert_eq!(back, b);
        assert_eq!(back.part(4), (vec![acks(1), acks(3)], vec![0, 2]));
        assert_eq!(back.part(1), (vec![acks(2)], vec![1]));
        assert_eq!(back.part(0), (vec![], vec![]));
        // Untagged: every command is the one shard's.
        let one = Batch::new(7, vec![acks(1), acks(2)]);
        assert_eq!(one.part(5), (vec![acks(1), acks(2)], vec![0, 1]));
    }

    #[test]
    fn a_batch_with_tags_that_do_not_match_its_commands_is_refused() {
        let bad = BatchFormatRef::V2 {
            now: 1,
            cmds: &[Command::Ack { target: 0, seqs: vec![] }],
            shards: &[],
        };
        let bytes = codec::to_bytes(&bad).unwrap();
        assert!(codec::from_bytes::<Batch>(&bytes).is_err());
    }

    #[test]
    fn both_business_creates_keep_their_tags() {
        let c = CreateBiz { id: None, name: "x".into(), config: Default::default() };
        let b = Batch::new(7, vec![Command::CreateBiz(c.clone()), Command::CreateBizV2(c)]);
        let bytes = codec::to_bytes(&b).unwrap();
        // V1, now 7, two commands: CreateBiz (variant 3) as logged by every
        // build so far, then CreateBizV2 (variant 11, appended); each is
        // `id: None, "x", dislikes on, 100, 100`.
        let create = [0, 1, b'x', 1, 100, 100];
        let mut want = vec![0, 7, 2, 3];
        want.extend(create);
        want.push(11);
        want.extend(create);
        assert_eq!(bytes, want);
        assert_eq!(codec::from_bytes::<Batch>(&bytes).unwrap(), b);
    }

    #[test]
    fn a_score_logged_before_dedup_rules_reads_as_legacy() {
        let mut c = ScoreCmd {
            rank: 3,
            type_key: vec![1, 2],
            item: 4,
            aggregation: Aggregation::Incr,
            ties: TieMode::EarlierFirst,
            cap: 5,
            events: vec![ScoreEvent { score: 6, sub: None, event_id: 7 }],
            dedup: Dedup::LEGACY,
        };
        let old = codec::to_bytes(&Batch::new(1, vec![Command::Score(c.clone())])).unwrap();
        // V1, now 1, one command: Score (variant 7), then its fields as every
        // build before `dedup` wrote them.
        assert_eq!(old, vec![0, 1, 1, 7, 3, 2, 1, 2, 4, 0, 0, 5, 1, 12, 0, 7]);
        assert_eq!(codec::from_bytes::<Batch>(&old).unwrap().cmds[0], Command::Score(c.clone()));
        c.dedup = Dedup { window_s: 600, max_ids: 9 };
        let new = codec::to_bytes(&Batch::new(1, vec![Command::ScoreV2(c.clone())])).unwrap();
        assert_eq!(new[3], 14, "ScoreV2 is appended");
        assert_eq!(&new[new.len() - 4..], &[0xfb, 0x58, 0x02, 9], "then window (600) and bound");
        assert_eq!(codec::from_bytes::<Batch>(&new).unwrap().cmds[0], Command::ScoreV2(c));
    }

    #[test]
    fn board_moves_logged_before_move_ids_keep_their_tags() {
        use crate::rankings::residence::MoveCmd;
        use crate::residence::StepOf;
        use plaudit_proto::placement::{v1::PlacementsV1, BoardKey, Placements};
        let key = BoardKey { rank: 3, type_key: vec![1] };
        let freeze = MoveCmd::Freeze { key, to: 2 };
        let old = Placements::from(PlacementsV1 { epoch: 4, placed: vec![], moves: vec![] });
        let b = Batch::new(
            1,
            vec![
                Command::MoveBoard(freeze.clone()),
                Command::SetPlacements(Box::new(PlacementsV1 {
                    epoch: 4,
                    placed: vec![],
                    moves: vec![],
                })),
                Command::MoveBoardV2(StepOf { mv: 5, cmd: freeze }),
                Command::SetPlacementsV2(Box::new(old)),
            ],
        );
        let bytes = codec::to_bytes(&b).unwrap();
        // V1, now 1, four commands: MoveBoard (variant 19) and SetPlacements
        // (20) as every build before move ids wrote them (a Freeze: step 0,
        // rank 3, key [1], to 2; epoch 4, nothing placed or moving), then
        // the appended MoveBoardV2 (23, move 5 first) and SetPlacementsV2 (24).
        let want = [
            vec![0, 1, 4],
            vec![19, 0, 3, 1, 1, 2],
            vec![20, 4, 0, 0],
            vec![23, 5, 0, 3, 1, 1, 2],
            vec![24, 4, 0, 0],
        ];
        assert_eq!(bytes, want.concat());
        assert_eq!(codec::from_bytes::<Batch>(&bytes).unwrap(), b);
    }

    #[test]
    fn a_version_this_build_does_not_know_is_refused() {
        let mut bytes = codec::to_bytes(&Batch::new(1, vec![])).unwrap();
        bytes[0] = 9;
        assert!(codec::from_bytes::<Batch>(&bytes).is_err());
    }
}
