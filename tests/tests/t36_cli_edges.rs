//! What the CLI and `/metrics` show at the edges: a node at its connection
//! limit is reported `Overloaded` (its own answer), not as a dropped
//! connection; a negative UTC offset parses without `=`; and registry and
//! ranking operations are counted under their own op labels.

use plaudit_client::proto::{Request, Response};
use plaudit_tests::raw::RawConn;
use plaudit_tests::{metric_sum, Node};

#[tokio::test]
async fn the_cli_at_the_connection_limit_reports_overloaded() {
    let node = Node::builder().env("PLAUDIT_MAX_CONNECTIONS", 1).start();
    // Hold the only connection (a served ping proves the node counts it).
    let mut held = RawConn::connect(&node.addr()).await;
    held.send_request(1, Request::Ping).await;
    assert_eq!(held.recv().await.body, Response::Pong);

    let out = node.cli("ping");
    assert_eq!(out["error"]["code"], "Overloaded", "{out}");
    let message = out["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("connection limit"), "the node's own words: {out}");

    // The refusal is the node's answer, not an outage: the held one still works.
    held.send_request(2, Request::Ping).await;
    assert_eq!(held.recv().await.body, Response::Pong);
}

#[tokio::test]
async fn a_negative_utc_offset_needs_no_equals_sign() {
    let node = Node::start();
    let created = node.cli_json(&[
        "rank",
        "create",
        "--id",
        "5",
        "--name",
        "americas",
        "--granularity",
        "day",
        "--utc-offset",
        "-05:30",
    ]);
    assert_eq!(created["utc_offset"], "-05:30", "{created}");
}

/// `plaudit_requests_total{op="..."}` in `text`.
fn requests(text: &str, op: &str) -> f64 {
    let line = format!("plaudit_requests_total{{op=\"{op}\"}}");
    metric_sum(text, &line).unwrap_or(0.0)
}

#[tokio::test]
async fn registry_and_ranking_operations_have_their_own_op_labels() {
    let node = Node::start();
    for line in [
        "biz create --name shop",
        "biz update 1 --dislike false",
        "rank create --id 1 --name gifts --granularity day",
        "rank update 1 --cap 10",
        "rank list",
        "rank get 1",
        "score --rank 1 --item 1 --score 5 --event-id 1",
        "top --rank 1 --granularity day",
        "rank-of --rank 1 --granularity day --item 1",
        "around --rank 1 --granularity day --item 1",
        "board-size --rank 1 --granularity day",
        "boards --rank 1",
    ] {
        let out = node.cli(line);
        assert!(out.get("error").is_none(), "{line}: {out}");
    }
    let text = node.metrics_text();
    for op in [
        "biz_create",
        "biz_update",
        "rank_create",
        "rank_update",
        "rank_list",
        "rank_get",
        "score",
        "top",
        "rank_of",
        "around",
        "board_size",
        "boards",
    ] {
        assert!(requests(&text, op) >= 1.0, "op {op:?} was not counted:\n{}", lines(&text));
    }
    assert_eq!(requests(&text, "other"), 0.0, "{}", lines(&text));
    assert_eq!(requests(&text, "once"), 0.0, "a wrapper is not an op: {}", lines(&text));
}

fn lines(text: &str) -> String {
    text.lines().filter(|l| l.starts_with("plaudit_requests_total")).collect::<Vec<_>>().join("\n")
}
