//! The order of one apply call: plan every command of every entry (in log
//! order), fan the planned work out to the owning actors, collect their
//! results (in order of first appearance, so that what is derived from them
//! is the same on every replica), then stage the batch's writes with the
//! applied log id and the shard's time floor.
//!
//! ```text
//! entries ─ plan ─> LikesPlan, BoardsPlan, registry results, inbox/acks
//!         ─ cast ─> actors work concurrently
//!         ─ collect ─> results[entry][cmd], WriteSet, OutboxDraft
//!         ─ drops, outbox records, applied id, floor ─> stage ─> checkpoint if due
//! ```

use super::delivery::OutboxDraft;
use super::likes::LikesPlan;
use super::rankings::BoardsPlan;
use super::{registry, ApplyEntry, ApplyResult, ShardActor, ShardState};
use crate::command::{CmdResult, Command};
use crate::error::Fatal;
use plaudit_proto::{Millis, ShardId};
use plaudit_storage::WriteSet;
use std::collections::HashMap;
use std::sync::atomic::Ordering;

/// Where a command's result goes: `(entry, command)`, or `None` for derived
/// work (deltas) whose result nobody waits for.
pub(super) type Slot = Option<(usize, usize)>;

/// Commands of one batch grouped by the actor that owns them, in order of
/// first appearance so that result processing is deterministic.
pub(super) struct Grouped<K, Op> {
    index: HashMap<K, usize>,
    pub groups: Vec<(K, Vec<Op>, Vec<Slot>)>,
}

impl<K: std::hash::Hash + Eq + Clone, Op> Grouped<K, Op> {
    pub fn new() -> Self {
        Grouped { index: HashMap::new(), groups: Vec::new() }
    }

    pub fn push(&mut self, k: K, op: Op, slot: Slot) {
        let i = *self.index.entry(k.clone()).or_insert_with(|| {
            self.groups.push((k, Vec::new(), Vec::new()));
            self.groups.len() - 1
        });
        self.groups[i].1.push(op);
        self.groups[i].2.push(slot);
    }
}

/// What one apply call produces as it goes.
pub(super) struct Applied {
    /// One result per command, per entry.
    pub results: Vec<Vec<CmdResult>>,
    pub ws: WriteSet,
    pub outbox: OutboxDraft,
    /// An entity's residence changed: publish the shard's moved entities
    /// once the batch is staged (`entity_moves.rs`).
    pub moved_entities: bool,
}

impl Applied {
    /// Records the result of the command at `slot` (derived work has none).
    pub fn set(&mut self, slot: Slot, r: CmdResult) {
        if let Some((ei, ci)) = slot {
            self.results[ei][ci] = r;
        }
    }
}

impl ShardActor {
    /// The time of the last applied entry: apply never goes below it.
    fn time_floor(&self, state: &mut ShardState) -> Result<Millis, Fatal> {
        if let Some(f) = state.floor {
            return Ok(f);
        }
        let f = self.store.time_floor(self.cfg.shard)?;
        state.floor = Some(f);
        Ok(f)
    }

    /// Applies committed entries. The stored result must not depend on how
    /// entries are grouped into calls (openraft groups them one way while
    /// serving and another when replaying after a crash, and replicas group
    /// them differently): every write below is ordered as if the entries
    /// were applied one at a time. An entry that drops or moves a board is
    /// applied in a call of its own, since its drops run after its other
    /// commands and a move changes which boards take events (and which
    /// entities take deltas).
    pub(super) async fn apply(
        &self,
        state: &mut ShardState,
        entries: Vec<ApplyEntry>,
    ) -> ApplyResult {
        let drops = |e: &ApplyEntry| {
            e.batch.as_ref().is_some_and(|b| {
                b.cmds.iter().any(|c| {
                    matches!(
                        c,
                        Command::DropBoard { .. }
                            | Command::MoveBoard(_)
                            | Command::MoveBoardV2(_)
                            | Command::MoveEntity(_)
                    )
                })
            })
        };
        if !entries.iter().any(drops) {
            return self.apply_run(state, entries).await;
        }
        let mut results = Vec::with_capacity(entries.len());
        let mut run = Vec::new();
        for e in entries {
            if drops(&e) {
                if !run.is_empty() {
                    results.extend(self.apply_run(state, std::mem::take(&mut run)).await?);
                }
                results.extend(self.apply_run(state, vec![e]).await?);
            } else {
                run.push(e);
            }
        }
        if !run.is_empty() {
            results.extend(self.apply_run(state, run).await?);
        }
        Ok(results)
    }

    async fn apply_run(&self, state: &mut ShardState, entries: Vec<ApplyEntry>) -> ApplyResult {
        let shard = self.cfg.shard;
        let mut out = Applied {
            results: Vec::with_capacity(entries.len()),
            ws: WriteSet::new(shard),
            outbox: OutboxDraft::default(),
            moved_entities: false,
        };
        let mut likes = LikesPlan::new();
        let mut boards = BoardsPlan::new();
        let mut floor = self.time_floor(state)?;
        let mut once = super::once::OnceMemo::default();
        // Acknowledgements delete outbox records of earlier entries; they
        // are written after this call's new records, as one-at-a-time
        // application would order them (a record and its Ack may both be in
        // this call when a replay groups many entries).
        let mut acks: Vec<(ShardId, &[u64])> = Vec::new();

        for (ei, entry) in entries.iter().enumerate() {
            if let Some(m) = &entry.membership {
                out.ws.put_membership(shard, m);
            }
            let Some(batch) = &entry.batch else {
                out.results.push(Vec::new());
                continue;
            };
            // Time never goes backwards within a shard, whichever leader
            // stamped the entry, so list order (by mtime) follows log order.
            let now = batch.now.max(floor);
            floor = now;
            let mut results = Vec::with_capacity(batch.cmds.len());
            // Delivered deltas of this entry, numbered in command order.
            let mut delivered = 0;
            for (ci, cmd) in batch.cmds.iter().enumerate() {
                let slot = Some((ei, ci));
                let r = match cmd {
                    Command::Like(r) => {
                        likes.like(r, now, slot);
                        CmdResult::Done
                    }
                    Command::Deliver { source, records } => {
                        let seen = self.inbox_seq(state, *source)?;
                        let res = self.entity_residences(state)?;
                        let applied = likes.deliver(seen, records, ei, &mut delivered, |b, e| {
                            res.route_delta(b, e)
                        });
                        // At once: a move step later in this entry must
                        // find them (`entity_moves.rs`).
                        self.hold_deltas(state, &mut out.ws, std::mem::take(&mut likes.held))?;
                        let barriers = std::mem::take(&mut likes.barriers);
                        self.drain_barriers(state, &mut out, barriers)?;
                        for (e, k, to, d) in likes.forwarded.drain(..) {
                            out.outbox.forwarded(e, k, to, d);
                        }
                        if applied > seen {
                            state.inbox.insert(*source, applied);
                            out.ws.put_inbox_seq(shard, *source, applied);
                        }
                        CmdResult::Done
                    }
                    Command::Ack { target, seqs } => {
                        acks.push((*target, seqs));
                        CmdResult::Done
                    }
                    Command::Score(c) | Command::ScoreV2(c) => {
                        boards.score(c, now, slot);
                        CmdResult::Done
                    }
                    Command::DropBoard { rank, type_key } => {
                        boards.drop_board(*rank, type_key);
                        CmdResult::Done
                    }
                    // Written before moves had ids: move 0.
                    Command::MoveBoard(m) => {
                        self.apply_move(state, 0, m, &mut boards, &mut out.ws)?
                    }
                    Command::MoveBoardV2(s) => {
                        self.apply_move(state, s.mv, &s.cmd, &mut boards, &mut out.ws)?
                    }
                    Command::MoveEntity(m) => self.apply_entity_move(
                        state,
                        m,
                        &mut likes,
                        &mut out,
                        (ei, &mut delivered),
                    )?,
                    Command::CreateBiz(_)
                    | Command::CreateBizV2(_)
                    | Command::UpdateBiz(_)
                    | Command::CreateRank(_)
                    | Command::CreateRankInfo(_)
                    | Command::UpdateRank(_)
                    | Command::SetCluster(_)
                    | Command::SetClusterState(_)
                    | Command::CreateToken(_)
                    | Command::RevokeToken { .. }
                    | Command::SetBoardLimit(_)
                    | Command::SetPlacements(_)
                    | Command::SetPlacementsV2(_)
                    | Command::SetEntityPlacements(_)
                    | Command::ReserveBoards { .. } => {
                        registry::apply(&self.directory, self.cfg.is_meta, cmd, now, &mut out.ws)
                    }
                    Command::Once { id, cmd } if self.cfg.is_meta => {
                        self.apply_once(&mut once, *id, cmd, now, &mut out.ws)?
                    }
                    Command::Once { .. } => CmdResult::Failed(plaudit_proto::WireError::internal(
                        "registry command sent to a data shard",
                    )),
                };
                results.push(r);
            }
            out.results.push(results);
        }

        // Cast every likes group first so those actors work while the boards
        // apply here, then collect in order of first appearance.
        let likes = self.cast_likes(state, likes)?;
        let (boards, drops) = self.apply_boards(state, boards)?;
        likes.collect(&mut out, self.cfg.shard_count).await?;
        boards.collect(&mut out);
        // Deletions go last, after any write of this batch (a board is only
        // dropped once its window expired, and the edge refuses new events
        // for it, so the two meet only in a race that the next sweep cleans).
        self.drop_boards(state, &mut out.ws, drops)?;

        let Applied { results, mut ws, outbox, moved_entities } = out;
        let targets = self.push_outbox(state, &mut ws, outbox)?;
        for (target, seqs) in acks {
            ws.ack_outbox(shard, target, seqs.iter().copied());
        }
        if let Some(last) = entries.last() {
            ws.put_applied(shard, &last.log_id);
        }
        if state.floor != Some(floor) {
            ws.put_time_floor(shard, floor);
            state.floor = Some(floor);
        }
        self.store.stage(ws);
        if moved_entities {
            // Only now: a read the view lets in must find an import staged.
            self.publish_moved_entities(state);
        }
        // The metadata group checkpoints like any shard: nothing another
        // group applies reads the registry any more (rules travel in the
        // commands), and after a restart its log replays what the registry
        // view lacks.
        self.checkpoint_if_due(state).await?;
        // After staging: the worker reads what it is told about.
        self.signal_outbox(targets);
        self.evict_over_budget(state)?;
        self.gauges.applied_batches.fetch_add(entries.len(), Ordering::Relaxed);
        self.publish(state);
        Ok(results)
    }
}
