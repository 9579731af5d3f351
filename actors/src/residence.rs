//! A shard's side of moving an actor (a sub-board, an entity's counts and
//! likers) to another shard: which keys it holds other than by hash, and
//! which of its own it froze or gave away. Pure: the shard actor
//! (`shard/moves.rs`, `shard/entity_moves.rs`) stores what changes and
//! drops or loads the state; what "taking writes" means is the kind's own
//! (`rankings/residence.rs`: events refused; `likes/residence.rs`: deltas
//! held, then passed on).
//!
//! A key with no entry lives on its hash shard (`Placeable::home`). An
//! entry says otherwise:
//!
//! ```text
//!                 source shard                          target shard
//! Freeze{to}    (owned) ─> Frozen{to}: reads served, writes held back
//! Import                                     (not here / Away) ─> Incoming: reads served
//! Release{to}   Frozen{to} ─> Away{to}: state dropped, everything sent to `to`
//! Activate                                   Incoming ─> Here: taking writes
//! given up before the key is placed on the target (its Copy failed):
//! Discard{from}                              Incoming ─> Away{from}: the copy dropped
//! Unfreeze      Frozen ─> Here: taking writes again
//! ```
//!
//! `Here` on the key's hash shard means what no entry means (owned); it is
//! kept for the move id it carries (below).
//!
//! Why reads are served on both sides between Freeze and Activate: no shard
//! applies a write for the key in that time, so the frozen copy and the
//! imported one are the same state, and a reader routed by either the old
//! or the new placement sees every write acknowledged before. Writes go
//! back to one shard (the target) only after the source stopped serving
//! reads (Release): a reader with an old placement is told `Moved` rather
//! than shown state that misses newer writes.
//!
//! Every step may be applied again (a mover that lost its leader repeats
//! the step it had not recorded): a repeat changes nothing and succeeds.
//! A step that does not fit the key's residence fails, changing nothing.
//!
//! **Late steps.** A step proposed by a metadata leader that lost its
//! place can reach a shard after a new leader redid it and went on, even
//! after the move ended. Each step carries its move's id (`MoveId`, rising
//! from move to move of a key) and each entry the id of the move that set
//! it, so a shard refuses what would undo a later state:
//!
//! - any step of an earlier move than its entry's (stale);
//! - an `Import` of the move whose copy it holds already, or gave up
//!   (`Discard`): installing the frozen copy again would drop what the
//!   key took since (an entity applies its forwarded deltas while
//!   `Incoming`), or leave a copy no reader is routed to;
//! - a `Freeze` of the move that already ended here (`Unfreeze`), which
//!   would hold the key's writes with no move left to release them.

use plaudit_proto::placement::{MoveId, Placeable};
use plaudit_proto::{ShardId, WireError};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Where a key stands on this shard, when not simply at home.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Residence {
    /// Held here, final: moving to `to`.
    Frozen { to: ShardId },
    /// Given away to `to` (it may have moved on since).
    Away { to: ShardId },
    /// Copied here, not taking writes yet.
    Incoming,
    /// Taking writes: moved here, or back (a move ended at home).
    Here,
}

/// How a shard stores a residence entry (shard meta `r:` for boards, `e:`
/// for entities): the variant is the format version, only appended.
#[derive(Serialize, Deserialize)]
pub enum ResidenceRecord {
    /// Before moves had ids: an entry of move 0.
    V1(Residence),
    V2(Residence, MoveId),
}

impl ResidenceRecord {
    pub fn entry(self) -> (Residence, MoveId) {
        match self {
            ResidenceRecord::V1(r) => (r, 0),
            ResidenceRecord::V2(r, mv) => (r, mv),
        }
    }
}

/// A copy of a frozen actor's state, as a move carries it.
pub trait Copied<K> {
    fn key(&self) -> &K;
}

/// One step of a move, as the shards' logs carry it: for key `K`, whose
/// frozen state is carried as `C`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MoveCmdOf<K, C> {
    Freeze {
        key: K,
        to: ShardId,
    },
    Import(Box<C>),
    Release {
        key: K,
        to: ShardId,
    },
    Activate {
        key: K,
    },
    /// A move given up: the target drops its copy, if it took one, and
    /// points at `to` (the source, where the key stays).
    Discard {
        key: K,
        to: ShardId,
    },
    /// A move given up: the source takes writes again.
    Unfreeze {
        key: K,
    },
}

/// One step of move `mv`, as a shard's log carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepOf<K, C> {
    pub mv: MoveId,
    pub cmd: MoveCmdOf<K, C>,
}

impl<K, C: Copied<K>> MoveCmdOf<K, C> {
    pub fn key(&self) -> &K {
        match self {
            MoveCmdOf::Freeze { key, .. }
            | MoveCmdOf::Release { key, .. }
            | MoveCmdOf::Activate { key }
            | MoveCmdOf::Discard { key, .. }
            | MoveCmdOf::Unfreeze { key } => key,
            MoveCmdOf::Import(c) => c.key(),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            MoveCmdOf::Freeze { .. } => "freeze",
            MoveCmdOf::Import(_) => "import",
            MoveCmdOf::Release { .. } => "release",
            MoveCmdOf::Activate { .. } => "activate",
            MoveCmdOf::Discard { .. } => "discard",
            MoveCmdOf::Unfreeze { .. } => "unfreeze",
        }
    }
}

/// What a step does to the shard besides its residence entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Nothing else (a freeze, an activation, or a repeat).
    None,
    /// Install the copy, in place of anything held for the key.
    Install,
    /// Drop the key's state.
    Drop,
}

/// The residence entries of one shard: each with the id of the move that
/// set it.
#[derive(Debug, Clone)]
pub struct Residences<K> {
    pub(crate) me: ShardId,
    pub(crate) shards: u32,
    pub(crate) map: HashMap<K, (Residence, MoveId)>,
}

/// Why a key is not served here: the shard to ask.
pub type Elsewhere = ShardId;

impl<K: Placeable> Residences<K> {
    pub fn new(
        me: ShardId,
        shards: u32,
        entries: impl IntoIterator<Item = (K, (Residence, MoveId))>,
    ) -> Self {
        Residences { me, shards, map: entries.into_iter().collect() }
    }

    pub fn get(&self, key: &K) -> Option<Residence> {
        self.map.get(key).map(|(r, _)| *r)
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Every entry (for the node's view of what moved away).
    pub fn entries(&self) -> impl Iterator<Item = (&K, Residence)> {
        self.map.iter().map(|(k, (r, _))| (k, *r))
    }

    /// Whether the key lives here when it has no entry, or the shard to ask.
    pub(crate) fn at_home(&self, key: &K) -> Result<(), Elsewhere> {
        let home = key.home(self.shards);
        if home == self.me {
            Ok(())
        } else {
            Err(home)
        }
    }

    /// Applies step `cmd` of move `mv`: the entry changes (or a repeat
    /// changes nothing), and the effect says what else the shard must do; a
    /// step that does not fit, or comes late (module doc), fails and changes
    /// nothing. Returns the new entry too, for the shard to store.
    pub fn step<C: Copied<K>>(
        &mut self,
        mv: MoveId,
        cmd: &MoveCmdOf<K, C>,
    ) -> Result<(Effect, Option<(Residence, MoveId)>), WireError> {
        let key = cmd.key();
        let stood = self.map.get(key).copied();
        let now = stood.map(|(r, _)| r);
        let home = key.home(self.shards) == self.me;
        let owned = match now {
            Some(Residence::Here) => true,
            Some(_) => false,
            None => home,
        };
        let refuse = |why: String| {
            Err(WireError::refused(format!(
                "shard {}: cannot {} {:?} of move {mv}: {why}",
                self.me,
                cmd.name(),
                key
            )))
        };
        if let Some((_, seen)) = stood.filter(|(_, seen)| mv < *seen) {
            return refuse(format!("a late step, move {seen} came since"));
        }
        // The key's entry was set by this very move.
        let same = stood.is_some_and(|(_, seen)| seen == mv);
        let (effect, next) = match (cmd, now) {
            (MoveCmdOf::Freeze { to, .. }, Some(Residence::Frozen { to: t })) if t == *to => {
                (Effect::None, now)
            }
            (MoveCmdOf::Freeze { .. }, Some(Residence::Here)) if same => {
                return refuse("that move ended here".into())
            }
            (MoveCmdOf::Freeze { to, .. }, _) if owned => {
                (Effect::None, Some(Residence::Frozen { to: *to }))
            }
            (MoveCmdOf::Import(_), Some(Residence::Incoming)) if same => (Effect::None, now),
            (MoveCmdOf::Import(_), Some(Residence::Away { .. })) if same => {
                return refuse("that move was given up".into())
            }
            (MoveCmdOf::Import(_), Some(Residence::Incoming | Residence::Away { .. })) => {
                (Effect::Install, Some(Residence::Incoming))
            }
            (MoveCmdOf::Import(_), None) if !owned => (Effect::Install, Some(Residence::Incoming)),
            (
                MoveCmdOf::Release { to, .. },
                Some(Residence::Frozen { to: t } | Residence::Away { to: t }),
            ) if t == *to => {
                let repeat = matches!(now, Some(Residence::Away { .. }));
                (
                    if repeat { Effect::None } else { Effect::Drop },
                    Some(Residence::Away { to: *to }),
                )
            }
            (MoveCmdOf::Activate { .. }, Some(Residence::Incoming)) => {
                (Effect::None, Some(Residence::Here))
            }
            (MoveCmdOf::Activate { .. }, _) if owned => (Effect::None, now),
            (MoveCmdOf::Discard { to, .. }, Some(Residence::Incoming)) => {
                (Effect::Drop, Some(Residence::Away { to: *to }))
            }
            (MoveCmdOf::Discard { to, .. }, Some(Residence::Away { .. }) | None) if !owned => {
                (Effect::None, Some(Residence::Away { to: *to }))
            }
            (MoveCmdOf::Unfreeze { .. }, Some(Residence::Frozen { .. })) => {
                (Effect::None, Some(Residence::Here))
            }
            (MoveCmdOf::Unfreeze { .. }, _) if owned => (Effect::None, now),
            _ => return refuse(format!("it is {}", describe(now, owned))),
        };
        // A repeat on a key with no entry (owned at home) leaves none.
        let next = next.map(|r| (r, mv));
        match next {
            Some(e) => self.map.insert(key.clone(), e),
            None => self.map.remove(key),
        };
        Ok((effect, next))
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
