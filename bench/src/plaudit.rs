//! What every Plaudit driver shares: connecting one `Client` per
//! connection, naming errors for the report, and backing off when the node
//! says it is overloaded or cannot be reached.

use crate::args::Common;
use anyhow::Context;
use plaudit_client::{Client, ClientError, ClientOptions};
use plaudit_proto::ErrorCode;
use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

/// The name an error is counted under in the report. The first error of
/// each name is also printed to stderr with its message: the report only
/// counts them, and a count says nothing about the cause.
pub fn error_name(e: &ClientError) -> &'static str {
    let name = match e {
        ClientError::Io(_) => "Io",
        ClientError::Closed => "Closed",
        ClientError::Protocol(_) => "Protocol",
        other => other.code().map(ErrorCode::as_str).unwrap_or("Other"),
    };
    static SEEN: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
    if SEEN.lock().unwrap_or_else(|p| p.into_inner()).insert(name) {
        eprintln!("plaudit-bench: first {name} error: {e}");
    }
    name
}

/// `connections` separate clients with one connection each, so the load
/// spreads over as many sockets as the Redis driver uses.
pub async fn connect(c: &Common) -> anyhow::Result<Vec<Client>> {
    connect_pooled(c, c.connections, 1).await
}

/// `n` clients with `pool_size` connections each.
pub async fn connect_pooled(c: &Common, n: usize, pool_size: usize) -> anyhow::Result<Vec<Client>> {
    let tls = c.tls_ca.as_deref().map(plaudit_client::Tls::from_ca_file).transpose()?;
    let addr = &c.addr;
    let mut clients = Vec::with_capacity(n);
    for _ in 0..n {
        let opts = ClientOptions {
            pool_size,
            timeout: c.timeout,
            tls: tls.clone(),
            split_reads: !c.whole_reads,
            cache_ttl: c.cache_ttl,
            spread_hot_reads: c.spread_hot_reads,
            spread_reads: c.spread_reads,
            ..Default::default()
        };
        clients.push(
            Client::connect_with(addr, opts)
                .await
                .with_context(|| format!("connecting to plaudit at {addr}"))?,
        );
    }
    Ok(clients)
}

/// Backs off after `Overloaded` (and after connection failures, so a dead
/// node is not spun on); resets after a success.
#[derive(Default)]
pub struct Backoff(u32);

impl Backoff {
    pub async fn after<T>(&mut self, r: &Result<T, ClientError>) {
        self.after_error(r.as_ref().err()).await
    }

    /// `None` is a success.
    pub async fn after_error(&mut self, e: Option<&ClientError>) {
        match e {
            None => self.0 = 0,
            Some(e) if e.code() == Some(ErrorCode::Overloaded) || e.is_connection() => {
                self.0 = (self.0 + 1).min(7);
                tokio::time::sleep(Duration::from_millis(1 << self.0)).await;
            }
            Some(_) => {}
        }
    }
}

/// Retries `f` for up to 30 s: a freshly started node may not serve yet.
pub async fn retry_setup<T, F, Fut>(mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) if std::time::Instant::now() >= deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}
