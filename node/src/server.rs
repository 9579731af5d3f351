//! The client listener: accepts TCP connections, within a cap, and serves
//! each on one task (`conn.rs`).
//!
//! ```text
//! listener ─accept─> a seat (admission.rs): Conn::run (frames in, replies out, bounded)
//!                    at the cap: close a connection that may go (table.rs) and
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
pub(crate) mod admission;
mod batch;
mod close;
mod conn;
mod done;
mod hold;
mod inbuf;
mod seen;
mod socket;
pub(crate) mod table;
pub mod tls;

pub use conn::{Close, OUT_LIMIT};
pub use inbuf::{FREE_ROOM, MAX_ROOM};

use crate::metrics::Metrics;
use admission::{Offer, Refusal, Seat};
use plaudit_cluster::Engine;
use plaudit_proto::frame;
use plaudit_proto::{Envelope, Response, WireError};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tracing::{info, warn, Instrument};

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
    /// How `max_connections` is shared on a node with an admin token.
    pub shares: admission::Shares,
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
    pub(crate) admission: admission::Admission,
    /// SHA-256 of the admin token; `None`: the node is open (every
    /// connection may do anything).
    admin_hash: Option<[u8; 32]>,
    /// Clients speak TLS (`tls.rs`); `None`: plaintext.
    tls: Option<tokio_rustls::TlsAcceptor>,
}

impl Server {
    pub fn new(engine: Arc<Engine>, metrics: Arc<Metrics>, limits: Limits) -> Server {
        let frame_budget = Arc::new(Semaphore::new(limits.frame_budget));
        metrics.watch_frame_budget(frame_budget.clone(), limits.frame_budget);
        let requests = Arc::new(Semaphore::new(limits.max_requests_in_flight));
        let admission = admission::Admission::open(limits.max_connections);
        let (admin_hash, tls) = (None, None);
        Server { engine, metrics, limits, frame_budget, requests, admission, admin_hash, tls }
    }

    /// Requires connections to authenticate: with `admin_token`, or with a
    /// business token from the registry. Only the token's hash is kept. The
    /// connection cap is then shared (`admission.rs`).
    pub fn with_admin_token(mut self, admin_token: Option<&str>) -> Server {
        self.admin_hash = admin_token.map(plaudit_actors::directory::hash_secret);
        if self.admin_hash.is_some() {
            self.admission = admission::Admission::secured(self.limits.shares);
        }
        self
    }

    /// Makes every client connection a TLS session with `acceptor`.
    pub fn with_tls(mut self, acceptor: Option<tokio_rustls::TlsAcceptor>) -> Server {
        self.tls = acceptor;
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
                    match self.admission.newcomer(peer.ip()) {
                        Ok(Offer::Now(seat)) => {
                            tokio::spawn(me.serve(stream, seat, stop).instrument(span));
                        }
                        Ok(Offer::After(pending)) => {
                            tokio::spawn(async move {
                                match pending.seat().await {
                                    Some(seat) => me.serve(stream, seat, stop).await,
                                    None => me.refuse(stream, Refusal::Full).await,
                                }
                            }.instrument(span));
                        }
                        Err(why) => {
                            tokio::spawn(me.refuse(stream, why));
                        }
                    }
                }
            }
        }
        info!("listener closed; draining connections");
        let _ = stop_tx.send(true);
        let _ = tokio::time::timeout(grace, self.admission.drained()).await;
    }

    async fn serve(self: Arc<Self>, stream: TcpStream, seat: Seat, stop: watch::Receiver<bool>) {
        if let Some(acceptor) = self.tls.clone() {
            return self.serve_tls(stream, acceptor, seat, stop).await;
        }
        self.metrics.conn_opened();
        let why = conn::Conn::new(self.clone(), stream, seat).run(stop).await;
        self.metrics.conn_closed(why.label());
    }

    /// Answers a connection over the cap with one `Overloaded` frame (over
    /// TLS: closes it, as a handshake per refusal would cost what the cap
    /// protects).
    async fn refuse(self: Arc<Self>, mut stream: TcpStream, why: Refusal) {
        self.metrics.conn_refused();
        if self.tls.is_some() {
            return;
        }
        let mut buf = Vec::new();
        let err = WireError::overloaded(why.message());
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
