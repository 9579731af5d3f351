//! A data directory keeps the shard count it was made with: a node started
//! on it with another count refuses to start (and changes nothing), and
//! started with its own count serves what it held. Real node processes on
//! one data directory. And a node cannot join a cluster whose nodes have
//! another count.

use plaudit_tests::{refused_start, wait_until, Cluster, Node};
use std::path::Path;
use std::time::Duration;

/// The error of a node started on `dir` with `shards`, which must refuse.
fn refused(dir: &Path, shards: u32) -> String {
    let shards = shards.to_string();
    refused_start(
        dir,
        &["--shards", &shards, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"],
        &[],
    )
}

fn liked(node: &Node, biz: &str, user: &str) -> String {
    let state = node.cli_json(&["status", "--biz", biz, "--user", user, "5"]);
    state.to_string()
}

#[test]
fn a_node_keeps_the_shard_count_its_data_was_made_with() {
    let mut node = Node::builder().shards(4).start();
    let dir = node.data_dir().to_path_buf();
    let biz = node.cli("biz create --name counted");
    let biz = biz["id"].as_u64().expect("a business id").to_string();
    for user in ["6", "7", "8"] {
        let out = node.cli_json(&["like", "--biz", &biz, "--entity", "5", "--user", user]);
        assert_eq!(out["now"], "like", "{out}");
    }
    let before: Vec<String> = ["6", "7", "8"].iter().map(|u| liked(&node, &biz, u)).collect();
    assert!(before.iter().all(|s| s.contains("\"like\"")), "{before:?}");
    node.terminate();
    assert_eq!(std::fs::read_to_string(dir.join("shards")).unwrap(), "4\n");

    for wrong in [2, 16] {
        let err = refused(&dir, wrong);
        assert!(err.contains("made with 4 shards") && err.contains("--shards 4"), "{err}");
    }
    assert_eq!(std::fs::read_to_string(dir.join("shards")).unwrap(), "4\n", "unchanged");

    // A directory from before the record: its log shows a smaller count
    // is wrong (the registry's group, 4, is above it).
    std::fs::remove_file(dir.join("shards")).unwrap();
    let err = refused(&dir, 3);
    assert!(err.contains("made with 4 shards"), "{err}");

    node.restart();
    assert_eq!(std::fs::read_to_string(dir.join("shards")).unwrap(), "4\n", "recorded again");
    let after: Vec<String> = ["6", "7", "8"].iter().map(|u| liked(&node, &biz, u)).collect();
    assert_eq!(after, before, "the node serves what it held");
}

/// A node joining a cluster with another shard count would place keys in
/// other groups than its peers: every node it dials refuses it before any
/// proof, naming both counts, and the joiner logs the refusal with the
/// count to use. Real node processes: a 3-node cluster of 4 shards and a
/// fourth node started with 6 and the cluster's secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_another_shard_count_cannot_join_a_cluster() {
    let cluster = Cluster::start(3);
    let join =
        cluster.ids().iter().map(|&i| cluster.node(i).peer_addr()).collect::<Vec<_>>().join(",");
    let mut joiner = Node::builder()
        .shards(6)
        .env("PLAUDIT_NODE_ID", 4)
        .env("PLAUDIT_PEER_LISTEN", format!("127.0.0.1:{}", plaudit_tests::free_port()))
        .env("PLAUDIT_JOIN", join)
        .env("PLAUDIT_BOOTSTRAP_EXPECT", 0)
        .env("PLAUDIT_CLUSTER_SECRET_FILE", cluster.secret_file().display())
        .spawn_only();
    let why = "node 4 has 6 shards and this cluster's nodes have 4";
    wait_until(Duration::from_secs(20), "a cluster node refuses the joiner", || {
        let refused = cluster.ids().iter().any(|&i| cluster.node(i).log_tail(400).contains(why));
        async move { refused }
    })
    .await;
    wait_until(Duration::from_secs(20), "the joiner logs the refusal", || {
        let log = joiner.log_tail(400);
        let told = log.contains("control dial: the node at") && log.contains(why);
        async move { told && log.contains("--shards 4") }
    })
    .await;
    assert!(!joiner.is_ready());
    // The cluster is unaffected: still three nodes, every shard led.
    let s = cluster.status();
    assert_eq!(s["nodes"].as_array().unwrap().len(), 3, "{s}");
    assert!(s["shards"].as_array().unwrap().iter().all(|g| g["leader"].as_u64().is_some()), "{s}");
    joiner.kill9();
}
