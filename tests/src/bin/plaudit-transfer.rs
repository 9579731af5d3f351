//! plaudit-transfer: what a leadership hand-off costs (`cluster/src/transfer.rs`),
//! on a real three-node cluster on this machine, under a like load.
//!
//! ```text
//! start 3 nodes of 6 shards (test mode) ─ four SDK writers, one like at a time, every
//! like's shard, start, latency and outcome recorded ─ N times: shard i mod 6, its leader
//! hands it to another replica (POST /debug/transfer on the leader), 1 s apart
//! print each hand-off (how long the shard took no writes), the median and the max, and
//! per hand-off the likes on that shard it slowed: in flight during it and slower than
//! 100 ms (the load's p99 is a few ms), their longest wait, and any that failed
//! ```
//!
//! Then a rolling restart under the same load: each node in turn gets
//! SIGTERM (it hands its leaderships away first), is started again and
//! waited for; printed: the longest any like waited meanwhile, and any
//! that failed.
//!
//! Usage: `plaudit-transfer [--runs N]` (default 24).

use plaudit_client::proto::routing::shard_of;
use plaudit_client::proto::BizConfig;
use plaudit_tests::Cluster;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SHARDS: u32 = 6;
const SLOW: Duration = Duration::from_millis(100);

use plaudit_tests::util::arg_u32 as arg;

/// One like: its shard, when it started (since the bench began), how long
/// it took, whether it was acknowledged.
type Sample = (u32, Duration, Duration, bool);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let runs = arg("--runs", 24);
    let mut cluster = Cluster::builder(3).shards(SHARDS).start();
    let admin = cluster.client().await;
    let biz = admin.create_biz(None, "transfer", BizConfig::default()).await.expect("biz").id;
    let t0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();
    let mut writers = Vec::new();
    for w in 0..4u64 {
        let c = cluster.client().await;
        let (stop, samples) = (stop.clone(), samples.clone());
        writers.push(tokio::spawn(async move {
            let mut u = w;
            while !stop.load(Ordering::Relaxed) {
                u += 4;
                let user = u % 100_000;
                let start = Instant::now();
                let ok = c.like(biz, 7, user, None).await.is_ok();
                let s = (shard_of(biz, user, SHARDS), start - t0, start.elapsed(), ok);
                samples.lock().unwrap().push(s);
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;

    let mut done = Vec::new();
    for i in 0..runs {
        let shard = i % SHARDS;
        let Some(leader) = cluster.leaders()[shard as usize] else { continue };
        let s = cluster.status();
        let replicas: Vec<u64> = s["shards"][shard as usize]["replicas"]
            .as_array()
            .map(|r| r.iter().filter_map(|v| v.as_u64()).collect())
            .unwrap_or_default();
        let others: Vec<u64> = replicas.into_iter().filter(|&r| r != leader).collect();
        let to = others[(i as usize / SHARDS as usize) % others.len()];
        let began = t0.elapsed();
        let path = format!("/debug/transfer?group={shard}&to={to}");
        match cluster.node(leader).admin_post(&path) {
            Ok((200, body)) => {
                let took: u64 = body.trim().parse().unwrap_or(0);
                done.push((shard, leader, to, began, t0.elapsed(), took));
            }
            other => println!("hand-off {i}: shard {shard} {leader} -> {to} not done: {other:?}"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // The rolling restart, on the blocking pool: a restart waits for the
    // node with std sleeps, and the writers must keep running meanwhile.
    let rolling_from = t0.elapsed();
    let cluster = tokio::task::spawn_blocking(move || {
        for id in cluster.ids() {
            cluster.node_mut(id).terminate();
            cluster.restart(id);
            std::thread::sleep(Duration::from_secs(2));
        }
        cluster
    })
    .await
    .expect("the rolling restart");
    let rolling_to = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        let _ = w.await;
    }
    drop(cluster);
    let samples = samples.lock().unwrap().clone();
    let rolling: Vec<&Sample> = samples
        .iter()
        .filter(|(_, start, _, _)| *start >= rolling_from && *start < rolling_to)
        .collect();
    let rolling_longest = rolling.iter().map(|s| s.2).max().unwrap_or_default();
    let rolling_failed = rolling.iter().filter(|s| !s.3).count();
    let rolling_slow = rolling.iter().filter(|s| s.3 && s.2 >= SLOW).count();
    let mut took_all = Vec::new();
    let (mut slowed_all, mut failed_all, mut longest_all) = (0usize, 0usize, Duration::ZERO);
    for (shard, from, to, began, ended, took) in &done {
        // Likes on the shard in flight at some point of the hand-off.
        let mine = samples
            .iter()
            .filter(|(s, start, lat, _)| s == shard && *start < *ended && *start + *lat > *began);
        let (mut slowed, mut failed, mut longest) = (0, 0, Duration::ZERO);
        for &(_, _, lat, ok) in mine {
            if !ok {
                failed += 1;
            } else if lat >= SLOW {
                slowed += 1;
            }
            longest = longest.max(lat);
        }
        println!(
            "shard {shard}: {from} -> {to}: no writes for {took} ms; likes slowed {slowed}, \
             failed {failed}, longest wait {} ms",
            longest.as_millis()
        );
        took_all.push(*took);
        slowed_all += slowed;
        failed_all += failed;
        longest_all = longest_all.max(longest);
    }
    took_all.sort_unstable();
    let (med, max) = (took_all[took_all.len() / 2], *took_all.last().expect("a hand-off"));
    let total = samples.len();
    let failed_total = samples.iter().filter(|s| !s.3).count();
    println!(
        "{} hand-offs: median {med} ms, max {max} ms; likes slowed by them {slowed_all}, failed \
         {failed_all}, longest wait {} ms; all likes {total}, failed {failed_total}",
        took_all.len(),
        longest_all.as_millis()
    );
    println!(
        "rolling restart of 3 nodes ({:.1} s): {} likes, longest wait {} ms, {rolling_slow} slower \
         than {} ms, {rolling_failed} failed",
        (rolling_to - rolling_from).as_secs_f64(),
        rolling.len(),
        rolling_longest.as_millis(),
        SLOW.as_millis()
    );
    println!(
        "{{\"handoffs\":{},\"median_ms\":{med},\"max_ms\":{max},\"slowed\":{slowed_all},\
         \"failed\":{failed_all},\"longest_wait_ms\":{},\"likes\":{total},\"likes_failed\":{failed_total},\
         \"rolling_likes\":{},\"rolling_longest_ms\":{},\"rolling_slow\":{rolling_slow},\
         \"rolling_failed\":{rolling_failed}}}",
        took_all.len(),
        longest_all.as_millis(),
        rolling.len(),
        rolling_longest.as_millis()
    );
}
