//! What the rest of the node takes from a `Config`: durations, the client
//! listener's bounds, the addresses others are told, and the values with a
//! default that depends on other fields.

use super::Config;
use std::net::SocketAddr;
use std::time::Duration;

impl Config {
    /// `request_timeout_ms` as a `Duration`.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    /// The client listener's bounds.
    pub fn client_limits(&self) -> crate::server::Limits {
        crate::server::Limits {
            max_connections: self.max_connections,
            max_in_flight_per_connection: self.max_in_flight_per_connection,
            max_requests_in_flight: self.max_requests_in_flight,
            request_timeout: self.request_timeout(),
            idle_timeout: Duration::from_secs(self.client_idle_timeout_secs),
            auth_timeout: Duration::from_secs(self.client_auth_timeout_secs),
            write_timeout: Duration::from_secs(self.client_write_timeout_secs),
            frame_timeout: Duration::from_secs(self.client_frame_timeout_secs),
            frame_budget: (self.client_frame_budget_mb as usize).saturating_mul(1 << 20),
            shares: crate::server::admission::Shares {
                total: self.max_connections,
                unauthenticated: self.max_unauthenticated_connections,
                per_address: self.max_unauthenticated_per_address,
                admin_reserved: self.admin_reserved_connections,
            },
        }
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

    /// This node's client, peer and admin addresses as others are told
    /// them: `advertise` (or the listener's IP) with each listener's port.
    pub fn advertised(&self) -> (String, String, String) {
        let at = |addr: SocketAddr| match &self.advertise {
            Some(host) => join_host_port(host, addr.port()),
            None => addr.to_string(),
        };
        (at(self.listen), at(self.peer_listen), at(self.admin))
    }

    /// How many nodes must find each other before a new cluster forms; 0:
    /// never form one, only join.
    pub fn effective_bootstrap_expect(&self) -> u32 {
        match (self.bootstrap_expect, self.join.is_empty()) {
            (0, true) => 1,
            (n, _) => n,
        }
    }

    /// `actor_idle_secs` as a `Duration`.
    pub fn actor_idle(&self) -> Duration {
        Duration::from_secs(self.actor_idle_secs)
    }

    /// `raft_read_lease_ms`, or half of `raft_election_min_ms` if unset.
    pub fn read_lease_ms(&self) -> u64 {
        self.raft_read_lease_ms.unwrap_or(self.raft_election_min_ms / 2)
    }
}

/// `host:port`, with an IPv6 host in brackets.
fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}
