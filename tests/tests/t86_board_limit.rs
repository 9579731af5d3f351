//! A ranking's limit of live sub-boards, on three real nodes: clients on
//! every node racing to start more boards than the limit get exactly the
//! limit (the metadata group counts, whichever shard a board hashes to and
//! whichever node takes its first event); past it an event that would
//! start a board is refused whole (`Refused`, none of its boards written),
//! while boards that exist keep scoring; the limit can be raised per
//! ranking (`rank limit`) and survives the loss of the metadata leader.

use plaudit_client::proto::rankings::RankDef;
use plaudit_client::proto::scoring::{Outcome, ScoreRequest};
use plaudit_client::proto::window::Granularity;
use plaudit_client::proto::ErrorCode;
use plaudit_client::{Client, ClientError};
use plaudit_tests::{total_ranking, Cluster};
use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The nodes' default limit (`max_boards_per_ranking`).
const DEFAULT_LIMIT: u64 = 40;

fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

fn by_room(id: u32, granularities: Vec<Granularity>) -> RankDef {
    RankDef { dims: vec!["room".into()], granularities, ..total_ranking(id, &format!("r{id}")) }
}

fn event(rank: u32, room: u64, event_id: u64) -> ScoreRequest {
    ScoreRequest {
        rank,
        item: 1,
        score: 1,
        sub: None,
        dims: vec![("room".into(), room)],
        ts: now(),
        event_id,
    }
}

/// Scores one event in each of `rooms`: the rooms whose event applied, and
/// those refused for the limit. Anything else fails the test.
async fn score_rooms(
    c: &Client,
    rank: u32,
    rooms: impl Iterator<Item = u64>,
    ids: u64,
) -> (BTreeSet<u64>, BTreeSet<u64>) {
    let (mut applied, mut refused) = (BTreeSet::new(), BTreeSet::new());
    for room in rooms {
        match c.score(event(rank, room, ids + room)).await {
            Ok(r) => {
                assert!(r.boards.iter().all(|b| b.outcome == Outcome::Applied), "{r:?}");
                applied.insert(room);
            }
            Err(e) if e.code() == Some(ErrorCode::Refused) => {
                assert!(e.to_string().contains("limit"), "{e}");
                refused.insert(room);
            }
            Err(e) => panic!("room {room}: {e}"),
        }
    }
    (applied, refused)
}

/// Every sub-board the shards hold for ranking `rank`.
async fn boards(c: &Client, rank: u32) -> Vec<String> {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = c.boards(rank, cursor.as_deref(), 100).await.expect("boards");
        all.extend(page.boards.into_iter().map(|b| b.type_id));
        match page.next {
            Some(n) => cursor = Some(n),
            None => return all,
        }
    }
}

fn refused(r: Result<impl std::fmt::Debug, ClientError>, what: &str) {
    match r {
        Err(e) => assert_eq!(e.code(), Some(ErrorCode::Refused), "{what}: {e}"),
        Ok(v) => panic!("{what} was taken: {v:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rankings_live_sub_boards_stop_at_its_limit_on_every_node() {
    let mut cluster =
        Cluster::builder(3).env("PLAUDIT_MAX_BOARDS_PER_RANKING", DEFAULT_LIMIT).start();
    let admin = cluster.client().await;
    admin.create_rank(by_room(31, vec![Granularity::Total])).await.unwrap();
    admin.create_rank(by_room(32, vec![Granularity::Total, Granularity::Day])).await.unwrap();

    // Three clients, each on its own node, race over 60 rooms (each room
    // twice, from two of them): exactly the limit's worth of boards start.
    let mut racers = Vec::new();
    for id in cluster.ids() {
        let c = cluster.node(id).client().await;
        let from = (id - 1) * 20;
        racers.push(tokio::spawn(async move {
            let rooms = (from..from + 40).map(|r| r % 60);
            score_rooms(&c, 31, rooms, id * 1_000).await
        }));
    }
    let (mut applied, mut refused_rooms) = (BTreeSet::new(), BTreeSet::new());
    for r in racers {
        let (a, f) = r.await.unwrap();
        applied.extend(a);
        refused_rooms.extend(f);
    }
    assert_eq!(applied.len() as u64, DEFAULT_LIMIT, "rooms that got a board: {applied:?}");
    assert_eq!(refused_rooms.difference(&applied).count() as u64, 60 - DEFAULT_LIMIT);
    assert_eq!(boards(&admin, 31).await.len() as u64, DEFAULT_LIMIT, "boards on the shards");
    let usage = admin.board_usage(31).await.unwrap();
    assert_eq!((usage.live, usage.max_boards, usage.effective), (DEFAULT_LIMIT, None, 40));

    // At the limit, boards that exist keep scoring; a new one is refused.
    let open = *applied.first().unwrap();
    let (a, _) = score_rooms(&admin, 31, [open].into_iter(), 50_000).await;
    assert_eq!(a.len(), 1, "an existing board takes events at the limit");
    refused(admin.score(event(31, 1_000, 50_001)).await, "a new board past the limit");

    // An event on two boards (total and day) of a new room is refused
    // whole: neither board is written.
    let (a, f) = score_rooms(&admin, 32, 0..25, 60_000).await;
    assert_eq!((a.len(), f.len()), (20, 5), "two boards per room, 40 boards");
    assert_eq!(boards(&admin, 32).await.len() as u64, DEFAULT_LIMIT);

    // A limit of its own, set with the CLI, takes effect on every node at
    // once: the metadata group, which counts, holds it.
    let limited = cluster.node(2).cli("rank limit 31 --max-boards 45");
    assert_eq!(limited["usage"]["effective"], 45, "{limited}");
    let (a, f) = score_rooms(&cluster.node(3).client().await, 31, 1_000..1_010, 70_000).await;
    assert_eq!((a.len(), f.len()), (5, 5));
    let shown = cluster.node(1).cli("rank usage 31");
    assert_eq!(shown["usage"]["live"], 45, "{shown}");
    assert_eq!(shown["usage"]["max_boards"], 45, "{shown}");

    // The count is the metadata group's: it survives losing its leader.
    let leader = cluster.meta_leader(1);
    cluster.kill9(leader);
    let survivor = *cluster.ids().iter().find(|&&id| id != leader).unwrap();
    let c = cluster.node(survivor).client().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        match c.score(event(31, 2_000, 80_000)).await {
            Err(e) if e.code() == Some(ErrorCode::Refused) => break,
            // A new metadata leader is being elected.
            Err(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            other => panic!("a new board after the failover: {other:?}"),
        }
    }
    let (a, _) = score_rooms(&c, 31, [open].into_iter(), 90_000).await;
    assert_eq!(a.len(), 1, "an existing board after the failover");
    assert_eq!(c.board_usage(31).await.unwrap().live, 45);
    // Back to the default: 45 live boards are over it, so still refused.
    cluster.node(survivor).cli("rank limit 31 --default");
    refused(c.score(event(31, 2_001, 90_001)).await, "over the default again");
}
