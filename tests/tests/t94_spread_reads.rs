//! The SDK's `spread_reads`: every read goes to any replica of its shard,
//! not its leader, and still sees every write acknowledged before it was
//! sent. On three nodes, clients that spread their reads each like
//! entities and score a member in turn, and read back at once, at whatever
//! replica the SDK picks: the state of each entity just liked, the
//! member's score on its board, and (once delivered) the counts of every
//! entity liked so far, a read that spans shards. Followers must have
//! served reads, so the reads did not all go to leaders.

use plaudit_client::proto::scoring::BoardRef;
use plaudit_client::proto::{BizConfig, LikeState};
use plaudit_client::{Client, ClientOptions};
use plaudit_tests::{score_event, total_ranking, wait_until, Cluster};
use std::time::Duration;

const RANK: u32 = 94;
const CLIENTS: u64 = 4;
const ROUNDS: u64 = 60;

fn follower_reads(cluster: &Cluster) -> f64 {
    cluster.metric_total("plaudit_follower_reads_total")
}

/// Likes and scores as `user` and member `user`, reading each back at once.
async fn write_then_read(c: Client, biz: u32, user: u64) -> Result<(), String> {
    let board = BoardRef::TypeId("total:0".into());
    for round in 1..=ROUNDS {
        let entity = user * 1000 + round;
        c.like(biz, entity, user, None).await.map_err(|e| format!("like: {e}"))?;
        let states = c.status(biz, user, &[entity]).await.map_err(|e| format!("status: {e}"))?;
        if states[0].state != LikeState::Like {
            return Err(format!("user {user} liked {entity}, then read {states:?}"));
        }
        c.score(score_event(RANK, user, 1, (user << 32) | round))
            .await
            .map_err(|e| format!("score: {e}"))?;
        let top = c.top(RANK, board.clone(), 0, 10).await.map_err(|e| format!("top: {e}"))?;
        let shown = top.iter().find(|i| i.item == user).map_or(0, |i| i.score);
        if shown < round as i64 {
            return Err(format!("member {user} scored {round} times, then read {shown}"));
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spread_reads_see_every_acknowledged_write_and_reach_followers() {
    let cluster = Cluster::builder(3).shards(6).start();
    cluster.wait_converged().await;
    let admin = cluster.client().await;
    admin.create_rank(total_ranking(RANK, "spread")).await.unwrap();
    let biz = admin.create_biz(None, "spread", BizConfig::default()).await.unwrap().id;
    let before = follower_reads(&cluster);

    // No cache: every read goes to a node.
    let opts =
        || ClientOptions { spread_reads: true, cache_ttl: Duration::ZERO, ..Default::default() };
    let mut tasks = Vec::new();
    for user in 1..=CLIENTS {
        let c = cluster.client_with(opts()).await;
        tasks.push(tokio::spawn(write_then_read(c, biz, user)));
    }
    for t in tasks {
        t.await.unwrap().unwrap_or_else(|e| panic!("{e}"));
    }

    // Counts follow likes by delivery; read through the spreading client,
    // they reach every entity liked, each part at some replica.
    let c = cluster.client_with(opts()).await;
    let liked: Vec<u64> =
        (1..=CLIENTS).flat_map(|u| (1..=ROUNDS).map(move |r| u * 1000 + r)).collect();
    wait_until(Duration::from_secs(20), "every like is counted", || async {
        c.counts(biz, &liked).await.is_ok_and(|cs| {
            cs.len() == liked.len()
                && cs.iter().zip(&liked).all(|(got, &e)| got.entity == e && got.likes == 1)
        })
    })
    .await;

    let served = follower_reads(&cluster) - before;
    // Two of three replicas of each shard are followers: about two reads
    // in three; a third of that is far from what leaders alone would give.
    let reads = (CLIENTS * ROUNDS * 2) as f64;
    assert!(served > reads / 5.0, "followers served {served} of ~{reads} reads");
}
