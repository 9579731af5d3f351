//! The peer listener: accepts connections from other nodes, tells data from
//! control connections by their preamble, authenticates data connections on
//! the cluster secret and serves their requests.
//!
//! ```text
//! accept ─ [TLS, a client certificate of the CA] ─ preamble (5 s together)
//!        ─┬─ control ─> ControlSink (ractor_cluster session)
//!                          └─ data ─ handshake ─ refused: logged, closed
//!                                              └─ frames ─> handler (bounded per connection) ─> writer
//! ```
//!
//! Every wait has a timeout and every queue a bound: a half-open or silent
//! peer costs one task and its buffers, never the listener.

use super::auth;
use super::links::Links;
use super::stream::PeerStream;
use super::wire::{
    self, Challenge, Frame, Greeting, Hello, PeerRequest, PeerResponse, ProofMsg, Verdict,
    KIND_CONTROL, KIND_DATA, MAX_HANDSHAKE_MSG, PREAMBLE, VERSION,
};
use crate::types::NodeId;
use futures::future::BoxFuture;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tracing::{debug, warn};

/// How long a new connection may take to send its preamble and handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Raft RPCs of one connection served at once; beyond it the connection is
/// not read until one finishes (they finish quickly: openraft answers them
/// from its own state).
const RAFT_IN_FLIGHT: usize = 256;
/// Other requests (forwarded client requests, proposals, reads) of one
/// connection served at once; beyond it they are answered `Overloaded` at
/// once. They have their own budget so that requests waiting on a slow or
/// deposed leader never hold up the Raft traffic of every group sharing
/// the connection. Sized for fan-outs: one client `counts` of 20 entities
/// becomes up to 16 per-shard reads, most of them forwarded, so 512 client
/// requests in flight put ~2,000 on a peer link (256 refused 10% of the
/// cluster's counts and cut its likes mix by a third). Each holds one
/// peer frame, from a peer that proved the cluster secret.
const WORK_IN_FLIGHT: usize = 4096;
/// No request of a peer is served longer than this (a forwarded request
/// carries a shorter deadline of its own): the answer says it timed out.
const HANDLER_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections that have not finished the handshake, at once; beyond it new
/// ones are closed at once.
pub const MAX_UNAUTHENTICATED: usize = 64;
/// Answers queued for one connection's writer.
const REPLY_QUEUE: usize = 1024;

/// Serves one request from a peer.
pub type Handler =
    Arc<dyn Fn(NodeId, PeerRequest) -> BoxFuture<'static, PeerResponse> + Send + Sync>;
/// Takes over a control connection from `node` (its preamble consumed).
pub type ControlSink = Arc<dyn Fn(NodeId, PeerStream) + Send + Sync>;

pub struct PeerServer {
    pub me: NodeId,
    /// Bounds the connections still in their handshake.
    pub handshaking: Arc<Semaphore>,
    pub creds: auth::Credentials,
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

    async fn connection(self: Arc<Self>, tcp: TcpStream, addr: SocketAddr) {
        let Ok(handshaking) = self.handshaking.clone().try_acquire_owned() else {
            debug!(%addr, "too many peer connections in their handshake; closed");
            return;
        };
        let _ = tcp.set_nodelay(true);
        let mut pre = [0u8; 13];
        let opened = async {
            let mut stream = match &self.creds.tls {
                Some(tls) => tls.accept(tcp).await.map_err(|e| format!("TLS: {e}"))?,
                None => PeerStream::Plain(tcp),
            };
            stream.read_exact(&mut pre).await.map_err(|e| e.to_string())?;
            Ok::<_, String>(stream)
        };
        let mut stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, opened).await {
            Ok(Ok(stream)) if &pre[..4] == PREAMBLE => stream,
            Ok(Err(why)) if why.starts_with("TLS") && super::quiet::due(&why) => {
                return warn!(%addr, "refused a peer connection: {why}");
            }
            Ok(Err(why)) if why.starts_with("TLS") => {
                return debug!(%addr, "refused a peer connection: {why}");
            }
            _ => {
                debug!(%addr, "a peer connection sent no valid preamble");
                return;
            }
        };
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
            Ok(Ok(peer)) if peer == from => peer,
            Ok(Ok(peer)) => {
                return warn!(%addr, claimed = from, proved = peer, "refused a peer: ids differ")
            }
            // A misconfigured peer redials every 100 ms, and anyone who
            // can reach the port can make these: once a minute per text.
            Ok(Err(why)) if super::quiet::due(&why) => {
                return warn!(%addr, claimed = from, "refused a peer: {why}")
            }
            Ok(Err(why)) => return debug!(%addr, claimed = from, "refused a peer: {why}"),
            Err(_) if super::quiet::due("handshake timed out") => {
                return warn!(%addr, claimed = from, "refused a peer: handshake timed out")
            }
            Err(_) => return debug!(%addr, claimed = from, "refused a peer: handshake timed out"),
        };
        drop(handshaking);
        if kind == KIND_CONTROL {
            (self.control)(peer, stream)
        } else {
            self.serve(peer, stream).await
        }
    }

    /// Checks the dialer knows the secret; returns its node id. A control
    /// connection may be addressed to node 0 (a seed dialed before its id
    /// is known).
    async fn handshake(&self, stream: &mut PeerStream, kind: u8) -> Result<NodeId, String> {
        let mut buf = Vec::new();
        wire::read_frame_max(stream, &mut buf, MAX_HANDSHAKE_MSG)
            .await
            .map_err(|e| e.to_string())?;
        let version = buf.first().copied().unwrap_or(0);
        if version != VERSION {
            let why = format!("peer protocol version {version}, this node speaks {VERSION}");
            let _ = wire::write_msg(stream, &Greeting::Refused(why.clone())).await;
            return Err(why);
        }
        let hello: Hello = wire::decode_frame(&buf).map_err(|e| e.to_string())?;
        if let Some(why) = self.refusal(&hello, kind) {
            let _ = wire::write_msg(stream, &Greeting::Refused(why.clone())).await;
            return Err(why);
        }
        let secret = &self.creds.secret;
        let bound = auth::Bound { from: hello.from, to: hello.to, shards: self.creds.shards };
        let mine = auth::nonce();
        let proof = auth::acceptor_proof(secret, &hello.nonce, &mine, &bound);
        wire::write_msg(stream, &Greeting::Challenge(Challenge { nonce: mine, proof }))
            .await
            .map_err(|e| e.to_string())?;
        let p: ProofMsg = wire::read_msg_max(stream, &mut buf, MAX_HANDSHAKE_MSG)
            .await
            .map_err(|e| e.to_string())?;
        if !auth::check_dialer(secret, &hello.nonce, &mine, &bound, &p.proof) {
            let why = format!("node {} could not prove the cluster secret", hello.from);
            let refused = Verdict::Refused("wrong cluster secret".into());
            let _ = wire::write_msg(stream, &refused).await;
            return Err(why);
        }
        wire::write_msg(stream, &Verdict::Accepted).await.map_err(|e| e.to_string())?;
        Ok(hello.from)
    }

    /// Why a `Hello` (of this version) is refused before any proof, if it
    /// is: what it declares, not who it is (that is the proof's to show).
    fn refusal(&self, hello: &Hello, kind: u8) -> Option<String> {
        if hello.to != self.me && !(kind == KIND_CONTROL && hello.to == 0) {
            return Some(format!("dialed node {} but this is node {}", hello.to, self.me));
        }
        let (theirs, ours) = (hello.shards, self.creds.shards);
        if theirs != ours {
            use crate::layout::Layout;
            let (shards, groups) = (ours & 0xffff, ours >> 16);
            let groups = match groups {
                0 => String::new(),
                g => format!(" and groups = {g}"),
            };
            return Some(format!(
                "node {} has {} and this cluster's nodes have {}: start it with shards = \
                 {shards} (--shards {shards}){groups} on an empty data directory",
                hello.from,
                Layout::describe(theirs),
                Layout::describe(ours)
            ));
        }
        None
    }

    async fn serve(&self, peer: NodeId, stream: PeerStream) {
        let (rd, mut wr) = stream.split();
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
                if super::conn::write_flushed(&mut wr, &batch).await.is_err() {
                    return;
                }
            }
        });
        let raft_slots = Arc::new(Semaphore::new(RAFT_IN_FLIGHT));
        let work_slots = Arc::new(Semaphore::new(WORK_IN_FLIGHT));
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
            let permit = if frame.body.is_raft() {
                match raft_slots.clone().acquire_owned().await {
                    Ok(p) => p,
                    Err(_) => break,
                }
            } else {
                match work_slots.clone().try_acquire_owned() {
                    Ok(p) => p,
                    Err(_) => {
                        let busy = frame.body.overloaded(format!(
                            "node {} serves {WORK_IN_FLIGHT} requests of node {peer} already",
                            self.me
                        ));
                        let mut out = Vec::new();
                        if wire::encode_msg(&Frame { id: frame.id, body: busy }, &mut out).is_ok() {
                            let _ = tx.send(out).await;
                        }
                        continue;
                    }
                }
            };
            let (handler, tx) = (self.handler.clone(), tx.clone());
            tokio::spawn(async move {
                let body = match tokio::time::timeout(HANDLER_TIMEOUT, handler(peer, frame.body))
                    .await
                {
                    Ok(body) => body,
                    Err(_) => PeerResponse::Failed(format!("no answer within {HANDLER_TIMEOUT:?}")),
                };
                let mut out = Vec::new();
                let body = match wire::encode_msg(&Frame { id: frame.id, body }, &mut out) {
                    Ok(()) => out,
                    Err(e) => {
                        let mut out = Vec::new();
                        // It ran: the caller must not take it as "not sent".
                        let err = PeerResponse::Failed(format!("answer not encodable: {e}"));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peer::conn::{dial_authenticated, DialFault, PeerConn};
    use plaudit_proto::{Request, Response};

    const SECRET: &[u8] = b"the-test-cluster-secret";
    /// The test server's shard count.
    const SHARDS: u32 = 6;

    fn creds(secret: &[u8], shards: u32) -> auth::Credentials {
        auth::Credentials { secret: secret.into(), shards, tls: None }
    }

    fn good() -> auth::Credentials {
        creds(SECRET, SHARDS)
    }

    /// A peer server on a free port whose handler answers `Ping` (after
    /// `delay`) and refuses control connections.
    async fn server(delay: Duration) -> (SocketAddr, Arc<PeerServer>) {
        server_with(delay, good()).await
    }

    /// `server` with credentials of its own.
    async fn server_with(
        delay: Duration,
        creds: auth::Credentials,
    ) -> (SocketAddr, Arc<PeerServer>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let handler: Handler = Arc::new(move |_from, _req| {
            Box::pin(async move {
                tokio::time::sleep(delay).await;
                PeerResponse::Client(Response::Pong)
            })
        });
        let server = Arc::new(PeerServer {
            me: 1,
            handshaking: Arc::new(Semaphore::new(MAX_UNAUTHENTICATED)),
            creds,
            links: Arc::default(),
            handler,
            control: Arc::new(|_, _| {}),
        });
        tokio::spawn(server.clone().run(listener, std::future::pending()));
        (addr, server)
    }

    #[tokio::test]
    async fn a_peer_with_the_secret_is_served_and_one_without_is_refused() {
        let (addr, _s) = server(Duration::ZERO).await;
        let addr = addr.to_string();
        let ok = PeerConn::dial(2, 1, &addr, &good(), Duration::from_secs(2)).await.unwrap();
        let r = ok.call(PeerRequest::Client(Request::Ping)).await.unwrap();
        assert!(matches!(r, PeerResponse::Client(Response::Pong)));

        let wrong = creds(b"not-the-secret-at-all", SHARDS);
        let wrong = PeerConn::dial(2, 1, &addr, &wrong, Duration::from_secs(2));
        let why = wrong.await.err().expect("a wrong secret is refused").to_string();
        assert!(why.contains("could not prove") || why.contains("refused"), "{why}");
        // Dialing the right address as if it were another node fails too.
        let other = PeerConn::dial(2, 7, &addr, &good(), Duration::from_secs(2)).await;
        assert!(matches!(other, Err(DialFault::Mismatch(_))), "{:?}", other.err());
    }

    /// Under peer TLS, a dialer needs a certificate of the cluster's CA and
    /// must find one on the listener, and still proves the secret.
    #[tokio::test]
    async fn with_peer_tls_only_a_peer_of_the_same_ca_with_the_secret_gets_in() {
        use crate::peer::tls::{tests::certificates, PeerTls};
        let dir = tempfile::tempdir().unwrap();
        let (ca, cert, key) = certificates(dir.path(), "ours");
        let (other_ca, other_cert, other_key) = certificates(dir.path(), "theirs");
        let ours = PeerTls::from_files(&cert, &key, &ca).unwrap();
        let tls = |t: &PeerTls| auth::Credentials { tls: Some(t.clone()), ..good() };
        let (addr, _s) = server_with(Duration::ZERO, tls(&ours)).await;
        let addr = addr.to_string();
        let dial = |c: auth::Credentials| {
            let addr = addr.clone();
            async move { PeerConn::dial(2, 1, &addr, &c, Duration::from_secs(2)).await }
        };
        let ok = dial(tls(&ours)).await.expect("a peer of the same CA");
        let r = ok.call(PeerRequest::Client(Request::Ping)).await.unwrap();
        assert!(matches!(r, PeerResponse::Client(Response::Pong)));

        assert!(dial(good()).await.is_err(), "a plaintext peer");
        let theirs = PeerTls::from_files(&other_cert, &other_key, &other_ca).unwrap();
        assert!(dial(tls(&theirs)).await.is_err(), "a peer of another CA");
        // Trusts this listener, but shows a certificate of another CA.
        let stranger = PeerTls::from_files(&other_cert, &other_key, &ca).unwrap();
        assert!(dial(tls(&stranger)).await.is_err(), "a client certificate of another CA");
        let wrong_secret =
            auth::Credentials { secret: b"not-the-secret-at-all".as_slice().into(), ..tls(&ours) };
        assert!(dial(wrong_secret).await.is_err(), "the CA's certificate without the secret");
    }

    /// A node with another shard count would place keys in other groups:
    /// it is told so before any proof, with both counts, and told it is
    /// a refusal (not a network failure the dialer should shrug off).
    #[tokio::test]
    async fn a_peer_with_another_shard_count_is_refused_with_both_counts() {
        let (addr, _s) = server(Duration::ZERO).await;
        let addr = addr.to_string();
        for shards in [4, SHARDS + 1] {
            for kind in [KIND_DATA, KIND_CONTROL] {
                let creds = creds(SECRET, shards);
                let dial = dial_authenticated(2, 1, &addr, kind, &creds, Duration::from_secs(2));
                match dial.await {
                    Err(DialFault::Mismatch(why)) => {
                        let both =
                            format!("has {shards} shards and this cluster's nodes have {SHARDS}");
                        let fix = format!("--shards {SHARDS}");
                        assert!(why.contains(&both) && why.contains(&fix), "{why}");
                    }
                    other => panic!("{shards} shards, kind {kind}: {:?}", other.map(|_| ())),
                }
            }
        }
        // The same count still gets in.
        let ok = PeerConn::dial(2, 1, &addr, &good(), Duration::from_secs(2)).await.unwrap();
        let r = ok.call(PeerRequest::Client(Request::Ping)).await.unwrap();
        assert!(matches!(r, PeerResponse::Client(Response::Pong)));
    }

    /// A raw connection to `addr` that has sent a data connection's
    /// preamble as node 2, and nothing of the handshake yet.
    async fn data_preamble_sent(addr: SocketAddr) -> TcpStream {
        use tokio::io::AsyncWriteExt;
        let mut s = TcpStream::connect(addr).await.unwrap();
        let mut pre = PREAMBLE.to_vec();
        pre.push(KIND_DATA);
        pre.extend_from_slice(&2u64.to_be_bytes());
        s.write_all(&pre).await.unwrap();
        s
    }

    /// A `Hello` of another version may have another layout: its version
    /// byte is read first, and the refusal says which version it was.
    #[tokio::test]
    async fn another_protocol_version_is_refused_by_its_first_byte() {
        use tokio::io::AsyncWriteExt;
        let (addr, _s) = server(Duration::ZERO).await;
        let mut s = data_preamble_sent(addr).await;
        // Version 1's Hello: version, from, to, nonce; no shard count.
        let mut old = vec![1u8, 2, 1];
        old.extend_from_slice(&[7u8; 32]);
        s.write_all(&(old.len() as u32).to_be_bytes()).await.unwrap();
        s.write_all(&old).await.unwrap();
        let mut buf = Vec::new();
        match wire::read_msg_max(&mut s, &mut buf, MAX_HANDSHAKE_MSG).await {
            Ok(Greeting::Refused(why)) => {
                assert!(why.contains(&format!("version 1, this node speaks {VERSION}")), "{why}")
            }
            other => panic!("{:?}", other.map(|_| ())),
        }
    }

    #[tokio::test]
    async fn an_oversized_handshake_is_refused_before_it_is_read() {
        use tokio::io::AsyncWriteExt;
        let (addr, _s) = server(Duration::ZERO).await;
        let mut s = data_preamble_sent(addr).await;
        // A Hello announcing 32 MiB: the server must close, not wait for it.
        s.write_all(&(32u32 << 20).to_be_bytes()).await.unwrap();
        let mut byte = [0u8; 1];
        let closed = tokio::time::timeout(Duration::from_secs(3), s.read(&mut byte)).await;
        assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "{closed:?}");
    }

    #[tokio::test]
    async fn slow_requests_get_overloaded_answers_instead_of_stalling_raft_traffic() {
        // Every handler takes 2 s: after WORK_IN_FLIGHT of them, further
        // work is refused at once while Raft traffic is still read.
        let (addr, _s) = server(Duration::from_secs(2)).await;
        let conn = Arc::new(
            PeerConn::dial(2, 1, &addr.to_string(), &good(), Duration::from_secs(2)).await.unwrap(),
        );
        let slow: Vec<_> = (0..WORK_IN_FLIGHT)
            .map(|_| {
                let c = conn.clone();
                tokio::spawn(async move { c.call(PeerRequest::Client(Request::Ping)).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let started = std::time::Instant::now();
        let busy = conn.call(PeerRequest::Client(Request::Ping)).await.unwrap();
        match busy {
            PeerResponse::Client(Response::Error(e)) => {
                assert_eq!(e.code, plaudit_proto::ErrorCode::Overloaded)
            }
            other => panic!("{other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(1), "answered at once");
        // A Raft request still goes through (its own budget).
        let report = conn.call(PeerRequest::Report).await.unwrap();
        assert!(matches!(report, PeerResponse::Client(Response::Pong)));
        for s in slow {
            assert!(s.await.unwrap().is_ok());
        }
    }
}
