//! Coalescing on a real node: a burst of concurrent events on a few hot
//! members is merged per member before it is proposed (the metric says so),
//! and every event still gets its own exact outcome: each event id is sent
//! twice at once and exactly one of the two is applied, and the scores
//! equal the sum of the distinct events.

use plaudit_client::proto::scoring::{BoardRef, Outcome, ScoreRequest};
use plaudit_client::ClientOptions;
use plaudit_tests::{metric_sum, total_ranking, Node};
use std::collections::HashMap;

const WRITERS: u64 = 32;
const EVENTS: u64 = 40;
const MEMBERS: u64 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_members_are_coalesced_and_every_event_keeps_its_outcome() {
    let node = Node::builder().shards(1).start();
    let c = node.client_with(ClientOptions { pool_size: 4, ..ClientOptions::default() }).await;
    c.create_rank(total_ranking(1, "hot")).await.unwrap();

    let event = |id: u64| ScoreRequest {
        rank: 1,
        item: id % MEMBERS,
        score: (id % 5) as i64 + 1,
        sub: None,
        dims: vec![],
        ts: 0,
        event_id: id,
    };
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            let mut outcomes = Vec::new();
            for i in 0..EVENTS {
                let id = w * EVENTS + i;
                // The same event twice, concurrently: often in one batch.
                let (a, b) = tokio::join!(c.score(event(id)), c.score(event(id)));
                for r in [a, b] {
                    outcomes.push((id, r.expect("score").boards[0].outcome));
                }
            }
            outcomes
        }));
    }
    let mut per_event: HashMap<u64, Vec<Outcome>> = HashMap::new();
    for t in tasks {
        for (id, o) in t.await.unwrap() {
            per_event.entry(id).or_default().push(o);
        }
    }
    for (id, mut o) in per_event {
        o.sort_by_key(|o| *o as u8);
        assert_eq!(o, vec![Outcome::Applied, Outcome::Duplicate], "event {id}");
    }

    let mut want = vec![0i64; MEMBERS as usize];
    for id in 0..WRITERS * EVENTS {
        want[(id % MEMBERS) as usize] += (id % 5) as i64 + 1;
    }
    let items: Vec<u64> = (0..MEMBERS).collect();
    let got = c.scores(1, BoardRef::TypeId("total:0".into()), &items).await.unwrap();
    let got: Vec<i64> = got.iter().map(|(_, s)| s.unwrap_or(0)).collect();
    assert_eq!(got, want, "each distinct event counted exactly once");

    let merged = metric_sum(&node.metrics_text(), "plaudit_rank_events_coalesced_total");
    assert!(merged.unwrap_or(0.0) > 0.0, "events of hot members were coalesced: {merged:?}");
}
