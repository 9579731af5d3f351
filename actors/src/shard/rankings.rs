//! Applying the rankings family on a board's shard: `Score` (one member's
//! events on one sub-board) and `DropBoard` (a sub-board whose window
//! expired).
//!
//! ```text
//! Score ─────> BoardActor (rank, type_key): dedup, aggregate, re-rank ─> dirty members,
//!                                             header, event-id records ─> WriteSet
//! DropBoard ─> stop the board's actor, delete its stored keys
//! ```
//!
//! Everything apply needs travels in the command (aggregation, ties, cap)
//! or sits in the board's own stored header: apply reads nothing that the
//! metadata group owns, so a replica whose registry lags (or a replay that
//! runs before the registry's) reaches the same state.

use super::apply::{Applied, Grouped, Slot};
use super::{BoardKey, ShardActor, ShardMsg, ShardState};
use crate::board_actor::{ApplyReply, BoardMsg};
use crate::command::{CmdResult, ScoreCmd};
use crate::error::Fatal;
use crate::rankings::board::Rules;
use plaudit_proto::rankings::RankId;
use plaudit_storage::WriteSet;
use ractor::ActorRef;
use tokio::sync::oneshot;

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

/// Score commands handed to board actors, waiting to be collected.
pub(super) struct BoardsInFlight {
    waits: Vec<(BoardKey, Vec<Slot>, oneshot::Receiver<ApplyReply>)>,
}

/// The rules a board applies a command under, as the command carries them.
fn rules_of(c: &ScoreCmd) -> Rules {
    Rules { aggregation: c.aggregation, ties: c.ties, cap: c.cap as usize }
}

impl ShardActor {
    /// Casts each board's commands to its actor (activated with the rules
    /// of its first command); returns the boards to drop after collecting.
    pub(super) async fn cast_boards(
        &self,
        myself: &ActorRef<ShardMsg>,
        state: &mut ShardState,
        plan: BoardsPlan,
    ) -> Result<(BoardsInFlight, Vec<BoardKey>), Fatal> {
        let mut waits = Vec::with_capacity(plan.boards.groups.len());
        for (key, cmds, slots) in plan.boards.groups {
            let Some(first) = cmds.first() else { continue };
            let rules = rules_of(first);
            let actor = self.board(myself, state, key.0, key.1.clone(), rules).await?;
            let (tx, rx) = oneshot::channel();
            actor.cast(BoardMsg::Apply { cmds, reply: tx.into() }).map_err(|e| lost(key.0, e))?;
            waits.push((key, slots, rx));
        }
        Ok((BoardsInFlight { waits }, plan.drops))
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
            // Unlisted first: a query after this drop applies must not
            // reach the old actor.
            self.boards.remove(rank, &type_key);
            if let Some(a) = state.boards.remove(&(rank, type_key.clone())) {
                a.stop(None);
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
    Fatal::Actor(format!("a board of ranking {rank} stopped while applying: {e}"))
}

impl BoardsInFlight {
    /// Each event's outcome, and each board's dirty members, header and
    /// event-id records as writes.
    pub async fn collect(self, out: &mut Applied) -> Result<(), Fatal> {
        let shard = out.ws.owner();
        for ((rank, type_key), slots, rx) in self.waits {
            let (outs, w) = rx.await.map_err(|e| lost(rank, e))?;
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
        Ok(())
    }
}
