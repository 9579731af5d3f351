//! Several shards to one Raft group (`groups` below `shards`,
//! `cluster/src/layout.rs`): one Raft round carries the writes of every
//! shard its group hosts. On real node processes, under the SDK's like and
//! scoring load with its history check (every acknowledged write present,
//! nothing applied twice, every replica of every shard equal):
//!
//! - one group for four shards on three nodes: one node leads every shard;
//!   a SIGKILL of it and its restart lose nothing;
//! - two groups for six shards on four nodes: decommissioning a node moves
//!   whole groups, every shard placed as its group, and fails no request.

use plaudit_tests::{wait_until, Cluster};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_group_hosting_every_shard_survives_a_sigkill_of_its_leader() {
    let mut cluster = Cluster::builder(3).shards(4).env("PLAUDIT_GROUPS", 1).start();
    let (admin, w) = cluster.start_load(991).await;
    let leaders = cluster.leaders();
    assert_eq!(leaders.len(), 4, "{leaders:?}");
    assert!(leaders.iter().all(|l| l.is_some() && *l == leaders[0]), "one group: {leaders:?}");
    let victim = leaders[0].unwrap();
    cluster.kill9(victim);
    let others: Vec<u64> = cluster.ids().into_iter().filter(|&i| i != victim).collect();
    cluster.wait_led_by(others[0], &others, Duration::from_secs(15)).await;
    w.wait_acks(200, Duration::from_secs(30), "writes go on without the old leader").await;
    cluster.restart(victim);
    w.wait_acks(200, Duration::from_secs(30), "writes go on after its restart").await;
    let leaders = cluster.leaders();
    assert!(leaders.iter().all(|l| *l == leaders[0]), "still one group: {leaders:?}");
    cluster.finish_load(&admin, w).await;
    // The SDK logged what it went through (a leader killed under it): the
    // ring a failed load prints (`sdk_log.rs`) holds it in this binary.
    let seen = plaudit_tests::sdk_log::tail(usize::MAX);
    assert!(seen.contains("plaudit_client"), "the SDK's log ring is empty in a test binary");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decommissioning_moves_whole_groups_and_fails_no_request() {
    let mut cluster = Cluster::builder(4).shards(6).env("PLAUDIT_GROUPS", 2).start();
    let (admin, w) = cluster.start_load(992).await;
    let gone = 4;
    let (code, lines) = cluster.node(1).cli_lines(&["admin", "decommission", "4", "--wait"]);
    assert_eq!(code, 0, "{lines:?}");
    assert_eq!(lines.last().unwrap()["decommission"]["done"], true, "{lines:?}");
    // Shard s is hosted by group s % 2: its replicas and leader are its
    // group's, none on the decommissioned node.
    wait_until(Duration::from_secs(30), "every shard placed as its group", || async {
        let status = cluster.status_via(1).unwrap_or_default();
        let shards = status["shards"].as_array().cloned().unwrap_or_default();
        shards.len() == 6
            && shards.iter().enumerate().all(|(s, g)| {
                let group = &shards[s % 2];
                let r = g["replicas"].as_array().cloned().unwrap_or_default();
                r.len() == 3
                    && !r.contains(&gone.into())
                    && g["replicas"] == group["replicas"]
                    && g["leader"] == group["leader"]
            })
    })
    .await;
    w.wait_acks(200, Duration::from_secs(30), "writes go on after the decommission").await;
    cluster.node_mut(gone).terminate();
    w.wait_acks(200, Duration::from_secs(30), "writes go on without the node").await;
    cluster.finish_load(&admin, w).await;
}
