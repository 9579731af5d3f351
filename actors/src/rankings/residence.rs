//! A shard's side of moving sub-boards: which boards it holds other than by
//! hash, and which of its own it froze or gave away. Pure: the shard actor
//! (`shard/moves.rs`) stores what changes and drops or loads the boards.
//!
//! A board with no entry lives on its hash shard (`routing::board_shard`).
//! An entry says otherwise:
//!
//! ```text
//!                 source shard                          target shard
//! Freeze{to}    (owned) ─> Frozen{to}: reads served, events refused (Moved to `to`)
//! Import                                     (not here / Away) ─> Incoming: reads served,
//!                                                                 events refused
//! Release{to}   Frozen{to} ─> Away{to}: board dropped, everything refused (Moved to `to`)
//! Activate                                   Incoming ─> owned (no entry at home, else Here)
//! given up before the board is placed on the target (its Copy failed):
//! Discard{from}                              Incoming ─> Away{from}: the copy dropped
//! Unfreeze      Frozen ─> owned again
//! ```
//!
//! Why reads are served on both sides between Freeze and Activate: no shard
//! takes an event for the board in that time, so the frozen copy and the
//! imported one are the same state, and a reader routed by either the old
//! or the new placement sees every event acknowledged before. Events go
//! back to one shard (the target) only after the source stopped serving
//! reads (Release): a reader with an old placement is told `Moved` rather
//! than shown a board that misses newer events.
//!
//! Every step may be applied again (a mover that lost its leader repeats
//! the step it had not recorded): a repeat changes nothing and succeeds.
//! A step that does not fit the board's residence fails, changing nothing.

use plaudit_proto::placement::BoardKey;
use plaudit_proto::rankings::RankId;
use plaudit_proto::routing::board_shard;
use plaudit_proto::{ShardId, WireError};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Where a board stands on this shard, when not simply at home.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Residence {
    /// Held here, final: moving to `to`.
    Frozen { to: ShardId },
    /// Given away to `to` (it may have moved on since).
    Away { to: ShardId },
    /// Copied here, not taking events yet.
    Incoming,
    /// Moved here from its hash shard, taking events.
    Here,
}

/// One step of a move, as the shards' logs carry it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MoveCmd {
    Freeze {
        board: BoardKey,
        to: ShardId,
    },
    Import(Box<BoardCopy>),
    Release {
        board: BoardKey,
        to: ShardId,
    },
    Activate {
        board: BoardKey,
    },
    /// A move given up: the target drops its copy, if it took one, and
    /// points at `to` (the source, where the board stays).
    Discard {
        board: BoardKey,
        to: ShardId,
    },
    /// A move given up: the source takes events again.
    Unfreeze {
        board: BoardKey,
    },
}

impl MoveCmd {
    pub fn board(&self) -> &BoardKey {
        match self {
            MoveCmd::Freeze { board, .. }
            | MoveCmd::Release { board, .. }
            | MoveCmd::Activate { board }
            | MoveCmd::Discard { board, .. }
            | MoveCmd::Unfreeze { board } => board,
            MoveCmd::Import(c) => &c.board,
        }
    }
}

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

/// What a step does to the shard besides its residence entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Nothing else (a freeze, an activation, or a repeat).
    None,
    /// Install the copy, in place of anything held for the board.
    Install,
    /// Drop the board's state.
    Drop,
}

/// The residence entries of one shard.
#[derive(Debug, Clone)]
pub struct Residences {
    me: ShardId,
    shards: u32,
    map: HashMap<BoardKey, Residence>,
}

/// Why a board is not served here: the shard to ask.
pub type Elsewhere = ShardId;

impl Residences {
    pub fn new(
        me: ShardId,
        shards: u32,
        entries: impl IntoIterator<Item = (BoardKey, Residence)>,
    ) -> Self {
        Residences { me, shards, map: entries.into_iter().collect() }
    }

    pub fn get(&self, board: &BoardKey) -> Option<Residence> {
        self.map.get(board).copied()
    }

    fn home(&self, rank: RankId, type_key: &[u8]) -> ShardId {
        board_shard(rank, type_key, self.shards)
    }

    /// The entry of a board named by parts; `None` without building a key
    /// when there are no entries (the usual case).
    fn entry(&self, rank: RankId, type_key: &[u8]) -> Option<Residence> {
        if self.map.is_empty() {
            return None;
        }
        self.get(&BoardKey { rank, type_key: type_key.to_vec() })
    }

    /// Whether this shard takes events for the board, or the shard to ask.
    pub fn writable(&self, rank: RankId, type_key: &[u8]) -> Result<(), Elsewhere> {
        match self.entry(rank, type_key) {
            Some(Residence::Here) => Ok(()),
            Some(Residence::Frozen { to } | Residence::Away { to }) => Err(to),
            // Ask again here: the copy takes events once activated.
            Some(Residence::Incoming) => Err(self.me),
            None => self.at_home(rank, type_key),
        }
    }

    /// Whether this shard serves reads of the board, or the shard to ask.
    pub fn readable(&self, rank: RankId, type_key: &[u8]) -> Result<(), Elsewhere> {
        match self.entry(rank, type_key) {
            Some(Residence::Here | Residence::Frozen { .. } | Residence::Incoming) => Ok(()),
            Some(Residence::Away { to }) => Err(to),
            None => self.at_home(rank, type_key),
        }
    }

    fn at_home(&self, rank: RankId, type_key: &[u8]) -> Result<(), Elsewhere> {
        let home = self.home(rank, type_key);
        if home == self.me {
            Ok(())
        } else {
            Err(home)
        }
    }

    /// Applies one step: the entry changes (or a repeat changes nothing),
    /// and the effect says what else the shard must do; a step that does
    /// not fit fails and changes nothing. Returns the new entry too
    /// (`None`: no entry), for the shard to store.
    pub fn step(&mut self, cmd: &MoveCmd) -> Result<(Effect, Option<Residence>), WireError> {
        let board = cmd.board();
        let now = self.get(board);
        let owned = match now {
            Some(Residence::Here) => true,
            Some(_) => false,
            None => self.home(board.rank, &board.type_key) == self.me,
        };
        let (effect, next) = match (cmd, now) {
            (MoveCmd::Freeze { to, .. }, Some(Residence::Frozen { to: t })) if t == *to => {
                (Effect::None, now)
            }
            (MoveCmd::Freeze { to, .. }, _) if owned => {
                (Effect::None, Some(Residence::Frozen { to: *to }))
            }
            (MoveCmd::Import(_), Some(Residence::Incoming | Residence::Away { .. })) => {
                (Effect::Install, Some(Residence::Incoming))
            }
            (MoveCmd::Import(_), None) if !owned => (Effect::Install, Some(Residence::Incoming)),
            (
                MoveCmd::Release { to, .. },
                Some(Residence::Frozen { to: t } | Residence::Away { to: t }),
            ) if t == *to => {
                let repeat = matches!(now, Some(Residence::Away { .. }));
                (
                    if repeat { Effect::None } else { Effect::Drop },
                    Some(Residence::Away { to: *to }),
                )
            }
            (MoveCmd::Activate { .. }, Some(Residence::Incoming)) => {
                let home = self.home(board.rank, &board.type_key) == self.me;
                (Effect::None, if home { None } else { Some(Residence::Here) })
            }
            (MoveCmd::Activate { .. }, _) if owned => (Effect::None, now),
            (MoveCmd::Discard { to, .. }, Some(Residence::Incoming)) => {
                (Effect::Drop, Some(Residence::Away { to: *to }))
            }
            (MoveCmd::Discard { to, .. }, Some(Residence::Away { .. }) | None) if !owned => {
                (Effect::None, Some(Residence::Away { to: *to }))
            }
            (MoveCmd::Unfreeze { .. }, Some(Residence::Frozen { .. })) => {
                let home = self.home(board.rank, &board.type_key) == self.me;
                (Effect::None, if home { None } else { Some(Residence::Here) })
            }
            (MoveCmd::Unfreeze { .. }, _) if owned => (Effect::None, now),
            _ => {
                return Err(WireError::refused(format!(
                    "shard {}: cannot {} board {}:{:?} while it is {}",
                    self.me,
                    cmd.name(),
                    board.rank,
                    board.type_key,
                    describe(now, owned)
                )))
            }
        };
        match next {
            Some(r) => self.map.insert(board.clone(), r),
            None => self.map.remove(board),
        };
        Ok((effect, next))
    }
}

impl MoveCmd {
    pub fn name(&self) -> &'static str {
        match self {
            MoveCmd::Freeze { .. } => "freeze",
            MoveCmd::Import(_) => "import",
            MoveCmd::Release { .. } => "release",
            MoveCmd::Activate { .. } => "activate",
            MoveCmd::Discard { .. } => "discard",
            MoveCmd::Unfreeze { .. } => "unfreeze",
        }
    }
}

fn describe(r: Option<Residence>, owned: bool) -> String {
    match r {
        Some(Residence::Frozen { to }) => format!("frozen for shard {to}"),
        Some(Residence::Away { to }) => format!("moved to shard {to}"),
        Some(Residence::Incoming) => "copied here, not active".into(),
        Some(Residence::Here) => "held here".into(),
        None if owned => "held here".into(),
        None => "not here".into(),
    }
}

#[cfg(test)]
mod tests;
