//! Who may do what, on real nodes with an admin token: an unauthenticated
//! connection may only ping and authenticate; the admin may do anything; a
//! business token reads and writes its own business's likes and its own
//! rankings' scores and queries, and nothing else; a read-only token only
//! reads; a revoked token stops working at once, also on connections
//! already authenticated with it. Tokens are stored hashed (the data
//! directory never holds a secret) and never logged. A node refuses to
//! listen off loopback without an admin token, and its admin port off
//! loopback serves metrics and status to the admin token only.

use plaudit_client::proto::auth::{AuthRequest, Role, TokenSecret};
use plaudit_client::proto::likes::{LikeAction, LikeRequest, StatusRequest};
use plaudit_client::proto::rankings::RankDef;
use plaudit_client::proto::scoring::{BoardRef, ScoreRequest};
use plaudit_client::proto::window::Granularity;
use plaudit_client::proto::{BizConfig, ErrorCode, Request, Response};
use plaudit_client::{Client, ClientError, ClientOptions};
use plaudit_tests::raw::RawConn;
use plaudit_tests::{
    http_get_bearer, metric_sum, refused_start, total_ranking, wait_until, Cluster, Node,
};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const ADMIN: &str = "t71-admin-token-0123456789";

fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

fn guarded() -> Node {
    Node::builder().env("PLAUDIT_ADMIN_TOKEN", ADMIN).env("PLAUDIT_LOG", "debug").start()
}

async fn client_as(node: &Node, token: &str) -> Client {
    node.client_with(ClientOptions { token: Some(token.to_string()), ..Default::default() }).await
}

fn rank_def(id: u32) -> RankDef {
    total_ranking(id, &format!("r{id}"))
}

/// The all-time board of a ranking without dimensions.
fn total() -> BoardRef {
    BoardRef::At { dims: vec![], granularity: Granularity::Total, ts: now() }
}

fn event(rank: u32, event_id: u64) -> ScoreRequest {
    ScoreRequest { rank, item: 7, score: 3, sub: None, dims: vec![], ts: now(), event_id }
}

/// Asserts `result` failed with `Unauthorized`.
fn denied<T: std::fmt::Debug>(result: Result<T, ClientError>, what: &str) {
    match result {
        Err(e) => assert_eq!(e.code(), Some(ErrorCode::Unauthorized), "{what}: {e}"),
        Ok(v) => panic!("{what} was allowed: {v:?}"),
    }
}

fn unauthorized(resp: Response, what: &str) {
    match resp {
        Response::Error(e) => assert_eq!(e.code, ErrorCode::Unauthorized, "{what}: {e}"),
        other => panic!("{what} was allowed: {other:?}"),
    }
}

fn auth(token: &str) -> Request {
    Request::Auth(AuthRequest { token: TokenSecret(token.to_string()) })
}

/// Two businesses, a ranking each, and a token for each role.
struct World {
    biz: u32,
    other_biz: u32,
    rank: u32,
    other_rank: u32,
    rw: String,
    ro: String,
    rw_id: u64,
}

async fn world(admin: &Client) -> World {
    let biz = admin.create_biz(None, "mine", BizConfig::default()).await.unwrap().id;
    let other_biz = admin.create_biz(None, "theirs", BizConfig::default()).await.unwrap().id;
    let (rank, other_rank) = (11, 12);
    admin.create_rank(rank_def(rank)).await.unwrap();
    admin.create_rank(rank_def(other_rank)).await.unwrap();
    let (rw, info) = admin.create_token(biz, &[rank], false).await.expect("create rw token");
    assert_eq!((info.biz, info.ranks.clone(), info.read_only), (biz, vec![rank], false));
    let (ro, ro_info) = admin.create_token(biz, &[rank], true).await.expect("create ro token");
    assert!(ro_info.read_only && ro_info.id != info.id);
    World { biz, other_biz, rank, other_rank, rw, ro, rw_id: info.id }
}

#[tokio::test]
async fn an_unauthenticated_connection_may_only_ping_and_authenticate() {
    let node = guarded();
    let mut raw = RawConn::connect(&node.addr()).await;
    raw.send_request(1, Request::Ping).await;
    assert_eq!(raw.recv().await.body, Response::Pong);
    raw.send_request(2, Request::ListBiz).await;
    unauthorized(raw.recv().await.body, "ListBiz before Auth");
    let like = LikeRequest { biz: 1, entity: 1, user: 1, owner: None, action: LikeAction::Like };
    raw.send_request(3, Request::Like(like.clone())).await;
    unauthorized(raw.recv().await.body, "Like before Auth");

    // A wrong token (either shape) changes nothing.
    for (id, wrong) in
        [(4, "not-the-admin-token-at-all"), (5, &format!("plt_1_{}", "A".repeat(43)))]
    {
        raw.send_request(id, auth(wrong)).await;
        unauthorized(raw.recv().await.body, "a wrong token");
    }
    raw.send_request(6, Request::ListBiz).await;
    unauthorized(raw.recv().await.body, "ListBiz after a failed Auth");
    let failed = "plaudit_errors_total{op=\"auth\",code=\"Unauthorized\"}";
    assert_eq!(metric_sum(&node.metrics_text(), failed), Some(2.0), "failed Auths are counted");

    // Auth and the request pipelined behind it: the request sees the role.
    raw.send_request(7, auth(ADMIN)).await;
    raw.send_request(8, Request::ListBiz).await;
    assert_eq!(raw.recv().await.body, Response::Auth(Role::Admin));
    assert!(matches!(raw.recv().await.body, Response::BizList(_)), "admin may list");

    // `plaudit ping` needs no token either (it asks for no routing table).
    assert_eq!(node.cli("ping"), serde_json::json!({"ok": true}));

    // The SDK without a token is told so at connect (it asks for the
    // routing table first), rather than retrying.
    let anonymous = Client::connect_with(&node.addr(), ClientOptions::default()).await;
    denied(anonymous.map(|_| ()), "an SDK client without a token");
    // With a wrong token the SDK reports Unauthorized.
    let wrong = Client::connect_with(
        &node.addr(),
        ClientOptions { token: Some("wrong-token-0123456789".into()), ..Default::default() },
    )
    .await;
    let refused = match wrong {
        Err(e) => Err::<(), _>(e),
        Ok(c) => c.list_biz().await.map(|_| ()),
    };
    denied(refused, "a client with a wrong token");
}

#[tokio::test]
async fn three_failed_auths_close_the_connection() {
    let node = guarded();
    let mut raw = RawConn::connect(&node.addr()).await;
    for id in 1..=3 {
        raw.send_request(id, auth("not-the-admin-token-at-all")).await;
        unauthorized(raw.recv().await.body, "a wrong token");
    }
    assert!(raw.closed_by_peer().await, "the connection is closed after the third failure");
    let name = "plaudit_connections_closed_total{reason=\"auth_failed\"}";
    assert_eq!(metric_sum(&node.metrics_text(), name), Some(1.0));
}

#[tokio::test]
async fn a_connection_that_does_not_authenticate_in_time_is_closed() {
    let node = Node::builder()
        .env("PLAUDIT_ADMIN_TOKEN", ADMIN)
        .env("PLAUDIT_CLIENT_AUTH_TIMEOUT_SECS", 1)
        .start();
    // Pinging keeps it busy but does not authenticate it.
    let mut raw = RawConn::connect(&node.addr()).await;
    let mut closed = false;
    for i in 0..40 {
        raw.send_request(i, Request::Ping).await;
        if raw.try_recv().await.is_err() {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(closed, "an unauthenticated connection outlived the auth timeout");
    let name = "plaudit_connections_closed_total{reason=\"auth_timeout\"}";
    assert!(metric_sum(&node.metrics_text(), name).unwrap_or(0.0) >= 1.0);
    // An authenticated one stays.
    let admin = client_as(&node, ADMIN).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    admin.list_biz().await.expect("the authenticated client is still served");
}

#[tokio::test]
async fn each_role_may_do_exactly_what_it_is_given() {
    let node = guarded();
    let admin = client_as(&node, ADMIN).await;
    let w = world(&admin).await;

    // Read-write business token: its business and its ranking only.
    let rw = client_as(&node, &w.rw).await;
    rw.like(w.biz, 1, 100, Some(9)).await.expect("like in its business");
    // Counts follow the like through the entity's shard, a moment later.
    wait_until(Duration::from_secs(10), "the like is counted", || async {
        rw.counts(w.biz, &[1]).await.unwrap()[0].likes == 1
    })
    .await;
    rw.status(w.biz, 100, &[1]).await.expect("status in its business");
    rw.get_biz(w.biz).await.expect("its business's config");
    rw.score(event(w.rank, 1)).await.expect("score its ranking");
    rw.top(w.rank, total(), 0, 10).await.expect("top of its ranking");
    denied(rw.like(w.other_biz, 1, 100, None).await, "like in another business");
    denied(rw.counts(w.other_biz, &[1]).await, "counts of another business");
    denied(rw.get_biz(w.other_biz).await, "another business's config");
    denied(rw.score(event(w.other_rank, 2)).await, "score another ranking");
    denied(rw.top(w.other_rank, total(), 0, 10).await, "top of another ranking");
    denied(rw.create_biz(None, "x", BizConfig::default()).await, "create a business");
    denied(rw.update_biz(w.biz, BizConfig::default()).await, "change its business");
    denied(rw.create_rank(rank_def(13)).await, "create a ranking");
    denied(rw.list_biz().await, "list businesses");
    denied(rw.list_tokens().await, "list tokens");
    denied(rw.create_token(w.biz, &[w.rank], false).await, "create a token");
    denied(rw.revoke_token(w.rw_id).await, "revoke a token");
    // Wrapped requests are judged by what they wrap.
    let other_counts = Request::Counts(plaudit_client::proto::likes::CountsRequest {
        biz: w.other_biz,
        entities: vec![1],
    });
    denied(
        rw.request(Request::Stale(Box::new(other_counts))).await,
        "a stale read of another business",
    );
    let other_rank = Request::GetRank(w.other_rank);
    denied(
        rw.request(Request::Stale(Box::new(other_rank))).await,
        "a stale read of another ranking",
    );

    // Read-only: the same reads, no writes.
    let ro = client_as(&node, &w.ro).await;
    assert_eq!(ro.counts(w.biz, &[1]).await.unwrap()[0].likes, 1);
    ro.status(w.biz, 100, &[1]).await.expect("status");
    ro.top(w.rank, total(), 0, 10).await.expect("top");
    denied(ro.like(w.biz, 2, 100, None).await, "a read-only like");
    denied(ro.unlike(w.biz, 1, 100, None).await, "a read-only unlike");
    denied(ro.score(event(w.rank, 3)).await, "a read-only score");
    denied(ro.counts(w.other_biz, &[1]).await, "a read-only read of another business");

    // Nothing a refused request asked for happened.
    assert_eq!(admin.counts(w.other_biz, &[1]).await.unwrap()[0].likes, 0);
    assert_eq!(admin.counts(w.biz, &[2]).await.unwrap()[0].likes, 0);
    assert_eq!(admin.board_size(w.other_rank, total()).await.unwrap(), 0);

    // The admin sees both tokens, without secrets.
    let listed = admin.list_tokens().await.unwrap();
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(!format!("{listed:?}").contains(&w.rw[w.rw.len() - 43..]));
}

#[tokio::test]
async fn a_revoked_token_stops_working_on_open_connections_too() {
    let node = guarded();
    let admin = client_as(&node, ADMIN).await;
    let w = world(&admin).await;
    let mut raw = RawConn::connect(&node.addr()).await;
    raw.send_request(1, auth(&w.rw)).await;
    match raw.recv().await.body {
        Response::Auth(Role::Biz { biz, read_only, .. }) => {
            assert_eq!((biz, read_only), (w.biz, false))
        }
        other => panic!("{other:?}"),
    }
    let status = || Request::Status(StatusRequest { biz: w.biz, user: 1, entities: vec![1] });
    raw.send_request(2, status()).await;
    assert!(matches!(raw.recv().await.body, Response::Status(_)));

    let revoked = admin.revoke_token(w.rw_id).await.expect("revoke");
    assert_eq!(revoked.id, w.rw_id);
    raw.send_request(3, status()).await;
    unauthorized(raw.recv().await.body, "a request on a connection whose token was revoked");
    raw.send_request(4, auth(&w.rw)).await;
    unauthorized(raw.recv().await.body, "authenticating with a revoked token");
    // The same connection may authenticate again, with a live token.
    raw.send_request(5, auth(&w.ro)).await;
    assert!(matches!(raw.recv().await.body, Response::Auth(Role::Biz { read_only: true, .. })));
    raw.send_request(6, status()).await;
    assert!(matches!(raw.recv().await.body, Response::Status(_)));
    denied(
        Client::connect_with(
            &node.addr(),
            ClientOptions { token: Some(w.rw.clone()), ..Default::default() },
        )
        .await
        .map(|_| ()),
        "a new client with a revoked token",
    );
    // The other token is untouched.
    client_as(&node, &w.ro).await.status(w.biz, 1, &[1]).await.expect("the read-only token");
}

#[tokio::test]
async fn secrets_are_stored_hashed_and_never_logged() {
    let mut node = guarded();
    let admin = client_as(&node, ADMIN).await;
    let w = world(&admin).await;
    client_as(&node, &w.rw).await.like(w.biz, 1, 1, None).await.unwrap();
    client_as(&node, &w.ro).await.status(w.biz, 1, &[1]).await.unwrap();
    // A token survives a restart (it is in the replicated registry).
    node.restart();
    client_as(&node, &w.rw).await.like(w.biz, 2, 1, None).await.expect("token after restart");
    node.terminate();

    // What the node receives of a business token is its secret part.
    let secret = |t: &str| t[t.len() - 43..].to_string();
    let secrets = [ADMIN.to_string(), secret(&w.rw), secret(&w.ro)];
    let log = node.log_tail(usize::MAX);
    assert!(log.contains("DEBUG"), "the node logged at debug level");
    for dir in walk(node.data_dir()) {
        let bytes = std::fs::read(&dir).unwrap_or_default();
        for s in &secrets {
            let found = bytes.windows(s.len()).any(|w| w == s.as_bytes());
            assert!(!found, "{} holds a secret", dir.display());
        }
    }
    for s in &secrets {
        assert!(!log.contains(s.as_str()), "the log holds a secret");
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_made_through_one_node_works_at_every_node() {
    let cluster = Cluster::builder(3).env("PLAUDIT_ADMIN_TOKEN", ADMIN).start();
    let admin = Client::connect_with(
        &cluster.node(1).addr(),
        ClientOptions { token: Some(ADMIN.to_string()), ..Default::default() },
    )
    .await
    .unwrap();
    let w = world(&admin).await;
    // At once, at each node: a node whose registry lags catches up first.
    for id in cluster.ids() {
        let c = client_as(cluster.node(id), &w.rw).await;
        c.like(w.biz, id, 5, None).await.expect("a like through every node");
        denied(c.like(w.other_biz, id, 5, None).await, "another business, at every node");
    }
    wait_until(Duration::from_secs(10), "all three likes are counted", || async {
        admin.counts(w.biz, &[1, 2, 3]).await.unwrap().iter().all(|c| c.likes == 1)
    })
    .await;
}

/// Runs the node binary with `args` and `env` and expects it to exit
/// (refusing to start) within 10 s; returns its stderr.
fn start_expecting_exit(args: &[&str], env: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    refused_start(dir.path(), args, env)
}

#[test]
fn a_node_off_loopback_refuses_to_start_without_an_admin_token() {
    // 192.0.2.1 is TEST-NET-1: never an address of this host, so a node
    // that got past its config check fails to bind (and sends nothing).
    let off = ["--listen", "192.0.2.1:7401", "--admin", "127.0.0.1:0"];
    let err = start_expecting_exit(&off, &[]);
    assert!(err.contains("admin_token_file") && err.contains("--insecure"), "{err}");
    assert!(!err.contains("binding"), "refused before binding: {err}");

    // With --insecure, or with a token, the check passes (and the bind fails).
    let insecure = [&off[..], &["--insecure"]].concat();
    let err = start_expecting_exit(&insecure, &[]);
    assert!(err.contains("binding client listener"), "{err}");
    let err = start_expecting_exit(&insecure, &[("PLAUDIT_ADMIN_TOKEN", ADMIN)]);
    assert!(err.contains("binding client listener"), "{err}");
    assert!(!err.contains(ADMIN), "the error shows no token: {err}");
    // A token off loopback needs TLS (or --insecure): it would cross the
    // network in clear.
    let err = start_expecting_exit(&off, &[("PLAUDIT_ADMIN_TOKEN", ADMIN)]);
    assert!(err.contains("tls_cert_file") && err.contains("--insecure"), "{err}");
    assert!(!err.contains(ADMIN), "the error shows no token: {err}");
}

#[test]
fn the_admin_port_off_loopback_serves_metrics_and_status_to_the_admin_token_only() {
    // 0.0.0.0 is every address (loopback included, which the test uses):
    // not loopback only, so the port asks for the token. Binding every
    // address, the node must be told what to advertise.
    const SCRAPE: &str = "t71-metrics-token-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let scrape_file = dir.path().join("metrics-token");
    std::fs::write(&scrape_file, format!("{SCRAPE}\n")).unwrap();
    let node = Node::builder()
        .admin_ip(std::net::Ipv4Addr::UNSPECIFIED.into())
        .env("PLAUDIT_ADMIN_TOKEN", ADMIN)
        .env("PLAUDIT_METRICS_TOKEN_FILE", scrape_file.display())
        .env("PLAUDIT_ADVERTISE", "127.0.0.1")
        .start();
    let admin = node.admin_addr();
    assert!(node.is_ready(), "the probes need no token");
    assert_eq!(node.admin_get("/healthz").unwrap().0, 200);
    for path in ["/metrics", "/status"] {
        let (status, body) = node.admin_get(path).unwrap();
        assert_eq!(status, 401, "{path} without the token: {body}");
        let (status, _) = http_get_bearer(admin, path, "not-the-admin-token-at-all").unwrap();
        assert_eq!(status, 401, "{path} with a wrong token");
        let (status, body) = http_get_bearer(admin, path, ADMIN).unwrap();
        assert_eq!(status, 200, "{path} with the admin token: {body}");
    }
    assert!(http_get_bearer(admin, "/metrics", ADMIN).unwrap().1.contains("plaudit_"));
    // A scraper's token reads the metrics, not the status.
    let (status, body) = http_get_bearer(admin, "/metrics", SCRAPE).unwrap();
    assert_eq!((status, body.contains("plaudit_")), (200, true));
    assert_eq!(http_get_bearer(admin, "/status", SCRAPE).unwrap().0, 401);
    assert!(!node.log_tail(200).contains(ADMIN), "the token is never logged");
}

#[test]
fn the_cli_creates_lists_and_revokes_tokens_with_the_admin_token() {
    let node = guarded();
    let biz = node.cli_json(&["--token", ADMIN, "biz", "create", "--name", "cli"]);
    let biz = biz["id"].as_u64().expect("a business id").to_string();
    let made = node.cli_json(&["--token", ADMIN, "token", "create", "--biz", &biz]);
    let token = made["token"].as_str().expect("the new token").to_string();
    assert!(token.starts_with("plt_"), "{made}");
    let id = made["id"].as_u64().unwrap().to_string();

    // The new token likes in its business and is refused the registry.
    let liked =
        node.cli_json(&["--token", &token, "like", "--biz", &biz, "--entity", "5", "--user", "6"]);
    assert_eq!(liked["now"], "like", "{liked}");
    let refused = node.cli_json(&["--token", &token, "token", "list"]);
    assert_eq!(refused["error"]["code"], "Unauthorized", "{refused}");
    let listed = node.cli_json(&["--token", ADMIN, "token", "list"]);
    assert_eq!(listed["tokens"].as_array().map(Vec::len), Some(1), "{listed}");
    assert!(!listed.to_string().contains(&token[token.len() - 43..]), "no secret listed");

    let revoked = node.cli_json(&["--token", ADMIN, "token", "revoke", &id]);
    assert!(revoked["revoked_ms"].as_u64().is_some(), "{revoked}");
    let after =
        node.cli_json(&["--token", &token, "like", "--biz", &biz, "--entity", "5", "--user", "7"]);
    assert_eq!(after["error"]["code"], "Unauthorized", "{after}");
}
