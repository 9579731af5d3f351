//! plaudit-node: starts one node and runs it until SIGTERM or SIGINT.

use anyhow::Context;
use clap::Parser;
use plaudit_cluster::{ClusterConfig, Engine, EngineConfig, GroupConfig};
use plaudit_node::config::{Args, Config};
use plaudit_node::metrics::Metrics;
use plaudit_node::server::Server;
use plaudit_node::status::NodeStatus;
use plaudit_proto::cluster::NodeInfo;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::signal::unix::{signal, SignalKind};
use tracing::{info, warn};

/// Requests are served on whichever worker is free, so memory is often freed
/// on another thread than the one that allocated it; glibc's malloc then
/// serialises on its arena locks (measured: ~11% of the node's CPU in futex
/// waits and ~17% in malloc itself under rank-of reads). mimalloc frees
/// across threads without a shared lock.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let cfg = Config::load(&args)?;
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(&cfg.log))
        .with_writer(std::io::stderr)
        .init();
    runtime(cfg.worker_threads)?.block_on(run(cfg))
}

/// The node's runtime, with `configured` workers (0: tokio's own default,
/// `TOKIO_WORKER_THREADS` included). Its workers report their parks, so a
/// flush round can start as soon as no task is left to join it
/// (`plaudit_storage::runtime_idle`): the count they report against is
/// set here, with them.
fn runtime(configured: usize) -> std::io::Result<tokio::runtime::Runtime> {
    let workers = Some(configured).filter(|&n| n > 0).unwrap_or_else(|| {
        std::env::var("TOKIO_WORKER_THREADS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&n| n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    });
    let idle = &plaudit_storage::runtime_idle::RUNTIME;
    idle.set_workers(workers);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .on_thread_park(|| idle.parked())
        .on_thread_unpark(|| idle.unparked())
        .enable_all()
        .build()
}

async fn run(cfg: Config) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    // Bind first: a port conflict should fail fast, before opening storage.
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .with_context(|| format!("binding client listener {}", cfg.listen))?;
    let admin = tokio::net::TcpListener::bind(cfg.admin)
        .await
        .with_context(|| format!("binding admin listener {}", cfg.admin))?;
    let secret = cfg.secret()?;
    let admin_token = cfg.admin_token()?;
    let tls = match (&cfg.tls_cert_file, &cfg.tls_key_file) {
        (Some(cert), Some(key)) => Some(plaudit_node::server::tls::acceptor(cert, key)?),
        _ => None,
    };
    let peer_tls = match (&cfg.tls_cert_file, &cfg.tls_key_file, &cfg.tls_ca_file) {
        (Some(cert), Some(key), Some(ca)) => {
            Some(plaudit_cluster::peer::tls::PeerTls::from_files(cert, key, ca)?)
        }
        _ => None,
    };
    if admin_token.is_none() {
        // Config validation allowed this only on loopback or with --insecure.
        warn!(
            listen = %cfg.listen, insecure = cfg.insecure,
            "no admin token: every client may do anything (set admin_token_file or \
             PLAUDIT_ADMIN_TOKEN to require tokens)"
        );
    }
    // Only a node with a cluster secret listens for peers: without one it
    // could not tell a peer of its cluster from anyone else.
    let peer_listener = match &secret {
        Some(_) => Some(
            tokio::net::TcpListener::bind(cfg.peer_listen)
                .await
                .with_context(|| format!("binding peer listener {}", cfg.peer_listen))?,
        ),
        None => None,
    };

    let (client, peer, admin_addr) = cfg.advertised();
    let engine_cfg = EngineConfig {
        data_dir: cfg.data_dir.clone(),
        shards: cfg.shards,
        groups: cfg.groups,
        group: GroupConfig {
            node_id: cfg.node_id,
            heartbeat_ms: cfg.raft_heartbeat_ms,
            election_min_ms: cfg.raft_election_min_ms,
            election_max_ms: cfg.raft_election_max_ms,
            read_lease_ms: cfg.read_lease_ms(),
            snapshot_every: cfg.snapshot_every_entries,
            logs_to_keep: cfg.snapshot_logs_to_keep,
            batch_max: cfg.batch_max_commands,
            max_in_flight: cfg.max_proposals_in_flight,
            max_pending: cfg.max_pending_per_shard,
            disk: plaudit_cluster::disk::DiskGuard::new(cfg.min_free_disk_mb << 20),
            memory: plaudit_cluster::memory::MemoryGuard::new(cfg.max_memory_mb << 20),
        },
        actor_budget: cfg.actor_budget,
        actor_budget_per_shard: cfg.actor_budget_per_shard,
        actor_idle: cfg.actor_idle(),
        retention_sweep: std::time::Duration::from_secs(cfg.retention_sweep_secs),
        score_future_horizon: std::time::Duration::from_secs(cfg.score_future_horizon_secs),
        max_boards_per_ranking: cfg.max_boards_per_ranking,
        hot_cache_min_rps: cfg.hot_cache_min_rps,
        hot_move_min_rps: cfg.hot_move_min_rps,
        hot_move_after: std::time::Duration::from_secs(cfg.hot_move_after_secs),
        // Only a fault-injection node honours these: tests stop a move half
        // way, or make any copy too large so the move is given up.
        move_step_pause: test_setting(&cfg, "PLAUDIT_MOVE_STEP_PAUSE_MS")
            .map_or(std::time::Duration::ZERO, std::time::Duration::from_millis),
        move_max_copy_bytes: test_setting(&cfg, "PLAUDIT_MOVE_MAX_COPY_BYTES")
            .map_or(plaudit_cluster::actor_mover::MAX_COPY_BYTES, |n| n as usize),
        event_ids: plaudit_actors::command::Dedup {
            window_s: cfg.event_id_window_secs,
            max_ids: cfg.event_ids_per_board,
        },
        checkpoint: cfg.checkpoint_policy(),
        outbox_batch: cfg.outbox_batch,
        sled_cache_bytes: cfg.sled_cache_mb * 1024 * 1024,
        cluster: ClusterConfig {
            me: NodeInfo { id: cfg.node_id, client, peer, admin: admin_addr },
            seeds: cfg.join.clone(),
            bootstrap_expect: cfg.effective_bootstrap_expect(),
            replication_factor: cfg.replication_factor,
            secret,
            peer_timeout: std::time::Duration::from_millis(cfg.peer_timeout_ms),
            zone: cfg.zone.clone(),
            dead_node_timeout: std::time::Duration::from_secs(cfg.dead_node_timeout_secs),
            moves_per_node: cfg.moves_per_node,
            snapshot_send_rate: cfg.snapshot_send_mib_per_sec << 20,
            tls: peer_tls,
        },
        request_timeout: cfg.request_timeout(),
    };
    let metrics = Arc::new(Metrics::new());
    plaudit_node::lag::start();
    let engine = Engine::start(engine_cfg, peer_listener).await.context("starting the engine")?;
    let status = Arc::new(NodeStatus {
        engine: engine.clone(),
        metrics: metrics.clone(),
        serving: AtomicBool::new(true),
        fault_injection: cfg.fault_injection,
    });
    let (admin_stop_tx, admin_stop_rx) = tokio::sync::oneshot::channel::<()>();
    // Off loopback, metrics and status are the admin token's (the probes
    // stay open): see admin.rs.
    let metrics_token = cfg.metrics_token()?;
    let bearer = match &admin_token {
        Some(token) if !cfg.admin.ip().is_loopback() => Some(plaudit_node::admin::Bearer {
            admin: plaudit_actors::directory::hash_secret(token),
            metrics: metrics_token.as_deref().map(plaudit_actors::directory::hash_secret),
        }),
        _ => None,
    };
    let admin_stop = async move {
        let _ = admin_stop_rx.await;
    };
    let admin_task =
        tokio::spawn(plaudit_node::admin::serve(admin, status.clone(), bearer, admin_stop));
    info!(
        node_id = cfg.node_id, listen = %cfg.listen, admin = %cfg.admin,
        peer_listen = %cfg.peer_listen, shards = cfg.shards, data_dir = %cfg.data_dir.display(),
        startup_ms = started.elapsed().as_millis() as u64,
        "plaudit-node started (GET /readyz says when it serves)"
    );

    let server = Arc::new(
        Server::new(engine.clone(), metrics, cfg.client_limits())
            .with_admin_token(admin_token.as_deref())
            .with_tls(tls),
    );
    let grace = cfg.shutdown_grace();
    let draining = engine.clone();
    let shutdown = async move {
        tokio::select! {
            _ = sigterm.recv() => info!("SIGTERM: shutting down"),
            _ = sigint.recv() => info!("SIGINT: shutting down"),
        }
        // Leaderships first, while clients are still served here: the
        // groups keep taking writes elsewhere, with no election timeout.
        let left = draining.drain(grace).await;
        if !left.is_empty() {
            tracing::warn!(groups = ?left, "stopping while still leading these groups");
        }
    };
    // Shutdown order: hand leaderships away, stop accepting and drain
    // connections, stop Raft and actors, make storage durable, then stop
    // the admin endpoint last.
    server.run(listener, shutdown, grace).await;
    status.serving.store(false, Ordering::Relaxed);
    engine.shutdown().await;
    let _ = admin_stop_tx.send(());
    let _ = admin_task.await;
    info!("plaudit-node stopped");
    Ok(())
}

/// A number from the environment that only a fault-injection node reads.
fn test_setting(cfg: &Config, name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).filter(|_| cfg.fault_injection)
}
