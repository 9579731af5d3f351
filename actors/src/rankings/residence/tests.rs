use super::*;
use crate::residence::Effect;
use plaudit_proto::routing::board_shard;
use plaudit_proto::ShardId;
use proptest::prelude::*;

const SHARDS: u32 = 4;

fn board() -> BoardKey {
    BoardKey { rank: 3, type_key: b"total:0".to_vec() }
}

fn home() -> ShardId {
    board_shard(3, b"total:0", SHARDS)
}

fn copy() -> MoveCmd {
    MoveCmd::Import(Box::new(BoardCopy {
        board: board(),
        members: vec![(1, 5, 0)],
        next_stamp: 1,
        cap: 0,
        events: vec![],
    }))
}

fn shards() -> Vec<BoardResidences> {
    (0..SHARDS).map(|s| Residences::new(s, SHARDS, [])).collect()
}

#[test]
fn a_board_moves_away_and_back() {
    let (b, h) = (board(), home());
    let t = (h + 1) % SHARDS;
    let mut s = shards();
    assert_eq!(s[h as usize].writable(3, b"total:0"), Ok(()));
    assert_eq!(s[t as usize].writable(3, b"total:0"), Err(h), "not here: ask its home");
    assert_eq!(s[t as usize].readable(3, b"total:0"), Err(h));

    let freeze = MoveCmd::Freeze { key: b.clone(), to: t };
    assert_eq!(
        s[h as usize].step(1, &freeze).unwrap(),
        (Effect::None, Some((Residence::Frozen { to: t }, 1)))
    );
    assert_eq!(s[h as usize].writable(3, b"total:0"), Err(t));
    assert_eq!(s[h as usize].readable(3, b"total:0"), Ok(()), "a frozen board is read");
    assert_eq!(s[t as usize].step(1, &copy()).unwrap().0, Effect::Install);
    assert_eq!(s[t as usize].readable(3, b"total:0"), Ok(()));
    assert_eq!(s[t as usize].writable(3, b"total:0"), Err(t), "not active yet");
    let release = MoveCmd::Release { key: b.clone(), to: t };
    assert_eq!(s[h as usize].step(1, &release).unwrap().0, Effect::Drop);
    assert_eq!(s[h as usize].readable(3, b"total:0"), Err(t));
    let activate = MoveCmd::Activate { key: b.clone() };
    assert_eq!(
        s[t as usize].step(1, &activate).unwrap(),
        (Effect::None, Some((Residence::Here, 1)))
    );
    assert_eq!(s[t as usize].writable(3, b"total:0"), Ok(()));

    // Back home, by move 2: the entry at home says Here, as good as none,
    // and keeps the move's id.
    s[t as usize].step(2, &MoveCmd::Freeze { key: b.clone(), to: h }).unwrap();
    assert_eq!(s[h as usize].step(2, &copy()).unwrap().0, Effect::Install);
    s[t as usize].step(2, &MoveCmd::Release { key: b.clone(), to: h }).unwrap();
    assert_eq!(
        s[h as usize].step(2, &activate).unwrap(),
        (Effect::None, Some((Residence::Here, 2)))
    );
    assert_eq!(s[h as usize].writable(3, b"total:0"), Ok(()));
    assert_eq!(s[t as usize].writable(3, b"total:0"), Err(h), "gone from the target");
}

#[test]
fn repeats_change_nothing_and_misfits_fail() {
    let (b, h) = (board(), home());
    let t = (h + 1) % SHARDS;
    let mut s = shards();
    let freeze = MoveCmd::Freeze { key: b.clone(), to: t };
    s[h as usize].step(1, &freeze).unwrap();
    assert_eq!(s[h as usize].step(1, &freeze).unwrap().0, Effect::None);
    let e = s[h as usize].step(1, &MoveCmd::Freeze { key: b.clone(), to: (t + 1) % SHARDS });
    assert_eq!(e.unwrap_err().code, plaudit_proto::ErrorCode::Refused, "frozen for another");
    assert!(s[h as usize].step(1, &copy()).is_err(), "the source cannot import its own board");
    assert!(s[t as usize].step(1, &MoveCmd::Release { key: b.clone(), to: t }).is_err());
    assert!(s[t as usize].step(1, &MoveCmd::Freeze { key: b.clone(), to: h }).is_err(), "not held");
    let release = MoveCmd::Release { key: b.clone(), to: t };
    s[h as usize].step(1, &release).unwrap();
    assert_eq!(s[h as usize].step(1, &release).unwrap().0, Effect::None, "a repeat drops nothing");
    s[t as usize].step(1, &copy()).unwrap();
    assert_eq!(s[t as usize].step(1, &copy()).unwrap().0, Effect::None, "installed once");
    let activate = MoveCmd::Activate { key: b };
    s[t as usize].step(1, &activate).unwrap();
    assert_eq!(s[t as usize].step(1, &activate).unwrap().0, Effect::None);
    assert!(s[t as usize].step(1, &copy()).is_err(), "an active board is not overwritten");
}

#[test]
fn late_steps_of_a_move_are_refused_or_change_nothing() {
    let (b, h) = (board(), home());
    let t = (h + 1) % SHARDS;
    let mut s = shards();
    let freeze = MoveCmd::Freeze { key: b.clone(), to: t };
    let release = MoveCmd::Release { key: b.clone(), to: t };
    let discard = MoveCmd::Discard { key: b.clone(), to: h };
    let unfreeze = MoveCmd::Unfreeze { key: b.clone() };
    // Move 1, given up after its copy was made.
    s[h as usize].step(1, &freeze).unwrap();
    s[t as usize].step(1, &copy()).unwrap();
    s[t as usize].step(1, &discard).unwrap();
    s[h as usize].step(1, &unfreeze).unwrap();
    let refused = |r: Result<_, plaudit_proto::WireError>| r.unwrap_err().code;
    use plaudit_proto::ErrorCode::Refused;
    assert_eq!(refused(s[h as usize].step(1, &freeze)), Refused, "would hold events for good");
    assert_eq!(refused(s[t as usize].step(1, &copy())), Refused, "a copy nobody reads");
    assert_eq!(s[h as usize].writable(3, b"total:0"), Ok(()));
    // Move 2 goes through; its copy arriving again changes nothing.
    s[h as usize].step(2, &freeze).unwrap();
    assert_eq!(s[t as usize].step(2, &copy()).unwrap().0, Effect::Install);
    s[h as usize].step(2, &release).unwrap();
    assert_eq!(s[t as usize].step(2, &copy()).unwrap().0, Effect::None, "installed once");
    s[t as usize].step(2, &MoveCmd::Activate { key: b.clone() }).unwrap();
    // Move 1's steps, late, anywhere: stale.
    for (x, cmd) in [(h, &freeze), (t, &copy()), (t, &discard), (h, &unfreeze), (h, &release)] {
        assert_eq!(refused(s[x as usize].step(1, cmd)), Refused, "{cmd:?} at {x}");
    }
    assert_eq!(s[t as usize].writable(3, b"total:0"), Ok(()));
    assert_eq!(s[h as usize].readable(3, b"total:0"), Err(t));
}

/// What a step's `effect` on `shard` does to the events each shard holds:
/// an install puts `copy` there (the copy's events), a drop empties it.
fn take_effect(held: &mut [Option<u32>], shard: ShardId, effect: Effect, copy: Option<u32>) {
    match effect {
        Effect::Install => held[shard as usize] = copy,
        Effect::Drop => held[shard as usize] = None,
        Effect::None => {}
        // Only a key whose writes pass through its home takes these.
        Effect::Barrier(_) | Effect::PassHeld(_) | Effect::ApplyHeld | Effect::DropAndPass(_) => {
            panic!("a board's step had effect {effect:?}")
        }
    }
}

/// One thing that happens to the board: an event sent to a shard, or the
/// mover's next step (maybe sent twice, as a mover that lost its leader
/// does), or a new move to a shard.
#[derive(Debug, Clone)]
enum Op {
    Event(ShardId),
    Step {
        twice: bool,
    },
    Move(ShardId),
    /// The move given up before its Copy is recorded, with the copy made
    /// on the target or not.
    Abort {
        copied: bool,
    },
    /// A step taken earlier arrives again, late (proposed by a metadata
    /// leader that lost its place): refused or harmless.
    Late(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..SHARDS).prop_map(Op::Event),
        3 => any::<bool>().prop_map(|twice| Op::Step { twice }),
        1 => (0..SHARDS).prop_map(Op::Move),
        1 => any::<bool>().prop_map(|copied| Op::Abort { copied }),
        2 => any::<usize>().prop_map(Op::Late),
    ]
}

proptest! {
    /// Through any sequence of events and moves, with any step arriving
    /// again late, at most one shard takes events (exactly one while no
    /// move is under way), and every shard that serves a read holds every
    /// event taken (a copy made at the freeze, no event since).
    #[test]
    fn one_writer_and_reads_see_every_event(ops in prop::collection::vec(op(), 1..80)) {
        let mut s = shards();
        // The events each shard's copy holds; the home starts with the board.
        let mut held: Vec<Option<u32>> = (0..SHARDS).map(|x| (x == home()).then_some(0)).collect();
        let mut taken = 0u32;
        let mut at = home();
        // The move under way: (from, to, steps done), and its id.
        let mut moving: Option<(ShardId, ShardId, usize)> = None;
        let mut mv = 0;
        // Every step taken: (shard, move, step, the events its copy holds),
        // for late arrivals.
        let mut steps: Vec<(ShardId, u64, MoveCmd, Option<u32>)> = Vec::new();
        for op in ops {
            match op {
                Op::Event(x) => {
                    if s[x as usize].writable(3, b"total:0").is_ok() {
                        taken += 1;
                        let h = held[x as usize].as_mut().expect("a writer holds the board");
                        *h += 1;
                    }
                }
                Op::Move(to) if moving.is_none() && to != at => {
                    moving = Some((at, to, 0));
                    mv += 1;
                }
                Op::Move(_) => {}
                Op::Abort { copied } => {
                    // Only while the next step is Copy (frozen, not placed).
                    let Some((from, to, 1)) = moving else { continue };
                    let b = board();
                    let mut run = |shard: ShardId, cmd: MoveCmd| {
                        let (effect, _) = s[shard as usize].step(mv, &cmd).expect("the abort fits");
                        let copy = held[from as usize];
                        take_effect(&mut held, shard, effect, copy);
                        steps.push((shard, mv, cmd, held[from as usize]));
                    };
                    if copied {
                        run(to, copy());
                    }
                    run(to, MoveCmd::Discard { key: b.clone(), to: from });
                    run(to, MoveCmd::Discard { key: b.clone(), to: from });
                    run(from, MoveCmd::Unfreeze { key: b.clone() });
                    run(from, MoveCmd::Unfreeze { key: b });
                    moving = None;
                }
                Op::Step { twice } => {
                    let Some((from, to, done)) = moving else { continue };
                    let b = board();
                    let (shard, cmd) = match done {
                        0 => (from, MoveCmd::Freeze { key: b, to }),
                        1 => (to, copy()),
                        2 => (from, MoveCmd::Release { key: b, to }),
                        _ => (to, MoveCmd::Activate { key: b }),
                    };
                    for _ in 0..(1 + usize::from(twice)) {
                        let (effect, _) = s[shard as usize].step(mv, &cmd).expect("the mover's step fits");
                        let copy = held[from as usize];
                        take_effect(&mut held, shard, effect, copy);
                    }
                    steps.push((shard, mv, cmd, held[from as usize]));
                    moving = if done == 3 { at = to; None } else { Some((from, to, done + 1)) };
                }
                Op::Late(i) if !steps.is_empty() => {
                    let (shard, late_mv, cmd, copied) = steps[i % steps.len()].clone();
                    if let Ok((effect, _)) = s[shard as usize].step(late_mv, &cmd) {
                        // An install puts back the copy the step carried,
                        // made when its move froze the board.
                        take_effect(&mut held, shard, effect, copied);
                    }
                }
                Op::Late(_) => {}
            }
            let writers = (0..SHARDS).filter(|&x| s[x as usize].writable(3, b"total:0").is_ok()).count();
            prop_assert!(writers <= 1, "{writers} shards take events");
            if moving.is_none() {
                prop_assert_eq!(writers, 1, "no move under way, and no shard takes events");
            }
            for x in 0..SHARDS {
                if s[x as usize].readable(3, b"total:0").is_ok() {
                    prop_assert_eq!(held[x as usize], Some(taken), "shard {} serves a stale board", x);
                }
            }
        }
    }
}
