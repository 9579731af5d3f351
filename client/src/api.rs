//! `Client`: the typed API over the cluster. Each method builds one
//! `Request`, hands it to `Cluster::call` (which routes it to the right node
//! and retries what is safe to retry within the client's timeout), and
//! unpacks the one reply variant it expects; any other variant is a
//! `ClientError::Protocol`.

use crate::cluster::{self, Cluster};
use crate::error::ClientError;
pub use crate::options::ClientOptions;
use plaudit_proto::auth::TokenSecret;
use plaudit_proto::business::{CreateBiz, UpdateBiz};
use plaudit_proto::cluster::{ClusterStatus, RoutingTable};
use plaudit_proto::likes::{
    CountsRequest, EntityCounts, EntityState, LikeReply, LikeRequest, LikersRequest, Page,
    ReceivedReply, ReceivedRequest, StatusRequest, UserLikesRequest,
};
use plaudit_proto::listing::{BizPage, ListPage, MAX_LIST_PAGE};
use plaudit_proto::{BizConfig, BizId, Business, EntityId, LikeAction, Request, Response, UserId};
use std::sync::Arc;
use std::time::Duration;

/// Why `request` and `pipeline` refuse an `Auth`.
const AUTH_PER_CONNECTION: &str =
    "Auth is sent on every connection by the SDK: set ClientOptions::token";

/// A handle to a Plaudit cluster (or a single node). Cheap to clone; clones
/// share the connections and the routing table, and any number of tasks may
/// call it at once (calls are pipelined).
#[derive(Clone)]
pub struct Client {
    inner: Arc<Cluster>,
    /// Whether reads may be answered from the cache of hot keys
    /// (`uncached` clears it).
    cached: bool,
}

/// An answer, and how old it may be when it came from the client's cache
/// of hot keys.
#[derive(Debug, Clone, PartialEq)]
pub struct Cached<T> {
    pub value: T,
    /// `None`: a node answered this call. `Some(age)`: served (wholly or in
    /// part) from this client's cache; the cluster held this value at most
    /// `age` ago, and `age` is below `ClientOptions::cache_ttl`.
    pub age: Option<Duration>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Client").field(&self.inner).finish()
    }
}

/// Pings the first of `seeds` (`a:1,b:2`) that answers, on a connection of
/// its own that neither says `Hello` nor authenticates: a ping needs no
/// token, and no routing table. Returns the address that answered and the
/// round trip. `timeout` bounds each seed's dial and answer.
pub async fn ping(seeds: &str, timeout: Duration) -> Result<(String, Duration), ClientError> {
    ping_with(seeds, timeout, None).await
}

/// `ping` over TLS when `tls` is given.
pub async fn ping_with(
    seeds: &str,
    timeout: Duration,
    tls: Option<&crate::Tls>,
) -> Result<(String, Duration), ClientError> {
    let mut failed = Vec::new();
    for seed in cluster::seeds(&[seeds]) {
        let attempt = async {
            let conn = crate::connection::Connection::dial(&seed, timeout, tls).await?;
            let start = std::time::Instant::now();
            match tokio::time::timeout(timeout, conn.call(&Request::Ping)).await {
                Ok(Ok(Response::Pong)) => Ok(start.elapsed()),
                Ok(Ok(Response::Error(e))) => Err(ClientError::Server(e)),
                Ok(Ok(other)) => Err(unexpected("ping", &other)),
                Ok(Err(e)) => Err(e),
                Err(_) => Err(ClientError::Timeout),
            }
        };
        match attempt.await {
            Ok(rtt) => return Ok((seed, rtt)),
            Err(e) => failed.push((seed, e)),
        }
    }
    if failed.is_empty() {
        return Err(ClientError::Protocol("no address to ping".into()));
    }
    Err(cluster::none_answered(failed))
}

impl Client {
    /// Connects with `ClientOptions::default()`.
    pub async fn connect(addr: &str) -> Result<Client, ClientError> {
        Client::connect_with(addr, ClientOptions::default()).await
    }

    /// Connects through `addr`: one node's `host:port`, or a comma-separated
    /// list of seeds (`a:7401,b:7401`). See `connect_cluster`.
    pub async fn connect_with(addr: &str, opts: ClientOptions) -> Result<Client, ClientError> {
        Client::connect_cluster(&[addr], opts).await
    }

    /// Dials the seeds in order until one answers, opening `opts.pool_size`
    /// connections to it, and fetches the cluster's routing table from it;
    /// the other nodes are dialled when a call first needs them. Any one
    /// live seed is enough: the rest may be down. Fails with
    /// `ClientError::Io` if no seed can be reached.
    pub async fn connect_cluster<S: AsRef<str>>(
        seeds: &[S],
        opts: ClientOptions,
    ) -> Result<Client, ClientError> {
        let token = opts.token.clone().map(TokenSecret);
        let seeds = cluster::seeds(seeds);
        let inner = Cluster::connect(seeds, opts, token).await?;
        Ok(Client { inner, cached: true })
    }

    /// The seed addresses this client was given, comma separated.
    pub fn addr(&self) -> &str {
        self.inner.label()
    }

    /// The per-call timeout.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout()
    }

    /// A handle to the same connections whose reads are never answered
    /// from the cache of hot keys: for a caller that needs a linearizable
    /// read. Its writes still drop what they touch from the shared cache.
    pub fn uncached(&self) -> Client {
        Client { inner: self.inner.clone(), cached: false }
    }

    /// How long this client serves hot keys from its cache; `None` when it
    /// has no cache (`ClientOptions::cache_ttl` zero).
    pub fn cache_ttl(&self) -> Option<Duration> {
        self.inner.cache_ttl()
    }

    /// The routing table as this client holds it now: the last one a node
    /// gave, with the leaders learned from `NotLeader` hints since. Empty
    /// (no nodes, no shards) when the node did not give one.
    pub fn routing_table(&self) -> RoutingTable {
        self.inner.table()
    }

    /// Makes node `node` hand every leadership it holds to other replicas
    /// and take none until it restarts (admin only). Returns once the node
    /// has begun: `cluster_status` shows the leaderships move.
    pub async fn drain_node(&self, node: u64) -> Result<(), ClientError> {
        match self.request(Request::DrainNode(node)).await? {
            Response::Done => Ok(()),
            other => Err(unexpected("drain_node", &other)),
        }
    }

    /// Decommissions or recommissions a member, or rebalances now (admin
    /// only). Returns once the cluster state records it (`Refused` when a
    /// decommission would leave too few members); `cluster_status` shows
    /// the moves that follow.
    pub async fn members(
        &self,
        op: plaudit_proto::membership::MemberOp,
    ) -> Result<(), ClientError> {
        match self.request(Request::Members(op)).await? {
            Response::Done => Ok(()),
            other => Err(unexpected("members", &other)),
        }
    }

    /// Every member of the cluster: its identity, state, replicas and
    /// leaderships, as the first seed sees them (admin only).
    pub async fn nodes(&self) -> Result<Vec<plaudit_proto::membership::NodeRow>, ClientError> {
        match self.request(Request::Nodes).await? {
            Response::Nodes(n) => Ok(n),
            other => Err(unexpected("nodes", &other)),
        }
    }

    /// The `top` keys taking the most requests on every node over the last
    /// seconds, heaviest first (admin only; `plaudit admin hotkeys`).
    pub async fn hot_keys(
        &self,
        top: u32,
    ) -> Result<Vec<plaudit_proto::hotkeys::HotKeyRow>, ClientError> {
        match self.request(Request::HotKeys(top)).await? {
            Response::HotKeys(rows) => Ok(rows),
            other => Err(unexpected("hotkeys", &other)),
        }
    }

    /// Every node and Raft group of the cluster, as one node sees them.
    pub async fn cluster_status(&self) -> Result<ClusterStatus, ClientError> {
        match self.request(Request::ClusterStatus).await? {
            Response::ClusterStatus(s) => Ok(*s),
            other => Err(unexpected("cluster_status", &other)),
        }
    }

    /// Sends any request to the node that should serve it and returns the
    /// reply as is, except that `Response::Error` becomes
    /// `Err(ClientError::Server)`. The request is not validated here; the
    /// node is the authority on limits. A registry change (`CreateBiz`,
    /// `UpdateBiz`, `CreateRank`, `UpdateRank`, `CreateToken`,
    /// `RevokeToken`) is sent wrapped in `Request::Once`, so a retry cannot
    /// apply it twice. `Auth` is refused here (`ClientError::Protocol`): it
    /// belongs to connections, which say it themselves
    /// (`ClientOptions::token`), and one pooled connection saying it would
    /// leave the others as they were.
    pub async fn request(&self, req: Request) -> Result<Response, ClientError> {
        Ok(self.request_cached(req).await?.value)
    }

    /// `request`, saying whether (and how old) an answer came from the
    /// cache of hot keys.
    pub async fn request_cached(&self, req: Request) -> Result<Cached<Response>, ClientError> {
        if let Request::Auth(_) = req {
            return Err(ClientError::Protocol(AUTH_PER_CONNECTION.into()));
        }
        let (value, age) = self.inner.call_cached(req, self.cached).await?;
        Ok(Cached { value, age })
    }

    /// Sends many requests at once and returns their answers in the same
    /// order, each as `request` would return it. Requests for the same node
    /// go in one write on one connection and their replies wake the caller
    /// once: the way to send a burst (a page's worth of reads, a batch of
    /// events) for a fraction of the client CPU of as many `request`s. Each
    /// request is routed, made safe to repeat and retried as `request`
    /// does, within one timeout for the whole pipeline. The requests are
    /// concurrent, not ordered: a write's effect on a later read of the
    /// same pipeline is not promised (its counts reads, for one, go to
    /// each node as one shared part).
    pub async fn pipeline(&self, reqs: Vec<Request>) -> Vec<Result<Response, ClientError>> {
        self.pipeline_cached(reqs).await.into_iter().map(|a| a.map(|c| c.value)).collect()
    }

    /// `pipeline`, saying for each answer whether (and how old) it came
    /// from the cache of hot keys.
    pub async fn pipeline_cached(
        &self,
        reqs: Vec<Request>,
    ) -> Vec<Result<Cached<Response>, ClientError>> {
        // An `Auth` is refused in its place (as `request` refuses it); the
        // rest are sent.
        let mut sent = Vec::with_capacity(reqs.len());
        let mut refused = Vec::with_capacity(reqs.len());
        for r in reqs {
            refused.push(matches!(r, Request::Auth(_)));
            if !matches!(r, Request::Auth(_)) {
                sent.push(r);
            }
        }
        let mut answers = self.inner.pipeline_cached(sent, self.cached).await.into_iter();
        refused
            .into_iter()
            .map(|auth| match auth {
                true => Err(ClientError::Protocol(AUTH_PER_CONNECTION.into())),
                false => answers
                    .next()
                    .unwrap_or(Err(ClientError::Closed))
                    .map(|(value, age)| Cached { value, age }),
            })
            .collect()
    }

    /// Round-trips a `Ping`.
    pub async fn ping(&self) -> Result<(), ClientError> {
        match self.request(Request::Ping).await? {
            Response::Pong => Ok(()),
            other => Err(unexpected("ping", &other)),
        }
    }

    /// Registers a business; `id: None` lets the node pick one: one above
    /// the highest id in use, or the lowest free id once the highest is
    /// `MAX_BIZ_ID` (an explicit id at the top never uses up assignment).
    /// Applied at most once, however often the SDK has to send it.
    pub async fn create_biz(
        &self,
        id: Option<BizId>,
        name: &str,
        config: BizConfig,
    ) -> Result<Business, ClientError> {
        let req = Request::CreateBiz(CreateBiz { id, name: name.to_string(), config });
        self.expect_biz("biz_create", req).await
    }

    pub async fn get_biz(&self, id: BizId) -> Result<Business, ClientError> {
        self.expect_biz("biz_get", Request::GetBiz(id)).await
    }

    /// Every business, in id order, read page by page (a registry of any
    /// size; one reply holds at most a frame).
    pub async fn list_biz(&self) -> Result<Vec<Business>, ClientError> {
        let mut all = Vec::new();
        let mut after = None;
        loop {
            let page = self.list_biz_page(after, MAX_LIST_PAGE).await?;
            all.extend(page.items);
            match next_cursor(after, page.next)? {
                Some(n) => after = Some(n),
                None => return Ok(all),
            }
        }
    }

    /// One page of businesses: up to `limit` (at most `MAX_LIST_PAGE`) with
    /// ids above `after`; `next` is the `after` of the following page.
    pub async fn list_biz_page(
        &self,
        after: Option<BizId>,
        limit: u32,
    ) -> Result<BizPage, ClientError> {
        match self.request(Request::ListBizPage(ListPage { after, limit })).await? {
            Response::BizPage(page) => Ok(page),
            other => Err(unexpected("biz_list", &other)),
        }
    }

    /// Replaces a business's whole config (read it with `get_biz` first to
    /// change one field). Applied at most once, however often it is sent.
    pub async fn update_biz(&self, id: BizId, config: BizConfig) -> Result<Business, ClientError> {
        self.expect_biz("biz_update", Request::UpdateBiz(UpdateBiz { id, config })).await
    }

    /// Applies one like action. `owner` is the entity's author, credited in
    /// `received` totals.
    pub async fn act(
        &self,
        biz: BizId,
        entity: EntityId,
        user: UserId,
        owner: Option<UserId>,
        action: LikeAction,
    ) -> Result<LikeReply, ClientError> {
        let req = Request::Like(LikeRequest { biz, entity, user, owner, action });
        match self.request(req).await? {
            Response::Like(reply) => Ok(reply),
            other => Err(unexpected(action.as_str(), &other)),
        }
    }

    pub async fn like(
        &self,
        biz: BizId,
        entity: EntityId,
        user: UserId,
        owner: Option<UserId>,
    ) -> Result<LikeReply, ClientError> {
        self.act(biz, entity, user, owner, LikeAction::Like).await
    }

    pub async fn unlike(
        &self,
        biz: BizId,
        entity: EntityId,
        user: UserId,
        owner: Option<UserId>,
    ) -> Result<LikeReply, ClientError> {
        self.act(biz, entity, user, owner, LikeAction::Unlike).await
    }

    pub async fn dislike(
        &self,
        biz: BizId,
        entity: EntityId,
        user: UserId,
        owner: Option<UserId>,
    ) -> Result<LikeReply, ClientError> {
        self.act(biz, entity, user, owner, LikeAction::Dislike).await
    }

    pub async fn undislike(
        &self,
        biz: BizId,
        entity: EntityId,
        user: UserId,
        owner: Option<UserId>,
    ) -> Result<LikeReply, ClientError> {
        self.act(biz, entity, user, owner, LikeAction::Undislike).await
    }

    /// `user`'s state on each of `entities` (at most `limits::MAX_BATCH`).
    pub async fn status(
        &self,
        biz: BizId,
        user: UserId,
        entities: &[EntityId],
    ) -> Result<Vec<EntityState>, ClientError> {
        let req = Request::Status(StatusRequest { biz, user, entities: entities.to_vec() });
        match self.request(req).await? {
            Response::Status(states) => Ok(states),
            other => Err(unexpected("status", &other)),
        }
    }

    /// Like and dislike counts of each of `entities` (at most `limits::MAX_BATCH`).
    pub async fn counts(
        &self,
        biz: BizId,
        entities: &[EntityId],
    ) -> Result<Vec<EntityCounts>, ClientError> {
        Ok(self.counts_cached(biz, entities).await?.value)
    }

    /// `counts`, saying whether (and how old) the answer came from the
    /// cache of hot keys.
    pub async fn counts_cached(
        &self,
        biz: BizId,
        entities: &[EntityId],
    ) -> Result<Cached<Vec<EntityCounts>>, ClientError> {
        let req = Request::Counts(CountsRequest { biz, entities: entities.to_vec() });
        match self.request_cached(req).await? {
            Cached { value: Response::Counts(value), age } => Ok(Cached { value, age }),
            Cached { value, .. } => Err(unexpected("counts", &value)),
        }
    }

    /// One page of the entities `user` likes, newest first. Pass the page's
    /// `next` back as `cursor` to continue.
    pub async fn user_likes(
        &self,
        biz: BizId,
        user: UserId,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<Page, ClientError> {
        let cursor = cursor.map(str::to_string);
        let req = Request::UserLikes(UserLikesRequest { biz, user, cursor, limit });
        self.expect_page("user_likes", req).await
    }

    /// One page of the users who like `entity`, newest first.
    pub async fn likers(
        &self,
        biz: BizId,
        entity: EntityId,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<Page, ClientError> {
        let cursor = cursor.map(str::to_string);
        let req = Request::Likers(LikersRequest { biz, entity, cursor, limit });
        self.expect_page("likers", req).await
    }

    /// Total likes on the entities `user` owns.
    pub async fn received(&self, biz: BizId, user: UserId) -> Result<ReceivedReply, ClientError> {
        match self.request(Request::Received(ReceivedRequest { biz, user })).await? {
            Response::Received(r) => Ok(r),
            other => Err(unexpected("received", &other)),
        }
    }

    async fn expect_biz(&self, op: &str, req: Request) -> Result<Business, ClientError> {
        match self.request(req).await? {
            Response::Biz(b) => Ok(b),
            other => Err(unexpected(op, &other)),
        }
    }

    async fn expect_page(&self, op: &str, req: Request) -> Result<Page, ClientError> {
        match self.request(req).await? {
            Response::Page(p) => Ok(p),
            other => Err(unexpected(op, &other)),
        }
    }
}

/// The cursor of the page after one read at `after`: `None` at the end.
/// A node must move the cursor forward; one that does not would make a
/// reader loop for ever, so it is a protocol error.
pub(crate) fn next_cursor(
    after: Option<u32>,
    next: Option<u32>,
) -> Result<Option<u32>, ClientError> {
    match (after, next) {
        (Some(a), Some(n)) if n <= a => {
            Err(ClientError::Protocol(format!("a page after {a} named {n} as the next")))
        }
        (_, next) => Ok(next),
    }
}

pub(crate) fn unexpected(op: &str, got: &Response) -> ClientError {
    ClientError::Protocol(format!("unexpected {} reply to {op}", variant(got)))
}

fn variant(r: &Response) -> &'static str {
    match r {
        Response::Pong => "Pong",
        Response::Biz(_) => "Biz",
        Response::BizList(_) => "BizList",
        Response::Like(_) => "Like",
        Response::Status(_) => "Status",
        Response::Counts(_) => "Counts",
        Response::Page(_) => "Page",
        Response::Received(_) => "Received",
        Response::Error(_) => "Error",
        Response::Rank(_) => "Rank",
        Response::RankInfo(_) => "RankInfo",
        Response::BoardUsage(_) => "BoardUsage",
        Response::RankList(_) => "RankList",
        Response::Score(_) => "Score",
        Response::Query(_) => "Query",
        Response::Boards(_) => "Boards",
        Response::Hello => "Hello",
        Response::Routing(_) => "Routing",
        Response::ClusterStatus(_) => "ClusterStatus",
        Response::Stale { .. } => "Stale",
        Response::BizPage(_) => "BizPage",
        Response::RankPage(_) => "RankPage",
        Response::Auth(_) => "Auth",
        Response::Token(_) => "Token",
        Response::Tokens(_) => "Tokens",
        Response::Done => "Done",
        Response::Nodes(_) => "Nodes",
        Response::HotKeys(_) => "HotKeys",
        Response::HotSet(_) => "HotSet",
        Response::Placements(_) => "Placements",
        Response::EntityPlacements(_) => "EntityPlacements",
        Response::EntityRoutes(_) => "EntityRoutes",
        Response::EntityRoutesPage(_) => "EntityRoutesPage",
    }
}
