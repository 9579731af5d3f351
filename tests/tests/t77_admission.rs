//! Who gets a connection on a node with an admin token, when clients
//! flood it: connections that have not authenticated share a part of
//! `max_connections` (and a few per source address), from which the one
//! open longest goes first however often it pings; authenticated clients
//! have theirs; and the admin always finds its reserve. Real node, real
//! sockets from many loopback addresses (127.0.0.x), as from many hosts.

use plaudit_client::proto::auth::{AuthRequest, Role, TokenSecret};
use plaudit_client::proto::{BizConfig, ErrorCode, Request, Response};
use plaudit_client::{Client, ClientOptions};
use plaudit_tests::raw::RawConn;
use plaudit_tests::Node;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const ADMIN: &str = "t77-admin-token-0123456789";
const TOTAL: usize = 120;
const UNAUTHENTICATED: usize = 40;
const PER_ADDRESS: usize = 5;
const RESERVED: usize = 4;

fn from(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
}

fn auth(token: &str) -> Request {
    Request::Auth(AuthRequest { token: TokenSecret(token.to_string()) })
}

/// Whether `r` is an `Overloaded` error.
fn overloaded(r: &Option<Response>) -> bool {
    matches!(r, Some(Response::Error(e)) if e.code == ErrorCode::Overloaded)
}

/// Connections from `addrs` that ping every 100 ms, and reconnect as soon
/// as the node closes or refuses them, until `stop`: an attacker that
/// holds every slot it can. Counts the pings answered.
fn flood(node: &str, addrs: Vec<IpAddr>, each: usize, stop: Arc<AtomicBool>) -> Arc<AtomicU64> {
    let pongs = Arc::new(AtomicU64::new(0));
    for addr in addrs {
        for _ in 0..each {
            let (node, stop, pongs) = (node.to_string(), stop.clone(), pongs.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let Ok(mut c) = RawConn::connect_from(&node, addr).await else {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    };
                    let mut id = 0;
                    while !stop.load(Ordering::Relaxed) {
                        id += 1;
                        if c.ask(id, Request::Ping).await != Some(Response::Pong) {
                            break;
                        }
                        pongs.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            });
        }
    }
    pongs
}

/// A new connection from 127.0.0.1 that authenticates with `token`: the
/// answer, or `None` if it was closed before its Auth was read ten times
/// running. Until it authenticates it is one of the unauthenticated
/// connections, which the flood keeps full: each of the flood's
/// reconnections evicts the oldest, and on a loaded machine forty of them
/// can arrive between this connection's accept and its Auth, making it the
/// oldest. A client then connects again, as this does.
async fn authenticated(addr: &str, token: &str) -> (RawConn, Option<Response>) {
    let mut last = None;
    for _ in 0..10 {
        let mut c = RawConn::connect(addr).await;
        let got = c.ask(1, auth(token)).await;
        if got.is_some() {
            return (c, got);
        }
        last = Some(c);
    }
    (last.expect("a connection"), None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_floods_lock_out_neither_token_clients_nor_the_admin() {
    let node = Node::builder()
        .env("PLAUDIT_ADMIN_TOKEN", ADMIN)
        .env("PLAUDIT_MAX_CONNECTIONS", TOTAL)
        .env("PLAUDIT_MAX_UNAUTHENTICATED_CONNECTIONS", UNAUTHENTICATED)
        .env("PLAUDIT_MAX_UNAUTHENTICATED_PER_ADDRESS", PER_ADDRESS)
        .env("PLAUDIT_ADMIN_RESERVED_CONNECTIONS", RESERVED)
        // Only admission closes the flood's connections here.
        .env("PLAUDIT_CLIENT_AUTH_TIMEOUT_SECS", 600)
        .start();
    let addr = node.addr();
    let opts = |t: &str| ClientOptions { token: Some(t.to_string()), ..Default::default() };
    let admin = Client::connect_with(&addr, opts(ADMIN)).await.unwrap();
    let biz = admin.create_biz(None, "b", BizConfig::default()).await.unwrap().id;
    let (token, _) = admin.create_token(biz, &[], false).await.unwrap();

    // One address gets its share, then is refused, evicting nobody.
    let mut mine = Vec::new();
    for i in 0..PER_ADDRESS {
        let mut c = RawConn::connect_from(&addr, from(2)).await.unwrap();
        assert_eq!(c.ask(1, Request::Ping).await, Some(Response::Pong), "connection {i}");
        mine.push(c);
    }
    let mut over = RawConn::connect_from(&addr, from(2)).await.unwrap();
    let refused = over.ask(1, Request::Ping).await;
    assert!(overloaded(&refused), "{refused:?}");
    for c in &mut mine {
        assert_eq!(c.ask(2, Request::Ping).await, Some(Response::Pong), "still served");
    }
    drop(mine);

    // A flood from 40 addresses, each at its per-address share: 200
    // would-be connections for 40 unauthenticated seats, never idle.
    let stop = Arc::new(AtomicBool::new(false));
    let pongs = flood(&addr, (10..50).map(from).collect(), PER_ADDRESS, stop.clone());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(pongs.load(Ordering::Relaxed) > 0, "the flood is served");

    // Through it, a business-token client connects and writes, and the
    // admin's client (connected before) still works.
    let user = Client::connect_with(&addr, opts(&token)).await.expect("a token client connects");
    for u in 0..20 {
        user.like(biz, 7, u, None).await.expect("a like through the flood");
    }
    admin.list_biz().await.expect("the admin through the flood");

    // Authenticated clients fill their share with busy connections: the
    // next one is told the node is full; the admin still gets in.
    let busy = Arc::new(AtomicBool::new(false));
    let mut refused_auth = None;
    for i in 0..TOTAL {
        let (mut c, got) = authenticated(&addr, &token).await;
        if overloaded(&got) {
            refused_auth = Some(i);
            break;
        }
        assert!(matches!(got, Some(Response::Auth(_))), "{got:?}");
        let busy = busy.clone();
        tokio::spawn(async move {
            let mut id = 1;
            while !busy.load(Ordering::Relaxed) {
                id += 1;
                if c.ask(id, Request::Ping).await.is_none() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
    }
    let n = refused_auth.expect("the authenticated share fills");
    assert!(n <= TOTAL - UNAUTHENTICATED - RESERVED, "{n} token connections got in");
    let mut admins = Vec::new();
    for _ in 0..RESERVED {
        let (mut c, got) = authenticated(&addr, ADMIN).await;
        assert_eq!(got, Some(Response::Auth(Role::Admin)));
        assert!(matches!(c.ask(2, Request::ListBiz).await, Some(Response::BizList(_))));
        admins.push(c); // held open: the reserve is the admin's
    }
    stop.store(true, Ordering::Relaxed);
    busy.store(true, Ordering::Relaxed);
}
