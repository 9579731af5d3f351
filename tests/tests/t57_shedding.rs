//! Shedding under overload: on one shard with a short proposal queue, a
//! burst of scoring events from two rankings sheds the low-priority ones
//! while every high-priority one is applied, and the boards count exactly
//! what was applied.

use plaudit_client::proto::rankings::{Aggregation, RankDef, RankSettings, TieMode};
use plaudit_client::proto::scoring::{BoardRef, Outcome, ScoreRequest};
use plaudit_client::proto::window::{Granularity, UtcOffset};
use plaudit_client::ClientOptions;
use plaudit_tests::{metric_sum, Node};

fn ranking(id: u32, priority: u8) -> RankDef {
    RankDef {
        id,
        name: format!("p{priority}"),
        dims: vec![],
        granularities: vec![Granularity::Total],
        utc_offset: UtcOffset::UTC,
        aggregation: Aggregation::Incr,
        ties: TieMode::EarlierFirst,
        settings: RankSettings { priority, ..RankSettings::default() },
    }
}

#[tokio::test]
async fn low_priority_events_are_shed_first() {
    // 44 requests in flight never fill the 48-slot queue past the top class's
    // threshold (10/11), but often pass the bottom class's (1/11).
    let node = Node::builder().shards(1).env("PLAUDIT_MAX_PENDING_PER_SHARD", 48).start();
    let opts = ClientOptions { pool_size: 4, ..ClientOptions::default() };
    let c = node.client_with(opts).await;
    c.create_rank(ranking(1, 0)).await.unwrap();
    c.create_rank(ranking(2, 9)).await.unwrap();

    let mut tasks = Vec::new();
    for w in 0..44u64 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            let (mut low_applied, mut low_shed, mut high_applied) = (0i64, 0u64, 0i64);
            for i in 0..60u64 {
                let rank = if (w + i) % 2 == 0 { 1 } else { 2 };
                let e = ScoreRequest {
                    rank,
                    item: w % 4,
                    score: 1,
                    sub: None,
                    dims: vec![],
                    ts: 0,
                    event_id: w * 1000 + i,
                };
                let r = c.score(e).await.expect("score");
                match (rank, r.boards[0].outcome) {
                    (1, Outcome::Applied) => low_applied += 1,
                    (1, Outcome::Shed) => low_shed += 1,
                    (2, Outcome::Applied) => high_applied += 1,
                    other => panic!("unexpected {other:?}"),
                }
            }
            (low_applied, low_shed, high_applied)
        }));
    }
    let (mut low_applied, mut low_shed, mut high_applied) = (0, 0, 0);
    for t in tasks {
        let (a, s, h) = t.await.unwrap();
        low_applied += a;
        low_shed += s;
        high_applied += h;
    }
    assert!(low_shed > 0, "the burst shed low-priority events (applied {low_applied})");
    assert_eq!(high_applied, 44 * 30, "every high-priority event was applied");

    let total = |rank| {
        let c = c.clone();
        async move {
            let s = c.scores(rank, BoardRef::TypeId("total:0".into()), &[0, 1, 2, 3]).await;
            s.unwrap().iter().map(|(_, s)| s.unwrap_or(0)).sum::<i64>()
        }
    };
    assert_eq!(total(1).await, low_applied, "shed events changed nothing");
    assert_eq!(total(2).await, high_applied);
    let metric = metric_sum(&node.metrics_text(), "plaudit_rank_events_shed_total");
    assert_eq!(metric, Some(low_shed as f64), "every shed event is counted");
}
