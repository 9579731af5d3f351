//! A node hot with an entity that is its shard's whole load, and a user's
//! reads on its other shard, is relieved by exchanging leaderships with a
//! quiet node: the entity stays where it is (moving it would only carry the
//! heat elsewhere), and every node still leads its share.
//!
//! ```text
//! 3 nodes, 6 shards, hot_move_min_rps 100, hot_move_after_secs 2
//! an entity E and a user U on two shards one node H leads: E's counts and likers
//! and U's status and likes read ~300 times a second each, E liked all along
//!   ─> the metadata leader records a swap: one of H's two shards to a quieter
//!      node, one of that node's to H; the shards' leaders hand them over
//! end ─ H leads one of the two; every node leads two shards, and still does 2 s on;
//!       no entity moved; every like acknowledged is counted, and none failed across
//!       the hand-offs
//! ```

use plaudit_client::proto::business::BizConfig;
use plaudit_client::proto::placement::EntityPlacements;
use plaudit_client::proto::routing::shard_of;
use plaudit_client::proto::{Request, Response};
use plaudit_client::Client;
use plaudit_tests::Cluster;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SHARDS: u32 = 6;
const BIZ: u32 = 1;
/// The writer's users start here (the readers' user is below).
const FIRST_LIKER: u64 = 10_000;

async fn placements(client: &Client) -> EntityPlacements {
    match client.request(Request::EntityPlacements).await {
        Ok(Response::EntityPlacements(p)) => *p,
        other => panic!("EntityPlacements answered {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_hot_with_one_entity_swaps_its_other_shard_to_a_quiet_node() {
    let (cluster, admin) = Cluster::hot_relief(SHARDS).await;
    admin.create_biz(Some(BIZ), "hot", BizConfig::default()).await.expect("the business");

    // An entity and a user on two shards one node leads.
    let leaders = cluster.leaders();
    let led_by = |id: u64| leaders[shard_of(BIZ, id, SHARDS) as usize];
    let (entity, user) = (1..200u64)
        .flat_map(|e| (1..200u64).map(move |u| (e, u)))
        .find(|&(e, u)| {
            shard_of(BIZ, e, SHARDS) != shard_of(BIZ, u, SHARDS)
                && led_by(e).is_some()
                && led_by(e) == led_by(u)
        })
        .expect("an entity and a user led by one node");
    let node = led_by(entity).expect("a leader");
    let shards = [shard_of(BIZ, entity, SHARDS), shard_of(BIZ, user, SHARDS)];
    eprintln!("t98: entity {entity} and user {user} on shards {shards:?}, led by node {node}");

    // Read hard, and like the entity all along.
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for _ in 0..2 {
        let (client, stop) = (cluster.client().await, stop.clone());
        readers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let _ = client.counts(BIZ, &[entity]).await;
                let _ = client.likers(BIZ, entity, None, 10).await;
                let _ = client.status(BIZ, user, &[entity]).await;
                let _ = client.user_likes(BIZ, user, None, 10).await;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }));
    }
    let writer = {
        let (client, stop) = (cluster.client().await, stop.clone());
        tokio::spawn(async move {
            let (mut acked, mut failed) = (0u64, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                match client.like(BIZ, entity, FIRST_LIKER + acked, Some(1000)).await {
                    Ok(_) => acked += 1,
                    Err(e) => failed.push(e.to_string()),
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (acked, failed)
        })
    };

    // The swap recorded, and the leaders following it.
    let started = Instant::now();
    let after = loop {
        let now = cluster.leaders();
        let led_here = shards.iter().filter(|&&s| now[s as usize] == Some(node)).count();
        let shares = (1..=3u64).all(|n| now.iter().filter(|l| **l == Some(n)).count() == 2);
        if led_here == 1 && shares {
            break now;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let hot = admin.hot_keys(20).await;
            cluster.dump_logs();
            panic!("no leadership went from node {node} in 60 s: {now:?}; hot keys {hot:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    eprintln!("t98: leaders {leaders:?} -> {after:?} after {:?}", started.elapsed());
    // Keep the load on a little longer, across whatever hand-off is left.
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.await.expect("a reader");
    }
    let (acked, failed) = writer.await.expect("the writer");
    assert!(failed.is_empty(), "likes failed across the hand-offs: {failed:?}");

    assert_eq!(cluster.leaders(), after, "the swap stands: nothing swapped back");
    let p = placements(&admin).await;
    assert!(p.placed.is_empty() && p.moves.is_empty(), "no entity moved: {p:?}");

    // Every acknowledged like counted once (the writer's users are new).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let likes = admin.counts(BIZ, &[entity]).await.expect("counts")[0].likes;
        if likes == acked {
            break;
        }
        assert!(likes < acked, "{likes} likes counted, only {acked} made");
        assert!(Instant::now() < deadline, "{likes} of {acked} likes delivered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
