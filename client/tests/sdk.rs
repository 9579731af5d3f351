//! The SDK against a scripted in-test server on 127.0.0.1:0. The server
//! speaks real frames but decides itself when (and whether) to answer, so
//! these tests can prove what a real node cannot be made to do on demand:
//! replies out of order, replies that never come, connections that die.

use plaudit_client::proto::frame::{read_frame, write_frame};
use plaudit_client::proto::likes::{CountsRequest, EntityCounts};
use plaudit_client::proto::{Envelope, ErrorCode, Request, Response, WireError};
use plaudit_client::{Client, ClientError, ClientOptions};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// The server side of one accepted connection.
struct Peer {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Peer {
    async fn accept(listener: &TcpListener) -> Peer {
        let (stream, _) = listener.accept().await.expect("accept");
        Peer { stream, buf: Vec::new() }
    }

    async fn recv(&mut self) -> Envelope<Request> {
        read_frame(&mut self.stream, &mut self.buf).await.expect("read a request")
    }

    async fn send(&mut self, req_id: u64, body: Response) {
        write_frame(&mut self.stream, &Envelope { req_id, body }).await.expect("write a reply");
    }
}

async fn listen() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    (listener, addr)
}

fn opts(pool_size: usize, timeout_ms: u64) -> ClientOptions {
    ClientOptions { pool_size, timeout: Duration::from_millis(timeout_ms) }
}

#[tokio::test]
async fn replies_out_of_order_reach_their_own_callers() {
    const N: u64 = 16;
    let (listener, addr) = listen().await;
    let server = tokio::spawn(async move {
        let mut peer = Peer::accept(&listener).await;
        // Read every request before answering any: all N are in flight at once
        // on one connection, then answered newest first.
        let mut reqs = Vec::new();
        for _ in 0..N {
            reqs.push(peer.recv().await);
        }
        let mut ids: Vec<u64> = reqs.iter().map(|r| r.req_id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len() as u64, N, "req_ids must be distinct");
        assert!(!ids.contains(&0), "req_id 0 is reserved for undecodable frames");
        for env in reqs.into_iter().rev() {
            let Request::Counts(c) = env.body else {
                panic!("expected counts, got {:?}", env.body)
            };
            let e = c.entities[0];
            let counts = vec![EntityCounts { entity: e, likes: e * 10, dislikes: e + 1 }];
            peer.send(env.req_id, Response::Counts(counts)).await;
        }
    });

    let client = Client::connect_with(&addr, opts(1, 5_000)).await.unwrap();
    let mut calls = JoinSet::new();
    for e in 1..=N {
        let client = client.clone();
        calls.spawn(async move { (e, client.counts(1, &[e]).await) });
    }
    let mut answered = 0;
    while let Some(joined) = calls.join_next().await {
        let (e, got) = joined.unwrap();
        let got = got.unwrap();
        assert_eq!(got, vec![EntityCounts { entity: e, likes: e * 10, dislikes: e + 1 }]);
        answered += 1;
    }
    assert_eq!(answered, N);
    server.await.unwrap();
}

#[tokio::test]
async fn a_call_without_a_reply_times_out_and_the_connection_stays_usable() {
    let (listener, addr) = listen().await;
    let server = tokio::spawn(async move {
        // Only one connection is ever served: a client that re-dialled here
        // would hang and fail the test.
        let mut peer = Peer::accept(&listener).await;
        let slow = peer.recv().await;
        assert!(matches!(slow.body, Request::Status(_)));
        let ping = peer.recv().await;
        assert_eq!(ping.body, Request::Ping);
        // The late reply to the timed-out call must be dropped, not handed to
        // the ping.
        peer.send(slow.req_id, Response::Status(vec![])).await;
        peer.send(ping.req_id, Response::Pong).await;
        let again = peer.recv().await;
        peer.send(again.req_id, Response::Pong).await;
    });

    let client = Client::connect_with(&addr, opts(1, 200)).await.unwrap();
    let started = std::time::Instant::now();
    let err = client.status(1, 2, &[3]).await.unwrap_err();
    assert!(matches!(err, ClientError::Timeout), "got {err:?}");
    assert_eq!(err.code(), Some(ErrorCode::Timeout));
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert!(started.elapsed() < Duration::from_secs(2));

    client.ping().await.unwrap();
    client.ping().await.unwrap();
    server.await.unwrap();
}

#[tokio::test]
async fn a_dead_connection_fails_its_in_flight_calls_then_is_redialled() {
    let (listener, addr) = listen().await;
    let server = tokio::spawn(async move {
        let mut first = Peer::accept(&listener).await;
        for _ in 0..3 {
            first.recv().await;
        }
        drop(first); // dies with three calls waiting
        let mut second = Peer::accept(&listener).await;
        let ping = second.recv().await;
        assert_eq!(ping.body, Request::Ping);
        second.send(ping.req_id, Response::Pong).await;
    });

    let client = Client::connect_with(&addr, opts(1, 5_000)).await.unwrap();
    let mut calls = JoinSet::new();
    for user in 0..3 {
        let client = client.clone();
        calls.spawn(async move { client.received(1, user).await });
    }
    while let Some(joined) = calls.join_next().await {
        let err = joined.unwrap().unwrap_err();
        // A clean close is `Closed`; unread data makes the kernel reset instead.
        assert!(err.is_connection(), "expected a connection error, got {err:?}");
        assert_eq!(err.code(), None);
    }

    // The next call dials the second connection.
    client.ping().await.unwrap();
    server.await.unwrap();
}

#[tokio::test]
async fn server_errors_keep_their_code_and_wrong_replies_are_protocol_errors() {
    let (listener, addr) = listen().await;
    let server = tokio::spawn(async move {
        let mut peer = Peer::accept(&listener).await;
        let get = peer.recv().await;
        peer.send(get.req_id, Response::Error(WireError::not_found("no business 9"))).await;
        let list = peer.recv().await;
        assert_eq!(list.body, Request::ListBiz);
        peer.send(list.req_id, Response::Pong).await;
        let raw = peer.recv().await;
        peer.send(raw.req_id, Response::Error(WireError::overloaded("busy"))).await;
    });

    let client = Client::connect_with(&addr, opts(1, 5_000)).await.unwrap();
    match client.get_biz(9).await.unwrap_err() {
        ClientError::Server(e) => {
            assert_eq!(e.code, ErrorCode::NotFound);
            assert_eq!(e.message, "no business 9");
        }
        other => panic!("expected a server error, got {other:?}"),
    }
    let err = client.list_biz().await.unwrap_err();
    assert!(matches!(&err, ClientError::Protocol(m) if m.contains("Pong")), "got {err:?}");
    let raw = client.request(Request::Counts(CountsRequest { biz: 1, entities: vec![1] })).await;
    assert_eq!(raw.unwrap_err().code(), Some(ErrorCode::Overloaded));
    server.await.unwrap();
}

#[tokio::test]
async fn calls_are_spread_round_robin_over_the_pool() {
    let (listener, addr) = listen().await;
    let server = tokio::spawn(async move {
        let mut a = Peer::accept(&listener).await;
        let mut b = Peer::accept(&listener).await;
        // Each connection must carry two of the four pings.
        for peer in [&mut a, &mut b] {
            for _ in 0..2 {
                let ping = peer.recv().await;
                peer.send(ping.req_id, Response::Pong).await;
            }
        }
    });

    let client = Client::connect_with(&addr, opts(2, 5_000)).await.unwrap();
    let mut calls = JoinSet::new();
    for _ in 0..4 {
        let client = client.clone();
        calls.spawn(async move { client.ping().await });
    }
    while let Some(joined) = calls.join_next().await {
        joined.unwrap().unwrap();
    }
    server.await.unwrap();
}

#[tokio::test]
async fn connecting_to_a_closed_port_is_an_io_error_naming_the_address() {
    let (listener, addr) = listen().await;
    drop(listener);
    let err = Client::connect(&addr).await.unwrap_err();
    assert!(matches!(err, ClientError::Io(_)), "got {err:?}");
    assert!(err.to_string().contains(&addr), "{err}");
}

#[tokio::test]
async fn thousands_of_pipelined_calls_each_get_their_own_reply() {
    const CALLS: u64 = 2_000;
    let (listener, addr) = listen().await;
    // An echo server on each pooled connection: a reader that answers each
    // request at once, so replies overlap with frames still being batched.
    let server = tokio::spawn(async move {
        let mut conns = JoinSet::new();
        for _ in 0..2 {
            let mut peer = Peer::accept(&listener).await;
            conns.spawn(async move {
                let mut served = 0u64;
                while let Ok(env) = read_frame::<_, Request>(&mut peer.stream, &mut peer.buf).await
                {
                    let Request::Counts(c) = env.body else { panic!("expected counts") };
                    let e = c.entities[0];
                    let counts = vec![EntityCounts { entity: e, likes: e, dislikes: 0 }];
                    peer.send(env.req_id, Response::Counts(counts)).await;
                    served += 1;
                }
                served
            });
        }
        let mut total = 0;
        while let Some(served) = conns.join_next().await {
            total += served.unwrap();
        }
        total
    });

    let client = Client::connect_with(&addr, opts(2, 10_000)).await.unwrap();
    let mut calls = JoinSet::new();
    for e in 0..CALLS {
        let client = client.clone();
        calls.spawn(async move { (e, client.counts(1, &[e]).await) });
    }
    while let Some(joined) = calls.join_next().await {
        let (e, got) = joined.unwrap();
        assert_eq!(got.unwrap()[0].likes, e);
    }
    drop(client); // closes both connections, ending the server
    assert_eq!(server.await.unwrap(), CALLS);
}
