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
//! A key whose writes pass through its home whatever the placements say
//! (`Placeable::THROUGH_HOME`: an entity's deltas), moved from a shard S
//! other than its home H, takes two more steps on H, and its freeze on S
//! waits for a barrier:
//!
//! ```text
//!                 home H                              source S
//! Hold{S}       Away{S} ─> Held{S}: its writes held here;
//!               a barrier to S behind the writes sent before ─> (arrives) Here ─> Drained
//! Freeze{to}                                          Drained ─> Frozen{to} (refused until drained)
//! Import, when the target is H:  Held{S} ─> IncomingHeld: served, its writes still held
//! Pass{to}      Held ─> Away{to}: the held writes sent on to `to`, in order
//!               IncomingHeld ─> Incoming (to = H): the held writes applied here, in order
//! given up:     Discard{S} (target H): Held | IncomingHeld ─> Away{S}, the held sent to S;
//!               Unfreeze on S: Drained | Frozen ─> Here; Pass{S} on H: the held sent to S
//! ```
//!
//! So the key's writes take one path at every moment: H -> S until the
//! barrier (S applies all of them before its freeze), held at H during
//! the copy, H -> target after the release (or applied at H). None can
//! overtake another: each stream is in order and only one carries them.
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
    /// Taking writes, and everything its home sent before holding its
    /// writes for the entry's move has arrived: that move may freeze it.
    Drained,
    /// Lives at `to`, from where it is being moved: the writes that reach
    /// it through this shard, its home, are held here until the move
    /// passes them on.
    Held { to: ShardId },
    /// Copied here, its home, by a move back: served, its writes held
    /// until the move passes them in.
    IncomingHeld,
}

impl Residence {
    /// Whether a shard with this entry serves the key's reads, or the
    /// shard to ask. From a freeze to an activation no shard applies a
    /// write for the key, so the frozen state and its copy are the same
    /// (module doc); a home holding deltas during a move from elsewhere
    /// has no state of the key until it takes the copy.
    pub fn serves_reads(self) -> Result<(), ShardId> {
        match self {
            Residence::Here
            | Residence::Drained
            | Residence::Frozen { .. }
            | Residence::Incoming
            | Residence::IncomingHeld => Ok(()),
            Residence::Away { to } | Residence::Held { to } => Err(to),
        }
    }
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
    /// On the key's home, for a move from `to` (another shard): hold the
    /// writes that reach the key through here, and send `to` a barrier
    /// behind those sent before.
    Hold {
        key: K,
        to: ShardId,
    },
    /// On the key's home, once the move released the key (or was given
    /// up): what it held goes on to `to`, as later writes will, or is
    /// applied here when `to` is here.
    Pass {
        key: K,
        to: ShardId,
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
            | MoveCmdOf::Unfreeze { key }
            | MoveCmdOf::Hold { key, .. }
            | MoveCmdOf::Pass { key, .. } => key,
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
            MoveCmdOf::Hold { .. } => "hold",
            MoveCmdOf::Pass { .. } => "pass",
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
    /// Send shard `to` a barrier behind the writes sent to it before.
    Barrier(ShardId),
    /// Send the writes held for the key on to shard `to`, in order.
    PassHeld(ShardId),
    /// Apply the writes held for the key here, in order.
    ApplyHeld,
    /// Drop the copy, and send the held writes on to shard `to`.
    DropAndPass(ShardId),
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
            Some(Residence::Here | Residence::Drained) => true,
            Some(_) => false,
            None => home,
        };
        let me = self.me;
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
            // Away from its home, its writes come through the home: the
            // freeze waits for the move's barrier (module doc).
            (MoveCmdOf::Freeze { to, .. }, _) if owned && K::THROUGH_HOME && !home => {
                if now == Some(Residence::Drained) && same {
                    (Effect::None, Some(Residence::Frozen { to: *to }))
                } else {
                    return refuse(
                        "the writes its home sent before holding them are not all here yet".into(),
                    );
                }
            }
            (MoveCmdOf::Freeze { to, .. }, _) if owned => {
                (Effect::None, Some(Residence::Frozen { to: *to }))
            }
            (MoveCmdOf::Hold { to, .. }, Some(Residence::Held { to: t })) if t == *to && same => {
                (Effect::None, now)
            }
            (MoveCmdOf::Hold { .. }, _) if same => {
                return refuse("that move is past its hold here".into())
            }
            (MoveCmdOf::Hold { to, .. }, Some(Residence::Away { to: t }))
                if t == *to && home && K::THROUGH_HOME =>
            {
                (Effect::Barrier(*to), Some(Residence::Held { to: *to }))
            }
            (MoveCmdOf::Import(_), Some(Residence::Incoming | Residence::IncomingHeld)) if same => {
                (Effect::None, now)
            }
            (MoveCmdOf::Import(_), Some(Residence::Away { .. })) if same => {
                return refuse("that move was given up".into())
            }
            // Back home: its writes stay held until the move passes them in.
            (MoveCmdOf::Import(_), Some(Residence::Held { .. })) => {
                (Effect::Install, Some(Residence::IncomingHeld))
            }
            (MoveCmdOf::Import(_), Some(Residence::Away { .. })) if home && K::THROUGH_HOME => {
                return refuse("its writes are not held here".into())
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
            (MoveCmdOf::Pass { to, .. }, Some(Residence::Held { .. })) if *to != me => {
                (Effect::PassHeld(*to), Some(Residence::Away { to: *to }))
            }
            (MoveCmdOf::Pass { to, .. }, Some(Residence::IncomingHeld)) if *to == me => {
                (Effect::ApplyHeld, Some(Residence::Incoming))
            }
            // A repeat; or, for a move given up before its hold, nothing held.
            (MoveCmdOf::Pass { to, .. }, Some(Residence::Away { to: t })) if t == *to => {
                (Effect::None, now)
            }
            (MoveCmdOf::Pass { to, .. }, Some(Residence::Incoming | Residence::Here))
                if *to == me && same =>
            {
                (Effect::None, now)
            }
            (MoveCmdOf::Activate { .. }, Some(Residence::Incoming)) => {
                (Effect::None, Some(Residence::Here))
            }
            (MoveCmdOf::Activate { .. }, _) if owned => (Effect::None, now),
            (MoveCmdOf::Discard { to, .. }, Some(Residence::Incoming)) => {
                (Effect::Drop, Some(Residence::Away { to: *to }))
            }
            (MoveCmdOf::Discard { to, .. }, Some(Residence::IncomingHeld)) => {
                (Effect::DropAndPass(*to), Some(Residence::Away { to: *to }))
            }
            (MoveCmdOf::Discard { to, .. }, Some(Residence::Held { .. })) => {
                (Effect::PassHeld(*to), Some(Residence::Away { to: *to }))
            }
            (MoveCmdOf::Discard { to, .. }, Some(Residence::Away { .. }) | None) if !owned => {
                (Effect::None, Some(Residence::Away { to: *to }))
            }
            // Owned (Drained too) or frozen: Here, marked with the move even
            // at home, where no entry means the same, so that a late Freeze
            // of this move, given up, is refused.
            (MoveCmdOf::Unfreeze { .. }, Some(Residence::Frozen { .. })) => {
                (Effect::None, Some(Residence::Here))
            }
            (MoveCmdOf::Unfreeze { .. }, _) if owned => (Effect::None, Some(Residence::Here)),
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

    /// The barrier of move `mv` arrived from the key's home: everything it
    /// sent before holding the key's writes has arrived, and that move may
    /// freeze the key here. Returns the new entry for the shard to store;
    /// `None` when the key is not taking writes here or the barrier is
    /// older than its entry (nothing changes).
    pub fn drained(&mut self, key: &K, mv: MoveId) -> Option<(Residence, MoveId)> {
        let fresh = match self.map.get(key) {
            Some((Residence::Here, seen)) => *seen < mv,
            Some((Residence::Drained, seen)) => *seen <= mv,
            _ => false,
        };
        if !fresh {
            return None;
        }
        let e = (Residence::Drained, mv);
        self.map.insert(key.clone(), e);
        Some(e)
    }
}

fn describe(r: Option<Residence>, owned: bool) -> String {
    match r {
        Some(Residence::Frozen { to }) => format!("frozen for shard {to}"),
        Some(Residence::Away { to }) => format!("moved to shard {to}"),
        Some(Residence::Incoming) => "copied here, not active".into(),
        Some(Residence::Here) => "held here".into(),
        Some(Residence::Drained) => "held here, drained for a move".into(),
        Some(Residence::Held { to }) => format!("on shard {to}, its writes held here"),
        Some(Residence::IncomingHeld) => "copied here, its writes held".into(),
        None if owned => "held here".into(),
        None => "not here".into(),
    }
}
