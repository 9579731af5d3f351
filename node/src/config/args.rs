//! The node's command-line flags.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Command-line flags. Each one, when given, overrides the file and the environment.
#[derive(Debug, Clone, Default, clap::Parser)]
#[command(name = "plaudit-node", version, about = "A Plaudit cluster node")]
pub struct Args {
    /// TOML config file (default: $PLAUDIT_CONFIG, else built-in defaults).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Take the node id from the host name: its trailing number plus one
    /// (pod plaudit-2 is node 3).
    #[arg(long)]
    pub node_id_from_hostname: bool,
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
    /// Seed peer addresses (host:port, names resolved at every dial), comma
    /// separated.
    #[arg(long, value_name = "HOST:PORT,...", value_delimiter = ',')]
    pub join: Option<Vec<String>>,
    /// The host (name or IP) other nodes and clients reach this node at.
    #[arg(long, value_name = "HOST")]
    pub advertise: Option<String>,
    /// Form a new cluster with the nodes at the first N seeds (sorted).
    #[arg(long, value_name = "N")]
    pub bootstrap_expect: Option<u32>,
    /// This node's failure domain (rack, zone).
    #[arg(long, value_name = "ZONE")]
    pub zone: Option<String>,
    /// File holding the cluster secret.
    #[arg(long, value_name = "PATH")]
    pub cluster_secret_file: Option<PathBuf>,
    /// File holding the admin token.
    #[arg(long, value_name = "PATH")]
    pub admin_token_file: Option<PathBuf>,
    /// File holding the token that reads /metrics on the admin port (for a
    /// scraper, off loopback).
    #[arg(long, value_name = "PATH")]
    pub metrics_token_file: Option<PathBuf>,
    /// The client listener's certificate chain (PEM): clients must use TLS.
    #[arg(long, value_name = "PATH")]
    pub tls_cert_file: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert-file.
    #[arg(long, value_name = "PATH")]
    pub tls_key_file: Option<PathBuf>,
    /// The CA (PEM) of every peer's certificate: peers speak mutual TLS.
    #[arg(long, value_name = "PATH")]
    pub tls_ca_file: Option<PathBuf>,
    /// Run on a non-loopback address without an admin token (anyone who can
    /// connect may do anything), or with one but without TLS (tokens cross
    /// the network in clear).
    #[arg(long)]
    pub insecure: bool,
    /// Number of shards.
    #[arg(long)]
    pub shards: Option<u32>,
    /// Seconds past the node's clock a scoring event may be stamped.
    #[arg(long, value_name = "SECS")]
    pub score_future_horizon_secs: Option<u64>,
    /// Log filter (tracing EnvFilter directive).
    #[arg(long, value_name = "FILTER")]
    pub log: Option<String>,
}
