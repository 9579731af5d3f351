//! The node's configuration: one struct, three sources.
//!
//! Values come from, lowest precedence first:
//!
//! 1. the defaults below (each a named constant),
//! 2. a TOML file (`--config PATH`, or `PLAUDIT_CONFIG`); unknown keys are an error,
//! 3. `PLAUDIT_<FIELD>` environment variables, e.g. `PLAUDIT_SHARDS=32` (what a
//!    Kubernetes pod sets),
//! 4. command-line flags, for the handful of fields one sets by hand.
//!
//! [`Config::load`] reads all of them and validates the result once, so the rest
//! of the node can trust every value. [`Config::from_sources`] does the same from
//! values passed in, which is what the tests use.

use anyhow::{bail, ensure, Context};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

/// The prefix of every environment variable that sets a config field.
pub const ENV_PREFIX: &str = "PLAUDIT_";
/// The environment variable naming the config file when `--config` is absent.
pub const ENV_CONFIG_FILE: &str = "PLAUDIT_CONFIG";

pub const DEFAULT_NODE_ID: u64 = 1;
pub const DEFAULT_DATA_DIR: &str = "./data";
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 7401);
pub const DEFAULT_ADMIN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 7402);
pub const DEFAULT_PEER_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 7403);
/// `bootstrap_expect = 0` means: 1 (form a one-node cluster) without
/// `join`, and never bootstrap (only join) with it. Above 1, the nodes at
/// the first `bootstrap_expect` seed addresses of `join` (sorted) found
/// the cluster (`cluster/src/bootstrap.rs`).
pub const DEFAULT_BOOTSTRAP_EXPECT: u32 = 0;
pub const DEFAULT_REPLICATION_FACTOR: u32 = 3;
/// A cluster secret shorter than this is refused.
pub const MIN_SECRET_LEN: usize = 16;
/// Six shards (Raft groups) by default (sixteen before 82440c6). A node pays roughly 16 µs of CPU per Raft entry whatever the
/// entry carries, and each shard with work makes an entry per round, so
/// fewer shards make fewer, larger entries: per core, with the actor
/// budget kept at ~16k per node, the rankings mix went from 0.98–1.05x
/// Redis to 1.14–1.16x and likes from 1.86–2.48x to 2.09–2.36x
/// (`docs/benchmarks.md`). Six rather than four: six divide evenly among
/// 1, 2, 3 and 6 nodes, so a three-node cluster leads two each. The cost:
/// at most six nodes can lead, and a larger entry takes longer to apply
/// (cold scoring's p99 ~9 -> 10–14 ms). A larger cluster sets `shards`
/// when it is created; a data directory keeps its count (`shard_count.rs`
/// in the cluster crate), so one made with the old default must be
/// started with `shards = 16`.
pub const DEFAULT_SHARDS: u32 = 6;
/// The most shards a cluster may have; `shards` must lie in `1..=MAX_SHARDS`.
pub const MAX_SHARDS: u32 = 1024;
/// The most runtime threads `worker_threads` may ask for (a typo of a few
/// digits should not start thousands of threads).
pub const MAX_WORKER_THREADS: usize = 1024;
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// With an admin token, connections that have not authenticated share at
/// most this many of `max_connections` (`node/src/server/admission.rs`)...
pub const DEFAULT_MAX_UNAUTHENTICATED_CONNECTIONS: usize = 1_000;
/// ...at most this many from one source address...
pub const DEFAULT_MAX_UNAUTHENTICATED_PER_ADDRESS: usize = 64;
/// ...and this many are kept for the admin token alone.
pub const DEFAULT_ADMIN_RESERVED_CONNECTIONS: usize = 16;
/// With replies at most a few KiB (a 500-entity counts reply is the
/// largest), 256 unfinished requests bound what one client can make a
/// connection hold to about a MiB (README, "Limits").
pub const DEFAULT_MAX_IN_FLIGHT_PER_CONNECTION: usize = 256;
/// Bounds the results all connections hold at once (16,384 of the largest
/// reply, a 500-entity counts, is ~220 MiB); far above what the shards
/// serve concurrently.
pub const DEFAULT_MAX_REQUESTS_IN_FLIGHT: usize = 16_384;
pub const DEFAULT_CLIENT_IDLE_TIMEOUT_SECS: u64 = 300;
/// Long enough for a client across a slow link to send its first request,
/// short enough that connections opened and left silent go quickly.
pub const DEFAULT_CLIENT_AUTH_TIMEOUT_SECS: u64 = 10;
pub const DEFAULT_CLIENT_WRITE_TIMEOUT_SECS: u64 = 30;
pub const DEFAULT_CLIENT_FRAME_TIMEOUT_SECS: u64 = 30;
/// 128 frames of the largest size at once, whatever the number of connections.
pub const DEFAULT_CLIENT_FRAME_BUDGET_MB: u64 = 128;
pub const DEFAULT_MAX_PENDING_PER_SHARD: usize = 65_536;
pub const DEFAULT_BATCH_MAX_COMMANDS: usize = 4096;
/// One entry in flight per shard batches best on two cores: everything that
/// queues while it commits joins the next entry (measured: 9.3k likes/s at 1,
/// 7.1k at 2, 5.6k at 4 in docs/benchmarks.md).
pub const DEFAULT_MAX_PROPOSALS_IN_FLIGHT: usize = 1;
/// Active actors per kind (users, entities, boards) a node keeps, shared
/// among the shards it holds (`cluster/src/actor_budget.rs`):
/// 2,731 each when it holds the default 6, 1,024 each when it holds 16
/// (what every shard had when 16 was the default). Per node rather than
/// per shard, so that a cluster made with more shards does not hold more
/// in memory for it.
pub const DEFAULT_ACTOR_BUDGET: usize = 16_384;
/// Expired sub-boards are looked for once a minute: a window ends at most
/// once an hour, so a minute's delay costs little storage.
pub const DEFAULT_RETENTION_SWEEP_SECS: u64 = 60;
pub const DEFAULT_ACTOR_IDLE_SECS: u64 = 120;
/// Scoring events may be stamped up to a day past the node's clock (clients
/// whose clocks run ahead, time zones mistaken for UTC); later ones are
/// filtered, since retention would never delete the windows they create.
pub const DEFAULT_SCORE_FUTURE_HORIZON_SECS: u64 = 86_400;
/// Live sub-boards a ranking may hold unless it has a limit of its own
/// (`rank limit`): enough for 3,000 rooms' total, 30 daily and a few weekly
/// boards each, and a bound on what one scoring token can make the cluster
/// hold (a board is a few KiB at least).
pub const DEFAULT_MAX_BOARDS_PER_RANKING: u32 = 100_000;
pub const DEFAULT_HOT_CACHE_MIN_RPS: u64 = 500;
pub const DEFAULT_HOT_MOVE_AFTER_SECS: u64 = 10;
/// A sub-board remembers an event id for ten minutes: longer than every
/// retry the SDK and the CLI make (`actors/src/rankings/dedup.rs`).
pub const DEFAULT_EVENT_ID_WINDOW_SECS: u32 = 600;
/// At most this many ids per sub-board (~27 bytes each in memory): the
/// full window up to ~1,750 events a second on one board.
pub const DEFAULT_EVENT_IDS_PER_BOARD: u32 = 1 << 20;
/// The longest window: a day.
pub const MAX_EVENT_ID_WINDOW_SECS: u32 = 86_400;
pub const DEFAULT_SLED_CACHE_MB: u64 = 256;
/// Free space kept in reserve on the data directory's disk: below it, new
/// writes are refused (reads serve) until space is back.
pub const DEFAULT_MIN_FREE_DISK_MB: u64 = 256;
/// Resident memory at which new writes are refused (applied state lives in
/// memory); 0 takes 80% of what the process may use (`cluster/src/memory.rs`).
pub const DEFAULT_MAX_MEMORY_MB: u64 = 0;
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 5000;
pub const DEFAULT_SHUTDOWN_GRACE_MS: u64 = 10_000;
/// Failover waits for the followers' leader lease, which openraft 0.9 fixes
/// at `raft_election_max_ms` since the last heartbeat; a dead peer is seen
/// within ~50 ms, and its followers elect as soon as the lease allows
/// (docs/architecture.md). With 100/450/600 a SIGKILLed leader's shards take
/// writes again after 0.72 s (median of 12, 0.79 s max, docs/benchmarks.md), and a
/// follower's own timer elects only after 1.05 s without a heartbeat: no
/// election happened in 40 s of full load on two shared cores (measured).
pub const DEFAULT_RAFT_HEARTBEAT_MS: u64 = 100;
pub const DEFAULT_RAFT_ELECTION_MIN_MS: u64 = 450;
pub const DEFAULT_RAFT_ELECTION_MAX_MS: u64 = 600;
/// A peer not heard from for this long (it beats every 200 ms) is down:
/// long enough that a busy node's late beats are no false alarm, short
/// enough that a partition shows within about two election timeouts.
pub const DEFAULT_PEER_TIMEOUT_MS: u64 = 1000;
/// A member down this long is dead: its replicas are rebuilt on others.
pub const DEFAULT_DEAD_NODE_TIMEOUT_SECS: u64 = 300;
/// Replica moves one node takes part in at once.
pub const DEFAULT_MOVES_PER_NODE: usize = 2;
/// The rate a node sends snapshots at, all replicas together, in MiB/s.
pub const DEFAULT_SNAPSHOT_SEND_MIB_PER_SEC: u64 = 32;
pub const DEFAULT_SNAPSHOT_EVERY_ENTRIES: u64 = 50_000;
/// Log entries kept behind a snapshot, so a follower a little behind
/// catches up from the log rather than a whole snapshot.
pub const DEFAULT_SNAPSHOT_LOGS_TO_KEEP: u64 = 1000;
/// A shard's writes staged while a snapshot export held its trees still (or
/// since) move into the trees once this many distinct keys are staged or
/// the oldest is this old. Measured (likes mix, one run each): 1 s gave a
/// like p99 of 8.7 ms, 200 ms 6.1 ms, 100 ms 5.8 ms, at the same
/// throughput; boards were the same within noise (docs/benchmarks.md).
pub const DEFAULT_CHECKPOINT_KEYS: usize = 4096;
pub const DEFAULT_CHECKPOINT_MS: u64 = 100;
pub const DEFAULT_OUTBOX_BATCH: usize = 4096;
/// openraft logs every election and replication change at info; keep its
/// lifecycle noise out of the node log unless asked for.
/// ractor_cluster logs every session it opens and every duplicate session
/// it drops (two nodes dialing each other at once) at info and warn; the
/// control plane logs what matters (a node up or down) itself.
pub const DEFAULT_LOG: &str = "info,openraft=warn,ractor_cluster=error,ractor=warn";

/// Everything a node needs to know at start-up. See `deploy/plaudit.toml` for a
/// commented sample with every field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// This node's id in the cluster, unique and stable across restarts. Ids
    /// start at 1.
    pub node_id: u64,
    /// Takes the node id from the host name instead: its trailing number
    /// plus one (a StatefulSet's pod `plaudit-2` is node 3), from
    /// `$HOSTNAME`, else the kernel's host name.
    pub node_id_from_hostname: bool,
    /// Where the node keeps its sled database (Raft logs and shard state).
    pub data_dir: PathBuf,
    /// Address of the client protocol listener.
    pub listen: SocketAddr,
    /// Address of the admin HTTP listener (`/healthz`, `/readyz`, `/metrics`).
    pub admin: SocketAddr,
    /// Address of the peer listener: Raft traffic and the control plane
    /// between nodes.
    pub peer_listen: SocketAddr,
    /// Peer addresses of seed nodes to find the cluster through, as
    /// `host:port` (a name, resolved again at every dial, or an IP); this
    /// node's own may be among them, written as it advertises it. Empty: a
    /// one-node cluster.
    pub join: Vec<String>,
    /// The host (name or IP) other nodes and clients reach this node at:
    /// its addresses in the cluster map are this host with the listeners'
    /// ports. Unset: the listeners' own IPs, which then must not be
    /// 0.0.0.0 (or `::`).
    pub advertise: Option<String>,
    /// A brand-new cluster is formed by the nodes at the first this many
    /// seed addresses of `join` (sorted), once they have all found each
    /// other; other nodes only join. A node that has data ignores it. 0: 1
    /// without `join`, and with `join` never create, only join; 1 with
    /// `join` is refused.
    pub bootstrap_expect: u32,
    /// Replicas per shard (at most the number of nodes).
    pub replication_factor: u32,
    /// This node's failure domain (a rack, a zone): two replicas of a shard
    /// are not placed in one zone while another has room. Unset: its own.
    pub zone: Option<String>,
    /// The secret nodes of one cluster share (at least 16 bytes); peers
    /// without it are refused. Required with `join`. Prefer
    /// `cluster_secret_file`; never logged.
    pub cluster_secret: Secret,
    /// A file holding the cluster secret (surrounding whitespace ignored).
    pub cluster_secret_file: Option<PathBuf>,
    /// The admin token: a connection that presents it may do anything
    /// (create businesses, rankings and tokens). At least 16 bytes. Prefer
    /// `admin_token_file`; never logged. Without one, a node runs open:
    /// every connection may do anything, which it allows only on loopback
    /// addresses (or with `insecure`).
    pub admin_token: Secret,
    /// A file holding the admin token (surrounding whitespace ignored).
    pub admin_token_file: Option<PathBuf>,
    /// A file holding a token that reads `/metrics` on the admin port and
    /// nothing else: what a scraper is given off loopback instead of the
    /// admin token (16 to 256 bytes, whitespace around it ignored).
    pub metrics_token_file: Option<PathBuf>,
    /// The client listener's certificate chain (PEM): with `tls_key_file`,
    /// clients must speak TLS. Required off loopback on a node with an
    /// admin token (else `insecure`).
    pub tls_cert_file: Option<PathBuf>,
    /// The private key (PEM) of `tls_cert_file`'s certificate.
    pub tls_key_file: Option<PathBuf>,
    /// The CA (PEM) that signs every peer's certificate: with it, peers
    /// speak mutual TLS, each presenting `tls_cert_file` (which must name
    /// the host of the node's advertised peer address). Required when the
    /// peer listener is off loopback (else `insecure`).
    pub tls_ca_file: Option<PathBuf>,
    /// Lets a node listen on a non-loopback address without an admin token,
    /// or with one but without TLS.
    pub insecure: bool,
    /// Lets the admin endpoint cut and heal links to chosen peers
    /// (`POST /fault/links`): for tests only.
    pub fault_injection: bool,
    /// Number of shards the key space is split into, `1..=1024`.
    /// Fixed when the cluster is created.
    pub shards: u32,
    /// Number of Raft groups that host the shards (`cluster/src/layout.rs`:
    /// shard `s` in group `s % groups`); 0, the default, is one per shard.
    /// At most `shards`; fixed when the cluster is created, the same on
    /// every node.
    pub groups: u32,
    /// Threads of the node's runtime, which serve every connection, Raft
    /// group and actor; 0, the default, is `TOKIO_WORKER_THREADS` if set,
    /// else one per core the process may run on. Nodes that share cores
    /// (several on one machine) do better with fewer: two idle workers
    /// per node wake each other for every hand-off between tasks
    /// (`docs/benchmarks.md`, "Worker threads").
    pub worker_threads: usize,
    /// Most client connections open at once; further ones are refused.
    pub max_connections: usize,
    /// With an admin token: how many of `max_connections` connections that
    /// have not authenticated may hold at once; past it the one open
    /// longest is closed for a newcomer.
    pub max_unauthenticated_connections: usize,
    /// With an admin token: unauthenticated connections from one source
    /// address at once; past it newcomers from it are refused.
    pub max_unauthenticated_per_address: usize,
    /// With an admin token: connections of `max_connections` only the admin
    /// token may hold, so an operator always gets in.
    pub admin_reserved_connections: usize,
    /// Most requests one connection may have in flight (pipelined) at once.
    pub max_in_flight_per_connection: usize,
    /// Most requests in flight on all client connections together; beyond it
    /// requests are refused with `Overloaded`.
    pub max_requests_in_flight: usize,
    /// A client connection with nothing in flight that sends nothing for this
    /// long is closed, in seconds.
    pub client_idle_timeout_secs: u64,
    /// A client connection that sends no request (with tokens: does not
    /// authenticate) this long after connecting is closed, in seconds.
    pub client_auth_timeout_secs: u64,
    /// A client that reads none of its replies for this long is disconnected,
    /// in seconds.
    pub client_write_timeout_secs: u64,
    /// A request frame, once begun, must arrive whole within this, in seconds.
    pub client_frame_timeout_secs: u64,
    /// Memory all client connections together may use for frames longer than
    /// 64 KiB, in MiB (at least 2: one frame of the largest size).
    pub client_frame_budget_mb: u64,
    /// Most requests queued for one shard; beyond it requests are refused with
    /// `Overloaded`.
    pub max_pending_per_shard: usize,
    /// Most commands coalesced into one Raft entry.
    pub batch_max_commands: usize,
    /// Most Raft entries a shard leader has proposed but not yet seen applied.
    pub max_proposals_in_flight: usize,
    /// Active virtual actors per kind and node before the least recently
    /// used are passivated, shared among the shards the node holds.
    pub actor_budget: usize,
    /// Each shard's share instead of a part of `actor_budget`, when set
    /// (from any source: it wins over `actor_budget`).
    pub actor_budget_per_shard: Option<usize>,
    /// Seconds an actor may stay idle before it is passivated.
    pub actor_idle_secs: u64,
    /// Seconds between sweeps that delete sub-boards older than their ranking's retention.
    pub retention_sweep_secs: u64,
    /// How many seconds past this node's clock a scoring event may be
    /// stamped; a later event is reported `filtered` and stored nowhere.
    pub score_future_horizon_secs: u64,
    /// Live sub-boards a ranking without a limit of its own may hold; an
    /// event that would start one more is refused (`Refused`). 0: no limit.
    pub max_boards_per_ranking: u32,
    /// An entity or board that takes at least this many requests a second
    /// on this node is hot: the node tells clients that ask (the SDK, once
    /// a second) to serve its counts or pages from their own memory for a
    /// short time. 0: no key is hot, clients cache nothing.
    pub hot_cache_min_rps: u64,
    /// A board or an entity taking at least this many requests a second
    /// (summed over the nodes) for `hot_move_after_secs` is moved, on its
    /// own, to a shard led by a quieter node (an entity once at most), or
    /// the busiest node exchanges a shard's leadership with a quieter one
    /// when that relieves it by this much (`hot_move.rs`). 0: nothing
    /// moves unless `plaudit admin move` says so.
    pub hot_move_min_rps: u64,
    pub hot_move_after_secs: u64,
    /// Seconds a sub-board remembers a scoring event's id: a retry within
    /// this time is answered `duplicate` and counted once.
    pub event_id_window_secs: u32,
    /// Event ids a sub-board remembers at most; past it the oldest are
    /// forgotten first (a board busier than this many events per window).
    pub event_ids_per_board: u32,
    /// sled's page cache, in MiB.
    pub sled_cache_mb: u64,
    /// Free space, in MiB, kept in reserve on the data directory's disk:
    /// below it new writes get `Overloaded` and reads keep serving, until
    /// space is freed (checked every second). 0 turns the reserve off.
    pub min_free_disk_mb: u64,
    /// Resident memory, in MiB, at which new writes are refused (reads keep
    /// serving); 0: 80% of the memory the process may use.
    pub max_memory_mb: u64,
    /// How long a client request may take before it fails with `Timeout`, in ms.
    pub request_timeout_ms: u64,
    /// At shutdown, how long the node may take to hand its leaderships away
    /// (`admin drain`), and then open client connections to drain, in ms
    /// each; a last snapshot of every group, stopping Raft and flushing the
    /// log follow. Keep the whole below the pod's
    /// `terminationGracePeriodSeconds`.
    pub shutdown_grace_ms: u64,
    /// Raft heartbeat interval, in ms; must be below `raft_election_min_ms`.
    pub raft_heartbeat_ms: u64,
    /// Lower bound of the randomised Raft election timeout, in ms.
    pub raft_election_min_ms: u64,
    /// Upper bound of the randomised Raft election timeout, in ms; must be above
    /// `raft_election_min_ms`.
    pub raft_election_max_ms: u64,
    /// How long after a quorum accepted a leader's AppendEntries (timed
    /// from when it was sent) the leader answers linearizable reads from
    /// its own state, with no read-index round, in ms; 0 turns lease reads
    /// off. Must be below `raft_election_min_ms`: no voter that accepted
    /// can elect or be elected sooner (`cluster/src/lease.rs`). Relies on
    /// the nodes' clocks running at the same rate, not on their agreeing.
    /// Unset: half of `raft_election_min_ms`.
    pub raft_read_lease_ms: Option<u64>,
    /// A peer not heard from for this long is down, in ms: its sessions and
    /// connections are dropped and redialed, status says so, and routing
    /// stops choosing it. Peers beat every 200 ms.
    pub peer_timeout_ms: u64,
    /// A member down this long (as the metadata group's leader sees it) is
    /// dead: its replicas are rebuilt on other nodes, and if it comes back
    /// it is a member again (with its disk) or a new one (without).
    pub dead_node_timeout_secs: u64,
    /// Replica moves (rebalancing, decommissioning, rebuilding) one node
    /// takes part in at once, as source or target.
    pub moves_per_node: usize,
    /// The rate this node sends snapshots at (a replica moving to or being
    /// rebuilt on another node), all groups together, in MiB/s; 0: as fast
    /// as the network and disks go.
    pub snapshot_send_mib_per_sec: u64,
    /// A shard takes a snapshot (and may purge its log) after this many entries.
    pub snapshot_every_entries: u64,
    /// Log entries kept behind a snapshot when the log is purged.
    pub snapshot_logs_to_keep: u64,
    /// A shard writes its staged (applied, not yet stored) state to sled once
    /// this many distinct keys are staged.
    pub checkpoint_keys: usize,
    /// ... or once the oldest staged write is this old, in ms.
    pub checkpoint_ms: u64,
    /// Most outbox deltas delivered to another shard in one Raft entry.
    pub outbox_batch: usize,
    /// Log filter, a `tracing` `EnvFilter` directive such as
    /// `info,plaudit_cluster=debug`.
    pub log: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            node_id: DEFAULT_NODE_ID,
            node_id_from_hostname: false,
            data_dir: PathBuf::from(DEFAULT_DATA_DIR),
            listen: DEFAULT_LISTEN,
            admin: DEFAULT_ADMIN,
            peer_listen: DEFAULT_PEER_LISTEN,
            join: Vec::new(),
            advertise: None,
            bootstrap_expect: DEFAULT_BOOTSTRAP_EXPECT,
            replication_factor: DEFAULT_REPLICATION_FACTOR,
            zone: None,
            cluster_secret: Secret::default(),
            cluster_secret_file: None,
            admin_token: Secret::default(),
            admin_token_file: None,
            metrics_token_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            tls_ca_file: None,
            insecure: false,
            fault_injection: false,
            shards: DEFAULT_SHARDS,
            groups: 0,
            worker_threads: 0,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_unauthenticated_connections: DEFAULT_MAX_UNAUTHENTICATED_CONNECTIONS,
            max_unauthenticated_per_address: DEFAULT_MAX_UNAUTHENTICATED_PER_ADDRESS,
            admin_reserved_connections: DEFAULT_ADMIN_RESERVED_CONNECTIONS,
            max_in_flight_per_connection: DEFAULT_MAX_IN_FLIGHT_PER_CONNECTION,
            max_requests_in_flight: DEFAULT_MAX_REQUESTS_IN_FLIGHT,
            client_idle_timeout_secs: DEFAULT_CLIENT_IDLE_TIMEOUT_SECS,
            client_auth_timeout_secs: DEFAULT_CLIENT_AUTH_TIMEOUT_SECS,
            client_write_timeout_secs: DEFAULT_CLIENT_WRITE_TIMEOUT_SECS,
            client_frame_timeout_secs: DEFAULT_CLIENT_FRAME_TIMEOUT_SECS,
            client_frame_budget_mb: DEFAULT_CLIENT_FRAME_BUDGET_MB,
            max_pending_per_shard: DEFAULT_MAX_PENDING_PER_SHARD,
            batch_max_commands: DEFAULT_BATCH_MAX_COMMANDS,
            max_proposals_in_flight: DEFAULT_MAX_PROPOSALS_IN_FLIGHT,
            actor_budget: DEFAULT_ACTOR_BUDGET,
            actor_budget_per_shard: None,
            actor_idle_secs: DEFAULT_ACTOR_IDLE_SECS,
            retention_sweep_secs: DEFAULT_RETENTION_SWEEP_SECS,
            score_future_horizon_secs: DEFAULT_SCORE_FUTURE_HORIZON_SECS,
            max_boards_per_ranking: DEFAULT_MAX_BOARDS_PER_RANKING,
            hot_cache_min_rps: DEFAULT_HOT_CACHE_MIN_RPS,
            hot_move_min_rps: 0,
            hot_move_after_secs: DEFAULT_HOT_MOVE_AFTER_SECS,
            event_id_window_secs: DEFAULT_EVENT_ID_WINDOW_SECS,
            event_ids_per_board: DEFAULT_EVENT_IDS_PER_BOARD,
            sled_cache_mb: DEFAULT_SLED_CACHE_MB,
            min_free_disk_mb: DEFAULT_MIN_FREE_DISK_MB,
            max_memory_mb: DEFAULT_MAX_MEMORY_MB,
            request_timeout_ms: DEFAULT_REQUEST_TIMEOUT_MS,
            shutdown_grace_ms: DEFAULT_SHUTDOWN_GRACE_MS,
            raft_heartbeat_ms: DEFAULT_RAFT_HEARTBEAT_MS,
            raft_election_min_ms: DEFAULT_RAFT_ELECTION_MIN_MS,
            raft_election_max_ms: DEFAULT_RAFT_ELECTION_MAX_MS,
            raft_read_lease_ms: None,
            peer_timeout_ms: DEFAULT_PEER_TIMEOUT_MS,
            dead_node_timeout_secs: DEFAULT_DEAD_NODE_TIMEOUT_SECS,
            moves_per_node: DEFAULT_MOVES_PER_NODE,
            snapshot_send_mib_per_sec: DEFAULT_SNAPSHOT_SEND_MIB_PER_SEC,
            snapshot_every_entries: DEFAULT_SNAPSHOT_EVERY_ENTRIES,
            snapshot_logs_to_keep: DEFAULT_SNAPSHOT_LOGS_TO_KEEP,
            checkpoint_keys: DEFAULT_CHECKPOINT_KEYS,
            checkpoint_ms: DEFAULT_CHECKPOINT_MS,
            outbox_batch: DEFAULT_OUTBOX_BATCH,
            log: DEFAULT_LOG.to_string(),
        }
    }
}

impl Config {
    /// Reads the config file named by `--config` or `PLAUDIT_CONFIG` (if any),
    /// applies `PLAUDIT_*` variables from the process environment and then the
    /// flags, and validates the result.
    pub fn load(args: &Args) -> anyhow::Result<Config> {
        let mut env = sources::process_env()?;
        if !env.iter().any(|(k, _)| k == "HOSTNAME") {
            // A shell exports HOSTNAME, a container runtime sets it; a
            // service manager may not.
            if let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
                env.push(("HOSTNAME".to_string(), host.trim().to_string()));
            }
        }
        let path = args.config.clone().or_else(|| {
            env.iter().find(|(k, _)| k == ENV_CONFIG_FILE).map(|(_, v)| PathBuf::from(v))
        });
        let text = match &path {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .with_context(|| format!("reading config file {}", path.display()))?,
            ),
            None => None,
        };
        let config = Config::from_sources(text.as_deref(), &env, args);
        match &path {
            Some(path) => config.with_context(|| format!("config file {}", path.display())),
            None => config,
        }
    }

    /// Builds a validated config from a TOML text, environment variables and
    /// flags, in rising precedence. Pure: reads no file and no process state.
    ///
    /// Variables without the `PLAUDIT_` prefix are ignored, and so are
    /// `PLAUDIT_*` variables that name no field: Kubernetes injects service
    /// variables such as `PLAUDIT_SERVICE_HOST` into every pod of a namespace
    /// with a service called `plaudit`, so rejecting them would break a
    /// deployment. (Unknown keys in the file are rejected.)
    pub fn from_sources(
        toml: Option<&str>,
        env: &[(String, String)],
        args: &Args,
    ) -> anyhow::Result<Config> {
        let mut config = match toml {
            Some(text) => toml::from_str::<Config>(text).context("invalid config")?,
            None => Config::default(),
        };
        for (key, value) in env {
            let Some(field) = key.strip_prefix(ENV_PREFIX) else { continue };
            config
                .set_field(&field.to_ascii_lowercase(), value)
                .with_context(|| format!("environment variable {key}={value:?}"))?;
        }
        config.apply_args(args);
        if config.node_id_from_hostname {
            let host = env.iter().find(|(k, _)| k == "HOSTNAME").map_or("", |(_, v)| v.as_str());
            config.node_id = node_id_of_host(host.trim())
                .with_context(|| format!("node_id_from_hostname: host name {host:?}"))?;
        }
        config.validate()?;
        Ok(config)
    }
}

/// The node id of a host named like a StatefulSet's pod: its first label's
/// trailing number (after the last `-`) plus one.
fn node_id_of_host(host: &str) -> anyhow::Result<u64> {
    let first = host.split('.').next().unwrap_or_default();
    let ordinal = first.rsplit_once('-').map_or(first, |(_, n)| n);
    let n: u64 = ordinal.parse().context("the host name does not end in -<number>")?;
    n.checked_add(1).context("the ordinal is too large")
}

/// A secret that never appears in `Debug` output (configs get logged).
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub String);

impl Secret {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_empty() { "(none)" } else { "(redacted)" })
    }
}

mod args;
mod derived;
mod secrets;
mod sources;
mod validate;

pub use args::Args;

#[cfg(test)]
mod tests;
