//! A sub-board's residence: the generic move steps (`crate::residence`)
//! with a board's state as the copy, and what residence means for a
//! board's events and queries.
//!
//! A frozen board refuses events (`Moved` to its target, which the edge
//! follows), so a board's writers pause from the freeze to the activation;
//! an incoming board serves reads and refuses events until activated.

use crate::residence::{Copied, Elsewhere, MoveCmdOf, Residence, Residences, StepOf};
use plaudit_proto::placement::BoardKey;
use plaudit_proto::rankings::RankId;
use serde::{Deserialize, Serialize};

pub use crate::residence::Effect;

/// One step of a board's move.
pub type MoveCmd = MoveCmdOf<BoardKey, BoardCopy>;
/// One step of a board's move, with the move's id.
pub type BoardStep = StepOf<BoardKey, BoardCopy>;
/// The board residence entries of one shard.
pub type BoardResidences = Residences<BoardKey>;

/// A frozen board's whole state, as the target imports it: its members
/// `(item, score, tie)`, its next tie stamp and cap, and the event ids it
/// remembers as `(second, ids)` runs (so a retried event stays a duplicate
/// on the target).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoardCopy {
    pub board: BoardKey,
    pub members: Vec<(u64, i64, u64)>,
    pub next_stamp: u64,
    pub cap: u64,
    pub events: Vec<(u64, Vec<u64>)>,
}

impl Copied<BoardKey> for BoardCopy {
    fn key(&self) -> &BoardKey {
        &self.board
    }
}

impl Residences<BoardKey> {
    /// The entry of a board named by parts; `None` without building a key
    /// when there are no entries (the usual case).
    fn entry(&self, rank: RankId, type_key: &[u8]) -> Option<Residence> {
        if self.map.is_empty() {
            return None;
        }
        self.get(&BoardKey { rank, type_key: type_key.to_vec() })
    }

    fn board_at_home(&self, rank: RankId, type_key: &[u8]) -> Result<(), Elsewhere> {
        let home = plaudit_proto::routing::board_shard(rank, type_key, self.shards);
        if home == self.me {
            Ok(())
        } else {
            Err(home)
        }
    }

    /// Whether this shard takes events for the board, or the shard to ask.
    pub fn writable(&self, rank: RankId, type_key: &[u8]) -> Result<(), Elsewhere> {
        match self.entry(rank, type_key) {
            // (A board's events are routed by the placements, so it is
            // never drained or held: `Placeable::THROUGH_HOME`.)
            Some(Residence::Here | Residence::Drained) => Ok(()),
            Some(Residence::Frozen { to } | Residence::Away { to } | Residence::Held { to }) => {
                Err(to)
            }
            // Ask again here: the copy takes events once activated.
            Some(Residence::Incoming | Residence::IncomingHeld) => Err(self.me),
            None => self.board_at_home(rank, type_key),
        }
    }

    /// Whether this shard serves reads of the board, or the shard to ask.
    pub fn readable(&self, rank: RankId, type_key: &[u8]) -> Result<(), Elsewhere> {
        match self.entry(rank, type_key) {
            Some(r) => r.serves_reads(),
            None => self.board_at_home(rank, type_key),
        }
    }
}

#[cfg(test)]
mod tests;
