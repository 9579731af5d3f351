//! The client listener: accepts TCP connections, within a cap, and serves
//! each on one task (`conn.rs`).
//!
//! ```text
//! listener ─accept─> under the cap: Conn::run (frames in, replies out, bounded)
//!                    at the cap: close the longest-idle connection (table.rs) and
//!                                take its place, or refuse with one `Overloaded` frame
//! ```
//!
//! Bounds enforced here, at the edge: the connection cap, requests in flight
//! per connection (excess requests get `Overloaded`), a per-request timeout
//! (`Timeout`), the frame size (a bad length closes only that connection
//! after a `BadRequest` reply; an undecodable frame is answered `BadRequest`
//! and the connection keeps serving), and every bound on memory and time
//! described in `conn.rs`. Worst-case memory per connection: README
//! ("Limits").

mod access;
mod batch;
mod close;
mod conn;
mod done;
mod hold;
mod inbuf;
mod seen;
pub(crate) mod table;

pub use conn::{Close, OUT_LIMIT};
pub use inbuf::{FREE_ROOM, MAX_ROOM};

use crate::metrics::Metrics;
use plaudit_cluster::Engine;
use plaudit_proto::frame;
use plaudit_proto::{Envelope, Response, WireError};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tracing::{info, warn, Instrument};

/// How long a newcomer at the cap waits for the connection it evicted to
/// close (it closes at once; this only bounds a wait that cannot hang).
const EVICT_WAIT: Duration = Duration::from_secs(1);

/// How long a refused connection is read from before it is closed.
const REFUSE_LINGER: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
pub struct Limits {
    pub max_connections: usize,
    pub max_in_flight_per_connection: usize,
    /// Requests in flight on all connections together.
    pub max_requests_in_flight: usize,
    pub request_timeout: Duration,
    /// A connection with nothing in flight that sends nothing this long is closed.
    pub idle_timeout: Duration,
    /// A connection that has sent no request this long after connecting is closed.
    pub auth_timeout: Duration,
    /// A client that takes none of its replies for this long is disconnected.
    pub write_timeout: Duration,
    /// A frame, once begun, must arrive whole within this.
    pub frame_timeout: Duration,
    /// Bytes of long frames all connections together may hold beyond each
    /// one's `FREE_ROOM`.
    pub frame_budget: usize,
}

impl Limits {
    /// How often a connection checks its timeouts: a quarter of the
    /// shortest, between 10 ms and 1 s.
    fn tick(&self) -> Duration {
        let shortest =
            [self.idle_timeout, self.auth_timeout, self.write_timeout, self.frame_timeout]
                .into_iter()
                .min()
                .unwrap_or(Duration::from_secs(1));
        (shortest / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
    }
}

pub struct Server {
    pub engine: Arc<Engine>,
    pub metrics: Arc<Metrics>,
    pub limits: Limits,
    frame_budget: Arc<Semaphore>,
    /// One permit per request in flight, node-wide.
    requests: Arc<Semaphore>,
    table: table::Table,
    /// SHA-256 of the admin token; `None`: the node is open (every
    /// connection may do anything).
    admin_hash: Option<[u8; 32]>,
}

impl Server {
    pub fn new(engine: Arc<Engine>, metrics: Arc<Metrics>, limits: Limits) -> Server {
        let frame_budget = Arc::new(Semaphore::new(limits.frame_budget));
        metrics.watch_frame_budget(frame_budget.clone(), limits.frame_budget);
        let requests = Arc::new(Semaphore::new(limits.max_requests_in_flight));
        let table = table::Table::new();
        Server { engine, metrics, limits, frame_budget, requests, table, admin_hash: None }
    }

    /// Requires connections to authenticate: with `admin_token`, or with a
    /// business token from the registry. Only the token's hash is kept.
    pub fn with_admin_token(mut self, admin_token: Option<&str>) -> Server {
        self.admin_hash = admin_token.map(plaudit_actors::directory::hash_secret);
        self
    }

    /// Serves until `shutdown` resolves, then stops accepting and gives open
    /// connections up to `grace` to finish what they have in flight.
    pub async fn run(
        self: Arc<Self>,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
        grace: Duration,
    ) {
        let conns = Arc::new(Semaphore::new(self.limits.max_connections));
        let (stop_tx, stop_rx) = watch::channel(false);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                accepted = listener.accept() => {
                    let (stream, peer) = match accepted {
                        Ok(x) => x,
                        Err(e) => {
                            // Out of file descriptors and the like: back off, keep serving.
                            warn!(error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let _ = stream.set_nodelay(true);
                    let me = self.clone();
                    let stop = stop_rx.clone();
                    let span = tracing::debug_span!("conn", %peer);
                    match conns.clone().try_acquire_owned() {
                        Ok(permit) => {
                            tokio::spawn(me.serve(stream, permit, stop).instrument(span));
                        }
                        Err(_) => match self.table.evict_one() {
                            Some(slot) => {
                                tokio::spawn(async move {
                                    match tokio::time::timeout(EVICT_WAIT, slot).await {
                                        Ok(Ok(permit)) => me.serve(stream, permit, stop).await,
                                        _ => me.refuse(stream).await,
                                    }
                                }.instrument(span));
                            }
                            None => {
                                tokio::spawn(me.refuse(stream));
                            }
                        },
                    }
                }
            }
        }
        info!("listener closed; draining connections");
        let _ = stop_tx.send(true);
        let all = self.limits.max_connections as u32;
        let _ = tokio::time::timeout(grace, conns.acquire_many(all)).await;
    }

    async fn serve(
        self: Arc<Self>,
        stream: TcpStream,
        permit: OwnedSemaphorePermit,
        stop: watch::Receiver<bool>,
    ) {
        let (id, entry) = self.table.insert();
        self.metrics.conn_opened();
        let why = conn::Conn::new(self.clone(), stream, entry.clone()).run(stop).await;
        self.table.remove(id);
        self.metrics.conn_closed(why.label());
        entry.pass_on(permit);
    }

    /// Answers a connection over the cap with one `Overloaded` frame.
    async fn refuse(self: Arc<Self>, mut stream: TcpStream) {
        self.metrics.conn_refused();
        let mut buf = Vec::new();
        let err = WireError::overloaded("the node is at its connection limit");
        if frame::encode_frame(&Envelope { req_id: 0, body: Response::Error(err) }, &mut buf)
            .is_ok()
        {
            let write = stream.write_all(&buf);
            let _ = tokio::time::timeout(self.limits.write_timeout, write).await;
        }
        let _ = stream.shutdown().await;
        // Read what the client already sent before closing: closing with
        // unread input sends a reset, which can destroy the frame above
        // before the client reads it.
        let drain = async {
            let mut scratch = [0u8; 4096];
            let mut left: usize = 64 * 1024;
            while left > 0 {
                match stream.read(&mut scratch).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => left = left.saturating_sub(n),
                }
            }
        };
        let _ = tokio::time::timeout(REFUSE_LINGER, drain).await;
    }
}
