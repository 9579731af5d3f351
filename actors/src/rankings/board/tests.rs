//! The board against a sorted-vector model that re-sorts everything on every
//! query: slow and obviously right.

use super::*;
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct ModelRow {
    item: ItemId,
    score: i64,
    sub: u32,
    /// When the row last changed, in apply order.
    seq: u64,
}

struct Model {
    rules: Rules,
    rows: Vec<ModelRow>,
    seq: u64,
}

impl Model {
    fn new(rules: Rules) -> Model {
        Model { rules, rows: Vec::new(), seq: 0 }
    }

    fn apply(&mut self, item: ItemId, score: i64, sub: Option<u32>) -> Result<i64, ()> {
        let custom = self.rules.ties == TieMode::Custom;
        self.seq += 1;
        let seq = self.seq;
        let at = self.rows.iter().position(|r| r.item == item);
        let Some(at) = at else {
            self.rows.push(ModelRow {
                item,
                score,
                sub: if custom { sub.unwrap_or(0) } else { 0 },
                seq,
            });
            self.sort_and_cap();
            return Ok(score);
        };
        let old = self.rows[at].clone();
        let sub = if custom { sub.unwrap_or(old.sub) } else { 0 };
        let new_score = match self.rules.aggregation {
            Aggregation::Incr => old.score.checked_add(score).ok_or(())?,
            Aggregation::Set => score,
            Aggregation::Best => {
                let better =
                    if custom { (score, sub) > (old.score, old.sub) } else { score > old.score };
                if !better {
                    return Ok(old.score);
                }
                score
            }
        };
        if new_score == old.score && sub == old.sub {
            return Ok(old.score);
        }
        self.rows[at] = ModelRow { item, score: new_score, sub, seq };
        self.sort_and_cap();
        Ok(new_score)
    }

    fn sort_and_cap(&mut self) {
        let ties = self.rules.ties;
        self.rows.sort_by(|a, b| {
            b.score
                .cmp(&a.score)
                .then_with(|| match ties {
                    TieMode::EarlierFirst => a.seq.cmp(&b.seq),
                    TieMode::LaterFirst => b.seq.cmp(&a.seq),
                    TieMode::Custom => b.sub.cmp(&a.sub),
                })
                .then_with(|| a.item.cmp(&b.item))
        });
        self.rows.truncate(self.rules.cap);
    }

    fn ranked(&self) -> Vec<Ranked> {
        let custom = self.rules.ties == TieMode::Custom;
        self.rows
            .iter()
            .enumerate()
            .map(|(i, r)| Ranked {
                rank: i as u64 + 1,
                item: r.item,
                score: r.score,
                sub: custom.then_some(r.sub),
            })
            .collect()
    }
}

fn rules_strategy() -> impl Strategy<Value = Rules> {
    (
        prop::sample::select(Aggregation::ALL.to_vec()),
        prop::sample::select(TieMode::ALL.to_vec()),
        prop_oneof![Just(1usize), Just(3), Just(8), Just(1000)],
    )
        .prop_map(|(aggregation, ties, cap)| Rules { aggregation, ties, cap })
}

/// Small scores collide (ties); scores near the limits exercise overflow
/// and the key encoding at its ends.
fn score_strategy() -> impl Strategy<Value = i64> {
    prop_oneof![
        4 => -3i64..6,
        1 => Just(i64::MAX),
        1 => Just(i64::MIN),
        1 => (i64::MAX - 3)..=i64::MAX,
        1 => i64::MIN..=(i64::MIN + 3),
        1 => any::<i64>(),
    ]
}

fn event_strategy() -> impl Strategy<Value = (ItemId, i64, Option<u32>)> {
    (0u64..12, score_strategy(), prop::option::of(0u32..4))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn board_matches_the_sorted_vector_model(
        rules in rules_strategy(),
        events in prop::collection::vec(event_strategy(), 0..120),
        probe_k in 0usize..4,
    ) {
        let mut board = Board::new(rules);
        let mut model = Model::new(rules);
        for (item, score, sub) in events {
            let got = board.apply(item, score, sub).map_err(|_| ());
            let want = model.apply(item, score, sub);
            prop_assert_eq!(got, want, "apply({}, {}, {:?})", item, score, sub);
            let expected = model.ranked();
            prop_assert_eq!(board.top(0, usize::MAX), expected.clone());
            prop_assert_eq!(board.len(), expected.len());
            for item in 0..12u64 {
                let row = expected.iter().find(|r| r.item == item).copied();
                prop_assert_eq!(board.rank_of(item), row);
                prop_assert_eq!(board.score(item), row.map(|r| r.score));
                let around = board.around(item, probe_k);
                match row {
                    None => prop_assert!(around.is_empty()),
                    Some(r) => {
                        let pos = r.rank as usize - 1;
                        let from = pos.saturating_sub(probe_k);
                        let to = (pos + probe_k + 1).min(expected.len());
                        prop_assert_eq!(around, expected[from..to].to_vec());
                    }
                }
            }
        }
        // What is written out rebuilds the same board.
        let stored = board.members();
        prop_assert!(stored.windows(2).all(|w| w[0].0 < w[1].0), "in item order");
        let loaded = Board::from_loaded(rules, stored, board.next_stamp());
        prop_assert_eq!(loaded.top(0, usize::MAX), board.top(0, usize::MAX));
    }

    #[test]
    fn offsets_page_through_the_whole_board(
        scores in prop::collection::vec(-50i64..50, 0..200),
        offset in 0usize..220,
        limit in 0usize..30,
    ) {
        let rules = Rules { aggregation: Aggregation::Set, ties: TieMode::EarlierFirst, cap: 1000 };
        let mut board = Board::new(rules);
        for (i, s) in scores.iter().enumerate() {
            board.apply(i as u64, *s, None).unwrap();
        }
        let all = board.top(0, usize::MAX);
        let page = board.top(offset, limit);
        let want: Vec<_> = all.iter().skip(offset).take(limit).copied().collect();
        prop_assert_eq!(page, want);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// A run (a member's coalesced events) is only a faster way to apply
    /// them: the same per-event results, rank order, stored changes and
    /// stamps as applying them one by one, also around the cap.
    #[test]
    fn a_run_is_the_same_as_applying_its_events_one_by_one(
        rules in rules_strategy(),
        runs in prop::collection::vec(
            (0u64..12, prop::collection::vec((score_strategy(), prop::option::of(0u32..4)), 1..6)),
            1..60,
        ),
    ) {
        let mut fast = Board::new(rules);
        let mut slow = Board::new(rules);
        for (item, events) in runs {
            let mut got = Vec::new();
            {
                let mut run = fast.run(item);
                for &(score, sub) in &events {
                    got.push(run.apply(score, sub));
                }
            }
            let want: Vec<_> = events
                .iter()
                .map(|&(score, sub)| slow.apply(item, score, sub).map(|_| slow.score(item)))
                .collect();
            prop_assert_eq!(got, want);
            prop_assert_eq!(fast.top(0, usize::MAX), slow.top(0, usize::MAX));
            prop_assert_eq!(fast.members(), slow.members());
            prop_assert_eq!(fast.next_stamp(), slow.next_stamp());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// `check` says exactly whether `apply` would fail, and changes nothing:
    /// the edge relies on it to refuse an event before any board applies it.
    #[test]
    fn a_check_predicts_apply_and_changes_nothing(
        rules in rules_strategy(),
        events in prop::collection::vec(event_strategy(), 0..80),
        probes in prop::collection::vec(event_strategy(), 1..20),
    ) {
        let mut board = Board::new(rules);
        for (item, score, sub) in events {
            let _ = board.apply(item, score, sub);
        }
        for (item, score, sub) in probes {
            let (top, stamp, members) = (board.top(0, usize::MAX), board.next_stamp(), board.members());
            let checked = board.check(item, score);
            prop_assert_eq!(board.top(0, usize::MAX), top, "a check moves no one");
            prop_assert_eq!(board.next_stamp(), stamp, "a check takes no stamp");
            prop_assert_eq!(board.members(), members, "a check changes no member");
            let applied = board.apply(item, score, sub);
            prop_assert_eq!(checked.is_err(), applied.is_err(), "{:?} vs {:?}", checked, applied);
            if let (Err(c), Err(a)) = (checked, applied) {
                prop_assert_eq!(c, a);
            }
        }
    }
}

fn rules(aggregation: Aggregation, ties: TieMode) -> Rules {
    Rules { aggregation, ties, cap: 100 }
}

fn items(b: &Board) -> Vec<ItemId> {
    b.top(0, 100).iter().map(|r| r.item).collect()
}

#[test]
fn earlier_first_ranks_who_reached_the_score_first() {
    let mut b = Board::new(rules(Aggregation::Incr, TieMode::EarlierFirst));
    b.apply(9, 10, None).unwrap();
    b.apply(5, 10, None).unwrap();
    assert_eq!(items(&b), vec![9, 5], "9 reached 10 first, despite the higher id");
    b.apply(9, 0, None).unwrap(); // no change: keeps the time it was reached
    assert_eq!(items(&b), vec![9, 5]);
}

#[test]
fn later_first_ranks_who_reached_the_score_last() {
    let mut b = Board::new(rules(Aggregation::Incr, TieMode::LaterFirst));
    b.apply(1, 10, None).unwrap();
    b.apply(2, 10, None).unwrap();
    assert_eq!(items(&b), vec![2, 1]);
}

#[test]
fn custom_orders_by_sub_score_then_member_id() {
    let mut b = Board::new(rules(Aggregation::Set, TieMode::Custom));
    b.apply(3, 10, Some(1)).unwrap();
    b.apply(2, 10, Some(7)).unwrap();
    b.apply(1, 10, Some(1)).unwrap();
    assert_eq!(items(&b), vec![2, 1, 3]);
    assert_eq!(b.rank_of(2).unwrap().sub, Some(7));
}

#[test]
fn best_keeps_the_highest() {
    let mut b = Board::new(rules(Aggregation::Best, TieMode::EarlierFirst));
    assert_eq!(b.apply(1, 50, None), Ok(50));
    assert_eq!(b.apply(1, 20, None), Ok(50));
    assert_eq!(b.apply(1, 70, None), Ok(70));
}

#[test]
fn increments_that_overflow_fail_and_change_nothing() {
    let mut b = Board::new(rules(Aggregation::Incr, TieMode::EarlierFirst));
    b.apply(1, i64::MAX - 1, None).unwrap();
    assert_eq!(b.apply(1, 1, None), Ok(i64::MAX));
    assert!(matches!(b.apply(1, 1, None), Err(BoardError::Overflow { item: 1, .. })));
    assert_eq!(b.score(1), Some(i64::MAX));
    b.apply(2, i64::MIN, None).unwrap();
    assert!(b.apply(2, -1, None).is_err());
    assert_eq!(items(&b), vec![1, 2]);
}

#[test]
fn the_cap_drops_the_lowest() {
    let mut b = Board::new(Rules { cap: 2, ..rules(Aggregation::Incr, TieMode::EarlierFirst) });
    b.apply(1, 5, None).unwrap();
    b.apply(2, 9, None).unwrap();
    b.apply(3, 7, None).unwrap();
    assert_eq!(items(&b), vec![2, 3]);
    let stored = vec![(2, Member { score: 9, tie: 2 }), (3, Member { score: 7, tie: 3 })];
    assert_eq!(b.members(), stored);
    // A member below the cap's floor is dropped at once.
    assert_eq!(b.apply(4, 1, None), Ok(1));
    assert_eq!(b.rank_of(4), None);
    b.set_cap(1);
    assert_eq!(items(&b), vec![2]);
}

#[test]
fn memory_per_member_of_a_large_board() {
    let n = 200_000u64;
    let mut b = Board::new(rules(Aggregation::Incr, TieMode::EarlierFirst));
    b.rules.cap = n as usize;
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b.apply(i, (x % 1_000_000) as i64, None).unwrap();
    }
    let per = b.heap_bytes() as f64 / n as f64;
    eprintln!("board heap: {per:.1} bytes per member ({n} members)");
    // Redis spends ~110 B per member of a large zset; the board must not.
    assert!(per < 110.0, "{per} bytes per member");
    let r = b.rank_of(n / 2).unwrap();
    assert_eq!(b.top(r.rank as usize - 1, 1)[0].item, n / 2);
}

proptest! {
    /// Rows are read from keys (`ranked`): the key must give the score back.
    #[test]
    fn a_score_key_gives_its_score_back(score in any::<i64>()) {
        prop_assert_eq!(score_of_key(score_key(score)), score);
    }
}

#[test]
fn score_keys_at_the_edges() {
    for s in [i64::MIN, i64::MIN + 1, -1, 0, 1, i64::MAX - 1, i64::MAX] {
        assert_eq!(score_of_key(score_key(s)), s);
    }
}
