//! A five-node cluster: shards of three replicas spread over five nodes,
//! the metadata group on three voters and two learners, requests served
//! through nodes that hold no replica of their shard, and a node's death
//! survived with the history intact.

use plaudit_tests::history::Workload;
use plaudit_tests::Cluster;
use std::collections::BTreeSet;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_nodes_hold_three_replicas_each_and_survive_a_death() {
    let mut cluster = Cluster::builder(5).shards(10).start();
    let s = cluster.status();
    let mut holders = std::collections::BTreeMap::<u64, usize>::new();
    for g in s["shards"].as_array().unwrap() {
        let replicas: BTreeSet<u64> =
            g["replicas"].as_array().unwrap().iter().map(|r| r.as_u64().unwrap()).collect();
        assert_eq!(replicas.len(), 3, "{g}");
        for r in replicas {
            *holders.entry(r).or_default() += 1;
        }
    }
    assert_eq!(holders.len(), 5, "every node holds replicas: {holders:?}");
    assert!(holders.values().all(|&n| n == 6), "30 replicas, 6 per node: {holders:?}");
    for n in s["nodes"].as_array().unwrap() {
        assert_eq!(n["shards_led"], 2, "{s}");
    }

    let admin = cluster.auditor().await;
    let mut w = Workload::setup(&admin, 65).await;
    let mut likers = Vec::new();
    for _ in 0..4 {
        likers.push(cluster.client().await);
    }
    w.start(likers, vec![cluster.client().await]);
    w.wait_acks(300, Duration::from_secs(30), "the load runs").await;
    let victim = cluster.most_leading();
    cluster.kill9(victim);
    w.wait_acks(200, Duration::from_secs(30), "writes go on without the dead node").await;
    cluster.restart(victim);
    w.wait_acks(100, Duration::from_secs(30), "and with it back").await;
    w.stop().await;
    cluster.wait_converged().await;
    w.check(&admin).await;
}
