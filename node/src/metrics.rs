//! The node's request metrics, rendered in the Prometheus text format.
//!
//! [`Metrics`] is built once at start-up and shared by every connection. The
//! hot path ([`Metrics::observe`]) only does relaxed atomic adds into fixed
//! arrays: the set of ops, error codes and buckets is known at compile time, so
//! there is no map and no lock. Values owned by other subsystems (apply lag,
//! active actors, outbox backlog) are passed to [`Metrics::render`] as
//! [`Gauge`]s at scrape time.

use plaudit_proto::ErrorCode;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::Semaphore;

/// Every op name `plaudit_proto::Request::op` returns, in label order (the
/// protocol's own table, tested there against every request variant). An op
/// not in this table is counted under [`OTHER_OP`].
pub const OPS: [&str; plaudit_proto::message::OPS.len()] = plaudit_proto::message::OPS;

/// The label of ops missing from [`OPS`] (a new request kind not yet listed).
pub const OTHER_OP: &str = "other";

/// Upper bounds of the latency histogram buckets, in microseconds: 50 µs to 10 s.
/// A `+Inf` bucket follows implicitly.
pub const BUCKET_BOUNDS_MICROS: [u64; 17] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000,
];

const SLOTS: usize = OPS.len() + 1;
const CODES: usize = ErrorCode::ALL.len();
/// One counter per finite bucket plus one for observations above the last bound.
const BUCKET_SLOTS: usize = BUCKET_BOUNDS_MICROS.len() + 1;

/// A gauge owned by another subsystem, sampled when metrics are rendered.
#[derive(Debug, Clone, PartialEq)]
pub struct Gauge {
    /// Metric family name, e.g. `plaudit_raft_apply_lag`.
    pub name: &'static str,
    /// One line describing the family; the first gauge of a family supplies it.
    pub help: &'static str,
    /// Label pairs, e.g. `[("shard", "3")]`. Never an entity or user id,
    /// but for the few hot keys (`plaudit_hot_key_requests_per_second`).
    pub labels: Vec<(&'static str, String)>,
    pub value: f64,
}

/// Request counters, error counters and a latency histogram per op, and the
/// number of open client connections.
pub struct Metrics {
    ops: [OpMetrics; SLOTS],
    connections_open: AtomicI64,
    connections_total: AtomicU64,
    /// Connections closed, by [`CLOSE_REASONS`] slot.
    connections_closed: [AtomicU64; CLOSE_REASONS.len()],
    /// The client listener's node-wide frame budget and its size in bytes.
    frame_budget: OnceLock<(Arc<Semaphore>, usize)>,
}

/// Why client connections end (`server::Close` labels, plus `refused`: over
/// the cap with none to evict).
pub const CLOSE_REASONS: [&str; 10] = [
    "client",
    "idle",
    "auth_timeout",
    "auth_failed",
    "frame_timeout",
    "write_timeout",
    "evicted",
    "bad_frame",
    "error",
    "refused",
];

/// The counters of one op. Buckets are stored per bucket (not cumulative) and
/// the request count is their sum, so a rendered histogram is always
/// consistent: cumulative counts never decrease and `+Inf` equals `_count`.
struct OpMetrics {
    buckets: [AtomicU64; BUCKET_SLOTS],
    sum_nanos: AtomicU64,
    errors: [AtomicU64; CODES],
}

impl OpMetrics {
    fn new() -> Self {
        OpMetrics {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_nanos: AtomicU64::new(0),
            errors: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        Metrics {
            ops: std::array::from_fn(|_| OpMetrics::new()),
            connections_open: AtomicI64::new(0),
            connections_total: AtomicU64::new(0),
            connections_closed: std::array::from_fn(|_| AtomicU64::new(0)),
            frame_budget: OnceLock::new(),
        }
    }

    /// Records one finished request of `op` that took `elapsed` and failed with
    /// `error`, if it failed.
    pub fn observe(&self, op: &str, elapsed: Duration, error: Option<ErrorCode>) {
        let m = &self.ops[op_slot(op)];
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        let micros = nanos / 1_000;
        // Bucket bounds are inclusive (`le`): 50 µs exactly lands in the 50 µs bucket.
        // A sub-microsecond remainder is rounded up so it lands above the bound.
        let micros = if nanos % 1_000 == 0 { micros } else { micros + 1 };
        let bucket = BUCKET_BOUNDS_MICROS.partition_point(|&bound| bound < micros);
        m.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        m.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
        if let Some(code) = error {
            m.errors[code_slot(code)].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a client connection as opened.
    pub fn conn_opened(&self) {
        self.connections_open.fetch_add(1, Ordering::Relaxed);
        self.connections_total.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a client connection as closed for `reason` (one of
    /// [`CLOSE_REASONS`]); pair with every `conn_opened`.
    pub fn conn_closed(&self, reason: &str) {
        self.connections_open.fetch_sub(1, Ordering::Relaxed);
        self.count_close(reason);
    }

    /// Shows how much of the client listener's frame budget is in use.
    pub fn watch_frame_budget(&self, budget: Arc<Semaphore>, size: usize) {
        let _ = self.frame_budget.set((budget, size));
    }

    /// Counts a connection refused at the cap (never opened).
    pub fn conn_refused(&self) {
        self.count_close("refused");
    }

    fn count_close(&self, reason: &str) {
        let slot = CLOSE_REASONS.iter().position(|&r| r == reason).unwrap_or(0);
        self.connections_closed[slot].fetch_add(1, Ordering::Relaxed);
    }

    /// The number of client connections open now.
    pub fn connections_open(&self) -> i64 {
        self.connections_open.load(Ordering::Relaxed)
    }

    /// All metrics in the Prometheus text exposition format (version 0.0.4),
    /// followed by `extra`. Gauges of `extra` that share a name form one family
    /// (one `# HELP`/`# TYPE`), whatever their order in the slice.
    pub fn render(&self, extra: &[Gauge]) -> String {
        let mut out = String::with_capacity(16 * 1024);
        let op_labels = || OPS.iter().copied().chain([OTHER_OP]).zip(&self.ops);

        // Load every bucket once, so the counter and the histogram agree.
        let snapshots: Vec<(&str, [u64; BUCKET_SLOTS], u64)> = op_labels()
            .map(|(op, m)| {
                let buckets = std::array::from_fn(|i| m.buckets[i].load(Ordering::Relaxed));
                (op, buckets, m.sum_nanos.load(Ordering::Relaxed))
            })
            .collect();

        header(&mut out, "plaudit_requests_total", "Requests handled, by op.", "counter");
        for (op, buckets, _) in &snapshots {
            let count: u64 = buckets.iter().sum();
            let _ = writeln!(out, "plaudit_requests_total{{op=\"{op}\"}} {count}");
        }

        header(
            &mut out,
            "plaudit_errors_total",
            "Requests that failed, by op and error code.",
            "counter",
        );
        for (op, m) in op_labels() {
            for (code, errors) in ErrorCode::ALL.iter().zip(&m.errors) {
                let n = errors.load(Ordering::Relaxed);
                let code = code.as_str();
                let _ = writeln!(out, "plaudit_errors_total{{op=\"{op}\",code=\"{code}\"}} {n}");
            }
        }

        let name = "plaudit_request_duration_seconds";
        header(&mut out, name, "Time from a request's arrival to its reply, by op.", "histogram");
        for (op, buckets, sum_nanos) in &snapshots {
            let mut cumulative = 0u64;
            for (bound, n) in BUCKET_BOUNDS_MICROS.iter().zip(buckets) {
                cumulative += n;
                let le = *bound as f64 / 1e6;
                let _ = writeln!(out, "{name}_bucket{{op=\"{op}\",le=\"{le}\"}} {cumulative}");
            }
            cumulative += buckets[BUCKET_SLOTS - 1];
            let _ = writeln!(out, "{name}_bucket{{op=\"{op}\",le=\"+Inf\"}} {cumulative}");
            let sum = *sum_nanos as f64 / 1e9;
            let _ = writeln!(out, "{name}_sum{{op=\"{op}\"}} {sum}");
            let _ = writeln!(out, "{name}_count{{op=\"{op}\"}} {cumulative}");
        }

        header(&mut out, "plaudit_connections_open", "Client connections open now.", "gauge");
        let _ = writeln!(out, "plaudit_connections_open {}", self.connections_open());
        header(
            &mut out,
            "plaudit_connections_total",
            "Client connections accepted since start.",
            "counter",
        );
        let total = self.connections_total.load(Ordering::Relaxed);
        let _ = writeln!(out, "plaudit_connections_total {total}");
        let name = "plaudit_connections_closed_total";
        header(&mut out, name, "Client connections closed or refused, by reason.", "counter");
        for (reason, n) in CLOSE_REASONS.iter().zip(&self.connections_closed) {
            let n = n.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}{{reason=\"{reason}\"}} {n}");
        }

        if let Some((budget, size)) = self.frame_budget.get() {
            let name = "plaudit_client_frame_budget_used_bytes";
            header(&mut out, name, "Bytes of long request frames held, node-wide.", "gauge");
            let used = size.saturating_sub(budget.available_permits());
            let _ = writeln!(out, "{name} {used}");
        }
        render_gauges(&mut out, extra);
        out
    }
}

/// The slot of `op` in [`Metrics::ops`]: its index in [`OPS`], or the last slot.
fn op_slot(op: &str) -> usize {
    OPS.iter().position(|&known| known == op).unwrap_or(OPS.len())
}

fn code_slot(code: ErrorCode) -> usize {
    // `ALL` lists every variant, so the fallback is never taken; it keeps a
    // code added to the enum but not to `ALL` from panicking the hot path.
    ErrorCode::ALL.iter().position(|&c| c == code).unwrap_or(CODES - 1)
}

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {}", escape_help(help));
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Writes `gauges` grouped into families by name, in order of first appearance.
fn render_gauges(out: &mut String, gauges: &[Gauge]) {
    // A handful of families, each with up to one gauge per shard: a linear scan
    // over the family list is cheaper than a map.
    let mut families: Vec<(&'static str, Vec<&Gauge>)> = Vec::new();
    for gauge in gauges {
        match families.iter_mut().find(|(name, _)| *name == gauge.name) {
            Some((_, members)) => members.push(gauge),
            None => families.push((gauge.name, vec![gauge])),
        }
    }
    for (name, members) in families {
        header(out, name, members[0].help, "gauge");
        for gauge in members {
            out.push_str(name);
            if !gauge.labels.is_empty() {
                out.push('{');
                for (i, (key, value)) in gauge.labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{key}=\"{}\"", escape_label(value));
                }
                out.push('}');
            }
            let _ = writeln!(out, " {}", format_value(gauge.value));
        }
    }
}

fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_string()
    } else if v == f64::INFINITY {
        "+Inf".to_string()
    } else if v == f64::NEG_INFINITY {
        "-Inf".to_string()
    } else {
        v.to_string()
    }
}

fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

fn escape_label(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, HashMap};
    use std::sync::Arc;

    /// One sample line: metric name, labels and value.
    #[derive(Debug)]
    struct Sample {
        name: String,
        labels: BTreeMap<String, String>,
        value: f64,
    }

    /// A small parser for the text format, strict enough to catch malformed
    /// output: every sample must follow a `# TYPE` of its family, and no
    /// family may be declared twice.
    fn parse(text: &str) -> (HashMap<String, String>, Vec<Sample>) {
        let mut types = HashMap::new();
        let mut helps = HashMap::new();
        let mut samples = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap().to_string();
                assert!(helps.insert(name.clone(), ()).is_none(), "HELP twice for {name}");
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut parts = rest.split(' ');
                let name = parts.next().unwrap().to_string();
                let kind = parts.next().unwrap().to_string();
                assert!(helps.contains_key(&name), "TYPE before HELP for {name}");
                assert!(types.insert(name.clone(), kind).is_none(), "TYPE twice for {name}");
            } else {
                let (series, value) = line.rsplit_once(' ').expect("sample has a value");
                let value: f64 = match value {
                    "+Inf" => f64::INFINITY,
                    "-Inf" => f64::NEG_INFINITY,
                    v => v.parse().unwrap_or_else(|_| panic!("bad value in {line:?}")),
                };
                let (name, labels) = match series.split_once('{') {
                    Some((name, rest)) => {
                        let body = rest.strip_suffix('}').expect("labels end with }");
                        let labels = body
                            .split(',')
                            .map(|pair| {
                                let (k, v) = pair.split_once('=').unwrap();
                                let v = v.strip_prefix('"').unwrap().strip_suffix('"').unwrap();
                                (k.to_string(), v.to_string())
                            })
                            .collect();
                        (name, labels)
                    }
                    None => (series, BTreeMap::new()),
                };
                let family = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s).filter(|f| types.contains_key(*f)))
                    .unwrap_or(name);
                assert!(types.contains_key(family), "sample before its TYPE: {line:?}");
                samples.push(Sample { name: name.to_string(), labels, value });
            }
        }
        (types, samples)
    }

    fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
        let found: Vec<&Sample> = samples
            .iter()
            .filter(|s| {
                s.name == name
                    && s.labels.len() == labels.len()
                    && labels.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(v))
            })
            .collect();
        assert_eq!(found.len(), 1, "expected one {name}{labels:?}, found {found:?}");
        found[0].value
    }

    #[test]
    fn the_op_table_matches_the_protocol() {
        use plaudit_proto::Request;
        for request in [Request::Ping, Request::ListBiz, Request::GetBiz(1), Request::ListRanks] {
            assert_eq!(OPS[op_slot(request.op())], request.op());
        }
        assert_eq!(op_slot("no_such_op"), OPS.len());
    }

    #[test]
    fn render_lists_every_family_once_with_its_type() {
        let metrics = Metrics::new();
        let (types, samples) = parse(&metrics.render(&[]));
        assert_eq!(types["plaudit_requests_total"], "counter");
        assert_eq!(types["plaudit_errors_total"], "counter");
        assert_eq!(types["plaudit_request_duration_seconds"], "histogram");
        assert_eq!(types["plaudit_connections_open"], "gauge");
        assert_eq!(types["plaudit_connections_total"], "counter");
        // Every op and every code is present from the start, at zero.
        for op in OPS.iter().chain([&OTHER_OP]) {
            assert_eq!(value(&samples, "plaudit_requests_total", &[("op", op)]), 0.0);
            for code in ErrorCode::ALL {
                let labels = [("op", *op), ("code", code.as_str())];
                assert_eq!(value(&samples, "plaudit_errors_total", &labels), 0.0);
            }
        }
    }

    #[test]
    fn observations_fill_cumulative_monotone_buckets() {
        let metrics = Metrics::new();
        let micros = [10, 50, 51, 700, 700, 3_000, 2_000_000, 10_000_000, 60_000_000];
        for us in micros {
            metrics.observe("like", Duration::from_micros(us), None);
        }
        metrics.observe("like", Duration::from_micros(200), Some(ErrorCode::Overloaded));
        metrics.observe("status", Duration::from_millis(1), Some(ErrorCode::NotLeader));

        let (_, samples) = parse(&metrics.render(&[]));
        let name = "plaudit_request_duration_seconds_bucket";
        let like: Vec<(f64, f64)> = samples
            .iter()
            .filter(|s| s.name == name && s.labels["op"] == "like")
            .map(|s| (s.labels["le"].parse::<f64>().unwrap_or(f64::INFINITY), s.value))
            .collect();
        assert_eq!(like.len(), BUCKET_BOUNDS_MICROS.len() + 1);
        assert!(like.windows(2).all(|w| w[0].0 < w[1].0), "le rises: {like:?}");
        assert!(like.windows(2).all(|w| w[0].1 <= w[1].1), "counts cumulative: {like:?}");
        assert_eq!(like[0], (0.00005, 2.0), "10 µs and exactly 50 µs are <= 50 µs");
        assert_eq!(like.last().unwrap().1, 10.0);
        let at = |le: f64| like.iter().find(|(b, _)| *b == le).unwrap().1;
        assert_eq!(at(0.0001), 3.0, "51 µs is above 50 µs");
        assert_eq!(at(0.00025), 4.0, "200 µs");
        assert_eq!(at(0.001), 6.0, "two at 700 µs");
        assert_eq!(at(10.0), 9.0, "60 s only in +Inf");

        let count = value(&samples, "plaudit_request_duration_seconds_count", &[("op", "like")]);
        assert_eq!(count, 10.0);
        assert_eq!(value(&samples, "plaudit_requests_total", &[("op", "like")]), 10.0);
        let sum = value(&samples, "plaudit_request_duration_seconds_sum", &[("op", "like")]);
        let expected = (micros.iter().sum::<u64>() + 200) as f64 / 1e6;
        assert!((sum - expected).abs() < 1e-9, "sum {sum} != {expected}");

        let err = |op, code: ErrorCode| {
            value(&samples, "plaudit_errors_total", &[("op", op), ("code", code.as_str())])
        };
        assert_eq!(err("like", ErrorCode::Overloaded), 1.0);
        assert_eq!(err("like", ErrorCode::NotLeader), 0.0);
        assert_eq!(err("status", ErrorCode::NotLeader), 1.0);
    }

    #[test]
    fn unknown_ops_are_counted_as_other() {
        let metrics = Metrics::new();
        metrics.observe("frobnicate", Duration::from_millis(2), Some(ErrorCode::BadRequest));
        let (_, samples) = parse(&metrics.render(&[]));
        assert_eq!(value(&samples, "plaudit_requests_total", &[("op", "other")]), 1.0);
        let labels = [("op", "other"), ("code", "BadRequest")];
        assert_eq!(value(&samples, "plaudit_errors_total", &labels), 1.0);
        assert!(!samples.iter().any(|s| s.labels.get("op").is_some_and(|op| op == "frobnicate")));
    }

    #[test]
    fn connections_gauge_follows_open_and_close() {
        let metrics = Metrics::new();
        metrics.conn_opened();
        metrics.conn_opened();
        metrics.conn_closed("client");
        let (_, samples) = parse(&metrics.render(&[]));
        assert_eq!(value(&samples, "plaudit_connections_open", &[]), 1.0);
        assert_eq!(value(&samples, "plaudit_connections_total", &[]), 2.0);
    }

    #[test]
    fn extra_gauges_share_one_header_per_family() {
        let lag = |shard: u32, v: f64| Gauge {
            name: "plaudit_raft_apply_lag",
            help: "Committed but not yet applied entries, by shard.",
            labels: vec![("shard", shard.to_string())],
            value: v,
        };
        let actors = Gauge {
            name: "plaudit_active_actors",
            help: "Active virtual actors, by shard.",
            labels: vec![("shard", "0".to_string()), ("note", "a \"quoted\"\\value".to_string())],
            value: 12.0,
        };
        let backlog = Gauge {
            name: "plaudit_outbox_backlog",
            help: "Undelivered outbox deltas.",
            labels: vec![],
            value: f64::NAN,
        };
        // Interleaved on purpose: the family of `lag` is split in the input.
        let extra = [lag(0, 3.0), actors, lag(1, 0.5), backlog];
        let text = Metrics::new().render(&extra);
        let (types, samples) = parse(&text);
        assert_eq!(types["plaudit_raft_apply_lag"], "gauge");
        assert_eq!(types["plaudit_active_actors"], "gauge");
        assert_eq!(value(&samples, "plaudit_raft_apply_lag", &[("shard", "0")]), 3.0);
        assert_eq!(value(&samples, "plaudit_raft_apply_lag", &[("shard", "1")]), 0.5);
        assert!(value(&samples, "plaudit_outbox_backlog", &[]).is_nan());
        assert!(text.contains(r#"note="a \"quoted\"\\value""#), "{text}");
    }

    #[test]
    fn concurrent_observations_are_all_counted() {
        let metrics = Arc::new(Metrics::new());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let metrics = metrics.clone();
                std::thread::spawn(move || {
                    for i in 0..10_000u64 {
                        metrics.observe("counts", Duration::from_micros(i % 5_000), None);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let (_, samples) = parse(&metrics.render(&[]));
        assert_eq!(value(&samples, "plaudit_requests_total", &[("op", "counts")]), 40_000.0);
    }
}
