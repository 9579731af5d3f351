//! Hostile clients against a real node: none of them may grow its memory
//! past the bounds the design sets (README, "Limits"), and every other
//! client, and `/readyz`, is served while they try.
//!
//! The memory assertions compare the node's RSS with its RSS before the
//! attack, against bounds an order of magnitude below what the attack cost
//! before the bounds existed (noted per test); they assert the design's
//! bound, not a timing.

use plaudit_client::proto::likes::CountsRequest;
use plaudit_client::proto::limits::MAX_FRAME_LEN;
use plaudit_client::proto::{BizConfig, Request};
use plaudit_client::Client;
use plaudit_tests::raw::{self, RawConn};
use plaudit_tests::{http_get, metric_sum, wait_until, Node};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const MIB: u64 = 1 << 20;

/// Connections the node closed for `reason`.
fn closed(node: &Node, reason: &str) -> u64 {
    let name = format!("plaudit_connections_closed_total{{reason=\"{reason}\"}}");
    metric_sum(&node.metrics_text(), &name).unwrap_or(0.0) as u64
}

/// Another client is served, and the node is ready.
async fn others_served(node: &Node, c: &Client) {
    c.ping().await.expect("another client is served");
    assert_eq!(http_get(node.admin_addr(), "/readyz").expect("readyz").0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_holds_bounded_memory_and_is_cut_off() {
    let node = Node::builder().env("PLAUDIT_CLIENT_WRITE_TIMEOUT_SECS", 3).start();
    let c = node.client().await;
    let biz = c.create_biz(None, "unread", BizConfig::default()).await.unwrap().id;
    let counts = Request::Counts(CountsRequest { biz, entities: (1..=500).collect() });
    // The same work through a client that reads, so the baseline includes it.
    for _ in 0..300 {
        c.request(counts.clone()).await.unwrap();
    }
    let before = node.rss_bytes();

    // 20,000 pipelined counts of 500 entities (~40 MB of requests, ~60 MB
    // of replies), never reading a reply. Before the bounds, the node read
    // them all and queued every reply (0.5 MB of requests cost +707 MiB).
    let burst: Vec<u8> =
        (1..=20_000u64).flat_map(|id| raw::request_frame(id, counts.clone())).collect();
    let mut hostile = TcpStream::connect(node.addr()).await.unwrap();
    let writer = tokio::spawn(async move { hostile.write_all(&burst).await });

    let peak = AtomicU64::new(before);
    wait_until(Duration::from_secs(60), "the node cuts the non-reading client off", || async {
        peak.fetch_max(node.rss_bytes(), Ordering::Relaxed);
        others_served(&node, &c).await;
        closed(&node, "write_timeout") >= 1
    })
    .await;
    let peak = peak.into_inner();
    let written = tokio::time::timeout(Duration::from_secs(10), writer).await;
    assert!(
        matches!(written, Ok(Ok(Err(_)))),
        "the writer fails once the node drops it: {written:?}"
    );
    let grew = peak.saturating_sub(before);
    eprintln!("non-reading client: RSS {} MiB -> peak {} MiB", before / MIB, peak / MIB);
    assert!(grew < 32 * MIB, "the node grew by {} MiB", grew / MIB);
    others_served(&node, &c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_frames_hold_what_arrived_not_what_they_announce() {
    // Long enough for all of them to connect (seconds, in a debug build).
    let node = Node::builder().env("PLAUDIT_CLIENT_FRAME_TIMEOUT_SECS", 20).start();
    let c = node.client().await;
    c.ping().await.unwrap();
    let before = node.rss_bytes();

    // 2,000 connections announce a 1 MiB frame, send 1,000 bytes of it and
    // stall. Before, each announced length was allocated at once: +2 GiB.
    const N: usize = 2000;
    let mut head = (MAX_FRAME_LEN as u32).to_be_bytes().to_vec();
    head.extend_from_slice(&[0u8; 1000]);
    let mut stalled = Vec::with_capacity(N);
    for _ in 0..N {
        let mut s = TcpStream::connect(node.addr()).await.unwrap();
        s.write_all(&head).await.unwrap();
        stalled.push(s);
    }
    let open = |node: &Node| metric_sum(&node.metrics_text(), "plaudit_connections_open");
    wait_until(Duration::from_secs(30), "every stalled connection is open", || async {
        open(&node).unwrap_or(0.0) as usize > N
    })
    .await;
    // Give each a moment to have read what it was sent, then measure.
    c.ping().await.unwrap();
    let held = node.rss_bytes();
    others_served(&node, &c).await;
    let grew = held.saturating_sub(before);
    eprintln!("{N} stalled 1 MiB frames: RSS {} MiB -> {} MiB", before / MIB, held / MIB);
    assert!(grew < 160 * MIB, "the node grew by {} MiB for {N} stalled frames", grew / MIB);

    // A connection whose first frame never completes has also sent no
    // request: whichever of the two timeouts (first request, 10 s; frame,
    // 20 s) runs out first closes it.
    wait_until(Duration::from_secs(60), "the node closes them all", || async {
        closed(&node, "frame_timeout") + closed(&node, "auth_timeout") >= N as u64
    })
    .await;
    others_served(&node, &c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_frames_share_a_node_wide_budget() {
    // 16 MiB for all long frames; 256 connections each send half of a 1 MiB
    // frame (128 MiB in all). Before, the node allocated (and zeroed) 256 MiB
    // as soon as the lengths arrived.
    let node = Node::builder().env("PLAUDIT_CLIENT_FRAME_BUDGET_MB", 16).start();
    let c = node.client().await;
    c.ping().await.unwrap();
    let before = node.rss_bytes();
    let mut half = (MAX_FRAME_LEN as u32).to_be_bytes().to_vec();
    half.resize(4 + MAX_FRAME_LEN / 2, 0xAB);
    let mut writers = Vec::new();
    for _ in 0..256 {
        let mut s = TcpStream::connect(node.addr()).await.unwrap();
        let bytes = half.clone();
        // A connection the node stops reading blocks here; that is the point.
        writers.push(tokio::spawn(async move {
            let _ = s.write_all(&bytes).await;
            s
        }));
    }
    // The budget runs out (the bound is reached), and the node holds no
    // more than it plus each connection's free room (256 x 64 KiB = 16 MiB),
    // and what the allocator keeps of the smaller buffers a long frame's
    // buffer grew out of (its room doubles as bytes arrive).
    let used = |node: &Node| {
        metric_sum(&node.metrics_text(), "plaudit_client_frame_budget_used_bytes").unwrap_or(0.0)
    };
    wait_until(Duration::from_secs(30), "the frame budget is all in use", || async {
        others_served(&node, &c).await;
        used(&node) as u64 > 15 * MIB
    })
    .await;
    let grew = node.rss_bytes().saturating_sub(before);
    eprintln!("256 half-sent 1 MiB frames, 16 MiB budget: +{} MiB", grew / MIB);
    assert!(grew < 96 * MIB, "the node grew by {} MiB", grew / MIB);
    for w in writers {
        w.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_at_the_cap_make_room_for_new_clients() {
    // Silent connections are not closed for minutes here; a newcomer gets in
    // because it takes the place of the longest idle one.
    let node = Node::builder()
        .env("PLAUDIT_MAX_CONNECTIONS", 200)
        .env("PLAUDIT_CLIENT_AUTH_TIMEOUT_SECS", 600)
        .start();
    let mut idle = Vec::new();
    for _ in 0..200 {
        idle.push(TcpStream::connect(node.addr()).await.unwrap());
    }
    wait_until(Duration::from_secs(30), "a new client connects and is served", || async {
        match Client::connect(&node.addr()).await {
            Ok(c) => c.ping().await.is_ok(),
            Err(_) => false,
        }
    })
    .await;
    assert!(closed(&node, "evicted") >= 1, "an idle connection made room");
    assert_eq!(http_get(node.admin_addr(), "/readyz").unwrap().0, 200);
    drop(idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_idle_connections_are_closed() {
    let node = Node::builder()
        .env("PLAUDIT_CLIENT_AUTH_TIMEOUT_SECS", 1)
        .env("PLAUDIT_CLIENT_IDLE_TIMEOUT_SECS", 3)
        .start();
    // Never says anything: closed after the first-request timeout.
    let mut silent = RawConn::connect(&node.addr()).await;
    assert!(silent.closed_by_peer().await, "a silent connection is closed");
    assert!(closed(&node, "auth_timeout") >= 1);

    // Says one thing, then nothing: outlives the first-request timeout and
    // is closed as idle.
    let mut quiet = RawConn::connect(&node.addr()).await;
    quiet.send_request(1, Request::Ping).await;
    quiet.recv().await;
    assert!(quiet.closed_by_peer().await, "an idle connection is closed");
    assert_eq!(closed(&node, "idle"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_loris_frame_is_cut_off() {
    let node = Node::builder().env("PLAUDIT_CLIENT_FRAME_TIMEOUT_SECS", 2).start();
    let c = node.client().await;
    let mut s = TcpStream::connect(node.addr()).await.unwrap();
    s.write_all(&100u32.to_be_bytes()).await.unwrap();
    // One byte every 100 ms: 10 s for the frame, far past its 2 s.
    let drip = tokio::spawn(async move {
        for _ in 0..100 {
            if s.write_all(&[0]).await.is_err() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    });
    wait_until(Duration::from_secs(30), "the node cuts the slow frame off", || async {
        others_served(&node, &c).await;
        closed(&node, "frame_timeout") >= 1
    })
    .await;
    assert!(drip.await.unwrap(), "the dripping client sees its connection closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_admin_connections_do_not_starve_readyz() {
    let node = Node::start();
    let mut idle = Vec::new();
    for _ in 0..200 {
        idle.push(TcpStream::connect(node.admin_addr()).await.unwrap());
    }
    // At the first try, as a Kubernetes probe asks: these connections were
    // opened a moment ago, and none has timed out.
    for _ in 0..5 {
        assert_eq!(http_get(node.admin_addr(), "/readyz").unwrap().0, 200);
    }
    drop(idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_reconnects_after_the_node_closes_its_idle_connections() {
    let node = Node::builder().env("PLAUDIT_CLIENT_IDLE_TIMEOUT_SECS", 2).start();
    let c = node.client().await;
    c.ping().await.unwrap();
    wait_until(Duration::from_secs(30), "the node closes the SDK's idle connections", || async {
        let open = metric_sum(&node.metrics_text(), "plaudit_connections_open").unwrap_or(1.0);
        closed(&node, "idle") >= 1 && open == 0.0
    })
    .await;
    c.ping().await.expect("the SDK reconnects");
}
