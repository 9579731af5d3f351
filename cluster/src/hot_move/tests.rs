use super::*;

fn board(n: u8) -> BoardKey {
    BoardKey { rank: 1, type_key: vec![n] }
}

const POLICY: Policy = Policy { min_rps: 1000, after: Duration::from_secs(10) };

/// Three nodes leading two shards each (0,1 on node 1; 2,3 on 2; 4,5 on 3),
/// node 1 serving `hot` on shard 0 and `rest` besides.
fn look(hot: u64, rest: u64) -> Look {
    let mut node_load = HashMap::new();
    node_load.insert(1, hot + rest);
    node_load.insert(2, 300);
    node_load.insert(3, 100);
    Look {
        boards: vec![(board(1), 0, hot), (board(2), 4, 50)],
        node_load,
        leaders: vec![Some(1), Some(1), Some(2), Some(2), Some(3), Some(3)],
    }
}

#[test]
fn a_board_hot_for_long_enough_moves_to_the_quietest_node() {
    let mut m = HotMoves::default();
    let t0 = Instant::now();
    assert_eq!(m.decide(POLICY, &look(5000, 2000), t0), None, "not hot for long yet");
    assert_eq!(m.decide(POLICY, &look(5000, 2000), t0 + Duration::from_secs(5)), None);
    let moved = m.decide(POLICY, &look(5000, 2000), t0 + Duration::from_secs(10));
    // Node 3 is quietest; of its shards, 5 has no hot board (4 has one).
    assert_eq!(moved, Some((board(1), 5)));
    let again = m.decide(POLICY, &look(5000, 2000), t0 + Duration::from_secs(30));
    assert_eq!(again, None, "not again within the cooldown");
}

#[test]
fn a_break_in_the_heat_starts_the_wait_over() {
    let mut m = HotMoves::default();
    let t0 = Instant::now();
    m.decide(POLICY, &look(5000, 2000), t0);
    m.decide(POLICY, &look(500, 2000), t0 + Duration::from_secs(6));
    assert_eq!(m.decide(POLICY, &look(5000, 2000), t0 + Duration::from_secs(11)), None);
    let later = m.decide(POLICY, &look(5000, 2000), t0 + Duration::from_secs(21));
    assert!(later.is_some());
}

#[test]
fn a_move_that_would_only_shift_the_heat_is_not_made() {
    let mut m = HotMoves::default();
    let t0 = Instant::now();
    // Node 1 serves nothing but the board: moved, node 3 would carry
    // 100 + 5000, more than node 1's 5000 now.
    m.decide(POLICY, &look(5000, 0), t0);
    assert_eq!(m.decide(POLICY, &look(5000, 0), t0 + Duration::from_secs(10)), None);
}

#[test]
fn off_and_leaderless_shards_move_nothing() {
    let mut m = HotMoves::default();
    let t0 = Instant::now();
    let off = Policy { min_rps: 0, ..POLICY };
    m.decide(off, &look(5000, 2000), t0);
    assert_eq!(m.decide(off, &look(5000, 2000), t0 + Duration::from_secs(20)), None);
    let mut l = look(5000, 2000);
    l.leaders[0] = None;
    let mut m = HotMoves::default();
    m.decide(POLICY, &l, t0);
    assert_eq!(m.decide(POLICY, &l, t0 + Duration::from_secs(20)), None, "no known source");
}
