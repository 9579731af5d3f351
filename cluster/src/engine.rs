//! The engine: this node's part of the cluster. It owns storage, the Raft
//! groups this node holds a replica of, the peer transport and the control
//! plane, and serves requests (`dispatch.rs`) by running them on the leader
//! of the shard they address, here or on another node (`router.rs`).
//!
//! ```text
//! start ─ sled, registry view, metadata group ─┬─ peer server (Raft RPCs, forwarded requests)
//!                                              ├─ control plane (liveness, gossip) ─ failover
//!                                              ├─ bootstrap (a brand-new cluster, exactly once)
//!                                              └─ placement watcher: the cluster map says which
//!                                                 shards live here ─ start those groups (and create
//!                                                 the ones this node is meant to lead) + delivery
//! ```
//!
//! A one-node cluster (no `join`) is the same path: it creates its metadata
//! group and a map that places every shard on itself.

use crate::actor_budget::shard_share;
use crate::control::{Control, ControlConfig};
use crate::group::{Group, StateMachineContext};
use crate::outbox::Delivery;
use crate::peer::auth::Credentials;
use crate::peer::links::Links;
use crate::peer::server::PeerServer;
use crate::peer::wire::GroupId;
use crate::peer::Peers;
use crate::raft_net::PeerNetwork;
use crate::router::Router;
use crate::types::NodeId;
use plaudit_actors::active::Budget;
use plaudit_actors::{Directory, OutboxSignal, ShardActor, ShardConfig, ShardHandle};
use plaudit_proto::WireError;
use plaudit_storage::group_commit::GroupCommit;
use plaudit_storage::wal::Wal;
use plaudit_storage::StateStore;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;

mod config;

pub use config::{ClusterConfig, EngineConfig};

pub struct Engine {
    pub(crate) cfg: EngineConfig,
    /// Which group hosts which shard (`layout.rs`).
    pub(crate) layout: crate::layout::Layout,
    db: sled::Db,
    commit: GroupCommit,
    /// Every group's Raft log, in one set of files (`storage/src/wal.rs`).
    pub(crate) wal: Arc<Wal>,
    pub(crate) store: StateStore,
    pub(crate) directory: Directory,
    pub(crate) router: Arc<Router>,
    pub(crate) peers: Arc<Peers>,
    pub links: Arc<Links>,
    pub(crate) control: Mutex<Option<Arc<Control>>>,
    /// Background tasks, taken (and awaited) by `shutdown`.
    workers: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Serialises starting groups (the placement watcher and bootstrap).
    pub(crate) starting: tokio::sync::Mutex<()>,
    /// Every shard's share of the actor budget, as the node holds them.
    budget: Budget,
    /// Handing its leaderships away and taking none (`leaders.rs`).
    pub(crate) draining: std::sync::atomic::AtomicBool,
    /// Itself, for work a request starts that outlives it (a drain).
    pub(crate) this: std::sync::OnceLock<std::sync::Weak<Engine>>,
    /// This node's life (`identity.rs`).
    pub incarnation: plaudit_proto::membership::Incarnation,
    /// Serialises changes to the cluster state made here (`membership.rs`).
    pub(crate) state_changes: tokio::sync::Mutex<()>,
    /// Wakes the membership manager before its next round (`admin rebalance`).
    pub(crate) nudge: tokio::sync::Notify,
    /// The snapshots this node sends (`snapshot_send.rs`).
    pub(crate) sends: Arc<crate::snapshot_send::SnapshotSends>,
    /// The sub-boards this node has seen reserved (`board_limit.rs`).
    pub(crate) reserved: crate::board_limit::Reserved,
    /// The keys its clients' requests concentrate on (`hot_keys.rs`).
    pub hot: crate::hot_keys::HotKeys,
    /// Linearizable reads this node served as a follower (`follower_read.rs`).
    pub(crate) follower_reads: std::sync::atomic::AtomicU64,
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
    /// Boards loaded into memory and written back since start.
    pub boards_loaded: usize,
    pub boards_written_back: usize,
    /// Scoring events shed under overload since start.
    pub shed_events: u64,
    /// Scoring events merged into an earlier event's command since start.
    pub coalesced_events: u64,
    pub outbox_len: usize,
    pub apply_lag: u64,
    pub is_leader: bool,
    /// "leader", "follower", "candidate", "learner".
    pub role: &'static str,
    pub term: u64,
    pub last_log: u64,
    pub committed: Option<u64>,
    pub applied: u64,
}

pub(crate) fn internal(e: impl std::fmt::Display) -> WireError {
    WireError::internal(e.to_string())
}

impl Engine {
    /// Starts a node. `peer_listener` serves other nodes (a one-node
    /// cluster may have none). Returns at once: groups come up in the
    /// background; `ready` says when this node can serve.
    pub async fn start(
        cfg: EngineConfig,
        peer_listener: Option<TcpListener>,
    ) -> anyhow::Result<Arc<Engine>> {
        std::fs::create_dir_all(&cfg.data_dir)?;
        let incarnation = crate::identity::load_or_make(&cfg.data_dir)?;
        let db = sled::Config::new()
            .path(cfg.data_dir.join("sled"))
            .cache_capacity(cfg.sled_cache_bytes)
            // Nothing writes sled any more: it holds what older versions
            // kept there (read once at open, `plaudit_storage::legacy`).
            .flush_every_ms(Some(1000))
            .open()?;
        let commit = GroupCommit::start(db.clone(), &cfg.data_dir.join("sled"))?;
        let wal = Wal::open(&cfg.data_dir.join("raft"))?;
        crate::shard_count::check(&cfg.data_dir, cfg.shards, &wal.group_ids())?;
        let layout = crate::layout::Layout::new(cfg.shards, cfg.groups);
        let snapshots = !crate::durable::snapshot_groups(&cfg.data_dir, cfg.shards).is_empty();
        crate::shard_count::check_groups(&cfg.data_dir, layout, &wal.group_ids(), snapshots)?;
        // A spare segment (zeros made ahead, `wal.rs`) must not eat the
        // reserve that keeps the node serving on a nearly full disk.
        wal.set_spare_floor(cfg.group.disk.min_free());
        let store = StateStore::open_with(&db, cfg.checkpoint)?;
        // Applied state is in memory: every group's newest snapshot brings
        // it back (the registry view below reads the metadata group's).
        let meta_id = cfg.shards;
        crate::durable::load(&store, &cfg.data_dir, meta_id, layout).await?;
        let directory = Directory::load(&store)?;
        let me = cfg.cluster.me.id;
        let creds = Credentials {
            secret: cfg.cluster.secret.clone().unwrap_or_default().into(),
            shards: layout.declared(),
            tls: cfg.cluster.tls.clone(),
        };
        let links = Arc::new(Links::default());
        let peers = Arc::new(Peers::new(me, creds.clone(), links.clone()));
        let router = Arc::new(Router::new(
            me,
            meta_id,
            peers.clone(),
            directory.clone(),
            cfg.request_timeout,
        ));
        let (cfg_budget, cfg_per_shard) = (cfg.actor_budget, cfg.actor_budget_per_shard);
        let send_rate = cfg.cluster.snapshot_send_rate;
        let engine = Arc::new(Engine {
            cfg,
            layout,
            db,
            commit,
            wal,
            store,
            directory,
            router,
            peers,
            links,
            control: Mutex::new(None),
            workers: Mutex::default(),
            starting: tokio::sync::Mutex::new(()),
            budget: Budget::new(shard_share(cfg_budget, cfg_per_shard, 0)),
            draining: Default::default(),
            this: std::sync::OnceLock::new(),
            incarnation,
            state_changes: Default::default(),
            nudge: Default::default(),
            sends: Arc::new(crate::snapshot_send::SnapshotSends::new(send_rate)),
            reserved: Default::default(),
            hot: Default::default(),
            follower_reads: Default::default(),
        });
        let _ = engine.this.set(Arc::downgrade(&engine));
        // The metadata group runs on every node: voters on up to three, the
        // others follow it as learners (they need the registry too).
        let meta = engine.start_group(meta_id).await?;
        if let Some(listener) = peer_listener {
            engine.serve_peers(listener, creds.clone());
        }
        if engine.cfg.cluster.secret.is_some() {
            engine.start_control(creds).await?;
        } else {
            let e = engine.clone();
            engine.spawn(async move { e.drive_moves_alone().await });
        }
        let e = engine.clone();
        engine.spawn(async move { e.watch_placement().await });
        let guard = Arc::downgrade(&engine.cfg.group.disk);
        engine.spawn(crate::disk::watch(guard, engine.cfg.data_dir.clone()));
        engine.spawn(crate::memory::watch(Arc::downgrade(&engine.cfg.group.memory)));
        crate::bootstrap::begin(engine.clone(), meta).await?;
        let e = engine.clone();
        engine.spawn(async move {
            crate::retention::run(
                e.router.clone(),
                e.store.clone(),
                e.directory.clone(),
                e.cfg.retention_sweep,
            )
            .await
        });
        Ok(engine)
    }

    /// Starts a one-node engine and waits until it serves (tests).
    pub async fn open(cfg: EngineConfig) -> anyhow::Result<Arc<Engine>> {
        let wait = Duration::from_millis(cfg.group.election_max_ms * 20);
        let engine = Engine::start(cfg, None).await?;
        let deadline = tokio::time::Instant::now() + wait;
        while !engine.ready() {
            if tokio::time::Instant::now() > deadline {
                anyhow::bail!("the engine did not become ready within {wait:?}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(engine)
    }

    pub(crate) fn spawn(&self, f: impl std::future::Future<Output = ()> + Send + 'static) {
        let h = tokio::spawn(f);
        self.workers.lock().unwrap_or_else(|e| e.into_inner()).push(h);
    }

    pub fn node_id(&self) -> NodeId {
        self.cfg.cluster.me.id
    }

    pub fn shard_count(&self) -> u32 {
        self.cfg.shards
    }

    fn serve_peers(self: &Arc<Self>, listener: TcpListener, creds: Credentials) {
        let weak = Arc::downgrade(self);
        let handler: crate::peer::server::Handler = Arc::new(move |from, req| {
            let weak = weak.clone();
            Box::pin(async move {
                match weak.upgrade() {
                    Some(e) => e.serve_peer(from, req).await,
                    None => crate::peer::wire::PeerResponse::Unavailable("shutting down".into()),
                }
            })
        });
        let weak = Arc::downgrade(self);
        let control: crate::peer::server::ControlSink = Arc::new(move |from, stream| {
            let control = weak.upgrade().and_then(|e| e.control.lock().ok()?.clone());
            if let Some(c) = control {
                c.accept(from, stream);
            }
        });
        let server = Arc::new(PeerServer {
            me: self.node_id(),
            handshaking: Arc::new(tokio::sync::Semaphore::new(
                crate::peer::server::MAX_UNAUTHENTICATED,
            )),
            creds,
            links: self.links.clone(),
            handler,
            control,
        });
        self.spawn(server.run(listener, std::future::pending()));
    }

    /// Divides the actor budget again among the data shards now held.
    pub(crate) fn share_budget(&self) {
        let held = self
            .router
            .local()
            .iter()
            .filter(|g| g.gid != self.router.meta_id)
            .map(|g| g.shard_ids().count())
            .sum();
        let share = shard_share(self.cfg.actor_budget, self.cfg.actor_budget_per_shard, held);
        if self.budget.set(share) != share {
            tracing::info!(share, shards_held = held, "actor budget per shard");
        }
    }

    async fn start_control(self: &Arc<Self>, creds: Credentials) -> anyhow::Result<()> {
        let c = &self.cfg.cluster;
        let cfg = ControlConfig {
            me: c.me.clone(),
            cookie: crate::peer::auth::control_cookie(&creds.secret),
            seeds: c.seeds.clone(),
            peer_timeout: c.peer_timeout,
            incarnation: self.incarnation,
            zone: c.zone.clone(),
            creds,
        };
        let weak = Arc::downgrade(self);
        let local: crate::control::LocalView = Arc::new(move || match weak.upgrade() {
            Some(e) => crate::control::Local {
                member: e.is_member(),
                draining: e.is_draining(),
                leaders: e.router.local_leaders(),
            },
            None => crate::control::Local::default(),
        });
        let router = self.router.clone();
        let leaders: crate::control::LeaderSink = Arc::new(move |ls| {
            for (g, l, t) in ls {
                router.note(g, l, t);
            }
        });
        let control =
            Control::start(cfg, self.peers.clone(), self.links.clone(), local, leaders).await?;
        *self.control.lock().unwrap_or_else(|e| e.into_inner()) = Some(control.clone());
        let e = self.clone();
        self.spawn(async move { crate::failover::run(e, control).await });
        let e = self.clone();
        self.spawn(async move { e.balance_leaders().await });
        let e = self.clone();
        self.spawn(async move { e.manage_members().await });
        if self.cfg.hot_move_min_rps > 0 {
            let e = self.clone();
            self.spawn(async move { e.manage_hot_moves().await });
        }
        Ok(())
    }

    /// Whether this node belongs to a cluster (its metadata group has a membership).
    pub fn is_member(&self) -> bool {
        self.router.group(self.router.meta_id).is_some_and(|g| {
            g.raft.metrics().borrow().membership_config.membership().nodes().next().is_some()
        })
    }

    /// Opens (or creates) this node's replica of group `id` (a group id:
    /// see `layout.rs`), with an actor for each shard it hosts.
    pub(crate) async fn start_group(self: &Arc<Self>, id: GroupId) -> anyhow::Result<Arc<Group>> {
        if let Some(g) = self.router.group(id) {
            return Ok(g);
        }
        anyhow::ensure!(self.layout.is_group(id), "{id} is not a group's id");
        let cfg = &self.cfg;
        let is_meta = id == self.router.meta_id;
        let mut shards = Vec::new();
        let mut signals = Vec::new();
        for shard in self.layout.shards_of(id) {
            let signal = Arc::new(OutboxSignal::default());
            let actor = ShardActor {
                cfg: ShardConfig {
                    shard,
                    shard_count: cfg.shards,
                    is_meta,
                    actor_budget: self.budget.clone(),
                    actor_idle: cfg.actor_idle,
                },
                store: self.store.clone(),
                directory: self.directory.clone(),
                outbox: signal.clone(),
                gauges: Default::default(),
                boards: Default::default(),
            };
            match ShardHandle::spawn(actor).await {
                Ok(h) => shards.push((shard, h)),
                Err(e) => {
                    stop_all(&shards).await;
                    return Err(e.into());
                }
            }
            signals.push((shard, signal));
        }
        let name = if is_meta { "meta".to_string() } else { format!("shard{id}") };
        let ctx = StateMachineContext {
            is_meta,
            directory: self.directory.clone(),
            data_dir: cfg.data_dir.clone(),
        };
        let network = PeerNetwork {
            group: id,
            peers: self.peers.clone(),
            fences: self.fences(),
            sends: self.sends.clone(),
            lease: Default::default(),
        };
        let started = Group::start(
            id,
            &name,
            &cfg.group,
            &self.db,
            self.commit.clone(),
            self.wal.clone(),
            self.store.clone(),
            shards.clone(),
            ctx,
            network,
        )
        .await;
        let g = match started {
            Ok(g) => g,
            Err(e) => {
                // Their actors have timers running: stop them, or every
                // retry leaks them.
                stop_all(&shards).await;
                return Err(e);
            }
        };
        let g = Arc::new(g);
        self.router.insert(g.clone());
        self.share_budget();
        if !is_meta {
            // One delivery worker per shard: each shard has its outbox.
            for (shard, signal) in signals {
                let d = Delivery {
                    shard,
                    group: Arc::downgrade(&g),
                    router: self.router.clone(),
                    store: self.store.clone(),
                    signal,
                    batch: cfg.outbox_batch,
                };
                self.spawn(d.run());
            }
        }
        Ok(g)
    }

    /// Each member's incarnation as the cluster state records it, which
    /// every Raft message to it names (`wire::Fence`).
    fn fences(&self) -> crate::raft_net::Fences {
        let directory = self.directory.clone();
        Arc::new(move |node| {
            directory
                .cluster_state()
                .and_then(|s| s.member(node).map(|m| m.incarnation))
                .unwrap_or(0)
        })
    }

    /// Whether every group this node holds has a leader and the map is known.
    pub fn ready(&self) -> bool {
        let Some(map) = self.directory.cluster() else { return false };
        let mine: Vec<GroupId> = map.shards_of(self.node_id()).collect();
        // A replica on its way here (a learner catching up) is not waited for.
        let groups: Vec<Arc<Group>> = self
            .router
            .local()
            .into_iter()
            .filter(|g| g.gid == self.router.meta_id || mine.contains(&g.gid))
            .collect();
        mine.iter().all(|s| self.router.group(*s).is_some())
            && groups.iter().all(|g| {
                let m = g.raft.metrics().borrow().clone();
                m.current_leader.is_some() && m.running_state.is_ok()
            })
    }

    /// One row per data shard held here; a group's own counters (shed,
    /// coalesced) on its own shard's row.
    pub fn stats(&self) -> Vec<ShardStats> {
        self.router
            .local()
            .into_iter()
            .filter(|g| g.gid != self.router.meta_id)
            .flat_map(|g| {
                let m = g.raft.metrics().borrow().clone();
                let shards: Vec<_> = g.handles().map(|(s, h)| (s, h.clone())).collect();
                shards.into_iter().map(move |(shard, h)| (g.clone(), m.clone(), shard, h))
            })
            .map(|(g, m, shard, handle)| {
                let applied = m.last_applied.map(|l| l.index).unwrap_or(0);
                let last = m.last_log_index.unwrap_or(0);
                let role = crate::group::role_name(m.state);
                let gauges = &handle.gauges;
                let own = shard == g.gid;
                ShardStats {
                    shard,
                    active_users: gauges.active_users.load(Ordering::Relaxed),
                    active_entities: gauges.active_entities.load(Ordering::Relaxed),
                    active_boards: gauges.active_boards.load(Ordering::Relaxed),
                    board_members: gauges.board_members.load(Ordering::Relaxed),
                    board_heap_bytes: gauges.board_heap_bytes.load(Ordering::Relaxed),
                    boards_loaded: gauges.boards_loaded.load(Ordering::Relaxed),
                    boards_written_back: gauges.boards_written_back.load(Ordering::Relaxed),
                    shed_events: if own { g.shed.load(Ordering::Relaxed) } else { 0 },
                    coalesced_events: if own { g.coalesced.load(Ordering::Relaxed) } else { 0 },
                    outbox_len: self.store.outbox_len(shard).unwrap_or(0),
                    apply_lag: last.saturating_sub(applied),
                    is_leader: m.current_leader == Some(m.id),
                    role,
                    term: m.current_term,
                    last_log: last,
                    committed: g.log.committed_index(),
                    applied,
                }
            })
            .collect()
    }

    /// Outbox entries waiting on the shards this node leads (0 once derived
    /// state has converged; followers keep the replicated outbox too, but
    /// only leaders deliver it).
    pub fn outbox_backlog(&self) -> usize {
        self.router
            .local()
            .iter()
            .filter(|g| g.gid != self.router.meta_id && g.is_leader())
            .flat_map(|g| g.shard_ids().collect::<Vec<_>>())
            .map(|s| self.store.outbox_len(s).unwrap_or(0))
            .sum()
    }

    /// The cluster as this node sees it, with every reachable node's report.
    pub async fn status(&self) -> plaudit_proto::cluster::ClusterStatus {
        self.cluster_status().await
    }

    /// `(peer, dial failures, call failures)`.
    pub fn peer_errors(&self) -> Vec<(NodeId, u64, u64)> {
        self.peers.counters()
    }

    /// Client requests this node passed to another node to serve.
    pub fn forwarded(&self) -> u64 {
        self.router.forwarded()
    }

    /// Linearizable reads this node served as a follower.
    pub fn follower_reads(&self) -> u64 {
        self.follower_reads.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn group_commit_stats(&self) -> plaudit_storage::group_commit::GroupCommitStats {
        self.commit.stats()
    }

    /// The node's disk-space reserve (free space, whether writes are refused).
    pub fn disk(&self) -> &crate::disk::DiskGuard {
        &self.cfg.group.disk
    }

    /// The node's memory ceiling (resident memory, whether writes are refused).
    pub fn memory(&self) -> &crate::memory::MemoryGuard {
        &self.cfg.group.memory
    }

    /// Stops background work, Raft and actors, then makes storage durable.
    /// Writes already acknowledged are durable before this starts; this
    /// makes the restart fast (less to replay).
    pub async fn shutdown(&self) {
        let workers = std::mem::take(&mut *self.workers.lock().unwrap_or_else(|e| e.into_inner()));
        for w in &workers {
            w.abort();
        }
        for w in workers {
            // An aborted task resolves (as cancelled) at its next await point.
            let _ = w.await;
        }
        crate::durable::snapshot_all(&self.router.local()).await;
        for g in self.router.local() {
            if let Err(e) = g.raft.shutdown().await {
                tracing::warn!(shard = g.gid, error = %e, "raft shutdown");
            }
            for (_, h) in g.handles() {
                h.stop().await;
            }
        }
        // The log's buffered records (the snapshots' purges, the last
        // committed ids) are written and synced before the node goes.
        if let Err(e) = self.commit.flush_wal(self.wal.clone()).await {
            tracing::warn!(error = %e, "final log round failed");
        }
        if let Err(e) = self.commit.flush().await {
            tracing::warn!(error = %e, "final flush failed");
        }
        let _ = self.db.flush();
    }
}

/// Stops the actors of a group that did not start (or stopped).
pub(crate) async fn stop_all(shards: &[(u32, ShardHandle)]) {
    for (_, h) in shards {
        h.stop().await;
    }
}
