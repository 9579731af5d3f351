//! `Client`: the typed API over the pool. Each method builds one `Request`,
//! sends it with the client's timeout, and unpacks the one reply variant it
//! expects; any other variant is a `ClientError::Protocol`.

use crate::error::ClientError;
use crate::pool::Pool;
use plaudit_proto::business::{CreateBiz, UpdateBiz};
use plaudit_proto::likes::{
    CountsRequest, EntityCounts, EntityState, LikeReply, LikeRequest, LikersRequest, Page,
    ReceivedReply, ReceivedRequest, StatusRequest, UserLikesRequest,
};
use plaudit_proto::{BizConfig, BizId, Business, EntityId, LikeAction, Request, Response, UserId};
use std::sync::Arc;
use std::time::Duration;

/// How a `Client` connects and waits.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Connections kept open and used round robin. Default 2; 0 counts as 1.
    pub pool_size: usize,
    /// How long one call (including a re-dial) may take before it fails with
    /// `ClientError::Timeout`; also bounds each dial. Default 5 s.
    pub timeout: Duration,
}

impl ClientOptions {
    pub const DEFAULT_POOL_SIZE: usize = 2;
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions { pool_size: Self::DEFAULT_POOL_SIZE, timeout: Self::DEFAULT_TIMEOUT }
    }
}

/// A handle to one node. Cheap to clone; clones share the connections, and
/// any number of tasks may call it at once (calls are pipelined).
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    timeout: Duration,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("addr", &self.inner.pool.addr())
            .field("timeout", &self.inner.timeout)
            .finish()
    }
}

impl Client {
    /// Connects with `ClientOptions::default()`.
    pub async fn connect(addr: &str) -> Result<Client, ClientError> {
        Client::connect_with(addr, ClientOptions::default()).await
    }

    /// Dials `opts.pool_size` connections to `addr` (`host:port`). Fails
    /// with `ClientError::Io` if the node cannot be reached.
    pub async fn connect_with(addr: &str, opts: ClientOptions) -> Result<Client, ClientError> {
        let pool = Pool::open(addr, opts.pool_size, opts.timeout).await?;
        Ok(Client { inner: Arc::new(Inner { pool, timeout: opts.timeout }) })
    }

    /// The address this client dials.
    pub fn addr(&self) -> &str {
        self.inner.pool.addr()
    }

    /// The per-call timeout.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// Sends any request and returns the node's reply as is, except that
    /// `Response::Error` becomes `Err(ClientError::Server)`. The request is
    /// not validated here; the node is the authority on limits.
    pub async fn request(&self, req: Request) -> Result<Response, ClientError> {
        let call = async {
            let conn = self.inner.pool.get().await?;
            conn.call(&req).await
        };
        match tokio::time::timeout(self.inner.timeout, call).await {
            Err(_) => Err(ClientError::Timeout),
            Ok(Ok(Response::Error(e))) => Err(ClientError::Server(e)),
            Ok(other) => other,
        }
    }

    /// Round-trips a `Ping`.
    pub async fn ping(&self) -> Result<(), ClientError> {
        match self.request(Request::Ping).await? {
            Response::Pong => Ok(()),
            other => Err(unexpected("ping", &other)),
        }
    }

    /// Registers a business; `id: None` lets the node pick the next free id.
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

    pub async fn list_biz(&self) -> Result<Vec<Business>, ClientError> {
        match self.request(Request::ListBiz).await? {
            Response::BizList(list) => Ok(list),
            other => Err(unexpected("biz_list", &other)),
        }
    }

    /// Replaces a business's whole config (read it with `get_biz` first to
    /// change one field).
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
        let req = Request::Counts(CountsRequest { biz, entities: entities.to_vec() });
        match self.request(req).await? {
            Response::Counts(counts) => Ok(counts),
            other => Err(unexpected("counts", &other)),
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
        Response::RankList(_) => "RankList",
        Response::Score(_) => "Score",
        Response::Query(_) => "Query",
        Response::Boards(_) => "Boards",
        Response::Hello => "Hello",
        Response::Routing(_) => "Routing",
        Response::ClusterStatus(_) => "ClusterStatus",
    }
}
