//! The peer listener: accepts connections from other nodes, tells data from
//! control connections by their preamble, authenticates data connections on
//! the cluster secret and serves their requests.
//!
//! ```text
//! accept ─ preamble (5 s) ─┬─ control ─> ControlSink (ractor_cluster session)
//!                          └─ data ─ handshake ─ refused: logged, closed
//!                                              └─ frames ─> handler (bounded per connection) ─> writer
//! ```
//!
//! Every wait has a timeout and every queue a bound: a half-open or silent
//! peer costs one task and its buffers, never the listener.

use super::auth;
use super::links::Links;
use super::wire::{
    self, Challenge, Frame, Hello, PeerRequest, PeerResponse, ProofMsg, Verdict, KIND_CONTROL,
    KIND_DATA, PREAMBLE, VERSION,
};
use crate::types::NodeId;
use futures::future::BoxFuture;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tracing::{debug, warn};

/// How long a new connection may take to send its preamble and handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Requests of one connection served at once; beyond it the connection is
/// not read until one finishes.
const IN_FLIGHT_PER_CONNECTION: usize = 256;
/// Answers queued for one connection's writer.
const REPLY_QUEUE: usize = 1024;

/// Serves one request from a peer.
pub type Handler =
    Arc<dyn Fn(NodeId, PeerRequest) -> BoxFuture<'static, PeerResponse> + Send + Sync>;
/// Takes over a control connection from `node` (its preamble consumed).
pub type ControlSink = Arc<dyn Fn(NodeId, TcpStream) + Send + Sync>;

pub struct PeerServer {
    pub me: NodeId,
    pub secret: Arc<[u8]>,
    pub links: Arc<Links>,
    pub handler: Handler,
    pub control: ControlSink,
}

impl PeerServer {
    /// Accepts until `stop` resolves.
    pub async fn run(self: Arc<Self>, listener: TcpListener, stop: impl Future<Output = ()>) {
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => return,
                accepted = listener.accept() => match accepted {
                    Ok((stream, addr)) => {
                        let me = self.clone();
                        tokio::spawn(async move { me.connection(stream, addr).await });
                    }
                    Err(e) => {
                        warn!(error = %e, "peer accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
            }
        }
    }

    async fn connection(self: Arc<Self>, mut stream: TcpStream, addr: SocketAddr) {
        let _ = stream.set_nodelay(true);
        let mut pre = [0u8; 13];
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, stream.read_exact(&mut pre)).await {
            Ok(Ok(_)) if &pre[..4] == PREAMBLE => {}
            _ => {
                debug!(%addr, "a peer connection sent no valid preamble");
                return;
            }
        }
        let kind = pre[4];
        let from = u64::from_be_bytes(pre[5..13].try_into().unwrap_or([0; 8]));
        if self.links.is_blocked(from) {
            debug!(%addr, from, "link to this peer is cut (fault injection)");
            return;
        }
        if kind != KIND_CONTROL && kind != KIND_DATA {
            debug!(%addr, kind, "a peer connection of unknown kind");
            return;
        }
        // Both kinds prove the secret first; a control connection then goes
        // to ractor_cluster (whose own cookie check follows).
        let authed = tokio::time::timeout(HANDSHAKE_TIMEOUT, self.handshake(&mut stream, kind));
        let peer = match authed.await {
            Ok(Ok(peer)) => peer,
            Ok(Err(why)) => return warn!(%addr, claimed = from, "refused a peer: {why}"),
            Err(_) => return warn!(%addr, claimed = from, "refused a peer: handshake timed out"),
        };
        if kind == KIND_CONTROL {
            (self.control)(peer, stream)
        } else {
            self.serve(peer, stream).await
        }
    }

    /// Checks the dialer knows the secret; returns its node id. A control
    /// connection may be addressed to node 0 (a seed dialed before its id
    /// is known).
    async fn handshake(&self, stream: &mut TcpStream, kind: u8) -> Result<NodeId, String> {
        let mut buf = Vec::new();
        let hello: Hello = wire::read_msg(stream, &mut buf).await.map_err(|e| e.to_string())?;
        let refuse = |why: String| Verdict::Refused(why);
        if hello.version != VERSION {
            let why =
                format!("peer protocol version {}, this node speaks {VERSION}", hello.version);
            let _ = wire::write_msg(stream, &refuse(why.clone())).await;
            return Err(why);
        }
        if hello.to != self.me && !(kind == KIND_CONTROL && hello.to == 0) {
            let why = format!("dialed node {} but this is node {}", hello.to, self.me);
            let _ = wire::write_msg(stream, &refuse(why.clone())).await;
            return Err(why);
        }
        let mine = auth::nonce();
        let proof = auth::acceptor_proof(&self.secret, &hello.nonce, &mine, hello.from, hello.to);
        wire::write_msg(stream, &Challenge { nonce: mine, proof })
            .await
            .map_err(|e| e.to_string())?;
        let p: ProofMsg = wire::read_msg(stream, &mut buf).await.map_err(|e| e.to_string())?;
        if !auth::check_dialer(&self.secret, &hello.nonce, &mine, hello.from, hello.to, &p.proof) {
            let why = format!("node {} could not prove the cluster secret", hello.from);
            let _ = wire::write_msg(stream, &refuse("wrong cluster secret".into())).await;
            return Err(why);
        }
        wire::write_msg(stream, &Verdict::Accepted).await.map_err(|e| e.to_string())?;
        Ok(hello.from)
    }

    async fn serve(&self, peer: NodeId, stream: TcpStream) {
        let (rd, mut wr) = stream.into_split();
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(REPLY_QUEUE);
        let writer = tokio::spawn(async move {
            let mut batch = Vec::with_capacity(64 * 1024);
            while let Some(first) = rx.recv().await {
                batch.clear();
                batch.extend_from_slice(&first);
                while batch.len() < 256 * 1024 {
                    match rx.try_recv() {
                        Ok(more) => batch.extend_from_slice(&more),
                        Err(_) => break,
                    }
                }
                if wr.write_all(&batch).await.is_err() {
                    return;
                }
            }
        });
        let slots = Arc::new(Semaphore::new(IN_FLIGHT_PER_CONNECTION));
        let mut rd = BufReader::with_capacity(64 * 1024, rd);
        let mut buf = Vec::new();
        loop {
            let frame: Frame<PeerRequest> = match wire::read_msg(&mut rd, &mut buf).await {
                Ok(f) => f,
                Err(e) => {
                    debug!(peer, error = %e, "peer connection ended");
                    break;
                }
            };
            if self.links.is_blocked(peer) {
                break;
            }
            let Ok(permit) = slots.clone().acquire_owned().await else { break };
            let (handler, tx) = (self.handler.clone(), tx.clone());
            tokio::spawn(async move {
                let body = handler(peer, frame.body).await;
                let mut out = Vec::new();
                let body = match wire::encode_msg(&Frame { id: frame.id, body }, &mut out) {
                    Ok(()) => out,
                    Err(e) => {
                        let mut out = Vec::new();
                        let err = PeerResponse::Unavailable(format!("answer not encodable: {e}"));
                        if wire::encode_msg(&Frame { id: frame.id, body: err }, &mut out).is_err() {
                            return;
                        }
                        out
                    }
                };
                let _ = tx.send(body).await;
                drop(permit);
            });
        }
        drop(tx);
        writer.abort();
    }
}
