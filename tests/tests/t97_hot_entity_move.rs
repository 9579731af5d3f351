//! An entity that stays hot moves on its own (`hot_move_min_rps`) to a
//! shard led by a quieter node, its counts and likers intact.
//!
//! ```text
//! 3 nodes, 6 shards, hot_move_min_rps 100, hot_move_after_secs 2
//! two entities on one shard, each liked by 30 users, then
//! read (counts and likers pages) ~300 times a second each through the SDK
//!   ─> the metadata leader sees that node serve both: one entity moves to a
//!      shard another node leads (a single hot one would not: moving it would
//!      only carry the heat elsewhere)
//! end ─ the moved entity's counts and likers are what was liked, a like
//!       after the move counts, and the other entity stays; a client that
//!       connects after the move reads it where it lives (no node forwards)
//! ```

use plaudit_client::proto::business::BizConfig;
use plaudit_client::proto::likes::{CountsRequest, LikersRequest};
use plaudit_client::proto::placement::EntityPlacements;
use plaudit_client::proto::routing::shard_of;
use plaudit_client::proto::{EntityId, Request, Response};
use plaudit_client::Client;
use plaudit_tests::Cluster;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SHARDS: u32 = 6;
const LIKERS: u64 = 30;
const BIZ: u32 = 1;

async fn placements(client: &Client) -> EntityPlacements {
    match client.request(Request::EntityPlacements).await {
        Ok(Response::EntityPlacements(p)) => *p,
        other => panic!("EntityPlacements answered {other:?}"),
    }
}

/// The entity's counts are `likes` and its likers users 1..=likes.
async fn check(client: &Client, entity: EntityId, likes: u64) {
    let c = client.counts(BIZ, &[entity]).await.expect("counts");
    assert_eq!((c[0].likes, c[0].dislikes), (likes, 0), "entity {entity}'s counts");
    let page = client.likers(BIZ, entity, None, 100).await.expect("likers");
    let mut users: Vec<u64> = page.items.iter().map(|i| i.id).collect();
    users.sort_unstable();
    assert_eq!(users, (1..=likes).collect::<Vec<_>>(), "entity {entity}'s likers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entity_that_stays_hot_moves_to_a_quieter_node_on_its_own() {
    let (cluster, admin) = Cluster::hot_relief(SHARDS).await;
    admin.create_biz(Some(BIZ), "hot", BizConfig::default()).await.expect("the business");

    // Two entities on one shard.
    let leaders = cluster.leaders();
    let shard = |e: u64| shard_of(BIZ, e, SHARDS);
    let led_by = |e: u64| leaders[shard(e) as usize];
    let (a, b) = (1..200u64)
        .flat_map(|a| (a + 1..200).map(move |b| (a, b)))
        .find(|&(a, b)| led_by(a).is_some() && shard(a) == shard(b))
        .expect("two entities on one led shard");
    let node = led_by(a).expect("a leader");
    eprintln!("t97: entities {a} and {b}, both led by node {node} (leaders {leaders:?})");
    for e in [a, b] {
        for user in 1..=LIKERS {
            admin.like(BIZ, e, user, Some(1000)).await.expect("a like");
        }
    }
    // Delivered: each entity's shard counts every like.
    let deadline = Instant::now() + Duration::from_secs(30);
    for e in [a, b] {
        while admin.counts(BIZ, &[e]).await.expect("counts")[0].likes < LIKERS {
            assert!(Instant::now() < deadline, "the likes of {e} were not delivered");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    // Both read, hard.
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for e in [a, b] {
        for _ in 0..2 {
            let (client, stop) = (cluster.client().await, stop.clone());
            readers.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let _ = client.counts(BIZ, &[e]).await;
                    let _ = client.likers(BIZ, e, None, 10).await;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }));
        }
    }

    // One of the two moves, within the policy's wait and a look or two.
    let started = Instant::now();
    let (moved, p) = loop {
        let p = placements(&admin).await;
        let placed: Vec<u64> = [a, b]
            .into_iter()
            .filter(|&e| p.placed.iter().any(|(k, _)| k.biz == BIZ && k.entity == e))
            .collect();
        if let (Some(&e), true) = (placed.first(), p.moves.is_empty()) {
            break (e, p);
        }
        if started.elapsed() > Duration::from_secs(45) {
            let hot = admin.hot_keys(20).await;
            cluster.dump_logs();
            panic!("no entity moved in 45 s: {p:?}; hot keys {hot:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.await.expect("a reader");
    }
    let to = p.entity_shard(BIZ, moved, SHARDS);
    eprintln!("t97: entity {moved} moved to shard {to} after {:?}", started.elapsed());
    assert_ne!(cluster.leaders()[to as usize], Some(node), "moved to a shard another node leads");
    let other = if moved == a { b } else { a };
    assert_eq!(p.entity_shard(BIZ, other, SHARDS), shard_of(BIZ, other, SHARDS), "{p:?}");

    // A client that connects now learns where the entity lives and sends
    // its reads there: no node forwards them (counts mixing it with
    // entities on their hash shards are split around it).
    let fresh = cluster.client().await;
    let forwarded = || cluster.metric_total("plaudit_forwarded_requests_total");
    let before = forwarded();
    let mut reads = Vec::new();
    for _ in 0..20 {
        reads.push(Request::Counts(CountsRequest { biz: BIZ, entities: vec![moved, other] }));
        reads.push(Request::Counts(CountsRequest { biz: BIZ, entities: vec![moved] }));
        let likers = LikersRequest { biz: BIZ, entity: moved, cursor: None, limit: 5 };
        reads.push(Request::Likers(likers));
    }
    for answer in fresh.pipeline(reads).await {
        assert!(answer.is_ok(), "a read of the moved entity: {answer:?}");
    }
    assert_eq!(forwarded(), before, "the SDK sent the moved entity's reads where it lives");

    // Intact, and a like after the move counts there.
    check(&admin, moved, LIKERS).await;
    check(&admin, other, LIKERS).await;
    admin.like(BIZ, moved, LIKERS + 1, Some(1000)).await.expect("a like after the move");
    let deadline = Instant::now() + Duration::from_secs(30);
    while admin.counts(BIZ, &[moved]).await.expect("counts")[0].likes < LIKERS + 1 {
        assert!(Instant::now() < deadline, "the like after the move was not delivered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    check(&admin, moved, LIKERS + 1).await;
    let received = admin.received(BIZ, 1000).await.expect("received").likes;
    assert_eq!(received, 2 * LIKERS + 1, "the owner's received total");
}
