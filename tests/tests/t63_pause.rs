//! SIGSTOP of the node leading the most shards for longer than the election
//! timeout, then SIGCONT: the others elect leaders and serve meanwhile, and
//! their status shows the paused node not up (it is silent, though its
//! connections stay open: `liveness.rs`); the paused node wakes up as a
//! stale leader, steps down, catches up, and the history check passes.

use plaudit_tests::history::Workload;
use plaudit_tests::{wait_until, Cluster};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_is_replaced_and_rejoins_without_damage() {
    let cluster = Cluster::start(3);
    let admin = cluster.auditor().await;
    let mut w = Workload::setup(&admin, 63).await;
    let mut likers = Vec::new();
    for _ in 0..4 {
        likers.push(cluster.client().await);
    }
    w.start(likers, vec![cluster.client().await]);
    w.wait_acks(300, Duration::from_secs(30), "the load runs before the pause").await;

    let paused = cluster.most_leading();
    let others: Vec<u64> = cluster.ids().into_iter().filter(|&i| i != paused).collect();
    cluster.node(paused).pause();
    // Longer than the election timeout (the followers' 600 ms lease): the others take over.
    cluster.wait_led_by(others[0], &others, Duration::from_secs(15)).await;
    wait_until(Duration::from_secs(15), "the others' status shows the paused node", || async {
        cluster.status_via(others[0]).is_some_and(|s| {
            s["nodes"].as_array().is_some_and(|ns| {
                ns.iter().any(|n| {
                    n["id"] == paused && (n["state"] == "down" || n["state"] == "unreachable")
                })
            })
        })
    })
    .await;
    w.wait_acks(200, Duration::from_secs(30), "writes go on while the node is paused").await;
    cluster.node(paused).resume();

    w.wait_acks(200, Duration::from_secs(30), "writes go on after it resumes").await;
    w.stop().await;
    cluster.wait_converged().await;
    w.check(&admin).await;
}

/// The same with the kernel: node 1 is paused, cut off by iptables while
/// paused (`plaudit_tests::partition`), then woken up still cut off. Awake
/// but alone, it believes it leads in an old term: it must acknowledge
/// nothing, and the others keep showing it not up; once healed it catches
/// up and the history check passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_that_wakes_up_cut_off_acknowledges_nothing() {
    use plaudit_client::proto::routing::shard_of;

    let cluster = Cluster::builder(3).isolatable(1).start();
    let admin = cluster.auditor().await;
    let mut w = Workload::setup(&admin, 631).await;
    let mut likers = Vec::new();
    for _ in 0..3 {
        likers.push(cluster.client().await);
    }
    w.start(likers, vec![cluster.client().await]);
    w.wait_acks(200, Duration::from_secs(30), "the load runs before the pause").await;
    let led = cluster.shards_led_by(1);
    assert!(!led.is_empty(), "node 1 leads by placement: {:?}", cluster.leaders());

    cluster.node(1).pause();
    cluster.wait_led_by(2, &[2, 3], Duration::from_secs(15)).await;
    let cut = cluster.isolate(1);
    cluster.node(1).resume();

    let shards = cluster.leaders().len() as u32;
    let users: Vec<u64> = (50_000..60_000u64)
        .filter(|u| led.contains(&shard_of(w.likes.biz, *u, shards)))
        .take(10)
        .collect();
    plaudit_tests::raw::likes_refused(&cluster.node(1).addr(), w.likes.biz, &users).await;
    let s = cluster.status_via(2).expect("status through node 2");
    let node1 = &s["nodes"].as_array().unwrap().iter().find(|n| n["id"] == 1).unwrap()["state"];
    assert!(node1 == "down" || node1 == "unreachable", "{s}");
    w.wait_acks(200, Duration::from_secs(30), "the others serve").await;

    cut.heal();
    w.wait_acks(200, Duration::from_secs(30), "writes go on after healing").await;
    w.stop().await;
    cluster.wait_converged().await;
    let none = admin.status(w.likes.biz, users[0], &[1]).await.unwrap();
    assert_eq!(none[0].state, plaudit_client::proto::LikeState::None);
    w.check(&admin).await;
}
