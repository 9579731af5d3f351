//! The memory ceiling, for real: applied state lives in memory, so every
//! distinct like a client adds grows the node. Once its resident memory
//! reaches `max_memory_mb`, new writes fail with `Overloaded` saying why,
//! the node's memory stops growing with them, reads keep serving, and
//! nothing acknowledged is lost: a restart with a higher ceiling takes
//! writes again and holds every like that was acknowledged.

use plaudit_client::proto::{BizConfig, ErrorCode, LikeState};
use plaudit_client::ClientOptions;
use plaudit_tests::{http_get, metric_sum, Node};
use std::time::Duration;

const MIB: u64 = 1 << 20;
/// Headroom above the node's resident memory at rest.
const HEADROOM_MB: u64 = 24;
/// Likes sent concurrently per round, and distinct entities per user.
const ROUND: u64 = 500;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_stop_at_the_memory_ceiling_reads_serve_and_nothing_acknowledged_is_lost() {
    let mut node = Node::builder().start();
    let opts = || ClientOptions { timeout: Duration::from_secs(5), ..Default::default() };
    let c = node.client_with(opts()).await;
    let biz = c.create_biz(None, "mem", BizConfig::default()).await.unwrap().id;
    let ceiling_mb = node.rss_bytes() / MIB + HEADROOM_MB;
    node.set_env("PLAUDIT_MAX_MEMORY_MB", ceiling_mb);
    node.restart();
    let c = node.client_with(opts()).await;

    // Distinct likes, a round at a time, until the node refuses them.
    let mut acked: Vec<(u64, u64)> = Vec::new();
    let mut refusal = None;
    for user in 0..2000u64 {
        let mut round = tokio::task::JoinSet::new();
        for entity in 0..ROUND {
            let c = c.clone();
            round.spawn(async move { (entity, c.like(biz, entity, user, None).await) });
        }
        while let Some(done) = round.join_next().await {
            match done.expect("like task") {
                (entity, Ok(_)) => acked.push((user, entity)),
                (_, Err(e)) if e.code() == Some(ErrorCode::Overloaded) => refusal = Some(e),
                (_, Err(e)) => panic!("a like failed otherwise: {e}"),
            }
        }
        if refusal.is_some() {
            break;
        }
    }
    eprintln!("acked {} likes before the ceiling ({ceiling_mb} MiB)", acked.len());
    let err = refusal.expect("the ceiling was never reached");
    assert!(err.to_string().contains("max_memory_mb"), "{err}");
    assert!(!acked.is_empty());
    // Refused writes do not grow the node: resident memory stays near the
    // ceiling (what accepted work allocated before the watcher's next look).
    for _ in 0..3 {
        assert!(c.like(biz, 1, 1_000_000, None).await.is_err(), "still refused");
    }
    let rss = node.rss_bytes();
    assert!(rss < (ceiling_mb + 48) * MIB, "{} MiB resident, ceiling {ceiling_mb}", rss / MIB);

    // Reads serve, and say what was written.
    let (user, entity) = acked[acked.len() / 2];
    let states = c.status(biz, user, &[entity]).await.expect("status at the ceiling");
    assert_eq!(states[0].state, LikeState::Like);
    assert!(c.counts(biz, &[entity]).await.expect("counts").first().is_some_and(|e| e.likes >= 1));
    assert_eq!(http_get(node.admin_addr(), "/readyz").expect("readyz").0, 200);
    assert_eq!(metric_sum(&node.metrics_text(), "plaudit_memory_writes_refused"), Some(1.0));

    // A higher ceiling: writes resume, and every acknowledged like is there.
    node.unset_env("PLAUDIT_MAX_MEMORY_MB");
    node.restart();
    let c = node.client_with(opts()).await;
    c.like(biz, 1, 1_000_000, None).await.expect("writes resume under a higher ceiling");
    acked.sort_unstable();
    for chunk in acked.chunk_by(|a, b| a.0 == b.0) {
        let entities: Vec<u64> = chunk.iter().map(|&(_, e)| e).collect();
        let states = c.status(biz, chunk[0].0, &entities).await.expect("status after restart");
        assert!(
            states.iter().all(|s| s.state == LikeState::Like),
            "user {}: an acknowledged like is missing",
            chunk[0].0
        );
    }
}
