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
use std::fmt::Display;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

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
/// `join`, and never bootstrap (only join) with it.
pub const DEFAULT_BOOTSTRAP_EXPECT: u32 = 0;
pub const DEFAULT_REPLICATION_FACTOR: u32 = 3;
/// A cluster secret shorter than this is refused.
pub const MIN_SECRET_LEN: usize = 16;
pub const DEFAULT_SHARDS: u32 = 16;
/// The most shards a cluster may have; `shards` must lie in `1..=MAX_SHARDS`.
pub const MAX_SHARDS: u32 = 1024;
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
pub const DEFAULT_MAX_IN_FLIGHT_PER_CONNECTION: usize = 1024;
pub const DEFAULT_MAX_PENDING_PER_SHARD: usize = 65_536;
pub const DEFAULT_BATCH_MAX_COMMANDS: usize = 4096;
/// One entry in flight per shard batches best on two cores: everything that
/// queues while it commits joins the next entry (measured: 9.3k likes/s at 1,
/// 7.1k at 2, 5.6k at 4 in docs/benchmarks.md).
pub const DEFAULT_MAX_PROPOSALS_IN_FLIGHT: usize = 1;
/// Per kind (users, entities) and shard: 1024 x 2 x 16 shards bounds a node at
/// about 32k active actors (measured ~400 MiB RSS with the 256 MiB sled cache).
pub const DEFAULT_ACTOR_BUDGET_PER_SHARD: usize = 1024;
/// Expired sub-boards are looked for once a minute: a window ends at most
/// once an hour, so a minute's delay costs little storage.
pub const DEFAULT_RETENTION_SWEEP_SECS: u64 = 60;
pub const DEFAULT_ACTOR_IDLE_SECS: u64 = 120;
pub const DEFAULT_SLED_CACHE_MB: u64 = 256;
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 5000;
pub const DEFAULT_SHUTDOWN_GRACE_MS: u64 = 10_000;
/// Failover waits for the followers' leader lease, which openraft 0.9 fixes
/// at `raft_election_max_ms` since the last heartbeat; a dead peer is seen
/// within ~50 ms, and its followers elect as soon as the lease allows
/// (docs/architecture.md). With 100/450/600 a SIGKILLed leader's shards take
/// writes again after 0.75 s (median, 0.84 s max, docs/benchmarks.md), and a
/// follower's own timer elects only after 1.05 s without a heartbeat: no
/// election happened in 40 s of full load on two shared cores (measured).
pub const DEFAULT_RAFT_HEARTBEAT_MS: u64 = 100;
pub const DEFAULT_RAFT_ELECTION_MIN_MS: u64 = 450;
pub const DEFAULT_RAFT_ELECTION_MAX_MS: u64 = 600;
pub const DEFAULT_SNAPSHOT_EVERY_ENTRIES: u64 = 50_000;
/// Log entries kept behind a snapshot, so a follower a little behind
/// catches up from the log rather than a whole snapshot.
pub const DEFAULT_SNAPSHOT_LOGS_TO_KEEP: u64 = 1000;
/// Applied state is written behind: a shard's staged writes go to sled once
/// this many distinct keys are staged or the oldest is this old. Keys
/// written again before then reach sled once; a crash replays the log since
/// the last checkpoint, so these bound the replay and the memory they hold.
pub const DEFAULT_CHECKPOINT_KEYS: usize = 32_768;
pub const DEFAULT_CHECKPOINT_MS: u64 = 1000;
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
    /// Where the node keeps its sled database (Raft logs and shard state).
    pub data_dir: PathBuf,
    /// Address of the client protocol listener.
    pub listen: SocketAddr,
    /// Address of the admin HTTP listener (`/healthz`, `/readyz`, `/metrics`).
    pub admin: SocketAddr,
    /// Address of the peer listener: Raft traffic and the control plane
    /// between nodes.
    pub peer_listen: SocketAddr,
    /// Peer addresses of seed nodes to find the cluster through (this
    /// node's own may be among them). Empty: a one-node cluster.
    pub join: Vec<SocketAddr>,
    /// A brand-new cluster forms once this many nodes have found each other;
    /// the lowest id among them creates it. A node that has data ignores it.
    /// 0: 1 without `join`, and with `join` never create, only join.
    pub bootstrap_expect: u32,
    /// Replicas per shard (at most the number of nodes).
    pub replication_factor: u32,
    /// The secret nodes of one cluster share (at least 16 bytes); peers
    /// without it are refused. Required with `join`. Prefer
    /// `cluster_secret_file`; never logged.
    pub cluster_secret: Secret,
    /// A file holding the cluster secret (surrounding whitespace ignored).
    pub cluster_secret_file: Option<PathBuf>,
    /// Lets the admin endpoint cut and heal links to chosen peers
    /// (`POST /fault/links`): for tests only.
    pub fault_injection: bool,
    /// Number of shards (Raft groups) the key space is split into, `1..=1024`.
    /// Fixed when the cluster is created.
    pub shards: u32,
    /// Most client connections open at once; further ones are refused.
    pub max_connections: usize,
    /// Most requests one connection may have in flight (pipelined) at once.
    pub max_in_flight_per_connection: usize,
    /// Most requests queued for one shard; beyond it requests are refused with
    /// `Overloaded`.
    pub max_pending_per_shard: usize,
    /// Most commands coalesced into one Raft entry.
    pub batch_max_commands: usize,
    /// Most Raft entries a shard leader has proposed but not yet seen applied.
    pub max_proposals_in_flight: usize,
    /// Active virtual actors per shard before the least recently used are passivated.
    pub actor_budget_per_shard: usize,
    /// Seconds an actor may stay idle before it is passivated.
    pub actor_idle_secs: u64,
    /// Seconds between sweeps that delete sub-boards older than their ranking's retention.
    pub retention_sweep_secs: u64,
    /// sled's page cache, in MiB.
    pub sled_cache_mb: u64,
    /// How long a client request may take before it fails with `Timeout`, in ms.
    pub request_timeout_ms: u64,
    /// How long shutdown may take (drain connections, hand off leadership, flush)
    /// before the node exits anyway, in ms. Keep it below the pod's
    /// `terminationGracePeriodSeconds`.
    pub shutdown_grace_ms: u64,
    /// Raft heartbeat interval, in ms; must be below `raft_election_min_ms`.
    pub raft_heartbeat_ms: u64,
    /// Lower bound of the randomised Raft election timeout, in ms.
    pub raft_election_min_ms: u64,
    /// Upper bound of the randomised Raft election timeout, in ms; must be above
    /// `raft_election_min_ms`.
    pub raft_election_max_ms: u64,
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
            data_dir: PathBuf::from(DEFAULT_DATA_DIR),
            listen: DEFAULT_LISTEN,
            admin: DEFAULT_ADMIN,
            peer_listen: DEFAULT_PEER_LISTEN,
            join: Vec::new(),
            bootstrap_expect: DEFAULT_BOOTSTRAP_EXPECT,
            replication_factor: DEFAULT_REPLICATION_FACTOR,
            cluster_secret: Secret::default(),
            cluster_secret_file: None,
            fault_injection: false,
            shards: DEFAULT_SHARDS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_in_flight_per_connection: DEFAULT_MAX_IN_FLIGHT_PER_CONNECTION,
            max_pending_per_shard: DEFAULT_MAX_PENDING_PER_SHARD,
            batch_max_commands: DEFAULT_BATCH_MAX_COMMANDS,
            max_proposals_in_flight: DEFAULT_MAX_PROPOSALS_IN_FLIGHT,
            actor_budget_per_shard: DEFAULT_ACTOR_BUDGET_PER_SHARD,
            actor_idle_secs: DEFAULT_ACTOR_IDLE_SECS,
            retention_sweep_secs: DEFAULT_RETENTION_SWEEP_SECS,
            sled_cache_mb: DEFAULT_SLED_CACHE_MB,
            request_timeout_ms: DEFAULT_REQUEST_TIMEOUT_MS,
            shutdown_grace_ms: DEFAULT_SHUTDOWN_GRACE_MS,
            raft_heartbeat_ms: DEFAULT_RAFT_HEARTBEAT_MS,
            raft_election_min_ms: DEFAULT_RAFT_ELECTION_MIN_MS,
            raft_election_max_ms: DEFAULT_RAFT_ELECTION_MAX_MS,
            snapshot_every_entries: DEFAULT_SNAPSHOT_EVERY_ENTRIES,
            snapshot_logs_to_keep: DEFAULT_SNAPSHOT_LOGS_TO_KEEP,
            checkpoint_keys: DEFAULT_CHECKPOINT_KEYS,
            checkpoint_ms: DEFAULT_CHECKPOINT_MS,
            outbox_batch: DEFAULT_OUTBOX_BATCH,
            log: DEFAULT_LOG.to_string(),
        }
    }
}

/// Command-line flags. Each one, when given, overrides the file and the environment.
#[derive(Debug, Clone, Default, clap::Parser)]
#[command(name = "plaudit-node", version, about = "A Plaudit cluster node")]
pub struct Args {
    /// TOML config file (default: $PLAUDIT_CONFIG, else built-in defaults).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// This node's id in the cluster.
    #[arg(long)]
    pub node_id: Option<u64>,
    /// Directory for the node's database.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Client listener address, e.g. 0.0.0.0:7401.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Admin HTTP listener address, e.g. 0.0.0.0:7402.
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<SocketAddr>,
    /// Peer listener address (Raft and control plane), e.g. 0.0.0.0:7403.
    #[arg(long, value_name = "ADDR")]
    pub peer_listen: Option<SocketAddr>,
    /// Seed peer addresses, comma separated.
    #[arg(long, value_name = "ADDR,ADDR", value_delimiter = ',')]
    pub join: Option<Vec<SocketAddr>>,
    /// Form a new cluster once this many nodes have found each other.
    #[arg(long, value_name = "N")]
    pub bootstrap_expect: Option<u32>,
    /// File holding the cluster secret.
    #[arg(long, value_name = "PATH")]
    pub cluster_secret_file: Option<PathBuf>,
    /// Number of shards.
    #[arg(long)]
    pub shards: Option<u32>,
    /// Log filter (tracing EnvFilter directive).
    #[arg(long, value_name = "FILTER")]
    pub log: Option<String>,
}

impl Config {
    /// Reads the config file named by `--config` or `PLAUDIT_CONFIG` (if any),
    /// applies `PLAUDIT_*` variables from the process environment and then the
    /// flags, and validates the result.
    pub fn load(args: &Args) -> anyhow::Result<Config> {
        let env = process_env()?;
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
        config.validate()?;
        Ok(config)
    }

    /// Checks every bound and relation between fields, with a message naming
    /// the field and what is wrong.
    pub fn validate(&self) -> anyhow::Result<()> {
        ensure!(self.node_id >= 1, "node_id must be at least 1 (0 is reserved)");
        ensure!(!self.data_dir.as_os_str().is_empty(), "data_dir must not be empty");
        ensure!(
            (1..=MAX_SHARDS).contains(&self.shards),
            "shards must be in 1..={MAX_SHARDS}, got {}",
            self.shards
        );
        let addrs =
            [("listen", self.listen), ("admin", self.admin), ("peer_listen", self.peer_listen)];
        for (i, (a, x)) in addrs.iter().enumerate() {
            for (b, y) in &addrs[i + 1..] {
                if x == y && x.port() != 0 {
                    bail!("{a} and {b} must be different addresses, both are {x}");
                }
            }
        }
        ensure!(
            !(self.join.is_empty() && self.bootstrap_expect > 1),
            "bootstrap_expect {} needs join: the nodes must be able to find each other",
            self.bootstrap_expect
        );
        ensure!(self.replication_factor >= 1, "replication_factor must be at least 1");
        if !self.join.is_empty() || self.bootstrap_expect > 1 {
            ensure!(
                !self.cluster_secret.is_empty() || self.cluster_secret_file.is_some(),
                "a cluster (join or bootstrap_expect > 1) needs cluster_secret_file \
                 (or cluster_secret): peers without it are refused"
            );
        }
        if !self.cluster_secret.is_empty() {
            ensure!(
                self.cluster_secret.0.len() >= MIN_SECRET_LEN,
                "cluster_secret must be at least {MIN_SECRET_LEN} bytes"
            );
        }
        let non_zero = [
            ("max_connections", self.max_connections as u64),
            ("max_in_flight_per_connection", self.max_in_flight_per_connection as u64),
            ("max_pending_per_shard", self.max_pending_per_shard as u64),
            ("batch_max_commands", self.batch_max_commands as u64),
            ("max_proposals_in_flight", self.max_proposals_in_flight as u64),
            ("actor_budget_per_shard", self.actor_budget_per_shard as u64),
            ("actor_idle_secs", self.actor_idle_secs),
            ("retention_sweep_secs", self.retention_sweep_secs),
            ("sled_cache_mb", self.sled_cache_mb),
            ("request_timeout_ms", self.request_timeout_ms),
            ("shutdown_grace_ms", self.shutdown_grace_ms),
            ("raft_heartbeat_ms", self.raft_heartbeat_ms),
            ("snapshot_every_entries", self.snapshot_every_entries),
            ("snapshot_logs_to_keep", self.snapshot_logs_to_keep),
            ("checkpoint_keys", self.checkpoint_keys as u64),
            ("checkpoint_ms", self.checkpoint_ms),
            ("outbox_batch", self.outbox_batch as u64),
        ];
        for (name, value) in non_zero {
            ensure!(value > 0, "{name} must be greater than 0");
        }
        ensure!(
            self.raft_heartbeat_ms < self.raft_election_min_ms,
            "raft_heartbeat_ms ({}) must be less than raft_election_min_ms ({})",
            self.raft_heartbeat_ms,
            self.raft_election_min_ms
        );
        ensure!(
            self.raft_election_min_ms < self.raft_election_max_ms,
            "raft_election_min_ms ({}) must be less than raft_election_max_ms ({})",
            self.raft_election_min_ms,
            self.raft_election_max_ms
        );
        tracing_subscriber::EnvFilter::try_new(&self.log)
            .map_err(|e| anyhow::anyhow!("log {:?} is not a valid filter: {e}", self.log))?;
        Ok(())
    }

    /// `request_timeout_ms` as a `Duration`.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    /// `shutdown_grace_ms` as a `Duration`.
    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_millis(self.shutdown_grace_ms)
    }

    /// The checkpoint fields as the store takes them.
    pub fn checkpoint_policy(&self) -> plaudit_storage::CheckpointPolicy {
        plaudit_storage::CheckpointPolicy {
            max_keys: self.checkpoint_keys,
            max_age: Duration::from_millis(self.checkpoint_ms),
        }
    }

    /// How many nodes must find each other before a new cluster forms; 0:
    /// never form one, only join.
    pub fn effective_bootstrap_expect(&self) -> u32 {
        match (self.bootstrap_expect, self.join.is_empty()) {
            (0, true) => 1,
            (n, _) => n,
        }
    }

    /// The cluster secret, read from `cluster_secret_file` if set, else
    /// `cluster_secret`; `None` if neither is set (a one-node cluster).
    pub fn secret(&self) -> anyhow::Result<Option<Vec<u8>>> {
        if let Some(path) = &self.cluster_secret_file {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading cluster_secret_file {}", path.display()))?;
            let s = text.trim();
            ensure!(
                s.len() >= MIN_SECRET_LEN,
                "the cluster secret in {} must be at least {MIN_SECRET_LEN} bytes",
                path.display()
            );
            return Ok(Some(s.as_bytes().to_vec()));
        }
        Ok((!self.cluster_secret.is_empty()).then(|| self.cluster_secret.0.as_bytes().to_vec()))
    }

    /// `actor_idle_secs` as a `Duration`.
    pub fn actor_idle(&self) -> Duration {
        Duration::from_secs(self.actor_idle_secs)
    }

    /// Sets the field called `name` (lower case, as in the file) from its text
    /// form. A name that is no field is ignored (see [`Config::from_sources`]).
    fn set_field(&mut self, name: &str, value: &str) -> anyhow::Result<()> {
        match name {
            "node_id" => self.node_id = parse(value)?,
            "data_dir" => self.data_dir = PathBuf::from(value),
            "listen" => self.listen = parse(value)?,
            "admin" => self.admin = parse(value)?,
            "peer_listen" => self.peer_listen = parse(value)?,
            "join" => {
                self.join = value
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(parse)
                    .collect::<anyhow::Result<_>>()?
            }
            "bootstrap_expect" => self.bootstrap_expect = parse(value)?,
            "replication_factor" => self.replication_factor = parse(value)?,
            "cluster_secret" => self.cluster_secret = Secret(value.to_string()),
            "cluster_secret_file" => {
                self.cluster_secret_file = (!value.is_empty()).then(|| PathBuf::from(value))
            }
            "fault_injection" => self.fault_injection = parse(value)?,
            "snapshot_logs_to_keep" => self.snapshot_logs_to_keep = parse(value)?,
            "shards" => self.shards = parse(value)?,
            "max_connections" => self.max_connections = parse(value)?,
            "max_in_flight_per_connection" => self.max_in_flight_per_connection = parse(value)?,
            "max_pending_per_shard" => self.max_pending_per_shard = parse(value)?,
            "batch_max_commands" => self.batch_max_commands = parse(value)?,
            "max_proposals_in_flight" => self.max_proposals_in_flight = parse(value)?,
            "actor_budget_per_shard" => self.actor_budget_per_shard = parse(value)?,
            "actor_idle_secs" => self.actor_idle_secs = parse(value)?,
            "retention_sweep_secs" => self.retention_sweep_secs = parse(value)?,
            "sled_cache_mb" => self.sled_cache_mb = parse(value)?,
            "request_timeout_ms" => self.request_timeout_ms = parse(value)?,
            "shutdown_grace_ms" => self.shutdown_grace_ms = parse(value)?,
            "raft_heartbeat_ms" => self.raft_heartbeat_ms = parse(value)?,
            "raft_election_min_ms" => self.raft_election_min_ms = parse(value)?,
            "raft_election_max_ms" => self.raft_election_max_ms = parse(value)?,
            "snapshot_every_entries" => self.snapshot_every_entries = parse(value)?,
            "checkpoint_keys" => self.checkpoint_keys = parse(value)?,
            "checkpoint_ms" => self.checkpoint_ms = parse(value)?,
            "outbox_batch" => self.outbox_batch = parse(value)?,
            "log" => self.log = value.to_string(),
            _ => {}
        }
        Ok(())
    }

    fn apply_args(&mut self, args: &Args) {
        // `config` is not a field: it chose the file this config started from.
        let Args {
            config: _,
            node_id,
            data_dir,
            listen,
            admin,
            peer_listen,
            join,
            bootstrap_expect,
            cluster_secret_file,
            shards,
            log,
        } = args;
        if let Some(v) = peer_listen {
            self.peer_listen = *v;
        }
        if let Some(v) = join {
            self.join = v.clone();
        }
        if let Some(v) = bootstrap_expect {
            self.bootstrap_expect = *v;
        }
        if let Some(v) = cluster_secret_file {
            self.cluster_secret_file = Some(v.clone());
        }
        if let Some(v) = node_id {
            self.node_id = *v;
        }
        if let Some(v) = data_dir {
            self.data_dir = v.clone();
        }
        if let Some(v) = listen {
            self.listen = *v;
        }
        if let Some(v) = admin {
            self.admin = *v;
        }
        if let Some(v) = shards {
            self.shards = *v;
        }
        if let Some(v) = log {
            self.log = v.clone();
        }
    }
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

fn parse<T: FromStr>(value: &str) -> anyhow::Result<T>
where
    T::Err: Display,
{
    value.trim().parse().map_err(|e| anyhow::anyhow!("{e}"))
}

/// The process's `PLAUDIT_*` variables. A non-UTF-8 value of one of them is an
/// error; other variables are not looked at.
fn process_env() -> anyhow::Result<Vec<(String, String)>> {
    let mut vars = Vec::new();
    for (key, value) in std::env::vars_os() {
        let Some(key) = key.to_str().filter(|k| k.starts_with(ENV_PREFIX)) else { continue };
        let Ok(value) = value.into_string() else {
            bail!("environment variable {key} is not valid UTF-8");
        };
        vars.push((key.to_string(), value));
    }
    Ok(vars)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn args(flags: &[&str]) -> Args {
        Args::try_parse_from(std::iter::once("plaudit-node").chain(flags.iter().copied()))
            .expect("flags parse")
    }

    fn error_text(err: anyhow::Error) -> String {
        format!("{err:#}")
    }

    #[test]
    fn no_sources_give_the_documented_defaults() {
        let config = Config::from_sources(None, &[], &Args::default()).unwrap();
        assert_eq!(config, Config::default());
        assert_eq!(config.listen.to_string(), "127.0.0.1:7401");
        assert_eq!(config.admin.to_string(), "127.0.0.1:7402");
        assert_eq!(config.shards, 16);
        assert_eq!(config.log, DEFAULT_LOG);
    }

    #[test]
    fn flags_beat_env_and_env_beats_file() {
        let file = "shards = 8\nnode_id = 2\nlog = \"warn\"\nsled_cache_mb = 64\n";
        let vars = env(&[("PLAUDIT_SHARDS", "32"), ("PLAUDIT_NODE_ID", "3")]);

        let from_file = Config::from_sources(Some(file), &[], &Args::default()).unwrap();
        assert_eq!((from_file.shards, from_file.node_id), (8, 2));

        let with_env = Config::from_sources(Some(file), &vars, &Args::default()).unwrap();
        assert_eq!((with_env.shards, with_env.node_id), (32, 3));
        assert_eq!(with_env.log, "warn", "a field no env var sets keeps the file's value");
        assert_eq!(with_env.sled_cache_mb, 64);

        let flags = args(&["--shards", "64", "--log", "debug"]);
        let with_flags = Config::from_sources(Some(file), &vars, &flags).unwrap();
        assert_eq!((with_flags.shards, with_flags.node_id), (64, 3));
        assert_eq!(with_flags.log, "debug");
        assert_eq!(with_flags.raft_heartbeat_ms, DEFAULT_RAFT_HEARTBEAT_MS);
    }

    #[test]
    fn every_flag_overrides_its_field() {
        let flags = args(&[
            "--node-id=7",
            "--data-dir=/var/lib/plaudit",
            "--listen=0.0.0.0:9000",
            "--admin=0.0.0.0:9001",
            "--shards=2",
            "--log=plaudit_node=trace",
        ]);
        let config = Config::from_sources(None, &[], &flags).unwrap();
        assert_eq!(config.node_id, 7);
        assert_eq!(config.data_dir, PathBuf::from("/var/lib/plaudit"));
        assert_eq!(config.listen.to_string(), "0.0.0.0:9000");
        assert_eq!(config.admin.to_string(), "0.0.0.0:9001");
        assert_eq!(config.shards, 2);
        assert_eq!(config.log, "plaudit_node=trace");
    }

    #[test]
    fn every_field_can_be_set_from_the_environment() {
        // Serialise a config whose every field differs from the default, feed
        // each field back as PLAUDIT_<FIELD>, and expect the same config.
        let wanted = Config {
            node_id: 9,
            data_dir: PathBuf::from("/d"),
            listen: "10.0.0.1:1".parse().unwrap(),
            admin: "10.0.0.1:2".parse().unwrap(),
            peer_listen: "10.0.0.1:3".parse().unwrap(),
            join: vec!["10.0.0.2:3".parse().unwrap(), "10.0.0.3:3".parse().unwrap()],
            bootstrap_expect: 3,
            replication_factor: 2,
            cluster_secret: Secret("0123456789abcdef-secret".into()),
            cluster_secret_file: Some(PathBuf::from("/etc/plaudit/secret")),
            fault_injection: true,
            shards: 3,
            max_connections: 4,
            max_in_flight_per_connection: 5,
            max_pending_per_shard: 6,
            batch_max_commands: 7,
            max_proposals_in_flight: 8,
            actor_budget_per_shard: 9,
            actor_idle_secs: 10,
            retention_sweep_secs: 19,
            sled_cache_mb: 11,
            request_timeout_ms: 12,
            shutdown_grace_ms: 13,
            raft_heartbeat_ms: 14,
            raft_election_min_ms: 15,
            raft_election_max_ms: 16,
            snapshot_every_entries: 17,
            snapshot_logs_to_keep: 22,
            checkpoint_keys: 20,
            checkpoint_ms: 21,
            outbox_batch: 18,
            log: "debug".to_string(),
        };
        let table = toml::Table::try_from(&wanted).unwrap();
        let vars: Vec<(String, String)> = table
            .iter()
            .map(|(key, value)| {
                let text = match value {
                    toml::Value::String(s) => s.clone(),
                    // Lists are comma separated in a variable.
                    toml::Value::Array(items) => items
                        .iter()
                        .map(|i| i.as_str().map(str::to_string).unwrap_or_else(|| i.to_string()))
                        .collect::<Vec<_>>()
                        .join(","),
                    other => other.to_string(),
                };
                (format!("PLAUDIT_{}", key.to_ascii_uppercase()), text)
            })
            .collect();
        let got = Config::from_sources(None, &vars, &Args::default()).unwrap();
        assert_eq!(got, wanted);
    }

    #[test]
    fn cluster_flags_parse_and_bootstrap_expect_defaults_by_join() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "  a-long-enough-cluster-secret\n").unwrap();
        let secret_flag = format!("--cluster-secret-file={}", secret.display());
        let flags = args(&[
            "--node-id=2",
            "--peer-listen=127.0.0.1:7413",
            "--join=127.0.0.1:7403,127.0.0.1:7413,127.0.0.1:7423",
            "--bootstrap-expect=3",
            &secret_flag,
        ]);
        let c = Config::from_sources(None, &[], &flags).unwrap();
        assert_eq!(c.peer_listen.to_string(), "127.0.0.1:7413");
        assert_eq!(c.join.len(), 3);
        assert_eq!(c.effective_bootstrap_expect(), 3);
        assert_eq!(c.secret().unwrap().unwrap(), b"a-long-enough-cluster-secret");

        let single = Config::default();
        assert_eq!(single.effective_bootstrap_expect(), 1, "no join: a one-node cluster");
        assert_eq!(single.secret().unwrap(), None);
        let joiner = Config { join: c.join.clone(), ..c.clone() };
        assert_eq!(Config { bootstrap_expect: 0, ..joiner }.effective_bootstrap_expect(), 0);
    }

    #[test]
    fn a_cluster_needs_a_secret_that_is_never_printed() {
        let text = invalid("join = [\"127.0.0.1:7403\"]");
        assert!(text.contains("cluster_secret_file"), "{text}");
        assert!(invalid("bootstrap_expect = 3").contains("needs join"));
        let short = "join = [\"127.0.0.1:7403\"]\ncluster_secret = \"short\"";
        assert!(invalid(short).contains("at least 16 bytes"));
        let ok = "join = [\"127.0.0.1:7403\"]\ncluster_secret = \"0123456789abcdef-x\"";
        let c = Config::from_sources(Some(ok), &[], &Args::default()).unwrap();
        let shown = format!("{c:?}");
        assert!(!shown.contains("0123456789abcdef"), "{shown}");
        assert!(shown.contains("(redacted)"), "{shown}");
    }

    #[test]
    fn unknown_field_in_file_is_rejected() {
        let err = Config::from_sources(Some("shard = 4\n"), &[], &Args::default()).unwrap_err();
        let text = error_text(err);
        assert!(text.contains("unknown field") && text.contains("shard"), "{text}");
    }

    #[test]
    fn wrongly_typed_field_in_file_is_rejected() {
        let err =
            Config::from_sources(Some("shards = \"many\"\n"), &[], &Args::default()).unwrap_err();
        assert!(error_text(err).contains("shards"));
    }

    #[test]
    fn bad_env_value_names_the_variable() {
        let vars = env(&[("PLAUDIT_SHARDS", "lots")]);
        let text = error_text(Config::from_sources(None, &vars, &Args::default()).unwrap_err());
        assert!(text.contains("PLAUDIT_SHARDS"), "{text}");

        let vars = env(&[("PLAUDIT_LISTEN", "localhost")]);
        let text = error_text(Config::from_sources(None, &vars, &Args::default()).unwrap_err());
        assert!(text.contains("PLAUDIT_LISTEN"), "{text}");
    }

    #[test]
    fn env_names_are_case_insensitive_after_the_prefix_and_values_are_trimmed() {
        let vars = env(&[("PLAUDIT_Shards", " 4 ")]);
        assert_eq!(Config::from_sources(None, &vars, &Args::default()).unwrap().shards, 4);
    }

    #[test]
    fn unrelated_and_kubernetes_service_variables_are_ignored() {
        let vars = env(&[
            ("HOME", "/root"),
            ("PLAUDIT_SERVICE_HOST", "10.0.0.1"),
            ("PLAUDIT_PORT_7401_TCP", "tcp://10.0.0.1:7401"),
            ("PLAUDIT_CONFIG", "/etc/plaudit.toml"),
        ]);
        assert_eq!(Config::from_sources(None, &vars, &Args::default()).unwrap(), Config::default());
    }

    fn invalid(file: &str) -> String {
        error_text(Config::from_sources(Some(file), &[], &Args::default()).unwrap_err())
    }

    #[test]
    fn shards_must_be_in_range() {
        assert!(invalid("shards = 0").contains("shards must be in 1..=1024"));
        assert!(invalid("shards = 1025").contains("got 1025"));
        assert!(Config::from_sources(Some("shards = 1024"), &[], &Args::default()).is_ok());
        assert!(Config::from_sources(Some("shards = 1"), &[], &Args::default()).is_ok());
    }

    #[test]
    fn raft_timers_must_be_ordered() {
        let text = invalid("raft_election_min_ms = 2000\nraft_election_max_ms = 2000");
        assert!(text.contains("raft_election_min_ms (2000) must be less than"), "{text}");
        let text = invalid("raft_heartbeat_ms = 1000");
        assert!(text.contains("raft_heartbeat_ms (1000) must be less than"), "{text}");
    }

    #[test]
    fn limits_must_be_non_zero() {
        for field in [
            "max_connections",
            "max_in_flight_per_connection",
            "max_pending_per_shard",
            "batch_max_commands",
            "max_proposals_in_flight",
            "actor_budget_per_shard",
            "request_timeout_ms",
            "snapshot_every_entries",
            "outbox_batch",
        ] {
            let text = invalid(&format!("{field} = 0"));
            assert!(text.contains(&format!("{field} must be greater than 0")), "{text}");
        }
        assert!(invalid("node_id = 0").contains("node_id"));
    }

    #[test]
    fn listen_and_admin_must_differ_and_log_must_parse() {
        let text = invalid("listen = \"127.0.0.1:9000\"\nadmin = \"127.0.0.1:9000\"");
        assert!(text.contains("listen and admin"), "{text}");
        // Port 0 asks the OS for a fresh port each time, so it may repeat.
        let both_zero = "listen = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"";
        assert!(Config::from_sources(Some(both_zero), &[], &Args::default()).is_ok());
        assert!(invalid("log = \"info,[\"").contains("log"));
    }

    #[test]
    fn the_sample_file_lists_every_field_at_its_default() {
        let sample = include_str!("../../deploy/plaudit.toml");
        let parsed = Config::from_sources(Some(sample), &[], &Args::default()).unwrap();
        assert_eq!(parsed, Config::default());
        let sample_keys: Vec<String> =
            toml::from_str::<toml::Table>(sample).unwrap().keys().cloned().collect();
        let field_keys: Vec<String> =
            toml::Table::try_from(Config::default()).unwrap().keys().cloned().collect();
        assert_eq!(sample_keys.len(), field_keys.len());
        for key in field_keys {
            assert!(sample_keys.contains(&key), "deploy/plaudit.toml lacks {key}");
        }
    }

    #[test]
    fn load_reads_the_file_named_by_the_flag() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plaudit.toml");
        std::fs::write(&path, "shards = 5\n").unwrap();
        let flags = Args { config: Some(path.clone()), ..Args::default() };
        assert_eq!(Config::load(&flags).unwrap().shards, 5);

        std::fs::write(&path, "shards = 5000\n").unwrap();
        let text = error_text(Config::load(&flags).unwrap_err());
        assert!(text.contains(&path.display().to_string()) && text.contains("shards"), "{text}");

        let missing = Args { config: Some(dir.path().join("nope.toml")), ..Args::default() };
        assert!(error_text(Config::load(&missing).unwrap_err()).contains("nope.toml"));
    }
}
