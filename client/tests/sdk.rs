//! The SDK against a scripted in-test server on 127.0.0.1:0, one node on
//! its own. The server speaks real frames but decides itself when (and
//! whether) to answer, so these tests can prove what a real node cannot be
//! made to do on demand: replies out of order, replies that never come,
//! connections that die. (`cluster.rs` does the same with several nodes.)

mod support;

use plaudit_client::proto::business::CreateBiz;
use plaudit_client::proto::cluster::{ClientHello, Routing};
use plaudit_client::proto::frame::{read_frame, write_frame};
use plaudit_client::proto::likes::{CountsRequest, EntityCounts, ReceivedReply};
use plaudit_client::proto::listing::{BizPage, ListPage, RankPage, MAX_LIST_PAGE};
use plaudit_client::proto::{
    BizConfig, Business, Envelope, ErrorCode, Request, Response, WireError,
};
use plaudit_client::{Client, ClientError, ClientOptions};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// The server side of one accepted connection.
struct Peer {
    stream: TcpStream,
    buf: Vec<u8>,
    /// The listener's address: the one member of the routing table it gives.
    addr: String,
}

impl Peer {
    /// Accepts a connection and answers its hello, which must come first
    /// and ask for redirects.
    async fn accept(listener: &TcpListener) -> Peer {
        let (stream, _) = listener.accept().await.expect("accept");
        let addr = listener.local_addr().unwrap().to_string();
        let mut peer = Peer { stream, buf: Vec::new(), addr };
        let hello: Envelope<Request> =
            read_frame(&mut peer.stream, &mut peer.buf).await.expect("read the hello");
        assert_eq!(hello.body, Request::Hello(ClientHello { routing: Routing::Redirect }));
        peer.send(hello.req_id, Response::Hello).await;
        peer
    }

    /// The next request, or `None` once the client has closed the
    /// connection. Routing-table and entity-route requests (on connect,
    /// and the client's refreshes) are answered on the way, as a lone node
    /// would.
    async fn next(&mut self) -> Option<Envelope<Request>> {
        loop {
            let env: Envelope<Request> = read_frame(&mut self.stream, &mut self.buf).await.ok()?;
            let body = match env.body {
                Request::Routing => Response::Routing(Box::new(support::one_node(&self.addr))),
                Request::EntityRoutes => Response::EntityRoutes(vec![]),
                Request::EntityRoutesPage(_) => support::no_routes(),
                _ => return Some(env),
            };
            self.send(env.req_id, body).await;
        }
    }

    async fn recv(&mut self) -> Envelope<Request> {
        self.next().await.expect("read a request")
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
    ClientOptions { pool_size, timeout: Duration::from_millis(timeout_ms), ..Default::default() }
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
async fn reads_in_flight_on_a_dead_connection_are_retried_on_a_fresh_one() {
    let (listener, addr) = listen().await;
    let server = tokio::spawn(async move {
        let mut first = Peer::accept(&listener).await;
        for _ in 0..3 {
            first.recv().await;
        }
        drop(first); // dies with three calls waiting
                     // The client dials again and sends the three reads once more.
        let mut second = Peer::accept(&listener).await;
        let mut users = Vec::new();
        for _ in 0..3 {
            let env = second.recv().await;
            let Request::Received(r) = env.body else { panic!("expected received") };
            users.push(r.user);
            second
                .send(env.req_id, Response::Received(ReceivedReply { user: r.user, likes: 7 }))
                .await;
        }
        users.sort_unstable();
        assert_eq!(users, vec![0, 1, 2]);
        let ping = second.recv().await;
        assert_eq!(ping.body, Request::Ping);
        second.send(ping.req_id, Response::Pong).await;
    });

    let client = Client::connect_with(&addr, opts(1, 5_000)).await.unwrap();
    let mut calls = JoinSet::new();
    for user in 0..3 {
        let client = client.clone();
        calls.spawn(async move { (user, client.received(1, user).await) });
    }
    while let Some(joined) = calls.join_next().await {
        let (user, got) = joined.unwrap();
        assert_eq!(got.unwrap(), ReceivedReply { user, likes: 7 });
    }
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
        assert_eq!(list.body, Request::ListBizPage(ListPage::first()));
        peer.send(list.req_id, Response::Pong).await;
        // Overloaded is retried twice, then returned: three attempts in all.
        for _ in 0..3 {
            let raw = peer.recv().await;
            assert!(matches!(raw.body, Request::Counts(_)));
            peer.send(raw.req_id, Response::Error(WireError::overloaded("busy"))).await;
        }
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
async fn registry_lists_are_read_page_by_page_to_the_end() {
    let biz = |id| Business { id, name: format!("b{id}"), config: BizConfig::default() };
    let (listener, addr) = listen().await;
    let server = tokio::spawn(async move {
        let mut peer = Peer::accept(&listener).await;
        for (after, ids, next) in [(None, vec![1, 2], Some(2)), (Some(2), vec![5], None)] {
            let req = peer.recv().await;
            assert_eq!(req.body, Request::ListBizPage(ListPage { after, limit: MAX_LIST_PAGE }));
            let items = ids.into_iter().map(biz).collect();
            peer.send(req.req_id, Response::BizPage(BizPage { items, next })).await;
        }
        // A node that does not move the cursor on would keep a reader
        // looping: the SDK stops with a protocol error.
        for next in [Some(4), Some(4)] {
            let req = peer.recv().await;
            assert!(matches!(req.body, Request::ListRanksPage(_)), "{:?}", req.body);
            peer.send(req.req_id, Response::RankPage(RankPage { items: vec![], next })).await;
        }
    });
    let client = Client::connect_with(&addr, opts(1, 5_000)).await.unwrap();
    assert_eq!(client.list_biz().await.unwrap(), vec![biz(1), biz(2), biz(5)]);
    let stuck = client.list_ranks().await.unwrap_err();
    assert!(matches!(&stuck, ClientError::Protocol(m) if m.contains("next")), "{stuck:?}");
    server.await.unwrap();
}

#[tokio::test]
async fn a_node_at_its_connection_limit_is_reported_overloaded() {
    // What a node over its connection limit does: one `Overloaded` frame
    // under req_id 0, then close, whatever the client sent. The client
    // tries again a few times, backing off, then reports it.
    let (listener, addr) = listen().await;
    let dials = Arc::new(AtomicUsize::new(0));
    let seen = dials.clone();
    let server = tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.expect("accept");
            seen.fetch_add(1, Ordering::Relaxed);
            let e = WireError::overloaded("the node is at its connection limit");
            let env = Envelope { req_id: 0, body: Response::Error(e) };
            write_frame(&mut stream, &env).await.expect("write the refusal");
            drop(stream);
        }
    });
    let err = Client::connect_with(&addr, opts(1, 5_000)).await.unwrap_err();
    match &err {
        ClientError::Server(e) => assert_eq!(e.code, ErrorCode::Overloaded, "{e}"),
        other => panic!("expected the node's Overloaded, got {other:?}"),
    }
    assert!(err.to_string().contains("connection limit"), "{err}");
    assert!(dials.load(Ordering::Relaxed) > 1, "the client tried again");
    server.abort();
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
                while let Some(env) = peer.next().await {
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

#[tokio::test]
async fn registry_changes_are_sent_once_wrapped_and_a_retry_keeps_the_id() {
    let (listener, addr) = listen().await;
    let created = Business { id: 4, name: "video".into(), config: BizConfig::default() };
    let reply = created.clone();
    let server = tokio::spawn(async move {
        let mut peer = Peer::accept(&listener).await;
        let mut ids = Vec::new();
        // The typed method: a node timeout ("may have applied"), then the answer.
        for answer in [Response::Error(WireError::timeout("slow")), Response::Biz(reply.clone())] {
            let env = peer.recv().await;
            let Request::Once { id, req } = env.body else { panic!("not wrapped: {:?}", env.body) };
            assert!(matches!(*req, Request::CreateBiz(ref c) if c.name == "video"), "{req:?}");
            ids.push(id);
            peer.send(env.req_id, answer).await;
        }
        assert_eq!(ids[0], ids[1], "a retry carries the first attempt's id");
        // A raw request is wrapped too, with a new id.
        let env = peer.recv().await;
        let Request::Once { id, .. } = env.body else { panic!("not wrapped: {:?}", env.body) };
        assert_ne!(id, ids[0]);
        peer.send(env.req_id, Response::Biz(reply)).await;
    });

    let client = Client::connect_with(&addr, opts(1, 5_000)).await.unwrap();
    let got = client.create_biz(None, "video", BizConfig::default()).await.unwrap();
    assert_eq!(got, created);
    let raw = Request::CreateBiz(CreateBiz {
        id: None,
        name: "video".into(),
        config: BizConfig::default(),
    });
    assert_eq!(client.request(raw).await.unwrap(), Response::Biz(created));
    server.await.unwrap();
}

#[tokio::test]
async fn the_client_holds_the_nodes_routing_table() {
    let (listener, addr) = listen().await;
    let server = tokio::spawn(async move {
        let mut peer = Peer::accept(&listener).await;
        let ping = peer.recv().await;
        peer.send(ping.req_id, Response::Pong).await;
    });
    let client = Client::connect_with(&addr, opts(1, 5_000)).await.unwrap();
    assert_eq!(client.routing_table(), support::one_node(&addr));
    client.ping().await.unwrap();
    server.await.unwrap();
}

#[tokio::test]
async fn a_node_without_a_routing_table_still_serves_everything() {
    // An older node: it does not know Hello or Routing, and says so.
    let (listener, addr) = listen().await;
    let server = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut buf = Vec::new();
        for _ in 0..3 {
            let env: Envelope<Request> = read_frame(&mut stream, &mut buf).await.unwrap();
            let body = match env.body {
                Request::Hello(_) | Request::Routing => {
                    Response::Error(WireError::bad_request("unknown request"))
                }
                Request::GetBiz(id) => {
                    Response::Biz(Business { id, name: "old".into(), config: BizConfig::default() })
                }
                other => panic!("unexpected {other:?}"),
            };
            write_frame(&mut stream, &Envelope { req_id: env.req_id, body }).await.unwrap();
        }
    });
    let client = Client::connect_with(&addr, opts(1, 5_000)).await.unwrap();
    assert!(client.routing_table().map.nodes.is_empty());
    assert_eq!(client.get_biz(3).await.unwrap().name, "old");
    server.await.unwrap();
}
