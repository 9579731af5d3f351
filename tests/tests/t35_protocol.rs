//! Protocol robustness with hand-built frames on raw sockets: malformed
//! frames are answered and the connection keeps serving; only a bad length
//! closes it; one misbehaving client does not disturb another.

use plaudit_client::proto::frame::PROTOCOL_VERSION;
use plaudit_client::proto::limits::MAX_FRAME_LEN;
use plaudit_client::proto::{codec, BizConfig, Envelope, ErrorCode, LikeState, Request, Response};
use plaudit_tests::raw::{self, RawConn};
use plaudit_tests::Node;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

fn assert_bad_request(reply: &Envelope<Response>, req_id: u64) {
    assert_eq!(reply.req_id, req_id, "{reply:?}");
    match &reply.body {
        Response::Error(e) => assert_eq!(e.code, ErrorCode::BadRequest, "{e}"),
        other => panic!("expected BadRequest, got {other:?}"),
    }
}

async fn assert_serves_ping(conn: &mut RawConn, req_id: u64) {
    conn.send_request(req_id, Request::Ping).await;
    let reply = conn.recv().await;
    assert_eq!((reply.req_id, reply.body), (req_id, Response::Pong));
}

#[tokio::test]
async fn garbage_body_is_bad_request_with_its_req_id_and_the_connection_keeps_serving() {
    let node = Node::start();
    let mut conn = RawConn::connect(&node.addr()).await;
    for req_id in [42, 1 << 40] {
        conn.send(&raw::garbage_frame(req_id)).await;
        assert_bad_request(&conn.recv().await, req_id);
        assert_serves_ping(&mut conn, req_id + 1).await;
    }
    // A valid envelope with trailing bytes is malformed too.
    let mut payload = vec![PROTOCOL_VERSION];
    payload.extend(codec::to_bytes(&Envelope { req_id: 9, body: Request::Ping }).unwrap());
    payload.push(0);
    conn.send(&raw::frame_of(&payload)).await;
    assert_bad_request(&conn.recv().await, 9);
    // A payload too short to hold any req_id is answered with req_id 0.
    conn.send(&raw::frame_of(&[PROTOCOL_VERSION])).await;
    assert_bad_request(&conn.recv().await, 0);
    assert_serves_ping(&mut conn, 10).await;
    assert!(node.is_ready());
}

#[tokio::test]
async fn wrong_protocol_version_is_bad_request_and_the_connection_keeps_serving() {
    let node = Node::start();
    let mut conn = RawConn::connect(&node.addr()).await;
    for version in [0u8, 2, 0xFF] {
        let mut payload = vec![version];
        payload.extend(codec::to_bytes(&Envelope { req_id: 7, body: Request::Ping }).unwrap());
        conn.send(&raw::frame_of(&payload)).await;
        assert_bad_request(&conn.recv().await, 7);
        assert_serves_ping(&mut conn, 8).await;
    }
}

#[tokio::test]
async fn a_length_over_1_mib_is_bad_request_with_req_id_zero_and_closes_the_connection() {
    let node = Node::start();
    let mut conn = RawConn::connect(&node.addr()).await;
    assert_serves_ping(&mut conn, 1).await;
    let len = (MAX_FRAME_LEN + 1) as u32;
    conn.send(&len.to_be_bytes()).await;
    assert_bad_request(&conn.recv().await, 0);
    assert!(conn.closed_by_peer().await, "the connection closes after a bad length");

    // A zero length is just as out of sync.
    let mut conn = RawConn::connect(&node.addr()).await;
    conn.send(&0u32.to_be_bytes()).await;
    assert_bad_request(&conn.recv().await, 0);
    assert!(conn.closed_by_peer().await);

    // Exactly 1 MiB is a legal length: the node reads it whole and answers
    // the (garbage) payload without closing.
    let mut conn = RawConn::connect(&node.addr()).await;
    let mut payload = vec![PROTOCOL_VERSION];
    payload.extend(codec::to_bytes(&5u64).unwrap());
    payload.resize(MAX_FRAME_LEN, 0xEE);
    conn.send(&raw::frame_of(&payload)).await;
    assert_bad_request(&conn.recv().await, 5);
    assert_serves_ping(&mut conn, 6).await;

    // Other connections never noticed.
    let c = node.client().await;
    c.ping().await.unwrap();
    assert!(node.is_ready());
}

#[tokio::test]
async fn a_client_sending_garbage_does_not_disturb_another() {
    let node = Node::start();
    let c = node.client().await;
    let biz = c.create_biz(None, "noise", BizConfig::default()).await.unwrap().id;

    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU64::new(0));
    let addr = node.addr();
    let noise = {
        let (stop, rounds) = (stop.clone(), rounds.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                // In-sync garbage on one connection, then a bad length on it.
                let mut conn = RawConn::connect(&addr).await;
                for id in 1..=20 {
                    conn.send(&raw::garbage_frame(id)).await;
                    assert_bad_request(&conn.recv().await, id);
                }
                conn.send(&u32::MAX.to_be_bytes()).await;
                assert_bad_request(&conn.recv().await, 0);
                assert!(conn.closed_by_peer().await);
                // A connection that sends half a frame and hangs up.
                let mut conn = RawConn::connect(&addr).await;
                conn.send(&[0, 0, 0, 100, PROTOCOL_VERSION, 1, 2]).await;
                drop(conn);
                rounds.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    for i in 0..150u64 {
        let r = c.like(biz, i % 10, i, Some(1)).await.expect("like during noise");
        assert_eq!(r.now, LikeState::Like);
        let s = c.status(biz, i, &[i % 10]).await.expect("status during noise");
        assert_eq!(s[0].state, LikeState::Like);
    }
    stop.store(true, Ordering::Relaxed);
    noise.await.expect("the noisy client saw the replies it expected");
    assert!(rounds.load(Ordering::Relaxed) >= 1, "the noise ran while the client worked");
    assert!(node.is_ready());
    c.ping().await.unwrap();
}

#[tokio::test]
async fn a_request_nested_a_million_times_is_refused_and_the_node_lives() {
    // Before the decoder bounded nesting, this one frame (one byte per
    // `Stale` level) overflowed the node's stack and aborted it, from a
    // connection that had not even authenticated.
    let node = Node::start();
    let stale_tag = codec::to_bytes(&Request::Stale(Box::new(Request::Ping))).unwrap()[0];
    let mut payload = vec![PROTOCOL_VERSION, 7];
    payload.extend(std::iter::repeat_n(stale_tag, 1_000_000));
    payload.push(0);
    let mut conn = RawConn::connect(&node.addr()).await;
    conn.send(&raw::frame_of(&payload)).await;
    let reply = conn.recv().await;
    assert_eq!(reply.req_id, 7);
    match reply.body {
        Response::Error(e) => {
            assert_eq!(e.code, ErrorCode::BadRequest, "{e}");
            assert!(e.message.contains("nest"), "{e}");
        }
        other => panic!("expected BadRequest, got {other:?}"),
    }
    // The same connection and the node go on serving.
    conn.send_request(8, Request::Ping).await;
    assert_eq!(conn.recv().await.body, Response::Pong);
    node.client().await.ping().await.expect("the node is alive");
}

#[tokio::test]
async fn a_string_announcing_a_terabyte_is_refused_and_the_node_lives() {
    // A board query of a few bytes whose type id announces 2^40 bytes.
    // bincode allocated what a string announced before reading it, so this
    // frame, from a connection that had not authenticated, aborted the
    // node on the failed allocation.
    let node = Node::start();
    let query_tag =
        codec::to_bytes(&Request::Query(plaudit_client::proto::scoring::QueryRequest {
            rank: 1,
            board: plaudit_client::proto::scoring::BoardRef::TypeId(String::new()),
            query: plaudit_client::proto::scoring::BoardQuery::Size,
        }))
        .unwrap()[0];
    let mut payload = vec![PROTOCOL_VERSION, 7, query_tag, 1, 0, 253];
    payload.extend_from_slice(&(1u64 << 40).to_le_bytes());
    payload.extend_from_slice(b"total");
    let mut conn = RawConn::connect(&node.addr()).await;
    conn.send(&raw::frame_of(&payload)).await;
    assert_bad_request(&conn.recv().await, 7);
    assert_serves_ping(&mut conn, 8).await;
    node.client().await.ping().await.expect("the node is alive");
}

/// Writes a pass stages for proposal together (`node/src/server/batch.rs`)
/// are still proposed and answered when a bad length ends the pass.
#[tokio::test]
async fn writes_before_a_bad_length_are_answered_before_the_close() {
    use plaudit_client::proto::cluster::{ClientHello, Routing};
    use plaudit_client::proto::likes::LikeRequest;
    use plaudit_client::proto::LikeAction;
    let node = Node::start();
    let c = node.client().await;
    let biz = c.create_biz(None, "before-bad", BizConfig::default()).await.unwrap().id;
    let mut conn = RawConn::connect(&node.addr()).await;
    // Staging is for redirecting clients (the SDK's mode).
    conn.send_request(1, Request::Hello(ClientHello { routing: Routing::Redirect })).await;
    assert_eq!(conn.recv().await.body, Response::Hello);
    let mut burst = Vec::new();
    for user in 0..3u64 {
        let like = LikeRequest { biz, entity: 9, user, owner: None, action: LikeAction::Like };
        burst.extend(raw::request_frame(10 + user, Request::Like(like)));
    }
    burst.extend_from_slice(&u32::MAX.to_be_bytes());
    conn.send(&burst).await;
    let mut liked = Vec::new();
    let mut bad = 0;
    for _ in 0..4 {
        let reply = conn.recv().await;
        match reply.body {
            Response::Like(r) => {
                assert_eq!(r.now, LikeState::Like);
                liked.push(reply.req_id);
            }
            Response::Error(e) if e.code == ErrorCode::BadRequest => bad += 1,
            other => panic!("unexpected reply {other:?}"),
        }
    }
    liked.sort();
    assert_eq!((liked, bad), (vec![10, 11, 12], 1));
    assert!(conn.closed_by_peer().await, "the connection closes after a bad length");
}
