//! What an engine is started with: storage and Raft settings, budgets, and
//! where the node sits in its cluster (identity, seeds, secret).

use crate::group::GroupConfig;
use crate::types::NodeId;
use plaudit_proto::cluster::NodeInfo;
use std::path::PathBuf;
use std::time::Duration;

/// Where this node sits in a cluster.
#[derive(Clone)]
pub struct ClusterConfig {
    /// This node: id and the addresses others use to reach it.
    pub me: NodeInfo,
    /// Peer addresses of seed nodes.
    pub seeds: Vec<String>,
    /// Nodes that must find each other before a new cluster forms; 0 never
    /// forms one (join only), 1 forms a one-node cluster at once.
    pub bootstrap_expect: u32,
    pub replication_factor: u32,
    /// The cluster secret; `None` for a node that has no peers.
    pub secret: Option<Vec<u8>>,
    /// A peer not heard from this long is down (`liveness.rs`).
    pub peer_timeout: Duration,
    /// This node's failure domain (`--zone`), if any.
    pub zone: Option<String>,
    /// A member down this long is dead: its replicas are rebuilt elsewhere.
    pub dead_node_timeout: Duration,
    /// Replica moves in flight per node, as source or target.
    pub moves_per_node: usize,
    /// Bytes a second this node sends snapshots at, all groups together
    /// (0: unpaced).
    pub snapshot_send_rate: u64,
    /// Mutual TLS with every peer (`peer/tls.rs`); `None`: plain TCP.
    pub tls: Option<crate::peer::tls::PeerTls>,
}

impl std::fmt::Debug for ClusterConfig {
    // By hand: the secret must never reach a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterConfig")
            .field("me", &self.me)
            .field("seeds", &self.seeds)
            .field("bootstrap_expect", &self.bootstrap_expect)
            .field("replication_factor", &self.replication_factor)
            .field("peer_timeout", &self.peer_timeout)
            .field("zone", &self.zone)
            .field("dead_node_timeout", &self.dead_node_timeout)
            .field("moves_per_node", &self.moves_per_node)
            .field("snapshot_send_rate", &self.snapshot_send_rate)
            .field("secret", &self.secret.as_ref().map(|_| "(redacted)"))
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl ClusterConfig {
    /// A one-node cluster on the given node id (tests, the demo).
    pub fn single(id: NodeId) -> ClusterConfig {
        ClusterConfig {
            me: NodeInfo { id, client: String::new(), peer: String::new(), admin: String::new() },
            seeds: Vec::new(),
            bootstrap_expect: 1,
            replication_factor: 1,
            secret: None,
            peer_timeout: Duration::from_secs(1),
            zone: None,
            dead_node_timeout: Duration::from_secs(300),
            moves_per_node: 2,
            snapshot_send_rate: 32 << 20,
            tls: None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub data_dir: PathBuf,
    pub shards: u32,
    /// Raft groups hosting the data shards (`layout.rs`); 0: one per shard.
    pub groups: u32,
    pub group: GroupConfig,
    /// Active actors per kind on this node, shared among the data groups
    /// it holds a replica of (`shard_share`).
    pub actor_budget: usize,
    /// Each shard's share instead, when set.
    pub actor_budget_per_shard: Option<usize>,
    pub actor_idle: Duration,
    /// How often expired sub-boards are looked for and deleted.
    pub retention_sweep: Duration,
    /// How far past this node's clock a scoring event may be stamped; a
    /// later one is filtered (`actors::rankings::route`).
    pub score_future_horizon: Duration,
    /// The limit of live sub-boards of a ranking without one of its own
    /// (`board_limit.rs`); 0: none.
    pub max_boards_per_ranking: u32,
    /// A key taking at least this many requests a second on this node is
    /// one clients are told to cache (`HotSet`); 0: none is.
    pub hot_cache_min_rps: u64,
    /// A board at this many requests a second or more (summed over the
    /// nodes), for `hot_move_after`, is moved to a quieter node's shard
    /// (`hot_move.rs`); 0: never on its own.
    pub hot_move_min_rps: u64,
    pub hot_move_after: Duration,
    /// A pause of the board mover before each step of a move (0 but in
    /// fault-injection tests, which SIGKILL a node in the middle of one).
    pub move_step_pause: Duration,
    /// The largest copy a move carries (`actor_mover::MAX_COPY_BYTES`
    /// but in fault-injection tests, which make every copy too large).
    pub move_max_copy_bytes: usize,
    /// How long a sub-board remembers an event id, and how many it holds
    /// (stamped into every score command this node proposes).
    pub event_ids: plaudit_actors::command::Dedup,
    /// When staged applied state is written to sled.
    pub checkpoint: plaudit_storage::CheckpointPolicy,
    pub outbox_batch: usize,
    pub sled_cache_bytes: u64,
    pub cluster: ClusterConfig,
    /// How long a request may spend finding its shard's leader.
    pub request_timeout: Duration,
}
