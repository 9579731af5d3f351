//! The admin endpoint against hostile and ordinary HTTP clients.

use super::*;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

struct TestSource {
    ready: AtomicBool,
}

impl AdminSource for TestSource {
    fn ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
    fn metrics_text(&self) -> String {
        "# HELP up Whether up.\n# TYPE up gauge\nup 1\n".to_string()
    }
    fn status_json(&self) -> BoxFuture<'_, String> {
        Box::pin(async { "{}".to_string() })
    }
    fn set_links(&self, cut: &str) -> Option<Result<String, String>> {
        Some(Ok(cut.to_string()))
    }
    fn digests_json(&self) -> BoxFuture<'_, Option<String>> {
        Box::pin(async { None })
    }
    fn transfer(&self, _: u32, _: u64) -> BoxFuture<'_, Option<Result<String, String>>> {
        Box::pin(async { None })
    }
}

struct Server {
    addr: SocketAddr,
    source: Arc<TestSource>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<io::Result<()>>,
}

async fn start_with(limits: Limits) -> Server {
    start_guarded(limits, None).await
}

async fn start_guarded(limits: Limits, bearer: Option<Bearer>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let source = Arc::new(TestSource { ready: AtomicBool::new(false) });
    let (stop, stopped) = oneshot::channel::<()>();
    let shutdown = async move {
        let _ = stopped.await;
    };
    let task = tokio::spawn(serve_with(listener, source.clone(), bearer, shutdown, limits));
    Server { addr, source, stop: Some(stop), task }
}

async fn start() -> Server {
    start_with(DEFAULT_LIMITS).await
}

#[derive(Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// Sends `raw` and reads the whole reply (the server closes after it).
async fn exchange(addr: SocketAddr, raw: &[u8]) -> Reply {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(raw).await.unwrap();
    let mut bytes = Vec::new();
    let read = stream.read_to_end(&mut bytes);
    tokio::time::timeout(Duration::from_secs(10), read).await.unwrap().unwrap();
    parse_reply(&bytes)
}

fn parse_reply(bytes: &[u8]) -> Reply {
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("reply has a head");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    let mut parts = status_line.splitn(3, ' ');
    assert_eq!(parts.next(), Some("HTTP/1.1"));
    let status = parts.next().unwrap().parse().unwrap();
    let headers = lines
        .map(|l| {
            let (n, v) = l.split_once(": ").unwrap();
            (n.to_string(), v.to_string())
        })
        .collect();
    let reply = Reply { status, headers, body: body.to_string() };
    assert_eq!(reply.header("Connection"), Some("close"));
    let length: usize = reply.header("Content-Length").unwrap().parse().unwrap();
    assert_eq!(length, reply.body.len(), "Content-Length matches the body");
    reply
}

async fn get(addr: SocketAddr, path: &str) -> Reply {
    let raw = format!("GET {path} HTTP/1.1\r\nHost: test\r\nUser-Agent: t/1\r\n\r\n");
    exchange(addr, raw.as_bytes()).await
}

#[tokio::test]
async fn idle_connections_at_the_cap_do_not_keep_readyz_from_answering() {
    // Idle connections would time out only after a minute here, and these
    // were opened just now: the probe gets in at its first try because it
    // evicts one, not because they left (a Kubernetes probe does not try
    // twice).
    let limits = Limits { read_timeout: Duration::from_secs(60), ..DEFAULT_LIMITS };
    let server = start_with(limits).await;
    server.source.ready.store(true, Ordering::SeqCst);
    let mut idle = Vec::new();
    for _ in 0..MAX_CONNECTIONS + 16 {
        idle.push(TcpStream::connect(server.addr).await.unwrap());
    }
    for _ in 0..3 {
        let reply = tokio::time::timeout(Duration::from_secs(5), get(server.addr, "/readyz"))
            .await
            .expect("answered at once");
        assert_eq!((reply.status, reply.body.as_str()), (200, "ready\n"));
    }
    drop(idle);
}

#[tokio::test]
async fn clients_that_never_close_after_their_answer_do_not_hold_the_slots() {
    let limits = Limits { read_timeout: Duration::from_secs(60), ..DEFAULT_LIMITS };
    let server = start_with(limits).await;
    server.source.ready.store(true, Ordering::SeqCst);
    // Each sends a request, reads nothing and keeps its side open: the
    // server lingers on them after answering.
    let mut held = Vec::new();
    for _ in 0..MAX_CONNECTIONS + 8 {
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n").await.unwrap();
        held.push(s);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let reply = tokio::time::timeout(Duration::from_secs(5), get(server.addr, "/readyz"))
        .await
        .expect("answered at once");
    assert_eq!(reply.status, 200);
    drop(held);
}

#[tokio::test]
async fn healthz_answers_ok() {
    let server = start().await;
    let reply = get(server.addr, "/healthz").await;
    assert_eq!((reply.status, reply.body.as_str()), (200, "ok\n"));
}

#[tokio::test]
async fn readyz_follows_the_source() {
    let server = start().await;
    let reply = get(server.addr, "/readyz").await;
    assert_eq!((reply.status, reply.body.as_str()), (503, "not ready\n"));
    server.source.ready.store(true, Ordering::SeqCst);
    let reply = get(server.addr, "/readyz").await;
    assert_eq!((reply.status, reply.body.as_str()), (200, "ready\n"));
    server.source.ready.store(false, Ordering::SeqCst);
    assert_eq!(get(server.addr, "/readyz").await.status, 503);
}

#[tokio::test]
async fn metrics_serves_the_exposition_format() {
    let server = start().await;
    let reply = get(server.addr, "/metrics?name[]=up").await;
    assert_eq!(reply.status, 200);
    assert!(reply.header("Content-Type").unwrap().starts_with("text/plain; version=0.0.4"));
    assert_eq!(reply.body, server.source.metrics_text());
}

#[tokio::test]
async fn unknown_path_is_404() {
    let server = start().await;
    assert_eq!(get(server.addr, "/").await.status, 404);
    assert_eq!(get(server.addr, "/metricsx").await.status, 404);
}

#[tokio::test]
async fn other_methods_are_405_even_with_an_unread_body() {
    let server = start().await;
    let body = vec![b'x'; 200_000];
    let mut raw =
        format!("POST /metrics HTTP/1.1\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
    raw.extend_from_slice(&body);
    let reply = exchange(server.addr, &raw).await;
    assert_eq!(reply.status, 405);
    assert_eq!(reply.header("Allow"), Some("GET, HEAD"));
}

#[tokio::test]
async fn head_sends_headers_without_a_body() {
    let server = start().await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream.write_all(b"HEAD /healthz HTTP/1.1\r\n\r\n").await.unwrap();
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).await.unwrap();
    let text = String::from_utf8(bytes).unwrap();
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.contains("Content-Length: 3\r\n") && text.ends_with("\r\n\r\n"), "{text}");
}

#[tokio::test]
async fn garbage_is_400() {
    let server = start().await;
    assert_eq!(exchange(server.addr, b"hello there\r\n\r\n").await.status, 400);
    assert_eq!(exchange(server.addr, b"GET /healthz\r\n\r\n").await.status, 400);
    assert_eq!(exchange(server.addr, b"GET healthz HTTP/1.1\r\n\r\n").await.status, 400);
    let bad_header = b"GET /healthz HTTP/1.1\r\nno colon here\r\n\r\n";
    assert_eq!(exchange(server.addr, bad_header).await.status, 400);
    assert_eq!(exchange(server.addr, b"\xff\xfe\r\n\r\n").await.status, 400);
}

#[tokio::test]
async fn a_head_cut_short_by_eof_is_400() {
    let server = start().await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: x").await.unwrap();
    stream.shutdown().await.unwrap();
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).await.unwrap();
    assert_eq!(parse_reply(&bytes).status, 400);
}

#[tokio::test]
async fn an_oversized_head_is_431() {
    let server = start().await;
    let raw = format!("GET /healthz HTTP/1.1\r\nX-Big: {}\r\n\r\n", "a".repeat(MAX_HEAD_BYTES));
    assert_eq!(exchange(server.addr, raw.as_bytes()).await.status, 431);
}

#[tokio::test]
async fn a_slow_client_gets_408() {
    let limits = Limits { read_timeout: Duration::from_millis(100), ..DEFAULT_LIMITS };
    let server = start_with(limits).await;
    // Half a request line, then nothing.
    assert_eq!(exchange(server.addr, b"GET /hea").await.status, 408);
}

#[tokio::test]
async fn bare_newlines_and_http_1_0_are_accepted() {
    let server = start().await;
    assert_eq!(exchange(server.addr, b"GET /healthz HTTP/1.0\n\n").await.status, 200);
}

#[tokio::test]
async fn shutdown_stops_accepting() {
    let mut server = start().await;
    assert_eq!(get(server.addr, "/healthz").await.status, 200);
    server.stop.take().unwrap().send(()).unwrap();
    let result = tokio::time::timeout(Duration::from_secs(5), server.task).await;
    result.expect("serve returns after shutdown").unwrap().unwrap();
    // The listener is gone with `serve`, so the port refuses connections.
    assert!(TcpStream::connect(server.addr).await.is_err());
}

#[tokio::test]
async fn with_a_token_required_only_the_probes_answer_without_it() {
    const TOKEN: &str = "an-admin-token-0123456789";
    const SCRAPE: &str = "a-metrics-token-0123456789";
    let hash = plaudit_actors::directory::hash_secret;
    let bearer = Bearer { admin: hash(TOKEN), metrics: Some(hash(SCRAPE)) };
    let server = start_guarded(DEFAULT_LIMITS, Some(bearer)).await;
    server.source.ready.store(true, Ordering::SeqCst);
    assert_eq!(get(server.addr, "/healthz").await.status, 200);
    assert_eq!(get(server.addr, "/readyz").await.status, 200);
    let with = |auth: &str, path: &str| {
        format!("GET {path} HTTP/1.1\r\nHost: t\r\nAuthorization: {auth}\r\n\r\n")
    };
    for path in ["/metrics", "/status", "/debug/digest", "/nope"] {
        let refused = get(server.addr, path).await;
        assert_eq!(refused.status, 401, "{path}: {refused:?}");
        assert_eq!(refused.header("WWW-Authenticate"), Some("Bearer"));
        assert!(!refused.body.contains("up 1"));
        for wrong in ["Bearer not-the-token-at-all", "Basic YTpi", TOKEN, "Bearer"] {
            let r = exchange(server.addr, with(wrong, path).as_bytes()).await;
            assert_eq!(r.status, 401, "{path} with {wrong:?}");
        }
    }
    let r = exchange(server.addr, with(&format!("Bearer {TOKEN}"), "/metrics").as_bytes()).await;
    assert_eq!((r.status, r.body.contains("up 1")), (200, true), "{r:?}");
    let r = exchange(server.addr, with(&format!("bearer {TOKEN}"), "/status").as_bytes()).await;
    assert_eq!(r.status, 200, "the scheme is case-insensitive: {r:?}");
    // The metrics token reads the metrics and nothing else.
    let r = exchange(server.addr, with(&format!("Bearer {SCRAPE}"), "/metrics").as_bytes()).await;
    assert_eq!((r.status, r.body.contains("up 1")), (200, true), "{r:?}");
    for path in ["/status", "/debug/digest"] {
        let r = exchange(server.addr, with(&format!("Bearer {SCRAPE}"), path).as_bytes()).await;
        assert_eq!(r.status, 401, "{path} with the metrics token");
    }
    // A POST is checked before anything runs.
    let post = b"POST /fault/links?cut=2 HTTP/1.1\r\nHost: t\r\n\r\n";
    assert_eq!(exchange(server.addr, post).await.status, 401);
}

#[test]
fn request_line_parsing() {
    let parsed = parse_request(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n");
    let want = Request { method: "GET", path: "/metrics", query: "x=1", authorization: None };
    assert_eq!(parsed, Some(want));
    let with = parse_request(b"GET /status HTTP/1.1\r\nauthorization:  Bearer t \r\n\r\n");
    assert_eq!(with.unwrap().authorization, Some("Bearer t"));
    assert_eq!(parse_request(b"GET  /metrics HTTP/1.1\r\n\r\n"), None);
    assert_eq!(parse_request(b"get /metrics HTTP/1.1\r\n\r\n"), None);
    assert_eq!(parse_request(b"GET /metrics HTTP/2\r\n\r\n"), None);
    assert_eq!(parse_request(b"GET /metrics HTTP/1.1\r\n : x\r\n\r\n"), None);
}
