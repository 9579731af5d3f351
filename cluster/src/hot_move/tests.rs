use super::*;

fn board(n: u8) -> Actor {
    Actor::Board(BoardKey { rank: 1, type_key: vec![n] })
}

fn entity(n: u64) -> Actor {
    Actor::Entity(EntityKey { biz: 1, entity: n })
}

fn hot(actor: Actor, shard: ShardId, rps: u64) -> Hot {
    Hot { actor, shard, rps }
}

const POLICY: Policy = Policy { min_rps: 1000, after: Duration::from_secs(10) };

/// Three nodes leading two shards each (0,1 on node 1; 2,3 on 2; 4,5 on
/// 3), every node a replica of every shard, with `load` on each shard and
/// the `actors` given (their load is in `load` already).
fn look(load: [u64; 6], actors: Vec<Hot>) -> Look {
    Look {
        actors,
        shard_load: load.to_vec(),
        leaders: vec![Some(1), Some(1), Some(2), Some(2), Some(3), Some(3)],
        replicas: vec![vec![1, 2, 3]; 6],
    }
}

/// Node 1 serving a hot board of `hot` on shard 0 beside `beside` more on
/// the same shard; node 2 300, node 3 100 (on shard 4, a board of 50).
fn shared(hot: u64, beside: u64) -> Look {
    let actors = vec![self::hot(board(1), 0, hot), self::hot(board(2), 4, 50)];
    look([hot + beside, 0, 300, 0, 100, 0], actors)
}

/// Decides at `t0`, then at each later second given, and returns the last.
fn after(m: &mut HotMoves, l: &Look, t0: Instant, secs: &[u64]) -> Option<Relief> {
    let mut last = m.decide(POLICY, l, t0);
    for s in secs {
        last = m.decide(POLICY, l, t0 + Duration::from_secs(*s));
    }
    last
}

#[test]
fn a_board_sharing_its_shard_hot_for_long_enough_moves_to_the_quietest_node() {
    let mut m = HotMoves::default();
    let t0 = Instant::now();
    assert_eq!(after(&mut m, &shared(5000, 2000), t0, &[5]), None, "not hot for long yet");
    let moved = m.decide(POLICY, &shared(5000, 2000), t0 + Duration::from_secs(10));
    // Node 3 is quietest; of its shards, 5 has no load (4 has some).
    assert_eq!(moved, Some(Relief::Move(board(1), 5)));
    let again = m.decide(POLICY, &shared(5000, 2000), t0 + Duration::from_secs(30));
    assert_eq!(again, None, "not again within the cooldown");
}

#[test]
fn a_move_given_up_is_not_picked_again_for_an_hour() {
    let mut m = HotMoves::default();
    let t0 = Instant::now();
    assert_eq!(after(&mut m, &shared(5000, 2000), t0, &[10]), Some(Relief::Move(board(1), 5)));
    m.gave_up(board(1), t0 + Duration::from_secs(12));
    let past_cooldown = t0 + COOLDOWN + Duration::from_secs(20);
    assert_eq!(after(&mut m, &shared(5000, 2000), past_cooldown, &[10, 20]), None);
    // Hot all along: picked again as soon as the hour is over.
    let past = t0 + GAVE_UP_FOR + Duration::from_secs(20);
    assert_eq!(after(&mut m, &shared(5000, 2000), past, &[]), Some(Relief::Move(board(1), 5)));
}

#[test]
fn a_break_in_the_heat_starts_the_wait_over() {
    let mut m = HotMoves::default();
    let t0 = Instant::now();
    m.decide(POLICY, &shared(5000, 2000), t0);
    m.decide(POLICY, &shared(500, 2000), t0 + Duration::from_secs(6));
    assert_eq!(m.decide(POLICY, &shared(5000, 2000), t0 + Duration::from_secs(11)), None);
    let later = m.decide(POLICY, &shared(5000, 2000), t0 + Duration::from_secs(21));
    assert!(later.is_some());
}

#[test]
fn a_relief_that_would_only_shift_the_heat_is_not_made() {
    // Node 1 serves nothing but the board: moved, node 3 would carry
    // 100 + 5000, more than node 1's 5000 now; swapped, the same.
    let mut m = HotMoves::default();
    assert_eq!(after(&mut m, &shared(5000, 0), Instant::now(), &[10, 20]), None);
}

#[test]
fn off_and_leaderless_shards_relieve_nothing() {
    let t0 = Instant::now();
    let off = Policy { min_rps: 0, ..POLICY };
    let mut m = HotMoves::default();
    m.decide(off, &shared(5000, 2000), t0);
    assert_eq!(m.decide(off, &shared(5000, 2000), t0 + Duration::from_secs(20)), None);
    let mut l = shared(5000, 2000);
    l.leaders[0] = None;
    let mut m = HotMoves::default();
    assert_eq!(after(&mut m, &l, t0, &[20]), None, "no known source");
}

#[test]
fn an_entity_sharing_its_shard_moves_like_a_board() {
    let l = look([7000, 0, 300, 0, 100, 0], vec![hot(entity(7), 0, 5000)]);
    let mut m = HotMoves::default();
    let t0 = Instant::now();
    assert_eq!(after(&mut m, &l, t0, &[10]), Some(Relief::Move(entity(7), 5)));
    // Moved before (it lives on node 2's shard 2 now, away from its
    // home): moved on all the same, to the quietest node's quietest shard.
    let l = look([0, 0, 7000, 0, 100, 0], vec![hot(entity(7), 2, 5000)]);
    let mut m = HotMoves::default();
    assert_eq!(after(&mut m, &l, t0, &[10]), Some(Relief::Move(entity(7), 0)));
}

#[test]
fn a_node_whose_hot_actor_is_its_shard_swaps_its_other_shard_to_a_quiet_node() {
    // Node 1: the entity alone on shard 0 (5000), users on shard 1 (2000).
    // Moving the entity would leave node 3 at 5100; swapping shard 1 for
    // node 3's idle shard 5 leaves node 1 at 5000: the swap.
    let l = look([5000, 2000, 300, 0, 100, 0], vec![hot(entity(7), 0, 5000)]);
    let mut m = HotMoves::default();
    let t0 = Instant::now();
    assert_eq!(after(&mut m, &l, t0, &[5]), None, "not the choice for long yet");
    let swap = Swap { hot: 1, from: 1, back: 5, to: 3 };
    assert_eq!(m.decide(POLICY, &l, t0 + Duration::from_secs(10)), Some(Relief::Swap(swap)));
    // Until the leaders follow, nothing else.
    assert_eq!(m.decide(POLICY, &l, t0 + Duration::from_secs(12)), None);
    // Followed: node 1 leads 0 and 5, node 3 leads 1 and 4.
    let mut done = l.clone();
    done.leaders = vec![Some(1), Some(3), Some(2), Some(2), Some(3), Some(1)];
    assert_eq!(after(&mut m, &done, t0 + Duration::from_secs(13), &[20, 40]), None);
}

#[test]
fn a_move_must_beat_the_swap_by_min_rps() {
    // Node 1: the entity (3,300) and a little else (120) on shard 0, users
    // on shard 1. Moving the entity leaves node 1 at 3,340 and node 2 at
    // 3,380; swapping shard 1 for node 2's shard 2 leaves 3,440: close
    // enough for the swap, which leaves the entity where it is.
    let l = look([3420, 3220, 20, 60, 40, 40], vec![hot(entity(7), 0, 3300)]);
    let mut m = HotMoves::default();
    let swap = Swap { hot: 1, from: 1, back: 2, to: 2 };
    assert_eq!(after(&mut m, &l, Instant::now(), &[10]), Some(Relief::Swap(swap)));
    // Far better moved: node 1's second shard carries less than the
    // entity's shard holds beside the entity.
    let l = look([5000, 1100, 20, 60, 40, 40], vec![hot(entity(7), 0, 3000)]);
    let mut m = HotMoves::default();
    assert_eq!(after(&mut m, &l, Instant::now(), &[10]), Some(Relief::Move(entity(7), 2)));
}

#[test]
fn a_swap_not_followed_in_time_lets_the_policy_decide_again() {
    let l = look([5000, 2000, 300, 0, 100, 0], vec![]);
    let mut m = HotMoves::default();
    let t0 = Instant::now();
    assert!(matches!(after(&mut m, &l, t0, &[10]), Some(Relief::Swap(_))));
    let late = t0 + Duration::from_secs(10) + SWAP_WAIT;
    // Shards 1 and 5 cool down: what relieves node 1 now is giving its
    // shard 0 (node 1 then at 2,100, node 3 at 5,000).
    let next = after(&mut m, &l, late, &[10]);
    assert_eq!(next, Some(Relief::Swap(Swap { hot: 0, from: 1, back: 4, to: 3 })));
}

#[test]
fn a_swap_goes_only_to_a_replica() {
    let mut l = look([5000, 2000, 300, 0, 100, 0], vec![]);
    // Node 3 holds no replica of shard 1; node 2 does and has shard 3 idle.
    l.replicas[1] = vec![1, 2];
    let mut m = HotMoves::default();
    let swap = Swap { hot: 1, from: 1, back: 3, to: 2 };
    assert_eq!(after(&mut m, &l, Instant::now(), &[10]), Some(Relief::Swap(swap)));
}

#[test]
fn a_swap_must_relieve_by_min_rps() {
    // Node 1's second shard carries 900, below the policy's 1000.
    let l = look([5000, 900, 300, 0, 100, 0], vec![]);
    let mut m = HotMoves::default();
    assert_eq!(after(&mut m, &l, Instant::now(), &[10, 20]), None);
}

mod swaps {
    use super::super::*;
    use proptest::prelude::*;

    fn arb_look() -> impl Strategy<Value = Look> {
        (
            prop::collection::vec(0u64..10_000, 6),
            prop::collection::vec(prop::option::weighted(0.9, 1u64..=4), 6),
            prop::collection::vec(prop::collection::btree_set(1u64..=4, 1..=3), 6),
        )
            .prop_map(|(shard_load, leaders, replicas)| Look {
                actors: Vec::new(),
                shard_load,
                leaders,
                replicas: replicas.into_iter().map(|r| r.into_iter().collect()).collect(),
            })
    }

    proptest! {
        /// A swap found is between the most loaded node and another, of a
        /// shard each leads, to a replica each time; after it, the highest
        /// load is the one reported, at least `min_gain` below the giver's
        /// load before; and no node leads more or fewer shards.
        #[test]
        fn a_swap_relieves_the_busiest_node_and_keeps_every_share(
            look in arb_look(),
            min_gain in 1u64..3_000,
        ) {
            let Some((s, max)) = swap::best(&look, min_gain, |_| false) else { return Ok(()) };
            let nodes = look.leader_nodes();
            let busiest = nodes.iter().map(|&n| look.node_load(n)).max().unwrap();
            prop_assert_eq!(look.node_load(s.from), busiest);
            prop_assert_eq!(look.leaders[s.hot as usize], Some(s.from));
            prop_assert_eq!(look.leaders[s.back as usize], Some(s.to));
            prop_assert!(look.replicas[s.hot as usize].contains(&s.to));
            prop_assert!(look.replicas[s.back as usize].contains(&s.from));
            let mut after = look.clone();
            after.leaders[s.hot as usize] = Some(s.to);
            after.leaders[s.back as usize] = Some(s.from);
            let after_max = nodes.iter().map(|&n| after.node_load(n)).max().unwrap();
            prop_assert_eq!(after_max, max);
            prop_assert!(max + min_gain <= busiest);
            for n in nodes {
                prop_assert_eq!(after.led_by(n).count(), look.led_by(n).count());
            }
            prop_assert!(s.followed(&after.leaders));
        }

        /// Shards cooling are never part of a swap.
        #[test]
        fn a_cooling_shard_is_never_swapped(look in arb_look(), cool in 0u32..6) {
            if let Some((s, _)) = swap::best(&look, 1, |x| x == cool) {
                prop_assert!(s.hot != cool && s.back != cool);
            }
        }
    }
}
