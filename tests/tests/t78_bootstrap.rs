//! A cluster comes to exist exactly once. Five nodes given the same five
//! seeds and `--bootstrap-expect 3`, started in a random order twenty
//! times: each time the founders (the nodes at the first three seed
//! addresses, sorted) form one cluster, no other node forms one of its
//! own, and the other two join it: every node ends up serving with the
//! same map of all five. Every fifth round then runs a like and scoring
//! load through the SDK while the cluster places replicas on the nodes
//! that joined, and ends in the history check (nothing lost, nothing
//! applied twice, every replica equal). A node that is meant to join
//! (`--join`) is refused `--bootstrap-expect 1`, which would make it a
//! cluster alone.

use plaudit_tests::{refused_start, wait_until, Cluster, READY_TIMEOUT};
use std::collections::BTreeSet;
use std::time::Duration;

/// A small deterministic shuffle (xorshift), so a failing order can be
/// replayed from its round number.
fn shuffled(n: u64, mut seed: u64) -> Vec<u64> {
    let mut ids: Vec<u64> = (1..=n).collect();
    for i in (1..ids.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        ids.swap(i, (seed % (i as u64 + 1)) as usize);
    }
    ids
}

fn node_ids(status: &serde_json::Value) -> BTreeSet<u64> {
    status["nodes"].as_array().unwrap().iter().map(|n| n["id"].as_u64().unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_nodes_expecting_three_form_exactly_one_cluster_whatever_the_order() {
    for round in 0..20u64 {
        let order = shuffled(5, 0x9e37_79b9_7f4a_7c15 ^ (round + 1));
        let gap = Duration::from_millis([0, 50, 200][round as usize % 3]);
        let cluster = Cluster::builder(5).bootstrap_expect(3).spawn_in_order(&order, gap);
        let mut by_addr: Vec<(String, u64)> =
            cluster.ids().into_iter().map(|id| (cluster.node(id).peer_addr(), id)).collect();
        by_addr.sort();
        let founders: BTreeSet<u64> = by_addr[..3].iter().map(|(_, id)| *id).collect();
        let others: Vec<u64> = by_addr[3..].iter().map(|(_, id)| *id).collect();
        let what = format!("round {round}, order {order:?}, founders {founders:?}");

        wait_until(READY_TIMEOUT, &format!("{what}: the founders serve"), || async {
            founders.iter().all(|&id| cluster.node(id).is_ready())
        })
        .await;
        // The others join the founders' cluster (none forms its own): every
        // node, asked itself, shows one map of all five.
        let all: BTreeSet<u64> = cluster.ids().into_iter().collect();
        wait_until(READY_TIMEOUT, &format!("{what}: all five in one cluster"), || async {
            all.iter().all(|&id| {
                cluster.node(id).is_ready()
                    && cluster.status_via(id).is_some_and(|s| node_ids(&s) == all)
            })
        })
        .await;
        for &id in &others {
            assert!(cluster.node(id).is_running(), "{what}: node {id} runs");
        }
        let epochs: BTreeSet<u64> =
            founders.iter().filter_map(|&id| cluster.status_via(id)?["epoch"].as_u64()).collect();
        assert!(
            epochs.iter().all(|&e| e > 1),
            "{what}: the map grew from the founders' {epochs:?}"
        );
        if round % 5 == 4 {
            let (admin, w) = cluster.start_load(780 + round).await;
            w.wait_acks(200, Duration::from_secs(30), &format!("{what}: the load runs on")).await;
            cluster.finish_load(&admin, w).await;
        }
    }
}

#[test]
fn a_node_meant_to_join_refuses_to_form_a_cluster_alone() {
    let dir = tempfile::tempdir().unwrap();
    let err = refused_start(
        dir.path(),
        &["--join", "127.0.0.1:1", "--bootstrap-expect", "1"],
        &[("PLAUDIT_CLUSTER_SECRET", "a-secret-of-sixteen-bytes")],
    );
    assert!(err.contains("bootstrap_expect 1 with join"), "{err}");
    let err = refused_start(
        dir.path(),
        &["--join", "127.0.0.1:1,127.0.0.1:2", "--bootstrap-expect", "3"],
        &[("PLAUDIT_CLUSTER_SECRET", "a-secret-of-sixteen-bytes")],
    );
    assert!(err.contains("more than the 2 seeds"), "{err}");
}
