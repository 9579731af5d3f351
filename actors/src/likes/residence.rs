//! An entity's residence: the generic move steps (`crate::residence`) with
//! an entity's counts and likers as the copy, and what residence means for
//! the deltas its likers' shards deliver.
//!
//! Every user shard sends an entity's deltas to the entity's hash shard
//! (`routing::shard_of`): a user shard's apply reads only its own state, so
//! it cannot know where an entity moved. The hash shard passes them on:
//!
//! ```text
//! delta for E arrives at a shard ─> E owned here (home, Here, Incoming)  ─> applied
//!                                   E Frozen{to} (moving away)           ─> held, in order
//!                                   E Away{to}  (moved)                  ─> outbox to `to`
//! Release{to}: the held deltas go to the outbox for `to`, in order, before any later one
//! Unfreeze (the move given up): the held deltas are applied here, in order
//! ```
//!
//! Why the order holds: a user's like and unlike of one entity must reach
//! it in the order the user's shard made them (a liker removed before it
//! was added would stay). Everything before the freeze is in the copy;
//! everything after is held, then sent over the single source -> target
//! stream, which delivers in seq order, and the target applies it only
//! once it holds the copy (it gets nothing before the Release, which comes
//! after the copy was imported). This is also why an entity moves only
//! once (`Placeable::MOVES_AGAIN`): moving it on, or back home, would open
//! a second path beside deltas still on the first.
//!
//! Writers never wait: a like is acknowledged by the user's shard whatever
//! its entity is doing; the counts lag by the move's time at most.

use crate::residence::{Copied, Elsewhere, MoveCmdOf, Residence, Residences, StepOf};
use plaudit_proto::placement::EntityKey;
use plaudit_proto::{BizId, EntityId, Millis, ShardId, UserId};
use serde::{Deserialize, Serialize};

/// One step of an entity's move.
pub type EntityMoveCmd = MoveCmdOf<EntityKey, EntityCopy>;
/// One step of an entity's move, with the move's id.
pub type EntityStep = StepOf<EntityKey, EntityCopy>;
/// The entity residence entries of one shard.
pub type EntityResidences = Residences<EntityKey>;

/// A frozen entity's whole derived state, as the target imports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntityCopy {
    pub key: EntityKey,
    pub likes: u64,
    pub dislikes: u64,
    pub owner: Option<UserId>,
    /// Its likers, `(since, user)`.
    pub likers: Vec<(Millis, UserId)>,
}

impl Copied<EntityKey> for EntityCopy {
    fn key(&self) -> &EntityKey {
        &self.key
    }
}

/// What a shard does with a delivered delta for an entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeltaRoute {
    Apply,
    /// Kept until the move ends (`Release` sends it on, `Unfreeze` applies it).
    Hold,
    /// Sent on to the shard the entity moved to.
    Forward(ShardId),
}

impl Residences<EntityKey> {
    /// What to do with a delta for `(biz, entity)` arriving here.
    pub fn route_delta(&self, biz: BizId, entity: EntityId) -> DeltaRoute {
        let key = EntityKey { biz, entity };
        let entry = if self.map.is_empty() { None } else { self.get(&key) };
        match entry {
            Some(Residence::Here | Residence::Incoming) => DeltaRoute::Apply,
            Some(Residence::Frozen { .. }) => DeltaRoute::Hold,
            Some(Residence::Away { to }) => DeltaRoute::Forward(to),
            // A delta for an entity that never lived here goes to its home
            // (only a delta from a build that routed differently could).
            None => match self.at_home(&key) {
                Ok(()) => DeltaRoute::Apply,
                Err(home) => DeltaRoute::Forward(home),
            },
        }
    }

    /// Whether this shard serves reads of the entity, or the shard to ask.
    pub fn entity_readable(&self, biz: BizId, entity: EntityId) -> Result<(), Elsewhere> {
        let key = EntityKey { biz, entity };
        let entry = if self.map.is_empty() { None } else { self.get(&key) };
        match entry {
            Some(Residence::Here | Residence::Frozen { .. } | Residence::Incoming) => Ok(()),
            Some(Residence::Away { to }) => Err(to),
            None => self.at_home(&key),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::residence::Effect;
    use plaudit_proto::placement::MoveId;
    use plaudit_proto::routing::shard_of;
    use plaudit_proto::WireError;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    const SHARDS: u32 = 4;
    const BIZ: BizId = 1;
    const E: EntityId = 77;
    /// The move's id.
    const MV: MoveId = 1;

    fn key() -> EntityKey {
        EntityKey { biz: BIZ, entity: E }
    }

    fn copy() -> EntityMoveCmd {
        let c = EntityCopy { key: key(), likes: 0, dislikes: 0, owner: None, likers: vec![] };
        MoveCmdOf::Import(Box::new(c))
    }

    /// The model of one shard: its residence, the deltas it applied to the
    /// entity (by number) and the ones it holds.
    struct Shard {
        res: EntityResidences,
        applied: Vec<u32>,
        held: Vec<u32>,
    }

    /// Shards with FIFO streams between them (as the outbox delivers).
    struct World {
        shards: Vec<Shard>,
        streams: Vec<VecDeque<(ShardId, u32)>>,
    }

    impl World {
        fn new() -> Self {
            let shards = (0..SHARDS)
                .map(|s| Shard {
                    res: Residences::new(s, SHARDS, []),
                    applied: vec![],
                    held: vec![],
                })
                .collect();
            World { shards, streams: (0..SHARDS * SHARDS).map(|_| VecDeque::new()).collect() }
        }

        fn arrive(&mut self, at: ShardId, d: u32) {
            let s = &mut self.shards[at as usize];
            match s.res.route_delta(BIZ, E) {
                DeltaRoute::Apply => s.applied.push(d),
                DeltaRoute::Hold => s.held.push(d),
                DeltaRoute::Forward(to) => {
                    self.streams[(at * SHARDS + to) as usize].push_back((to, d))
                }
            }
        }

        /// Delivers the oldest delta of stream `i`.
        fn pump(&mut self, i: usize) {
            if let Some((to, d)) = self.streams[i].pop_front() {
                self.arrive(to, d);
            }
        }

        fn step(&mut self, at: ShardId, cmd: &EntityMoveCmd) {
            self.try_step(at, cmd).expect("the mover's step fits");
        }

        /// A step of move `MV`, refused or applied as the shard would.
        fn try_step(&mut self, at: ShardId, cmd: &EntityMoveCmd) -> Result<(), WireError> {
            let s = &mut self.shards[at as usize];
            let was = s.res.get(&key());
            let (effect, _) = s.res.step(MV, cmd)?;
            match (cmd, effect) {
                (MoveCmdOf::Import(_), Effect::Install) => {
                    // The copy: what the frozen source applied.
                    let src = self
                        .shards
                        .iter()
                        .find(|x| matches!(x.res.get(&key()), Some(Residence::Frozen { .. })));
                    let applied = src.map(|x| x.applied.clone()).unwrap_or_default();
                    self.shards[at as usize].applied = applied;
                }
                (MoveCmdOf::Release { to, .. }, Effect::Drop) => {
                    let held = std::mem::take(&mut s.held);
                    s.applied.clear();
                    for d in held {
                        self.streams[(at * SHARDS + to) as usize].push_back((*to, d));
                    }
                }
                (MoveCmdOf::Discard { .. }, Effect::Drop) => s.applied.clear(),
                (MoveCmdOf::Unfreeze { .. }, _)
                    if matches!(was, Some(Residence::Frozen { .. })) =>
                {
                    let held = std::mem::take(&mut s.held);
                    s.applied.extend(held);
                }
                _ => {}
            }
            Ok(())
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Like,
        Pump(usize),
        Step {
            twice: bool,
        },
        Abort,
        /// A step taken earlier arrives again, late (a metadata leader
        /// that lost its place proposed it): refused or harmless.
        Late(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => Just(Op::Like),
            4 => (0..(SHARDS * SHARDS) as usize).prop_map(Op::Pump),
            2 => any::<bool>().prop_map(|twice| Op::Step { twice }),
            1 => Just(Op::Abort),
            1 => any::<usize>().prop_map(Op::Late),
        ]
    }

    proptest! {
        /// Through any interleaving of new deltas, deliveries and one move
        /// (maybe given up, steps maybe repeated, any step arriving again
        /// late), once every stream is drained the entity's owner has
        /// applied every delta exactly once, in the order they were made,
        /// and no other shard holds any.
        #[test]
        fn every_delta_reaches_the_owner_once_and_in_order(
            ops in prop::collection::vec(op(), 1..120),
            to_offset in 1..SHARDS,
        ) {
            let home = shard_of(BIZ, E, SHARDS);
            let to = (home + to_offset) % SHARDS;
            let mut w = World::new();
            let mut made = 0u32;
            // Steps done: Freeze, Import, Release, Activate; or aborted.
            let mut done = 0usize;
            let mut aborted = false;
            // Every step taken, for late arrivals.
            let mut taken: Vec<(ShardId, EntityMoveCmd)> = Vec::new();
            let steps = |n: usize| -> Option<(ShardId, EntityMoveCmd)> {
                Some(match n {
                    0 => (home, MoveCmdOf::Freeze { key: key(), to }),
                    1 => (to, copy()),
                    2 => (home, MoveCmdOf::Release { key: key(), to }),
                    3 => (to, MoveCmdOf::Activate { key: key() }),
                    _ => return None,
                })
            };
            for op in ops {
                match op {
                    Op::Like => {
                        w.arrive(home, made);
                        made += 1;
                    }
                    Op::Pump(i) => w.pump(i),
                    Op::Step { twice } if !aborted => {
                        if let Some((at, cmd)) = steps(done) {
                            w.step(at, &cmd);
                            if twice {
                                w.step(at, &cmd);
                            }
                            taken.push((at, cmd));
                            done += 1;
                        }
                    }
                    Op::Step { .. } => {}
                    // Only before the copy is recorded (the Release step).
                    Op::Abort if !aborted && (1..=2).contains(&done) => {
                        let discard = MoveCmdOf::Discard { key: key(), to: home };
                        w.step(to, &discard);
                        w.step(home, &MoveCmdOf::Unfreeze { key: key() });
                        taken.push((to, discard));
                        taken.push((home, MoveCmdOf::Unfreeze { key: key() }));
                        aborted = true;
                    }
                    Op::Abort => {}
                    Op::Late(i) if !taken.is_empty() => {
                        let (at, cmd) = taken[i % taken.len()].clone();
                        let _ = w.try_step(at, &cmd);
                    }
                    Op::Late(_) => {}
                }
            }
            // Finish: the move's remaining steps, then drain every stream.
            if !aborted {
                while let Some((at, cmd)) = steps(done) {
                    w.step(at, &cmd);
                    taken.push((at, cmd));
                    done += 1;
                }
            }
            // And every step once more, late, after the move ended.
            for (at, cmd) in &taken {
                let _ = w.try_step(*at, cmd);
            }
            while let Some(i) = w.streams.iter().position(|s| !s.is_empty()) {
                w.pump(i);
            }
            let owner = if aborted || done == 0 { home } else { to };
            let want: Vec<u32> = (0..made).collect();
            prop_assert_eq!(&w.shards[owner as usize].applied, &want);
            for (i, s) in w.shards.iter().enumerate() {
                prop_assert!(s.held.is_empty(), "shard {} holds {:?}", i, s.held);
                if i as ShardId != owner {
                    prop_assert!(s.applied.is_empty(), "shard {} applied {:?}", i, s.applied);
                }
            }
        }
    }

    #[test]
    fn routes_follow_the_entry() {
        let home = shard_of(BIZ, E, SHARDS);
        let to = (home + 1) % SHARDS;
        let mut h: EntityResidences = Residences::new(home, SHARDS, []);
        let mut t: EntityResidences = Residences::new(to, SHARDS, []);
        assert_eq!(h.route_delta(BIZ, E), DeltaRoute::Apply);
        assert_eq!(t.route_delta(BIZ, E), DeltaRoute::Forward(home), "not here: to its home");
        assert_eq!(t.entity_readable(BIZ, E), Err(home));
        h.step(MV, &MoveCmdOf::<_, EntityCopy>::Freeze { key: key(), to }).unwrap();
        assert_eq!(h.route_delta(BIZ, E), DeltaRoute::Hold);
        assert_eq!(h.entity_readable(BIZ, E), Ok(()), "a frozen entity is read");
        t.step(MV, &copy()).unwrap();
        assert_eq!(t.entity_readable(BIZ, E), Ok(()));
        h.step(MV, &MoveCmdOf::<_, EntityCopy>::Release { key: key(), to }).unwrap();
        assert_eq!(h.route_delta(BIZ, E), DeltaRoute::Forward(to));
        assert_eq!(h.entity_readable(BIZ, E), Err(to));
        assert_eq!(t.route_delta(BIZ, E), DeltaRoute::Apply, "incoming: the source let go");
        let other = (0..).find(|e| *e != E && shard_of(BIZ, *e, SHARDS) == home).unwrap();
        assert_eq!(h.route_delta(BIZ, other), DeltaRoute::Apply, "other entities stay");
    }
}
