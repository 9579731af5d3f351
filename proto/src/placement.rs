//! Where moved sub-boards live, and the moves under way: what the metadata
//! group records (`Command::SetPlacements`) so that every node routes a
//! moved board to its new shard, and a new metadata leader resumes a move
//! from the step it reached.
//!
//! A board lives on `routing::board_shard` unless `placed` names another
//! shard. A move goes through these steps, each recorded before the next
//! begins (the shards' side of each step is `actors/src/rankings/residence.rs`):
//!
//! ```text
//! Freeze    the source refuses new events for the board (its state is final)
//! Copy      the target takes the frozen image, serving reads, refusing events
//! Release   (recorded together with the new placement) the source drops the board
//! Activate  the target takes events again; then the move is gone
//! ```

use crate::ids::ShardId;
use crate::rankings::RankId;
use crate::routing::board_shard;
use crate::WireError;
use serde::{Deserialize, Serialize};

/// Moves under way at once, at most: each holds a board's events back for
/// a moment, and the mover runs them one at a time anyway.
pub const MAX_MOVES: usize = 16;

/// `plaudit admin move --board RANK:TYPE_ID --to-shard S`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveBoard {
    pub rank: RankId,
    /// The sub-board's type id, as queries name it.
    pub board: String,
    pub to_shard: ShardId,
}

impl MoveBoard {
    pub fn validate(&self) -> Result<(), WireError> {
        // As a query's `BoardRef::TypeId` is bounded.
        if self.board.len() > 256 {
            return Err(WireError::bad_request("the board's type id is too long"));
        }
        Ok(())
    }
}

/// A sub-board: its ranking and binary type id (`TypeId::to_key`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BoardKey {
    pub rank: RankId,
    pub type_key: Vec<u8>,
}

/// The step a move takes next. Variants are only appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MoveStep {
    Freeze,
    Copy,
    Release,
    Activate,
    /// Given up before the board was placed on its target (its copy could
    /// not be made): the target drops what it may hold, the source takes
    /// events again, then the move is gone.
    Abort,
}

impl MoveStep {
    pub fn as_str(self) -> &'static str {
        match self {
            MoveStep::Freeze => "freeze",
            MoveStep::Copy => "copy",
            MoveStep::Release => "release",
            MoveStep::Activate => "activate",
            MoveStep::Abort => "abort",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoardMove {
    pub board: BoardKey,
    pub from: ShardId,
    pub to: ShardId,
    pub step: MoveStep,
    /// When the move was recorded (the proposer's clock, ms since the epoch),
    /// for status only.
    pub started_ms: u64,
}

/// Moved boards and moves under way, under an epoch that rises with every
/// change (a change proposed twice, or from an older view, is refused).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Placements {
    pub epoch: u64,
    /// Boards that live elsewhere than their hash shard, sorted by board.
    pub placed: Vec<(BoardKey, ShardId)>,
    pub moves: Vec<BoardMove>,
}

impl Placements {
    /// The shard a board lives on (its hash shard unless it was moved).
    pub fn shard_of(&self, rank: RankId, type_key: &[u8], shards: u32) -> ShardId {
        self.placed
            .binary_search_by(|(b, _)| (b.rank, b.type_key.as_slice()).cmp(&(rank, type_key)))
            .map_or_else(|_| board_shard(rank, type_key, shards), |i| self.placed[i].1)
    }

    pub fn move_of(&self, board: &BoardKey) -> Option<&BoardMove> {
        self.moves.iter().find(|m| &m.board == board)
    }

    /// The placements with a move of `board` to shard `to` recorded, or why
    /// not: a move of it is under way, `to` is where it lives, is not a
    /// shard, or too many moves are under way.
    pub fn start(
        &self,
        board: BoardKey,
        to: ShardId,
        shards: u32,
        now_ms: u64,
    ) -> Result<Placements, WireError> {
        if to >= shards {
            return Err(WireError::bad_request(format!(
                "shard {to} does not exist (the cluster has {shards})"
            )));
        }
        if self.move_of(&board).is_some() {
            return Err(WireError::refused("a move of this board is under way"));
        }
        if self.moves.len() >= MAX_MOVES {
            return Err(WireError::refused(format!("{MAX_MOVES} moves are under way already")));
        }
        let from = self.shard_of(board.rank, &board.type_key, shards);
        if from == to {
            return Err(WireError::bad_request(format!("the board is on shard {to} already")));
        }
        let mut next = self.clone();
        next.epoch += 1;
        next.moves.push(BoardMove { board, from, to, step: MoveStep::Freeze, started_ms: now_ms });
        Ok(next)
    }

    /// The placements once `board`'s move has done step `done`: its next
    /// step recorded (with the board placed on its target when the next is
    /// `Release`), or the move gone after `Activate`. `None` if the move is
    /// not there or is at another step (a repeat: nothing to record).
    pub fn advance(&self, board: &BoardKey, done: MoveStep, shards: u32) -> Option<Placements> {
        let i = self.moves.iter().position(|m| &m.board == board && m.step == done)?;
        let mut next = self.clone();
        next.epoch += 1;
        match done {
            MoveStep::Freeze => next.moves[i].step = MoveStep::Copy,
            MoveStep::Copy => {
                next.moves[i].step = MoveStep::Release;
                let to = next.moves[i].to;
                next.place(board, to, shards);
            }
            MoveStep::Release => next.moves[i].step = MoveStep::Activate,
            MoveStep::Activate | MoveStep::Abort => {
                next.moves.remove(i);
            }
        }
        Some(next)
    }

    /// The placements with `board`'s move given up, if it may still be:
    /// before its `Release` step is recorded (the board is not placed on
    /// its target yet). `None` otherwise, or if there is no such move.
    pub fn abort(&self, board: &BoardKey) -> Option<Placements> {
        let i = self.moves.iter().position(|m| &m.board == board)?;
        if !matches!(self.moves[i].step, MoveStep::Freeze | MoveStep::Copy) {
            return None;
        }
        let mut next = self.clone();
        next.epoch += 1;
        next.moves[i].step = MoveStep::Abort;
        Some(next)
    }

    /// Records `board` on shard `to`: no entry where that is its hash shard.
    fn place(&mut self, board: &BoardKey, to: ShardId, shards: u32) {
        let at = self.placed.binary_search_by(|(b, _)| b.cmp(board));
        let home = board_shard(board.rank, &board.type_key, shards) == to;
        match (at, home) {
            (Ok(i), true) => {
                self.placed.remove(i);
            }
            (Ok(i), false) => self.placed[i].1 = to,
            (Err(_), true) => {}
            (Err(i), false) => self.placed.insert(i, (board.clone(), to)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorCode;

    fn key(n: u8) -> BoardKey {
        BoardKey { rank: 1, type_key: vec![n; 5] }
    }

    /// Runs a move through every step.
    fn moved(p: &Placements, b: &BoardKey, to: ShardId, shards: u32) -> Placements {
        let mut p = p.start(b.clone(), to, shards, 1).unwrap();
        for step in [MoveStep::Freeze, MoveStep::Copy, MoveStep::Release, MoveStep::Activate] {
            p = p.advance(b, step, shards).unwrap();
        }
        p
    }

    #[test]
    fn a_board_lives_on_its_hash_shard_until_moved() {
        let b = key(1);
        let home = board_shard(1, &b.type_key, 6);
        let away = (home + 1) % 6;
        let p = Placements::default();
        assert_eq!(p.shard_of(1, &b.type_key, 6), home);
        let started = p.start(b.clone(), away, 6, 5).unwrap();
        assert_eq!(started.epoch, 1);
        assert_eq!(started.shard_of(1, &b.type_key, 6), home, "not placed until copied");
        let copied = started
            .advance(&b, MoveStep::Freeze, 6)
            .and_then(|p| p.advance(&b, MoveStep::Copy, 6))
            .unwrap();
        assert_eq!(copied.shard_of(1, &b.type_key, 6), away, "placed with the Release step");
        assert_eq!(copied.move_of(&b).unwrap().step, MoveStep::Release);
        let done = moved(&p, &b, away, 6);
        assert!(done.moves.is_empty());
        assert_eq!(done.epoch, 5);
        assert_eq!(done.shard_of(1, &b.type_key, 6), away);
        // And back home: no entry is left.
        let back = moved(&done, &b, home, 6);
        assert!(back.placed.is_empty(), "{back:?}");
    }

    #[test]
    fn a_repeated_step_records_nothing() {
        let b = key(2);
        let to = (board_shard(1, &b.type_key, 6) + 1) % 6;
        let p = Placements::default().start(b.clone(), to, 6, 0).unwrap();
        assert!(p.advance(&b, MoveStep::Copy, 6).is_none(), "not at that step");
        let p = p.advance(&b, MoveStep::Freeze, 6).unwrap();
        assert!(p.advance(&b, MoveStep::Freeze, 6).is_none());
        assert!(p.advance(&key(3), MoveStep::Copy, 6).is_none(), "another board");
    }

    #[test]
    fn a_move_is_given_up_only_before_it_is_placed() {
        let b = key(4);
        let home = board_shard(1, &b.type_key, 6);
        let p = Placements::default().start(b.clone(), (home + 1) % 6, 6, 0).unwrap();
        let copying = p.advance(&b, MoveStep::Freeze, 6).unwrap();
        let aborting = copying.abort(&b).unwrap();
        assert_eq!(aborting.move_of(&b).unwrap().step, MoveStep::Abort);
        let gone = aborting.advance(&b, MoveStep::Abort, 6).unwrap();
        assert!(gone.moves.is_empty() && gone.placed.is_empty(), "{gone:?}");
        assert_eq!(gone.shard_of(1, &b.type_key, 6), home);
        let placed = copying.advance(&b, MoveStep::Copy, 6).unwrap();
        assert!(placed.abort(&b).is_none(), "placed on its target: too late");
        assert!(Placements::default().abort(&b).is_none());
    }

    #[test]
    fn refused_moves_say_why() {
        let b = key(3);
        let home = board_shard(1, &b.type_key, 6);
        let p = Placements::default();
        assert_eq!(p.start(b.clone(), 6, 6, 0).unwrap_err().code, ErrorCode::BadRequest);
        assert_eq!(p.start(b.clone(), home, 6, 0).unwrap_err().code, ErrorCode::BadRequest);
        let started = p.start(b.clone(), (home + 1) % 6, 6, 0).unwrap();
        let again = started.start(b, (home + 2) % 6, 6, 0).unwrap_err();
        assert_eq!(again.code, ErrorCode::Refused);
        let mut full = Placements::default();
        for n in 0..MAX_MOVES as u8 {
            let k = key(10 + n);
            let to = (board_shard(1, &k.type_key, 6) + 1) % 6;
            full = full.start(k, to, 6, 0).unwrap();
        }
        let k = key(200);
        let to = (board_shard(1, &k.type_key, 6) + 1) % 6;
        assert_eq!(full.start(k, to, 6, 0).unwrap_err().code, ErrorCode::Refused);
    }

    #[test]
    fn lookups_find_every_placed_board() {
        let mut p = Placements::default();
        let boards: Vec<BoardKey> = (0..40u8).map(key).collect();
        for b in &boards {
            let to = (board_shard(1, &b.type_key, 7) + 3) % 7;
            p = moved(&p, b, to, 7);
        }
        assert_eq!(p.placed.len(), 40);
        for b in &boards {
            let to = (board_shard(1, &b.type_key, 7) + 3) % 7;
            assert_eq!(p.shard_of(1, &b.type_key, 7), to);
        }
        assert!(p.placed.windows(2).all(|w| w[0].0 < w[1].0), "sorted");
    }
}
