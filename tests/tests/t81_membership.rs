//! Members and their identities: `plaudit admin nodes` lists every member
//! with its incarnation (made when its data directory was), state, replicas
//! and leaderships, in the documented JSON shape; a restart keeps a node's
//! incarnation.

use plaudit_tests::{wait_until, Cluster};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_nodes_shows_every_member_and_a_restart_keeps_its_incarnation() {
    let mut cluster = Cluster::builder(3).shards(6).start();
    let before = cluster.nodes(1);
    assert_eq!(before.keys().copied().collect::<Vec<_>>(), vec![1, 2, 3]);
    for (id, n) in &before {
        let inc = n["incarnation"].as_str().unwrap();
        assert_eq!(inc.len(), 16, "{n}");
        assert_ne!(inc, "0000000000000000", "node {id} has an incarnation");
        assert_eq!(n["state"], "up", "{n}");
        assert_eq!(n["replicas"], 6, "three replicas of six shards on three nodes: {n}");
        assert_eq!(n["addr"], cluster.node(*id).addr(), "{n}");
        assert_eq!(n["peer"], cluster.node(*id).peer_addr(), "{n}");
    }
    let leaders: u64 = before.values().map(|n| n["leaders"].as_u64().unwrap()).sum();
    assert_eq!(leaders, 6, "every shard led once: {before:?}");
    let file = std::fs::read_to_string(cluster.node(2).data_dir().join("incarnation")).unwrap();
    assert_eq!(file.trim(), before[&2]["incarnation"]);

    cluster.kill9(2);
    wait_until(Duration::from_secs(15), "node 2 shows down", || async {
        cluster.nodes(1)[&2]["state"] == "down"
    })
    .await;
    cluster.restart(2);
    wait_until(Duration::from_secs(15), "node 2 is up again", || async {
        cluster.nodes(1)[&2]["state"] == "up"
    })
    .await;
    assert_eq!(cluster.nodes(3)[&2]["incarnation"], before[&2]["incarnation"], "the same life");
}
