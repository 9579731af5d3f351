//! The SDK and the CLI pointed at one node work on the whole cluster, and
//! the SDK given several seeds keeps working when the node it used dies.

use plaudit_client::proto::BizConfig;
use plaudit_tests::{cli_bin, Cluster};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_and_the_cli_survive_the_death_of_the_node_they_use() {
    let mut cluster = Cluster::start(3);
    let c = cluster.client().await;
    let biz = c.create_biz(None, "sdk", BizConfig::default()).await.unwrap().id;
    for u in 0..50 {
        c.like(biz, 7, u, None).await.unwrap();
    }
    // Kill the node leading the most shards (the SDK talks to it for them).
    let victim = cluster.most_leading();
    cluster.kill9(victim);
    for u in 50..100 {
        let r = c.like(biz, 7, u, None).await;
        assert!(r.is_ok(), "like {u} after the kill: {r:?}");
    }
    let counts = loop {
        let counts = c.counts(biz, &[7]).await.unwrap();
        if counts[0].likes == 100 {
            break counts;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(counts[0].likes, 100);

    // The CLI with the dead node first in its seed list.
    let mut seeds = vec![cluster.node(victim).addr()];
    seeds
        .extend(cluster.ids().into_iter().filter(|&i| i != victim).map(|i| cluster.node(i).addr()));
    let out = std::process::Command::new(cli_bin())
        .args(["--addr", &seeds.join(","), "--json", "counts", "--biz", &biz.to_string(), "7"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(json["counts"][0]["likes"], 100, "{json}");
    let out = std::process::Command::new(cli_bin())
        .args(["--addr", &seeds.join(","), "--json", "admin", "status"])
        .output()
        .unwrap();
    let status: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let down: Vec<_> = status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["state"] == "down")
        .map(|n| n["id"].as_u64().unwrap())
        .collect();
    assert_eq!(down, vec![victim], "{status}");
    cluster.restart(victim);
}
