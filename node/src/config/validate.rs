//! Checking a configuration: every bound, and the relations between
//! fields, each refusal naming the field and what is wrong.

use super::*;

impl Config {
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
        ensure!(
            self.groups <= self.shards,
            "groups must be at most shards ({}), got {} (0: one group per shard)",
            self.shards,
            self.groups
        );
        ensure!(
            self.worker_threads <= MAX_WORKER_THREADS,
            "worker_threads must be at most {MAX_WORKER_THREADS}, got {} (0: one per core)",
            self.worker_threads
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
        ensure!(
            self.bootstrap_expect != 1 || self.join.is_empty(),
            "bootstrap_expect 1 with join would form a one-node cluster of its own on a node \
             meant to join one (two clusters cannot be merged): use bootstrap_expect 0 to only \
             join, or the number of founders of the cluster being formed"
        );
        let seeds: std::collections::BTreeSet<_> = self.join.iter().collect();
        ensure!(
            self.bootstrap_expect as usize <= seeds.len() || self.join.is_empty(),
            "bootstrap_expect {} is more than the {} seeds in join: a new cluster is formed by \
             the nodes at the first bootstrap_expect seed addresses (sorted), so list them all",
            self.bootstrap_expect,
            seeds.len()
        );
        ensure!(self.replication_factor >= 1, "replication_factor must be at least 1");
        if let Some(z) = &self.zone {
            ensure!(
                !z.is_empty() && z.len() <= 64 && z.bytes().all(|b| b.is_ascii_graphic()),
                "zone must be 1..=64 printable characters, got {z:?}"
            );
        }
        for seed in &self.join {
            check_host_port(seed).with_context(|| format!("join: {seed:?}"))?;
        }
        match &self.advertise {
            Some(host) => check_host(host).with_context(|| format!("advertise: {host:?}"))?,
            None => {
                let addrs = [
                    ("listen", self.listen),
                    ("peer_listen", self.peer_listen),
                    ("admin", self.admin),
                ];
                for (name, addr) in addrs {
                    ensure!(
                        !addr.ip().is_unspecified(),
                        "{name} {addr} listens on every address: set advertise to the host \
                         other nodes and clients reach this node at"
                    );
                }
            }
        }
        if !self.join.is_empty() || self.bootstrap_expect > 1 {
            ensure!(
                !self.cluster_secret.is_empty() || self.cluster_secret_file.is_some(),
                "a cluster (join or bootstrap_expect > 1) needs cluster_secret_file \
                 (or cluster_secret): peers without it are refused"
            );
        }
        if !self.admin_token.is_empty() {
            check_admin_token(&self.admin_token.0, "admin_token")?;
        }
        if self.has_admin_token() {
            ensure!(
                self.max_unauthenticated_connections >= 1
                    && self.max_unauthenticated_per_address >= 1,
                "max_unauthenticated_connections and max_unauthenticated_per_address must be at \
                 least 1: a client must be able to connect to authenticate"
            );
            ensure!(
                self.max_unauthenticated_connections + self.admin_reserved_connections
                    < self.max_connections,
                "max_unauthenticated_connections ({}) + admin_reserved_connections ({}) must be \
                 below max_connections ({}): the rest is for authenticated clients",
                self.max_unauthenticated_connections,
                self.admin_reserved_connections,
                self.max_connections
            );
        }
        ensure!(
            self.tls_cert_file.is_some() == self.tls_key_file.is_some(),
            "tls_cert_file and tls_key_file go together: set both, or neither"
        );
        if self.has_admin_token() && self.tls_cert_file.is_none() && !self.insecure {
            ensure!(
                self.listen.ip().is_loopback(),
                "listen {} is not a loopback address and clients would send their tokens in \
                 clear: set tls_cert_file and tls_key_file, or pass --insecure",
                self.listen
            );
        }
        ensure!(
            self.tls_ca_file.is_none() || self.tls_cert_file.is_some(),
            "tls_ca_file needs tls_cert_file and tls_key_file: a node shows its peers a \
             certificate of that CA"
        );
        let has_peers = !self.cluster_secret.is_empty() || self.cluster_secret_file.is_some();
        if has_peers && self.tls_ca_file.is_none() && !self.insecure {
            ensure!(
                self.peer_listen.ip().is_loopback(),
                "peer_listen {} is not a loopback address and Raft messages and forwarded \
                 tokens would cross the network in clear: set tls_ca_file (with tls_cert_file \
                 and tls_key_file), or pass --insecure",
                self.peer_listen
            );
        }
        ensure!(
            self.metrics_token_file.is_none() || self.has_admin_token(),
            "metrics_token_file needs an admin token: without one the admin port asks for none"
        );
        if !self.has_admin_token() && !self.insecure {
            for (name, addr) in [("listen", self.listen), ("admin", self.admin)] {
                ensure!(
                    addr.ip().is_loopback(),
                    "{name} {addr} is not a loopback address and no admin token is set: set \
                     admin_token_file (or PLAUDIT_ADMIN_TOKEN), or pass --insecure to let anyone \
                     who can connect do anything"
                );
            }
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
            ("max_requests_in_flight", self.max_requests_in_flight as u64),
            ("client_idle_timeout_secs", self.client_idle_timeout_secs),
            ("client_auth_timeout_secs", self.client_auth_timeout_secs),
            ("client_write_timeout_secs", self.client_write_timeout_secs),
            ("client_frame_timeout_secs", self.client_frame_timeout_secs),
            ("max_pending_per_shard", self.max_pending_per_shard as u64),
            ("batch_max_commands", self.batch_max_commands as u64),
            ("max_proposals_in_flight", self.max_proposals_in_flight as u64),
            ("actor_budget", self.actor_budget as u64),
            ("actor_budget_per_shard", self.actor_budget_per_shard.unwrap_or(1) as u64),
            ("actor_idle_secs", self.actor_idle_secs),
            ("retention_sweep_secs", self.retention_sweep_secs),
            ("sled_cache_mb", self.sled_cache_mb),
            ("request_timeout_ms", self.request_timeout_ms),
            ("shutdown_grace_ms", self.shutdown_grace_ms),
            ("raft_heartbeat_ms", self.raft_heartbeat_ms),
            ("dead_node_timeout_secs", self.dead_node_timeout_secs),
            ("moves_per_node", self.moves_per_node as u64),
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
            self.peer_timeout_ms >= 500,
            "peer_timeout_ms must be at least 500 (peers beat every 200 ms)"
        );
        ensure!(
            self.raft_election_min_ms < self.raft_election_max_ms,
            "raft_election_min_ms ({}) must be less than raft_election_max_ms ({})",
            self.raft_election_min_ms,
            self.raft_election_max_ms
        );
        ensure!(
            self.read_lease_ms() < self.raft_election_min_ms,
            "raft_read_lease_ms ({}) must be less than raft_election_min_ms ({})",
            self.read_lease_ms(),
            self.raft_election_min_ms
        );
        ensure!(
            self.client_frame_budget_mb >= 2,
            "client_frame_budget_mb must be at least 2 (one frame of the largest size)"
        );
        ensure!(
            (1..=MAX_EVENT_ID_WINDOW_SECS).contains(&self.event_id_window_secs),
            "event_id_window_secs must be 1..={MAX_EVENT_ID_WINDOW_SECS}, got {}",
            self.event_id_window_secs
        );
        ensure!(
            self.event_ids_per_board >= 1,
            "event_ids_per_board must be at least 1 (0 would make every retry count again)"
        );
        ensure!(
            self.max_boards_per_ranking <= plaudit_proto::rankings::MAX_BOARD_LIMIT,
            "max_boards_per_ranking must be at most {} (0: no limit)",
            plaudit_proto::rankings::MAX_BOARD_LIMIT
        );
        ensure!(
            (1..=86_400).contains(&self.hot_move_after_secs),
            "hot_move_after_secs must be 1 to 86400, not {}",
            self.hot_move_after_secs
        );
        ensure!(
            i64::try_from(self.score_future_horizon_secs).is_ok(),
            "score_future_horizon_secs must be at most {}",
            i64::MAX
        );
        tracing_subscriber::EnvFilter::try_new(&self.log)
            .map_err(|e| anyhow::anyhow!("log {:?} is not a valid filter: {e}", self.log))?;
        Ok(())
    }
}

/// An admin token must be long enough not to be guessed, and must not look
/// like a business token (those are looked up in the registry instead).
pub(super) fn check_admin_token(token: &str, what: &str) -> anyhow::Result<()> {
    use plaudit_proto::auth::{MAX_TOKEN_LEN, MIN_ADMIN_TOKEN_LEN, TOKEN_PREFIX};
    ensure!(
        (MIN_ADMIN_TOKEN_LEN..=MAX_TOKEN_LEN).contains(&token.len()),
        "{what} must be {MIN_ADMIN_TOKEN_LEN} to {MAX_TOKEN_LEN} bytes"
    );
    ensure!(!token.starts_with(TOKEN_PREFIX), "{what} must not start with {TOKEN_PREFIX:?}");
    Ok(())
}

/// A host name (RFC 1123 labels) or an IP address.
fn check_host(host: &str) -> anyhow::Result<()> {
    if host.parse::<IpAddr>().is_ok() {
        return Ok(());
    }
    ensure!(!host.is_empty() && host.len() <= 253, "a host name is 1..=253 characters");
    for label in host.trim_end_matches('.').split('.') {
        ensure!(
            !label.is_empty()
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-'),
            "{label:?} is not a host name label (letters, digits and inner hyphens, 1..=63)"
        );
    }
    Ok(())
}

/// `host:port` (`[v6]:port` for an IPv6 address), port not 0.
fn check_host_port(seed: &str) -> anyhow::Result<()> {
    if seed.parse::<SocketAddr>().is_ok_and(|a| a.port() != 0) {
        return Ok(());
    }
    let (host, port) = seed.rsplit_once(':').context("expected host:port")?;
    let port: u16 = port.parse().context("the port is not a number in 1..=65535")?;
    ensure!(port != 0, "the port must not be 0");
    ensure!(!host.contains(':'), "an IPv6 address is written in brackets: [addr]:port");
    check_host(host)
}
