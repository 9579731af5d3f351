//! An idle cluster stays idle. After writes that leave every kind of
//! background work something to do once (outbox deliveries, a board, the
//! followers' replicated outboxes), three nodes with nothing to serve must
//! use a small share of a core each. This catches a background task that
//! spins rather than waits: a follower's outbox delivery worker did from
//! 9b06831 to 384509d, every other test passed, and the seeds' load fell
//! to half. The bound sits far above what idle nodes use (heartbeats,
//! timers: ~0.02 cores each in a release build) and far below a task that
//! never sleeps (most of a core).

use plaudit_client::proto::BizConfig;
use plaudit_tests::{score_event, total_ranking, wait_until, Cluster};
use std::time::Duration;

/// The most of a core an idle node may use, measured over `WINDOW`.
const MAX_IDLE_CORES: f64 = 0.3;
const WINDOW: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_cluster_uses_a_small_share_of_a_core() {
    let cluster = Cluster::builder(3).shards(6).start();
    cluster.wait_converged().await;
    let c = cluster.client().await;
    let biz = c.create_biz(None, "idle", BizConfig::default()).await.unwrap().id;
    c.create_rank(total_ranking(95, "idle")).await.unwrap();
    let entities: Vec<u64> = (1..=24).collect();
    for &e in &entities {
        c.like(biz, e, 7, Some(1000 + e)).await.unwrap();
    }
    c.score(score_event(95, 1, 5, 1)).await.unwrap();
    // Everything delivered: nothing is left to do but stay in touch.
    wait_until(Duration::from_secs(20), "the likes are counted", || async {
        c.counts(biz, &entities).await.is_ok_and(|cs| cs.iter().all(|e| e.likes == 1))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    let ids = cluster.ids();
    let before: Vec<f64> = ids.iter().map(|&id| cluster.node(id).cpu_seconds()).collect();
    tokio::time::sleep(WINDOW).await;
    for (&id, was) in ids.iter().zip(before) {
        let cores = (cluster.node(id).cpu_seconds() - was) / WINDOW.as_secs_f64();
        assert!(
            cores < MAX_IDLE_CORES,
            "node {id} used {cores:.2} cores with nothing to serve (at most {MAX_IDLE_CORES})"
        );
    }
}
