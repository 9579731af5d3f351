//! Reads from every replica are linearizable: on three nodes, writers score
//! members of a board and like entities, while readers send
//! `Request::Replica` reads (which the SDK spreads over the shard's three
//! replicas, so most land on followers) of the members' scores and of the
//! users' states. Every read must show every write acknowledged before it
//! was sent, through a drain of the board's leader (a leader change), a
//! SIGKILL of a node and its restart. A third of the score reads go to the
//! leader instead, and no read may show less than any read before it
//! showed: the leader, reading on its lease, must not lag what a follower
//! has applied. Followers must have served reads.

use plaudit_client::proto::likes::StatusRequest;
use plaudit_client::proto::scoring::{BoardQuery, BoardRef, Outcome, QueryReply, QueryRequest};
use plaudit_client::proto::{BizConfig, LikeState, Request, Response};
use plaudit_client::Client;
use plaudit_tests::{grows_by, score_event, total_ranking, Cluster};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const RANK: u32 = 91;
const MEMBERS: u64 = 4;
const USERS: u64 = 8;

struct Shared {
    biz: u32,
    /// Events acknowledged per member; likes acknowledged per user (each
    /// user likes entities 1, 2, 3... in turn).
    scored: Vec<AtomicI64>,
    /// The highest score of each member any read has shown: a later read,
    /// at the leader or a follower, must not show less.
    shown: Vec<AtomicI64>,
    liked: Vec<AtomicU64>,
    reads: AtomicU64,
    violations: Mutex<Vec<String>>,
    stop: AtomicBool,
}

fn board() -> BoardRef {
    BoardRef::TypeId("total:0".into())
}

async fn score(client: Client, member: u64, s: Arc<Shared>) {
    let mut event_id = member << 32;
    while !s.stop.load(Ordering::Relaxed) {
        event_id += 1;
        let event = score_event(RANK, member, 1, event_id);
        // A failed call may or may not have applied: only an applied
        // answer raises the floor.
        if let Ok(r) = client.score(event).await {
            if r.boards.first().is_some_and(|b| b.outcome == Outcome::Applied) {
                s.scored[member as usize].fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}

async fn like(client: Client, user: u64, s: Arc<Shared>) {
    let mut entity = 0;
    while !s.stop.load(Ordering::Relaxed) {
        entity += 1;
        match client.like(s.biz, entity, user, None).await {
            Ok(_) => s.liked[user as usize].store(entity, Ordering::SeqCst),
            // Not known to have applied: the next like is of the same
            // entity, so the floor stays true whichever happened.
            Err(_) => entity -= 1,
        }
    }
}

async fn read(client: Client, r: u64, s: Arc<Shared>) {
    let mut i = r;
    while !s.stop.load(Ordering::Relaxed) {
        i += 1;
        let member = i % MEMBERS;
        let m = member as usize;
        let floor = s.scored[m].load(Ordering::SeqCst).max(s.shown[m].load(Ordering::SeqCst));
        let q = QueryRequest {
            rank: RANK,
            board: board(),
            query: BoardQuery::Scores { items: vec![member] },
        };
        // Every third read goes to the leader: a leader's read after a
        // follower's must not show less (the leader may not have applied
        // what a follower has).
        let req = match i % 3 {
            0 => Request::Query(q),
            _ => Request::Replica(Box::new(Request::Query(q))),
        };
        if let Ok(Response::Query(QueryReply::Scores(rows))) = client.request(req).await {
            let got = rows[0].1.unwrap_or(0);
            if got < floor {
                s.violations.lock().unwrap().push(format!("member {member}: {got} < {floor}"));
            }
            s.shown[m].fetch_max(got, Ordering::SeqCst);
            s.reads.fetch_add(1, Ordering::Relaxed);
        }
        let user = i % USERS;
        let liked = s.liked[user as usize].load(Ordering::SeqCst);
        if liked == 0 {
            continue;
        }
        let status = StatusRequest { biz: s.biz, user, entities: vec![liked] };
        if let Ok(Response::Status(states)) =
            client.request(Request::Replica(Box::new(Request::Status(status)))).await
        {
            if states[0].state != LikeState::Like {
                s.violations.lock().unwrap().push(format!("user {user}: entity {liked} not liked"));
            }
            s.reads.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_at_any_replica_see_every_acknowledged_write() {
    let mut cluster = Cluster::builder(3).shards(6).start();
    cluster.wait_converged().await;
    let admin = cluster.client().await;
    admin.create_rank(total_ranking(RANK, "replicas")).await.unwrap();
    let biz = admin.create_biz(None, "replicas", BizConfig::default()).await.unwrap().id;
    let s = Arc::new(Shared {
        biz,
        scored: (0..MEMBERS).map(|_| AtomicI64::new(0)).collect(),
        shown: (0..MEMBERS).map(|_| AtomicI64::new(0)).collect(),
        liked: (0..USERS).map(|_| AtomicU64::new(0)).collect(),
        reads: AtomicU64::new(0),
        violations: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
    });
    let mut tasks = Vec::new();
    for m in 0..MEMBERS {
        tasks.push(tokio::spawn(score(cluster.client().await, m, s.clone())));
    }
    for u in 0..USERS {
        tasks.push(tokio::spawn(like(cluster.client().await, u, s.clone())));
    }
    for r in 0..4 {
        tasks.push(tokio::spawn(read(cluster.client().await, r, s.clone())));
    }
    let reads_past = |n: u64| {
        let s = s.clone();
        async move { grows_by(&s.reads, n, Duration::from_secs(60), "reads").await }
    };
    reads_past(300).await;
    let leaders_before = cluster.leaders();
    // A leader change: the busiest node hands its leaderships away.
    let busiest = cluster.most_leading();
    let (code, lines) =
        cluster.node(busiest).cli_lines(&["admin", "drain", &busiest.to_string(), "--wait"]);
    assert_eq!(code, 0, "{lines:?}");
    reads_past(300).await;
    // A node killed mid-load (a follower of some shards, leader of others)
    // and brought back.
    let victim = cluster.most_leading();
    cluster.kill9(victim);
    reads_past(300).await;
    cluster.restart(victim);
    reads_past(300).await;

    s.stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    assert_ne!(cluster.leaders(), leaders_before, "the leaderships moved");
    let scored: i64 = s.scored.iter().map(|a| a.load(Ordering::Relaxed)).sum();
    assert!(scored > 100, "the writers made progress: {scored} events");
    let violations = s.violations.lock().unwrap().clone();
    assert!(
        violations.is_empty(),
        "{} of {} reads missed acknowledged writes: {:?}",
        violations.len(),
        s.reads.load(Ordering::Relaxed),
        &violations[..violations.len().min(10)]
    );
    let served = cluster.metric_total("plaudit_follower_reads_total");
    assert!(served > 100.0, "followers served {served} reads");
}
