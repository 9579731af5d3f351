//! Small helpers every end-to-end test shares: HTTP to the admin port,
//! reading metrics, polling until a condition holds, a common ranking.

use crate::{Node, CONVERGE_TIMEOUT};
use std::future::Future;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// The wall clock in seconds, as scoring events carry it.
pub fn now_secs() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
}

/// A scoring event now, without dimensions or sub-score: `score` for
/// `item` on a ranking's all-time board (`total_ranking`).
pub fn score_event(
    rank: u32,
    item: u64,
    score: i64,
    event_id: u64,
) -> plaudit_client::proto::scoring::ScoreRequest {
    plaudit_client::proto::scoring::ScoreRequest {
        rank,
        item,
        score,
        sub: None,
        dims: vec![],
        ts: now_secs(),
        event_id,
    }
}

/// A ranking with one all-time board, no dimensions, summed scores and
/// earlier-first ties: what most scoring tests need.
pub fn total_ranking(id: u32, name: &str) -> plaudit_client::proto::rankings::RankDef {
    use plaudit_client::proto::rankings::{Aggregation, RankDef, RankSettings, TieMode};
    use plaudit_client::proto::window::{Granularity, UtcOffset};
    RankDef {
        id,
        name: name.to_string(),
        dims: vec![],
        granularities: vec![Granularity::Total],
        utc_offset: UtcOffset::UTC,
        aggregation: Aggregation::Incr,
        ties: TieMode::EarlierFirst,
        settings: RankSettings::default(),
    }
}

/// A minimal HTTP/1.1 GET (the admin server closes after each reply).
pub fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    http_request(addr, "GET", path, "")
}

/// `http_get` with `Authorization: Bearer <token>`.
pub fn http_get_bearer(
    addr: SocketAddr,
    path: &str,
    token: &str,
) -> std::io::Result<(u16, String)> {
    http_request(addr, "GET", path, &format!("Authorization: Bearer {token}\r\n"))
}

pub(crate) fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &str,
) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}Content-Length: 0\r\n\
         Connection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, format!("reply {text:?}"));
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(bad)?;
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    Ok((status, body.to_string()))
}

/// The sum of every sample of metric `name` (any labels) in Prometheus text;
/// `None` if there is no sample.
pub fn metric_sum(text: &str, name: &str) -> Option<f64> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else { continue };
        if !(rest.starts_with('{') || rest.starts_with(' ')) {
            continue;
        }
        let value = rest.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
        if let Some(v) = value {
            *found.get_or_insert(0.0) += v;
        }
    }
    found
}

/// Polls `check` (every 10-50 ms) until it returns true; panics naming `what`
/// if `timeout` passes first.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(10);
    loop {
        if check().await {
            return;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting until {what}");
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Waits until derived state has converged: every outbox is empty and every
/// shard has applied its whole log (so no replayed entry can still add to an
/// outbox, e.g. just after a restart).
pub async fn wait_converged(node: &Node) {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    let last = loop {
        let text = node.metrics_text();
        let backlog = metric_sum(&text, "plaudit_outbox_backlog");
        let lag = metric_sum(&text, "plaudit_raft_apply_lag");
        if backlog == Some(0.0) && lag.unwrap_or(0.0) == 0.0 {
            return;
        }
        if Instant::now() > deadline {
            break format!("outbox backlog {backlog:?}, apply lag {lag:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    node.fail(&format!("derived state did not converge within {CONVERGE_TIMEOUT:?}: {last}"))
}

/// `--name N` from the command line of a bench binary, else `default`.
pub fn arg_u32(name: &str, default: u32) -> u32 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Waits until `counter` has grown by `n` from now, failing the test
/// (`"{what} stalled"`) if it takes longer than `within`.
pub async fn grows_by(
    counter: &std::sync::atomic::AtomicU64,
    n: u64,
    within: std::time::Duration,
    what: &str,
) {
    use std::sync::atomic::Ordering;
    let target = counter.load(Ordering::Relaxed) + n;
    let deadline = tokio::time::Instant::now() + within;
    while counter.load(Ordering::Relaxed) < target {
        assert!(tokio::time::Instant::now() < deadline, "{what} stalled");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
