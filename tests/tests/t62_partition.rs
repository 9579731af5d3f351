//! A leader cut off from the other two nodes: the isolated side
//! acknowledges no write (no split brain), the majority elects leaders and
//! serves, and after healing the old leader catches up and every replica
//! converges to the same state.

use plaudit_client::proto::routing::shard_of;
use plaudit_client::Client;
use plaudit_tests::history::Workload;
use plaudit_tests::Cluster;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_leader_acknowledges_nothing_and_catches_up_after_healing() {
    let cluster = Cluster::start(3);
    let admin = cluster.auditor().await;
    let mut w = Workload::setup(&admin, 62).await;
    let isolated = cluster.most_leading();
    let majority: Vec<u64> = cluster.ids().into_iter().filter(|&i| i != isolated).collect();
    let seeds: String =
        majority.iter().map(|&i| cluster.node(i).addr()).collect::<Vec<_>>().join(",");
    let majority_client = || Client::connect(&seeds);
    let mut likers = Vec::new();
    for _ in 0..4 {
        likers.push(majority_client().await.unwrap());
    }
    w.start(likers, vec![majority_client().await.unwrap()]);
    w.wait_acks(200, Duration::from_secs(30), "the load runs before the cut").await;

    // The shards the isolated node leads, as it sees them before the cut.
    let led = cluster.shards_led_by(isolated);
    assert!(!led.is_empty());
    cluster.cut(isolated, &majority);
    let cut_at = Instant::now();

    // Writes sent to the isolated node for the shards it led must not be
    // acknowledged: it cannot reach a quorum. (It may not know yet that it
    // lost them; it must still never say "done".) Raw frames, so that no
    // SDK routes around the isolated node: this asks the node itself.
    let shards = cluster.status_via(isolated).unwrap()["shards"].as_array().unwrap().len() as u32;
    let users: Vec<u64> = (10_000..20_000u64)
        .filter(|u| led.contains(&shard_of(w.likes.biz, *u, shards)))
        .take(20)
        .collect();
    plaudit_tests::raw::likes_refused(&cluster.node(isolated).addr(), w.likes.biz, &users).await;

    // Meanwhile the majority elects leaders for every shard and serves.
    cluster.wait_led_by(majority[0], &majority, Duration::from_secs(15)).await;
    w.wait_acks(200, Duration::from_secs(30), "the majority serves writes").await;
    eprintln!("majority served again within {:?} of the cut", cut_at.elapsed());

    cluster.heal();
    w.wait_acks(100, Duration::from_secs(30), "writes go on after healing").await;
    w.stop().await;
    cluster.wait_converged().await;
    // None of the isolated node's attempts applied.
    let status = admin.status(w.likes.biz, users[0], &[1]).await.unwrap();
    assert_eq!(status[0].state, plaudit_client::proto::LikeState::None);
    w.check(&admin).await;
}
