//! plaudit-partition: what a silent partition of a leader costs, on real
//! three-node clusters on this machine, cut by the kernel
//! (`plaudit_tests::partition`: node 1 runs as a user of its own and
//! iptables drops its peer traffic both ways, no reset).
//!
//! ```text
//! run k: a fresh cluster (node 1 leads shards 0 and 3 of 6 by placement) ─ writers (SDK,
//!        every node a seed) liking at full speed ─ cut node 1 off ─ probe each shard it led
//!        with a like every 20 ms (a fresh user each, the SDK's default timeout, each on its
//!        own, as independent clients would) ─ time to the first acknowledged write per shard,
//!        and until node 2's status shows node 1 not up and every group led ─ heal after 5 s
//! print each run, the median and the max of both times, the writers' failed requests and
//! those slower than 1 s during the cut, and JSON
//! ```
//!
//! Needs root and iptables. Usage: `plaudit-partition [--runs N]` (default 10).

use plaudit_client::proto::routing::shard_of;
use plaudit_client::proto::BizConfig;
use plaudit_client::{Client, ClientOptions};
use plaudit_tests::Cluster;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SHARDS: u32 = 6;
const CUT_FOR: Duration = Duration::from_secs(5);
const SLOW: Duration = Duration::from_secs(1);

use plaudit_tests::util::arg_u32 as arg;

/// Whether node 2's status shows node 1 not up and every group led by 2 or 3.
fn truthful(cluster: &Cluster) -> bool {
    let Some(s) = cluster.status_via(2) else { return false };
    let node1 = s["nodes"].as_array().and_then(|ns| ns.iter().find(|n| n["id"] == 1).cloned());
    let cut_off = node1.is_some_and(|n| n["state"] != "up");
    let led = |g: &serde_json::Value| matches!(g["leader"].as_u64(), Some(2 | 3));
    cut_off && s["shards"].as_array().is_some_and(|gs| gs.iter().all(led)) && led(&s["meta"])
}

/// Writers' outcomes during a window: `(ok, failed, slow)`.
#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    failed: AtomicU64,
    slow: AtomicU64,
}

/// Whether node 2 or 3 says it leads every shard of `led` (from `/metrics`).
fn elected(cluster: &Cluster, led: &[u32]) -> bool {
    led.iter().all(|s| {
        [2, 3].iter().any(|&n| {
            let text = cluster.node(n).admin_get("/metrics").map(|r| r.1).unwrap_or_default();
            let name = format!("plaudit_raft_is_leader{{shard=\"{s}\"}}");
            plaudit_tests::metric_sum(&text, &name) == Some(1.0)
        })
    })
}

struct Run {
    elected: Duration,
    first_write: Duration,
    truthful: Duration,
    ok: u64,
    failed: u64,
    slow: u64,
}

async fn one_run(k: u32) -> Option<Run> {
    let cluster = Cluster::builder(3).shards(SHARDS).isolatable(1).start();
    let admin = cluster.client().await;
    let biz = admin.create_biz(None, "partition", BizConfig::default()).await.expect("biz").id;
    let led = cluster.shards_led_by(1);
    if led.is_empty() {
        println!("run {k}: node 1 leads no shard; not counted");
        return None;
    }
    let mut user = 1_000_000u64 * u64::from(k);
    let mut user_on = |shard: u32| loop {
        user += 1;
        if shard_of(biz, user, SHARDS) == shard {
            return user;
        }
    };
    // Writers: each a client of its own, one like at a time, as fast as it goes.
    let stop = Arc::new(AtomicBool::new(false));
    let cutting = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let mut writers = Vec::new();
    for w in 0..4u64 {
        let c = cluster.client().await;
        let (stop, cutting, tally) = (stop.clone(), cutting.clone(), tally.clone());
        writers.push(tokio::spawn(async move {
            let mut u = w;
            while !stop.load(Ordering::Relaxed) {
                u += 4;
                let t = Instant::now();
                let res = c.like(biz, 7, u % 100_000, None).await;
                if cutting.load(Ordering::Relaxed) {
                    let which = match res {
                        Err(_) => &tally.failed,
                        Ok(_) if t.elapsed() >= SLOW => &tally.slow,
                        Ok(_) => &tally.ok,
                    };
                    which.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    let probe =
        Client::connect_with(&cluster.seeds(), ClientOptions::default()).await.expect("probe");
    for &s in &led {
        probe.like(biz, 1, user_on(s), None).await.expect("a write before the cut");
    }
    let users: Vec<(u32, Vec<u64>)> =
        led.iter().map(|&s| (s, (0..400).map(|_| user_on(s)).collect())).collect();
    tokio::time::sleep(Duration::from_millis(500)).await;

    cutting.store(true, Ordering::Relaxed);
    let cut = cluster.isolate(1);
    let at = Instant::now();
    // Per shard, a like every 20 ms, each on its own: a write stuck at the
    // isolated node (it may still commit, so it waits out its timeout)
    // does not hold back the next, as with independent clients.
    let probes: Vec<_> = users
        .into_iter()
        .map(|(s, users)| {
            let probe = probe.clone();
            tokio::spawn(async move {
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                for u in users {
                    let (probe, tx) = (probe.clone(), tx.clone());
                    tokio::spawn(async move {
                        if probe.like(biz, 2, u, None).await.is_ok() {
                            let _ = tx.send(at.elapsed());
                        }
                    });
                    if let Ok(first) = rx.try_recv() {
                        return (s, Some(first));
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                drop(tx);
                (s, rx.recv().await)
            })
        })
        .collect();
    let mut elected_at = None;
    while elected_at.is_none() && at.elapsed() < CUT_FOR {
        if elected(&cluster, &led) {
            elected_at = Some(at.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut told = None;
    while at.elapsed() < CUT_FOR {
        if told.is_none() && truthful(&cluster) {
            told = Some(at.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut first_write = Duration::ZERO;
    let mut per_shard = Vec::new();
    for p in probes {
        let (s, took) = p.await.expect("probe task");
        let took = took.unwrap_or_else(|| panic!("shard {s} took no write during the cut"));
        first_write = first_write.max(took);
        per_shard.push((s, took.as_millis()));
    }
    cutting.store(false, Ordering::Relaxed);
    drop(cut);
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        let _ = w.await;
    }
    let truthful = told.unwrap_or(CUT_FOR);
    let elected = elected_at.unwrap_or(CUT_FOR);
    let (ok, failed, slow) = (
        tally.ok.load(Ordering::Relaxed),
        tally.failed.load(Ordering::Relaxed),
        tally.slow.load(Ordering::Relaxed),
    );
    println!(
        "run {k}: node 1 led {led:?}; new leaders after {} ms; first write per shard (ms) \
         {per_shard:?}; status truthful after {} ms; writers during the cut: {ok} ok, {failed} \
         failed, {slow} slower than {} ms",
        elected.as_millis(),
        truthful.as_millis(),
        SLOW.as_millis()
    );
    Some(Run { elected, first_write, truthful, ok, failed, slow })
}

fn median_max(mut v: Vec<Duration>) -> (u128, u128) {
    v.sort();
    (v[v.len() / 2].as_millis(), v[v.len() - 1].as_millis())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if let Err(e) = plaudit_tests::partition::user() {
        eprintln!("plaudit-partition: {e}");
        std::process::exit(2);
    }
    let runs = arg("--runs", 10);
    let mut done: Vec<Run> = Vec::new();
    let mut k = 0;
    while (done.len() as u32) < runs {
        k += 1;
        if let Some(r) = one_run(k).await {
            done.push(r);
        }
    }
    let (el_med, el_max) = median_max(done.iter().map(|r| r.elected).collect());
    let (fw_med, fw_max) = median_max(done.iter().map(|r| r.first_write).collect());
    let (st_med, st_max) = median_max(done.iter().map(|r| r.truthful).collect());
    let ok: u64 = done.iter().map(|r| r.ok).sum();
    let failed: u64 = done.iter().map(|r| r.failed).sum();
    let slow: u64 = done.iter().map(|r| r.slow).sum();
    println!(
        "over {runs} runs: new leaders median {el_med} ms, max {el_max} ms; first write on the \
         isolated leader's shards median {fw_med} ms, max {fw_max} ms; status truthful median {st_med} ms, max {st_max} ms; writers during the \
         cuts: {ok} ok, {failed} failed, {slow} slower than {} ms",
        SLOW.as_millis()
    );
    println!(
        "{{\"runs\":{runs},\"elected_median_ms\":{el_med},\"elected_max_ms\":{el_max},\
         \"first_write_median_ms\":{fw_med},\"first_write_max_ms\":{fw_max},\
         \"status_median_ms\":{st_med},\"status_max_ms\":{st_max},\"writes_ok\":{ok},\
         \"writes_failed\":{failed},\"writes_slow\":{slow}}}"
    );
}
