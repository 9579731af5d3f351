//! Applying the rankings family on a board's shard: `Score` (one member's
//! events on one sub-board) and `DropBoard` (a sub-board whose window
//! expired).
//!
//! ```text
//! Score ─────> BoardHost (rank, type_key): dedup, aggregate, re-rank (held in memory;
//!              a new board's image ─> WriteSet, the rest when the board is let go)
//! DropBoard ─> let the board go, delete its stored keys
//! ```
//!
//! Everything apply needs travels in the command (aggregation, ties, cap)
//! or sits in the board's own stored header: apply reads nothing that the
//! metadata group owns, so a replica whose registry lags (or a replay that
//! runs before the registry's) reaches the same state.

use super::apply::{Applied, Grouped, Slot};
use super::{BoardKey, ShardActor, ShardState};
use crate::board_host::{ApplyReply, BoardHost};
use crate::command::{CmdResult, ScoreCmd};
use crate::error::Fatal;
use crate::rankings::board::Rules;
use plaudit_proto::rankings::RankId;
use plaudit_proto::Millis;
use plaudit_storage::{BoardImage, WriteSet};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The rankings work of one apply call: score commands grouped per board
/// (borrowed from the entries: a copy of each command and its board's key
/// was 7% of cold scoring), and the boards to drop.
pub(super) struct BoardsPlan<'a> {
    /// Each command with the time of its entry (the board's event memory
    /// forgets by it).
    boards: Grouped<(RankId, &'a [u8]), (&'a ScoreCmd, Millis)>,
    drops: Vec<BoardKey>,
}

impl<'a> BoardsPlan<'a> {
    pub fn new() -> Self {
        BoardsPlan { boards: Grouped::new(), drops: Vec::new() }
    }

    pub fn score(&mut self, c: &'a ScoreCmd, now: Millis, slot: Slot) {
        self.boards.push((c.rank, &c.type_key), (c, now), slot);
    }

    pub fn drop_board(&mut self, rank: RankId, type_key: &[u8]) {
        self.drops.push((rank, type_key.to_vec()));
    }
}

/// What each board made of its score commands, and the images of boards
/// new to the tree, to be stored in order.
pub(super) struct BoardsApplied {
    done: Vec<(Vec<Slot>, ApplyReply)>,
    new: Vec<BoardImage>,
}

/// The rules a board applies a command under, as the command carries them.
fn rules_of(c: &ScoreCmd) -> Rules {
    Rules { aggregation: c.aggregation, ties: c.ties, cap: c.cap as usize }
}

impl ShardActor {
    /// Runs each board's commands on it (loaded with the rules of its
    /// first command if it is not held); returns the boards to drop after
    /// storing. A board whose apply panics fails the batch like a broken
    /// store would (the caller drops every board and marks the shard
    /// broken: held boards may hold changes no tree has).
    pub(super) fn apply_boards(
        &self,
        state: &mut ShardState,
        plan: BoardsPlan<'_>,
    ) -> Result<(BoardsApplied, Vec<BoardKey>), Fatal> {
        let mut done = Vec::with_capacity(plan.boards.groups.len());
        let mut new = Vec::new();
        for (key, cmds, slots) in plan.boards.groups {
            let Some((first, _)) = cmds.first() else { continue };
            // A board moved away, or on its way, takes no event here: each
            // is answered with the shard to ask (`moves.rs`).
            if let Err(e) = self.board_writable(state, key.0, key.1)? {
                let refused = cmds.iter().map(|(c, _)| vec![Err(e.clone()); c.events.len()]);
                done.push((slots, refused.collect()));
                continue;
            }
            let rules = rules_of(first);
            let host = self.board(state, key.0, key.1.to_vec(), rules)?;
            let reply = catch_unwind(AssertUnwindSafe(|| host.apply(&cmds)))
                .map_err(|_| lost(key.0, "its apply panicked"))?;
            host.report(&self.gauges, false);
            if !host.stored() {
                new.push(host.take_image());
            }
            done.push((slots, reply));
        }
        Ok((BoardsApplied { done, new }, plan.drops))
    }

    /// Stages `host`'s image in place of the rows the tree holds for it.
    pub(super) fn write_back(&self, ws: &mut WriteSet, host: &mut BoardHost) -> Result<(), Fatal> {
        let was_stored = host.stored();
        let image = host.take_image();
        let (rank, shard, tk) = (image.rank, self.cfg.shard, &image.type_key);
        if !was_stored {
            ws.write_back_board(&image, [], []);
            return Ok(());
        }
        let kept = |i: &u64| image.members.binary_search_by_key(i, |m| m.0).is_ok();
        let stale_items: Vec<u64> = self
            .store
            .board_members(rank, shard, tk)?
            .into_iter()
            .map(|m| m.0)
            .filter(|i| !kept(i))
            .collect();
        let records = image.records();
        let stale_seqs: Vec<u64> = self
            .store
            .board_events(rank, shard, tk)?
            .into_iter()
            .map(|e| e.0)
            .filter(|&seq| seq == 0 || seq > records)
            .collect();
        ws.write_back_board(&image, stale_items, stale_seqs);
        Ok(())
    }

    /// Stops the boards' actors and deletes every stored key of each.
    pub(super) fn drop_boards(
        &self,
        state: &mut ShardState,
        ws: &mut WriteSet,
        drops: Vec<BoardKey>,
    ) -> Result<(), Fatal> {
        let shard = self.cfg.shard;
        for (rank, type_key) in drops {
            // Unlisted before anything is deleted: a query after this drop
            // applies must not find the old board.
            self.boards.remove(rank, &type_key);
            if let Some(host) = state.boards.remove(&(rank, type_key.clone())) {
                self.discard_boards(vec![host]);
            }
            for (item, _, _) in self.store.board_members(rank, shard, &type_key)? {
                ws.del_board_member(rank, shard, &type_key, item);
            }
            for (seq, _, _) in self.store.board_events(rank, shard, &type_key)? {
                ws.del_board_events(rank, shard, &type_key, seq);
            }
            // And what this call wrote for the board before the drop.
            ws.del_board_written(rank, shard, &type_key);
            ws.del_board_meta(rank, shard, &type_key);
        }
        Ok(())
    }
}

fn lost(rank: RankId, e: impl std::fmt::Display) -> Fatal {
    Fatal::Actor(format!("a board of ranking {rank} failed while applying: {e}"))
}

impl BoardsApplied {
    /// Each event's outcome, and the new boards' images as writes.
    pub fn collect(self, out: &mut Applied) {
        for (slots, outs) in self.done {
            for (slot, o) in slots.into_iter().zip(outs) {
                out.set(slot, CmdResult::Scored(o));
            }
        }
        for image in &self.new {
            out.ws.write_back_board(image, [], []);
        }
    }
}
