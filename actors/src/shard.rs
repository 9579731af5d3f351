//! The shard actor: the scheduler of one shard replica. It applies
//! committed Raft entries by handing each command to the virtual actor that
//! owns its key, waits for the whole batch, and stages every change together
//! with the applied log id (the store checkpoints staged writes into its
//! in-memory trees when they are due). Boards are the exception: a held
//! board is the truth, written back when the shard lets it go and taken
//! into snapshots as an image (`board_host.rs`). It also routes reads that need an actor (list pages),
//! answers board queries for boards not loaded yet, and passivates idle
//! actors and boards.
//!
//! ```text
//! Apply([entries]) ─ plan ─┬─> UserActor (biz, mid)      ─┐ concurrent across actors,
//!   (one module per        ├─> EntityActor (biz, entity) ─┘ serial per actor,
//!    command family)       │                                one message per actor per batch
//!                          └─> BoardHost (rank, board): applied here, on this task
//!        collect, in log order ─> WriteSet + outbox records + applied id + time floor ─> staged
//!        (visible to reads at once; moved into the trees by a checkpoint when due)
//!        ─> evict over budget (boards written back)
//! ```
//!
//! How one command family is applied lives in its own module: `likes`
//! (likes and the deltas delivered to entities and owners), `rankings`
//! (scoring and dropping sub-boards), `registry` (businesses and rankings,
//! metadata group only), `delivery` (the inbox and outbox between shards).
//! `apply` is the order in which they run.
//!
//! Supervision: children are linked; one that dies is dropped from the active
//! set and re-activated from storage on next use. User and entity actors
//! hold no unsaved state between batches, so passivating one never loses
//! anything; a board is written back first.

mod activation;
mod apply;
mod delivery;
mod entity_moves;
pub use entity_moves::entity_moved;
mod handle;

pub use delivery::{OutboxSignal, MAX_RECORD_DELTAS};
mod likes;
mod moves;
mod once;
mod rankings;
mod registry;

pub use handle::ShardHandle;

use crate::active::{ActiveSet, Identified};
use crate::active_boards::ActiveBoards;
use crate::board_host::{BoardArgs, BoardHost, QueryOut};
use crate::command::{Batch, CmdResult, EventResult, ScoreEvent};
use crate::directory::Directory;
use crate::entity_actor::{EntityActor, EntityArgs, EntityMsg};
use crate::error::{Fatal, ShardError};
use crate::rankings::board::Rules;
use crate::user_actor::{UserActor, UserArgs, UserMsg};
use plaudit_proto::likes::{ListItem, PageCursor};
use plaudit_proto::rankings::{ItemId, RankId};
use plaudit_proto::scoring::BoardQuery;
use plaudit_proto::{BizId, EntityId, Millis, ShardId, UserId};
use plaudit_storage::snapshot::Frozen;
use plaudit_storage::StateStore;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// One committed Raft entry, as the cluster hands it over.
pub struct ApplyEntry {
    /// The encoded log id; stored as the shard's applied position.
    pub log_id: Vec<u8>,
    /// The encoded membership, for membership entries.
    pub membership: Option<Vec<u8>>,
    /// The payload, for normal entries.
    pub batch: Option<Batch>,
}

pub type ApplyResult = Result<Vec<Vec<CmdResult>>, Fatal>;
pub type PageResult = Result<Vec<ListItem>, ShardError>;

pub enum ShardMsg {
    Apply(Vec<ApplyEntry>, RpcReplyPort<ApplyResult>),
    UserPage {
        biz: BizId,
        user: UserId,
        after: Option<PageCursor>,
        limit: usize,
        reply: RpcReplyPort<PageResult>,
    },
    LikerPage {
        biz: BizId,
        entity: EntityId,
        after: Option<PageCursor>,
        limit: usize,
        reply: RpcReplyPort<PageResult>,
    },
    /// A query on one sub-board (activated from storage if needed). `rules`
    /// come from the ranking's definition at the edge; a stored board keeps
    /// the cap it last applied.
    BoardQuery {
        rank: RankId,
        type_key: Vec<u8>,
        rules: Rules,
        query: BoardQuery,
        reply: RpcReplyPort<Result<QueryOut, ShardError>>,
    },
    /// Whether one scoring event would apply on a sub-board, changing
    /// nothing (activated from storage if needed, like a query).
    BoardCheck {
        rank: RankId,
        type_key: Vec<u8>,
        rules: Rules,
        item: ItemId,
        event: ScoreEvent,
        reply: RpcReplyPort<Result<EventResult, ShardError>>,
    },
    /// A board was read directly (`active_boards.rs`): it is in use.
    TouchBoard {
        rank: RankId,
        type_key: Vec<u8>,
    },
    /// Passivate actors idle for longer than the configured period.
    Sweep,
    /// Checkpoint staged state that has grown old (an idle shard's last writes).
    CheckpointTick,
    /// Drop every child and cached counter (after a snapshot replaced the state).
    Reset(RpcReplyPort<()>),
    /// Freeze the shard's state for an export (`ShardHandle::freeze`).
    Freeze(RpcReplyPort<Result<Frozen, ShardError>>),
    /// The copy of a board frozen here for a move (`shard/moves.rs`).
    ExportBoard(
        plaudit_proto::placement::BoardKey,
        RpcReplyPort<Result<crate::rankings::residence::BoardCopy, ShardError>>,
    ),
    /// The copy of an entity frozen here for a move (`shard/entity_moves.rs`).
    ExportEntity(
        plaudit_proto::placement::EntityKey,
        RpcReplyPort<Result<crate::likes::residence::EntityCopy, ShardError>>,
    ),
}

// A local message: never sent to another node (ractor's `cluster` feature
// asks every message type to say so).
impl ractor::Message for ShardMsg {}

#[derive(Debug, Clone)]
pub struct ShardConfig {
    pub shard: ShardId,
    pub shard_count: u32,
    /// The metadata group applies registry commands; data shards refuse them.
    pub is_meta: bool,
    pub actor_budget: crate::active::Budget,
    pub actor_idle: Duration,
}

/// Observable numbers of a shard, shared with metrics.
#[derive(Default)]
pub struct ShardGauges {
    pub active_users: AtomicUsize,
    pub active_entities: AtomicUsize,
    pub active_boards: AtomicUsize,
    pub applied_batches: AtomicUsize,
    /// Members on the active boards, and the heap their structures hold.
    pub board_members: AtomicUsize,
    pub board_heap_bytes: AtomicUsize,
    /// Boards read from the store into memory, and changed boards written
    /// back when let go: counters, so that churn past the actor budget
    /// (a whole board read and rewritten per eviction) shows.
    pub boards_loaded: AtomicUsize,
    pub boards_written_back: AtomicUsize,
}

pub struct ShardActor {
    pub cfg: ShardConfig,
    pub store: StateStore,
    /// The registry: written by the metadata group's apply. Data shards read
    /// it only for the size of an actor's in-memory list window (a cache
    /// size, never an input to what apply computes).
    pub directory: Directory,
    /// Told after a batch that added outbox records, and for which targets.
    pub outbox: Arc<OutboxSignal>,
    pub gauges: Arc<ShardGauges>,
    /// The loaded boards' views, for queries that skip this actor
    /// (`active_boards.rs`).
    pub boards: Arc<ActiveBoards>,
}

pub struct ShardState {
    users: ActiveSet<(BizId, UserId), ActorRef<UserMsg>>,
    entities: ActiveSet<(BizId, EntityId), ActorRef<EntityMsg>>,
    boards: ActiveSet<BoardKey, BoardHost>,
    /// Serial of the next board loaded.
    board_serial: u64,
    /// Highest applied seq per source shard (loaded lazily).
    inbox: HashMap<ShardId, u64>,
    /// Next outbox seq per target shard (loaded lazily).
    outbox_next: HashMap<ShardId, u64>,
    /// The time of the last applied entry (loaded lazily).
    floor: Option<Millis>,
    /// The checkpoint running on the blocking pool, if any.
    checkpointing: Option<tokio::task::JoinHandle<Result<(), plaudit_storage::StateError>>>,
    /// Boards moved to or from this shard (`shard/moves.rs`; loaded lazily).
    residences: Option<crate::rankings::residence::BoardResidences>,
    /// Entities moved to or from this shard (`shard/entity_moves.rs`).
    entity_residences: Option<crate::likes::residence::EntityResidences>,
    /// Deltas held for entities frozen here (loaded lazily).
    held: entity_moves::Held,
    /// Set by a failed apply: held boards may have lost changes that no
    /// tree holds, so nothing is applied or read here until a snapshot
    /// replaces the state (`Reset`). openraft stops the group on a failed
    /// apply anyway; a restart rebuilds it from its snapshot and log.
    broken: bool,
}

/// A sub-board: its ranking and binary type id.
type BoardKey = (RankId, Vec<u8>);

impl Actor for ShardActor {
    type Msg = ShardMsg;
    type State = ShardState;
    type Arguments = ();

    async fn pre_start(
        &self,
        myself: ActorRef<ShardMsg>,
        _: (),
    ) -> Result<ShardState, ActorProcessingErr> {
        let period = (self.cfg.actor_idle / 4).max(Duration::from_millis(100));
        myself.send_interval(period, || ShardMsg::Sweep);
        let period = (self.store.checkpoint_policy().max_age / 2).max(Duration::from_millis(10));
        myself.send_interval(period, || ShardMsg::CheckpointTick);
        let mut state = ShardState {
            users: ActiveSet::default(),
            entities: ActiveSet::default(),
            boards: ActiveSet::default(),
            board_serial: 0,
            inbox: HashMap::new(),
            outbox_next: HashMap::new(),
            floor: None,
            checkpointing: None,
            residences: None,
            entity_residences: None,
            held: Default::default(),
            broken: false,
        };
        // At start, not at first use: reads of counts consult what this
        // shard published as moved away.
        self.load_entity_residences(&mut state)?;
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<ShardMsg>,
        msg: ShardMsg,
        state: &mut ShardState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ShardMsg::Apply(entries, reply) => {
                if state.broken {
                    let _ = reply.send(Err(broken()));
                    return Ok(());
                }
                let res = self.apply(state, entries).await;
                if res.is_err() {
                    // Children may hold changes that never reached storage.
                    self.reset(state);
                    state.broken = true;
                }
                let _ = reply.send(res);
            }
            ShardMsg::Freeze(reply) => {
                let _ = reply.send(self.freeze(state).await);
            }
            ShardMsg::UserPage { biz, user, after, limit, reply } => {
                match self.user(&myself, state, biz, user).await {
                    Ok(a) => {
                        let _ = a.cast(UserMsg::Page(after, limit, reply));
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e.into()));
                    }
                }
            }
            ShardMsg::LikerPage { biz, entity, after, limit, reply } => {
                if let Err(e) = self.entity_readable(state, biz, entity) {
                    let _ = reply.send(Err(e));
                    return Ok(());
                }
                match self.entity(&myself, state, biz, entity).await {
                    Ok(a) => {
                        let _ = a.cast(EntityMsg::Page(after, limit, reply));
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e.into()));
                    }
                }
            }
            ShardMsg::BoardQuery { rank, type_key, rules, query, reply } => {
                let out = self
                    .live(state)
                    .map_err(ShardError::from)
                    .and_then(|s| self.board_readable(s, rank, &type_key).map(|()| s))
                    .and_then(|s| Ok(self.board(s, rank, type_key, rules)?.answer(&query)));
                let _ = reply.send(out);
            }
            ShardMsg::BoardCheck { rank, type_key, rules, item, event, reply } => {
                let out = self.live(state).map_err(ShardError::from).and_then(|s| {
                    self.board_writable(s, rank, &type_key)?.map_err(ShardError::Rejected)?;
                    Ok(self.board(s, rank, type_key, rules)?.check(item, &event))
                });
                let _ = reply.send(out);
            }
            ShardMsg::ExportBoard(board, reply) => {
                let out = self.live(state).map_err(ShardError::from);
                let _ = reply.send(out.and_then(|s| self.export_board(s, board)));
            }
            ShardMsg::ExportEntity(key, reply) => {
                let out = self.live(state).map_err(ShardError::from);
                let _ = reply.send(out.and_then(|s| self.export_entity(s, key)));
            }
            ShardMsg::CheckpointTick => {
                if let Err(e) = self.checkpoint_if_due(state).await {
                    tracing::warn!(shard = self.cfg.shard, error = %e, "checkpoint failed");
                }
            }
            ShardMsg::Sweep => {
                let cutoff = Instant::now().checked_sub(self.cfg.actor_idle);
                if let Some(cutoff) = cutoff {
                    for a in state.users.evict_idle(cutoff) {
                        let _ = a.cast(UserMsg::Passivate);
                    }
                    for a in state.entities.evict_idle(cutoff) {
                        let _ = a.cast(EntityMsg::Passivate);
                    }
                    let idle = state.boards.evict_idle(cutoff);
                    if let Err(e) = self.unload_boards(idle) {
                        tracing::error!(shard = self.cfg.shard, error = %e, "writing back idle boards failed");
                        self.reset(state);
                        state.broken = true;
                    }
                }
                self.publish(state);
            }
            ShardMsg::TouchBoard { rank, type_key } => {
                state.boards.touch_mut(&(rank, type_key), Instant::now());
            }
            ShardMsg::Reset(reply) => {
                self.reset(state);
                state.broken = false;
                let _ = reply.send(());
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<ShardMsg>,
        state: &mut ShardState,
    ) -> Result<(), ActorProcessingErr> {
        // Not needed for safety (the log replays whatever is lost), but it
        // makes the next start fast.
        if let Some(task) = state.checkpointing.take() {
            let _ = task.await;
        }
        if let Err(e) = self.store.checkpoint(self.cfg.shard) {
            tracing::warn!(shard = self.cfg.shard, error = %e, "final checkpoint failed");
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<ShardMsg>,
        evt: SupervisionEvent,
        state: &mut ShardState,
    ) -> Result<(), ActorProcessingErr> {
        // A child that stopped or failed is simply forgotten: the next command
        // for its key activates a fresh one from storage.
        let who = match &evt {
            SupervisionEvent::ActorTerminated(who, _, _) => Some(who.get_id()),
            SupervisionEvent::ActorFailed(who, err) => {
                tracing::warn!(shard = self.cfg.shard, error = %err, "child actor failed");
                Some(who.get_id())
            }
            _ => None,
        };
        if let Some(id) = who {
            if state.users.remove_id(&id).is_none() {
                state.entities.remove_id(&id);
            }
        }
        Ok(())
    }
}

impl<M: ractor::Message> Identified for ActorRef<M> {
    type Id = ractor::ActorId;
    fn id(&self) -> ractor::ActorId {
        self.get_id()
    }
}

impl ShardActor {
    /// `Err` once a failed apply broke the shard (see `ShardState::broken`).
    fn live<'s>(&self, state: &'s mut ShardState) -> Result<&'s mut ShardState, Fatal> {
        if state.broken {
            return Err(broken());
        }
        Ok(state)
    }

    /// Freezes the shard's trees for a snapshot, with the images of the
    /// changed boards it holds: between applies, so the trees and the
    /// images are the same point. The checkpoint that freezing runs goes
    /// to the blocking pool; this actor waits, so no apply slips in.
    async fn freeze(&self, state: &mut ShardState) -> Result<Frozen, ShardError> {
        self.live(state)?;
        let held: Vec<_> =
            state.boards.values().filter(|h| h.changed()).map(|h| h.image()).collect();
        let (store, shard) = (self.store.clone(), self.cfg.shard);
        match tokio::task::spawn_blocking(move || store.freeze_with(shard, held)).await {
            Ok(res) => Ok(res.map_err(Fatal::from)?),
            Err(e) => Err(Fatal::Actor(format!("freezing shard {shard}: {e}")).into()),
        }
    }

    /// Passivates the least recently used actors of each kind over budget.
    fn evict_over_budget(&self, state: &mut ShardState) -> Result<(), Fatal> {
        let budget = self.cfg.actor_budget.get();
        for a in state.users.evict_over(budget) {
            let _ = a.cast(UserMsg::Passivate);
        }
        for a in state.entities.evict_over(budget) {
            let _ = a.cast(EntityMsg::Passivate);
        }
        let over = state.boards.evict_over(budget);
        self.unload_boards(over)
    }

    fn reset(&self, state: &mut ShardState) {
        for a in state.users.drain() {
            a.stop(None);
        }
        for a in state.entities.drain() {
            a.stop(None);
        }
        // Before anything else: no query may reach a board whose state the
        // snapshot replaced.
        self.boards.clear();
        let all = state.boards.drain();
        self.discard_boards(all);
        state.inbox.clear();
        state.outbox_next.clear();
        state.floor = None;
        state.residences = None;
        // At once, not at first use: reads of counts consult what this
        // shard published as moved away.
        if let Err(e) = self.load_entity_residences(state) {
            tracing::error!(shard = self.cfg.shard, error = %e, "reading entity residences failed");
            state.entity_residences = None;
        }
        self.publish(state);
    }

    fn publish(&self, state: &ShardState) {
        self.gauges.active_users.store(state.users.len(), Ordering::Relaxed);
        self.gauges.active_entities.store(state.entities.len(), Ordering::Relaxed);
        self.gauges.active_boards.store(state.boards.len(), Ordering::Relaxed);
    }

    /// Starts a checkpoint of this shard's staged state on the blocking pool
    /// when one is due and none is running: applying goes on meanwhile (new
    /// writes are staged beside the layer being written). A failed
    /// checkpoint is logged and retried when due again (its writes stay
    /// readable); only when the staged state reaches its hard limit does
    /// this wait, and fail, since then storage is broken and memory must
    /// not grow without bound.
    async fn checkpoint_if_due(&self, state: &mut ShardState) -> Result<(), Fatal> {
        let shard = self.cfg.shard;
        if let Some(task) = state.checkpointing.take() {
            let must_wait = self.store.over_hard_limit(shard);
            if !task.is_finished() && !must_wait {
                state.checkpointing = Some(task);
                return Ok(());
            }
            match task.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(shard, error = %e, "checkpoint failed; retrying later")
                }
                Err(e) => tracing::warn!(shard, error = %e, "checkpoint task failed"),
            }
        }
        if self.store.over_hard_limit(shard) {
            // A snapshot export holds the trees still for a moment: wait
            // for it rather than stage without bound.
            while self.store.is_frozen(shard) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            // Synchronously: one more try, and the caller fails if it fails.
            return Ok(self.store.checkpoint(shard)?);
        }
        if self.store.checkpoint_due(shard) {
            let store = self.store.clone();
            state.checkpointing =
                Some(tokio::task::spawn_blocking(move || store.checkpoint(shard)));
        }
        Ok(())
    }
}

fn broken() -> Fatal {
    Fatal::Invariant(
        "an earlier apply failed on this shard; it serves again after a restart".into(),
    )
}
