//! plaudit-bench: load generator for Plaudit and its Redis baseline.
//!
//! ```text
//! plaudit-bench likes --target plaudit --addr 127.0.0.1:7401 -c 32 -P 16 --duration 20s
//! plaudit-bench likes --target redis --redis-addr 127.0.0.1:6379 --preload 1000000 --json
//! ```
//!
//! Modules: `workload` (mix, generator, stats), `zipf`, `hist`, `rng`,
//! `duration`, `report`, `redis` (a minimal RESP2 client), and one driver per
//! target (`likes_plaudit`, `likes_redis`).

mod check;
mod duration;
mod hist;
mod likes_plaudit;
mod likes_redis;
mod redis;
mod report;
mod rng;
mod workload;
mod zipf;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use report::RunInfo;
use std::sync::Arc;
use std::time::{Duration, Instant};
use workload::{Mix, Phase, Stats, Worker, Workload, MEASURE, STOP};

#[derive(Parser, Debug)]
#[command(
    name = "plaudit-bench",
    version,
    about = "Load generator for Plaudit and Redis baselines"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Like toggles, status and counts lookups over Zipf-skewed entities.
    Likes(BenchArgs),
    /// Checks the Redis like script's transition table against a real Redis
    /// (writes and then deletes keys of business --biz).
    #[command(hide = true)]
    CheckRedis(BenchArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Target {
    Plaudit,
    Redis,
}

/// Flags shared by every workload.
#[derive(Args, Debug, Clone)]
struct BenchArgs {
    /// Plaudit node address.
    #[arg(long, default_value = "127.0.0.1:7401")]
    addr: String,
    #[arg(long, value_enum, default_value = "plaudit")]
    target: Target,
    /// Redis address (with --target redis).
    #[arg(long, default_value = "127.0.0.1:6379")]
    redis_addr: String,
    /// Separate connections (Plaudit: one Client with pool size 1 each).
    #[arg(long, short = 'c', default_value_t = 32)]
    connections: usize,
    /// Requests in flight per connection.
    #[arg(long, short = 'P', default_value_t = 16)]
    pipeline: usize,
    /// Measured time, e.g. 20s, 500ms, 2m.
    #[arg(long, short = 'd', default_value = "20s", value_parser = duration::parse_duration)]
    duration: Duration,
    /// Unmeasured time before measuring.
    #[arg(long, default_value = "2s", value_parser = duration::parse_duration)]
    warmup: Duration,
    /// Distinct users (drawn uniformly).
    #[arg(long, default_value_t = 100_000)]
    users: u64,
    /// Distinct entities (drawn by Zipf rank).
    #[arg(long, default_value_t = 100_000)]
    entities: u64,
    /// Entity skew exponent; 0 is uniform.
    #[arg(long, default_value_t = 0.99)]
    zipf: f64,
    /// Operation weights.
    #[arg(long, default_value = "like=10,status=45,counts=45", value_parser = Mix::parse)]
    mix: Mix,
    /// Business id (created on Plaudit if missing).
    #[arg(long, default_value_t = 1)]
    biz: u32,
    /// Like records written before measuring.
    #[arg(long, default_value_t = 0)]
    preload: u64,
    /// Give like actions an owner (the entity's author), credited in received totals.
    #[arg(long)]
    owners: bool,
    /// Per-call timeout on Plaudit.
    #[arg(long, default_value = "5s", value_parser = duration::parse_duration)]
    timeout: Duration,
    /// Random seed; 0 picks one from the clock.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Tokio worker threads; 0 = one per core.
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Print one JSON document instead of the table.
    #[arg(long)]
    json: bool,
}

impl BenchArgs {
    fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.connections >= 1, "--connections must be at least 1");
        anyhow::ensure!(self.pipeline >= 1, "--pipeline must be at least 1");
        anyhow::ensure!(
            self.users >= 1 && self.entities >= 1,
            "--users and --entities must be >= 1"
        );
        anyhow::ensure!(!self.duration.is_zero(), "--duration must be positive");
        Ok(())
    }

    fn workload(&self) -> anyhow::Result<Workload> {
        Ok(Workload {
            biz: self.biz,
            users: self.users,
            entities: zipf::Zipf::new(self.entities, self.zipf).map_err(anyhow::Error::msg)?,
            mix: self.mix.clone(),
            owners: self.owners,
        })
    }

    fn seed(&self) -> u64 {
        if self.seed != 0 {
            return self.seed;
        }
        let t =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        t.as_nanos() as u64 ^ u64::from(std::process::id())
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let args = match &cli.cmd {
        Cmd::Likes(a) | Cmd::CheckRedis(a) => a,
    };
    args.validate()?;
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if args.threads > 0 {
        rt.worker_threads(args.threads);
    }
    let rt = rt.enable_all().build()?;
    rt.block_on(async {
        match &cli.cmd {
            Cmd::Likes(a) => likes(a).await,
            Cmd::CheckRedis(a) => check::check_redis(&a.redis_addr, a.biz).await,
        }
    })
}

/// A like-only workload for one business, for `check-redis`.
fn mix_free_workload(biz: u32) -> Workload {
    Workload {
        biz,
        users: 1,
        entities: zipf::Zipf::new(1, 0.0).expect("valid"),
        mix: Mix::parse("like=1").expect("valid"),
        owners: false,
    }
}

/// Waits out the warm-up, measures, stops; returns the measured seconds.
async fn run_phases(phase: &Phase, warmup: Duration, duration: Duration) -> f64 {
    tokio::time::sleep(warmup).await;
    phase.set(MEASURE);
    let started = Instant::now();
    tokio::time::sleep(duration).await;
    phase.set(STOP);
    started.elapsed().as_secs_f64()
}

fn progress(args: &BenchArgs, msg: &str) {
    if !args.json {
        eprintln!("{msg}");
    }
}

async fn likes(args: &BenchArgs) -> anyhow::Result<()> {
    let wl = Arc::new(args.workload()?);
    let seed = args.seed();
    let phase = Phase::default();
    let (addr, target, preload, stats, duration_s) = match args.target {
        Target::Redis => {
            let setup = likes_redis::setup(&args.redis_addr).await?;
            let sha: Arc<str> = setup.sha.into();
            let mut conns = Vec::with_capacity(args.connections);
            for i in 0..args.connections {
                let conn = redis::Conn::connect(&args.redis_addr).await?;
                conns.push((conn, Worker::new(i, args.connections, args.users, seed)));
            }
            let mut preload = None;
            if args.preload > 0 {
                progress(args, &format!("preloading {} like records", args.preload));
                let (c, p) = likes_redis::preload(
                    conns,
                    sha.clone(),
                    wl.clone(),
                    args.preload,
                    args.pipeline,
                )
                .await?;
                let known: usize = c.iter().map(|(_, w)| w.known_likes()).sum();
                progress(args, &format!("preload done; workers know {known} liked pairs"));
                conns = c;
                preload = Some(p);
            }
            progress(args, &format!("warming up {:?}, measuring {:?}", args.warmup, args.duration));
            let tasks: Vec<_> = conns
                .into_iter()
                .map(|(conn, worker)| {
                    tokio::spawn(likes_redis::run_worker(
                        args.redis_addr.clone(),
                        conn,
                        sha.clone(),
                        wl.clone(),
                        worker,
                        args.pipeline,
                        phase.clone(),
                    ))
                })
                .collect();
            let secs = run_phases(&phase, args.warmup, args.duration).await;
            let mut stats = Stats::default();
            for t in tasks {
                stats.merge(&t.await?);
            }
            (args.redis_addr.clone(), "redis", preload, stats, secs)
        }
        Target::Plaudit => {
            let clients =
                likes_plaudit::connect(&args.addr, args.connections, args.timeout).await?;
            likes_plaudit::ensure_biz(&clients[0], args.biz).await?;
            let loops = args.connections * args.pipeline;
            let mut workers: Vec<Worker> =
                (0..loops).map(|i| Worker::new(i, loops, args.users, seed)).collect();
            let mut preload = None;
            if args.preload > 0 {
                progress(args, &format!("preloading {} like records", args.preload));
                let (w, p) =
                    likes_plaudit::preload(&clients, workers, wl.clone(), args.preload).await?;
                let known: usize = w.iter().map(Worker::known_likes).sum();
                progress(args, &format!("preload done; workers know {known} liked pairs"));
                workers = w;
                preload = Some(p);
            }
            progress(args, &format!("warming up {:?}, measuring {:?}", args.warmup, args.duration));
            let tasks: Vec<_> = workers
                .into_iter()
                .enumerate()
                .map(|(i, worker)| {
                    let client = clients[i / args.pipeline].clone();
                    tokio::spawn(likes_plaudit::run_loop(client, wl.clone(), worker, phase.clone()))
                })
                .collect();
            let secs = run_phases(&phase, args.warmup, args.duration).await;
            let mut stats = Stats::default();
            for t in tasks {
                stats.merge(&t.await.context("worker panicked")?);
            }
            (args.addr.clone(), "plaudit", preload, stats, secs)
        }
    };
    let info = RunInfo {
        target,
        addr,
        connections: args.connections,
        pipeline: args.pipeline,
        duration_s,
        preload,
    };
    if args.json {
        println!("{}", report::json(&info, &wl.mix, &stats));
    } else {
        print!("{}", report::human(&info, &wl.mix, &stats));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed_and_defaults_match_the_docs() {
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from(["plaudit-bench", "likes"]).unwrap();
        let Cmd::Likes(a) = cli.cmd else { panic!() };
        assert_eq!(a.addr, "127.0.0.1:7401");
        assert_eq!(a.target, Target::Plaudit);
        assert_eq!((a.connections, a.pipeline), (32, 16));
        assert_eq!(a.duration, Duration::from_secs(20));
        assert_eq!(a.warmup, Duration::from_secs(2));
        assert_eq!((a.users, a.entities, a.biz, a.preload), (100_000, 100_000, 1, 0));
        assert_eq!(a.zipf, 0.99);
        assert_eq!(a.mix, Mix::parse("like=10,status=45,counts=45").unwrap());
    }

    #[test]
    fn cli_parses_overrides_and_rejects_bad_values() {
        let cli = Cli::try_parse_from([
            "plaudit-bench",
            "likes",
            "--target",
            "redis",
            "-c",
            "4",
            "-P",
            "8",
            "--duration",
            "500ms",
            "--mix",
            "like=1",
            "--zipf",
            "0",
            "--json",
        ])
        .unwrap();
        let Cmd::Likes(a) = cli.cmd else { panic!() };
        assert_eq!(a.target, Target::Redis);
        assert_eq!((a.connections, a.pipeline), (4, 8));
        assert_eq!(a.duration, Duration::from_millis(500));
        assert!(a.json);
        assert!(Cli::try_parse_from(["plaudit-bench", "likes", "--duration", "5x"]).is_err());
        assert!(Cli::try_parse_from(["plaudit-bench", "likes", "--mix", "nope=1"]).is_err());
        assert!(Cli::try_parse_from(["plaudit-bench", "likes", "--target", "mysql"]).is_err());
    }
}
