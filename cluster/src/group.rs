//! One Raft group and the two loops in front of it:
//!
//! - the **proposer** (`proposer.rs`) coalesces commands for the shard into
//!   one `Batch` per Raft entry and keeps a bounded number of entries in
//!   flight;
//! - the **reader** (`group_watch.rs`) batches linearizable reads: every
//!   waiter that arrives while one read-index check is running shares the
//!   next one.
//!
//! Reads skip the read-index check when this node is the group's only
//! voter and has applied an entry of its current term (no other node can
//! then be leader, everything committed before this term is applied, and a
//! write of this term is acknowledged only after this node applied it), or
//! while its read lease holds (`lease.rs`).
//!
//! The queue in front of the proposer is bounded; a full queue answers
//! `Overloaded` at once instead of letting latency grow without limit.

use crate::group_watch::{quorum_in_touch, read_loop, watch_quorum, watch_sole_voter};
use crate::leadership_watch::LeadershipWatch;
use crate::proposer::{Proposal, Queued};
use crate::state_machine::ShardStateMachine;
use crate::types::{NodeId, Raft, TypeConfig};
use openraft::error::RaftError;
use openraft::{BasicNode, Config as RaftConfig, SnapshotPolicy};
use plaudit_actors::{CmdResult, Command, ShardHandle};
use plaudit_proto::WireError;
use plaudit_storage::file_log::FileLogStore;
use plaudit_storage::group_commit::GroupCommit;
use plaudit_storage::wal::Wal;
use plaudit_storage::StateStore;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

mod queue;
mod reads;

use queue::ShardQueues;

/// Tunables of one group, from the node config.
#[derive(Debug, Clone)]
pub struct GroupConfig {
    pub node_id: NodeId,
    pub heartbeat_ms: u64,
    pub election_min_ms: u64,
    pub election_max_ms: u64,
    /// A leader's read lease (`lease.rs`), in ms; 0: every read takes a
    /// read-index round. Below `election_min_ms`.
    pub read_lease_ms: u64,
    pub snapshot_every: u64,
    /// Log entries kept behind a snapshot when the log is purged.
    pub logs_to_keep: u64,
    pub batch_max: usize,
    pub max_in_flight: usize,
    /// Commands a group may queue for each shard it hosts.
    pub max_pending: usize,
    /// Refuses new writes while the data directory's disk is nearly full
    /// (`disk.rs`); shared by every group of the node.
    pub disk: Arc<crate::disk::DiskGuard>,
    /// Refuses new writes while the node's memory is at its ceiling
    /// (`memory.rs`); shared by every group of the node.
    pub memory: Arc<crate::memory::MemoryGuard>,
}

/// What a group's state machine needs beyond its storage.
pub struct StateMachineContext {
    pub is_meta: bool,
    /// The registry view (reloaded when the metadata group installs a snapshot).
    pub directory: plaudit_actors::Directory,
    /// The node's data directory (snapshots go under `snapshots/<group>`).
    pub data_dir: std::path::PathBuf,
}

pub(crate) type ReadWaiter = oneshot::Sender<Result<(), WireError>>;

pub struct Group {
    /// The group's id: the id of the first shard it hosts (the Raft RPCs'
    /// address; a request names a shard, not this).
    pub gid: u32,
    pub raft: Raft,
    /// The shards it hosts and their actors, its own (`id`) first.
    shards: Vec<(u32, ShardHandle)>,
    /// The log store (its committed index, for metrics).
    pub log: FileLogStore<TypeConfig>,
    /// When this replica last heard from its leader (an AppendEntries),
    /// for failover: the others' leader lease runs from about then.
    last_heard: std::sync::Mutex<Option<std::time::Instant>>,
    /// The followers' leader lease (`election_timeout_max`), in ms.
    lease_ms: u64,
    /// The voter this leader is handing the group to (`transfer.rs`), 0
    /// if none: meanwhile it takes no writes and no reads.
    handing_to: AtomicU64,
    /// Which voters accepted this leader's AppendEntries, and when they
    /// were sent: reads within `read_lease` of a quorum's need no
    /// read-index round (`lease.rs`).
    lease: Arc<crate::lease::Lease>,
    /// `GroupConfig::read_lease_ms`: inside the time no voter that
    /// accepted the leader can elect or be elected.
    read_lease: Duration,
    /// Set while this node triggers an election itself (`set_electing`).
    electing: AtomicBool,
    /// The last log index when the group opened: until it is applied, no
    /// read skips the read-index round (entries acknowledged before a
    /// restart are in the log, not yet in the state).
    logged: u64,
    proposals: mpsc::Sender<Queued>,
    /// Commands waiting in `proposals` (a proposal may hold several): the
    /// queue's bound, `max_pending` commands for each hosted shard.
    pending: ShardQueues,
    reads: mpsc::Sender<ReadWaiter>,
    /// Read-index rounds of reads on this replica as a follower, and of
    /// followers' requests for this leader's read index
    /// (`follower_read.rs`).
    pub(crate) follower_rounds: crate::follower_read::Rounds,
    pub(crate) leader_rounds: crate::follower_read::Rounds,
    /// When this node, as leader, last gave a follower its read index, in
    /// ms since `opened` (0: never): lease reads then catch up with the
    /// commit index first (`read_barrier`).
    follower_read_ms: AtomicU64,
    opened: std::time::Instant,
    /// This node leads and is the only voter (kept current from Raft metrics).
    sole_voter: Arc<AtomicBool>,
    disk: Arc<crate::disk::DiskGuard>,
    memory: Arc<crate::memory::MemoryGuard>,
    /// Scoring events refused by `should_shed`, for metrics.
    pub shed: AtomicU64,
    /// Scoring events merged into an earlier event's command, for metrics.
    pub coalesced: Arc<AtomicU64>,
}

/// The results of a `submit_many`, in the order of its commands.
pub struct ManyResults {
    shard: u32,
    rx: oneshot::Receiver<Result<Vec<CmdResult>, WireError>>,
}

impl std::future::Future for ManyResults {
    type Output = Result<Vec<CmdResult>, WireError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let shard = self.shard;
        std::pin::Pin::new(&mut self.rx).poll(cx).map(|r| r.unwrap_or_else(|_| Err(stopped(shard))))
    }
}

impl Group {
    /// Opens the group's log and state machine, starts Raft, and makes this
    /// node the single initial member if the group is new.
    #[allow(clippy::too_many_arguments)]
    pub async fn start(
        id: u32,
        name: &str,
        cfg: &GroupConfig,
        db: &sled::Db,
        commit: GroupCommit,
        wal: Arc<Wal>,
        store: StateStore,
        shards: Vec<(u32, ShardHandle)>,
        sm_ctx: StateMachineContext,
        network: crate::raft_net::PeerNetwork,
    ) -> anyhow::Result<Group> {
        let mut log = open_log(db, &commit, wal.clone(), id, name).await?;
        anyhow::ensure!(
            shards.first().map(|s| s.0) == Some(id),
            "group {id} hosts shard {id} first"
        );
        let sm = ShardStateMachine {
            wal,
            shard: id,
            is_meta: sm_ctx.is_meta,
            shards: shards.clone(),
            store,
            directory: sm_ctx.directory,
            snapshot_dir: sm_ctx.data_dir.join("snapshots").join(name),
            files: Default::default(),
        };
        let (appended, snapshot_dir) = (log.appended_bytes(), sm.snapshot_dir.clone());
        // Before the leftovers go: a transfer's file may be what the log needs.
        sm.check_log_covers(&mut log).await?;
        sm.remove_leftovers();
        let raft_cfg = RaftConfig {
            cluster_name: "plaudit".into(),
            heartbeat_interval: cfg.heartbeat_ms,
            election_timeout_min: cfg.election_min_ms,
            election_timeout_max: cfg.election_max_ms,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(cfg.snapshot_every),
            max_in_snapshot_log_to_keep: cfg.logs_to_keep,
            install_snapshot_timeout: 10_000,
            // One AppendEntries carries at most this many entries (each a
            // batch of commands); the store caps the bytes as well.
            max_payload_entries: 64,
            ..Default::default()
        };
        let raft_cfg = Arc::new(raft_cfg.validate()?);
        // Everything in the log when it opens may have been acknowledged
        // before a crash: no read skips the check until it is applied.
        let logged = {
            use openraft::storage::RaftLogStorage;
            let state = log.clone().get_log_state().await?;
            state.last_log_id.map_or(0, |l| l.index)
        };
        let lease = network.lease.clone();
        let raft = Raft::new(cfg.node_id, raft_cfg, network, log.clone(), sm).await?;
        // The bound is per shard (`max_pending_per_shard`): a group that
        // hosts several queues as much for each, each in its own share.
        let pending = ShardQueues::new(shards.iter().map(|(s, _)| *s), cfg.max_pending);
        let (ptx, prx) = mpsc::channel(pending.capacity());
        let (rtx, rrx) = mpsc::channel(pending.capacity());
        let coalesced = Arc::new(AtomicU64::new(0));
        let cut_off = Arc::new(tokio::sync::Notify::new());
        tokio::spawn(crate::proposer::propose_loop(
            id,
            shards.len() > 1,
            raft.clone(),
            prx,
            cfg.batch_max,
            cfg.max_in_flight,
            coalesced.clone(),
            cut_off.clone(),
        ));
        tokio::spawn(watch_quorum(raft.clone(), cut_off, cfg.election_max_ms));
        tokio::spawn(read_loop(id, raft.clone(), rrx, cfg.election_max_ms));
        let sole_voter = Arc::new(AtomicBool::new(false));
        tokio::spawn(watch_sole_voter(raft.clone(), sole_voter.clone(), logged));
        tokio::spawn(crate::snapshot_policy::watch(raft.clone(), appended, snapshot_dir));
        Ok(Group {
            gid: id,
            raft,
            shards,
            log,
            last_heard: std::sync::Mutex::new(None),
            lease_ms: cfg.election_max_ms,
            handing_to: AtomicU64::new(0),
            lease,
            read_lease: Duration::from_millis(
                cfg.read_lease_ms.min(cfg.election_min_ms.saturating_sub(1)),
            ),
            electing: AtomicBool::new(false),
            logged,
            proposals: ptx,
            pending,
            reads: rtx,
            follower_rounds: Default::default(),
            leader_rounds: Default::default(),
            follower_read_ms: AtomicU64::new(0),
            opened: std::time::Instant::now(),
            sole_voter,
            shed: AtomicU64::new(0),
            coalesced,
            disk: cfg.disk.clone(),
            memory: cfg.memory.clone(),
        })
    }

    /// Makes this group a new one of `members` (`(node, peer address)`),
    /// unless it has a membership already. Only the node chosen to create
    /// a group calls this, once (see `bootstrap.rs`).
    pub async fn initialize(&self, members: &[(NodeId, String)]) -> anyhow::Result<()> {
        if self.raft.is_initialized().await? {
            return Ok(());
        }
        let nodes: BTreeMap<NodeId, BasicNode> =
            members.iter().map(|(id, addr)| (*id, BasicNode { addr: addr.clone() })).collect();
        match self.raft.initialize(nodes).await {
            Ok(()) => Ok(()),
            // Initialized meanwhile (a leader's first AppendEntries): fine.
            Err(RaftError::APIError(openraft::error::InitializeError::NotAllowed(_))) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Waits until this node leads the group.
    pub async fn wait_leader(&self, timeout: Duration) -> anyhow::Result<()> {
        let me = self.raft.metrics().borrow().id;
        self.raft
            .wait(Some(timeout))
            .metrics(|m| m.current_leader == Some(me), "leader elected")
            .await?;
        Ok(())
    }

    /// Waits until the group has a leader, anywhere.
    pub async fn wait_any_leader(&self, timeout: Duration) -> anyhow::Result<()> {
        self.raft.wait(Some(timeout)).metrics(|m| m.current_leader.is_some(), "a leader").await?;
        Ok(())
    }

    /// Records that the leader was just heard from.
    pub fn heard_leader(&self) {
        *self.last_heard.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(std::time::Instant::now());
    }

    /// When the leader was last heard from.
    pub fn last_heard(&self) -> Option<std::time::Instant> {
        *self.last_heard.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The actor of `shard`, if this group hosts it.
    pub fn handle(&self, shard: u32) -> Option<&ShardHandle> {
        self.shards.iter().find(|(s, _)| *s == shard).map(|(_, h)| h)
    }

    /// `handle`, or the error a request for a shard this group does not
    /// host gets (a caller that looked the group up by another shard: a bug).
    pub fn shard_handle(&self, shard: u32) -> Result<&ShardHandle, WireError> {
        self.handle(shard).ok_or_else(|| self.not_hosted(shard))
    }

    /// The shards this group hosts, its own first.
    pub fn shard_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.shards.iter().map(|(s, _)| *s)
    }

    /// Every hosted shard's actor, its own first.
    pub fn handles(&self) -> impl Iterator<Item = (u32, &ShardHandle)> + '_ {
        self.shards.iter().map(|(s, h)| (*s, h))
    }

    fn not_hosted(&self, shard: u32) -> WireError {
        WireError::internal(format!("shard {shard} is not hosted by group {}", self.gid))
    }

    /// Proposes one command of `shard` (one this group hosts); resolves
    /// with its applied result.
    pub async fn propose(&self, shard: u32, cmd: Command) -> Result<CmdResult, WireError> {
        self.shard_handle(shard)?;
        self.disk.admit(&cmd)?;
        self.memory.admit(&cmd)?;
        self.check_leader(shard)?;
        let (tx, rx) = oneshot::channel();
        self.enqueue(Proposal::One(shard, cmd, tx))?;
        rx.await.map_err(|_| stopped(self.gid))?
    }

    /// Queues `cmds` of `shard` as one proposal, applied in this order in
    /// one entry (or consecutive ones), now, without waiting; the receiver
    /// resolves with their results in order. Either every command is
    /// queued or, with an error, none.
    pub fn submit_many(&self, shard: u32, cmds: Vec<Command>) -> Result<ManyResults, WireError> {
        self.shard_handle(shard)?;
        for cmd in &cmds {
            self.disk.admit(cmd)?;
            self.memory.admit(cmd)?;
        }
        self.check_leader(shard)?;
        let (tx, rx) = oneshot::channel();
        self.enqueue(Proposal::Many(shard, cmds, tx))?;
        Ok(ManyResults { shard, rx })
    }

    /// A replica that does not lead (or has lost its quorum) would queue
    /// a command only for Raft to refuse it, or to hold it until a
    /// partition heals: answer at once.
    fn check_leader(&self, shard: u32) -> Result<(), WireError> {
        if self.is_leader() {
            return Ok(());
        }
        let m = self.raft.metrics();
        let m = m.borrow();
        Err(not_leader(shard, m.current_leader.filter(|l| *l != m.id)))
    }

    fn enqueue(&self, p: Proposal) -> Result<(), WireError> {
        let shard = p.shard();
        let full = || WireError::overloaded(format!("shard {shard} has too many pending writes"));
        let permit = self.pending.take(shard, p.len()).ok_or_else(full)?;
        // The channel holds as many proposals as all the shares hold
        // commands, one or more each, so with the permits held it is never
        // full.
        self.proposals.try_send((p, permit)).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => full(),
            mpsc::error::TrySendError::Closed(_) => stopped(self.gid),
        })
    }

    /// A watch on the group's leadership, to take *before* looking at
    /// `is_leader`: its `changed` then returns on any change after the
    /// look, so one between the look and the wait is not missed (taking
    /// the leader to compare with at the wait missed it: a new node's
    /// delivery worker that looked just before its group's first election
    /// slept out its whole `IDLE_CHECK`, and `t72` read counts the likes had
    /// not been delivered to yet). It watches openraft's server metrics,
    /// sent only when the state, vote, leader or membership change; the
    /// full metrics are sent after every batch the core handles.
    pub fn leadership_watch(&self) -> LeadershipWatch {
        LeadershipWatch::taking(self.raft.server_metrics())
    }

    /// Whether this node leads the group and is still in touch with a
    /// quorum. openraft 0.9 keeps a leader that has lost its quorum (a
    /// partition) leading until it hears of a higher term, and cannot be
    /// told to step down; but once no quorum has acknowledged it for the
    /// followers' lease, they may have elected another leader, so this node
    /// stops acting as leader: requests go elsewhere (or get `NotLeader`
    /// with no leader), and its delivery stops.
    pub fn is_leader(&self) -> bool {
        // The common case of a single node, without the metrics' lock.
        if self.is_sole_voter() {
            return true;
        }
        let m = self.raft.metrics();
        let m = m.borrow();
        m.current_leader == Some(m.id)
            && m.state == openraft::ServerState::Leader
            && quorum_in_touch(&m, self.lease_ms)
            && self.handing_to.load(Ordering::Acquire) == 0
    }

    /// No read lease again under this node's current vote or an older one
    /// (`Lease::retire`): it granted a vote, or hands its leadership over.
    pub(crate) fn retire_lease(&self) {
        let vote = self.raft.metrics().borrow().vote;
        self.lease.retire(&vote);
    }

    /// This node is about to trigger an election of its own
    /// (`failover.rs`): it refuses AppendEntries meanwhile (`is_electing`),
    /// so none accepted between its check that the leader is silent and
    /// the campaign can count towards the leader's read lease.
    pub(crate) fn set_electing(&self, on: bool) {
        self.electing.store(on, Ordering::SeqCst);
    }

    pub(crate) fn is_electing(&self) -> bool {
        self.electing.load(Ordering::SeqCst)
    }

    /// Stops taking writes and reads while the leadership goes to `to`.
    pub(crate) fn hand_over(&self, to: NodeId) {
        self.handing_to.store(to, Ordering::Release);
    }

    /// The hand-off is over (done or given up).
    pub(crate) fn hand_over_done(&self) {
        self.handing_to.store(0, Ordering::Release);
    }

    /// Whether no proposal waits in the queue (what was proposed has been
    /// handed to Raft).
    pub(crate) fn queue_empty(&self) -> bool {
        self.pending.empty()
    }

    /// This node leads and is the group's only voter (`watch_sole_voter`):
    /// one atomic load, where `is_leader` reads Raft's metrics.
    pub fn is_sole_voter(&self) -> bool {
        self.sole_voter.load(Ordering::Acquire)
    }

    /// Whether an event of `priority` (0..=`max`) for `shard` should be
    /// shed now. Each class has a fill level of the shard's share of the
    /// proposal queue above which it is refused: the lowest class at
    /// 1/(max+2) full, the highest only when the share is nearly full, so
    /// low-priority traffic gives way first. Counts what it sheds.
    pub fn should_shed(&self, shard: u32, priority: u8, max: u8) -> bool {
        let cap = self.pending.per_shard();
        let used = self.pending.used(shard);
        // used / cap > (p + 1) / (max + 2), in integers.
        let shed = used * (usize::from(max) + 2) > (usize::from(priority) + 1) * cap;
        if shed {
            self.shed.fetch_add(1, Ordering::Relaxed);
        }
        shed
    }
}

/// A replica's Raft role, as metrics and status name it.
pub fn role_name(state: openraft::ServerState) -> &'static str {
    match state {
        openraft::ServerState::Leader => "leader",
        openraft::ServerState::Follower => "follower",
        openraft::ServerState::Candidate => "candidate",
        openraft::ServerState::Learner => "learner",
        openraft::ServerState::Shutdown => "shutdown",
    }
}

fn stopped(id: u32) -> WireError {
    WireError::internal(format!("shard {id} is not running"))
}

pub(crate) fn not_leader(id: u32, leader: Option<NodeId>) -> WireError {
    crate::router::not_leader(id, leader, 0)
}

/// The group's log in the node's `wal`, with what an older build kept in
/// sled's trees `raft/<group>/{log,meta}` moved in first (and the trees
/// dropped once the copy is durable).
async fn open_log(
    db: &sled::Db,
    commit: &GroupCommit,
    wal: Arc<Wal>,
    id: u32,
    name: &str,
) -> anyhow::Result<FileLogStore<TypeConfig>> {
    let mut log = FileLogStore::open(wal, id, commit.clone());
    if let Some(old) = plaudit_storage::sled_log::read::<TypeConfig>(db, name)? {
        if log.import(old).await? {
            tracing::info!(group = name, "moved the Raft log out of sled's trees");
        }
        plaudit_storage::sled_log::drop_trees(db, name)?;
        commit.flush().await?;
    }
    Ok(log)
}
