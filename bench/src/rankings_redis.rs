//! The rankings workload against Redis, one sorted set per board
//! (`rk:{rank}:{board}`), the way leaderboards are usually built on it:
//!
//! - score: `ZINCRBY key incr member`, the increment written as the
//!   "integer + time fraction" trick does (`score - ts_ms/1e13`, so the
//!   earlier of two equal integer scores ranks higher). Keeping the fraction
//!   exact over many increments needs a read-modify-write script per event;
//!   the bench sends the plain `ZINCRBY`, which only flatters Redis.
//! - top: `ZREVRANGE key 0 9 WITHSCORES`
//! - rank: `ZREVRANK key member`
//!
//! The preload writes members with `ZADD key s m s m ...`, 500 per command.

use crate::load::{Phase, Stats};
use crate::rankings::{preload_report, Op, PreloadPlan, Workload};
use crate::redis::{Arg, Conn, Value};
use crate::redis_loop::{self, error_code, PipelinedOps};
use crate::report::Preload;
use crate::rng::FastRng;
use anyhow::bail;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Members per `ZADD` of the preload.
const ZADD_CHUNK: u64 = 500;

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// `score - ts_ms / 1e13` as a decimal string (exact: no float formatting).
pub fn trick_increment(score: i64, ts_ms: i64) -> String {
    const SCALE: i64 = 10_000_000_000_000;
    let ts = ts_ms.clamp(1, SCALE - 1);
    format!("{}.{:013}", score - 1, SCALE - ts)
}

pub struct RankOps {
    pub wl: Arc<Workload>,
    pub rng: FastRng,
}

impl PipelinedOps for RankOps {
    type Op = Op;

    fn ops(&self) -> usize {
        self.wl.mix.ops()
    }

    fn next_op(&mut self) -> Op {
        self.wl.next_op(&mut self.rng)
    }

    fn kind(op: &Op) -> usize {
        op.kind().index()
    }

    fn queue(&mut self, conn: &mut Conn, op: &Op) {
        match *op {
            Op::Score { board, member, score, .. } => {
                let key = self.wl.redis_key(board);
                let incr = trick_increment(score, now_ms());
                conn.queue(&[
                    "ZINCRBY".into(),
                    key.as_str().into(),
                    incr.as_str().into(),
                    Arg::Int(member as i64),
                ]);
            }
            Op::Top { board } => {
                let key = self.wl.redis_key(board);
                conn.queue(&[
                    "ZREVRANGE".into(),
                    key.as_str().into(),
                    "0".into(),
                    "9".into(),
                    "WITHSCORES".into(),
                ]);
            }
            Op::Rank { board, member } => {
                let key = self.wl.redis_key(board);
                conn.queue(&["ZREVRANK".into(), key.as_str().into(), Arg::Int(member as i64)]);
            }
        }
    }

    async fn read(&mut self, conn: &mut Conn, op: &Op) -> anyhow::Result<Result<(), String>> {
        let v = conn.read_reply().await?;
        Ok(match (op, v) {
            (_, Value::Error(e)) => Err(error_code(&e)),
            (Op::Score { .. }, Value::Bulk(_)) => Ok(()),
            (Op::Top { .. }, Value::Array(items)) if items.len() <= 20 => Ok(()),
            (Op::Rank { .. }, Value::Int(_) | Value::Nil) => Ok(()),
            _ => Err("Protocol".into()),
        })
    }
}

pub async fn run_worker(
    addr: String,
    conn: Conn,
    wl: Arc<Workload>,
    rng: FastRng,
    pipeline: usize,
    phase: Phase,
) -> Stats {
    redis_loop::run(addr, conn, RankOps { wl, rng }, pipeline, phase).await
}

/// Writes members `1..=per_board` of every board over `conns`, up to
/// `pipeline` `ZADD`s in flight per connection.
pub async fn preload(
    conns: Vec<Conn>,
    wl: Arc<Workload>,
    plan: PreloadPlan,
    pipeline: usize,
    seed: u64,
) -> anyhow::Result<(Vec<Conn>, Preload)> {
    // Jobs are (board, first member) of each chunk, dealt round robin.
    let chunks = plan.per_board.div_ceil(ZADD_CHUNK);
    let jobs: Vec<(u64, u64)> =
        (0..plan.boards).flat_map(|b| (0..chunks).map(move |c| (b, 1 + c * ZADD_CHUNK))).collect();
    let jobs = Arc::new(jobs);
    let n = conns.len();
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(n);
    for (i, mut conn) in conns.into_iter().enumerate() {
        let (wl, jobs) = (wl.clone(), jobs.clone());
        let mut rng = FastRng::seed(seed ^ 0x5EED ^ i as u64);
        tasks.push(tokio::spawn(async move {
            let mine: Vec<(u64, u64)> = jobs.iter().copied().skip(i).step_by(n).collect();
            let mut errors = 0u64;
            for batch in mine.chunks(pipeline) {
                for &(board, first) in batch {
                    let last = (first + ZADD_CHUNK - 1).min(plan.per_board);
                    let key = wl.redis_key(board);
                    let mut args: Vec<Arg<'_>> = vec!["ZADD".into(), key.as_str().into()];
                    for m in first..=last {
                        args.push(Arg::Int(wl.score(&mut rng)));
                        args.push(Arg::Int(m as i64));
                    }
                    conn.queue(&args);
                }
                conn.flush().await?;
                for _ in batch {
                    match conn.read_reply().await? {
                        Value::Int(_) => {}
                        Value::Error(_) => errors += 1,
                        other => bail!("unexpected ZADD reply {other:?}"),
                    }
                }
            }
            anyhow::Ok((conn, errors))
        }));
    }
    let mut out = Vec::with_capacity(n);
    let mut errors = 0;
    for t in tasks {
        let (c, e) = t.await??;
        errors += e;
        out.push(c);
    }
    Ok((out, preload_report(plan.total(), started, errors)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trick_puts_earlier_times_higher() {
        assert_eq!(trick_increment(5, 1_713_165_315_000), "4.8286834685000");
        let earlier: f64 = trick_increment(5, 1_000).parse().unwrap();
        let later: f64 = trick_increment(5, 2_000).parse().unwrap();
        assert!(earlier > later && later > 4.0 && earlier < 5.0);
    }
}
