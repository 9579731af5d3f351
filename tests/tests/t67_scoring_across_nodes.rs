//! All-or-nothing scoring across nodes: an event sent to one node whose
//! sub-boards are led by the two other nodes (reached with
//! `PeerRequest::CheckScore` and `Propose`) is refused on every board when
//! it would overflow one of them, and its event id stays free.

use plaudit_client::proto::rankings::RankDef;
use plaudit_client::proto::routing::board_shard;
use plaudit_client::proto::scoring::{BoardRef, Outcome, ScoreRequest};
use plaudit_client::proto::window::{window_start, Granularity, TypeId, UtcOffset};
use plaudit_client::proto::{ErrorCode, Request, Response};
use plaudit_tests::raw::RawConn;
use plaudit_tests::Cluster;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const DAY: i64 = 86_400;
const SHARDS: u32 = 6;

fn board(g: Granularity, ts: i64) -> TypeId {
    TypeId { gran: g, start: window_start(g, UtcOffset::UTC, ts), dims: vec![] }
}

fn event(rank: u32, score: i64, ts: i64, event_id: u64) -> Request {
    Request::Score(ScoreRequest { rank, item: 1, score, sub: None, dims: vec![], ts, event_id })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overflow_on_a_board_led_elsewhere_writes_no_board() {
    let cluster = Cluster::builder(3).shards(SHARDS).start();
    cluster.wait_led_by(1, &[1, 2, 3], Duration::from_secs(20)).await;
    let leaders = cluster.leaders();
    let t = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64;
    let (yesterday, today, total) = (
        board(Granularity::Day, t - DAY),
        board(Granularity::Day, t),
        board(Granularity::Total, t),
    );
    let leader = |rank, b: &TypeId| leaders[board_shard(rank, &b.to_key(), SHARDS) as usize];
    // Events go to node 1; today's board and the total are led by nodes 2
    // and 3, one each, so every check and proposal crosses the network.
    let rank = (1..500)
        .find(|&r| {
            let (a, b) = (leader(r, &today), leader(r, &total));
            a.is_some() && b.is_some() && a != b && a != Some(1) && b != Some(1)
        })
        .expect("a ranking whose boards are led by the other two nodes");
    let c = cluster.client().await;
    let granularities = vec![Granularity::Day, Granularity::Total];
    let def = RankDef { granularities, ..plaudit_tests::total_ranking(rank, "spread") };
    c.create_rank(def).await.unwrap();

    // Through node 1, forwarded (a simple client's connection).
    let mut node1 = RawConn::connect(&cluster.node(1).addr()).await;
    let high = i64::MAX - 10;
    node1.send_request(1, event(rank, high, t - DAY, 1)).await;
    match node1.recv().await.body {
        Response::Score(r) => assert!(r.boards.iter().all(|b| b.outcome == Outcome::Applied)),
        other => panic!("{other:?}"),
    }
    node1.send_request(2, event(rank, 100, t, 2)).await;
    match node1.recv().await.body {
        Response::Error(e) => {
            assert_eq!(e.code, ErrorCode::BadRequest, "{e}");
            assert!(e.message.contains(&total.format()), "names the board: {e}");
        }
        other => panic!("expected the overflow to refuse the event, got {other:?}"),
    }
    let score_of = |b: &TypeId| {
        let c = c.clone();
        let b = BoardRef::TypeId(b.format());
        async move { c.scores(rank, b, &[1]).await.unwrap()[0].1 }
    };
    assert_eq!(score_of(&today).await, None, "today's board (node-remote) was not written");
    assert_eq!(score_of(&total).await, Some(high));
    assert_eq!(score_of(&yesterday).await, Some(high));

    node1.send_request(3, event(rank, 5, t, 2)).await;
    match node1.recv().await.body {
        Response::Score(r) => {
            let got: Vec<_> = r.boards.iter().map(|b| (b.outcome, b.score)).collect();
            assert_eq!(got, vec![(Outcome::Applied, Some(5)), (Outcome::Applied, Some(high + 5))]);
        }
        other => panic!("the corrected retry applies everywhere, got {other:?}"),
    }
}
