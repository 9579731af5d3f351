//! Scoring events at the edges of what a board can hold: an increment that
//! would overflow one sub-board changes none of them and leaves its event
//! id unused, even when the boards sit on different shards; an event dated
//! past the node's future horizon is filtered and creates no sub-board.

use plaudit_client::proto::rankings::RankDef;
use plaudit_client::proto::routing::board_shard;
use plaudit_client::proto::scoring::{BoardRef, Outcome, ScoreRequest};
use plaudit_client::proto::window::{window_start, Granularity, TypeId, UtcOffset};
use plaudit_client::proto::ErrorCode;
use plaudit_client::Client;
use plaudit_tests::Node;
use std::time::{SystemTime, UNIX_EPOCH};

const DAY: i64 = 86_400;

fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

fn def(id: u32) -> RankDef {
    let granularities = vec![Granularity::Day, Granularity::Total];
    RankDef { granularities, ..plaudit_tests::total_ranking(id, "bounds") }
}

fn event(rank: u32, score: i64, ts: i64, event_id: u64) -> ScoreRequest {
    ScoreRequest { rank, item: 1, score, sub: None, dims: vec![], ts, event_id }
}

fn board(g: Granularity, ts: i64) -> TypeId {
    TypeId { gran: g, start: window_start(g, UtcOffset::UTC, ts), dims: vec![] }
}

async fn score_of(c: &Client, rank: u32, t: &TypeId) -> Option<i64> {
    let got = c.scores(rank, BoardRef::TypeId(t.format()), &[1]).await.expect("scores");
    got[0].1
}

#[tokio::test]
async fn an_overflow_on_one_board_writes_no_board_and_keeps_the_event_id_free() {
    let node = Node::start();
    let c = node.client().await;
    let t = now();
    let (yesterday, today, total) = (
        board(Granularity::Day, t - DAY),
        board(Granularity::Day, t),
        board(Granularity::Total, t),
    );
    // A ranking whose "today" and "total" boards live on different shards,
    // so the failing board is not on the shard of the one that would apply.
    let shard = |rank, b: &TypeId| board_shard(rank, &b.to_key(), node.shards());
    let rank = (1..100).find(|&r| shard(r, &today) != shard(r, &total)).expect("a split ranking");
    c.create_rank(def(rank)).await.unwrap();

    // Yesterday's board and the total reach MAX - 10.
    let high = i64::MAX - 10;
    let first = c.score(event(rank, high, t - DAY, 1)).await.expect("first event");
    assert!(first.boards.iter().all(|b| b.outcome == Outcome::Applied), "{first:?}");

    // Today +100 fits today's board but overflows the total: refused whole.
    let err = c.score(event(rank, 100, t, 2)).await.expect_err("overflow on total");
    assert_eq!(err.code(), Some(ErrorCode::BadRequest), "{err}");
    assert!(err.to_string().contains("overflow"), "{err}");
    assert_eq!(score_of(&c, rank, &today).await, None, "today's board was not written");
    assert_eq!(score_of(&c, rank, &total).await, Some(high));
    assert_eq!(score_of(&c, rank, &yesterday).await, Some(high));
    let size = c.board_size(rank, BoardRef::TypeId(today.format())).await.unwrap();
    assert_eq!(size, 0);

    // The same event id, corrected, applies everywhere: it was never used.
    let retry = c.score(event(rank, 5, t, 2)).await.expect("corrected retry");
    let got: Vec<(String, Outcome, Option<i64>)> =
        retry.boards.into_iter().map(|b| (b.type_id, b.outcome, b.score)).collect();
    assert_eq!(
        got,
        vec![
            (today.format(), Outcome::Applied, Some(5)),
            (total.format(), Outcome::Applied, Some(high + 5)),
        ]
    );
    // And a repeat of the corrected event is a duplicate on both boards.
    let again = c.score(event(rank, 5, t, 2)).await.expect("repeat");
    assert!(again.boards.iter().all(|b| b.outcome == Outcome::Duplicate), "{again:?}");
}

#[tokio::test]
async fn events_past_the_future_horizon_are_filtered_and_make_no_board() {
    let node = Node::builder().env("PLAUDIT_SCORE_FUTURE_HORIZON_SECS", 3600).start();
    let c = node.client().await;
    c.create_rank(def(1)).await.unwrap();
    let t = now();

    for (i, ts) in [i64::MAX, t + 2 * 3600, t + 10 * 365 * DAY].into_iter().enumerate() {
        let r = c.score(event(1, 5, ts, 10 + i as u64)).await.expect("a far-future event");
        assert_eq!(r.boards.len(), 2, "{r:?}");
        assert!(r.boards.iter().all(|b| b.outcome == Outcome::Filtered), "ts {ts}: {r:?}");
    }
    let boards = c.boards(1, None, 100).await.unwrap();
    assert!(boards.boards.is_empty(), "no sub-board was created: {boards:?}");

    // Within the horizon (clock skew) events still count.
    let soon = c.score(event(1, 5, t + 1800, 20)).await.unwrap();
    assert!(soon.boards.iter().all(|b| b.outcome == Outcome::Applied), "{soon:?}");

    // The CLI says the same.
    let cli =
        node.cli(&format!("score --rank 1 --item 2 --score 1 --event-id 30 --ts {}", i64::MAX));
    let outcomes: Vec<&str> = cli["boards"]
        .as_array()
        .unwrap_or_else(|| panic!("{cli}"))
        .iter()
        .filter_map(|b| b["outcome"].as_str())
        .collect();
    assert_eq!(outcomes, vec!["filtered", "filtered"]);
}
