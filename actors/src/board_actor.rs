//! The virtual actor of one sub-board: hosts a `Board` and its
//! `EventMemory`, loaded from the ranking's tree on activation, applies the
//! scoring events of a batch in log order and hands back what to store.

use crate::command::{EventResult, ScoreCmd, ScoreEvent};
use crate::error::ShardError;
use crate::rankings::board::{Board, Member, Ranked, Rules};
use crate::rankings::dedup::EventMemory;
use crate::rankings::records::EventRecords;
use crate::shard::ShardGauges;
use plaudit_proto::rankings::{ItemId, RankId};
use plaudit_proto::scoring::{BoardQuery, Outcome, RankedItem};
use plaudit_proto::WireError;
use plaudit_storage::{BoardMeta, StateStore};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Event ids a sub-board remembers. A retry arriving after this many newer
/// events on the same board is applied again; 10k covers seconds of a hot
/// board and costs ~160 KiB only on boards that busy.
pub const EVENT_MEMORY: usize = 10_000;

/// What one batch changed, for the shard to store.
#[derive(Debug, Default)]
pub struct BoardWrites {
    pub members: Vec<(ItemId, Option<Member>)>,
    pub meta: BoardMeta,
    /// Event-id records `(seq, ids)` to store: those this batch filled and
    /// the open one it added to.
    pub events: Vec<(u64, Vec<u64>)>,
    /// Event-id records no longer needed to cover the memory bound.
    pub drop_events: Vec<u64>,
}

/// Per command, per event, and what to store.
pub type ApplyReply = (Vec<Vec<EventResult>>, BoardWrites);

/// The answer to a query on one board.
#[derive(Debug, Clone)]
pub enum QueryOut {
    Items(Vec<RankedItem>),
    RankOf(Option<RankedItem>),
    Scores(Vec<(ItemId, Option<i64>)>),
    Size(u64),
}

pub enum BoardMsg {
    /// Commands in log order, each one member's events with the cap they
    /// were admitted under (it may change while the board is active).
    Apply {
        cmds: Vec<ScoreCmd>,
        reply: RpcReplyPort<ApplyReply>,
    },
    /// Answered straight to the asker (the shard only routes it), so a
    /// large top-N never holds up the shard's applies.
    Query(BoardQuery, RpcReplyPort<Result<QueryOut, ShardError>>),
    /// What applying one event for `item` would give now (`Applied` or
    /// `Duplicate`, or the overflow that would refuse it), changing
    /// nothing: the edge's check before it proposes an event to any of
    /// its boards (`rankings/all_or_nothing.rs`). Answered straight to the asker.
    Check {
        item: ItemId,
        event: ScoreEvent,
        reply: RpcReplyPort<Result<EventResult, ShardError>>,
    },
    Passivate,
}

// A local message: never sent to another node (ractor's `cluster` feature
// asks every message type to say so).
impl ractor::Message for BoardMsg {}

pub struct BoardArgs {
    pub rank: RankId,
    pub type_key: Vec<u8>,
    pub shard: u32,
    pub rules: Rules,
    /// Where the loaded board goes: the shard lists it for readers once
    /// the actor has started (`active_boards.rs`).
    pub view: BoardView,
}

/// A board as readers outside its actor see it. The actor holds the write
/// lock for a whole batch, so a reader sees all of a batch or none of it;
/// and the shard's apply waits for the batch, so a write acknowledged to a
/// client is in the view before the acknowledgement leaves.
pub type BoardView = Arc<RwLock<Board>>;

/// A fresh view for a board about to be activated (empty until loaded).
pub fn new_view(rules: Rules) -> BoardView {
    Arc::new(RwLock::new(Board::new(rules)))
}

/// The board to read, or `None` if an apply panicked while writing it
/// (its state may be half a batch: ask the shard, which knows the actor
/// failed).
pub fn read_view(view: &RwLock<Board>) -> Option<RwLockReadGuard<'_, Board>> {
    view.read().ok()
}

// The actor's own access: only it writes, and a panic while writing stops
// it, so it never meets a poisoned lock it did not poison itself.
fn write_view(view: &RwLock<Board>) -> RwLockWriteGuard<'_, Board> {
    view.write().unwrap_or_else(|e| e.into_inner())
}

fn read_own(view: &RwLock<Board>) -> RwLockReadGuard<'_, Board> {
    view.read().unwrap_or_else(|e| e.into_inner())
}

/// Answers a query from the board's state.
pub fn answer(b: &Board, q: &BoardQuery) -> QueryOut {
    match q {
        BoardQuery::Top { offset, limit } => {
            QueryOut::Items(b.top(*offset as usize, *limit as usize).into_iter().map(row).collect())
        }
        BoardQuery::RankOf { item } => QueryOut::RankOf(b.rank_of(*item).map(row)),
        BoardQuery::Around { item, k } => {
            QueryOut::Items(b.around(*item, *k as usize).into_iter().map(row).collect())
        }
        BoardQuery::Scores { items } => {
            QueryOut::Scores(items.iter().map(|&i| (i, b.score(i))).collect())
        }
        BoardQuery::Size => QueryOut::Size(b.len() as u64),
    }
}

pub struct BoardActor {
    pub store: StateStore,
    /// The shard's gauges; this board keeps its share of the member and
    /// memory totals current.
    pub gauges: Arc<ShardGauges>,
    /// Where queries find this board; it unlists itself when it stops.
    pub index: Arc<crate::active_boards::ActiveBoards>,
}

pub struct BoardState {
    core: BoardView,
    events: EventMemory,
    /// How the remembered ids are stored.
    records: EventRecords,
    /// `(members, heap bytes)` last added to the shard's gauges.
    reported: (usize, usize),
    /// Which board this is, to unlist it when it stops.
    rank: RankId,
    type_key: Vec<u8>,
}

fn row(r: Ranked) -> RankedItem {
    RankedItem { rank: r.rank, item: r.item, score: r.score, sub: r.sub }
}

impl BoardActor {
    /// Moves the shard's gauges from this board's last report to `now`.
    fn report(&self, state: &mut BoardState, now: (usize, usize)) {
        let (old, g) = (state.reported, &self.gauges);
        g.board_members.fetch_add(now.0, Ordering::Relaxed);
        g.board_members.fetch_sub(old.0, Ordering::Relaxed);
        g.board_heap_bytes.fetch_add(now.1, Ordering::Relaxed);
        g.board_heap_bytes.fetch_sub(old.1, Ordering::Relaxed);
        state.reported = now;
    }
}

/// One member's events, in order: a repeated event id is a duplicate (and
/// changes nothing), an overflow fails that event alone.
fn apply_run(
    core: &mut Board,
    events: &mut EventMemory,
    c: &ScoreCmd,
    applied_ids: &mut Vec<u64>,
) -> Vec<EventResult> {
    let mut run = core.run(c.item);
    c.events
        .iter()
        .map(|e| {
            if events.contains(e.event_id) {
                return Ok((Outcome::Duplicate, run.score()));
            }
            let score =
                run.apply(e.score, e.sub).map_err(|e| WireError::bad_request(e.to_string()))?;
            events.insert(e.event_id);
            applied_ids.push(e.event_id);
            Ok((Outcome::Applied, score))
        })
        .collect()
}

impl BoardState {
    /// Applies a batch of commands in order, under one write lock.
    fn apply(&mut self, cmds: &[ScoreCmd]) -> ApplyReply {
        let mut core = write_view(&self.core);
        let mut results = Vec::with_capacity(cmds.len());
        let mut applied_ids = Vec::new();
        for c in cmds {
            if c.cap as usize != core.rules().cap {
                core.set_cap(c.cap as usize);
            }
            results.push(apply_run(&mut core, &mut self.events, c, &mut applied_ids));
        }
        let stored = self.records.add(applied_ids);
        let w = BoardWrites {
            members: core.take_dirty(),
            meta: BoardMeta {
                size: core.len() as u64,
                next_stamp: core.next_stamp(),
                next_events: self.records.next_seq(),
                cap: core.rules().cap as u64,
            },
            events: stored.put,
            drop_events: stored.drop,
        };
        (results, w)
    }

    /// What `apply` would answer for this one event, without applying it.
    fn check(&self, item: ItemId, e: &ScoreEvent) -> EventResult {
        let core = read_own(&self.core);
        if self.events.contains(e.event_id) {
            return Ok((Outcome::Duplicate, core.score(item)));
        }
        core.check(item, e.score).map_err(|e| WireError::bad_request(e.to_string()))?;
        Ok((Outcome::Applied, core.score(item)))
    }

    fn size(&self) -> (usize, usize) {
        let core = read_own(&self.core);
        (core.len(), core.heap_bytes())
    }
}

impl Actor for BoardActor {
    type Msg = BoardMsg;
    type State = BoardState;
    type Arguments = BoardArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<BoardMsg>,
        args: BoardArgs,
    ) -> Result<BoardState, ActorProcessingErr> {
        let meta =
            self.store.board_meta(args.rank, args.shard, &args.type_key)?.unwrap_or_default();
        let loaded = self.store.board_members(args.rank, args.shard, &args.type_key)?;
        let members =
            loaded.into_iter().map(|(i, score, tie)| (i, Member { score, tie })).collect();
        // The cap the board last applied events under, not the ranking's
        // current one: a lowered cap takes effect with the next event.
        let mut rules = args.rules;
        if meta.cap > 0 {
            rules.cap = meta.cap as usize;
        }
        *write_view(&args.view) = Board::from_loaded(rules, members, meta.next_stamp);
        let stored = self.store.board_events(args.rank, args.shard, &args.type_key)?;
        let records = EventRecords::from_loaded(&stored, meta.next_events, EVENT_MEMORY);
        let events =
            EventMemory::from_loaded(stored.into_iter().flat_map(|(_, ids)| ids), EVENT_MEMORY);
        let mut state = BoardState {
            core: args.view,
            events,
            records,
            reported: (0, 0),
            rank: args.rank,
            type_key: args.type_key,
        };
        let size = state.size();
        self.report(&mut state, size);
        Ok(state)
    }

    async fn post_stop(
        &self,
        myself: ActorRef<BoardMsg>,
        state: &mut BoardState,
    ) -> Result<(), ActorProcessingErr> {
        self.index.remove_actor(state.rank, &state.type_key, myself.get_id());
        self.report(state, (0, 0));
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<BoardMsg>,
        msg: BoardMsg,
        state: &mut BoardState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            BoardMsg::Apply { cmds, reply } => {
                let _ = reply.send(state.apply(&cmds));
                let size = state.size();
                self.report(state, size);
            }
            BoardMsg::Query(q, reply) => {
                let out = answer(&read_own(&state.core), &q);
                let _ = reply.send(Ok(out));
            }
            BoardMsg::Check { item, event, reply } => {
                let _ = reply.send(Ok(state.check(item, &event)));
            }
            BoardMsg::Passivate => myself.stop(None),
        }
        Ok(())
    }
}
