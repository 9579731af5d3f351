//! One authenticated data connection to a peer, dialed by this node: many
//! requests in flight at once, answered in any order.
//!
//! ```text
//!  call(req) ──encode──► bounded queue ──► writer task ──write_all(batch)──► socket
//!     │                                                                       │
//!     └── oneshot ◄── pending[id] ◄── reader task ◄──────── read_msg ─────────┘
//! ```
//!
//! The queue is bounded: a caller that outruns the socket waits for room
//! (backpressure on Raft replication and forwarding, instead of memory). A
//! call that is dropped (its timeout) unregisters itself. When either task
//! sees the socket fail, the connection is dead: every waiting call fails
//! and `Peers` dials a new one on next use.

use super::auth;
use super::stream::{BoxRead, BoxWrite, PeerStream};
use super::wire::{
    self, Frame, Greeting, Hello, PeerRequest, PeerResponse, ProofMsg, Verdict, WireFault,
    KIND_DATA, MAX_HANDSHAKE_MSG, PREAMBLE, VERSION,
};
use crate::types::NodeId;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// Frames queued for the writer before callers wait.
const QUEUE_DEPTH: usize = 1024;
/// Stop adding queued frames to one write at this size.
const MAX_WRITE_BATCH: usize = 256 * 1024;

/// Why a call to a peer failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// Nothing was sent (no connection, refused, link cut): safe to retry
    /// elsewhere.
    #[error("node {node} is unreachable: {why}")]
    Unreachable { node: NodeId, why: String },
    /// Sent, but no answer in time (or the connection died first): the
    /// request may or may not have taken effect.
    #[error("no answer from node {node}: {why}")]
    NoAnswer { node: NodeId, why: String },
}

pub(crate) struct PeerConn {
    node: NodeId,
    next_id: AtomicU64,
    frames: mpsc::Sender<Vec<u8>>,
    shared: Arc<Shared>,
    reader: JoinHandle<()>,
    writer: JoinHandle<()>,
}

struct Shared {
    // Held for a map insert or remove only, never across an await.
    state: Mutex<State>,
}

struct State {
    pending: HashMap<u64, oneshot::Sender<PeerResponse>>,
    dead: Option<String>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn die(&self, why: String) {
        let mut s = self.lock();
        if s.dead.is_none() {
            s.dead = Some(why);
        }
        // Dropping the senders fails every waiting call.
        s.pending.clear();
    }
}

impl PeerConn {
    /// Dials `addr`, sends the preamble and authenticates both ways.
    pub(crate) async fn dial(
        me: NodeId,
        node: NodeId,
        addr: &str,
        creds: &auth::Credentials,
        timeout: Duration,
    ) -> Result<PeerConn, DialFault> {
        let stream = dial_authenticated(me, node, addr, KIND_DATA, creds, timeout).await?;
        Ok(PeerConn::start(node, stream))
    }

    fn start(node: NodeId, stream: PeerStream) -> PeerConn {
        let (rd, wr) = stream.split();
        let shared =
            Arc::new(Shared { state: Mutex::new(State { pending: HashMap::new(), dead: None }) });
        let (frames, queue) = mpsc::channel(QUEUE_DEPTH);
        let reader = tokio::spawn(read_loop(rd, shared.clone()));
        let writer = tokio::spawn(write_loop(wr, queue, shared.clone()));
        PeerConn { node, next_id: AtomicU64::new(1), frames, shared, reader, writer }
    }

    pub(crate) fn is_alive(&self) -> bool {
        self.shared.lock().dead.is_none() && !self.frames.is_closed()
    }

    /// Sends one request and waits for its answer (no timeout here: the
    /// caller bounds the wait, and dropping the future unregisters it).
    pub(crate) async fn call(&self, req: PeerRequest) -> Result<PeerResponse, CallError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut bytes = Vec::new();
        wire::encode_msg(&Frame { id, body: req }, &mut bytes)
            .map_err(|e| CallError::Unreachable { node: self.node, why: e.to_string() })?;
        let (tx, rx) = oneshot::channel();
        {
            let mut s = self.shared.lock();
            if let Some(why) = &s.dead {
                return Err(CallError::Unreachable { node: self.node, why: why.clone() });
            }
            s.pending.insert(id, tx);
        }
        let guard = Unregister { shared: &self.shared, id };
        if self.frames.send(bytes).await.is_err() {
            return Err(CallError::Unreachable {
                node: self.node,
                why: "the connection closed".into(),
            });
        }
        let res = rx.await.map_err(|_| CallError::NoAnswer {
            node: self.node,
            why: self.shared.lock().dead.clone().unwrap_or_else(|| "connection lost".into()),
        });
        std::mem::forget(guard);
        res
    }
}

/// Removes a call's slot if its future is dropped before the answer.
struct Unregister<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for Unregister<'_> {
    fn drop(&mut self) {
        self.shared.lock().pending.remove(&self.id);
    }
}

impl Drop for PeerConn {
    fn drop(&mut self) {
        self.reader.abort();
        self.writer.abort();
        self.shared.die("connection dropped".into());
    }
}

/// Why a dial gave no authenticated connection.
#[derive(Debug)]
pub(crate) enum DialFault {
    /// The two nodes do not belong together as configured: the other one
    /// refused this one (another shard count or protocol version, another
    /// node id, a wrong secret), or could not prove the secret (under
    /// which the shard count is). No redial cures it: an operator must.
    Mismatch(String),
    /// Anything else: no connection, no answer in time, a broken stream.
    Failed(String),
}

impl std::fmt::Display for DialFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DialFault::Mismatch(why) | DialFault::Failed(why) => f.write_str(why),
        }
    }
}

/// Connects to `addr` (under TLS, if the node has a peer certificate),
/// sends the preamble of a `kind` connection and proves the secret to node
/// `node` (0: whichever node listens there, for a seed whose id is not
/// known yet), which must prove it back.
pub(crate) async fn dial_authenticated(
    me: NodeId,
    node: NodeId,
    addr: &str,
    kind: u8,
    creds: &auth::Credentials,
    timeout: Duration,
) -> Result<PeerStream, DialFault> {
    let failed = |e: &dyn std::fmt::Display| DialFault::Failed(e.to_string());
    // The other node has proved nothing yet, and what it says goes into
    // this node's log.
    let refused = |why: String| {
        DialFault::Mismatch(format!(
            "the node at {addr} refused: {}",
            super::quiet::printable(&why)
        ))
    };
    let secret = &creds.secret;
    let bound = auth::Bound { from: me, to: node, shards: creds.shards };
    let fut = async {
        let tcp = TcpStream::connect(addr).await.map_err(|e| failed(&e))?;
        tcp.set_nodelay(true).map_err(|e| failed(&e))?;
        let mut stream = match &creds.tls {
            Some(tls) => tls
                .connect(addr, tcp)
                .await
                .map_err(|e| failed(&format!("TLS with the node at {addr}: {e}")))?,
            None => PeerStream::Plain(tcp),
        };
        let mut pre = PREAMBLE.to_vec();
        pre.push(kind);
        pre.extend_from_slice(&me.to_be_bytes());
        stream.write_all(&pre).await.map_err(|e| failed(&e))?;
        let mine = auth::nonce();
        let hello =
            Hello { version: VERSION, from: me, to: node, nonce: mine, shards: creds.shards };
        wire::write_msg(&mut stream, &hello).await.map_err(|e| failed(&e))?;
        let mut buf = Vec::new();
        let ch = match wire::read_msg_max(&mut stream, &mut buf, MAX_HANDSHAKE_MSG).await {
            Ok(Greeting::Challenge(ch)) => ch,
            Ok(Greeting::Refused(why)) => return Err(refused(why)),
            Err(e) => return Err(closed_or(e, node)),
        };
        if !auth::check_acceptor(secret, &mine, &ch.nonce, &bound, &ch.proof) {
            return Err(DialFault::Mismatch(format!(
                "the node at {addr} could not prove the cluster secret with {} \
                 (or is not node {node})",
                crate::layout::Layout::describe(creds.shards)
            )));
        }
        let proof = auth::dialer_proof(secret, &mine, &ch.nonce, &bound);
        wire::write_msg(&mut stream, &ProofMsg { proof }).await.map_err(|e| failed(&e))?;
        match wire::read_msg_max::<_, Verdict>(&mut stream, &mut buf, MAX_HANDSHAKE_MSG).await {
            Ok(Verdict::Accepted) => Ok(stream),
            Ok(Verdict::Refused(why)) => Err(refused(why)),
            Err(e) => Err(closed_or(e, node)),
        }
    };
    match tokio::time::timeout(timeout, fut).await {
        Ok(r) => r,
        Err(_) => Err(DialFault::Failed(format!("connecting to {addr} timed out"))),
    }
}

fn closed_or(e: WireFault, node: NodeId) -> DialFault {
    DialFault::Failed(match e {
        WireFault::Closed => format!("node {node} closed the connection during the handshake"),
        other => other.to_string(),
    })
}

async fn read_loop(rd: BoxRead, shared: Arc<Shared>) {
    let mut rd = BufReader::with_capacity(64 * 1024, rd);
    let mut buf = Vec::new();
    loop {
        match wire::read_msg::<_, Frame<PeerResponse>>(&mut rd, &mut buf).await {
            Ok(f) => {
                let tx = shared.lock().pending.remove(&f.id);
                if let Some(tx) = tx {
                    let _ = tx.send(f.body);
                }
            }
            Err(e) => {
                shared.die(e.to_string());
                return;
            }
        }
    }
}

async fn write_loop(mut wr: BoxWrite, mut queue: mpsc::Receiver<Vec<u8>>, shared: Arc<Shared>) {
    let mut batch = Vec::with_capacity(MAX_WRITE_BATCH);
    while let Some(first) = queue.recv().await {
        batch.clear();
        batch.extend_from_slice(&first);
        while batch.len() < MAX_WRITE_BATCH {
            match queue.try_recv() {
                Ok(more) => batch.extend_from_slice(&more),
                Err(_) => break,
            }
        }
        // Flushed: under TLS a record may otherwise wait in the session.
        if let Err(e) = write_flushed(&mut wr, &batch).await {
            shared.die(e.to_string());
            return;
        }
    }
}

/// Writes `bytes` and flushes (a no-op on plain TCP).
pub(crate) async fn write_flushed(wr: &mut BoxWrite, bytes: &[u8]) -> std::io::Result<()> {
    wr.write_all(bytes).await?;
    wr.flush().await
}
