//! The engine: every group on this node and the routing of client requests
//! to them. Writes go to the owning shard's proposer; reads wait for that
//! shard's read barrier and then read applied state (counts, states, totals
//! from storage; list pages from the owning actor's recent window).
//!
//! ```text
//! Request ─> validate ─> business known? ─┬─ write: shard_of(key) ─> Group::propose ─> CmdResult
//!                                         └─ read:  shard_of(key) ─> read_barrier ─> state / actor page
//! ```

use crate::group::{Group, GroupConfig, StateMachineContext};
use crate::outbox::Delivery;
use plaudit_actors::{
    CmdResult, Command, Directory, OutboxSignal, ShardActor, ShardConfig, ShardError, ShardHandle,
};
use plaudit_proto::business::Business;
use plaudit_proto::likes::{EntityCounts, EntityState, Page, PageCursor, ReceivedReply};
use plaudit_proto::routing::shard_of;
use plaudit_proto::{BizId, Request, Response, WireError};
use plaudit_storage::group_commit::GroupCommit;
use plaudit_storage::StateStore;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// The metadata group (business registry) uses the shard id after the data shards.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub data_dir: PathBuf,
    pub shards: u32,
    pub group: GroupConfig,
    pub actor_budget: usize,
    pub actor_idle: Duration,
    /// How often expired sub-boards are looked for and deleted.
    pub retention_sweep: Duration,
    /// When staged applied state is written to sled.
    pub checkpoint: plaudit_storage::CheckpointPolicy,
    pub outbox_batch: usize,
    pub sled_cache_bytes: u64,
}

pub struct Engine {
    pub(crate) cfg: EngineConfig,
    db: sled::Db,
    commit: GroupCommit,
    pub(crate) store: StateStore,
    pub(crate) directory: Directory,
    pub(crate) groups: Arc<Vec<Arc<Group>>>,
    meta: Arc<Group>,
    /// Delivery workers, taken (and awaited) by `shutdown`.
    workers: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// Per-shard numbers for metrics.
pub struct ShardStats {
    pub shard: u32,
    pub active_users: usize,
    pub active_entities: usize,
    pub active_boards: usize,
    /// Members on active boards, and the heap their structures hold.
    pub board_members: usize,
    pub board_heap_bytes: usize,
    /// Scoring events shed under overload since start.
    pub shed_events: u64,
    /// Scoring events merged into an earlier event's command since start.
    pub coalesced_events: u64,
    pub outbox_len: usize,
    pub apply_lag: u64,
    pub is_leader: bool,
}

pub(crate) fn internal(e: impl std::fmt::Display) -> WireError {
    WireError::internal(e.to_string())
}

impl Engine {
    pub async fn open(cfg: EngineConfig) -> anyhow::Result<Engine> {
        std::fs::create_dir_all(&cfg.data_dir)?;
        let db = sled::Config::new()
            .path(cfg.data_dir.join("sled"))
            .cache_capacity(cfg.sled_cache_bytes)
            // sled's own background fsync every 500ms is redundant with group commit.
            .flush_every_ms(None)
            .open()?;
        let commit = GroupCommit::start(db.clone(), &cfg.data_dir.join("sled"))?;
        let store = StateStore::open_with(&db, cfg.checkpoint)?;
        let directory = Directory::load(&store)?;

        let mut groups = Vec::with_capacity(cfg.shards as usize);
        let mut readies = Vec::with_capacity(cfg.shards as usize);
        for shard in 0..=cfg.shards {
            let is_meta = shard == cfg.shards;
            let ready = Arc::new(OutboxSignal::default());
            let actor = ShardActor {
                cfg: ShardConfig {
                    shard,
                    shard_count: cfg.shards,
                    is_meta,
                    actor_budget: cfg.actor_budget,
                    actor_idle: cfg.actor_idle,
                },
                store: store.clone(),
                directory: directory.clone(),
                outbox: ready.clone(),
                gauges: Default::default(),
            };
            let handle = ShardHandle::spawn(actor).await.map_err(anyhow::Error::msg)?;
            let name = if is_meta { "meta".to_string() } else { format!("shard{shard}") };
            let ctx = StateMachineContext {
                is_meta,
                directory: directory.clone(),
                data_dir: cfg.data_dir.clone(),
            };
            let g = Group::start(
                shard,
                &name,
                &cfg.group,
                &db,
                commit.clone(),
                store.clone(),
                handle,
                ctx,
            )
            .await?;
            groups.push(Arc::new(g));
            readies.push(ready);
        }
        let meta = groups.pop().ok_or_else(|| anyhow::anyhow!("no metadata group"))?;
        readies.pop();
        for g in groups.iter().chain(std::iter::once(&meta)) {
            g.wait_leader(Duration::from_millis(cfg.group.election_max_ms * 10)).await?;
        }
        let groups = Arc::new(groups);
        let mut workers = Vec::new();
        for (shard, ready) in readies.into_iter().enumerate() {
            let d = Delivery {
                shard: shard as u32,
                groups: groups.clone(),
                store: store.clone(),
                signal: ready,
                batch: cfg.outbox_batch,
            };
            workers.push(tokio::spawn(d.run()));
        }
        workers.push(tokio::spawn(crate::retention::run(
            groups.clone(),
            store.clone(),
            directory.clone(),
            cfg.retention_sweep,
        )));
        let workers = std::sync::Mutex::new(workers);
        Ok(Engine { cfg, db, commit, store, directory, groups, meta, workers })
    }

    fn group_for(&self, biz: BizId, key: u64) -> (u32, &Group) {
        let s = shard_of(biz, key, self.cfg.shards);
        (s, &self.groups[s as usize])
    }

    fn business(&self, biz: BizId) -> Result<Business, WireError> {
        self.directory.get(biz).ok_or_else(|| unknown_business(biz))
    }

    /// Fails with `NotFound` unless `biz` exists; returns whether it allows
    /// dislikes. Reads in place: this runs on every request.
    fn require_business(&self, biz: BizId) -> Result<bool, WireError> {
        self.directory.with(biz, |b| b.config.dislike_enabled).ok_or_else(|| unknown_business(biz))
    }

    /// Serves one request. Never panics on bad input: every failure is a `Response::Error`.
    pub async fn handle(&self, req: Request) -> Response {
        match self.dispatch(req).await {
            Ok(r) => r,
            Err(e) => Response::Error(e),
        }
    }

    async fn dispatch(&self, req: Request) -> Result<Response, WireError> {
        req.validate()?;
        match req {
            Request::Ping => Ok(Response::Pong),
            Request::CreateBiz(c) => biz_result(self.meta.propose(Command::CreateBiz(c)).await?),
            Request::UpdateBiz(u) => biz_result(self.meta.propose(Command::UpdateBiz(u)).await?),
            Request::GetBiz(id) => {
                self.meta.read_barrier().await?;
                Ok(Response::Biz(self.business(id)?))
            }
            Request::ListBiz => {
                self.meta.read_barrier().await?;
                Ok(Response::BizList(self.directory.list()))
            }
            Request::CreateRank(d) => rank_result(self.meta.propose(Command::CreateRank(d)).await?),
            Request::UpdateRank(u) => rank_result(self.meta.propose(Command::UpdateRank(u)).await?),
            Request::GetRank(id) => {
                self.meta.read_barrier().await?;
                let def = self.directory.rank(id).ok_or_else(|| unknown_rank(id))?;
                Ok(Response::Rank((*def).clone()))
            }
            Request::ListRanks => {
                self.meta.read_barrier().await?;
                Ok(Response::RankList(self.directory.ranks()))
            }
            Request::Score(r) => self.score(r).await,
            Request::Query(q) => self.query(q).await,
            Request::Boards(b) => self.boards(b).await,
            Request::Like(r) => {
                let dislikes_allowed = self.require_business(r.biz)?;
                if r.action.is_dislike() && !dislikes_allowed {
                    return Err(WireError::bad_request(format!(
                        "business {} does not allow dislikes",
                        r.biz
                    )));
                }
                let (_, g) = self.group_for(r.biz, r.user);
                match g.propose(Command::Like(r)).await? {
                    CmdResult::Like(reply) => Ok(Response::Like(reply)),
                    CmdResult::Failed(e) => Err(e),
                    other => Err(internal(format!("unexpected result {other:?}"))),
                }
            }
            Request::Status(r) => {
                self.require_business(r.biz)?;
                let (shard, g) = self.group_for(r.biz, r.user);
                g.read_barrier().await?;
                let mut out = Vec::with_capacity(r.entities.len());
                for &entity in &r.entities {
                    let (state, mtime) = self
                        .store
                        .get_state(r.biz, shard, r.user, entity)
                        .map_err(internal)?
                        .unwrap_or_default();
                    out.push(EntityState { entity, state, mtime });
                }
                Ok(Response::Status(out))
            }
            Request::Counts(r) => {
                self.require_business(r.biz)?;
                let shards: BTreeSet<u32> =
                    r.entities.iter().map(|&e| shard_of(r.biz, e, self.cfg.shards)).collect();
                let barriers = shards.iter().map(|&s| self.groups[s as usize].read_barrier());
                for res in futures::future::join_all(barriers).await {
                    res?;
                }
                let mut out = Vec::with_capacity(r.entities.len());
                for &entity in &r.entities {
                    let shard = shard_of(r.biz, entity, self.cfg.shards);
                    let c = self.store.get_counts(r.biz, shard, entity).map_err(internal)?;
                    out.push(EntityCounts { entity, likes: c.likes, dislikes: c.dislikes });
                }
                Ok(Response::Counts(out))
            }
            Request::UserLikes(r) => {
                self.require_business(r.biz)?;
                let (_, g) = self.group_for(r.biz, r.user);
                g.read_barrier().await?;
                let after = r.cursor.as_deref().map(PageCursor::decode).transpose()?;
                let items = g
                    .handle
                    .user_page(r.biz, r.user, after, r.limit as usize + 1)
                    .await
                    .map_err(ShardError::into_wire)?;
                Ok(Response::Page(page(items, r.limit)))
            }
            Request::Likers(r) => {
                self.require_business(r.biz)?;
                let (_, g) = self.group_for(r.biz, r.entity);
                g.read_barrier().await?;
                let after = r.cursor.as_deref().map(PageCursor::decode).transpose()?;
                let items = g
                    .handle
                    .liker_page(r.biz, r.entity, after, r.limit as usize + 1)
                    .await
                    .map_err(ShardError::into_wire)?;
                Ok(Response::Page(page(items, r.limit)))
            }
            Request::Received(r) => {
                self.require_business(r.biz)?;
                let (shard, g) = self.group_for(r.biz, r.user);
                g.read_barrier().await?;
                let likes = self.store.get_received(r.biz, shard, r.user).map_err(internal)?;
                Ok(Response::Received(ReceivedReply { user: r.user, likes }))
            }
        }
    }

    /// Whether every group has a leader and can serve.
    pub fn ready(&self) -> bool {
        self.groups.iter().chain(std::iter::once(&self.meta)).all(|g| {
            let m = g.raft.metrics().borrow().clone();
            m.current_leader.is_some() && m.running_state.is_ok()
        })
    }

    pub fn stats(&self) -> Vec<ShardStats> {
        self.groups
            .iter()
            .map(|g| {
                let m = g.raft.metrics().borrow().clone();
                let applied = m.last_applied.map(|l| l.index).unwrap_or(0);
                let last = m.last_log_index.unwrap_or(0);
                ShardStats {
                    shard: g.id,
                    active_users: g.handle.gauges.active_users.load(Ordering::Relaxed),
                    active_entities: g.handle.gauges.active_entities.load(Ordering::Relaxed),
                    active_boards: g.handle.gauges.active_boards.load(Ordering::Relaxed),
                    board_members: g.handle.gauges.board_members.load(Ordering::Relaxed),
                    board_heap_bytes: g.handle.gauges.board_heap_bytes.load(Ordering::Relaxed),
                    shed_events: g.shed.load(Ordering::Relaxed),
                    coalesced_events: g.coalesced.load(Ordering::Relaxed),
                    outbox_len: self.store.outbox_len(g.id).unwrap_or(0),
                    apply_lag: last.saturating_sub(applied),
                    is_leader: m.current_leader == Some(m.id),
                }
            })
            .collect()
    }

    /// Total outbox entries waiting on this node (0 once derived state has converged).
    pub fn outbox_backlog(&self) -> usize {
        self.groups.iter().map(|g| self.store.outbox_len(g.id).unwrap_or(0)).sum()
    }

    pub fn group_commit_stats(&self) -> plaudit_storage::group_commit::GroupCommitStats {
        self.commit.stats()
    }

    /// Stops delivery, Raft and actors, then makes storage durable. Writes
    /// already acknowledged are durable before this starts; this makes the
    /// restart fast (less to replay).
    pub async fn shutdown(&self) {
        let workers = std::mem::take(&mut *self.workers.lock().unwrap_or_else(|e| e.into_inner()));
        for w in &workers {
            w.abort();
        }
        for w in workers {
            // An aborted task resolves (as cancelled) at its next await point.
            let _ = w.await;
        }
        for g in self.groups.iter().chain(std::iter::once(&self.meta)) {
            if let Err(e) = g.raft.shutdown().await {
                tracing::warn!(shard = g.id, error = %e, "raft shutdown");
            }
            g.handle.stop().await;
        }
        if let Err(e) = self.commit.flush().await {
            tracing::warn!(error = %e, "final flush failed");
        }
        let _ = self.db.flush();
    }
}

fn unknown_business(biz: BizId) -> WireError {
    WireError::not_found(format!("business {biz} does not exist"))
}

pub(crate) fn unknown_rank(id: plaudit_proto::rankings::RankId) -> WireError {
    WireError::not_found(format!("ranking {id} does not exist"))
}

fn rank_result(r: CmdResult) -> Result<Response, WireError> {
    match r {
        CmdResult::Rank(d) => Ok(Response::Rank(d)),
        CmdResult::Failed(e) => Err(e),
        other => Err(internal(format!("unexpected result {other:?}"))),
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
