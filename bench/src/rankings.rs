//! The rankings workload shared by both targets: scoring events, top-10
//! reads and rank-of reads over `boards` sub-boards of one ranking, with an
//! optional hot board and skewed members, and a preload that gives members
//! `1..=N` of every board one event each.
//!
//! On Plaudit a board is the `total` window of dimension value `board`
//! (type id `total:0_{board}`), so every event touches exactly one sub-board,
//! as one `ZINCRBY` touches one sorted set on Redis.

use crate::args::{RankingsArgs, Target};
use crate::load::{measure, Mix, Phase};
use crate::report::{self, Preload, RunInfo};
use crate::rng::FastRng;
use crate::zipf::Zipf;
use crate::{plaudit, plaudit_loop, rankings_plaudit, rankings_redis};
use rand::RngCore;
use std::sync::Arc;
use std::time::Instant;

/// Rows of a `top` read.
pub const TOP_N: u32 = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankOp {
    Score,
    Top,
    Rank,
}

impl RankOp {
    pub const ALL: [RankOp; 3] = [RankOp::Score, RankOp::Top, RankOp::Rank];
    /// Op names as the mix and the report spell them, in `index` order.
    pub const NAMES: &'static [&'static str] = &["score", "top", "rank"];

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn parse_mix(s: &str) -> Result<Mix, String> {
        Mix::parse(s, Self::NAMES)
    }
}

/// What every worker generates from.
#[derive(Debug, Clone)]
pub struct Workload {
    pub rank: u32,
    pub boards: u64,
    pub members: Zipf,
    pub hot_share: f64,
    pub mix: Mix,
    pub max_score: i64,
}

/// One generated operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Score { board: u64, member: u64, score: i64, event_id: u64 },
    Top { board: u64 },
    Rank { board: u64, member: u64 },
}

impl Op {
    pub fn kind(&self) -> RankOp {
        match self {
            Op::Score { .. } => RankOp::Score,
            Op::Top { .. } => RankOp::Top,
            Op::Rank { .. } => RankOp::Rank,
        }
    }
}

impl Workload {
    /// Board 0 with probability `hot_share`, otherwise any board uniformly.
    pub fn board(&self, rng: &mut FastRng) -> u64 {
        if self.hot_share > 0.0 && rng.unit_f64() < self.hot_share {
            0
        } else {
            rng.below(self.boards)
        }
    }

    pub fn score(&self, rng: &mut FastRng) -> i64 {
        1 + rng.below(self.max_score as u64) as i64
    }

    pub fn next_op(&self, rng: &mut FastRng) -> Op {
        let board = self.board(rng);
        match RankOp::ALL[self.mix.pick(rng)] {
            RankOp::Score => Op::Score {
                board,
                member: self.members.sample(rng),
                score: self.score(rng),
                // Random 64-bit ids: repeats (which would be reported as
                // duplicates) are vanishingly rare, across runs too.
                event_id: rng.next_u64(),
            },
            RankOp::Top => Op::Top { board },
            RankOp::Rank => Op::Rank { board, member: self.members.sample(rng) },
        }
    }

    /// The Plaudit sub-board of `board`.
    pub fn type_id(board: u64) -> String {
        format!("total:0_{board}")
    }

    /// The Redis sorted set of `board`.
    pub fn redis_key(&self, board: u64) -> String {
        format!("rk:{}:{board}", self.rank)
    }
}

/// The preload as a sequence of `(board, member)` pairs, members
/// `1..=per_board` of every board; loop `i` of `n` takes every `n`-th pair.
#[derive(Debug, Clone, Copy)]
pub struct PreloadPlan {
    pub boards: u64,
    pub per_board: u64,
}

impl PreloadPlan {
    pub fn total(&self) -> u64 {
        self.boards * self.per_board
    }

    /// The pair at position `idx` (board-major within each member, so every
    /// board fills at the same pace).
    pub fn pair(&self, idx: u64) -> (u64, u64) {
        (idx % self.boards, 1 + idx / self.boards)
    }

    /// The positions loop `i` of `n` writes.
    pub fn share(&self, i: u64, n: u64) -> impl Iterator<Item = u64> {
        (i..self.total()).step_by(n as usize)
    }
}

pub fn preload_report(records: u64, started: Instant, errors: u64) -> Preload {
    let seconds = started.elapsed().as_secs_f64();
    let per_s = (records as f64 / seconds.max(1e-9)).round();
    Preload { records, seconds: (seconds * 1000.0).round() / 1000.0, per_s, errors }
}

/// Runs the rankings workload against the chosen target and prints the report.
pub async fn run(args: &RankingsArgs) -> anyhow::Result<()> {
    let c = &args.common;
    let wl = Arc::new(Workload {
        rank: args.rank,
        boards: args.boards,
        members: Zipf::new(args.members, args.member_zipf).map_err(anyhow::Error::msg)?,
        hot_share: args.hot_share,
        mix: args.mix.clone(),
        max_score: args.max_score,
    });
    let seed = c.seed();
    let plan = PreloadPlan { boards: args.boards, per_board: args.preload };
    let phase = Phase::default();
    let rngs = |n: usize| -> Vec<FastRng> {
        (0..n as u64).map(|i| FastRng::seed(seed ^ i.wrapping_mul(0xD1B5_4A32_D192_ED03))).collect()
    };
    let (addr, target, preload, stats, window) = match c.target {
        Target::Redis => {
            let mut conns = Vec::with_capacity(c.connections);
            for _ in 0..c.connections {
                conns.push(crate::redis::Conn::connect(&c.redis_addr).await?);
            }
            let mut preload = None;
            if plan.total() > 0 {
                c.progress(&format!("preloading {} members", plan.total()));
                let (done, p) =
                    rankings_redis::preload(conns, wl.clone(), plan, c.pipeline, seed).await?;
                conns = done;
                preload = Some(p);
            }
            let tasks: Vec<_> = conns
                .into_iter()
                .zip(rngs(c.connections))
                .map(|(conn, rng)| {
                    tokio::spawn(rankings_redis::run_worker(
                        c.redis_addr.clone(),
                        conn,
                        wl.clone(),
                        rng,
                        c.pipeline,
                        phase.clone(),
                    ))
                })
                .collect();
            let (stats, window) = measure(c, &phase, wl.mix.ops(), tasks).await?;
            (c.redis_addr.clone(), "redis", preload, stats, window)
        }
        Target::Plaudit => {
            let clients = plaudit::connect(c).await?;
            rankings_plaudit::ensure_rank(&clients[0], args.rank).await?;
            let loops = c.connections * c.pipeline;
            let mut preload = None;
            if plan.total() > 0 {
                c.progress(&format!("preloading {} members", plan.total()));
                preload =
                    Some(rankings_plaudit::preload(&clients, c.pipeline, &wl, plan, seed).await?);
            }
            let tasks = plaudit_loop::spawn(
                c,
                &clients,
                rngs(loops),
                &phase,
                |rngs| rankings_plaudit::RankBatches { wl: wl.clone(), rngs },
                |client, rng, phase| rankings_plaudit::run_loop(client, wl.clone(), rng, phase),
            );
            let (stats, window) = measure(c, &phase, wl.mix.ops(), tasks).await?;
            (c.addr.clone(), "plaudit", preload, stats, window)
        }
    };
    let info = RunInfo::new(
        c,
        target,
        addr,
        window,
        preload,
        vec![
            ("rank", args.rank.into()),
            ("boards", args.boards.into()),
            ("members", args.members.into()),
            ("member_zipf", args.member_zipf.into()),
            ("hot_share", args.hot_share.into()),
            ("preload_per_board", args.preload.into()),
        ],
    );
    report::print(c.json, &info, &wl.mix, &stats);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(boards: u64, hot_share: f64, mix: &str) -> Workload {
        Workload {
            rank: 7,
            boards,
            members: Zipf::new(1000, 0.0).unwrap(),
            hot_share,
            mix: RankOp::parse_mix(mix).unwrap(),
            max_score: 5,
        }
    }

    #[test]
    fn the_hot_board_gets_its_share() {
        let wl = workload(100, 0.5, "score=1");
        let mut rng = FastRng::seed(1);
        let n = 100_000;
        let hot = (0..n).filter(|_| wl.board(&mut rng) == 0).count();
        // 0.5 + 0.5/100 of all draws.
        assert!((hot as f64 / n as f64 - 0.505).abs() < 0.01, "{hot}");
        let cold = workload(100, 0.0, "score=1");
        assert!((0..10_000).all(|_| cold.board(&mut rng) < 100));
    }

    #[test]
    fn ops_follow_the_mix_and_stay_in_range() {
        let wl = workload(10, 0.0, "score=2,top=1,rank=1");
        let mut rng = FastRng::seed(2);
        let mut kinds = [0u32; 3];
        let mut ids = std::collections::HashSet::new();
        for _ in 0..40_000 {
            let op = wl.next_op(&mut rng);
            kinds[op.kind().index()] += 1;
            match op {
                Op::Score { board, member, score, event_id } => {
                    assert!(board < 10 && (1..=1000).contains(&member) && (1..=5).contains(&score));
                    assert!(ids.insert(event_id), "event ids repeat");
                }
                Op::Top { board } => assert!(board < 10),
                Op::Rank { board, member } => assert!(board < 10 && (1..=1000).contains(&member)),
            }
        }
        assert!((kinds[0] as i64 - 20_000).abs() < 800, "{kinds:?}");
        assert!((kinds[1] as i64 - 10_000).abs() < 800, "{kinds:?}");
    }

    #[test]
    fn the_preload_plan_covers_every_pair_once() {
        let plan = PreloadPlan { boards: 3, per_board: 4 };
        let mut seen = std::collections::HashSet::new();
        for i in 0..5 {
            for idx in plan.share(i, 5) {
                assert!(seen.insert(plan.pair(idx)));
            }
        }
        assert_eq!(seen.len(), 12);
        assert!(seen.iter().all(|&(b, m)| b < 3 && (1..=4).contains(&m)));
    }

    #[test]
    fn names_match_what_plaudit_and_redis_use() {
        assert_eq!(Workload::type_id(110), "total:0_110");
        assert_eq!(workload(1, 0.0, "top=1").redis_key(3), "rk:7:3");
    }
}
