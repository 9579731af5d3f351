//! Scoring events at the edges of what a board can hold: an event dated
//! past the node's future horizon is filtered and creates no sub-board.

use plaudit_client::proto::rankings::{Aggregation, RankDef, RankSettings, TieMode};
use plaudit_client::proto::scoring::{Outcome, ScoreRequest};
use plaudit_client::proto::window::{Granularity, UtcOffset};
use plaudit_tests::Node;
use std::time::{SystemTime, UNIX_EPOCH};

const DAY: i64 = 86_400;

fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

fn def(id: u32) -> RankDef {
    RankDef {
        id,
        name: "bounds".into(),
        dims: vec![],
        granularities: vec![Granularity::Day, Granularity::Total],
        utc_offset: UtcOffset::UTC,
        aggregation: Aggregation::Incr,
        ties: TieMode::EarlierFirst,
        settings: RankSettings::default(),
    }
}

fn event(rank: u32, score: i64, ts: i64, event_id: u64) -> ScoreRequest {
    ScoreRequest { rank, item: 1, score, sub: None, dims: vec![], ts, event_id }
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
