//! Reads are linearizable through leadership changes: a read issued after
//! a write was acknowledged sees it, whichever node serves the read and
//! whether it relied on the leader's read lease (`cluster/src/lease.rs`) or
//! on a read-index round. Writers like entities 1, 2, 3, ... of their own
//! users in order, so "every entity up to the last acknowledged" is what a
//! later read must show; readers check exactly that while leaderships are
//! drained away, a leader is killed with SIGKILL and restarted, and a node
//! is restarted with SIGTERM.

use plaudit_client::proto::{BizConfig, LikeState};
use plaudit_client::Client;
use plaudit_tests::{grows_by, Cluster};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const USERS: u64 = 48;
/// Likes per user at most: a read asks for every entity up to this.
const ENTITIES: u64 = 200;

struct Shared {
    /// Per user, the highest entity whose like was acknowledged (all below it were).
    acked: Vec<AtomicU64>,
    stop: AtomicBool,
    reads: AtomicU64,
    violations: Mutex<Vec<String>>,
}

async fn write(client: Client, biz: u32, users: Vec<u64>, s: Arc<Shared>) {
    let mut next: Vec<u64> = vec![1; users.len()];
    let mut i = 0;
    while !s.stop.load(Ordering::Relaxed) {
        let k = i % users.len();
        i += 1;
        let (user, entity) = (users[k], next[k]);
        if entity > ENTITIES {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        }
        // A failed like (a timeout through a failover) may or may not have
        // applied: try the same one again, never the next.
        if client.like(biz, entity, user, None).await.is_ok() {
            s.acked[user as usize].store(entity, Ordering::Release);
            next[k] += 1;
        }
    }
}

async fn read(client: Client, biz: u32, seed: u64, s: Arc<Shared>) {
    let entities: Vec<u64> = (1..=ENTITIES).collect();
    let mut user = seed;
    while !s.stop.load(Ordering::Relaxed) {
        user = (user * 7 + 3) % USERS;
        // Taken before the read is sent: every like up to here was
        // acknowledged before the read began.
        let floor = s.acked[user as usize].load(Ordering::Acquire);
        let Ok(states) = client.status(biz, user, &entities).await else { continue };
        s.reads.fetch_add(1, Ordering::Relaxed);
        let missing: Vec<u64> = states
            .iter()
            .filter(|st| st.entity <= floor && st.state != LikeState::Like)
            .map(|st| st.entity)
            .collect();
        if !missing.is_empty() {
            let why = format!("user {user}: acked up to {floor}, read misses {missing:?}");
            s.violations.lock().unwrap().push(why);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_after_an_acknowledged_write_sees_it_through_leader_changes() {
    let mut cluster = Cluster::builder(3).shards(6).start();
    cluster.wait_converged().await;
    let admin = cluster.client().await;
    let biz = admin.create_biz(None, "reads", BizConfig::default()).await.unwrap().id;
    let s = Arc::new(Shared {
        acked: (0..USERS).map(|_| AtomicU64::new(0)).collect(),
        stop: AtomicBool::new(false),
        reads: AtomicU64::new(0),
        violations: Mutex::new(Vec::new()),
    });
    let mut tasks = Vec::new();
    for w in 0..4u64 {
        let users: Vec<u64> = (0..USERS).filter(|u| u % 4 == w).collect();
        tasks.push(tokio::spawn(write(cluster.client().await, biz, users, s.clone())));
    }
    for r in 0..4u64 {
        tasks.push(tokio::spawn(read(cluster.client().await, biz, r, s.clone())));
    }
    let reads_past = |n: u64| {
        let s = s.clone();
        async move { grows_by(&s.reads, n, Duration::from_secs(30), "reads").await }
    };
    reads_past(200).await;
    let leaders_before = cluster.leaders();

    // Leaderships handed away (the lease ends with the hand-off)...
    let busiest = cluster.most_leading();
    let (code, lines) =
        cluster.node(busiest).cli_lines(&["admin", "drain", &busiest.to_string(), "--wait"]);
    assert_eq!(code, 0, "{lines:?}");
    reads_past(200).await;
    // ...a leader killed (its lease runs out before another is elected)...
    let victim = cluster.most_leading();
    cluster.kill9(victim);
    reads_past(200).await;
    cluster.restart(victim);
    reads_past(200).await;
    // ...and a node restarted with SIGTERM (it hands its leaderships over).
    let other = cluster.ids().into_iter().find(|&id| id != victim && id != busiest).unwrap();
    cluster.node_mut(other).terminate();
    cluster.restart(other);
    reads_past(200).await;

    s.stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    assert_ne!(cluster.leaders(), leaders_before, "the leaderships moved");
    let acked: u64 = s.acked.iter().map(|a| a.load(Ordering::Relaxed)).sum();
    assert!(acked > 200, "the writers made progress: {acked} likes");
    let violations = s.violations.lock().unwrap();
    assert!(
        violations.is_empty(),
        "{} of {} reads missed acknowledged likes: {:?}",
        violations.len(),
        s.reads.load(Ordering::Relaxed),
        &violations[..violations.len().min(10)]
    );
}
