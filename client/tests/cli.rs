//! The `plaudit` binary against a scripted in-test server: what it sends,
//! what it prints and how it exits.

use plaudit_client::proto::business::UpdateBiz;
use plaudit_client::proto::frame::{read_frame, write_frame};
use plaudit_client::proto::likes::{LikeReply, LikeRequest};
use plaudit_client::proto::{
    BizConfig, Business, Envelope, LikeAction, LikeState, Request, Response, WireError,
};
use std::process::Output;
use tokio::net::TcpListener;

/// Serves one connection: each request must equal the script's next
/// expectation and gets its scripted reply.
async fn serve(script: Vec<(Request, Response)>) -> (String, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut buf = Vec::new();
        for (want, reply) in script {
            let env: Envelope<Request> = read_frame(&mut stream, &mut buf).await.unwrap();
            assert_eq!(env.body, want);
            write_frame(&mut stream, &Envelope { req_id: env.req_id, body: reply }).await.unwrap();
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
