//! Hot keys are found: under a load where one entity's counts and one
//! user's likes take a large share of the requests, `plaudit admin
//! hotkeys --json` (merged from every node) lists that entity first with
//! its shard, and the user among the keys; each node's `/metrics` shows
//! its heaviest keys.

use plaudit_client::proto::routing::shard_of;
use plaudit_client::proto::BizConfig;
use plaudit_tests::{wait_until, Cluster};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const HOT_ENTITY: u64 = 777;
const HOT_USER: u64 = 4242;
const HOT_USER_KEY: &str = "4242";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hottest_keys_are_listed_with_their_shards() {
    let cluster = Cluster::builder(3).shards(6).start();
    cluster.wait_converged().await;
    let admin = cluster.client().await;
    let biz = admin.create_biz(None, "hot", BizConfig::default()).await.unwrap().id;
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for t in 0..4u64 {
        let (client, stop) = (cluster.client().await, stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                // Half the reads are of the hot entity, the rest of
                // entities seen once each; every fourth request is a like
                // by the hot user.
                let cold = 10_000 + t * 1_000_000 + i;
                let entity = if i.is_multiple_of(2) { HOT_ENTITY } else { cold };
                let _ = client.counts(biz, &[entity]).await;
                if i.is_multiple_of(4) {
                    let _ = client.like(biz, cold, HOT_USER, None).await;
                }
            }
        }));
    }

    let node = cluster.node(1);
    let mut first = serde_json::Value::Null;
    wait_until(Duration::from_secs(30), "the hot entity listed first", || {
        let (code, lines) = node.cli_lines(&["admin", "hotkeys", "--top", "5"]);
        assert_eq!(code, 0, "{lines:?}");
        let keys = lines[0]["keys"].as_array().cloned().unwrap_or_default();
        let found = keys.first().is_some_and(|k| k["kind"] == "entity" && k["key"] == "777")
            && keys.iter().any(|k| k["kind"] == "user" && k["key"] == HOT_USER_KEY);
        if found {
            first = keys[0].clone();
        }
        async move { found }
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }

    assert_eq!(first["biz"], biz, "{first}");
    assert_eq!(first["shard"], shard_of(biz, HOT_ENTITY, 6), "{first}");
    assert!(cluster.ids().contains(&first["node"].as_u64().unwrap()), "{first}");
    assert!(first["requests_per_s"].as_u64().unwrap() > 0, "{first}");
    assert_eq!(first["relief"], "none", "{first}");

    // By CPU: the hot entity's reads cost its node a measured share.
    let (code, lines) = node.cli_lines(&["admin", "hotkeys", "--top", "10", "--by", "cpu"]);
    assert_eq!(code, 0, "{lines:?}");
    let keys = lines[0]["keys"].as_array().cloned().unwrap_or_default();
    let hot = keys
        .iter()
        .find(|k| k["kind"] == "entity" && k["key"] == "777")
        .unwrap_or_else(|| panic!("the hot entity among the heaviest by CPU: {keys:?}"));
    let share = hot["cpu_share"].as_f64().unwrap_or(0.0);
    assert!(share > 0.0 && share < 1.0, "{hot}");

    // Each node counts what its clients send it, and shows its top: the
    // node that counted the hot entity shows a key in first place.
    let text = cluster.node(first["node"].as_u64().unwrap()).metrics_text();
    assert!(
        text.lines().any(|l| l.starts_with("plaudit_hot_key_requests_per_second{place=\"1\"")),
        "no hot key in /metrics: {}",
        text.lines().filter(|l| l.contains("hot_key")).collect::<Vec<_>>().join("\n")
    );

    // Bad input is refused with its code; the node is fine afterwards.
    let (code, lines) = node.cli_lines(&["admin", "hotkeys", "--top", "0"]);
    assert_ne!(code, 0);
    assert_eq!(lines.last().unwrap()["error"]["code"], "BadRequest", "{lines:?}");
}
