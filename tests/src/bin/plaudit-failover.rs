//! plaudit-failover: measures how long the shards of a SIGKILLed leader
//! stay without an acknowledged write, on a real three-node cluster on
//! this machine.
//!
//! ```text
//! start 3 nodes (the plaudit-node beside this binary) ─ create a business
//! run k: victim = the leader of shard k mod S ─ SIGKILL it ─ probe every shard it led with
//!        likes (a fresh user each try, an SDK call timeout of 300 ms, retried at once)
//!        ─ per shard: time to its first acknowledged write ─ restart the victim, wait until
//!        every shard is led again
//! print each run (the slowest of its shards), the median and the max, and JSON
//! ```
//!
//! The time includes the control plane noticing the death, the followers'
//! leader lease running out, the election, and the SDK finding the new
//! leader (its backoff between tries starts at 20 ms).
//!
//! Usage: `plaudit-failover [--runs N] [--shards S] [--set PLAUDIT_FIELD=VALUE]...`
//! (defaults 10 runs, 4 shards; `--set` passes a config variable to every node).

use plaudit_client::proto::routing::shard_of;
use plaudit_client::proto::BizConfig;
use plaudit_client::{Client, ClientOptions};
use plaudit_tests::Cluster;
use std::time::{Duration, Instant};

use plaudit_tests::util::arg_u32 as arg;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let runs = arg("--runs", 10);
    let shards = arg("--shards", 4);
    let args: Vec<String> = std::env::args().collect();
    let mut builder = Cluster::builder(3).shards(shards);
    for w in args.windows(2).filter(|w| w[0] == "--set") {
        let (k, v) = w[1].split_once('=').expect("--set takes KEY=VALUE");
        builder = builder.env(k, v);
    }
    let mut cluster = builder.start();
    let admin = cluster.client().await;
    let biz = admin.create_biz(None, "failover", BizConfig::default()).await.expect("biz").id;
    let probe_opts = ClientOptions { timeout: Duration::from_millis(300), ..Default::default() };
    let mut next_user = 0u64;
    let mut user_on = |shard: u32| loop {
        next_user += 1;
        if shard_of(biz, next_user, shards) == shard {
            return next_user;
        }
    };
    let mut worst = Vec::new();
    let mut run = 0;
    while (worst.len() as u32) < runs {
        run += 1;
        cluster.wait_led_by(1 + run as u64 % 3, &cluster.running(), Duration::from_secs(30)).await;
        let leaders = cluster.leaders();
        let victim = leaders[(run % shards) as usize].expect("every shard has a leader");
        // The status may lag a leader change: make sure the victim leads.
        let fresh = cluster.leaders();
        if fresh[(run % shards) as usize] != Some(victim) {
            continue;
        }
        let led: Vec<u32> = (0..shards).filter(|&s| leaders[s as usize] == Some(victim)).collect();
        // A client that knows the current leaders, as an application would.
        let probe =
            Client::connect_with(&cluster.seeds(), probe_opts.clone()).await.expect("probe");
        for &s in &led {
            probe.like(biz, 1, user_on(s), None).await.expect("a write before the kill");
        }
        let users: Vec<Vec<u64>> =
            led.iter().map(|&s| (0..400).map(|_| user_on(s)).collect()).collect();
        let killed = Instant::now();
        cluster.kill9(victim);
        let probes = led.iter().zip(users).map(|(&s, users)| {
            let probe = probe.clone();
            tokio::spawn(async move {
                for u in users {
                    if probe.like(biz, 2 + run as u64, u, None).await.is_ok() {
                        return (s, Some(killed.elapsed()));
                    }
                }
                (s, None)
            })
        });
        let mut slowest = Duration::ZERO;
        let mut per_shard = Vec::new();
        for p in probes.collect::<Vec<_>>() {
            let (s, took) = p.await.expect("probe task");
            let took = took.unwrap_or_else(|| panic!("shard {s} never took a write again"));
            slowest = slowest.max(took);
            per_shard.push((s, took.as_millis()));
        }
        cluster.restart(victim);
        if slowest < Duration::from_millis(100) {
            // Faster than any election: the victim had lost its shards
            // before the kill (a leader change the status had not shown).
            println!("run {run}: node {victim} no longer led {led:?}; not counted");
            continue;
        }
        println!(
            "run {run}: killed node {victim} (leading shards {led:?}); first write per shard (ms): \
             {per_shard:?}; slowest {} ms",
            slowest.as_millis()
        );
        worst.push(slowest);
    }
    let mut sorted = worst.clone();
    sorted.sort();
    let median = sorted[sorted.len() / 2];
    let max = *sorted.last().expect("at least one run");
    println!(
        "failover over {runs} runs: median {} ms, max {} ms",
        median.as_millis(),
        max.as_millis()
    );
    let ms: Vec<u128> = worst.iter().map(|d| d.as_millis()).collect();
    println!(
        "{{\"runs\":{runs},\"median_ms\":{},\"max_ms\":{},\"each_ms\":{ms:?}}}",
        median.as_millis(),
        max.as_millis()
    );
}
