//! What every workload shares: the operation mix (named weights), the
//! benchmark phases the driver advances, and per-worker latency and error
//! statistics that are merged at the end. Ops are plain indices into the
//! workload's list of op names, so likes and rankings use the same machinery.

use crate::args::Common;
use crate::cpu::{StatError, Window, WindowStart};
use crate::hist::Histogram;
use crate::rng::FastRng;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Relative weights of a workload's ops, e.g. `like=10,status=45,counts=45`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mix {
    names: &'static [&'static str],
    weights: Vec<u32>,
    total: u32,
}

impl Mix {
    /// Parses `name=weight,...` against the workload's op `names`; ops left
    /// out have weight 0.
    pub fn parse(s: &str, names: &'static [&'static str]) -> Result<Mix, String> {
        let mut weights = vec![0u32; names.len()];
        let mut seen = vec![false; names.len()];
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, w) = part
                .split_once('=')
                .ok_or_else(|| format!("mix entry {part:?} is not name=weight"))?;
            let name = name.trim();
            let op = names
                .iter()
                .position(|n| *n == name)
                .ok_or_else(|| format!("unknown op {name:?} in mix ({})", names.join(", ")))?;
            let w: u32 = w.trim().parse().map_err(|_| format!("bad weight {w:?} for {name}"))?;
            if w > 1_000_000 {
                return Err(format!("weight {w} for {name} is too large"));
            }
            if std::mem::replace(&mut seen[op], true) {
                return Err(format!("op {name} appears twice in the mix"));
            }
            weights[op] = w;
        }
        let total = weights.iter().sum();
        if total == 0 {
            return Err("the mix needs at least one op with a positive weight".into());
        }
        Ok(Mix { names, weights, total })
    }

    /// How many ops the workload has (active or not).
    pub fn ops(&self) -> usize {
        self.names.len()
    }

    pub fn name(&self, op: usize) -> &'static str {
        self.names[op]
    }

    /// Op `op`'s weight (a rate, for `--rate`).
    pub fn weight(&self, op: usize) -> u32 {
        self.weights[op]
    }

    /// The ops with a positive weight, in the workload's order.
    pub fn active(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.names.len()).filter(|&op| self.weights[op] > 0)
    }

    /// Draws an op by weight.
    pub fn pick(&self, rng: &mut FastRng) -> usize {
        let mut x = rng.below(self.total as u64) as u32;
        for (op, &w) in self.weights.iter().enumerate() {
            if x < w {
                return op;
            }
            x -= w;
        }
        unreachable!("weights sum to total")
    }
}

/// Benchmark phases, advanced by the driver and read by every worker.
pub const WARMUP: u8 = 0;
pub const MEASURE: u8 = 1;
pub const STOP: u8 = 2;

#[derive(Clone)]
pub struct Phase(Arc<AtomicU8>);

impl Default for Phase {
    fn default() -> Self {
        Phase(Arc::new(AtomicU8::new(WARMUP)))
    }
}

impl Phase {
    pub fn get(&self) -> u8 {
        self.0.load(Ordering::Relaxed)
    }
    pub fn set(&self, p: u8) {
        self.0.store(p, Ordering::Relaxed)
    }
}

/// Waits out the warm-up, measures, stops; returns the measured window. With
/// a `server_pid`, CPU is sampled right as measuring starts and stops, so the
/// CPU figures and the op counts cover the same span.
pub async fn run_phases(
    phase: &Phase,
    warmup: Duration,
    duration: Duration,
    server_pid: Option<u32>,
) -> Result<Window, StatError> {
    tokio::time::sleep(warmup).await;
    phase.set(MEASURE);
    let started = WindowStart::now(server_pid);
    tokio::time::sleep(duration).await;
    phase.set(STOP);
    started?.end()
}

/// Runs the warm-up and the measured window over workers already running,
/// then merges what they measured.
pub async fn measure(
    c: &Common,
    phase: &Phase,
    ops: usize,
    workers: Vec<tokio::task::JoinHandle<Stats>>,
) -> anyhow::Result<(Stats, Window)> {
    c.progress(&format!("warming up {:?}, measuring {:?}", c.warmup, c.duration));
    let window = run_phases(phase, c.warmup, c.duration, c.server_pid).await;
    // Workers are joined even when the CPU sample failed: the phase is STOP
    // either way, and no task is left running behind the error.
    let mut stats = Stats::new(ops);
    for w in workers {
        stats.merge(&w.await.map_err(|e| anyhow::anyhow!("worker panicked: {e}"))?);
    }
    Ok((stats, window?))
}

/// Latencies (in nanoseconds) and error counts per op, for one worker.
#[derive(Debug, Clone)]
pub struct Stats {
    hist: Vec<Histogram>,
    errors: Vec<BTreeMap<String, u64>>,
}

impl Stats {
    pub fn new(ops: usize) -> Stats {
        Stats { hist: vec![Histogram::default(); ops], errors: vec![BTreeMap::new(); ops] }
    }

    pub fn ok(&mut self, op: usize, started: Instant) {
        self.hist[op].record(started.elapsed().as_nanos() as u64);
    }

    /// An op that took `ns`: for ops that all ended at once (a batch's
    /// replies arrive together), timed with one clock read.
    pub fn ok_ns(&mut self, op: usize, ns: u64) {
        self.hist[op].record(ns);
    }

    pub fn error(&mut self, op: usize, code: &str) {
        *self.errors[op].entry(code.to_string()).or_default() += 1;
    }

    pub fn merge(&mut self, other: &Stats) {
        for (mine, theirs) in self.hist.iter_mut().zip(&other.hist) {
            mine.merge(theirs);
        }
        for (mine, theirs) in self.errors.iter_mut().zip(&other.errors) {
            for (code, n) in theirs {
                *mine.entry(code.clone()).or_default() += n;
            }
        }
    }

    pub fn hist(&self, op: usize) -> &Histogram {
        &self.hist[op]
    }

    pub fn errors(&self, op: usize) -> &BTreeMap<String, u64> {
        &self.errors[op]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPS: &[&str] = &["like", "status", "counts"];

    #[test]
    fn parses_mixes() {
        let m = Mix::parse("like=10,status=45,counts=45", OPS).unwrap();
        assert_eq!((m.weight(0), m.weight(1), m.weight(2)), (10, 45, 45));
        let m = Mix::parse(" counts = 3 , like=1 ", OPS).unwrap();
        assert_eq!(m.active().collect::<Vec<_>>(), vec![0, 2]);
        let m = Mix::parse("like=1,status=0", OPS).unwrap();
        assert_eq!(m.active().collect::<Vec<_>>(), vec![0]);
        assert_eq!((m.ops(), m.name(2)), (3, "counts"));
    }

    #[test]
    fn rejects_bad_mixes() {
        for bad in
            ["", "like", "like=x", "like=-1", "foo=3", "like=0", "like=1,like=2", "like=9999999"]
        {
            assert!(Mix::parse(bad, OPS).is_err(), "{bad:?} should be rejected");
        }
        let err = Mix::parse("score=1", OPS).unwrap_err();
        assert!(err.contains("like, status, counts"), "{err}");
    }

    #[test]
    fn pick_follows_the_weights() {
        let m = Mix::parse("like=10,status=30,counts=60", OPS).unwrap();
        let mut rng = FastRng::seed(5);
        let mut n = [0u32; 3];
        for _ in 0..100_000 {
            n[m.pick(&mut rng)] += 1;
        }
        for (got, want) in n.iter().zip([10_000, 30_000, 60_000]) {
            assert!((*got as i64 - want).abs() < 1_000, "{n:?}");
        }
    }

    #[test]
    fn stats_merge_per_op() {
        let mut a = Stats::new(2);
        let mut b = Stats::new(2);
        a.ok_ns(0, 10);
        b.ok_ns(0, 20);
        b.ok_ns(1, 5);
        b.error(1, "Shed");
        a.error(1, "Shed");
        a.merge(&b);
        assert_eq!((a.hist(0).count(), a.hist(1).count()), (2, 1));
        assert_eq!(a.errors(1)["Shed"], 2);
        assert!(a.errors(0).is_empty());
    }
}
