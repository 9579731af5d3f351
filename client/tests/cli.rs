//! The `plaudit` binary against a scripted in-test server: what it sends,
//! what it prints and how it exits.

mod support;

use plaudit_client::proto::business::UpdateBiz;
use plaudit_client::proto::cluster::{
    ClusterStatus, GroupStatus, NodeInfo, NodeState, NodeStatus, ReplicaStatus, StatusView,
};
use plaudit_client::proto::frame::{read_frame, write_frame};
use plaudit_client::proto::likes::{LikeReply, LikeRequest};
use plaudit_client::proto::{
    BizConfig, Business, Envelope, LikeAction, LikeState, Request, Response, WireError,
};
use std::process::Output;
use tokio::net::TcpListener;

/// Serves one connection as a lone node: answers the hello and routing
/// requests the SDK sends first, then each request must equal the script's
/// next expectation (registry changes arrive wrapped in `Once`) and gets its
/// scripted reply.
async fn serve(script: Vec<(Request, Response)>) -> (String, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let table = support::one_node(&addr);
    let server = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut buf = Vec::new();
        let mut script = script.into_iter().peekable();
        while script.peek().is_some() {
            let env: Envelope<Request> = read_frame(&mut stream, &mut buf).await.unwrap();
            let body = match env.body {
                Request::Hello(_) => Response::Hello,
                Request::Routing => Response::Routing(Box::new(table.clone())),
                Request::EntityRoutes => Response::EntityRoutes(vec![]),
                Request::EntityRoutesPage(_) => support::no_routes(),
                got => {
                    let (want, reply) = script.next().unwrap();
                    let got = match got {
                        Request::Once { req, .. } => *req,
                        other => other,
                    };
                    assert_eq!(got, want);
                    reply
                }
            };
            write_frame(&mut stream, &Envelope { req_id: env.req_id, body }).await.unwrap();
        }
    });
    (addr, server)
}

async fn plaudit(addr: &str, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_plaudit"))
        .arg("--addr")
        .arg(addr)
        .args(args)
        .env_remove("PLAUDIT_ADDR")
        .output()
        .await
        .unwrap()
}

fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap()
}

#[tokio::test]
async fn biz_update_reads_the_config_then_changes_only_the_given_field() {
    let current = Business { id: 3, name: "video".into(), config: BizConfig::default() };
    let changed = BizConfig { dislike_enabled: false, ..BizConfig::default() };
    let updated = Business { config: changed.clone(), ..current.clone() };
    let (addr, server) = serve(vec![
        (Request::GetBiz(3), Response::Biz(current)),
        (Request::UpdateBiz(UpdateBiz { id: 3, config: changed }), Response::Biz(updated)),
    ])
    .await;

    let out = plaudit(&addr, &["--json", "biz", "update", "3", "--dislike", "false"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "{\"id\":3,\"name\":\"video\",\"dislike_enabled\":false,\
         \"user_list_memory\":100,\"liker_list_memory\":100}\n"
    );
    server.await.unwrap();
}

#[tokio::test]
async fn like_prints_a_sentence_for_people() {
    let req = LikeRequest { biz: 1, entity: 7, user: 3, owner: Some(9), action: LikeAction::Like };
    let reply = LikeReply { prev: LikeState::None, now: LikeState::Like, changed: true, mtime: 1 };
    let (addr, server) = serve(vec![(Request::Like(req), Response::Like(reply))]).await;

    let out =
        plaudit(&addr, &["like", "--biz", "1", "--entity", "7", "--user", "3", "--owner", "9"])
            .await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "liked entity 7 (was: none)\n");
    server.await.unwrap();
}

#[tokio::test]
async fn server_errors_exit_1_with_the_code_on_stderr() {
    let (addr, server) =
        serve(vec![(Request::GetBiz(9), Response::Error(WireError::not_found("no business 9")))])
            .await;

    let out = plaudit(&addr, &["biz", "get", "9"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), "");
    assert_eq!(text(&out.stderr), "error: NotFound: no business 9\n");
    server.await.unwrap();
}

#[tokio::test]
async fn an_unreachable_node_exits_3_with_json_unavailable() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);

    let out = plaudit(&addr, &["--json", "ping"]).await;
    assert_eq!(out.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["code"], "Unavailable");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.starts_with(&format!("cannot connect to {addr}")), "{message}");
}

#[tokio::test]
async fn usage_errors_exit_2_and_still_print_json_when_asked() {
    let out = plaudit("127.0.0.1:1", &["--json", "counts", "--biz", "1"]).await;
    assert_eq!(out.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["code"], "BadRequest");
}

fn cluster_status(addr: &str) -> ClusterStatus {
    ClusterStatus {
        reporter: 1,
        epoch: 2,
        nodes: vec![NodeStatus {
            info: NodeInfo {
                id: 1,
                client: addr.to_string(),
                peer: "127.0.0.1:1".into(),
                admin: "127.0.0.1:2".into(),
            },
            state: NodeState::Up,
            shards_led: 1,
            life: plaudit_client::proto::membership::NodeLife::Up,
        }],
        meta: GroupStatus { shard: None, leader: Some(1), replicas: vec![1], states: vec![] },
        shards: vec![GroupStatus {
            shard: Some(0),
            leader: Some(1),
            replicas: vec![1],
            states: vec![ReplicaStatus {
                node: 1,
                role: "leader".into(),
                term: 3,
                applied: Some(12),
                apply_lag: 0,
                behind_leader: Some(0),
            }],
        }],
        moves: vec![],
    }
}

#[tokio::test]
async fn admin_status_json_is_exactly_the_status_view() {
    let status = cluster_status("n1:7401");
    let (addr, server) =
        serve(vec![(Request::ClusterStatus, Response::ClusterStatus(Box::new(status.clone())))])
            .await;

    let out = plaudit(&addr, &["admin", "status", "--json"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let want = serde_json::to_string(&StatusView::from(&status)).unwrap();
    assert_eq!(text(&out.stdout), format!("{want}\n"));
    server.await.unwrap();
}

#[tokio::test]
async fn admin_status_prints_nodes_then_shards_for_people() {
    let (addr, server) = serve(vec![(
        Request::ClusterStatus,
        Response::ClusterStatus(Box::new(cluster_status("n1:7401"))),
    )])
    .await;
    let out = plaudit(&addr, &["admin", "status"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "cluster epoch 2, as node 1 sees it\n\n\
         NODE  STATE  CLIENT   SHARDS_LED\n   \
         1  up     n1:7401           1\n\n\
         SHARD  LEADER  REPLICAS  TERM  APPLIED/LAG\n \
         meta       1  1            0\n    \
         0       1  1            3  1:12/0\n"
    );
    server.await.unwrap();
}

#[tokio::test]
async fn a_dead_seed_in_the_list_is_skipped() {
    let dead = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead_addr = dead.local_addr().unwrap().to_string();
    drop(dead);
    let (addr, server) = serve(vec![(Request::Ping, Response::Pong)]).await;

    let out = plaudit(&format!("{dead_addr},{addr}"), &["--json", "ping"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "{\"ok\":true}\n");
    server.await.unwrap();
}

#[tokio::test]
async fn when_no_seed_answers_the_exit_status_is_3_naming_them_all() {
    let mut addrs = Vec::new();
    for _ in 0..2 {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        addrs.push(l.local_addr().unwrap().to_string());
    }
    let out = plaudit(&addrs.join(","), &["--json", "ping"]).await;
    assert_eq!(out.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["code"], "Unavailable");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("cannot connect to any of {}, {}", addrs[0], addrs[1])),
        "{message}"
    );
}
