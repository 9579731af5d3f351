//! Where a config's values come from besides the TOML file: `PLAUDIT_*`
//! variables (by field name) and command-line flags.

use super::{Args, Config, Secret, ENV_PREFIX};
use anyhow::bail;
use std::fmt::Display;
use std::path::PathBuf;
use std::str::FromStr;

impl Config {
    /// Sets the field called `name` (lower case, as in the file) from its text
    /// form. A name that is no field is ignored (see [`Config::from_sources`]).
    pub(super) fn set_field(&mut self, name: &str, value: &str) -> anyhow::Result<()> {
        match name {
            "node_id" => self.node_id = parse(value)?,
            "node_id_from_hostname" => self.node_id_from_hostname = parse(value)?,
            "data_dir" => self.data_dir = PathBuf::from(value),
            "listen" => self.listen = parse(value)?,
            "admin" => self.admin = parse(value)?,
            "peer_listen" => self.peer_listen = parse(value)?,
            "join" => {
                self.join = value
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            }
            "advertise" => self.advertise = Some(value.to_string()).filter(|a| !a.is_empty()),
            "bootstrap_expect" => self.bootstrap_expect = parse(value)?,
            "replication_factor" => self.replication_factor = parse(value)?,
            "zone" => self.zone = Some(value.to_string()).filter(|z| !z.is_empty()),
            "cluster_secret" => self.cluster_secret = Secret(value.to_string()),
            "cluster_secret_file" => {
                self.cluster_secret_file = (!value.is_empty()).then(|| PathBuf::from(value))
            }
            "fault_injection" => self.fault_injection = parse(value)?,
            "admin_token" => self.admin_token = Secret(value.to_string()),
            "admin_token_file" => {
                self.admin_token_file = (!value.is_empty()).then(|| PathBuf::from(value))
            }
            "tls_cert_file" => self.tls_cert_file = (!value.is_empty()).then(|| value.into()),
            "tls_key_file" => self.tls_key_file = (!value.is_empty()).then(|| value.into()),
            "tls_ca_file" => self.tls_ca_file = (!value.is_empty()).then(|| value.into()),
            "metrics_token_file" => {
                self.metrics_token_file = (!value.is_empty()).then(|| PathBuf::from(value))
            }
            "insecure" => self.insecure = parse(value)?,
            "snapshot_logs_to_keep" => self.snapshot_logs_to_keep = parse(value)?,
            "shards" => self.shards = parse(value)?,
            "groups" => self.groups = parse(value)?,
            "worker_threads" => self.worker_threads = parse(value)?,
            "max_connections" => self.max_connections = parse(value)?,
            "max_unauthenticated_connections" => {
                self.max_unauthenticated_connections = parse(value)?
            }
            "max_unauthenticated_per_address" => {
                self.max_unauthenticated_per_address = parse(value)?
            }
            "admin_reserved_connections" => self.admin_reserved_connections = parse(value)?,
            "max_in_flight_per_connection" => self.max_in_flight_per_connection = parse(value)?,
            "max_requests_in_flight" => self.max_requests_in_flight = parse(value)?,
            "client_idle_timeout_secs" => self.client_idle_timeout_secs = parse(value)?,
            "client_auth_timeout_secs" => self.client_auth_timeout_secs = parse(value)?,
            "client_write_timeout_secs" => self.client_write_timeout_secs = parse(value)?,
            "client_frame_timeout_secs" => self.client_frame_timeout_secs = parse(value)?,
            "client_frame_budget_mb" => self.client_frame_budget_mb = parse(value)?,
            "max_pending_per_shard" => self.max_pending_per_shard = parse(value)?,
            "batch_max_commands" => self.batch_max_commands = parse(value)?,
            "max_proposals_in_flight" => self.max_proposals_in_flight = parse(value)?,
            "actor_budget" => self.actor_budget = parse(value)?,
            "actor_budget_per_shard" => self.actor_budget_per_shard = Some(parse(value)?),
            "actor_idle_secs" => self.actor_idle_secs = parse(value)?,
            "retention_sweep_secs" => self.retention_sweep_secs = parse(value)?,
            "score_future_horizon_secs" => self.score_future_horizon_secs = parse(value)?,
            "max_boards_per_ranking" => self.max_boards_per_ranking = parse(value)?,
            "hot_cache_min_rps" => self.hot_cache_min_rps = parse(value)?,
            "hot_move_min_rps" => self.hot_move_min_rps = parse(value)?,
            "hot_move_after_secs" => self.hot_move_after_secs = parse(value)?,
            "event_id_window_secs" => self.event_id_window_secs = parse(value)?,
            "event_ids_per_board" => self.event_ids_per_board = parse(value)?,
            "sled_cache_mb" => self.sled_cache_mb = parse(value)?,
            "min_free_disk_mb" => self.min_free_disk_mb = parse(value)?,
            "max_memory_mb" => self.max_memory_mb = parse(value)?,
            "request_timeout_ms" => self.request_timeout_ms = parse(value)?,
            "shutdown_grace_ms" => self.shutdown_grace_ms = parse(value)?,
            "raft_heartbeat_ms" => self.raft_heartbeat_ms = parse(value)?,
            "raft_election_min_ms" => self.raft_election_min_ms = parse(value)?,
            "raft_election_max_ms" => self.raft_election_max_ms = parse(value)?,
            "raft_read_lease_ms" => self.raft_read_lease_ms = Some(parse(value)?),
            "peer_timeout_ms" => self.peer_timeout_ms = parse(value)?,
            "dead_node_timeout_secs" => self.dead_node_timeout_secs = parse(value)?,
            "moves_per_node" => self.moves_per_node = parse(value)?,
            "snapshot_send_mib_per_sec" => self.snapshot_send_mib_per_sec = parse(value)?,
            "snapshot_every_entries" => self.snapshot_every_entries = parse(value)?,
            "checkpoint_keys" => self.checkpoint_keys = parse(value)?,
            "checkpoint_ms" => self.checkpoint_ms = parse(value)?,
            "outbox_batch" => self.outbox_batch = parse(value)?,
            "log" => self.log = value.to_string(),
            _ => {}
        }
        Ok(())
    }

    pub(super) fn apply_args(&mut self, args: &Args) {
        // `config` is not a field: it chose the file this config started from.
        let Args {
            config: _,
            node_id,
            node_id_from_hostname,
            data_dir,
            listen,
            admin,
            peer_listen,
            join,
            advertise,
            bootstrap_expect,
            zone,
            cluster_secret_file,
            admin_token_file,
            metrics_token_file,
            tls_cert_file,
            tls_key_file,
            tls_ca_file,
            insecure,
            shards,
            score_future_horizon_secs,
            log,
        } = args;
        if let Some(v) = score_future_horizon_secs {
            self.score_future_horizon_secs = *v;
        }
        if let Some(v) = peer_listen {
            self.peer_listen = *v;
        }
        if let Some(v) = zone {
            self.zone = Some(v.clone()).filter(|z| !z.is_empty());
        }
        if let Some(v) = join {
            self.join = v.clone();
        }
        if *node_id_from_hostname {
            self.node_id_from_hostname = true;
        }
        if let Some(v) = advertise {
            self.advertise = Some(v.clone()).filter(|a| !a.is_empty());
        }
        if let Some(v) = bootstrap_expect {
            self.bootstrap_expect = *v;
        }
        if let Some(v) = cluster_secret_file {
            self.cluster_secret_file = Some(v.clone());
        }
        if let Some(v) = admin_token_file {
            self.admin_token_file = Some(v.clone());
        }
        if let Some(v) = metrics_token_file {
            self.metrics_token_file = Some(v.clone());
        }
        if let Some(v) = tls_cert_file {
            self.tls_cert_file = Some(v.clone());
        }
        if let Some(v) = tls_key_file {
            self.tls_key_file = Some(v.clone());
        }
        if let Some(v) = tls_ca_file {
            self.tls_ca_file = Some(v.clone());
        }
        if *insecure {
            self.insecure = true;
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

fn parse<T: FromStr>(value: &str) -> anyhow::Result<T>
where
    T::Err: Display,
{
    value.trim().parse().map_err(|e| anyhow::anyhow!("{e}"))
}

/// The process's `PLAUDIT_*` variables and `HOSTNAME` (for
/// `node_id_from_hostname`). A non-UTF-8 value of one of them is an error;
/// other variables are not looked at.
pub(super) fn process_env() -> anyhow::Result<Vec<(String, String)>> {
    let mut vars = Vec::new();
    for (key, value) in std::env::vars_os() {
        let wanted = |k: &&str| k.starts_with(ENV_PREFIX) || *k == "HOSTNAME";
        let Some(key) = key.to_str().filter(wanted) else { continue };
        let Ok(value) = value.into_string() else {
            // HOSTNAME is read only for node_id_from_hostname, which then
            // says it found none.
            if key == "HOSTNAME" {
                continue;
            }
            bail!("environment variable {key} is not valid UTF-8");
        };
        vars.push((key.to_string(), value));
    }
    Ok(vars)
}
