//! The SDK's cache of hot keys never shows a client an older value than
//! one it wrote. On three nodes that call a board hot at 20 reads a
//! second, one client with a long TTL (2 s: a stale entry would surely be
//! served) scores a member again and again and reads the member's score
//! right after each acknowledged event, while three readers on the same
//! client read it without pause. Every read, cached or not, must show at
//! least every event acknowledged before it was sent; many of them must
//! have come from the cache, or the test shows nothing.

use plaudit_client::proto::scoring::{BoardQuery, BoardRef, Outcome, QueryReply, QueryRequest};
use plaudit_client::proto::{Request, Response};
use plaudit_client::{Client, ClientOptions};
use plaudit_tests::{score_event, total_ranking, Cluster};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const RANK: u32 = 90;
const MEMBER: u64 = 7;
const TTL: Duration = Duration::from_secs(2);

fn read() -> Request {
    Request::Query(QueryRequest {
        rank: RANK,
        board: BoardRef::TypeId("total:0".into()),
        query: BoardQuery::Scores { items: vec![MEMBER] },
    })
}

struct Seen {
    /// Events acknowledged as applied.
    acked: AtomicI64,
    cached: AtomicU64,
    reads: AtomicU64,
    stale: Mutex<Vec<String>>,
    stop: AtomicBool,
}

/// Reads the member's score and checks it shows at least `floor`.
async fn check(client: &Client, s: &Seen, floor: i64) {
    let answer = client.request_cached(read()).await.expect("a read");
    let score = match &answer.value {
        Response::Query(QueryReply::Scores(rows)) => rows[0].1.unwrap_or(0),
        other => panic!("unexpected answer {other:?}"),
    };
    s.reads.fetch_add(1, Ordering::Relaxed);
    if let Some(age) = answer.age {
        assert!(age < TTL, "a cached answer older than the TTL: {age:?}");
        s.cached.fetch_add(1, Ordering::Relaxed);
    }
    if score < floor {
        s.stale.lock().unwrap().push(format!("{score} < {floor} (age {:?})", answer.age));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reads_its_own_writes_through_its_cache() {
    let cluster = Cluster::builder(3).shards(6).env("PLAUDIT_HOT_CACHE_MIN_RPS", 20).start();
    cluster.wait_converged().await;
    cluster.client().await.create_rank(total_ranking(RANK, "cached")).await.unwrap();
    let client =
        cluster.client_with(ClientOptions { cache_ttl: TTL, ..ClientOptions::default() }).await;
    assert_eq!(client.cache_ttl(), Some(TTL));
    let s = Arc::new(Seen {
        acked: AtomicI64::new(0),
        cached: AtomicU64::new(0),
        reads: AtomicU64::new(0),
        stale: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
    });

    let mut readers = Vec::new();
    for _ in 0..3 {
        let (client, s) = (client.clone(), s.clone());
        readers.push(tokio::spawn(async move {
            while !s.stop.load(Ordering::Relaxed) {
                check(&client, &s, s.acked.load(Ordering::SeqCst)).await;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }));
    }

    // The writer: an event, then at once a read of its own result, then a
    // pause in which the readers may be served from the cache.
    let started = tokio::time::Instant::now();
    let mut event_id = 0;
    while started.elapsed() < Duration::from_secs(10) {
        event_id += 1;
        let reply = client.score(score_event(RANK, MEMBER, 1, event_id)).await.expect("a score");
        assert_eq!(reply.boards[0].outcome, Outcome::Applied, "{reply:?}");
        let acked = s.acked.fetch_add(1, Ordering::SeqCst) + 1;
        check(&client, &s, acked).await;
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    s.stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.await.unwrap();
    }

    let stale = s.stale.lock().unwrap().clone();
    let (reads, cached) = (s.reads.load(Ordering::Relaxed), s.cached.load(Ordering::Relaxed));
    assert!(
        stale.is_empty(),
        "{} of {reads} reads were older than the client's writes: {:?}",
        stale.len(),
        &stale[..stale.len().min(10)]
    );
    assert!(cached > 100, "only {cached} of {reads} reads came from the cache");
    assert!(cached < reads, "every read came from the cache");

    // A handle that reads around the cache asks a node every time.
    let fresh = client.uncached().request_cached(read()).await.unwrap();
    assert_eq!(fresh.age, None);
    // So does a client with the cache off.
    let off = cluster
        .client_with(ClientOptions { cache_ttl: Duration::ZERO, ..Default::default() })
        .await;
    assert_eq!(off.cache_ttl(), None);
    assert_eq!(off.request_cached(read()).await.unwrap().age, None);
}
