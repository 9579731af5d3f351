//! Serving a client request: validate it, find the shard (or shards) it
//! addresses, and run it on their leaders, here or on another node.
//!
//! ```text
//! Request ─> validate ─┬─ one shard (like, status, lists, received, query): on_leader ─> here | forward
//!                      ├─ many shards (counts, boards): one sub-request per shard, concurrently
//!                      ├─ registry (businesses, rankings): the metadata group's leader
//!                      └─ local (ping, hello, routing table, cluster status)
//! ```
//!
//! `Routing::Redirect` (smart clients) answers `NotLeader` for a
//! single-shard request this node does not lead; requests that span shards
//! are always fanned out here. A request that arrived from another node is
//! served as a redirecting one, so it is never forwarded twice.

use crate::engine::{internal, Engine};
use crate::group::Group;
use crate::router::Hop;
use plaudit_actors::{CmdResult, Command, ShardError};
use plaudit_proto::cluster::Routing;
use plaudit_proto::likes::{CountsRequest, EntityCounts, Page, PageCursor, ReceivedReply};
use plaudit_proto::rankings::RankInfo;
use plaudit_proto::routing::shard_of;
use plaudit_proto::{BizId, Request, Response, WireError};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

impl Engine {
    /// Serves one request as a simple client expects: whatever this node
    /// does not lead it forwards. Never panics on bad input: every failure
    /// is a `Response::Error`.
    pub async fn handle(&self, req: Request) -> Response {
        self.handle_as(req, Routing::Forward).await
    }

    /// Serves one request under a connection's routing mode.
    pub async fn handle_as(&self, req: Request, routing: Routing) -> Response {
        match self.dispatch(req, routing == Routing::Redirect).await {
            Ok(r) => r,
            Err(e) => Response::Error(e),
        }
    }

    async fn dispatch(&self, req: Request, redirect: bool) -> Result<Response, WireError> {
        req.validate()?;
        match req {
            Request::Ping => Ok(Response::Pong),
            Request::Hello(_) => Ok(Response::Hello),
            Request::Routing => Ok(Response::Routing(Box::new(self.routing_table()))),
            // The arms a busy node rarely takes are boxed: this future is
            // as large as its largest arm, every request carries it, and
            // it is moved (copied) at every await that builds it. Boxing
            // these took a score's future from 4.3 to ~2 KiB.
            Request::Stale(inner) => Box::pin(self.stale(*inner)).await,
            Request::Replica(inner) => Box::pin(self.replica(*inner)).await,
            Request::ClusterStatus => {
                Ok(Response::ClusterStatus(Box::new(self.cluster_status().await)))
            }
            Request::DrainNode(n) => Box::pin(self.drain_node(n)).await,
            Request::Nodes => Ok(Response::Nodes(Box::pin(self.nodes()).await)),
            Request::HotKeys(top) => Ok(Response::HotKeys(Box::pin(self.hot_keys(top)).await)),
            Request::HotSet(r) => Ok(Response::HotSet(self.hot_set(&r))),
            Request::Members(op) => Box::pin(self.member_op(op, redirect)).await,
            Request::MoveBoard(m) => Box::pin(self.move_board(m, redirect)).await,
            Request::Placements => {
                Ok(Response::Placements(Box::new((*self.directory.placements()).clone())))
            }
            Request::MoveEntity(m) => Box::pin(self.move_entity(m, redirect)).await,
            Request::EntityPlacements => Ok(Response::EntityPlacements(Box::new(
                (*self.directory.entity_placements()).clone(),
            ))),
            // A business's connection is answered by the node's server
            // (its own entities only); this is the admin's whole list.
            Request::EntityRoutes => Ok(Response::EntityRoutes(self.entity_routes(None))),
            Request::EntityRoutesPage(r) => {
                self.entity_routes_page(None, &r).map(Response::EntityRoutesPage)
            }
            Request::CreateBiz(_)
            | Request::UpdateBiz(_)
            | Request::CreateRank(_)
            | Request::CreateRankInfo(_)
            | Request::UpdateRank(_)
            | Request::GetBiz(_)
            | Request::ListBiz
            | Request::GetRank(_)
            | Request::GetRankInfo(_)
            | Request::SetBoardLimit(_)
            | Request::BoardUsage(_)
            | Request::ListRanks
            | Request::ListBizPage(_)
            | Request::ListRanksPage(_)
            | Request::CreateToken(_)
            | Request::ListTokens
            | Request::RevokeToken(_)
            | Request::Once { .. } => Box::pin(self.registry(req, redirect)).await,
            // Answered by the connection it was sent on (`node/server/conn.rs`).
            Request::Auth(_) => Err(WireError::bad_request("Auth is a connection's own request")),
            Request::Score(r) => self.score(r, redirect).await,
            Request::Query(q) => self.query(q, redirect).await,
            Request::Boards(b) => Box::pin(self.boards(b)).await,
            Request::Counts(r) => self.counts(r, redirect).await,
            Request::Like(ref r) => {
                self.on_shard(shard_of(r.biz, r.user, self.cfg.shards), req, redirect).await
            }
            Request::Status(ref r) => {
                self.on_shard(shard_of(r.biz, r.user, self.cfg.shards), req, redirect).await
            }
            Request::UserLikes(ref r) => {
                self.on_shard(shard_of(r.biz, r.user, self.cfg.shards), req, redirect).await
            }
            Request::Received(ref r) => {
                self.on_shard(shard_of(r.biz, r.user, self.cfg.shards), req, redirect).await
            }
            Request::Likers(ref r) => {
                let (biz, entity) = (r.biz, r.entity);
                let req = &req;
                self.follow_moved(|named| {
                    let (shard, redirect) = self.entity_route(biz, entity, named, redirect);
                    self.on_shard(shard, req.clone(), redirect)
                })
                .await
            }
        }
    }

    /// Where to read an entity: the shard a `Moved` answer named, else
    /// where the placements say it lives; and whether a smart client may
    /// be redirected there (not off the entity's hash shard, which is
    /// where the client's routing table sends it).
    fn entity_route(
        &self,
        biz: BizId,
        entity: u64,
        named: Option<u32>,
        redirect: bool,
    ) -> (u32, bool) {
        let shards = self.cfg.shards;
        let shard = named.unwrap_or_else(|| self.directory.entity_shard(biz, entity, shards));
        (shard, redirect && shard == shard_of(biz, entity, shards))
    }

    /// Runs a single-shard request on the shard's leader.
    async fn on_shard(
        &self,
        shard: u32,
        req: Request,
        redirect: bool,
    ) -> Result<Response, WireError> {
        let req = &req;
        self.router
            .on_leader(
                shard,
                redirect,
                |g| async move { self.on_local(&g, shard, req.clone(), true).await },
                |n| async move { self.router.forward(n, req.clone()).await },
            )
            .await
    }

    /// A single-shard request for `shard` on this node's replica `g` of
    /// its group: with `fresh`, this node leads and reads pass its read
    /// barrier (linearizable); without, reads serve what this replica has
    /// applied (stale reads).
    pub(crate) async fn on_local(
        &self,
        g: &Arc<Group>,
        shard: u32,
        req: Request,
        fresh: bool,
    ) -> Result<Response, WireError> {
        let barrier = || async move {
            if fresh {
                g.read_barrier(shard).await
            } else {
                Ok(())
            }
        };
        match req {
            Request::Like(r) => {
                let dislikes_allowed = self.require_business(r.biz).await?;
                if r.action.is_dislike() && !dislikes_allowed {
                    return Err(WireError::bad_request(format!(
                        "business {} does not allow dislikes",
                        r.biz
                    )));
                }
                match g.propose(shard, Command::Like(r)).await? {
                    CmdResult::Like(reply) => Ok(Response::Like(reply)),
                    CmdResult::Failed(e) => Err(e),
                    other => Err(internal(format!("unexpected result {other:?}"))),
                }
            }
            Request::Status(r) => {
                self.require_business(r.biz).await?;
                barrier().await?;
                let out = self.states_here(shard, &r)?;
                Ok(Response::Status(out))
            }
            Request::Counts(r) => {
                self.require_business(r.biz).await?;
                barrier().await?;
                Ok(Response::Counts(self.counts_here(shard, &r)?))
            }
            Request::UserLikes(r) => {
                self.require_business(r.biz).await?;
                barrier().await?;
                let after = r.cursor.as_deref().map(PageCursor::decode).transpose()?;
                let items = g
                    .shard_handle(shard)?
                    .user_page(r.biz, r.user, after, r.limit as usize + 1)
                    .await
                    .map_err(ShardError::into_wire)?;
                Ok(Response::Page(page(items, r.limit)))
            }
            Request::Likers(r) => {
                self.require_business(r.biz).await?;
                barrier().await?;
                let after = r.cursor.as_deref().map(PageCursor::decode).transpose()?;
                let items = g
                    .shard_handle(shard)?
                    .liker_page(r.biz, r.entity, after, r.limit as usize + 1)
                    .await
                    .map_err(ShardError::into_wire)?;
                Ok(Response::Page(page(items, r.limit)))
            }
            Request::Received(r) => {
                self.require_business(r.biz).await?;
                barrier().await?;
                let likes = self.store.get_received(r.biz, shard, r.user).map_err(internal)?;
                Ok(Response::Received(ReceivedReply { user: r.user, likes }))
            }
            Request::Query(q) => self.query_here(g, shard, q, fresh).await,
            other => Err(internal(format!("{} is not a single-shard request", other.op()))),
        }
    }

    fn counts_here(&self, shard: u32, r: &CountsRequest) -> Result<Vec<EntityCounts>, WireError> {
        r.entities.iter().map(|&entity| self.count_of(r.biz, shard, entity)).collect()
    }

    /// An entity's counts on this node's replica of `shard`, or `Moved`
    /// if that replica does not hold the entity (it moved: `entity_mover.rs`).
    pub(crate) fn count_of(
        &self,
        biz: BizId,
        shard: u32,
        entity: u64,
    ) -> Result<EntityCounts, WireError> {
        let moved = self.directory.moved_entities();
        if let Err(to) = moved.readable(shard, biz, entity, self.cfg.shards) {
            return Err(plaudit_actors::shard::entity_moved(biz, entity, to));
        }
        let c = self.store.get_counts(biz, shard, entity).map_err(internal)?;
        Ok(EntityCounts { entity, likes: c.likes, dislikes: c.dislikes })
    }

    /// Counts read in place when every shard they live on can be read here
    /// now (`Group::reads_now`: the only voter, or the leader on its lease):
    /// the per-shard path's read barrier is a no-op there, and its
    /// sub-request and future per shard were a quarter of a counts
    /// request's CPU. `None`: some shard cannot.
    async fn counts_all_here(
        &self,
        r: &CountsRequest,
    ) -> Result<Option<Vec<EntityCounts>>, WireError> {
        let Some(shards) = self.now_shards(r.biz, &r.entities) else { return Ok(None) };
        self.require_business(r.biz).await?;
        // Prefetched after the await, which may yield and let the lines go.
        Ok(Some(self.counts_in_place(r.biz, &r.entities, &shards)?))
    }

    /// Counts of entities on many shards: one sub-request per shard, all at
    /// once, answered in the request's order. Counts of one shard's
    /// entities are a single-shard read: a smart client that sent them
    /// here (it splits its reads by shard) is redirected if this node does
    /// not lead the shard, as for any other.
    ///
    /// A shard that does not hold an entity answers `Moved` (placements
    /// this node has not applied yet): the whole read is split again by
    /// the placements, after a pause (`follow_moved`).
    async fn counts(&self, r: CountsRequest, redirect: bool) -> Result<Response, WireError> {
        let r = &r;
        let mut redirect = redirect;
        self.follow_moved(|named| {
            redirect &= named.is_none();
            self.counts_once(r, redirect)
        })
        .await
    }

    async fn counts_once(&self, r: &CountsRequest, redirect: bool) -> Result<Response, WireError> {
        if let Some(out) = self.counts_all_here(r).await? {
            return Ok(Response::Counts(out));
        }
        let mut by_shard: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        let mut off_hash = false;
        for &e in &r.entities {
            let shard = self.directory.entity_shard(r.biz, e, self.cfg.shards);
            off_hash |= shard != shard_of(r.biz, e, self.cfg.shards);
            by_shard.entry(shard).or_default().push(e);
        }
        if by_shard.len() == 1 {
            let shard = *by_shard.keys().next().expect("one shard");
            // Not redirected off the hash shard the client routes by.
            return self.on_shard(shard, Request::Counts(r.clone()), redirect && !off_hash).await;
        }
        let parts = by_shard.into_iter().map(|(shard, entities)| {
            let sub = Request::Counts(CountsRequest { biz: r.biz, entities });
            async move {
                match self.on_shard(shard, sub, false).await? {
                    Response::Counts(c) => Ok(c),
                    other => Err(internal(format!("unexpected answer {other:?}"))),
                }
            }
        });
        let mut found: BTreeMap<u64, EntityCounts> = BTreeMap::new();
        for part in futures::future::join_all(parts).await {
            for c in part? {
                found.insert(c.entity, c);
            }
        }
        let out = r
            .entities
            .iter()
            .map(|e| found.get(e).copied().ok_or_else(|| internal(format!("no count for {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Response::Counts(out))
    }

    /// Registry requests go to the metadata group's leader: writes are
    /// proposed there, reads pass its read barrier there.
    async fn registry(&self, req: Request, redirect: bool) -> Result<Response, WireError> {
        let meta = self.router.meta_id;
        let req = &req;
        self.router
            .on_leader(
                meta,
                redirect,
                |g| async move { self.registry_here(&g, req.clone()).await },
                |n| async move { self.router.forward(n, req.clone()).await },
            )
            .await
    }

    async fn registry_here(&self, g: &Group, req: Request) -> Result<Response, WireError> {
        let write = |cmd| async move { g.propose(g.gid, cmd).await };
        let once = |id, cmd| Command::Once { id, cmd: Box::new(cmd) };
        match req {
            Request::Once { id, req } => match *req {
                Request::CreateBiz(c) => {
                    biz_result(write(once(id, Command::CreateBizV2(c))).await?)
                }
                Request::UpdateBiz(u) => biz_result(write(once(id, Command::UpdateBiz(u))).await?),
                Request::CreateRank(d) => {
                    rank_result(write(once(id, Command::CreateRank(d))).await?)
                }
                Request::UpdateRank(u) => {
                    rank_result(write(once(id, Command::UpdateRank(u))).await?)
                }
                Request::CreateRankInfo(i) => {
                    let owner = i.owner;
                    let r = write(once(id, Command::CreateRankInfo(i))).await?;
                    rank_info_result(r, owner)
                }
                Request::CreateToken(c) => {
                    token_result(write(once(id, Command::CreateToken(new_token(c)))).await?)
                }
                Request::RevokeToken(t) => {
                    token_result(write(once(id, Command::RevokeToken { id: t })).await?)
                }
                Request::SetBoardLimit(l) => {
                    let rank = l.rank;
                    let r = write(once(id, Command::SetBoardLimit(l))).await?;
                    self.limit_result(r, rank)
                }
                other => Err(WireError::bad_request(format!(
                    "{} cannot be applied at most once",
                    other.op()
                ))),
            },
            Request::CreateBiz(c) => biz_result(write(Command::CreateBizV2(c)).await?),
            Request::UpdateBiz(u) => biz_result(write(Command::UpdateBiz(u)).await?),
            Request::CreateRank(d) => rank_result(write(Command::CreateRank(d)).await?),
            Request::UpdateRank(u) => rank_result(write(Command::UpdateRank(u)).await?),
            Request::CreateRankInfo(i) => {
                let owner = i.owner;
                rank_info_result(write(Command::CreateRankInfo(i)).await?, owner)
            }
            Request::CreateToken(c) => {
                token_result(write(Command::CreateToken(new_token(c))).await?)
            }
            Request::RevokeToken(id) => token_result(write(Command::RevokeToken { id }).await?),
            Request::SetBoardLimit(l) => {
                let rank = l.rank;
                self.limit_result(write(Command::SetBoardLimit(l)).await?, rank)
            }
            read => {
                g.read_barrier(g.gid).await?;
                self.read_registry(&read).unwrap_or_else(|| {
                    Err(internal(format!("{} is not a registry request", read.op())))
                })
            }
        }
    }

    /// Fails with `NotFound` unless `biz` exists; returns whether it allows
    /// dislikes. This node's registry may lag the metadata group's leader
    /// by a moment: an unknown business is looked up again after catching up.
    pub(crate) async fn require_business(&self, biz: BizId) -> Result<bool, WireError> {
        if let Some(d) = self.directory.with(biz, |b| b.config.dislike_enabled) {
            return Ok(d);
        }
        // Boxed: rare, and as large as the rest of a request's future.
        Box::pin(self.sync_registry()).await?;
        self.directory.with(biz, |b| b.config.dislike_enabled).ok_or_else(|| unknown_business(biz))
    }

    /// Waits until this node's registry has applied everything the
    /// metadata group's leader had applied when asked.
    pub(crate) async fn sync_registry(&self) -> Result<(), WireError> {
        let meta = self.router.meta_id;
        let index = self
            .router
            .on_leader(
                meta,
                false,
                |g| async move {
                    g.read_barrier(g.gid).await?;
                    Ok(g.raft.metrics().borrow().last_applied.map_or(0, |l| l.index))
                },
                |n| async move {
                    self.router
                        .call(n, crate::peer::wire::PeerRequest::MetaApplied, |r| match r {
                            crate::peer::wire::PeerResponse::MetaApplied(Ok(i)) => Ok(i),
                            crate::peer::wire::PeerResponse::MetaApplied(Err(e)) => {
                                Err(Hop::Answer(e))
                            }
                            other => Err(Hop::unexpected(other)),
                        })
                        .await
                },
            )
            .await?;
        let Some(g) = self.router.group(meta) else { return Ok(()) };
        let waited = g
            .raft
            .wait(Some(Duration::from_secs(2)))
            .metrics(
                |m| m.last_applied.is_some_and(|l| l.index >= index),
                "the registry catches up",
            )
            .await;
        waited.map(|_| ()).map_err(|e| WireError::timeout(e.to_string()))
    }
}

pub(crate) fn unknown_business(biz: BizId) -> WireError {
    WireError::not_found(format!("business {biz} does not exist"))
}

pub(crate) fn unknown_rank(id: plaudit_proto::rankings::RankId) -> WireError {
    WireError::not_found(format!("ranking {id} does not exist"))
}

/// A ranking created with `owner`, as `CreateRankInfo` answers.
fn rank_info_result(r: CmdResult, owner: Option<BizId>) -> Result<Response, WireError> {
    match r {
        CmdResult::Rank(d) => Ok(Response::RankInfo(Box::new(RankInfo { def: *d, owner }))),
        CmdResult::Failed(e) => Err(e),
        other => Err(internal(format!("unexpected result {other:?}"))),
    }
}

fn rank_result(r: CmdResult) -> Result<Response, WireError> {
    match r {
        CmdResult::Rank(d) => Ok(Response::Rank(d)),
        CmdResult::Failed(e) => Err(e),
        other => Err(internal(format!("unexpected result {other:?}"))),
    }
}

fn token_result(r: CmdResult) -> Result<Response, WireError> {
    match r {
        CmdResult::Token(t) => Ok(Response::Token(t)),
        CmdResult::Failed(e) => Err(e),
        other => Err(internal(format!("unexpected result {other:?}"))),
    }
}

/// The command for a token request: the secret stops here, hashed.
fn new_token(c: plaudit_proto::auth::CreateToken) -> plaudit_actors::command::NewToken {
    plaudit_actors::command::NewToken {
        hash: plaudit_actors::directory::hash_secret(&c.secret.0),
        biz: c.biz,
        ranks: c.ranks,
        read_only: c.read_only,
    }
}

fn biz_result(r: CmdResult) -> Result<Response, WireError> {
    match r {
        CmdResult::Biz(b) => Ok(Response::Biz(b)),
        CmdResult::Failed(e) => Err(e),
        other => Err(internal(format!("unexpected result {other:?}"))),
    }
}

/// `items` holds up to `limit + 1` entries; the extra one only says a next page exists.
fn page(mut items: Vec<plaudit_proto::likes::ListItem>, limit: u32) -> Page {
    let more = items.len() > limit as usize;
    items.truncate(limit as usize);
    let next = if more {
        items.last().map(|i| PageCursor { mtime: i.mtime, id: i.id }.encode())
    } else {
        None
    };
    Page { items, next }
}
