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

/// Moves of one entity, from home, on and back home, through the
/// placements record the metadata group keeps (`PlacementsOf`): the
/// mover's steps as `cluster/src/actor_mover.rs` takes them, and their
/// effects as `shard/entity_moves.rs` applies them.
mod moves {
    use super::*;
    use plaudit_proto::placement::{EntityPlacements, MoveOf, MoveStep};

    /// What travels on a stream between two shards.
    #[derive(Debug, Clone, Copy)]
    enum Msg {
        Delta(u32),
        Barrier(MoveId),
    }

    struct World {
        shards: Vec<Shard>,
        streams: Vec<VecDeque<Msg>>,
        /// Each move's copy, as its Copy step exported it (a late Import
        /// carries the same copy).
        copies: std::collections::HashMap<MoveId, Vec<u32>>,
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
            let streams = (0..SHARDS * SHARDS).map(|_| VecDeque::new()).collect();
            World { shards, streams, copies: Default::default() }
        }

        fn send(&mut self, from: ShardId, to: ShardId, m: Msg) {
            self.streams[(from * SHARDS + to) as usize].push_back(m);
        }

        fn arrive(&mut self, at: ShardId, m: Msg) {
            let s = &mut self.shards[at as usize];
            match m {
                Msg::Delta(d) => match s.res.route_delta(BIZ, E) {
                    DeltaRoute::Apply => s.applied.push(d),
                    DeltaRoute::Hold => s.held.push(d),
                    DeltaRoute::Forward(to) => self.send(at, to, m),
                },
                Msg::Barrier(mv) => {
                    s.res.drained(&key(), mv);
                }
            }
        }

        fn pump(&mut self, i: usize) {
            if let Some(m) = self.streams[i].pop_front() {
                self.arrive(i as ShardId % SHARDS, m);
            }
        }

        fn drain(&mut self) {
            while let Some(i) = self.streams.iter().position(|s| !s.is_empty()) {
                self.pump(i);
            }
        }

        /// Sends what `at` holds on to `to`, in order.
        fn pass(&mut self, at: ShardId, to: ShardId) {
            for d in std::mem::take(&mut self.shards[at as usize].held) {
                self.send(at, to, Msg::Delta(d));
            }
        }

        /// Step `cmd` of move `mv` on shard `at`, refused or applied with
        /// its effect.
        fn try_step(
            &mut self,
            at: ShardId,
            mv: MoveId,
            cmd: &EntityMoveCmd,
        ) -> Result<(), WireError> {
            let was = self.shards[at as usize].res.get(&key());
            let (effect, _) = self.shards[at as usize].res.step(mv, cmd)?;
            let s = &mut self.shards[at as usize];
            match (effect, cmd) {
                (Effect::Install, MoveCmdOf::Import(_)) => s.applied = self.copies[&mv].clone(),
                (Effect::Drop, MoveCmdOf::Release { to, .. }) => {
                    s.applied.clear();
                    self.pass(at, *to);
                }
                (Effect::Drop, _) => s.applied.clear(),
                (Effect::DropAndPass(to), _) => {
                    s.applied.clear();
                    self.pass(at, to);
                }
                (Effect::PassHeld(to), _) => self.pass(at, to),
                (Effect::Barrier(to), _) => self.send(at, to, Msg::Barrier(mv)),
                (Effect::ApplyHeld, _) => {
                    let held = std::mem::take(&mut s.held);
                    s.applied.extend(held);
                }
                (Effect::None, MoveCmdOf::Unfreeze { .. })
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

    /// The commands the mover proposes for move `m`'s current step, with
    /// the shard each goes to.
    fn commands(w: &mut World, m: &MoveOf<EntityKey>) -> Vec<(ShardId, EntityMoveCmd)> {
        let home = shard_of(BIZ, E, SHARDS);
        let k = key();
        match m.step {
            MoveStep::Hold => vec![(home, MoveCmdOf::Hold { key: k, to: m.from })],
            MoveStep::Freeze => vec![(m.from, MoveCmdOf::Freeze { key: k, to: m.to })],
            MoveStep::Copy => {
                // The export: the frozen source's state.
                let src = &w.shards[m.from as usize];
                assert!(
                    matches!(src.res.get(&k), Some(Residence::Frozen { .. })),
                    "exported frozen"
                );
                let applied = src.applied.clone();
                w.copies.entry(m.id).or_insert(applied);
                let c = EntityCopy { key: k, likes: 0, dislikes: 0, owner: None, likers: vec![] };
                vec![(m.to, MoveCmdOf::Import(Box::new(c)))]
            }
            MoveStep::Release => vec![(m.from, MoveCmdOf::Release { key: k, to: m.to })],
            MoveStep::Pass => vec![(home, MoveCmdOf::Pass { key: k, to: m.to })],
            MoveStep::Activate => vec![(m.to, MoveCmdOf::Activate { key: k })],
            MoveStep::Abort => {
                let mut v = vec![
                    (m.to, MoveCmdOf::Discard { key: k, to: m.from }),
                    (m.from, MoveCmdOf::Unfreeze { key: k }),
                ];
                if m.through_home(SHARDS) {
                    v.push((home, MoveCmdOf::Pass { key: k, to: m.from }));
                }
                v
            }
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Like,
        Pump(usize),
        /// A move to the shard this far from where the entity lives.
        Move(u32),
        Step {
            twice: bool,
        },
        Abort,
        Late(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => Just(Op::Like),
            5 => any::<usize>().prop_map(Op::Pump),
            2 => (1..SHARDS).prop_map(Op::Move),
            4 => any::<bool>().prop_map(|twice| Op::Step { twice }),
            1 => Just(Op::Abort),
            3 => any::<usize>().prop_map(Op::Late),
        ]
    }

    /// Takes the current move's step if its commands fit (a freeze after
    /// a hold waits for the barrier: refused until then, as the mover
    /// tries again); returns whether it was taken. Every command proposed
    /// goes into `taken`, applied or refused: any may land again late.
    fn step(
        w: &mut World,
        p: &mut EntityPlacements,
        taken: &mut Vec<(ShardId, MoveId, EntityMoveCmd)>,
        twice: bool,
    ) -> bool {
        let Some(m) = p.moves.first().cloned() else { return false };
        for (at, cmd) in commands(w, &m) {
            match w.try_step(at, m.id, &cmd) {
                Ok(()) => {}
                Err(e) => {
                    taken.push((at, m.id, cmd.clone()));
                    assert!(
                        m.step == MoveStep::Freeze && m.through_home(SHARDS),
                        "the mover's {cmd:?} at {at} was refused: {e:?}"
                    );
                    return false;
                }
            }
            if twice {
                w.try_step(at, m.id, &cmd).expect("a repeat");
            }
            taken.push((at, m.id, cmd));
        }
        *p = p.advance(&key(), m.step, SHARDS).expect("recorded");
        true
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        /// Through any interleaving of new deltas, deliveries and moves of
        /// one entity (on, and back home, some given up, steps repeated or
        /// arriving again late), once every stream is drained the shard
        /// the placements name has applied every delta exactly once, in the
        /// order they were made, and no other shard applied or holds any.
        #[test]
        fn every_delta_reaches_the_owner_once_and_in_order_over_many_moves(
            ops in prop::collection::vec(op(), 1..200),
        ) {
            let home = shard_of(BIZ, E, SHARDS);
            let mut w = World::new();
            let mut p = EntityPlacements::default();
            let mut made = 0u32;
            let mut taken = Vec::new();
            let mut moves = 0;
            for op in ops {
                match op {
                    Op::Like => {
                        w.arrive(home, Msg::Delta(made));
                        made += 1;
                    }
                    // Some stream that carries something, so barriers
                    // often arrive while a move is under way.
                    Op::Pump(i) => {
                        let busy: Vec<usize> =
                            (0..w.streams.len()).filter(|j| !w.streams[*j].is_empty()).collect();
                        if !busy.is_empty() {
                            w.pump(busy[i % busy.len()]);
                        }
                    }
                    Op::Move(off) if p.moves.is_empty() => {
                        let at = p.home_of(&key(), SHARDS);
                        p = p.start(key(), (at + off) % SHARDS, SHARDS, 0).expect("a move");
                        moves += 1;
                    }
                    Op::Move(_) => {}
                    Op::Step { twice } => {
                        step(&mut w, &mut p, &mut taken, twice);
                    }
                    // Given up at any step the record allows (the mover
                    // gives up only some of them). The step it was at
                    // may have been proposed and not applied yet: an old
                    // metadata leader's proposal can land late.
                    Op::Abort => {
                        if let Some(a) = p.abort(&key()) {
                            let m = p.moves[0].clone();
                            let exportable = matches!(
                                w.shards[m.from as usize].res.get(&key()),
                                Some(Residence::Frozen { .. })
                            );
                            if m.step != MoveStep::Copy || exportable {
                                for (at, cmd) in commands(&mut w, &m) {
                                    taken.push((at, m.id, cmd));
                                }
                            }
                            p = a;
                        }
                    }
                    Op::Late(i) if !taken.is_empty() => {
                        let (at, mv, cmd) = taken[i % taken.len()].clone();
                        let _ = w.try_step(at, mv, &cmd);
                    }
                    Op::Late(_) => {}
                }
            }
            // Finish the move under way (a freeze waiting for its barrier
            // gets it once the streams are drained).
            let mut waits = 0;
            while !p.moves.is_empty() {
                if !step(&mut w, &mut p, &mut taken, false) {
                    w.drain();
                    waits += 1;
                    prop_assert!(waits < 3, "a move stuck: {:?}", p.moves);
                }
            }
            // Every step once more, late, after the moves ended, the
            // earliest landing last (a late Freeze after its Unfreeze).
            for (at, mv, cmd) in taken.iter().rev() {
                let _ = w.try_step(*at, *mv, cmd);
            }
            w.drain();
            let owner = p.home_of(&key(), SHARDS);
            let want: Vec<u32> = (0..made).collect();
            prop_assert_eq!(&w.shards[owner as usize].applied, &want, "owner {} after {} moves", owner, moves);
            for (i, s) in w.shards.iter().enumerate() {
                prop_assert!(s.held.is_empty(), "shard {} holds {:?}", i, s.held);
                if i as ShardId != owner {
                    prop_assert!(s.applied.is_empty(), "shard {} applied {:?}", i, s.applied);
                }
            }
        }
    }
}
