//! Applying the rankings family on a board's shard: `Score` (one member's
//! events on one sub-board) and `DropBoard` (a sub-board whose window
//! expired).
//!
//! ```text
//! Score ─────> BoardHost (rank, type_key): dedup, aggregate, re-rank ─> dirty members,
//!                                            header, event-id records ─> WriteSet
//! DropBoard ─> let the board go, delete its stored keys
//! ```
//!
//! Everything apply needs travels in the command (aggregation, ties, cap)
//! or sits in the board's own stored header: apply reads nothing that the
//! metadata group owns, so a replica whose registry lags (or a replay that
//! runs before the registry's) reaches the same state.

use super::apply::{Applied, Grouped, Slot};
use super::{BoardKey, ShardActor, ShardState};
use crate::board_host::ApplyReply;
use crate::command::{CmdResult, ScoreCmd};
use crate::error::Fatal;
use crate::rankings::board::Rules;
use plaudit_proto::rankings::RankId;
use plaudit_storage::WriteSet;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The rankings work of one apply call: score commands grouped per board,
/// and the boards to drop.
pub(super) struct BoardsPlan {
    boards: Grouped<BoardKey, ScoreCmd>,
    drops: Vec<BoardKey>,
}

impl BoardsPlan {
    pub fn new() -> Self {
        BoardsPlan { boards: Grouped::new(), drops: Vec::new() }
    }

    pub fn score(&mut self, c: &ScoreCmd, slot: Slot) {
        self.boards.push((c.rank, c.type_key.clone()), c.clone(), slot);
    }

    pub fn drop_board(&mut self, rank: RankId, type_key: &[u8]) {
        self.drops.push((rank, type_key.to_vec()));
    }
}

/// What each board made of its score commands, to be stored in order.
pub(super) struct BoardsApplied {
    done: Vec<(BoardKey, Vec<Slot>, ApplyReply)>,
}

/// The rules a board applies a command under, as the command carries them.
fn rules_of(c: &ScoreCmd) -> Rules {
    Rules { aggregation: c.aggregation, ties: c.ties, cap: c.cap as usize }
}

impl ShardActor {
    /// Runs each board's commands on it (loaded with the rules of its
    /// first command if it is not held); returns the boards to drop after
    /// storing. A board whose apply panics fails the batch like a broken
    /// store would (the caller resets the shard, which drops every board,
    /// so the half-applied one is loaded again from storage).
    pub(super) fn apply_boards(
        &self,
        state: &mut ShardState,
        plan: BoardsPlan,
    ) -> Result<(BoardsApplied, Vec<BoardKey>), Fatal> {
        let mut done = Vec::with_capacity(plan.boards.groups.len());
        for (key, cmds, slots) in plan.boards.groups {
            let Some(first) = cmds.first() else { continue };
            let rules = rules_of(first);
            let host = self.board(state, key.0, key.1.clone(), rules)?;
            let reply = catch_unwind(AssertUnwindSafe(|| host.apply(&cmds)))
                .map_err(|_| lost(key.0, "its apply panicked"))?;
            host.report(&self.gauges, false);
            done.push((key, slots, reply));
        }
        Ok((BoardsApplied { done }, plan.drops))
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
                self.unload_boards(vec![host]);
            }
            for (item, _, _) in self.store.board_members(rank, shard, &type_key)? {
                ws.del_board_member(rank, shard, &type_key, item);
            }
            for (seq, _) in self.store.board_events(rank, shard, &type_key)? {
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
    /// Each event's outcome, and each board's dirty members, header and
    /// event-id records as writes.
    pub fn collect(self, out: &mut Applied) {
        let shard = out.ws.owner();
        for ((rank, type_key), slots, (outs, w)) in self.done {
            for (slot, o) in slots.into_iter().zip(outs) {
                out.set(slot, CmdResult::Scored(o));
            }
            let ws = &mut out.ws;
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
    }
}
