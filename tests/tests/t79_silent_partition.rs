//! A silent partition made by the kernel (`plaudit_tests::partition`):
//! node 1 runs as a Unix user of its own, and iptables drops its peer
//! traffic both ways, so no connection breaks and nothing is reset. Under a
//! like and scoring load through the SDK:
//!
//! - the majority's status soon tells the truth: node 1 `down` (or
//!   `unreachable`), and a leader on nodes 2 and 3 for every shard and the
//!   metadata group (before liveness looked past ractor_cluster's sessions,
//!   node 1 stayed `up` for minutes and its shards showed no leader);
//! - the isolated node acknowledges no write;
//! - after healing, everything converges and the history check passes.
//!
//! How long the status takes to tell the truth, and the first write on the
//! isolated leader's shards after the cut, are benchmark figures
//! (`plaudit-partition`), printed here but not asserted.

use plaudit_client::proto::routing::shard_of;
use plaudit_tests::history::Workload;
use plaudit_tests::{wait_until, Cluster};
use std::time::{Duration, Instant};

/// Whether node 2's status shows node 1 as not up and every group led by 2 or 3.
fn majority_sees_the_truth(cluster: &Cluster) -> bool {
    let Some(s) = cluster.status_via(2) else { return false };
    let node1 = s["nodes"].as_array().and_then(|ns| ns.iter().find(|n| n["id"] == 1).cloned());
    let cut_off = node1.is_some_and(|n| n["state"] == "down" || n["state"] == "unreachable");
    let led = |g: &serde_json::Value| matches!(g["leader"].as_u64(), Some(2 | 3));
    let shards = s["shards"].as_array().is_some_and(|gs| gs.iter().all(led));
    cut_off && shards && led(&s["meta"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_tells_the_truth_through_a_silent_partition_and_nothing_is_lost() {
    let cluster = Cluster::builder(3).shards(6).isolatable(1).start();
    let admin = cluster.auditor().await;
    let mut w = Workload::setup(&admin, 79).await;
    let mut likers = Vec::new();
    for _ in 0..4 {
        likers.push(cluster.client().await);
    }
    w.start(likers, vec![cluster.client().await]);
    w.wait_acks(300, Duration::from_secs(30), "the load runs before the cut").await;
    let led = cluster.shards_led_by(1);
    assert!(!led.is_empty(), "node 1 leads shards 0 and 3 by placement: {:?}", cluster.leaders());

    let cut = cluster.isolate(1);
    let at = Instant::now();
    let unknown_before = w.hist.unknown.load(std::sync::atomic::Ordering::Relaxed);
    wait_until(Duration::from_secs(20), "the majority's status tells the truth", || async {
        majority_sees_the_truth(&cluster)
    })
    .await;
    eprintln!("status through node 2 told the truth {:?} after the cut", at.elapsed());

    // Writes sent to the isolated node for the shards it led are never
    // acknowledged (raw frames: no SDK routes around it).
    let users: Vec<u64> = (10_000..20_000u64)
        .filter(|u| led.contains(&shard_of(w.likes.biz, *u, 6)))
        .take(10)
        .collect();
    plaudit_tests::raw::likes_refused(&cluster.node(1).addr(), w.likes.biz, &users).await;
    w.wait_acks(300, Duration::from_secs(30), "the majority serves writes").await;
    let failed = w.hist.unknown.load(std::sync::atomic::Ordering::Relaxed) - unknown_before;
    eprintln!("requests that failed during the cut: {failed}");

    cut.heal();
    w.wait_acks(200, Duration::from_secs(30), "writes go on after healing").await;
    wait_until(Duration::from_secs(30), "node 1 is up again in the status", || async {
        cluster.status_via(2).is_some_and(|s| {
            s["nodes"].as_array().is_some_and(|ns| ns.iter().all(|n| n["state"] == "up"))
        })
    })
    .await;
    w.stop().await;
    cluster.wait_converged().await;
    let none = admin.status(w.likes.biz, users[0], &[1]).await.unwrap();
    assert_eq!(
        none[0].state,
        plaudit_client::proto::LikeState::None,
        "nothing of node 1's applied"
    );
    w.check(&admin).await;
}
