//! The client listener: accepts TCP connections and serves pipelined,
//! multiplexed requests on each.
//!
//! ```text
//! listener ─accept─> connection: reader loop ─frame─> task per request ─> Engine::handle
//!                                 writer task <─encoded reply (any order, matched by req_id)
//! ```
//!
//! Limits are enforced here, at the edge: a connection cap (a connection over
//! it gets one `Overloaded` frame and is closed), a per-connection cap on
//! requests in flight (excess requests get `Overloaded`), a per-request
//! timeout (`Timeout`), and the frame size (a bad length closes only that
//! connection after a `BadRequest` reply; an undecodable frame is answered
//! `BadRequest` and the connection keeps serving).

use crate::metrics::Metrics;
use plaudit_cluster::Engine;
use plaudit_proto::cluster::Routing;
use plaudit_proto::frame::{self, FrameError};
use plaudit_proto::{Envelope, ErrorCode, Request, Response, WireError};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Semaphore};
use tracing::{debug, info, warn, Instrument};

#[derive(Debug, Clone)]
pub struct Limits {
    pub max_connections: usize,
    pub max_in_flight_per_connection: usize,
    pub request_timeout: Duration,
}

pub struct Server {
    pub engine: Arc<Engine>,
    pub metrics: Arc<Metrics>,
    pub limits: Limits,
}

impl Server {
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
                    match conns.clone().try_acquire_owned() {
                        Ok(permit) => {
                            let me = self.clone();
                            let stop = stop_rx.clone();
                            tokio::spawn(async move {
                                let metrics = me.metrics.clone();
                                metrics.conn_opened();
                                me.connection(stream, stop).instrument(tracing::debug_span!("conn", %peer)).await;
                                metrics.conn_closed();
                                drop(permit);
                            });
                        }
                        Err(_) => {
                            tokio::spawn(refuse(stream));
                        }
                    }
                }
            }
        }
        info!("listener closed; draining connections");
        let _ = stop_tx.send(true);
        let all = self.limits.max_connections as u32;
        let _ = tokio::time::timeout(grace, conns.acquire_many(all)).await;
    }

    async fn connection(self: Arc<Self>, stream: TcpStream, mut stop: watch::Receiver<bool>) {
        let (rd, mut wr) = stream.into_split();
        let mut rd = BufReader::with_capacity(64 * 1024, rd);
        let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Vec<u8>>();
        // The writer batches every reply that is ready into one write.
        let writer = tokio::spawn(async move {
            let mut buf = Vec::with_capacity(64 * 1024);
            while let Some(first) = out_rx.recv().await {
                // Let the other requests of this connection finish first, so
                // their replies share this write (one syscall, not many).
                tokio::task::yield_now().await;
                buf.clear();
                buf.extend_from_slice(&first);
                while buf.len() < 256 * 1024 {
                    match out_rx.try_recv() {
                        Ok(more) => buf.extend_from_slice(&more),
                        Err(_) => break,
                    }
                }
                if wr.write_all(&buf).await.is_err() {
                    break;
                }
            }
            let _ = wr.shutdown().await;
        });
        let in_flight = Arc::new(Semaphore::new(self.limits.max_in_flight_per_connection));
        let mut payload = Vec::new();
        // How this connection wants requests for shards led elsewhere
        // handled (a smart client says `Redirect` in its `Hello`).
        let mut routing = Routing::Forward;
        loop {
            let read = tokio::select! {
                r = frame::read_payload(&mut rd, &mut payload) => r,
                _ = stop.changed() => break,
            };
            let env = match read.and_then(|_| frame::decode_payload::<Request>(&payload)) {
                Ok(env) => env,
                Err(FrameError::Closed) => break,
                Err(FrameError::Io(e)) => {
                    debug!(error = %e, "connection read failed");
                    break;
                }
                Err(e @ FrameError::Malformed { .. }) => {
                    let req_id = match &e {
                        FrameError::Malformed { req_id, .. } => req_id.unwrap_or(0),
                        _ => 0,
                    };
                    self.metrics.observe("other", Duration::ZERO, Some(ErrorCode::BadRequest));
                    send(&out_tx, req_id, Response::Error(WireError::bad_request(e.to_string())));
                    continue;
                }
                Err(e @ FrameError::BadLength(_)) => {
                    // The stream cannot be resynchronised after a bad length.
                    self.metrics.observe("other", Duration::ZERO, Some(ErrorCode::BadRequest));
                    send(&out_tx, 0, Response::Error(WireError::bad_request(e.to_string())));
                    break;
                }
            };
            if let Request::Hello(h) = &env.body {
                // In the reader loop, so it applies to every later request.
                routing = h.routing;
                self.metrics.observe("hello", Duration::ZERO, None);
                send(&out_tx, env.req_id, Response::Hello);
                continue;
            }
            let Ok(permit) = in_flight.clone().try_acquire_owned() else {
                let op = env.body.op();
                self.metrics.observe(op, Duration::ZERO, Some(ErrorCode::Overloaded));
                let err = WireError::overloaded("too many requests in flight on this connection");
                send(&out_tx, env.req_id, Response::Error(err));
                continue;
            };
            let me = self.clone();
            let out = out_tx.clone();
            tokio::spawn(async move {
                let Envelope { req_id, body } = env;
                let op = body.op();
                let started = Instant::now();
                let resp = match tokio::time::timeout(
                    me.limits.request_timeout,
                    me.engine.handle_as(body, routing),
                )
                .await
                {
                    Ok(r) => r,
                    Err(_) => Response::Error(WireError::timeout(format!(
                        "no result within {} ms; the request may still apply",
                        me.limits.request_timeout.as_millis()
                    ))),
                };
                let code = match &resp {
                    Response::Error(e) => Some(e.code),
                    _ => None,
                };
                me.metrics.observe(op, started.elapsed(), code);
                send(&out, req_id, resp);
                drop(permit);
            });
        }
        // Let requests in flight finish before closing the write side.
        let all = self.limits.max_in_flight_per_connection as u32;
        let _ = in_flight.acquire_many(all).await;
        drop(out_tx);
        let _ = writer.await;
    }
}

fn send(out: &mpsc::UnboundedSender<Vec<u8>>, req_id: u64, body: Response) {
    let mut buf = Vec::new();
    let env = Envelope { req_id, body };
    if let Err(e) = frame::encode_frame(&env, &mut buf) {
        // Only an oversized reply can fail to encode; tell the caller so.
        let err = Response::Error(WireError::internal(format!("reply could not be encoded: {e}")));
        buf.clear();
        if frame::encode_frame(&Envelope { req_id, body: err }, &mut buf).is_err() {
            return;
        }
    }
    let _ = out.send(buf);
}

async fn refuse(mut stream: TcpStream) {
    let mut buf = Vec::new();
    let err = WireError::overloaded("the node is at its connection limit");
    if frame::encode_frame(&Envelope { req_id: 0, body: Response::Error(err) }, &mut buf).is_ok() {
        let _ = stream.write_all(&buf).await;
    }
    let _ = stream.shutdown().await;
}
