//! A board that stays hot moves on its own (`hot_move_min_rps`) to a shard
//! led by a quieter node, and loses nothing on the way.
//!
//! ```text
//! 3 nodes, 6 shards, hot_move_min_rps 100, hot_move_after_secs 2
//! two boards of one ranking on one shard, each scored, then
//! read (top) ~300 times a second each through the SDK
//!   ─> the metadata leader sees that node serve both: one board moves to a
//!      shard another node leads (a single hot board would not: moving it
//!      would only carry the heat elsewhere)
//! end ─ the moved board's scores are what was scored; the other board stays
//! ```

use plaudit_client::proto::placement::{BoardKey, Placements};
use plaudit_client::proto::routing::board_shard;
use plaudit_client::proto::scoring::{BoardRef, Outcome, ScoreRequest};
use plaudit_client::proto::window::TypeId;
use plaudit_client::proto::{Request, Response};
use plaudit_client::Client;
use plaudit_tests::{now_secs, total_ranking, Cluster};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const RANK: u32 = 93;
const SHARDS: u32 = 6;
const ITEMS: u64 = 20;

fn type_id(room: u64) -> String {
    format!("total:0_{room}")
}

fn key(room: u64) -> BoardKey {
    BoardKey { rank: RANK, type_key: TypeId::parse(&type_id(room)).expect("a type id").to_key() }
}

async fn placements(client: &Client) -> Placements {
    match client.request(Request::Placements).await {
        Ok(Response::Placements(p)) => *p,
        other => panic!("Placements answered {other:?}"),
    }
}

/// Scores item `i` with `i` on the room's board, once per item.
async fn score_room(client: &Client, room: u64) {
    for item in 1..=ITEMS {
        let event = ScoreRequest {
            rank: RANK,
            item,
            score: item as i64,
            sub: None,
            dims: vec![("room".into(), room)],
            ts: now_secs(),
            event_id: room << 32 | item,
        };
        let reply = client.score(event).await.expect("a score");
        assert!(matches!(reply.boards[0].outcome, Outcome::Applied), "{reply:?}");
    }
}

/// Every item's score on the room's board is its id.
async fn check_room(client: &Client, room: u64) {
    let items: Vec<u64> = (1..=ITEMS).collect();
    let rows = client
        .scores(RANK, BoardRef::TypeId(type_id(room)), &items)
        .await
        .expect("the board's scores");
    let want: Vec<(u64, Option<i64>)> = items.iter().map(|&i| (i, Some(i as i64))).collect();
    assert_eq!(rows, want, "room {room}'s board");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_board_that_stays_hot_moves_to_a_quieter_node_on_its_own() {
    let (cluster, admin) = Cluster::hot_relief(SHARDS).await;
    let def = total_ranking(RANK, "hot");
    admin
        .create_rank(plaudit_client::proto::rankings::RankDef { dims: vec!["room".into()], ..def })
        .await
        .expect("the ranking");

    // Two rooms whose boards live on one shard.
    let leaders = cluster.leaders();
    let shard = |room: u64| board_shard(RANK, &key(room).type_key, SHARDS);
    let led_by = |room: u64| leaders[shard(room) as usize];
    let (a, b) = (1..200u64)
        .flat_map(|a| (a + 1..200).map(move |b| (a, b)))
        .find(|&(a, b)| led_by(a).is_some() && shard(a) == shard(b))
        .expect("two rooms on one led shard");
    let node = led_by(a).expect("a leader");
    eprintln!("t93: rooms {a} and {b}, both led by node {node} (leaders {leaders:?})");
    for room in [a, b] {
        score_room(&admin, room).await;
    }

    // Both boards read, hard, by type id (hot keys name them so).
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for room in [a, b] {
        for _ in 0..2 {
            let (client, stop) = (cluster.client().await, stop.clone());
            readers.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let _ = client.top(RANK, BoardRef::TypeId(type_id(room)), 0, 10).await;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }));
        }
    }

    // One of the two moves, within the policy's wait and a look or two.
    let started = Instant::now();
    let moved = loop {
        let p = placements(&admin).await;
        let placed: Vec<u64> =
            [a, b].into_iter().filter(|&r| p.placed.iter().any(|(k, _)| *k == key(r))).collect();
        if let (Some(&room), true) = (placed.first(), p.moves.is_empty()) {
            break (room, p);
        }
        assert!(
            started.elapsed() < Duration::from_secs(45),
            "no board moved in 45 s: {p:?}; hot keys and logs follow"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.await.expect("a reader");
    }
    let (room, p) = moved;
    let to = p.shard_of(RANK, &key(room).type_key, SHARDS);
    eprintln!("t93: room {room}'s board moved to shard {to} after {:?}", started.elapsed());
    let leaders = cluster.leaders();
    assert_ne!(leaders[to as usize], Some(node), "moved to a shard another node leads");
    let other = if room == a { b } else { a };
    assert!(
        !p.placed.iter().any(|(k, _)| *k == key(other)),
        "one move relieves the node; the other board stays: {p:?}"
    );
    for room in [a, b] {
        check_room(&admin, room).await;
    }
    // The moved board still takes events, at its new shard.
    let event = ScoreRequest {
        rank: RANK,
        item: 1,
        score: 5,
        sub: None,
        dims: vec![("room".into(), room)],
        ts: now_secs(),
        event_id: 7 << 40,
    };
    let reply = admin.score(event).await.expect("a score after the move");
    assert_eq!((reply.boards[0].outcome, reply.boards[0].score), (Outcome::Applied, Some(6)));
}
