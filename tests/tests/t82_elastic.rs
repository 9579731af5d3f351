//! The cluster changes size under load: nodes that join take their share
//! of replicas and leaderships, moved by the membership manager, while
//! likes and scores go on through the SDK with no failed request, and the
//! history check holds at the end (every acknowledged write present,
//! nothing applied twice, every replica equal).

use plaudit_tests::{wait_until, Cluster};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn growing_from_three_to_five_nodes_balances_and_fails_no_request() {
    let mut cluster = Cluster::builder(3).shards(10).start();
    let (admin, w) = cluster.start_load(821).await;
    let four = cluster.add_node();
    let five = cluster.add_node();
    assert_eq!((four, five), (4, 5));
    let all = cluster.ids();
    cluster.wait_balanced(1, &all, 10, Duration::from_secs(240)).await;
    let rows = cluster.nodes(5);
    for id in &all {
        assert_eq!(rows[id]["state"], "up", "{:?}", rows[id]);
        assert!(rows[id]["replicas"].as_u64().unwrap() >= 5, "{:?}", rows[id]);
    }
    w.wait_acks(200, Duration::from_secs(30), "writes go on after the growth").await;
    cluster.finish_load(&admin, w).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decommissioning_a_node_of_four_moves_its_replicas_and_fails_no_request() {
    let mut cluster = Cluster::builder(4).shards(8).start();
    let (admin, w) = cluster.start_load(822).await;
    // The hardest one to take away: it leads the metadata group, which
    // records the change and then must hand itself over.
    let gone = cluster.meta_leader(1);
    let via = cluster.ids().into_iter().find(|&i| i != gone).unwrap();
    let (code, lines) =
        cluster.node(via).cli_lines(&["admin", "decommission", &gone.to_string(), "--wait"]);
    assert_eq!(code, 0, "{lines:?}");
    let last = lines.last().unwrap();
    assert_eq!(last["decommission"]["node"], gone, "{lines:?}");
    assert_eq!(last["decommission"]["done"], true, "{lines:?}");
    assert!(lines.len() >= 2 && lines[0]["node"] == gone, "progress lines first: {lines:?}");
    let rows = cluster.nodes(via);
    assert_eq!(rows[&gone]["state"], "decommissioned", "{rows:?}");
    assert_eq!(rows[&gone]["replicas"], 0, "{rows:?}");
    let stay: Vec<u64> = cluster.ids().into_iter().filter(|&i| i != gone).collect();
    for id in &stay {
        assert_eq!(rows[id]["replicas"], 8, "eight shards, three replicas, three nodes: {rows:?}");
    }
    assert_ne!(cluster.meta_leader(via), gone);

    // A second one would leave two active members for three replicas.
    let (code, lines) =
        cluster.node(via).cli_lines(&["admin", "decommission", &stay[0].to_string()]);
    assert_eq!(code, 1, "{lines:?}");
    assert_eq!(lines[0]["error"]["code"], "Refused", "{lines:?}");

    // Stopped for good: the others serve on.
    cluster.node_mut(gone).terminate();
    w.wait_acks(200, Duration::from_secs(30), "writes go on without the node").await;
    cluster.finish_load(&admin, w).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_node_is_replaced_and_comes_back_empty_as_a_new_incarnation() {
    let mut cluster =
        Cluster::builder(4).shards(8).env("PLAUDIT_DEAD_NODE_TIMEOUT_SECS", 4).start();
    let (admin, mut w) = cluster.start_load(823).await;
    let victim = 4;
    let before = cluster.nodes(1)[&victim]["incarnation"].clone();
    cluster.kill9(victim);
    std::fs::remove_dir_all(cluster.node(victim).data_dir()).expect("delete its data");
    // Every shard has three replicas again, none on the dead node.
    wait_until(Duration::from_secs(120), "the dead node's replicas rebuilt", || async {
        let rows = cluster.nodes(1);
        let status = cluster.status_via(1).unwrap_or_default();
        let shards = status["shards"].as_array().cloned().unwrap_or_default();
        rows[&victim]["state"] == "dead"
            && status["moves"].as_array().is_some_and(|m| m.is_empty())
            && shards.len() == 8
            && shards.iter().all(|g| {
                let r = g["replicas"].as_array().unwrap();
                r.len() == 3 && !r.contains(&victim.into())
            })
    })
    .await;
    w.wait_acks(200, Duration::from_secs(30), "writes go on after the rebuild").await;

    // Back with an empty directory and its old id: a new member.
    cluster.restart(victim);
    wait_until(Duration::from_secs(120), "the node rejoins as a new incarnation", || async {
        let rows = cluster.nodes(1);
        let n = &rows[&victim];
        n["state"] == "up" && n["incarnation"] != before && n["replicas"].as_u64() >= Some(5)
    })
    .await;
    let all = cluster.ids();
    cluster.wait_balanced(1, &all, 8, Duration::from_secs(120)).await;
    w.stop().await;
    cluster.wait_converged().await;
    w.check(&admin).await;
}
