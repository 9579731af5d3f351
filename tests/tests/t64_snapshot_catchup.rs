//! A replica that was down while its leaders purged their logs catches up
//! by a streamed snapshot, and then holds exactly the leader's state.

use plaudit_tests::history::Workload;
use plaudit_tests::{metric_sum, wait_until, Cluster};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_behind_a_purged_log_catches_up_by_snapshot() {
    // Snapshots every 40 entries, 5 entries kept behind each: a node down
    // for a few hundred entries cannot catch up from the log.
    let mut cluster = Cluster::builder(3)
        .env("PLAUDIT_SNAPSHOT_EVERY_ENTRIES", 40)
        .env("PLAUDIT_SNAPSHOT_LOGS_TO_KEEP", 5)
        .start();
    let admin = cluster.auditor().await;
    let mut w = Workload::setup(&admin, 64).await;
    let down = 3;
    let up: Vec<u64> = vec![1, 2];
    cluster.kill9(down);
    cluster.wait_led_by(1, &up, Duration::from_secs(15)).await;

    let seeds = up.iter().map(|&i| cluster.node(i).addr()).collect::<Vec<_>>().join(",");
    let mut likers = Vec::new();
    for _ in 0..4 {
        likers.push(plaudit_client::Client::connect(&seeds).await.unwrap());
    }
    w.start(likers, vec![plaudit_client::Client::connect(&seeds).await.unwrap()]);
    // Enough entries on every shard for several snapshots and purges.
    let purged = |id: u64| {
        let text = cluster.node(id).metrics_text();
        metric_sum(&text, "plaudit_raft_applied_index").unwrap_or(0.0)
    };
    wait_until(Duration::from_secs(60), "every shard's log moved well past a snapshot", || {
        let ok = purged(1) > 4.0 * 400.0;
        async move { ok }
    })
    .await;
    w.stop().await;

    cluster.restart(down);
    wait_until(Duration::from_secs(60), "the restarted node installs snapshots", || {
        let log = cluster.node(down).log_tail(2000);
        let ok = log.contains("snapshot installed");
        async move { ok }
    })
    .await;
    cluster.wait_converged().await;
    w.check(&admin).await;
}
