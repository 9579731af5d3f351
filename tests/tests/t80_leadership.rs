//! Leaderships move without an election timeout: `admin drain` hands a
//! node's leaderships to other replicas while likes and scores go on,
//! with no failed request; a rolling restart (SIGTERM, which drains first)
//! of every node, one at a time, fails no request either; and after
//! failovers the balancer hands every shard back to the node placed to lead
//! it, so one node does not end up leading them all.

use plaudit_tests::{wait_until, Cluster};
use std::collections::BTreeMap;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_node_leads_nothing_and_no_request_fails() {
    let cluster = Cluster::builder(3).shards(6).start();
    let (admin, w) = cluster.start_load(801).await;
    let node = cluster.most_leading();
    assert!(!cluster.shards_led_by(node).is_empty());

    // `--wait --json`: a progress object a line, then the result.
    let out = std::process::Command::new(plaudit_tests::cli_bin())
        .args(["--addr", &cluster.node(node).addr(), "--json", "admin", "drain"])
        .args([node.to_string(), "--wait".into()])
        .output()
        .expect("run the CLI");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<serde_json::Value> =
        stdout.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    assert!(lines.len() >= 2, "{stdout}");
    assert_eq!(lines[0]["node"], node, "{stdout}");
    assert_eq!(lines[lines.len() - 2]["leading"], 0, "{stdout}");
    assert_eq!(lines[lines.len() - 1]["drain"]["done"], true, "{stdout}");
    let s = cluster.status();
    assert!(
        s["shards"].as_array().unwrap().iter().all(|g| g["leader"] != node)
            && s["meta"]["leader"] != node,
        "node {node} still leads: {s}"
    );
    w.wait_acks(200, Duration::from_secs(30), "writes go on after the drain").await;
    cluster.finish_load(&admin, w).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_with_sigterm_fails_no_request() {
    let mut cluster = Cluster::builder(3).shards(6).start();
    let (admin, w) = cluster.start_load(802).await;
    for id in cluster.ids() {
        let before = w.acked();
        cluster.node_mut(id).terminate();
        cluster.restart(id);
        w.wait_acks(100, Duration::from_secs(30), &format!("writes go on after node {id}")).await;
        assert!(w.acked() > before);
        assert_eq!(
            w.failed(),
            0,
            "a request failed around node {id}'s restart: {:?}; the SDK's last log lines:\n{}",
            w.first_failure(),
            plaudit_tests::sdk_log::tail(60)
        );
    }
    cluster.finish_load(&admin, w).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_failovers_the_leaders_go_back_to_their_placement() {
    let mut cluster = Cluster::builder(3).shards(6).start();
    for round in 0..2 {
        let victim = cluster.most_leading();
        cluster.kill9(victim);
        let others: Vec<u64> = cluster.ids().into_iter().filter(|&i| i != victim).collect();
        cluster.wait_led_by(others[0], &others, Duration::from_secs(15)).await;
        cluster.restart(victim);
        // Six shards on three nodes: two each, as placed, once the balancer
        // has handed them back (it waits 10 s after a leadership is won).
        wait_until(
            Duration::from_secs(60),
            &format!("round {round}: leaders rebalanced"),
            || async {
                let mut led: BTreeMap<u64, usize> = BTreeMap::new();
                for l in cluster.leaders().into_iter().flatten() {
                    *led.entry(l).or_default() += 1;
                }
                led.len() == 3 && led.values().all(|&n| n == 2)
            },
        )
        .await;
    }
}
