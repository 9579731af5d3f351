//! Turning merged statistics into the JSON document and the human table.

use crate::args::Common;
use crate::cpu::{CpuSummary, Usage, Window};
use crate::load::{Mix, Stats};
use serde::ser::{Serialize, SerializeMap, Serializer};
use std::collections::BTreeMap;

/// What the run was, for the report header.
#[derive(Debug, Clone)]
pub struct RunInfo {
    pub target: &'static str,
    pub addr: String,
    pub connections: usize,
    pub pipeline: usize,
    /// The measured window, in seconds.
    pub duration_s: f64,
    /// CPU spent over that window (with `--server-pid`).
    pub cpu: Option<Usage>,
    pub preload: Option<Preload>,
    /// Workload facts worth keeping with the numbers (e.g. boards, members).
    pub settings: Vec<(&'static str, serde_json::Value)>,
}

impl RunInfo {
    /// A run of `target` at `addr` with the shared flags of `c`.
    pub fn new(
        c: &Common,
        target: &'static str,
        addr: String,
        window: Window,
        preload: Option<Preload>,
        settings: Vec<(&'static str, serde_json::Value)>,
    ) -> RunInfo {
        RunInfo {
            target,
            addr,
            connections: c.connections,
            pipeline: c.pipeline,
            duration_s: window.secs,
            cpu: window.cpu,
            preload,
            settings,
        }
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Preload {
    pub records: u64,
    pub seconds: f64,
    pub per_s: f64,
    pub errors: u64,
}

#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct OpSummary {
    pub ops_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
}

/// The ops in mix order (serde_json's default map would sort them).
struct Ordered<T>(Vec<(&'static str, T)>);

impl<T: Serialize> Serialize for Ordered<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

#[derive(serde::Serialize)]
struct Report<'a> {
    total_ops_per_s: f64,
    ops: Ordered<OpSummary>,
    target: &'a str,
    addr: &'a str,
    connections: usize,
    pipeline: usize,
    duration_s: f64,
    errors_total: u64,
    errors: Ordered<&'a BTreeMap<String, u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    preload: Option<&'a Preload>,
    settings: Ordered<&'a serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu: Option<CpuSummary>,
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn us(ns: u64) -> f64 {
    round1(ns as f64 / 1000.0)
}

pub fn summarize(stats: &Stats, op: usize, duration_s: f64) -> OpSummary {
    let h = stats.hist(op);
    OpSummary {
        ops_per_s: round1(h.count() as f64 / duration_s.max(1e-9)),
        p50_us: us(h.quantile(0.50)),
        p99_us: us(h.quantile(0.99)),
        p999_us: us(h.quantile(0.999)),
    }
}

fn error_total(stats: &Stats, mix: &Mix) -> u64 {
    mix.active().map(|k| stats.errors(k).values().sum::<u64>()).sum()
}

/// The CPU figures, per successful op: the ops `total_ops_per_s` counts, so
/// µs/op times ops/s gives the server's cores. Errors are charged to them.
fn cpu_summary(info: &RunInfo, mix: &Mix, stats: &Stats) -> Option<CpuSummary> {
    let ops: u64 = mix.active().map(|k| stats.hist(k).count()).sum();
    info.cpu.map(|u| u.summarize(ops, info.duration_s))
}

pub fn json(info: &RunInfo, mix: &Mix, stats: &Stats) -> String {
    let ops: Vec<_> =
        mix.active().map(|k| (mix.name(k), summarize(stats, k, info.duration_s))).collect();
    let total = round1(ops.iter().map(|(_, s)| s.ops_per_s).sum());
    let errors = mix
        .active()
        .filter(|k| !stats.errors(*k).is_empty())
        .map(|k| (mix.name(k), stats.errors(k)))
        .collect();
    let report = Report {
        total_ops_per_s: total,
        ops: Ordered(ops),
        target: info.target,
        addr: &info.addr,
        connections: info.connections,
        pipeline: info.pipeline,
        duration_s: (info.duration_s * 1000.0).round() / 1000.0,
        errors_total: error_total(stats, mix),
        errors: Ordered(errors),
        preload: info.preload.as_ref(),
        settings: Ordered(info.settings.iter().map(|(k, v)| (*k, v)).collect()),
        cpu: cpu_summary(info, mix, stats),
    };
    serde_json::to_string(&report).expect("a report always serializes")
}

/// Prints the report as JSON or as the human table.
pub fn print(json_out: bool, info: &RunInfo, mix: &Mix, stats: &Stats) {
    if json_out {
        println!("{}", json(info, mix, stats));
    } else {
        print!("{}", human(info, mix, stats));
    }
}

pub fn human(info: &RunInfo, mix: &Mix, stats: &Stats) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "target {} at {}  connections {}  pipeline {}  measured {:.1}s",
        info.target, info.addr, info.connections, info.pipeline, info.duration_s
    );
    if let Some(p) = &info.preload {
        let _ = writeln!(
            out,
            "preload: {} records in {:.1}s = {:.0} records/s ({} errors)",
            p.records, p.seconds, p.per_s, p.errors
        );
    }
    let _ = writeln!(
        out,
        "{:<8} {:>12} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9}",
        "op", "ops/s", "mean us", "p50 us", "p99 us", "p99.9 us", "max us", "errors"
    );
    let mut total = 0.0;
    for k in mix.active() {
        let s = summarize(stats, k, info.duration_s);
        total += s.ops_per_s;
        let errs: u64 = stats.errors(k).values().sum();
        let _ = writeln!(
            out,
            "{:<8} {:>12.0} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>9}",
            mix.name(k),
            s.ops_per_s,
            round1(stats.hist(k).mean() / 1000.0),
            s.p50_us,
            s.p99_us,
            s.p999_us,
            us(stats.hist(k).max()),
            errs
        );
    }
    let _ = writeln!(out, "{:<8} {:>12.0}", "total", total);
    if let Some(cpu) = cpu_summary(info, mix, stats) {
        let _ = writeln!(
            out,
            "cpu: server {:.2} us/op ({:.2} cores), bench {:.2} cores",
            cpu.server_us_per_op, cpu.server_cores, cpu.client_cores
        );
    }
    for k in mix.active() {
        for (code, n) in stats.errors(k) {
            let _ = writeln!(out, "  error {}: {code} x{n}", mix.name(k));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_the_promised_shape() {
        let mix = Mix::parse("like=10,status=45,counts=45", &["like", "status", "counts"]).unwrap();
        let mut stats = Stats::new(mix.ops());
        for i in 0..1000u64 {
            stats.ok_ns(0, 1000 + i);
            stats.ok_ns(2, 5000);
        }
        stats.error(0, "Overloaded");
        let info = RunInfo {
            target: "redis",
            addr: "127.0.0.1:6379".into(),
            connections: 2,
            pipeline: 3,
            duration_s: 2.0,
            cpu: None,
            preload: None,
            settings: vec![("boards", 3.into())],
        };
        let text = json(&info, &mix, &stats);
        assert!(text.starts_with(r#"{"total_ops_per_s":1000.0,"ops":{"like":{"ops_per_s":500.0"#));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["ops"]["status"]["ops_per_s"], 0.0);
        assert_eq!(v["ops"]["counts"]["p99_us"], 5.0);
        assert_eq!(v["ops"]["like"]["p50_us"], 1.5);
        assert_eq!(v["errors"]["like"]["Overloaded"], 1);
        assert_eq!(v["errors_total"], 1);
        assert_eq!(v["settings"]["boards"], 3);
        assert!(human(&info, &mix, &stats).contains("Overloaded x1"));
        assert!(v.get("cpu").is_none(), "no cpu object without --server-pid");
    }

    #[test]
    fn cpu_object_comes_last_and_counts_successful_ops() {
        let mix = Mix::parse("score=1,top=1", &["score", "top", "rank"]).unwrap();
        let mut stats = Stats::new(mix.ops());
        for _ in 0..4000u64 {
            stats.ok_ns(0, 1000);
            stats.ok_ns(1, 2000);
        }
        stats.error(1, "Overloaded");
        let info = RunInfo {
            target: "plaudit",
            addr: "127.0.0.1:7401".into(),
            connections: 1,
            pipeline: 1,
            duration_s: 2.0,
            cpu: Some(Usage { server_s: 0.02, client_s: 1.0 }),
            preload: None,
            settings: vec![],
        };
        let text = json(&info, &mix, &stats);
        assert!(
            text.ends_with(
                r#""settings":{},"cpu":{"server_us_per_op":2.5,"server_cores":0.01,"client_cores":0.5}}"#
            ),
            "{text}"
        );
        assert!(human(&info, &mix, &stats).contains("server 2.50 us/op (0.01 cores)"));
    }
}
