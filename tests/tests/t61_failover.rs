//! SIGKILL of the node leading the most shards while likes and scoring
//! events flow: writes resume on the survivors, the node restarts and
//! catches up, and the history check passes (nothing acknowledged lost,
//! nothing applied twice, derived counts and boards exact, every replica
//! identical).

use plaudit_tests::history::Workload;
use plaudit_tests::Cluster;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_the_busiest_leader_loses_nothing_and_applies_nothing_twice() {
    let mut cluster = Cluster::start(3);
    let admin = cluster.auditor().await;
    let mut w = Workload::setup(&admin, 61).await;
    let mut likers = Vec::new();
    for _ in 0..4 {
        likers.push(cluster.client().await);
    }
    w.start(likers, vec![cluster.client().await, cluster.client().await]);
    w.wait_acks(300, Duration::from_secs(30), "the load runs before the kill").await;

    let victim = cluster.most_leading();
    let killed = Instant::now();
    cluster.kill9(victim);
    let survivors: Vec<u64> = cluster.ids().into_iter().filter(|&i| i != victim).collect();
    w.wait_acks(200, Duration::from_secs(30), "writes resume on the survivors").await;
    eprintln!("writes resumed within {:?} of the kill", killed.elapsed());
    cluster.wait_led_by(survivors[0], &survivors, Duration::from_secs(10)).await;

    cluster.restart(victim);
    w.wait_acks(200, Duration::from_secs(30), "the load goes on with the node back").await;
    w.stop().await;
    cluster.wait_converged().await;
    w.check(&admin).await;
}
