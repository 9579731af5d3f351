//! One active sub-board, held by its shard: a `Board` and its
//! `EventMemory`, loaded from the ranking's tree on activation; the shard's
//! apply runs a batch's scoring events on it in log order.
//!
//! While held, the host is the board's truth and its tree rows may be
//! stale: nothing is staged per batch. The shard writes the board's whole
//! image back when it lets the board go, and a snapshot takes the image of
//! every changed held board (`plaudit_storage::board_image`). Staging each
//! changed member, the header and the open event-id record with every
//! batch, and checkpointing them into a tree of millions of keys, was a
//! fifth of cold scoring's CPU (docs/benchmarks.md). A new board is written
//! with its first batch, so listings and the retention sweep find it.
//!
//! Why not an actor of its own (it was one): apply already runs on the
//! shard's task and waits for every board of the batch, and queries read
//! the board's view without any mailbox. A message, a task wake-up and a
//! reply channel per board per batch bought nothing; with 10,000 cold
//! boards they were a fifth of a scoring event's CPU (docs/benchmarks.md).
//! Passivating a board is writing its image back and dropping it.

use crate::command::{EventResult, ScoreCmd, ScoreEvent};
use crate::rankings::board::{Board, Member, Ranked, Rules};
use crate::rankings::dedup::EventMemory;
use crate::shard::ShardGauges;
use plaudit_proto::rankings::{ItemId, RankId};
use plaudit_proto::scoring::{BoardQuery, Outcome, RankedItem};
use plaudit_proto::Millis;
use plaudit_proto::WireError;
use plaudit_storage::{BoardImage, BoardMeta, StateError, StateStore};
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Per command, per event.
pub type ApplyReply = Vec<Vec<EventResult>>;

/// The answer to a query on one board.
#[derive(Debug, Clone)]
pub enum QueryOut {
    Items(Vec<RankedItem>),
    RankOf(Option<RankedItem>),
    Scores(Vec<(ItemId, Option<i64>)>),
    Size(u64),
}

/// A board as readers outside its shard see it. Apply holds the write lock
/// for a whole batch, so a reader sees all of a batch or none of it; and
/// the Raft apply completes only after, so a write acknowledged to a client
/// is in the view before the acknowledgement leaves.
pub type BoardView = Arc<RwLock<Board>>;

/// A fresh view for a board about to be activated (empty until loaded).
pub fn new_view(rules: Rules) -> BoardView {
    Arc::new(RwLock::new(Board::new(rules)))
}

/// The board to read, or `None` if an apply panicked while writing it
/// (its state may be half a batch: ask the shard, which dropped it and
/// loads it again from storage).
pub fn read_view(view: &RwLock<Board>) -> Option<RwLockReadGuard<'_, Board>> {
    view.read().ok()
}

// The host's own access: only it writes, and a panic while writing makes
// the shard drop the host, so it never meets a poisoned lock it did not
// poison itself.
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

/// Which board to load, and the rules of the ranking as the edge knows them.
pub struct BoardArgs {
    pub rank: RankId,
    pub type_key: Vec<u8>,
    pub shard: u32,
    pub rules: Rules,
}

pub struct BoardHost {
    core: BoardView,
    events: EventMemory,
    /// Whether anything changed since the board was loaded or last written
    /// back (its tree rows are stale).
    changed: bool,
    /// Whether the tree holds the board at all (its header).
    stored: bool,
    /// `(members, heap bytes)` last added to the shard's gauges.
    reported: (usize, usize),
    /// Tells hosts apart in the shard's active set (a board dropped and
    /// loaded again is another host).
    serial: u64,
    /// Which board this is, to unlist it when the shard lets it go.
    pub rank: RankId,
    pub type_key: Vec<u8>,
}

fn row(r: Ranked) -> RankedItem {
    RankedItem { rank: r.rank, item: r.item, score: r.score, sub: r.sub }
}

/// One member's events, in order: a repeated event id is a duplicate (and
/// changes nothing), an overflow fails that event alone.
fn apply_run(core: &mut Board, events: &mut EventMemory, c: &ScoreCmd) -> Vec<EventResult> {
    let mut run = core.run(c.item);
    c.events
        .iter()
        .map(|e| {
            let applied = events.apply_new(e.event_id, || run.apply(e.score, e.sub));
            match applied {
                None => Ok((Outcome::Duplicate, run.score())),
                Some(Ok(score)) => Ok((Outcome::Applied, score)),
                Some(Err(err)) => Err(WireError::bad_request(err.to_string())),
            }
        })
        .collect()
}

impl BoardHost {
    /// Loads the board from the ranking's tree (an empty board if nothing
    /// is stored), with the cap it last applied events under rather than the
    /// ranking's current one: a lowered cap takes effect with the next event.
    pub fn load(store: &StateStore, args: BoardArgs, serial: u64) -> Result<BoardHost, StateError> {
        let BoardArgs { rank, type_key, shard, mut rules } = args;
        let meta = store.board_meta(rank, shard, &type_key)?;
        let exists = meta.is_some();
        let meta = meta.unwrap_or_default();
        let loaded = store.board_members(rank, shard, &type_key)?;
        let members =
            loaded.into_iter().map(|(i, score, tie)| (i, Member { score, tie })).collect();
        if meta.cap > 0 {
            rules.cap = meta.cap as usize;
        }
        let board = Board::from_loaded(rules, members, meta.next_stamp);
        let stored = store.board_events(rank, shard, &type_key)?;
        let events = EventMemory::from_loaded(stored.into_iter().map(|(_, s, ids)| (s, ids)));
        Ok(BoardHost {
            core: Arc::new(RwLock::new(board)),
            events,
            changed: false,
            stored: exists,
            reported: (0, 0),
            serial,
            rank,
            type_key,
        })
    }

    /// The view queries read.
    pub fn view(&self) -> BoardView {
        self.core.clone()
    }

    /// Moves the shard's gauges from this board's last report to its size
    /// now, or to nothing when `gone` (the board is being dropped).
    pub fn report(&mut self, g: &ShardGauges, gone: bool) {
        let now = if gone { (0, 0) } else { self.size() };
        let old = self.reported;
        g.board_members.fetch_add(now.0, Ordering::Relaxed);
        g.board_members.fetch_sub(old.0, Ordering::Relaxed);
        g.board_heap_bytes.fetch_add(now.1, Ordering::Relaxed);
        g.board_heap_bytes.fetch_sub(old.1, Ordering::Relaxed);
        self.reported = now;
    }

    /// Answers a query from the board's state.
    pub fn answer(&self, q: &BoardQuery) -> QueryOut {
        answer(&read_own(&self.core), q)
    }

    /// Applies a batch of commands in order, each at the time of the
    /// entry that carries it, under one write lock. Marks the board changed
    /// even if every event was a duplicate: cheaper than finding out, and a
    /// write-back of an unchanged board is harmless.
    pub fn apply(&mut self, cmds: &[(&ScoreCmd, Millis)]) -> ApplyReply {
        let mut core = write_view(&self.core);
        self.changed = true;
        if let Some((first, _)) = cmds.first() {
            let ids = cmds.iter().flat_map(|(c, _)| c.events.iter().map(|e| e.event_id));
            self.events.prefetch(ids, first.dedup.max_ids);
        }
        cmds.iter()
            .map(|&(c, now)| {
                if c.cap as usize != core.rules().cap {
                    core.set_cap(c.cap as usize);
                }
                self.events.begin(now, c.dedup);
                apply_run(&mut core, &mut self.events, c)
            })
            .collect()
    }

    /// Whether the tree's rows of the board are stale.
    pub fn changed(&self) -> bool {
        self.changed
    }

    /// Whether the tree holds the board at all.
    pub fn stored(&self) -> bool {
        self.stored
    }

    /// The board's state as its stored rows (`BoardImage`).
    pub fn image(&self) -> BoardImage {
        let core = read_own(&self.core);
        let members = core.members().into_iter().map(|(i, m)| (i, m.score, m.tie)).collect();
        let meta = BoardMeta {
            size: 0, // set by `BoardImage::new`
            next_stamp: core.next_stamp(),
            next_events: 0,
            cap: core.rules().cap as u64,
        };
        BoardImage::new(self.rank, self.type_key.clone(), members, meta, self.events.runs())
    }

    /// The image to write back, marking the rows up to date: the caller
    /// stages it before anything reads the tree for this board again.
    pub fn take_image(&mut self) -> BoardImage {
        self.changed = false;
        self.stored = true;
        self.image()
    }

    /// What `apply` would answer for this one event, without applying it.
    pub fn check(&self, item: ItemId, e: &ScoreEvent) -> EventResult {
        let core = read_own(&self.core);
        if self.events.contains(e.event_id) {
            return Ok((Outcome::Duplicate, core.score(item)));
        }
        core.check(item, e.score).map_err(|e| WireError::bad_request(e.to_string()))?;
        Ok((Outcome::Applied, core.score(item)))
    }

    fn size(&self) -> (usize, usize) {
        let core = read_own(&self.core);
        (core.len(), core.heap_bytes() + self.events.heap_bytes())
    }
}

impl crate::active::Identified for BoardHost {
    type Id = u64;
    fn id(&self) -> u64 {
        self.serial
    }
}
