//! Scripted nodes for the SDK and CLI tests: real frames on 127.0.0.1:0,
//! with answers the test decides.
//!
//! ```text
//! FakeCluster::start(n, placement, handler)
//!   node i: listener ─► per connection: Hello ─► Hello
//!                                       Routing ─► the shared table
//!                                       Ping ─► Pong (unless silent)
//!                                       other ─► handler(i, req): Now(reply) | After(d, reply) | Never
//!   .kill(i): stop listening, drop every connection (a dead process)
//!   .silence(i): read but never answer, pings included (a paused process)
//! ```
//!
//! Every request other than Hello, Routing and Ping is logged with the node
//! that got it, so a test can say where a call went.
#![allow(dead_code)] // each test binary uses part of it

use plaudit_client::proto::cluster::{ClusterMap, NodeId, NodeInfo, RoutingTable};
use plaudit_client::proto::entity_routes::{self, RoutesPage};
use plaudit_client::proto::frame::{read_frame, write_frame};
use plaudit_client::proto::likes::EntityCounts;
use plaudit_client::proto::placement::EntityKey;
use plaudit_client::proto::{Envelope, Request, Response, ShardId, WireError};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// A routing table over `addrs` (node `i + 1` at `addrs[i]`), epoch 1.
pub fn table(
    addrs: &[String],
    shards: Vec<Vec<NodeId>>,
    leaders: Vec<Option<NodeId>>,
    meta_leader: Option<NodeId>,
) -> RoutingTable {
    let nodes: Vec<NodeInfo> = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| NodeInfo {
            id: i as NodeId + 1,
            client: a.clone(),
            peer: String::new(),
            admin: String::new(),
        })
        .collect();
    let meta_voters = nodes.iter().map(|n| n.id).take(3).collect();
    RoutingTable { map: ClusterMap { epoch: 1, nodes, shards, meta_voters }, leaders, meta_leader }
}

/// Two nodes, two shards: node 1 leads shard 0, node 2 shard 1.
pub fn two_shards(addrs: &[String]) -> RoutingTable {
    table(addrs, vec![vec![1, 2], vec![1, 2]], vec![Some(1), Some(2)], Some(1))
}

/// Answers counts reads only: each entity asked, with likes = its id.
pub fn counts_by_id() -> Handler {
    Arc::new(|_, req| match req {
        Request::Counts(c) => Reply::Now(Response::Counts(
            c.entities.iter().map(|&e| EntityCounts { entity: e, likes: e, dislikes: 0 }).collect(),
        )),
        other => panic!("unexpected {other:?}"),
    })
}

/// What a node with no moved entity answers `EntityRoutesPage`.
pub fn no_routes() -> Response {
    Response::EntityRoutesPage(plaudit_client::proto::entity_routes::RoutesReply {
        version: 0,
        unchanged: false,
        routes: vec![],
        next: None,
    })
}

/// A one-node, one-shard cluster at `addr`: what a lone node answers.
pub fn one_node(addr: &str) -> RoutingTable {
    table(&[addr.to_string()], vec![vec![1]], vec![Some(1)], Some(1))
}

/// What a fake node says to a request.
pub enum Reply {
    Now(Response),
    After(Duration, Response),
    Never,
}

pub type Handler = Arc<dyn Fn(NodeId, &Request) -> Reply + Send + Sync>;

/// Where the fake nodes say moved entities live.
#[derive(Clone)]
pub enum Routes {
    /// Answered page by page, one route a page (`EntityRoutesPage`).
    Paged(Vec<(EntityKey, ShardId)>),
    /// As a node from before pages: `EntityRoutesPage` is refused
    /// `BadRequest`, `EntityRoutes` answered whole.
    Old(Vec<(EntityKey, ShardId)>),
}

pub struct FakeNode {
    pub id: NodeId,
    pub addr: String,
    silent: Arc<AtomicBool>,
    open: Arc<AtomicUsize>,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

pub struct FakeCluster {
    pub nodes: Vec<FakeNode>,
    pub table: Arc<Mutex<RoutingTable>>,
    /// What the nodes answer about moved entities (none at first).
    pub routes: Arc<Mutex<Routes>>,
    /// Every `EntityRoutesPage` asked, in order.
    pub route_asks: Arc<Mutex<Vec<RoutesPage>>>,
    log: Arc<Mutex<Vec<(NodeId, Request)>>>,
}

impl FakeCluster {
    /// `n` nodes sharing one table built by `make_table` from their addresses.
    pub async fn start(
        n: usize,
        make_table: impl FnOnce(&[String]) -> RoutingTable,
        handler: Handler,
    ) -> FakeCluster {
        let mut listeners = Vec::new();
        for _ in 0..n {
            listeners.push(TcpListener::bind("127.0.0.1:0").await.unwrap());
        }
        let addrs: Vec<String> =
            listeners.iter().map(|l| l.local_addr().unwrap().to_string()).collect();
        let table = Arc::new(Mutex::new(make_table(&addrs)));
        let routes = Arc::new(Mutex::new(Routes::Paged(Vec::new())));
        let route_asks = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut nodes = Vec::new();
        for (i, listener) in listeners.into_iter().enumerate() {
            let id = i as NodeId + 1;
            let silent = Arc::new(AtomicBool::new(false));
            let open = Arc::new(AtomicUsize::new(0));
            let tasks: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
            let node = Node {
                id,
                table: table.clone(),
                routes: routes.clone(),
                route_asks: route_asks.clone(),
                log: log.clone(),
                silent: silent.clone(),
                open: open.clone(),
                handler: handler.clone(),
            };
            let accept_tasks = tasks.clone();
            let accept = tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else { return };
                    let node = node.clone();
                    let conn = tokio::spawn(async move { node.serve(stream).await });
                    accept_tasks.lock().unwrap().push(conn);
                }
            });
            tasks.lock().unwrap().push(accept);
            nodes.push(FakeNode { id, addr: addrs[i].clone(), silent, open, tasks });
        }
        FakeCluster { nodes, table, routes, route_asks, log }
    }

    pub fn addr(&self, id: NodeId) -> String {
        self.nodes[id as usize - 1].addr.clone()
    }

    /// Every seed, comma separated.
    pub fn seeds(&self) -> String {
        self.nodes.iter().map(|n| n.addr.as_str()).collect::<Vec<_>>().join(",")
    }

    /// Stops node `id` listening and drops its connections.
    pub fn kill(&self, id: NodeId) {
        for t in self.nodes[id as usize - 1].tasks.lock().unwrap().drain(..) {
            t.abort();
        }
    }

    /// Node `id` keeps its connections but answers nothing, pings included.
    pub fn silence(&self, id: NodeId) {
        self.nodes[id as usize - 1].silent.store(true, Ordering::SeqCst);
    }

    /// Connections node `id` holds open now.
    pub fn open_connections(&self, id: NodeId) -> usize {
        self.nodes[id as usize - 1].open.load(Ordering::SeqCst)
    }

    /// `(node, request)` for every request served so far, in arrival order.
    pub fn log(&self) -> Vec<(NodeId, Request)> {
        self.log.lock().unwrap().clone()
    }

    /// The nodes that got a request matching `pred`, in order.
    pub fn seen_by(&self, pred: impl Fn(&Request) -> bool) -> Vec<NodeId> {
        self.log().into_iter().filter(|(_, r)| pred(r)).map(|(n, _)| n).collect()
    }
}

impl Drop for FakeCluster {
    fn drop(&mut self) {
        for n in &self.nodes {
            self.kill(n.id);
        }
    }
}

#[derive(Clone)]
struct Node {
    id: NodeId,
    table: Arc<Mutex<RoutingTable>>,
    routes: Arc<Mutex<Routes>>,
    route_asks: Arc<Mutex<Vec<RoutesPage>>>,
    log: Arc<Mutex<Vec<(NodeId, Request)>>>,
    silent: Arc<AtomicBool>,
    open: Arc<AtomicUsize>,
    handler: Handler,
}

/// Counts a connection open for as long as it is served.
struct Open(Arc<AtomicUsize>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Stops the connection's writer (closing the socket) when serving ends,
/// including when `kill` aborts it.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Node {
    async fn serve(self, stream: TcpStream) {
        self.open.fetch_add(1, Ordering::SeqCst);
        let _open = Open(self.open.clone());
        let (mut rd, mut wr) = stream.into_split();
        let (tx, mut rx) = mpsc::unbounded_channel::<Envelope<Response>>();
        let _writer = AbortOnDrop(tokio::spawn(async move {
            while let Some(env) = rx.recv().await {
                if write_frame(&mut wr, &env).await.is_err() {
                    return;
                }
            }
        }));
        let mut buf = Vec::new();
        while let Ok(env) = read_frame::<_, Request>(&mut rd, &mut buf).await {
            if self.silent.load(Ordering::SeqCst) {
                continue;
            }
            let reply = match &env.body {
                Request::Hello(_) => Reply::Now(Response::Hello),
                Request::Routing => {
                    Reply::Now(Response::Routing(Box::new(self.table.lock().unwrap().clone())))
                }
                Request::EntityRoutes => {
                    Reply::Now(Response::EntityRoutes(match &*self.routes.lock().unwrap() {
                        Routes::Paged(r) | Routes::Old(r) => r.clone(),
                    }))
                }
                Request::EntityRoutesPage(ask) => {
                    self.route_asks.lock().unwrap().push(ask.clone());
                    Reply::Now(match &*self.routes.lock().unwrap() {
                        Routes::Paged(r) => {
                            let one = RoutesPage { limit: 1, ..ask.clone() };
                            Response::EntityRoutesPage(entity_routes::page(r, None, &one))
                        }
                        Routes::Old(_) => Response::Error(WireError::bad_request("unknown")),
                    })
                }
                Request::Ping => Reply::Now(Response::Pong),
                other => {
                    self.log.lock().unwrap().push((self.id, other.clone()));
                    (self.handler)(self.id, other)
                }
            };
            let req_id = env.req_id;
            match reply {
                Reply::Now(body) => {
                    let _ = tx.send(Envelope { req_id, body });
                }
                Reply::After(delay, body) => {
                    let tx = tx.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(delay).await;
                        let _ = tx.send(Envelope { req_id, body });
                    });
                }
                Reply::Never => {}
            }
        }
    }
}
