//! Where moved actors live (sub-boards, and entities' counts and likers),
//! and the moves under way: what the metadata group records
//! (`Command::SetPlacements`, `Command::SetEntityPlacements`) so that every
//! node routes a moved actor to its new shard, and a new metadata leader
//! resumes a move from the step it reached.
//!
//! An actor lives on its hash shard (`Placeable::home`) unless `placed`
//! names another shard. A move goes through these steps, each recorded
//! before the next begins (the shards' side of each step is
//! `actors/src/residence.rs`):
//!
//! ```text
//! Hold      (only a key whose writes pass through its hash shard, moved from
//!           another shard) its home holds the writes for it, and sends the source
//!           a barrier behind those it sent before
//! Freeze    the source stops taking writes for the actor (its state is final;
//!           after a Hold, only once the barrier arrived)
//! Copy      the target takes the frozen image, serving reads
//! Release   (recorded together with the new placement) the source drops the actor
//! Pass      (after a Hold) its home sends what it held on to the target, and
//!           the later writes too (or applies them, when the target is home)
//! Activate  the target takes writes again; then the move is gone
//! ```
//!
//! Boards and entities share the steps and this record
//! (`PlacementsOf<K>`); what "writes" are differs (a board's events are
//! refused while frozen, an entity's delivered deltas are held), which is
//! the shards' business.
//!
//! Why Hold and Pass: an entity's deltas reach it through its hash shard
//! whatever the placements say (a user's shard reads only its own state),
//! so a moved entity's deltas travel home -> where it lives. Moving it on
//! (or back home) without them would open a second path beside deltas
//! still on the first, and a user's unlike could overtake its like. With
//! them there is one path at every moment: home -> source until the
//! barrier, held at home during the move, home -> target after.

use crate::ids::{BizId, EntityId, ShardId};
use crate::rankings::RankId;
use crate::routing::{board_shard, shard_of};
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

/// `plaudit admin move --entity BIZ:ENTITY --to-shard S`: moves an
/// entity's counts and likers (its likes' truth stays on its likers'
/// shards).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveEntity {
    pub biz: BizId,
    pub entity: EntityId,
    pub to_shard: ShardId,
}

/// What can be moved between shards: a key with a hash shard.
pub trait Placeable: Clone + Ord + std::hash::Hash + std::fmt::Debug {
    /// The shard the key lives on unless it was moved.
    fn home(&self, shards: u32) -> ShardId;
    /// Whether the key's writes reach it through its home shard whatever
    /// the placements say (an entity's deltas), so that a move from
    /// another shard takes the `Hold` and `Pass` steps (module doc).
    const THROUGH_HOME: bool;
}

/// A sub-board: its ranking and binary type id (`TypeId::to_key`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BoardKey {
    pub rank: RankId,
    pub type_key: Vec<u8>,
}

impl Placeable for BoardKey {
    fn home(&self, shards: u32) -> ShardId {
        board_shard(self.rank, &self.type_key, shards)
    }
    const THROUGH_HOME: bool = false;
}

/// An entity, whose counts and likers its shard holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct EntityKey {
    pub biz: BizId,
    pub entity: EntityId,
}

impl Placeable for EntityKey {
    fn home(&self, shards: u32) -> ShardId {
        shard_of(self.biz, self.entity, shards)
    }
    const THROUGH_HOME: bool = true;
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
    /// events again (after a `Hold`, its home then passes what it held to
    /// the source), then the move is gone.
    Abort,
    /// Before `Freeze`, for a key moved from a shard other than its home
    /// whose writes pass through its home (`Placeable::THROUGH_HOME`).
    Hold,
    /// After `Release`, for a move that took `Hold`.
    Pass,
}

impl MoveStep {
    pub fn as_str(self) -> &'static str {
        match self {
            MoveStep::Freeze => "freeze",
            MoveStep::Copy => "copy",
            MoveStep::Release => "release",
            MoveStep::Activate => "activate",
            MoveStep::Abort => "abort",
            MoveStep::Hold => "hold",
            MoveStep::Pass => "pass",
        }
    }
}

/// A move's id: the placements' epoch that recorded its start. Epochs only
/// rise, so a later move of a key has a higher id, and a shard can tell a
/// late step of an earlier move (`actors/src/residence.rs`). Moves recorded
/// before ids existed have id 0.
pub type MoveId = u64;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveOf<K> {
    pub id: MoveId,
    pub key: K,
    pub from: ShardId,
    pub to: ShardId,
    pub step: MoveStep,
    /// When the move was recorded (the proposer's clock, ms since the epoch),
    /// for status only.
    pub started_ms: u64,
}

impl<K: Placeable> MoveOf<K> {
    /// Whether the move takes the `Hold` and `Pass` steps: its key's
    /// writes pass through its home, and it moves from elsewhere.
    pub fn through_home(&self, shards: u32) -> bool {
        K::THROUGH_HOME && self.from != self.key.home(shards)
    }
}

pub type BoardMove = MoveOf<BoardKey>;
pub type EntityMove = MoveOf<EntityKey>;

/// Moved actors and moves under way, under an epoch that rises with every
/// change (a change proposed twice, or from an older view, is refused).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementsOf<K> {
    pub epoch: u64,
    /// Keys that live elsewhere than their hash shard, sorted by key.
    pub placed: Vec<(K, ShardId)>,
    pub moves: Vec<MoveOf<K>>,
}

impl<K> Default for PlacementsOf<K> {
    fn default() -> Self {
        PlacementsOf { epoch: 0, placed: Vec::new(), moves: Vec::new() }
    }
}

/// Moved sub-boards and their moves.
pub type Placements = PlacementsOf<BoardKey>;
/// Moved entities and their moves.
pub type EntityPlacements = PlacementsOf<EntityKey>;

impl Placements {
    /// The shard a board lives on (its hash shard unless it was moved).
    pub fn shard_of(&self, rank: RankId, type_key: &[u8], shards: u32) -> ShardId {
        self.placed
            .binary_search_by(|(b, _)| (b.rank, b.type_key.as_slice()).cmp(&(rank, type_key)))
            .map_or_else(|_| board_shard(rank, type_key, shards), |i| self.placed[i].1)
    }
}

impl EntityPlacements {
    /// The shard an entity lives on (its hash shard unless it was moved).
    pub fn entity_shard(&self, biz: BizId, entity: EntityId, shards: u32) -> ShardId {
        self.placed
            .binary_search_by(|(k, _)| (k.biz, k.entity).cmp(&(biz, entity)))
            .map_or_else(|_| shard_of(biz, entity, shards), |i| self.placed[i].1)
    }
}

impl<K: Placeable> PlacementsOf<K> {
    /// Where `key` lives.
    pub fn home_of(&self, key: &K, shards: u32) -> ShardId {
        self.placed
            .binary_search_by(|(k, _)| k.cmp(key))
            .map_or_else(|_| key.home(shards), |i| self.placed[i].1)
    }

    pub fn move_of(&self, key: &K) -> Option<&MoveOf<K>> {
        self.moves.iter().find(|m| &m.key == key)
    }

    /// The placements with a move of `board` to shard `to` recorded, or why
    /// not: a move of it is under way, `to` is where it lives, is not a
    /// shard, or too many moves are under way.
    pub fn start(&self, key: K, to: ShardId, shards: u32, now_ms: u64) -> Result<Self, WireError> {
        if to >= shards {
            return Err(WireError::bad_request(format!(
                "shard {to} does not exist (the cluster has {shards})"
            )));
        }
        if self.move_of(&key).is_some() {
            return Err(WireError::refused(format!("a move of {key:?} is under way")));
        }
        if self.moves.len() >= MAX_MOVES {
            return Err(WireError::refused(format!("{MAX_MOVES} moves are under way already")));
        }
        let from = self.home_of(&key, shards);
        if from == to {
            return Err(WireError::bad_request(format!("{key:?} is on shard {to} already")));
        }
        let mut next = self.clone();
        next.epoch += 1;
        let id = next.epoch;
        let mut m = MoveOf { id, key, from, to, step: MoveStep::Freeze, started_ms: now_ms };
        if m.through_home(shards) {
            m.step = MoveStep::Hold;
        }
        next.moves.push(m);
        Ok(next)
    }

    /// The placements once `board`'s move has done step `done`: its next
    /// step recorded (with the board placed on its target when the next is
    /// `Release`), or the move gone after `Activate`. `None` if the move is
    /// not there or is at another step (a repeat: nothing to record).
    pub fn advance(&self, key: &K, done: MoveStep, shards: u32) -> Option<Self> {
        let i = self.moves.iter().position(|m| &m.key == key && m.step == done)?;
        let mut next = self.clone();
        next.epoch += 1;
        let through_home = next.moves[i].through_home(shards);
        match done {
            MoveStep::Hold => next.moves[i].step = MoveStep::Freeze,
            MoveStep::Freeze => next.moves[i].step = MoveStep::Copy,
            MoveStep::Copy => {
                next.moves[i].step = MoveStep::Release;
                let to = next.moves[i].to;
                next.place(key, to, shards);
            }
            MoveStep::Release if through_home => next.moves[i].step = MoveStep::Pass,
            MoveStep::Release | MoveStep::Pass => next.moves[i].step = MoveStep::Activate,
            MoveStep::Activate | MoveStep::Abort => {
                next.moves.remove(i);
            }
        }
        Some(next)
    }

    /// The placements with `board`'s move given up, if it may still be:
    /// before its `Release` step is recorded (the board is not placed on
    /// its target yet). `None` otherwise, or if there is no such move.
    pub fn abort(&self, key: &K) -> Option<Self> {
        let i = self.moves.iter().position(|m| &m.key == key)?;
        if !matches!(self.moves[i].step, MoveStep::Hold | MoveStep::Freeze | MoveStep::Copy) {
            return None;
        }
        let mut next = self.clone();
        next.epoch += 1;
        next.moves[i].step = MoveStep::Abort;
        Some(next)
    }

    /// Records `key` on shard `to`: no entry where that is its hash shard.
    fn place(&mut self, key: &K, to: ShardId, shards: u32) {
        let at = self.placed.binary_search_by(|(k, _)| k.cmp(key));
        let home = key.home(shards) == to;
        match (at, home) {
            (Ok(i), true) => {
                self.placed.remove(i);
            }
            (Ok(i), false) => self.placed[i].1 = to,
            (Err(_), true) => {}
            (Err(i), false) => self.placed.insert(i, (key.clone(), to)),
        }
    }
}

/// The boards' placements as recorded before moves had ids (`PlacementsRecord::V1`,
/// `Command::SetPlacements`): still read, as moves of id 0.
pub mod v1 {
    use super::{BoardKey, MoveStep, Placements};
    use crate::ids::ShardId;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct MoveV1 {
        pub key: BoardKey,
        pub from: ShardId,
        pub to: ShardId,
        pub step: MoveStep,
        pub started_ms: u64,
    }

    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct PlacementsV1 {
        pub epoch: u64,
        pub placed: Vec<(BoardKey, ShardId)>,
        pub moves: Vec<MoveV1>,
    }

    impl From<PlacementsV1> for Placements {
        fn from(p: PlacementsV1) -> Placements {
            let moves = p.moves.into_iter().map(|m| super::MoveOf {
                id: 0,
                key: m.key,
                from: m.from,
                to: m.to,
                step: m.step,
                started_ms: m.started_ms,
            });
            Placements { epoch: p.epoch, placed: p.placed, moves: moves.collect() }
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
    fn each_move_of_a_key_has_a_higher_id() {
        let b = key(5);
        let home = board_shard(1, &b.type_key, 6);
        let p = Placements::default().start(key(6), home, 6, 0).unwrap();
        let first = p.start(b.clone(), (home + 1) % 6, 6, 0).unwrap();
        let id = first.move_of(&b).unwrap().id;
        assert!(id > p.moves[0].id, "another key's earlier move");
        let given_up = first.abort(&b).and_then(|p| p.advance(&b, MoveStep::Abort, 6)).unwrap();
        let again = given_up.start(b.clone(), (home + 2) % 6, 6, 0).unwrap();
        assert!(again.move_of(&b).unwrap().id > id, "{again:?}");
    }

    #[test]
    fn placements_recorded_before_move_ids_read_as_id_0() {
        let old = v1::PlacementsV1 {
            epoch: 7,
            placed: vec![(key(1), 2)],
            moves: vec![v1::MoveV1 {
                key: key(2),
                from: 0,
                to: 1,
                step: MoveStep::Copy,
                started_ms: 9,
            }],
        };
        let p = Placements::from(old);
        assert_eq!((p.epoch, p.placed.len(), p.moves[0].id), (7, 1, 0));
        assert_eq!((p.moves[0].step, p.moves[0].started_ms), (MoveStep::Copy, 9));
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

    /// Runs an entity's move through the steps its record asks for, and
    /// returns them.
    fn entity_moved(
        p: &EntityPlacements,
        e: EntityKey,
        to: ShardId,
    ) -> (EntityPlacements, Vec<MoveStep>) {
        let mut p = p.start(e, to, 6, 0).unwrap();
        let mut steps = Vec::new();
        while let Some(m) = p.move_of(&e) {
            let step = m.step;
            steps.push(step);
            p = p.advance(&e, step, 6).unwrap();
        }
        (p, steps)
    }

    #[test]
    fn an_entity_moves_on_and_back_home_through_its_home() {
        use MoveStep::*;
        let e = EntityKey { biz: 3, entity: 42 };
        let home = shard_of(3, 42, 6);
        let (to, on) = ((home + 2) % 6, (home + 3) % 6);
        let p = EntityPlacements::default();
        assert_eq!(p.entity_shard(3, 42, 6), home);
        // From home: its deltas arrive there, nothing to hold elsewhere.
        let (p, steps) = entity_moved(&p, e, to);
        assert_eq!(steps, [Freeze, Copy, Release, Activate]);
        assert_eq!(p.entity_shard(3, 42, 6), to);
        assert_eq!(p.home_of(&e, 6), to);
        assert_eq!(p.entity_shard(3, 43, 6), shard_of(3, 43, 6), "others stay home");
        // On, and back home: held at home, passed on after the release.
        let (p, steps) = entity_moved(&p, e, on);
        assert_eq!(steps, [Hold, Freeze, Copy, Release, Pass, Activate]);
        assert_eq!(p.entity_shard(3, 42, 6), on);
        let (p, steps) = entity_moved(&p, e, home);
        assert_eq!(steps, [Hold, Freeze, Copy, Release, Pass, Activate]);
        assert_eq!(p.entity_shard(3, 42, 6), home);
        assert!(p.placed.is_empty(), "home again: no entry {p:?}");
        // A board's events are routed by the placements: no hold.
        let b = key(9);
        let bh = board_shard(1, &b.type_key, 6);
        let moved = moved(&Placements::default(), &b, (bh + 1) % 6, 6);
        let again = moved.start(b.clone(), (bh + 2) % 6, 6, 0).unwrap();
        assert_eq!(again.move_of(&b).unwrap().step, Freeze);
    }

    #[test]
    fn a_move_through_home_is_given_up_until_its_release() {
        let e = EntityKey { biz: 3, entity: 42 };
        let home = shard_of(3, 42, 6);
        let (p, _) = entity_moved(&EntityPlacements::default(), e, (home + 1) % 6);
        let started = p.start(e, (home + 2) % 6, 6, 0).unwrap();
        assert_eq!(started.move_of(&e).unwrap().step, MoveStep::Hold);
        assert!(started.abort(&e).is_some(), "at its hold");
        let mut at = started;
        for step in [MoveStep::Hold, MoveStep::Freeze, MoveStep::Copy] {
            at = at.advance(&e, step, 6).unwrap();
        }
        assert_eq!(at.move_of(&e).unwrap().step, MoveStep::Release);
        assert!(at.abort(&e).is_none(), "placed on its target: too late");
    }
}
