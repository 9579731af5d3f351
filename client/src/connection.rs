//! One multiplexed, pipelined TCP connection to a node.
//!
//! ```text
//!  call(req) ──encode──► mpsc ──► writer task ──write_all(batch)──► socket
//!     │                                                               │
//!     └── oneshot ◄── pending[req_id] ◄── reader task ◄──read_frame───┘
//! ```
//!
//! Callers encode their own frame (so encoding runs in parallel and an
//! oversized request fails only its own call), register a oneshot under a
//! fresh `req_id` and queue the bytes. The writer drains whatever is queued
//! into one `write_all`, so a burst of calls costs one syscall. The reader
//! routes each reply to its caller by `req_id`, in whatever order the node
//! answers. When either task sees the socket fail, the connection is marked
//! dead and every call still waiting is failed with the same reason; the pool
//! notices `is_alive() == false` and dials a replacement on next use.
//!
//! A node over its connection limit answers a new connection with one
//! `Overloaded` frame under `req_id` 0 and closes it. That frame is the
//! reason the connection died: every waiting call fails with the node's own
//! error (`ClientError::Server`), not with "connection closed", so a caller
//! sees that the node is busy rather than gone.

use crate::error::ClientError;
use plaudit_proto::frame::{self, FrameError};
use plaudit_proto::keyed_hash::KeyedHash;
use plaudit_proto::message::PIPELINED;
use plaudit_proto::{Envelope, ErrorCode, Request, Response, WireError};
use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// Frames queued for the writer before callers wait for room: back-pressure
/// on a caller that outruns the socket, without a lock on the write path.
const QUEUE_DEPTH: usize = 1024;
/// Stop adding queued frames to one write once it is this big.
const MAX_WRITE_BATCH: usize = 64 * 1024;

type Reply = Result<Response, ClientError>;

/// One connection: the handle callers share. Dropping the last handle stops
/// both tasks and closes the socket.
pub(crate) struct Connection {
    addr: String,
    /// The node answers an undecodable frame with `req_id` 0 when it cannot
    /// recover the id, so real ids start at 1 and 0 is never routed.
    next_id: AtomicU64,
    frames: mpsc::Sender<Vec<u8>>,
    shared: Arc<Shared>,
    reader: JoinHandle<()>,
    writer: JoinHandle<()>,
}

/// State shared by callers and the two tasks.
struct Shared {
    addr: String,
    // A std mutex: it is held for a map insert or remove, never across an `.await`.
    state: Mutex<State>,
}

struct State {
    /// Keyed by request id: two lookups per request (register, complete).
    /// The ids are ours, not a peer's, so SipHash's resistance to chosen
    /// keys buys nothing here; the node's keyed multiply-fold is enough.
    pending: HashMap<u64, Waiter, KeyedHash>,
    /// Why the connection died. Set once; afterwards nothing registers.
    dead: Option<Death>,
}

/// Who waits for a reply: one call, or one request of a batch.
enum Waiter {
    One(oneshot::Sender<Reply>),
    Batch(Arc<Batch>, usize),
}

/// A batch's replies as they arrive; the caller is woken once, when the
/// last one is in (not once per reply).
struct Batch {
    state: Mutex<BatchState>,
}

struct BatchState {
    replies: Vec<Option<Reply>>,
    left: usize,
    done: Option<oneshot::Sender<Vec<Option<Reply>>>>,
}

impl Batch {
    fn fill(&self, i: usize, reply: Reply) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        // An empty `replies` was taken: complete, or given up (`so_far`).
        match st.replies.get_mut(i) {
            Some(slot @ None) => {
                *slot = Some(reply);
                st.left -= 1;
            }
            _ => return,
        }
        if st.left == 0 {
            let replies = std::mem::take(&mut st.replies);
            if let Some(done) = st.done.take() {
                let _ = done.send(replies);
            }
        }
    }
}

impl Waiter {
    fn complete(self, reply: Reply) {
        match self {
            // A caller that has gone away is normal (it timed out).
            Waiter::One(tx) => {
                let _ = tx.send(reply);
            }
            Waiter::Batch(b, i) => b.fill(i, reply),
        }
    }
}

/// Why a connection stopped; turned into a fresh `ClientError` for every
/// call it fails (`io::Error` is not `Clone`).
#[derive(Debug, Clone)]
enum Death {
    Closed,
    Io(io::ErrorKind, String),
    Protocol(String),
    /// The node refused the connection and said why (`req_id` 0).
    Refused(WireError),
}

impl Connection {
    /// Dials `addr`, giving up after `timeout`. Every failure is `Io`, with
    /// the address in the message.
    /// With `tls`, the TLS handshake is part of the dial (and of `timeout`).
    pub(crate) async fn dial(
        addr: &str,
        timeout: Duration,
        tls: Option<&crate::Tls>,
    ) -> Result<Connection, ClientError> {
        let started = tokio::time::Instant::now();
        let cannot = |e: io::Error| {
            ClientError::Io(io::Error::new(e.kind(), format!("cannot connect to {addr}: {e}")))
        };
        let stream = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
            Ok(stream) => stream.map_err(cannot)?,
            Err(_) => {
                return Err(cannot(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("timed out after {timeout:?}"),
                )))
            }
        };
        // Requests are small and latency-bound; batching happens in the writer.
        stream.set_nodelay(true).map_err(cannot)?;
        tracing::debug!(addr, "connected");
        let Some(tls) = tls else {
            let (rd, wr) = stream.into_split();
            return Ok(Connection::start(addr.to_string(), rd, wr));
        };
        let left = timeout.saturating_sub(started.elapsed());
        let session = match tokio::time::timeout(left, tls.connect(addr, stream)).await {
            Ok(session) => session.map_err(cannot)?,
            Err(_) => {
                let e = io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out");
                return Err(cannot(e));
            }
        };
        let (rd, wr) = tokio::io::split(session);
        Ok(Connection::start(addr.to_string(), rd, wr))
    }

    fn start<R, W>(addr: String, rd: R, wr: W) -> Connection
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let shared = Arc::new(Shared {
            addr: addr.clone(),
            state: Mutex::new(State { pending: HashMap::default(), dead: None }),
        });
        let (frames, queue) = mpsc::channel(QUEUE_DEPTH);
        let reader = tokio::spawn(read_loop(rd, shared.clone()));
        let writer = tokio::spawn(write_loop(wr, queue, shared.clone()));
        Connection { addr, next_id: AtomicU64::new(1), frames, shared, reader, writer }
    }

    /// Whether the connection can still carry calls.
    pub(crate) fn is_alive(&self) -> bool {
        self.shared.lock().dead.is_none() && !self.frames.is_closed()
    }

    /// Sends one request and waits for its reply (any variant, including
    /// `Response::Error`). No timeout here: the caller wraps the future, and
    /// dropping it unregisters the call.
    pub(crate) async fn call(&self, req: &Request) -> Reply {
        let req_id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut bytes = Vec::new();
        frame::encode_request(req_id, req, &mut bytes).map_err(|e| {
            ClientError::Protocol(format!("cannot encode {} request: {e}", req.op()))
        })?;

        let (tx, rx) = oneshot::channel();
        self.shared.register(req_id, Waiter::One(tx))?;
        let mut guard = Unregister { shared: &self.shared, ids: req_id..req_id + 1, armed: true };

        if self.frames.send(bytes).await.is_err() {
            // The writer is gone, so the connection is dead (or being dropped).
            return Err(self.shared.death_error());
        }
        let reply = rx.await;
        // The reader removed the entry when it completed the call.
        guard.armed = false;
        reply.unwrap_or(Err(ClientError::Closed))
    }
}

impl Connection {
    /// Sends `reqs` in one write, under consecutive ids: what a pipelining
    /// caller pays once per batch, not once per request (one frame buffer,
    /// one queued write, one wake-up). `Err` holds every request's answer
    /// when none is left to wait for: each could not be encoded, or the
    /// connection is dead. Otherwise the batch's replies are waited for on
    /// the `Pending` returned, in `reqs`' order, each as `call` would give
    /// it; a request that cannot be encoded fails alone.
    pub(crate) async fn send_many<'c>(
        &'c self,
        reqs: &[&Request],
    ) -> Result<Pending<'c>, Vec<Reply>> {
        let n = reqs.len() as u64;
        // Marked as a pipeline's: the caller waits for all the replies, so
        // the node may send them together (`PIPELINED`). The counter stays
        // far below the bit, so `first + i` keeps it.
        let first = self.next_id.fetch_add(n, Ordering::Relaxed) | PIPELINED;
        let mut bytes = Vec::new();
        let mut out: Vec<Option<Reply>> = Vec::with_capacity(reqs.len());
        for (i, req) in reqs.iter().enumerate() {
            let at = bytes.len();
            match frame::encode_request(first + i as u64, req, &mut bytes) {
                Ok(()) => out.push(None),
                Err(e) => {
                    bytes.truncate(at);
                    let msg = format!("cannot encode {} request: {e}", req.op());
                    out.push(Some(Err(ClientError::Protocol(msg))));
                }
            }
        }
        let waiting: Vec<usize> =
            out.iter().enumerate().filter(|(_, r)| r.is_none()).map(|(i, _)| i).collect();
        if waiting.is_empty() {
            return Err(out.into_iter().flatten().collect());
        }
        let (tx, rx) = oneshot::channel();
        let left = waiting.len();
        let batch = Arc::new(Batch {
            state: Mutex::new(BatchState { replies: out, left, done: Some(tx) }),
        });
        let ws = waiting.into_iter().map(|i| (first + i as u64, Waiter::Batch(batch.clone(), i)));
        if let Err(e) = self.shared.register_all(ws) {
            return Err(reqs.iter().map(|_| Err(e.duplicate())).collect());
        }
        let guard = Unregister { shared: &self.shared, ids: first..first + n, armed: true };
        if self.frames.send(bytes).await.is_err() {
            let e = self.shared.death_error();
            return Err(reqs.iter().map(|_| Err(e.duplicate())).collect());
        }
        Ok(Pending { batch, rx, n: reqs.len(), _guard: guard })
    }
}

/// A batch sent on a connection, its replies still coming in. Dropping it
/// unregisters the requests still unanswered, so their late replies are
/// discarded.
pub(crate) struct Pending<'c> {
    batch: Arc<Batch>,
    rx: oneshot::Receiver<Vec<Option<Reply>>>,
    /// Requests in the batch.
    n: usize,
    _guard: Unregister<'c>,
}

impl Pending<'_> {
    /// Waits until every request has its reply. Cancel-safe: a caller that
    /// stops waiting (its deadline, a node that stopped answering pings)
    /// still has the replies that came, from `so_far`.
    pub(crate) async fn all(&mut self) -> Vec<Reply> {
        match (&mut self.rx).await {
            Ok(r) => r.into_iter().map(|r| r.unwrap_or(Err(ClientError::Closed))).collect(),
            // Not reached: only `so_far`, which takes `self`, drops the sender unsent.
            Err(_) => (0..self.n).map(|_| Err(ClientError::Closed)).collect(),
        }
    }

    /// The replies in so far, `None` for each request still unanswered: a
    /// reply that came is an answer, however late its neighbours are.
    pub(crate) fn so_far(mut self) -> Vec<Option<Reply>> {
        let unfinished = {
            let mut st = self.batch.state.lock().unwrap_or_else(|p| p.into_inner());
            st.done.take().map(|_| std::mem::take(&mut st.replies))
        };
        match unfinished {
            Some(replies) => replies,
            // The last reply came after the caller stopped waiting: `fill`
            // sent them all, under the lock, so they are waiting here.
            None => match self.rx.try_recv() {
                Ok(replies) => replies,
                Err(_) => (0..self.n).map(|_| None).collect(),
            },
        }
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("addr", &self.addr)
            .field("alive", &self.is_alive())
            .finish()
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // No call can be waiting (each holds a handle), so nothing is lost.
        self.reader.abort();
        self.writer.abort();
    }
}

/// Removes a call's pending entries when the call is dropped before its
/// replies arrive (timeout or cancellation), so late replies are discarded.
struct Unregister<'a> {
    shared: &'a Shared,
    ids: std::ops::Range<u64>,
    armed: bool,
}

impl Drop for Unregister<'_> {
    fn drop(&mut self) {
        if self.armed {
            let mut st = self.shared.lock();
            for id in self.ids.clone() {
                st.pending.remove(&id);
            }
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Critical sections are map operations that cannot panic midway, so a
        // poisoned lock still holds consistent state.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn register(&self, req_id: u64, w: Waiter) -> Result<(), ClientError> {
        self.register_all(std::iter::once((req_id, w)))
    }

    fn register_all(&self, ws: impl Iterator<Item = (u64, Waiter)>) -> Result<(), ClientError> {
        let mut st = self.lock();
        if let Some(death) = &st.dead {
            return Err(death.to_error(&self.addr));
        }
        st.pending.extend(ws);
        Ok(())
    }

    fn complete(&self, req_id: u64, reply: Reply) {
        let waiter = self.lock().pending.remove(&req_id);
        match waiter {
            Some(w) => w.complete(reply),
            None => match reply {
                Ok(Response::Error(e)) if req_id == 0 => {
                    tracing::warn!(addr = %self.addr, error = %e, "node could not decode a request")
                }
                _ => {
                    tracing::debug!(addr = %self.addr, req_id, "reply for a call no longer waiting")
                }
            },
        }
    }

    /// Marks the connection dead and fails every waiting call.
    fn kill(&self, death: Death) {
        let pending = {
            let mut st = self.lock();
            if st.dead.is_some() {
                return;
            }
            st.dead = Some(death.clone());
            std::mem::take(&mut st.pending)
        };
        if !pending.is_empty() {
            tracing::warn!(addr = %self.addr, ?death, in_flight = pending.len(), "connection lost");
        } else {
            tracing::debug!(addr = %self.addr, ?death, "connection closed");
        }
        for (_, w) in pending {
            w.complete(Err(death.to_error(&self.addr)));
        }
    }

    fn death_error(&self) -> ClientError {
        match &self.lock().dead {
            Some(death) => death.to_error(&self.addr),
            None => ClientError::Closed,
        }
    }
}

impl Death {
    fn to_error(&self, addr: &str) -> ClientError {
        match self {
            Death::Closed => ClientError::Closed,
            Death::Io(kind, msg) => ClientError::Io(io::Error::new(
                *kind,
                format!("connection to {addr} failed: {msg}"),
            )),
            Death::Protocol(msg) => {
                ClientError::Protocol(format!("connection to {addr} dropped: {msg}"))
            }
            Death::Refused(e) => ClientError::Server(e.clone()),
        }
    }
}

async fn read_loop<R: AsyncRead + Unpin>(rd: R, shared: Arc<Shared>) {
    let mut rd = BufReader::new(rd);
    let mut buf = Vec::new();
    let death = loop {
        let frame = match frame::read_payload(&mut rd, &mut buf).await {
            Ok(()) => frame::decode_reply(&buf),
            Err(e) => Err(e),
        };
        match frame {
            // The node's answer to the connection itself: it is at its
            // connection limit and closes this one next. Reading on could
            // meet a reset before the close and lose its words.
            Ok(Envelope { req_id: 0, body: Response::Error(e) })
                if e.code == ErrorCode::Overloaded =>
            {
                break Death::Refused(e)
            }
            Ok(env) => shared.complete(env.req_id, Ok(env.body)),
            // The frame had sound bounds, so the stream is still in sync: fail
            // only the call it belonged to, if that can be told.
            Err(FrameError::Malformed { req_id: Some(id), reason }) => shared
                .complete(id, Err(ClientError::Protocol(format!("undecodable reply: {reason}")))),
            Err(FrameError::Malformed { req_id: None, reason }) => {
                tracing::warn!(addr = %shared.addr, reason, "dropped an undecodable reply")
            }
            Err(FrameError::Closed) => break Death::Closed,
            Err(FrameError::Io(e)) => break Death::Io(e.kind(), e.to_string()),
            Err(e @ FrameError::BadLength(_)) => break Death::Protocol(e.to_string()),
        }
    };
    shared.kill(death);
}

async fn write_loop<W: AsyncWrite + Unpin>(
    mut wr: W,
    mut queue: mpsc::Receiver<Vec<u8>>,
    shared: Arc<Shared>,
) {
    while let Some(mut batch) = queue.recv().await {
        while batch.len() < MAX_WRITE_BATCH {
            match queue.try_recv() {
                Ok(frame) => batch.extend_from_slice(&frame),
                Err(_) => break,
            }
        }
        // A TLS stream may keep the last record inside rustls until it is
        // flushed (a no-op on plain TCP).
        let sent = async {
            wr.write_all(&batch).await?;
            wr.flush().await
        };
        if let Err(e) = sent.await {
            shared.kill(Death::Io(e.kind(), e.to_string()));
            return;
        }
    }
    // Every handle is gone: say goodbye politely.
    let _ = wr.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(n: usize) -> (Arc<Batch>, oneshot::Receiver<Vec<Option<Reply>>>) {
        let (tx, rx) = oneshot::channel();
        let replies = (0..n).map(|_| None).collect();
        let state = Mutex::new(BatchState { replies, left: n, done: Some(tx) });
        (Arc::new(Batch { state }), rx)
    }

    #[test]
    fn a_batch_wakes_its_caller_once_every_reply_is_in_whatever_their_order() {
        let (b, mut rx) = batch(3);
        Waiter::Batch(b.clone(), 2).complete(Ok(Response::Pong));
        Waiter::Batch(b.clone(), 0).complete(Err(ClientError::Closed));
        assert!(rx.try_recv().is_err(), "one reply is still missing");
        // A second answer for the same slot (a death racing a reply) is ignored.
        Waiter::Batch(b.clone(), 0).complete(Ok(Response::Pong));
        assert!(rx.try_recv().is_err());
        Waiter::Batch(b, 1).complete(Ok(Response::Hello));
        let replies = rx.try_recv().expect("complete");
        assert!(matches!(replies[0], Some(Err(ClientError::Closed))));
        assert!(matches!(replies[1], Some(Ok(Response::Hello))));
        assert!(matches!(replies[2], Some(Ok(Response::Pong))));
    }

    #[test]
    fn a_batch_given_up_keeps_the_replies_that_came_even_if_the_last_one_just_did() {
        let shared = Shared {
            addr: "127.0.0.1:1".into(),
            state: Mutex::new(State { pending: HashMap::default(), dead: None }),
        };
        let pending = |n: usize| {
            let (b, rx) = batch(n);
            let ws = (0..n).map(|i| (10 + i as u64, Waiter::Batch(b.clone(), i)));
            shared.register_all(ws).unwrap();
            let guard = Unregister { shared: &shared, ids: 10..10 + n as u64, armed: true };
            Pending { batch: b, rx, n, _guard: guard }
        };
        // One of two answered when the caller gives up.
        let p = pending(2);
        shared.complete(11, Ok(Response::Pong));
        let got = p.so_far();
        assert!(got[0].is_none());
        assert!(matches!(got[1], Some(Ok(Response::Pong))));
        // A late reply is discarded: its request was unregistered.
        shared.complete(10, Ok(Response::Pong));
        assert!(shared.lock().pending.is_empty());
        // Both answered, the last one after the caller stopped waiting.
        let p = pending(2);
        shared.complete(10, Ok(Response::Hello));
        shared.complete(11, Ok(Response::Pong));
        let got = p.so_far();
        assert!(matches!(got[0], Some(Ok(Response::Hello))));
        assert!(matches!(got[1], Some(Ok(Response::Pong))));
    }

    #[test]
    fn a_dead_connection_fails_every_request_of_a_waiting_batch() {
        let shared = Shared {
            addr: "127.0.0.1:1".into(),
            state: Mutex::new(State { pending: HashMap::default(), dead: None }),
        };
        let (b, mut rx) = batch(2);
        let ws = (0..2).map(|i| (10 + i as u64, Waiter::Batch(b.clone(), i)));
        shared.register_all(ws).unwrap();
        shared.complete(11, Ok(Response::Pong));
        shared.kill(Death::Closed);
        let replies = rx.try_recv().expect("complete");
        assert!(matches!(replies[0], Some(Err(ClientError::Closed))));
        assert!(matches!(replies[1], Some(Ok(Response::Pong))));
        // Nothing registers on a dead connection.
        let (tx, _rx) = oneshot::channel();
        assert!(shared.register(12, Waiter::One(tx)).is_err());
    }
}
