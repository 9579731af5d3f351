//! plaudit-bench: load generator for Plaudit and its Redis baselines.
//!
//! ```text
//! plaudit-bench likes --target plaudit --addr 127.0.0.1:7401 -c 32 -P 16 --duration 20s
//! plaudit-bench likes --target redis --redis-addr 127.0.0.1:6379 --preload 1000000 --json
//! plaudit-bench rankings --boards 1 --members 1000000 --preload 1000000 --mix score=1
//! ```
//!
//! Modules: `args` (flags), `load` (mix, phases, stats), `cpu` (server and
//! bench CPU time over the measured window), `report`, `zipf`, `hot` (the
//! hot-key workload) and `ledger` (what it checks answers against),
//! `hist`, `rng`, `duration`, `redis` (a minimal RESP2 client), `plaudit`
//! (what the Plaudit drivers share), and per workload its generator and one
//! driver per target: `likes` + `likes_plaudit` / `likes_redis`, `rankings`
//! + `rankings_plaudit` / `rankings_redis`.

mod args;
mod check;
mod cpu;
mod duration;
mod hist;
mod hot;
mod ledger;
mod likes;
mod likes_plaudit;
mod likes_redis;
mod load;
mod paced;
mod plaudit;
mod plaudit_loop;
mod rankings;
mod rankings_plaudit;
mod rankings_redis;
mod redis;
mod redis_loop;
mod report;
mod rng;
mod zipf;

use args::{Common, HotArgs, LikesArgs, RankingsArgs};
use clap::{Parser, Subcommand};

/// The same allocator as the node: the client shares the machine's two
/// cores with the server it measures, so its CPU cost is the server's loss.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    Likes(LikesArgs),
    /// Scoring events, top-10 reads and rank-of reads over many sub-boards
    /// (Redis: ZINCRBY, ZREVRANGE 0 9 WITHSCORES, ZREVRANK).
    Rankings(RankingsArgs),
    /// Hot keys: counts reads and likes of Zipf-skewed entities, top reads
    /// and scores with one hot board; every answer checked against what
    /// was acknowledged (cached ones within their age).
    Hot(HotArgs),
    /// Checks the Redis like script's transition table against a real Redis
    /// (writes and then deletes keys of business --biz).
    #[command(hide = true)]
    CheckRedis(LikesArgs),
}

impl Cmd {
    fn common(&self) -> &Common {
        match self {
            Cmd::Likes(a) | Cmd::CheckRedis(a) => &a.common,
            Cmd::Rankings(a) => &a.common,
            Cmd::Hot(a) => &a.common,
        }
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // The SDK's account of its redirects, retries and timeouts, when asked
    // for (`RUST_LOG=plaudit_client=debug`, to stderr): a loaded run is
    // where a call that waits out its deadline shows.
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_default_env() {
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    }
    match &cli.cmd {
        Cmd::Likes(a) | Cmd::CheckRedis(a) => a.validate()?,
        Cmd::Rankings(a) => a.validate()?,
        Cmd::Hot(a) => a.validate()?,
    }
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if cli.cmd.common().threads > 0 {
        rt.worker_threads(cli.cmd.common().threads);
    }
    let rt = rt.enable_all().build()?;
    rt.block_on(async {
        match &cli.cmd {
            Cmd::Likes(a) => likes::run(a).await,
            Cmd::Rankings(a) => rankings::run(a).await,
            Cmd::Hot(a) => hot::run(a).await,
            Cmd::CheckRedis(a) => check::check_redis(&a.common.redis_addr, a.biz).await,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use args::Target;
    use clap::CommandFactory;
    use std::time::Duration;

    #[test]
    fn cli_is_well_formed_and_defaults_match_the_docs() {
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from(["plaudit-bench", "likes"]).unwrap();
        let Cmd::Likes(a) = cli.cmd else { panic!() };
        let c = &a.common;
        assert_eq!(c.addr, "127.0.0.1:7401");
        assert_eq!(c.target, Target::Plaudit);
        assert_eq!((c.connections, c.pipeline), (32, 16));
        assert_eq!(c.duration, Duration::from_secs(20));
        assert_eq!(c.warmup, Duration::from_secs(2));
        assert_eq!((a.users, a.entities, a.biz, a.preload), (100_000, 100_000, 1, 0));
        assert_eq!(a.zipf, 0.99);
        assert_eq!(a.mix, likes::OpKind::parse_mix("like=10,status=45,counts=45").unwrap());

        let cli = Cli::try_parse_from(["plaudit-bench", "rankings"]).unwrap();
        let Cmd::Rankings(r) = cli.cmd else { panic!() };
        assert_eq!((r.common.connections, r.common.pipeline), (32, 16));
        assert_eq!((r.rank, r.boards, r.members, r.preload), (900, 1000, 10_000, 0));
        assert_eq!((r.hot_share, r.member_zipf), (0.0, 0.0));
        assert_eq!(r.mix, rankings::RankOp::parse_mix("score=50,top=30,rank=20").unwrap());
        assert!(r.validate().is_ok());
        assert_eq!(r.common.server_pid, None);

        let cli = Cli::try_parse_from(["plaudit-bench", "hot"]).unwrap();
        let Cmd::Hot(h) = cli.cmd else { panic!() };
        assert_eq!((h.biz, h.rank, h.entities, h.clients), (50, 950, 1_000_000, 4));
        assert_eq!((h.zipf, h.hot_board_share), (1.2, 0.5));
        assert_eq!(h.mix, hot::parse_mix("counts=60,top=30,like=5,score=5").unwrap());
        assert_eq!(h.common.cache_ttl, Duration::ZERO, "the cache is off unless asked for");
        assert!(h.validate().is_ok());
    }

    #[test]
    fn server_pid_must_name_a_live_process() {
        let me = std::process::id().to_string();
        let cli = Cli::try_parse_from(["plaudit-bench", "likes", "--server-pid", &me]).unwrap();
        let Cmd::Likes(a) = cli.cmd else { panic!() };
        assert_eq!(a.common.server_pid, Some(std::process::id()));
        assert!(a.validate().is_ok());
        let argv = ["plaudit-bench", "rankings", "--server-pid", "4294967295"];
        let Cmd::Rankings(r) = Cli::try_parse_from(argv).unwrap().cmd else { panic!() };
        assert!(r.validate().unwrap_err().to_string().contains("--server-pid 4294967295"));
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
        assert_eq!(a.common.target, Target::Redis);
        assert_eq!((a.common.connections, a.common.pipeline), (4, 8));
        assert_eq!(a.common.duration, Duration::from_millis(500));
        assert!(a.common.json);
        assert!(Cli::try_parse_from(["plaudit-bench", "likes", "--duration", "5x"]).is_err());
        assert!(Cli::try_parse_from(["plaudit-bench", "likes", "--mix", "nope=1"]).is_err());
        assert!(Cli::try_parse_from(["plaudit-bench", "likes", "--target", "mysql"]).is_err());
        assert!(Cli::try_parse_from(["plaudit-bench", "rankings", "--mix", "like=1"]).is_err());
    }

    #[test]
    fn rankings_flags_are_checked() {
        let parse = |extra: &[&str]| {
            let mut argv = vec!["plaudit-bench", "rankings"];
            argv.extend_from_slice(extra);
            let Cmd::Rankings(r) = Cli::try_parse_from(argv).unwrap().cmd else { panic!() };
            r
        };
        let r = parse(&["--boards", "1", "--members", "1000000", "--preload", "1000000"]);
        assert!(r.validate().is_ok());
        assert!(parse(&["--hot-share", "1.5"]).validate().is_err());
        assert!(parse(&["--members", "10", "--preload", "11"]).validate().is_err());
        assert!(parse(&["--boards", "0"]).validate().is_err());
        assert!(parse(&["--rank", "0"]).validate().is_err());
    }
}
