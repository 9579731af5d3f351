//! Command-line flags: the ones every workload shares (`Common`, flattened
//! into each) and each workload's own.

use crate::duration;
use crate::likes::OpKind;
use crate::load::Mix;
use crate::rankings::RankOp;
use clap::{Args, ValueEnum};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Target {
    Plaudit,
    Redis,
}

/// How the Plaudit driver sends its requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Sdk {
    /// Each connection sends its `--pipeline` requests in one
    /// `Client::pipeline` call and waits for them all, as the Redis driver
    /// pipelines its commands.
    Batch,
    /// `--pipeline` concurrent loops per connection, each awaiting its own
    /// call (`Client::score`, `Client::status`, ...).
    Calls,
}

/// Flags shared by every workload.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// Plaudit node address.
    #[arg(long, default_value = "127.0.0.1:7401")]
    pub addr: String,
    #[arg(long, value_enum, default_value = "plaudit")]
    pub target: Target,
    /// Redis address (with --target redis).
    #[arg(long, default_value = "127.0.0.1:6379")]
    pub redis_addr: String,
    /// Separate connections (Plaudit: one Client with pool size 1 each).
    #[arg(long, short = 'c', default_value_t = 32)]
    pub connections: usize,
    /// Requests in flight per connection.
    #[arg(long, short = 'P', default_value_t = 16)]
    pub pipeline: usize,
    /// How the Plaudit driver sends requests: in batches of `--pipeline`
    /// (like the Redis driver) or as concurrent single calls.
    #[arg(long, value_enum, default_value = "batch")]
    pub sdk: Sdk,
    /// Measured time, e.g. 20s, 500ms, 2m.
    #[arg(long, short = 'd', default_value = "20s", value_parser = duration::parse_duration)]
    pub duration: Duration,
    /// Unmeasured time before measuring.
    #[arg(long, default_value = "2s", value_parser = duration::parse_duration)]
    pub warmup: Duration,
    /// Per-call timeout on Plaudit.
    #[arg(long, default_value = "5s", value_parser = duration::parse_duration)]
    pub timeout: Duration,
    /// Speak TLS to Plaudit, trusting the CA certificates in this PEM file.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<std::path::PathBuf>,
    /// Send each counts read whole to one node, which fans it out by shard
    /// (the SDK's `split_reads: false`), instead of one part per shard
    /// straight to the shard's leader: to compare the two read paths.
    #[arg(long)]
    pub whole_reads: bool,
    /// Serve reads of hot keys from each client's cache for this long (the
    /// SDK's `cache_ttl`); 0s, the default, turns the cache off, so a run
    /// measures the nodes.
    #[arg(long, default_value = "0s", value_parser = duration::parse_duration)]
    pub cache_ttl: Duration,
    /// With the cache on: send hot keys' reads that it does not answer to
    /// any replica (the SDK's `spread_hot_reads`).
    #[arg(long)]
    pub spread_hot_reads: bool,
    /// Send every read to any replica of its shard (the SDK's
    /// `spread_reads`), not to its leader.
    #[arg(long)]
    pub spread_reads: bool,
    /// Random seed; 0 picks one from the clock.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Tokio worker threads; 0 = one per core.
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Print one JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
    /// The server's process id (Linux): report its CPU time over the measured
    /// window, per op and in cores, and the bench's own (the `cpu` object).
    #[arg(long)]
    pub server_pid: Option<u32>,
}

impl Common {
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.connections >= 1, "--connections must be at least 1");
        anyhow::ensure!(self.pipeline >= 1, "--pipeline must be at least 1");
        anyhow::ensure!(!self.duration.is_zero(), "--duration must be positive");
        if let Some(pid) = self.server_pid {
            // Fail before any preload rather than after the whole run.
            crate::cpu::check(pid).map_err(|e| anyhow::anyhow!("--server-pid {pid}: {e}"))?;
        }
        Ok(())
    }

    pub fn seed(&self) -> u64 {
        if self.seed != 0 {
            return self.seed;
        }
        let t =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        t.as_nanos() as u64 ^ u64::from(std::process::id())
    }

    /// Prints a progress line unless the output is JSON.
    pub fn progress(&self, msg: &str) {
        if !self.json {
            eprintln!("{msg}");
        }
    }
}

/// `plaudit-bench likes`.
#[derive(Args, Debug, Clone)]
pub struct LikesArgs {
    #[command(flatten)]
    pub common: Common,
    /// Distinct users (drawn uniformly).
    #[arg(long, default_value_t = 100_000)]
    pub users: u64,
    /// Distinct entities (drawn by Zipf rank).
    #[arg(long, default_value_t = 100_000)]
    pub entities: u64,
    /// Entity skew exponent; 0 is uniform.
    #[arg(long, default_value_t = 0.99)]
    pub zipf: f64,
    /// Operation weights: like, status, counts.
    #[arg(long, default_value = "like=10,status=45,counts=45", value_parser = OpKind::parse_mix)]
    pub mix: Mix,
    /// Business id (created on Plaudit if missing).
    #[arg(long, default_value_t = 1)]
    pub biz: u32,
    /// Like records written before measuring.
    #[arg(long, default_value_t = 0)]
    pub preload: u64,
    /// Give like actions an owner (the entity's author), credited in received totals.
    #[arg(long)]
    pub owners: bool,
    /// Offer each op at a fixed rate, requests a second, whether or not
    /// earlier ones were answered (e.g. `like=15000,counts=15000`); latency
    /// counts from when each was due. Plaudit only; replaces the closed
    /// loops of --connections x --pipeline (--connections clients are used).
    #[arg(long, value_parser = OpKind::parse_mix)]
    pub rate: Option<Mix>,
}

impl LikesArgs {
    pub fn validate(&self) -> anyhow::Result<()> {
        self.common.validate()?;
        anyhow::ensure!(
            self.users >= 1 && self.entities >= 1,
            "--users and --entities must be >= 1"
        );
        anyhow::ensure!(
            self.rate.is_none() || self.common.target == Target::Plaudit,
            "--rate drives Plaudit only"
        );
        Ok(())
    }
}

/// `plaudit-bench rankings`.
#[derive(Args, Debug, Clone)]
pub struct RankingsArgs {
    #[command(flatten)]
    pub common: Common,
    /// Ranking id (created on Plaudit if missing: one dimension `board`, a
    /// `total` window, `incr`, `earlier_first`). Redis keys are `rk:{rank}:{board}`.
    #[arg(long, default_value_t = 900)]
    pub rank: u32,
    /// Sub-boards (Redis: sorted sets).
    #[arg(long, default_value_t = 1000)]
    pub boards: u64,
    /// Distinct members per sub-board.
    #[arg(long, default_value_t = 10_000)]
    pub members: u64,
    /// Member skew exponent (Zipf); 0 is uniform.
    #[arg(long, default_value_t = 0.0)]
    pub member_zipf: f64,
    /// Share of events and reads that go to the one hot sub-board (board 0);
    /// the rest spread uniformly over all boards.
    #[arg(long, default_value_t = 0.0)]
    pub hot_share: f64,
    /// Operation weights: score (one event), top (top 10), rank (rank of a member).
    #[arg(long, default_value = "score=50,top=30,rank=20", value_parser = RankOp::parse_mix)]
    pub mix: Mix,
    /// Before measuring, members 1..=N of every board get one event each.
    #[arg(long, default_value_t = 0)]
    pub preload: u64,
    /// Event scores are drawn from 1..=max-score.
    #[arg(long, default_value_t = 100)]
    pub max_score: i64,
}

impl RankingsArgs {
    pub fn validate(&self) -> anyhow::Result<()> {
        self.common.validate()?;
        anyhow::ensure!(self.rank >= 1, "--rank must be at least 1 (0 is reserved)");
        anyhow::ensure!(self.boards >= 1, "--boards must be at least 1");
        anyhow::ensure!(self.members >= 1, "--members must be at least 1");
        anyhow::ensure!((0.0..=1.0).contains(&self.hot_share), "--hot-share must be in 0..=1");
        anyhow::ensure!(self.preload <= self.members, "--preload must be at most --members");
        anyhow::ensure!(self.max_score >= 1, "--max-score must be at least 1");
        Ok(())
    }
}

/// `plaudit-bench hot`.
#[derive(Args, Debug, Clone)]
pub struct HotArgs {
    #[command(flatten)]
    pub common: Common,
    /// Business id (created if missing); use a fresh one per run: every
    /// like is checked against the likes this run sent.
    #[arg(long, default_value_t = 50)]
    pub biz: u32,
    /// Ranking id (created if missing, as `plaudit-bench rankings` makes
    /// it); fresh per run, like `--biz`.
    #[arg(long, default_value_t = 950)]
    pub rank: u32,
    /// Distinct entities, drawn by Zipf rank (entity id = rank).
    #[arg(long, default_value_t = 1_000_000)]
    pub entities: u64,
    /// Entity skew exponent.
    #[arg(long, default_value_t = 1.2)]
    pub zipf: f64,
    /// Sub-boards of the ranking.
    #[arg(long, default_value_t = 100)]
    pub boards: u64,
    /// Members per sub-board (drawn uniformly).
    #[arg(long, default_value_t = 10_000)]
    pub members: u64,
    /// `Client`s (as many application processes), sharing the
    /// --connections between them (each one's pool) and their loops: a
    /// client's cache serves every loop of that client.
    #[arg(long, default_value_t = 4)]
    pub clients: usize,
    /// Share of scoring events and top reads that go to board 0.
    #[arg(long, default_value_t = 0.5)]
    pub hot_board_share: f64,
    /// Operation weights: counts (one entity), top (10 rows), like, score.
    #[arg(long, default_value = "counts=60,top=30,like=5,score=5", value_parser = crate::hot::parse_mix)]
    pub mix: Mix,
}

impl HotArgs {
    pub fn validate(&self) -> anyhow::Result<()> {
        self.common.validate()?;
        anyhow::ensure!(self.common.target == Target::Plaudit, "hot drives Plaudit only");
        anyhow::ensure!(self.rank >= 1, "--rank must be at least 1 (0 is reserved)");
        anyhow::ensure!(
            (1..=self.common.connections).contains(&self.clients),
            "--clients must be 1 to --connections"
        );
        anyhow::ensure!(
            self.entities >= 1 && self.boards >= 1 && self.members >= 1,
            "--entities, --boards and --members must be at least 1"
        );
        anyhow::ensure!(
            (0.0..=1.0).contains(&self.hot_board_share),
            "--hot-board-share must be in 0..=1"
        );
        Ok(())
    }
}
