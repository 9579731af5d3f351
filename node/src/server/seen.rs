//! The latency observations of the answers a read pass gives at once
//! (reads answered in place, and writes answered without proposing).
//!
//! Why: one clock read per such answer was 3.8% of the node on rank-of.
//! Those answers all leave in the pass's one
//! write, so the time from the pass's start to its end is what each of
//! them took as the client sees it; one clock read serves them all. At
//! most [`FLUSH_EVERY`] wait, so a long pass holds a bounded list.

use crate::metrics::Metrics;
use plaudit_proto::ErrorCode;
use std::time::Instant;

/// Observations held before they are recorded with one clock read.
pub(super) const FLUSH_EVERY: usize = 64;

#[derive(Default)]
pub(super) struct PassSeen {
    ops: Vec<(&'static str, Option<ErrorCode>)>,
}

impl PassSeen {
    /// Notes an answer of the pass that began at `started`.
    pub(super) fn push(
        &mut self,
        metrics: &Metrics,
        started: Instant,
        op: &'static str,
        code: Option<ErrorCode>,
    ) {
        self.ops.push((op, code));
        if self.ops.len() >= FLUSH_EVERY {
            self.flush(metrics, started);
        }
    }

    /// Records every noted answer as taking the time since `started`.
    pub(super) fn flush(&mut self, metrics: &Metrics, started: Instant) {
        if self.ops.is_empty() {
            return;
        }
        let took = started.elapsed();
        for (op, code) in self.ops.drain(..) {
            metrics.observe(op, took, code);
        }
    }

    /// Lets the list's memory go (an idle connection keeps no buffers).
    pub(super) fn release(&mut self) {
        self.ops = Vec::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(metrics: &Metrics, op: &str) -> u64 {
        let text = metrics.render(&[]);
        let line = format!("plaudit_requests_total{{op=\"{op}\"}} ");
        let found = text.lines().find_map(|l| l.strip_prefix(line.as_str()));
        found.expect("the op is listed").trim().parse().unwrap()
    }

    #[test]
    fn answers_are_recorded_when_the_pass_ends() {
        let metrics = Metrics::new();
        let mut seen = PassSeen::default();
        let started = Instant::now();
        seen.push(&metrics, started, "rank_of", None);
        seen.push(&metrics, started, "top", Some(ErrorCode::NotFound));
        assert_eq!(count(&metrics, "rank_of"), 0);
        seen.flush(&metrics, started);
        assert_eq!(count(&metrics, "rank_of"), 1);
        assert_eq!(count(&metrics, "top"), 1);
        seen.flush(&metrics, started);
        assert_eq!(count(&metrics, "top"), 1, "recorded once");
    }

    #[test]
    fn a_long_pass_holds_at_most_flush_every() {
        let metrics = Metrics::new();
        let mut seen = PassSeen::default();
        let started = Instant::now();
        for _ in 0..(3 * FLUSH_EVERY + 5) {
            seen.push(&metrics, started, "status", None);
            assert!(seen.ops.len() < FLUSH_EVERY);
        }
        assert_eq!(count(&metrics, "status"), 3 * FLUSH_EVERY as u64);
        seen.flush(&metrics, started);
        assert_eq!(count(&metrics, "status"), 3 * FLUSH_EVERY as u64 + 5);
    }
}
