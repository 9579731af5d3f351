//! The shard actor: applies committed Raft batches of one shard by casting
//! each command to the virtual actor that owns its key, waits for the whole
//! batch, and stages every change together with the applied log id (the
//! store checkpoints staged writes into sled when they are due).
//!
//! ```text
//! Apply([entries]) ─┬─> UserActor (biz, mid)      ─┐ concurrent across actors,
//!                   ├─> UserActor (biz, mid')     ─┤ serial per actor,
//!                   └─> EntityActor (biz, entity) ─┘ one message per actor per batch
//!        results, in log order ─> WriteSet + outbox deltas + applied id ─> staged
//!        (visible to reads at once; written to sled by a checkpoint when due)
//! ```
//!
//! Supervision: children are linked; one that dies is dropped from the active
//! set and re-activated from storage on next use. Children hold no unsaved
//! state between batches, so passivating one never loses anything.

use crate::active::ActiveSet;
use crate::board_actor::{BoardActor, BoardArgs, BoardMsg, QueryOut};
use crate::command::{Batch, CmdResult, Command, Delta, EntityDelta, ScoreCmd};
use crate::directory::Directory;
use crate::entity_actor::{EntityActor, EntityArgs, EntityMsg};
use crate::likes::entity::LikerChange;
use crate::rankings::board::Rules;
use crate::user_actor::{UserActor, UserArgs, UserMsg, UserOp, UserOut};
use plaudit_proto::likes::{ListItem, PageCursor};
use plaudit_proto::rankings::RankId;
use plaudit_proto::routing::shard_of;
use plaudit_proto::scoring::BoardQuery;
use plaudit_proto::{codec, BizId, EntityId, ShardId, UserId, WireError};
use plaudit_storage::{StateStore, WriteSet};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, Notify};

/// One committed Raft entry, as the cluster hands it over.
pub struct ApplyEntry {
    /// The encoded log id; stored as the shard's applied position.
    pub log_id: Vec<u8>,
    /// The encoded membership, for membership entries.
    pub membership: Option<Vec<u8>>,
    /// The payload, for normal entries.
    pub batch: Option<Batch>,
}

pub type ApplyResult = Result<Vec<Vec<CmdResult>>, String>;
pub type PageResult = Result<Vec<ListItem>, String>;

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
    /// A query on one sub-board (activated from storage if needed).
    BoardQuery {
        rank: RankId,
        type_key: Vec<u8>,
        query: BoardQuery,
        reply: RpcReplyPort<Result<QueryOut, String>>,
    },
    /// Passivate actors idle for longer than the configured period.
    Sweep,
    /// Checkpoint staged state that has grown old (an idle shard's last writes).
    CheckpointTick,
    /// Drop every child and cached counter (after a snapshot replaced the state).
    Reset(RpcReplyPort<()>),
}

#[derive(Debug, Clone)]
pub struct ShardConfig {
    pub shard: ShardId,
    pub shard_count: u32,
    /// The metadata group applies registry commands; data shards refuse them.
    pub is_meta: bool,
    pub actor_budget: usize,
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
}

pub struct ShardActor {
    pub cfg: ShardConfig,
    pub store: StateStore,
    pub directory: Directory,
    /// Woken after a batch that added outbox entries.
    pub outbox_ready: Arc<Notify>,
    pub gauges: Arc<ShardGauges>,
}

pub struct ShardState {
    users: ActiveSet<(BizId, UserId), ActorRef<UserMsg>>,
    entities: ActiveSet<(BizId, EntityId), ActorRef<EntityMsg>>,
    boards: ActiveSet<BoardKey, ActorRef<BoardMsg>>,
    /// Highest applied seq per source shard (loaded lazily).
    inbox: HashMap<ShardId, u64>,
    /// Next outbox seq per target shard (loaded lazily).
    outbox_next: HashMap<ShardId, u64>,
    /// The checkpoint running on the blocking pool, if any.
    checkpointing: Option<tokio::task::JoinHandle<Result<(), String>>>,
}

/// A sub-board: its ranking and binary type id.
type BoardKey = (RankId, Vec<u8>);

/// Where a derived delta sits in its outbox record: like deltas in the
/// order of their commands, then owner deltas in the order of the delivered
/// deltas that caused them.
type OutboxOrder = (u8, usize);
const LIKE_DELTA: u8 = 0;
const OWNER_DELTA: u8 = 1;

/// Commands of one batch grouped by the actor that owns them, in order of
/// first appearance so that result processing is deterministic.
struct Grouped<K, Op> {
    index: HashMap<K, usize>,
    groups: Vec<(K, Vec<Op>, Vec<Slot>)>,
}

/// Where a command's result goes: `(entry, command)`, or `None` for derived
/// work (deltas) whose result nobody waits for.
type Slot = Option<(usize, usize)>;

impl<K: std::hash::Hash + Eq + Clone, Op> Grouped<K, Op> {
    fn new() -> Self {
        Grouped { index: HashMap::new(), groups: Vec::new() }
    }
    fn push(&mut self, k: K, op: Op, slot: Slot) {
        let i = *self.index.entry(k.clone()).or_insert_with(|| {
            self.groups.push((k, Vec::new(), Vec::new()));
            self.groups.len() - 1
        });
        self.groups[i].1.push(op);
        self.groups[i].2.push(slot);
    }
}

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
        Ok(ShardState {
            users: ActiveSet::default(),
            entities: ActiveSet::default(),
            boards: ActiveSet::default(),
            inbox: HashMap::new(),
            outbox_next: HashMap::new(),
            checkpointing: None,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<ShardMsg>,
        msg: ShardMsg,
        state: &mut ShardState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ShardMsg::Apply(entries, reply) => {
                let res = self.apply(&myself, state, entries).await;
                if res.is_err() {
                    // Children may hold changes that never reached storage.
                    self.reset(state);
                }
                let _ = reply.send(res);
            }
            ShardMsg::UserPage { biz, user, after, limit, reply } => {
                match self.user(&myself, state, biz, user).await {
                    Ok(a) => {
                        let _ = a.cast(UserMsg::Page(after, limit, reply));
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
            ShardMsg::LikerPage { biz, entity, after, limit, reply } => {
                match self.entity(&myself, state, biz, entity).await {
                    Ok(a) => {
                        let _ = a.cast(EntityMsg::Page(after, limit, reply));
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
            ShardMsg::BoardQuery { rank, type_key, query, reply } => {
                match self.board(&myself, state, rank, type_key).await {
                    Ok(a) => {
                        // The board answers the asker itself. If it stopped
                        // meanwhile, the dropped reply port tells the asker.
                        let _ = a.cast(BoardMsg::Query(query, reply));
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
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
                    for a in state.boards.evict_idle(cutoff) {
                        let _ = a.cast(BoardMsg::Passivate);
                    }
                }
                self.publish(state);
            }
            ShardMsg::Reset(reply) => {
                self.reset(state);
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
            if state.users.remove_where(|a| a.get_id() == id).is_none()
                && state.entities.remove_where(|a| a.get_id() == id).is_none()
            {
                state.boards.remove_where(|a| a.get_id() == id);
            }
        }
        Ok(())
    }
}

impl ShardActor {
    fn list_memory(&self, biz: BizId, user_side: bool) -> usize {
        self.directory
            .get(biz)
            .map(|b| if user_side { b.config.user_list_memory } else { b.config.liker_list_memory })
            .unwrap_or(100) as usize
    }

    async fn user(
        &self,
        myself: &ActorRef<ShardMsg>,
        state: &mut ShardState,
        biz: BizId,
        user: UserId,
    ) -> Result<ActorRef<UserMsg>, String> {
        let now = Instant::now();
        if let Some(a) = state.users.touch(&(biz, user), now) {
            return Ok(a);
        }
        let args =
            UserArgs { biz, user, shard: self.cfg.shard, list_memory: self.list_memory(biz, true) };
        let actor = UserActor { store: self.store.clone() };
        let (a, _) = Actor::spawn_linked(None, actor, args, myself.get_cell())
            .await
            .map_err(|e| format!("activating user {user}: {e}"))?;
        state.users.insert((biz, user), a.clone(), now);
        Ok(a)
    }

    async fn entity(
        &self,
        myself: &ActorRef<ShardMsg>,
        state: &mut ShardState,
        biz: BizId,
        entity: EntityId,
    ) -> Result<ActorRef<EntityMsg>, String> {
        let now = Instant::now();
        if let Some(a) = state.entities.touch(&(biz, entity), now) {
            return Ok(a);
        }
        let args = EntityArgs {
            biz,
            entity,
            shard: self.cfg.shard,
            list_memory: self.list_memory(biz, false),
        };
        let actor = EntityActor { store: self.store.clone() };
        let (a, _) = Actor::spawn_linked(None, actor, args, myself.get_cell())
            .await
            .map_err(|e| format!("activating entity {entity}: {e}"))?;
        state.entities.insert((biz, entity), a.clone(), now);
        Ok(a)
    }

    /// The rules of a ranking's boards, from its current definition.
    fn rules(&self, rank: RankId) -> Result<Rules, String> {
        let def = self.directory.rank(rank).ok_or_else(|| format!("ranking {rank} is unknown"))?;
        Ok(Rules { aggregation: def.aggregation, ties: def.ties, cap: def.settings.cap as usize })
    }

    async fn board(
        &self,
        myself: &ActorRef<ShardMsg>,
        state: &mut ShardState,
        rank: RankId,
        type_key: Vec<u8>,
    ) -> Result<ActorRef<BoardMsg>, String> {
        let now = Instant::now();
        let key = (rank, type_key);
        if let Some(a) = state.boards.touch(&key, now) {
            return Ok(a);
        }
        let args = BoardArgs {
            rank,
            type_key: key.1.clone(),
            shard: self.cfg.shard,
            rules: self.rules(rank)?,
        };
        let actor = BoardActor { store: self.store.clone(), gauges: self.gauges.clone() };
        let (a, _) = Actor::spawn_linked(None, actor, args, myself.get_cell())
            .await
            .map_err(|e| format!("activating a board of ranking {rank}: {e}"))?;
        state.boards.insert(key, a.clone(), now);
        Ok(a)
    }

    /// Deletes every stored key of a sub-board.
    fn drop_board(&self, ws: &mut WriteSet, rank: RankId, type_key: &[u8]) -> Result<(), String> {
        let shard = self.cfg.shard;
        let members = self.store.board_members(rank, shard, type_key).map_err(|e| e.to_string())?;
        for (item, _, _) in members {
            ws.del_board_member(rank, shard, type_key, item);
        }
        let events = self.store.board_events(rank, shard, type_key).map_err(|e| e.to_string())?;
        for (seq, _) in events {
            ws.del_board_events(rank, shard, type_key, seq);
        }
        ws.del_board_meta(rank, shard, type_key);
        Ok(())
    }

    /// Starts a checkpoint of this shard's staged state on the blocking pool
    /// when one is due and none is running: applying goes on meanwhile (new
    /// writes are staged beside the layer being written). A failed
    /// checkpoint is logged and retried when due again (its writes stay
    /// readable); only when the staged state reaches its hard limit does
    /// this wait, and fail, since then storage is broken and memory must
    /// not grow without bound.
    async fn checkpoint_if_due(&self, state: &mut ShardState) -> Result<(), String> {
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
            // Synchronously: one more try, and the caller fails if it fails.
            return self
                .store
                .checkpoint(shard)
                .map_err(|e| format!("checkpoints of shard {shard} keep failing: {e}"));
        }
        if self.store.checkpoint_due(shard) {
            let store = self.store.clone();
            state.checkpointing = Some(tokio::task::spawn_blocking(move || {
                store.checkpoint(shard).map_err(|e| e.to_string())
            }));
        }
        Ok(())
    }

    fn reset(&self, state: &mut ShardState) {
        for a in state.users.drain() {
            a.stop(None);
        }
        for a in state.entities.drain() {
            a.stop(None);
        }
        for a in state.boards.drain() {
            a.stop(None);
        }
        state.inbox.clear();
        state.outbox_next.clear();
        self.publish(state);
    }

    fn publish(&self, state: &ShardState) {
        self.gauges.active_users.store(state.users.len(), Ordering::Relaxed);
        self.gauges.active_entities.store(state.entities.len(), Ordering::Relaxed);
        self.gauges.active_boards.store(state.boards.len(), Ordering::Relaxed);
    }

    fn inbox_seq(&self, state: &mut ShardState, source: ShardId) -> Result<u64, String> {
        if let Some(s) = state.inbox.get(&source) {
            return Ok(*s);
        }
        let s = self.store.inbox_seq(self.cfg.shard, source).map_err(|e| e.to_string())?;
        state.inbox.insert(source, s);
        Ok(s)
    }

    fn push_outbox(
        &self,
        state: &mut ShardState,
        ws: &mut WriteSet,
        target: ShardId,
        deltas: &[Delta],
    ) -> Result<(), String> {
        let next = match state.outbox_next.get(&target) {
            Some(n) => *n,
            None => self.store.outbox_next(self.cfg.shard, target).map_err(|e| e.to_string())?,
        };
        let bytes = codec::to_bytes(deltas).map_err(|e| e.to_string())?;
        ws.push_outbox(self.cfg.shard, target, next, &bytes);
        state.outbox_next.insert(target, next + 1);
        Ok(())
    }

    async fn apply(
        &self,
        myself: &ActorRef<ShardMsg>,
        state: &mut ShardState,
        entries: Vec<ApplyEntry>,
    ) -> ApplyResult {
        let shard = self.cfg.shard;
        let mut results: Vec<Vec<CmdResult>> = Vec::with_capacity(entries.len());
        let mut ws = WriteSet::new(shard);
        let mut users: Grouped<(BizId, UserId), UserOp> = Grouped::new();
        let mut ents: Grouped<(BizId, EntityId), EntityDelta> = Grouped::new();
        let mut boards: Grouped<BoardKey, ScoreCmd> = Grouped::new();
        let mut drops: Vec<BoardKey> = Vec::new();

        for (ei, entry) in entries.iter().enumerate() {
            if let Some(m) = &entry.membership {
                ws.put_membership(shard, m);
            }
            let Some(batch) = &entry.batch else {
                results.push(Vec::new());
                continue;
            };
            let mut out = Vec::with_capacity(batch.cmds.len());
            // Delivered deltas of this entry, numbered in command order.
            let mut delivered = 0;
            for (ci, cmd) in batch.cmds.iter().enumerate() {
                out.push(CmdResult::Done);
                match cmd {
                    Command::Like(r) => {
                        let op = UserOp::Like {
                            entity: r.entity,
                            owner: r.owner,
                            action: r.action,
                            now: batch.now,
                        };
                        users.push((r.biz, r.user), op, Some((ei, ci)));
                    }
                    Command::Deliver { source, records } => {
                        let mut seen = self.inbox_seq(state, *source)?;
                        let before = seen;
                        for (seq, d) in
                            records.iter().flat_map(|(seq, ds)| ds.iter().map(move |d| (seq, d)))
                        {
                            if *seq <= before {
                                continue; // a repeat after a leader change or retry
                            }
                            seen = seen.max(*seq);
                            match *d {
                                Delta::Entity(ed) => {
                                    // The slot only orders what this delta emits.
                                    ents.push((ed.biz, ed.entity), ed, Some((ei, delivered)));
                                    delivered += 1;
                                }
                                Delta::Received { biz, owner, d_likes } => {
                                    users.push((biz, owner), UserOp::Received(d_likes), None)
                                }
                            }
                        }
                        if seen > before {
                            state.inbox.insert(*source, seen);
                            ws.put_inbox_seq(shard, *source, seen);
                        }
                    }
                    Command::Score(c) => {
                        boards.push((c.rank, c.type_key.clone()), c.clone(), Some((ei, ci)))
                    }
                    Command::DropBoard { rank, type_key } => {
                        drops.push((*rank, type_key.clone()));
                    }
                    Command::Ack { target, seqs } => {
                        ws.ack_outbox(shard, *target, seqs.iter().copied())
                    }
                    Command::CreateBiz(c) if self.cfg.is_meta => {
                        *out.last_mut().unwrap_or(&mut CmdResult::Done) =
                            match self.directory.apply_create(c, &mut ws) {
                                Ok(b) => CmdResult::Biz(b),
                                Err(e) => CmdResult::Failed(e),
                            };
                    }
                    Command::UpdateBiz(u) if self.cfg.is_meta => {
                        *out.last_mut().unwrap_or(&mut CmdResult::Done) =
                            match self.directory.apply_update(u, &mut ws) {
                                Ok(b) => CmdResult::Biz(b),
                                Err(e) => CmdResult::Failed(e),
                            };
                    }
                    Command::CreateRank(d) if self.cfg.is_meta => {
                        *out.last_mut().unwrap_or(&mut CmdResult::Done) =
                            match self.directory.apply_create_rank(d, &mut ws) {
                                Ok(d) => CmdResult::Rank(d),
                                Err(e) => CmdResult::Failed(e),
                            };
                    }
                    Command::UpdateRank(u) if self.cfg.is_meta => {
                        *out.last_mut().unwrap_or(&mut CmdResult::Done) =
                            match self.directory.apply_update_rank(u, &mut ws) {
                                Ok(d) => CmdResult::Rank(d),
                                Err(e) => CmdResult::Failed(e),
                            };
                    }
                    Command::CreateBiz(_)
                    | Command::UpdateBiz(_)
                    | Command::CreateRank(_)
                    | Command::UpdateRank(_) => {
                        *out.last_mut().unwrap_or(&mut CmdResult::Done) = CmdResult::Failed(
                            WireError::internal("registry command sent to a data shard"),
                        );
                    }
                }
            }
            results.push(out);
        }

        // Cast every group first so all actors work concurrently, then collect
        // in order of first appearance.
        let mut user_waits = Vec::with_capacity(users.groups.len());
        for (key, ops, slots) in users.groups {
            let actor = self.user(myself, state, key.0, key.1).await?;
            let (tx, rx) = oneshot::channel();
            actor.cast(UserMsg::Apply(ops, tx.into())).map_err(|e| e.to_string())?;
            user_waits.push((key, slots, rx));
        }
        let mut ent_waits = Vec::with_capacity(ents.groups.len());
        for (key, deltas, slots) in ents.groups {
            let actor = self.entity(myself, state, key.0, key.1).await?;
            let (tx, rx) = oneshot::channel();
            actor.cast(EntityMsg::Apply(deltas, tx.into())).map_err(|e| e.to_string())?;
            ent_waits.push((key, slots, rx));
        }

        let mut board_waits = Vec::with_capacity(boards.groups.len());
        for (key, cmds, slots) in boards.groups {
            let rank = key.0;
            // A ranking unknown here fails its events (the router checks
            // first, so only a race with a future delete could get here).
            if let Err(e) = self.rules(rank) {
                for (ei, ci) in slots.into_iter().flatten() {
                    results[ei][ci] = CmdResult::Failed(WireError::not_found(e.clone()));
                }
                continue;
            }
            let actor = self.board(myself, state, rank, key.1.clone()).await?;
            let (tx, rx) = oneshot::channel();
            let msg = BoardMsg::Apply { cmds, reply: tx.into() };
            actor.cast(msg).map_err(|e| e.to_string())?;
            board_waits.push((key, slots, rx));
        }

        // Derived deltas, one outbox record per (log entry, target), each in
        // command order. A record is then a function of its entry alone: a
        // replay after a crash (which may group entries into apply calls
        // differently, and which targets may have seen before) rebuilds the
        // same records under the same seqs, and targets dedup by seq.
        let mut outbox: BTreeMap<(usize, ShardId), Vec<(OutboxOrder, Delta)>> = BTreeMap::new();
        for ((biz, user), slots, rx) in user_waits {
            let outs = rx.await.map_err(|_| format!("user actor {user} died while applying"))??;
            for (slot, o) in slots.into_iter().zip(outs) {
                match o {
                    UserOut::Like(applied) => {
                        let Some((ei, ci)) = slot else {
                            return Err(format!("a like of user {user} lost its log position"));
                        };
                        results[ei][ci] = CmdResult::Like(applied.reply);
                        if let Some(c) = applied.change {
                            ws.put_state(biz, shard, user, c.entity, c.state, c.mtime);
                            if let Some(m) = c.list_del {
                                ws.del_user_item(biz, shard, user, m, c.entity);
                            }
                            if let Some(m) = c.list_add {
                                ws.add_user_item(biz, shard, user, m, c.entity);
                            }
                            let target = shard_of(biz, c.entity, self.cfg.shard_count);
                            let order = (LIKE_DELTA, ci);
                            outbox
                                .entry((ei, target))
                                .or_default()
                                .push((order, Delta::Entity(c.delta)));
                        }
                    }
                    UserOut::Received(total) => ws.put_received(biz, shard, user, total),
                }
            }
        }
        for ((biz, entity), slots, rx) in ent_waits {
            let (counts, effects) =
                rx.await.map_err(|_| format!("entity actor {entity} died while applying"))?;
            ws.put_counts(biz, shard, entity, counts);
            for (slot, fx) in slots.into_iter().zip(effects) {
                for ch in fx.likers {
                    match ch {
                        LikerChange::Add(i) => ws.add_liker(biz, shard, entity, i.mtime, i.id),
                        LikerChange::Remove(i) => ws.del_liker(biz, shard, entity, i.mtime, i.id),
                    }
                }
                if let Some((owner, d_likes)) = fx.owner_delta {
                    let Some((ei, k)) = slot else {
                        return Err(format!("a delta of entity {entity} lost its log position"));
                    };
                    let target = shard_of(biz, owner, self.cfg.shard_count);
                    let d = Delta::Received { biz, owner, d_likes };
                    outbox.entry((ei, target)).or_default().push(((OWNER_DELTA, k), d));
                }
            }
        }

        for ((rank, type_key), slots, rx) in board_waits {
            let (outs, w) =
                rx.await.map_err(|_| format!("a board of ranking {rank} died while applying"))?;
            for (slot, o) in slots.into_iter().zip(outs) {
                if let Some((ei, ci)) = slot {
                    results[ei][ci] = CmdResult::Scored(o);
                }
            }
            for (item, m) in w.members {
                match m {
                    Some(m) => ws.put_board_member(rank, shard, &type_key, item, m.score, m.tie),
                    None => ws.del_board_member(rank, shard, &type_key, item),
                }
            }
            ws.put_board_meta(rank, shard, &type_key, w.meta);
            for (seq, ids) in &w.events {
                ws.put_board_events(rank, shard, &type_key, *seq, ids);
            }
            for seq in w.drop_events {
                ws.del_board_events(rank, shard, &type_key, seq);
            }
        }

        // Deletions go last, after any write of this batch (a board is only
        // dropped once its window expired, and the edge refuses new events
        // for it, so the two meet only in a race that the next sweep cleans).
        for key in drops {
            if let Some(a) = state.boards.remove(&key) {
                a.stop(None);
            }
            self.drop_board(&mut ws, key.0, &key.1)?;
        }

        let outbox_grew = !outbox.is_empty();
        for ((_, target), mut deltas) in outbox {
            deltas.sort_by_key(|(order, _)| *order);
            let deltas: Vec<Delta> = deltas.into_iter().map(|(_, d)| d).collect();
            self.push_outbox(state, &mut ws, target, &deltas)?;
        }
        if let Some(last) = entries.last() {
            ws.put_applied(shard, &last.log_id);
        }
        self.store.stage(ws);
        if self.cfg.is_meta {
            // Data shards apply events against the registry (a ranking's
            // rules), and after a crash they replay their logs before this
            // group replays its own. Registry writes therefore reach sled at
            // once: sled keeps its writes in order, so any later entry a data
            // shard made durable carries them. They are rare; this is cheap.
            self.store.checkpoint(shard).map_err(|e| e.to_string())?;
        } else {
            self.checkpoint_if_due(state).await?;
        }
        if outbox_grew {
            self.outbox_ready.notify_one();
        }
        for a in state.users.evict_over(self.cfg.actor_budget) {
            let _ = a.cast(UserMsg::Passivate);
        }
        for a in state.entities.evict_over(self.cfg.actor_budget) {
            let _ = a.cast(EntityMsg::Passivate);
        }
        for a in state.boards.evict_over(self.cfg.actor_budget) {
            let _ = a.cast(BoardMsg::Passivate);
        }
        self.gauges.applied_batches.fetch_add(entries.len(), Ordering::Relaxed);
        self.publish(state);
        Ok(results)
    }
}

/// What callers outside the actor system hold: never a ractor type.
#[derive(Clone)]
pub struct ShardHandle {
    actor: ActorRef<ShardMsg>,
    pub gauges: Arc<ShardGauges>,
}

impl ShardHandle {
    /// Spawns the shard actor (unsupervised: the node owns its lifetime).
    pub async fn spawn(actor: ShardActor) -> Result<ShardHandle, String> {
        let gauges = actor.gauges.clone();
        let (a, _) = Actor::spawn(None, actor, ()).await.map_err(|e| e.to_string())?;
        Ok(ShardHandle { actor: a, gauges })
    }

    async fn ask<T>(&self, build: impl FnOnce(RpcReplyPort<T>) -> ShardMsg) -> Result<T, String> {
        let (tx, rx) = oneshot::channel();
        self.actor.cast(build(tx.into())).map_err(|_| "shard actor stopped".to_string())?;
        rx.await.map_err(|_| "shard actor dropped the request".to_string())
    }

    pub async fn apply(&self, entries: Vec<ApplyEntry>) -> ApplyResult {
        self.ask(|r| ShardMsg::Apply(entries, r)).await?
    }

    pub async fn user_page(
        &self,
        biz: BizId,
        user: UserId,
        after: Option<PageCursor>,
        limit: usize,
    ) -> PageResult {
        self.ask(|reply| ShardMsg::UserPage { biz, user, after, limit, reply }).await?
    }

    pub async fn liker_page(
        &self,
        biz: BizId,
        entity: EntityId,
        after: Option<PageCursor>,
        limit: usize,
    ) -> PageResult {
        self.ask(|reply| ShardMsg::LikerPage { biz, entity, after, limit, reply }).await?
    }

    pub async fn board_query(
        &self,
        rank: RankId,
        type_key: Vec<u8>,
        query: BoardQuery,
    ) -> Result<QueryOut, String> {
        self.ask(|reply| ShardMsg::BoardQuery { rank, type_key, query, reply }).await?
    }

    pub async fn reset(&self) -> Result<(), String> {
        self.ask(ShardMsg::Reset).await
    }

    /// Stops the shard actor and its children and waits until they are gone,
    /// so nothing holds the store afterwards.
    pub async fn stop(&self) {
        let _ = self.actor.stop_and_wait(None, Some(Duration::from_secs(10))).await;
    }
}
