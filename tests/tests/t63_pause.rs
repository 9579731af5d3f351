//! SIGSTOP of the node leading the most shards for longer than the election
//! timeout, then SIGCONT: the others elect leaders and serve meanwhile, and
//! their status shows the paused node not up (it is silent, though its
//! connections stay open: `liveness.rs`); the paused node wakes up as a
//! stale leader, steps down, catches up, and the history check passes.

use plaudit_tests::history::Workload;
use plaudit_tests::{wait_until, Cluster};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_is_replaced_and_rejoins_without_damage() {
    let cluster = Cluster::start(3);
    let admin = cluster.client().await;
    let mut w = Workload::setup(&admin, 63).await;
    let mut likers = Vec::new();
    for _ in 0..4 {
        likers.push(cluster.client().await);
    }
    w.start(likers, vec![cluster.client().await]);
    w.wait_acks(300, Duration::from_secs(30), "the load runs before the pause").await;

    let paused = cluster.most_leading();
    let others: Vec<u64> = cluster.ids().into_iter().filter(|&i| i != paused).collect();
    cluster.node(paused).pause();
    // Longer than the election timeout (the followers' 600 ms lease): the others take over.
    cluster.wait_led_by(others[0], &others, Duration::from_secs(15)).await;
    wait_until(Duration::from_secs(15), "the others' status shows the paused node", || async {
        cluster.status_via(others[0]).is_some_and(|s| {
            s["nodes"].as_array().is_some_and(|ns| {
                ns.iter().any(|n| {
                    n["id"] == paused && (n["state"] == "down" || n["state"] == "unreachable")
                })
            })
        })
    })
    .await;
    w.wait_acks(200, Duration::from_secs(30), "writes go on while the node is paused").await;
    cluster.node(paused).resume();

    w.wait_acks(200, Duration::from_secs(30), "writes go on after it resumes").await;
    w.stop().await;
    cluster.wait_converged().await;
    w.check(&admin).await;
}
