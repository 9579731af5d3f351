//! The admin HTTP endpoint: liveness, readiness and Prometheus metrics.
//!
//! | request          | reply                                                   |
//! | ---------------- | ------------------------------------------------------- |
//! | `GET /healthz`   | `200 ok` while the process runs                         |
//! | `GET /readyz`    | `200 ready` or `503 not ready`, from [`AdminSource::ready`] |
//! | `GET /metrics`   | `200` with [`AdminSource::metrics_text`]                |
//! | `GET /status`    | `200` with the cluster status as JSON ([`AdminSource::status_json`]) |
//! | `GET /debug/digest` | per group held here: applied index and a hash of its state (test mode only) |
//! | `POST /fault/links?cut=2,3` | cuts this node's links to nodes 2 and 3 (`cut=` heals all); `404` unless `fault_injection` is on |
//! | `POST /debug/transfer?group=G&to=N` | hands group G, led here, to node N; answers how long it took; `404` unless `fault_injection` is on |
//!
//! Any other path is `404`, any method but `GET` (and `HEAD`, which RFC 9110
//! asks every server to support; and `POST` for `/fault/links`) is `405`, an
//! unparsable request is `400`.
//!
//! **Who may ask.** Off loopback, a node with an admin token answers
//! everything but `/healthz` and `/readyz` only to a request that carries
//! it (`Authorization: Bearer <token>`, what Prometheus's `bearer_token`
//! sends), and `/metrics` also to one that carries the metrics token (what
//! a scraper should be given instead of the admin credential); others get
//! `401`. The probes stay open: a kubelet sends no token,
//! and they say nothing a port scan would not. On loopback the port is
//! open: whoever can reach it already runs on the node's host.
//!
//! Three fixed endpoints read by probes and a scraper do not justify an HTTP
//! framework, so this is a deliberately small HTTP/1.1 server over tokio TCP:
//! one request per connection (`Connection: close`), the request head capped
//! at 8 KiB and 5 seconds, the body (if any) ignored.

use crate::server::table::{Entry, Table};
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tracing::{debug, warn};

/// What the admin endpoint reports. Implemented by the node.
pub trait AdminSource: Send + Sync + 'static {
    /// Whether the node should receive client traffic (for `/readyz`). A
    /// node shutting down turns this off only after it has closed its client
    /// listener and drained its connections (up to `shutdown_grace_ms`), just
    /// before it stops Raft; until then `/readyz` answers as it did before.
    fn ready(&self) -> bool;
    /// The Prometheus text exposition served at `/metrics`.
    fn metrics_text(&self) -> String;
    /// The cluster status as JSON, for `/status`.
    fn status_json(&self) -> BoxFuture<'_, String>;
    /// Cuts this node's links to the nodes listed in `cut` (comma
    /// separated; empty heals every link): `None` when fault injection is
    /// off, else the new set or why `cut` is wrong.
    fn set_links(&self, cut: &str) -> Option<Result<String, String>>;
    /// Per group held here, its applied index and a hash of its state, as
    /// JSON; `None` when fault injection (test mode) is off.
    fn digests_json(&self) -> BoxFuture<'_, Option<String>>;
    /// Hands group `group` (led here) to node `to`: the hand-off's time, or
    /// why not; `None` when fault injection (test mode) is off.
    fn transfer(&self, group: u32, to: u64) -> BoxFuture<'_, Option<Result<String, String>>>;
}

pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Largest request head (request line and headers) accepted.
pub const MAX_HEAD_BYTES: usize = 8 * 1024;
/// How long a client may take to send its request head.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a client may take to read the response.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Most admin connections served at once. At the cap a newcomer takes the
/// place of one that is not being answered (the one silent longest first,
/// however briefly: a probe or a scraper sends its request with the
/// connection), or, if every one is, waits for a slot.
pub const MAX_CONNECTIONS: usize = 64;
/// How long a newcomer at the cap may wait for a slot, and how many may
/// wait at once (each holds an accepted socket): past either it is closed.
const SLOT_WAIT: Duration = Duration::from_secs(2);
const MAX_WAITING: usize = MAX_CONNECTIONS;
/// How often a waiting newcomer looks for a connection to evict again.
const RETRY_EVICT: Duration = Duration::from_millis(20);

/// The bounds one connection is held to; tests shorten them.
#[derive(Debug, Clone, Copy)]
struct Limits {
    read_timeout: Duration,
    write_timeout: Duration,
}

const DEFAULT_LIMITS: Limits = Limits { read_timeout: READ_TIMEOUT, write_timeout: WRITE_TIMEOUT };

/// Serves admin requests on `listener` until `shutdown` completes, then stops
/// accepting and returns `Ok(())`. Each connection runs in its own task; those
/// already accepted finish on their own (each is bounded by the timeouts above).
///
/// Errors from `accept` are logged and retried after a short pause rather than
/// returned: running out of file descriptors is exactly when the metrics
/// endpoint must stay up.
///
/// `bearer`: the tokens a request must carry, or `None` for an open port
/// (see the module's "who may ask").
pub async fn serve(
    listener: TcpListener,
    source: Arc<dyn AdminSource>,
    bearer: Option<Bearer>,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    serve_with(listener, source, bearer, shutdown, DEFAULT_LIMITS).await
}

async fn serve_with(
    listener: TcpListener,
    source: Arc<dyn AdminSource>,
    bearer: Option<Bearer>,
    shutdown: impl Future<Output = ()> + Send,
    limits: Limits,
) -> io::Result<()> {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    // At the cap, a newcomer closes a connection that is not being
    // answered, the one silent longest first: idle connections held by
    // anyone must not keep `/readyz` and `/metrics` from answering, not
    // even for the first second after they were opened (a Kubernetes probe
    // does not try twice).
    let table = Arc::new(Table::with_min_idle(Duration::ZERO));
    let waiting = Arc::new(Semaphore::new(MAX_WAITING));
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                let (permits, source, table) = (permits.clone(), source.clone(), table.clone());
                let waiting = waiting.clone();
                tokio::spawn(async move {
                    let Some(permit) = take_slot(&permits, &table, &waiting).await else {
                        debug!(%peer, "admin connection closed: no slot");
                        return;
                    };
                    let (id, entry) = table.insert();
                    tokio::select! {
                        r = handle(stream, source.as_ref(), bearer.as_ref(), limits, &entry) => {
                            if let Err(e) = r {
                                debug!(%peer, error = %e, "admin connection failed");
                            }
                        }
                        () = entry.kill.notified() => debug!(%peer, "admin connection evicted"),
                    }
                    table.remove(id);
                    entry.pass_on(permit);
                });
            }
            Err(e) if is_per_connection(&e) => continue,
            Err(e) => {
                warn!(error = %e, "admin accept failed; retrying");
                tokio::select! {
                    () = &mut shutdown => break,
                    () = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
            }
        }
    }
    Ok(())
}

/// A slot for a newcomer: a free one, or the one of a connection it
/// evicts; waiting (bounded in time and in waiters) while every connection
/// is being answered.
async fn take_slot(
    permits: &Arc<Semaphore>,
    table: &Table,
    waiting: &Semaphore,
) -> Option<tokio::sync::OwnedSemaphorePermit> {
    if let Ok(p) = permits.clone().try_acquire_owned() {
        return Some(p);
    }
    let _waiter = waiting.try_acquire().ok()?;
    let deadline = tokio::time::Instant::now() + SLOT_WAIT;
    loop {
        if let Some(slot) = table.evict_one() {
            // The evicted connection hands its slot over as it closes.
            return tokio::time::timeout_at(deadline, slot).await.ok()?.ok();
        }
        let free = permits.clone().acquire_owned();
        match tokio::time::timeout(RETRY_EVICT, free).await {
            Ok(p) => return p.ok(),
            Err(_) if tokio::time::Instant::now() >= deadline => return None,
            Err(_) => {}
        }
    }
}

/// Errors that concern one half-open connection, not the listener.
fn is_per_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    )
}

/// Reads one request, writes one response, closes.
async fn handle(
    mut stream: TcpStream,
    source: &dyn AdminSource,
    bearer: Option<&Bearer>,
    limits: Limits,
    entry: &Entry,
) -> io::Result<()> {
    let head = tokio::time::timeout(limits.read_timeout, read_head(&mut stream)).await;
    // Whatever came of it, this connection is now being answered: not idle.
    entry.set_greeted();
    entry.set_busy(true);
    let head = match head {
        Ok(Ok(Head::Complete(head))) => Ok(head),
        Ok(Ok(Head::Empty)) => return Ok(()), // a TCP probe: connected and left
        Ok(Ok(Head::Truncated)) => Err(Response::text(400, "Bad Request", "bad request\n")),
        Ok(Ok(Head::TooLarge)) => {
            Err(Response::text(431, "Request Header Fields Too Large", "request head too large\n"))
        }
        Ok(Err(e)) => return Err(e),
        Err(_elapsed) => Err(Response::text(408, "Request Timeout", "request timeout\n")),
    };
    let (response, head_only) = match head {
        Ok(head) => match parse_request(&head) {
            Some(request) => {
                debug!(method = request.method, path = request.path, "admin request");
                let head_only = request.method == "HEAD";
                if allowed(&request, bearer) {
                    (route(&request, source).await, head_only)
                } else {
                    let mut response = Response::text(401, "Unauthorized", "admin token needed\n");
                    response.challenge = true;
                    (response, head_only)
                }
            }
            None => (Response::text(400, "Bad Request", "bad request\n"), false),
        },
        Err(response) => (response, false),
    };
    let bytes = response.encode(head_only);
    match tokio::time::timeout(limits.write_timeout, stream.write_all(&bytes)).await {
        Ok(result) => result?,
        Err(_elapsed) => return Err(io::Error::new(io::ErrorKind::TimedOut, "write timed out")),
    }
    // Answered: what is left is a courtesy to the client, and the slot may
    // go to a newcomer.
    entry.set_busy(false);
    linger(stream, limits.write_timeout).await;
    Ok(())
}

/// Half-closes the connection and reads what the client still sends until it
/// closes its side. Closing a socket with unread input makes the kernel send a
/// reset, which can destroy the response before the client reads it (say, a
/// `405` to a `POST` whose body we never read).
async fn linger(mut stream: TcpStream, timeout: Duration) {
    const MAX_DRAIN: usize = 1 << 20;
    let _ = stream.shutdown().await;
    let drain = async {
        let mut scratch = [0u8; 4096];
        let mut drained = 0;
        while drained < MAX_DRAIN {
            match stream.read(&mut scratch).await {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
    };
    let _ = tokio::time::timeout(timeout, drain).await;
}

enum Head {
    /// The bytes up to and including the blank line that ends the head.
    Complete(Vec<u8>),
    /// The client closed the connection without sending anything.
    Empty,
    /// The client closed the connection in the middle of the head.
    Truncated,
    /// No blank line within [`MAX_HEAD_BYTES`].
    TooLarge,
}

async fn read_head(stream: &mut TcpStream) -> io::Result<Head> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(if buf.is_empty() { Head::Empty } else { Head::Truncated });
        }
        // Search only where a terminator may newly appear.
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = find_head_end(&buf[from..]) {
            buf.truncate(from + end);
            return Ok(Head::Complete(buf));
        }
        if buf.len() >= MAX_HEAD_BYTES {
            return Ok(Head::TooLarge);
        }
    }
}

/// The length of the head in `buf`, through its `\r\n\r\n` (or bare `\n\n`,
/// which RFC 9112 allows a server to accept).
fn find_head_end(buf: &[u8]) -> Option<usize> {
    (0..buf.len()).find_map(|i| {
        if buf[i..].starts_with(b"\r\n\r\n") {
            Some(i + 4)
        } else if buf[i..].starts_with(b"\n\n") {
            Some(i + 2)
        } else {
            None
        }
    })
}

#[derive(Debug, PartialEq, Eq)]
struct Request<'a> {
    method: &'a str,
    /// The target without its query string.
    path: &'a str,
    /// The query string, without the `?`.
    query: &'a str,
    /// The `Authorization` header's value, if sent.
    authorization: Option<&'a str>,
}

/// The SHA-256 hashes of the tokens an admin port off loopback accepts.
#[derive(Clone, Copy)]
pub struct Bearer {
    /// Everything.
    pub admin: [u8; 32],
    /// `/metrics` only.
    pub metrics: Option<[u8; 32]>,
}

/// Whether `request` may be answered: the probes always, the rest with a
/// bearer token that may ask for it when one is required (compared as
/// SHA-256 hashes, in constant time).
fn allowed(request: &Request<'_>, bearer: Option<&Bearer>) -> bool {
    use plaudit_actors::directory::{hash_secret, same_hash};
    let Some(want) = bearer else { return true };
    if matches!(request.path, "/healthz" | "/readyz") {
        return true;
    }
    let presented = request.authorization.and_then(|v| {
        let (scheme, token) = v.trim().split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| hash_secret(token.trim()))
    });
    let Some(presented) = presented else { return false };
    let metrics = request.path == "/metrics" && request.method != "POST";
    same_hash(&presented, &want.admin)
        || (metrics && want.metrics.is_some_and(|m| same_hash(&presented, &m)))
}

/// Parses the request line and checks the header lines are well formed.
fn parse_request(head: &[u8]) -> Option<Request<'_>> {
    if head.len() > MAX_HEAD_BYTES {
        return None;
    }
    let text = std::str::from_utf8(head).ok()?;
    let mut lines = text.split('\n').map(|line| line.strip_suffix('\r').unwrap_or(line));
    let mut parts = lines.next()?.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    let well_formed = parts.next().is_none()
        && !method.is_empty()
        && method.bytes().all(|b| b.is_ascii_uppercase())
        && target.starts_with('/')
        && matches!(version, "HTTP/1.0" | "HTTP/1.1");
    if !well_formed {
        return None;
    }
    let mut authorization = None;
    for line in lines.filter(|line| !line.is_empty()) {
        let (name, value) = line.split_once(':')?;
        if name.is_empty() || name.bytes().any(|b| b.is_ascii_whitespace()) {
            return None;
        }
        if name.eq_ignore_ascii_case("authorization") {
            authorization = Some(value.trim());
        }
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    Some(Request { method, path, query, authorization })
}

async fn route(request: &Request<'_>, source: &dyn AdminSource) -> Response {
    if request.method == "POST" && request.path == "/fault/links" {
        let cut = request.query.strip_prefix("cut=").unwrap_or(request.query);
        return match source.set_links(cut) {
            None => Response::text(404, "Not Found", "fault injection is off\n"),
            Some(Ok(set)) => Response::text(200, "OK", &format!("{set}\n")),
            Some(Err(why)) => Response::text(400, "Bad Request", &format!("{why}\n")),
        };
    }
    if request.method == "POST" && request.path == "/debug/transfer" {
        let arg = |name: &str| {
            request.query.split('&').find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
        };
        let (Some(Ok(group)), Some(Ok(to))) =
            (arg("group").map(str::parse), arg("to").map(str::parse))
        else {
            return Response::text(400, "Bad Request", "want ?group=G&to=N\n");
        };
        return match source.transfer(group, to).await {
            None => Response::text(404, "Not Found", "fault injection is off\n"),
            Some(Ok(took)) => Response::text(200, "OK", &format!("{took}\n")),
            Some(Err(why)) => Response::text(409, "Conflict", &format!("{why}\n")),
        };
    }
    if request.method != "GET" && request.method != "HEAD" {
        let mut response = Response::text(405, "Method Not Allowed", "method not allowed\n");
        response.allow = true;
        return response;
    }
    match request.path {
        "/healthz" => Response::text(200, "OK", "ok\n"),
        "/readyz" if source.ready() => Response::text(200, "OK", "ready\n"),
        "/readyz" => Response::text(503, "Service Unavailable", "not ready\n"),
        "/metrics" => Response {
            status: 200,
            reason: "OK",
            content_type: "text/plain; version=0.0.4; charset=utf-8",
            body: source.metrics_text(),
            allow: false,
            challenge: false,
        },
        "/debug/digest" => match source.digests_json().await {
            Some(body) => Response {
                status: 200,
                reason: "OK",
                content_type: "application/json",
                body,
                allow: false,
                challenge: false,
            },
            None => Response::text(404, "Not Found", "not found\n"),
        },
        "/status" => Response {
            status: 200,
            reason: "OK",
            content_type: "application/json",
            body: source.status_json().await,
            allow: false,
            challenge: false,
        },
        _ => Response::text(404, "Not Found", "not found\n"),
    }
}

struct Response {
    status: u16,
    reason: &'static str,
    content_type: &'static str,
    body: String,
    /// Whether to send `Allow` (with a `405`).
    allow: bool,
    /// Whether to send `WWW-Authenticate: Bearer` (with a `401`).
    challenge: bool,
}

impl Response {
    fn text(status: u16, reason: &'static str, body: &str) -> Response {
        let content_type = "text/plain; charset=utf-8";
        let body = body.to_string();
        Response { status, reason, content_type, body, allow: false, challenge: false }
    }

    /// The response's bytes; for `HEAD` the headers only, with the length the
    /// body would have.
    fn encode(&self, head_only: bool) -> Vec<u8> {
        let allow = if self.allow { "Allow: GET, HEAD\r\n" } else { "" };
        let challenge = if self.challenge { "WWW-Authenticate: Bearer\r\n" } else { "" };
        let head = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{allow}{challenge}\
             Cache-Control: no-store\r\nConnection: close\r\n\r\n",
            self.status,
            self.reason,
            self.content_type,
            self.body.len(),
        );
        let mut bytes = head.into_bytes();
        if !head_only {
            bytes.extend_from_slice(self.body.as_bytes());
        }
        bytes
    }
}

#[cfg(test)]
mod tests;
