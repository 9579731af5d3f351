//! Tokens from the SDK's and the CLI's side, against scripted nodes: every
//! connection says `Auth` right after its hello, a refused token ends the
//! call (or the connect) at once, token changes travel in a `Once` to the
//! registry leader, and the CLI takes its token from `--token` or
//! `PLAUDIT_TOKEN` and never prints it.

mod support;

use plaudit_client::proto::auth::{
    format_token, parse_token, AuthRequest, Role, TokenInfo, TokenSecret,
};
use plaudit_client::proto::cluster::{ClientHello, NodeId, Routing, RoutingTable};
use plaudit_client::proto::frame::{read_frame, write_frame};
use plaudit_client::proto::likes::LikeReply;
use plaudit_client::proto::routing::shard_of;
use plaudit_client::proto::{Envelope, ErrorCode, LikeState, Request, Response, WireError};
use plaudit_client::{Client, ClientError, ClientOptions};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{FakeCluster, Handler, Reply};
use tokio::net::TcpListener;

const ADMIN: &str = "an-admin-token-for-tests";
const BIZ: u32 = 1;

fn opts(token: Option<&str>) -> ClientOptions {
    ClientOptions {
        pool_size: 1,
        timeout: Duration::from_secs(5),
        token: token.map(str::to_string),
        ..Default::default()
    }
}

fn auth(token: &str) -> Request {
    Request::Auth(AuthRequest { token: TokenSecret(token.into()) })
}

/// Three nodes, three shards, node `s + 1` leading shard `s`; node 3 leads
/// the metadata group, so a registry call is told apart from "the seed".
fn placement(addrs: &[String]) -> RoutingTable {
    support::table(
        addrs,
        vec![vec![1, 2, 3], vec![2, 3, 1], vec![3, 1, 2]],
        vec![Some(1), Some(2), Some(3)],
        Some(3),
    )
}

fn info(id: u64, ranks: Vec<u32>, read_only: bool) -> TokenInfo {
    TokenInfo { id, biz: BIZ, ranks, read_only, created_ms: 1, revoked_ms: None }
}

/// Takes the admin token everywhere except at `refusing`; answers likes and
/// the token registry as a cluster whose token 5 is the only one.
fn admin_node(refusing: Option<NodeId>) -> Handler {
    Arc::new(move |node, req| {
        Reply::Now(match req {
            Request::Auth(a) if a.token.0 == ADMIN && Some(node) != refusing => {
                Response::Auth(Role::Admin)
            }
            Request::Auth(_) => Response::Error(WireError::unauthorized("invalid token")),
            Request::Like(_) => Response::Like(LikeReply {
                prev: LikeState::None,
                now: LikeState::Like,
                changed: true,
                mtime: 1,
            }),
            Request::Once { req, .. } => match &**req {
                Request::CreateToken(c) => Response::Token(info(5, c.ranks.clone(), c.read_only)),
                Request::RevokeToken(id) => {
                    Response::Token(TokenInfo { revoked_ms: Some(2), ..info(*id, vec![], false) })
                }
                other => panic!("unexpected in a Once: {other:?}"),
            },
            Request::ListTokens => Response::Tokens(vec![info(5, vec![], false)]),
            other => panic!("unexpected {other:?}"),
        })
    })
}

#[tokio::test]
async fn every_connection_says_auth_right_after_its_hello() {
    let (listener, addr) = listen().await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let server = tokio::spawn(async move {
        // Two pooled connections, each dialled (and authenticated) up front.
        for _ in 0..2 {
            let (mut stream, _) = listener.accept().await.unwrap();
            let log = log.clone();
            let addr = addr_of(&listener);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                while let Ok(env) = read_frame::<_, Request>(&mut stream, &mut buf).await {
                    let body = match &env.body {
                        Request::Hello(_) => Response::Hello,
                        Request::Auth(_) => Response::Auth(Role::Admin),
                        Request::Routing => Response::Routing(Box::new(support::one_node(&addr))),
                        Request::EntityRoutes => Response::EntityRoutes(vec![]),
                        Request::EntityRoutesPage(_) => support::no_routes(),
                        Request::Ping => Response::Pong,
                        other => panic!("unexpected {other:?}"),
                    };
                    log.lock().unwrap().push(env.body);
                    let _ = write_frame(&mut stream, &Envelope { req_id: env.req_id, body }).await;
                }
            });
        }
    });
    let client = Client::connect_with(&addr, ClientOptions { pool_size: 2, ..opts(Some(ADMIN)) })
        .await
        .unwrap();
    client.ping().await.unwrap();
    server.await.unwrap();
    let seen = seen.lock().unwrap().clone();
    let hello = Request::Hello(ClientHello { routing: Routing::Redirect });
    // Both connections open with hello then auth; routing and ping follow.
    assert_eq!(seen.iter().filter(|r| **r == hello).count(), 2, "{seen:?}");
    assert_eq!(seen.iter().filter(|r| **r == auth(ADMIN)).count(), 2, "{seen:?}");
    let first_other = seen.iter().position(|r| *r != hello && *r != auth(ADMIN)).unwrap();
    assert_eq!(first_other, 4, "hello and auth come before anything else: {seen:?}");
}

#[tokio::test]
async fn without_a_token_no_auth_is_sent() {
    let cluster = FakeCluster::start(3, placement, admin_node(None)).await;
    let client = Client::connect_with(&cluster.addr(1), opts(None)).await.unwrap();
    client.like(BIZ, 7, 1, None).await.unwrap();
    assert!(cluster.seen_by(|r| matches!(r, Request::Auth(_))).is_empty());
}

#[tokio::test]
async fn a_refused_token_fails_connect_at_once_without_trying_other_seeds() {
    let cluster = FakeCluster::start(1, |a| support::one_node(&a[0]), admin_node(None)).await;
    let (other, other_addr) = listen().await;
    let seeds = format!("{},{other_addr}", cluster.addr(1));

    let err = Client::connect_with(&seeds, opts(Some("plt_9_wrong"))).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::Unauthorized), "{err:?}");
    assert!(!err.is_connection());
    let msg = err.to_string();
    assert!(msg.contains("refused the token: invalid token"), "{msg}");
    assert!(!msg.contains("wrong"), "the token leaked: {msg}");
    // One Auth (no retry), and the second seed was never dialled.
    assert_eq!(cluster.seen_by(|r| matches!(r, Request::Auth(_))), vec![1]);
    let dialled = tokio::time::timeout(Duration::from_millis(200), other.accept()).await;
    assert!(dialled.is_err(), "the second seed was dialled");
}

#[tokio::test]
async fn a_node_that_wants_a_token_says_so_at_connect() {
    // A secured node answers only Ping, Hello and Auth before `Auth`.
    let (listener, addr) = listen().await;
    let server = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut buf = Vec::new();
        while let Ok(env) = read_frame::<_, Request>(&mut stream, &mut buf).await {
            let body = match env.body {
                Request::Hello(_) => Response::Hello,
                _ => Response::Error(WireError::unauthorized("authenticate first")),
            };
            let _ = write_frame(&mut stream, &Envelope { req_id: env.req_id, body }).await;
        }
    });
    let err = Client::connect_with(&addr, opts(None)).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::Unauthorized), "{err:?}");
    assert_eq!(err.to_string(), "Unauthorized: the node wants a token: authenticate first");
    server.abort();
}

#[tokio::test]
async fn a_refusal_at_a_later_dial_ends_the_call_without_retries() {
    // Node 2 refuses the token that nodes 1 and 3 take.
    let cluster = FakeCluster::start(3, placement, admin_node(Some(2))).await;
    let client = Client::connect_with(&cluster.addr(1), opts(Some(ADMIN))).await.unwrap();
    let user = (0..).find(|&u| shard_of(BIZ, u, 3) == 1).unwrap();

    let err = client.like(BIZ, 7, user, None).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::Unauthorized), "{err:?}");
    assert_eq!(cluster.seen_by(|r| matches!(r, Request::Auth(_))), vec![1, 2]);
    assert!(cluster.seen_by(|r| matches!(r, Request::Like(_))).is_empty());
}

#[tokio::test]
async fn token_calls_go_to_the_registry_leader_and_changes_in_a_once() {
    let cluster = FakeCluster::start(3, placement, admin_node(None)).await;
    let client = Client::connect_with(&cluster.addr(1), opts(Some(ADMIN))).await.unwrap();

    let (token, created) = client.create_token(BIZ, &[4, 6], true).await.unwrap();
    assert_eq!(created, info(5, vec![4, 6], true));
    let registry: Vec<(NodeId, Request)> =
        cluster.log().into_iter().filter(|(_, r)| !matches!(r, Request::Auth(_))).collect();
    let [(3, Request::Once { req, .. })] = registry.as_slice() else {
        panic!("not one Once at the registry leader: {registry:?}")
    };
    let Request::CreateToken(sent) = &**req else { panic!("{req:?}") };
    // The token is the id the node gave and the secret the SDK made.
    assert_eq!(token, format_token(5, &sent.secret.0));
    assert_eq!(parse_token(&token), Some((5, sent.secret.0.as_str())));
    assert_eq!((sent.biz, sent.ranks.clone(), sent.read_only), (BIZ, vec![4, 6], true));

    assert_eq!(client.list_tokens().await.unwrap(), vec![info(5, vec![], false)]);
    assert_eq!(client.revoke_token(5).await.unwrap().revoked_ms, Some(2));
    let tail: Vec<(NodeId, Request)> = cluster.log().into_iter().rev().take(2).collect();
    assert!(matches!(&tail[0], (3, Request::Once { req, .. }) if **req == Request::RevokeToken(5)));
    assert_eq!(tail[1], (3, Request::ListTokens));
}

#[tokio::test]
async fn auth_cannot_be_sent_as_a_call() {
    let cluster = FakeCluster::start(1, |a| support::one_node(&a[0]), admin_node(None)).await;
    let client = Client::connect_with(&cluster.addr(1), opts(Some(ADMIN))).await.unwrap();
    let err = client.request(auth("other")).await.unwrap_err();
    assert!(matches!(err, ClientError::Protocol(ref m) if m.contains("ClientOptions::token")));
    assert_eq!(cluster.seen_by(|r| matches!(r, Request::Auth(_))), vec![1]);
}

// The CLI.

async fn plaudit(addr: &str, env_token: Option<&str>, args: &[&str]) -> std::process::Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_plaudit"));
    cmd.arg("--addr").arg(addr).args(args).env_remove("PLAUDIT_ADDR");
    match env_token {
        Some(t) => cmd.env("PLAUDIT_TOKEN", t),
        None => cmd.env_remove("PLAUDIT_TOKEN"),
    };
    cmd.output().await.unwrap()
}

fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap()
}

#[tokio::test]
async fn token_create_prints_the_new_token_alone_on_its_first_line() {
    let cluster = FakeCluster::start(1, |a| support::one_node(&a[0]), admin_node(None)).await;
    let out =
        plaudit(&cluster.addr(1), Some(ADMIN), &["token", "create", "--biz", "1", "--rank", "4"])
            .await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let (token, rest) = stdout.split_once('\n').unwrap();
    assert_eq!(parse_token(token).map(|(id, _)| id), Some(5), "{stdout}");
    assert_eq!(rest, "token 5: business 1, ranking 4, read-write (shown only now: keep it)\n");
    assert!(!stdout.contains(ADMIN) && !text(&out.stderr).contains(ADMIN));
}

#[tokio::test]
async fn token_create_json_carries_the_token_and_its_record() {
    let cluster = FakeCluster::start(1, |a| support::one_node(&a[0]), admin_node(None)).await;
    let args = ["--json", "--token", ADMIN, "token", "create", "--biz", "1", "--read-only"];
    let out = plaudit(&cluster.addr(1), None, &args).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let token = v["token"].as_str().unwrap();
    assert_eq!(parse_token(token).map(|(id, _)| id), Some(5));
    let record = serde_json::json!({"id": 5, "biz": 1, "ranks": [], "read_only": true});
    assert_eq!(v.as_object().unwrap().len(), 5, "{v}");
    for (k, want) in record.as_object().unwrap() {
        assert_eq!(&v[k], want, "{k}");
    }
}

#[tokio::test]
async fn the_flag_wins_over_the_variable() {
    let cluster = FakeCluster::start(1, |a| support::one_node(&a[0]), admin_node(None)).await;
    let out =
        plaudit(&cluster.addr(1), Some("plt_1_from-env"), &["--token", ADMIN, "token", "list"])
            .await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("ID  BIZ  RANKS  READ_ONLY"), "{}", text(&out.stdout));
    assert_eq!(cluster.seen_by(|r| *r == auth(ADMIN)), vec![1]);
    assert!(cluster.seen_by(|r| *r == auth("plt_1_from-env")).is_empty());
}

#[tokio::test]
async fn a_refused_token_exits_1_unauthorized_without_printing_it() {
    let cluster = FakeCluster::start(1, |a| support::one_node(&a[0]), admin_node(None)).await;
    let secret = "plt_3_not-a-real-secret";
    let out = plaudit(&cluster.addr(1), Some(secret), &["token", "revoke", "3"]).await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.starts_with("error: Unauthorized: "), "{stderr}");
    assert!(stderr.contains("refused the token"), "{stderr}");
    assert!(!stderr.contains("not-a-real-secret") && !text(&out.stdout).contains("not-a"));
}

#[tokio::test]
async fn help_names_the_variable_but_never_shows_its_value() {
    let out = plaudit("127.0.0.1:1", Some("plt_1_help-secret"), &["--help"]).await;
    assert_eq!(out.status.code(), Some(0));
    let help = text(&out.stdout);
    assert!(help.contains("PLAUDIT_TOKEN"), "{help}");
    assert!(!help.contains("help-secret"), "{help}");
}

async fn listen() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = addr_of(&listener);
    (listener, addr)
}

fn addr_of(listener: &TcpListener) -> String {
    listener.local_addr().unwrap().to_string()
}
