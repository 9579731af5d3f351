//! CPU time spent over the measured window, by the server under test and by
//! the bench itself, read from `/proc/PID/stat` (Linux only).
//!
//! Throughput alone hides what an op costs: a server that is 20% slower on
//! twice the cores is a different result from one that is 20% slower on one.
//! With `--server-pid` the driver samples both processes when measuring starts
//! and when it stops, so preload and warm-up are never counted, and the report
//! gains server CPU µs per op and the cores each side kept busy.
//!
//! Why `/proc/PID/stat` and not `getrusage`: the server is another process,
//! and only `/proc` reports another process's time; the bench reads its own
//! from `/proc/self/stat` so both sides share one clock and one granularity
//! (a clock tick, usually 10 ms: 0.1% of a 10 s window). The figures cover
//! every thread of the process (Redis's AOF fsync thread, every Tokio worker).

use std::fmt;
use std::time::Instant;

/// Why a process's CPU time could not be read.
#[derive(Debug)]
pub enum StatError {
    /// `/proc/PID/stat` could not be read (no such process, not Linux).
    Read { pid: String, source: std::io::Error },
    /// The file was read but is not shaped like a stat line.
    Malformed { pid: String, why: &'static str },
}

impl fmt::Display for StatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StatError::Read { pid, source } => write!(f, "reading /proc/{pid}/stat: {source}"),
            StatError::Malformed { pid, why } => write!(f, "/proc/{pid}/stat: {why}"),
        }
    }
}

impl std::error::Error for StatError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StatError::Read { source, .. } => Some(source),
            StatError::Malformed { .. } => None,
        }
    }
}

/// User plus system time of a process, in clock ticks, from one stat line.
///
/// The line is `pid (comm) state ppid ...`; utime and stime are fields 14
/// and 15. `comm` is the thread name and may hold spaces and parentheses
/// (`(my (odd) name)`), so the fields are counted from after the *last* `)`,
/// where field 3 (state) begins.
pub fn parse_stat(line: &str) -> Result<u64, &'static str> {
    let close = line.rfind(')').ok_or("no ')' closing the command name")?;
    // After the ')' comes field 3 (state), so field n is at index n - 3.
    let mut fields = line[close + 1..].split_ascii_whitespace().skip(14 - 3);
    let mut next = |what| -> Result<u64, &'static str> {
        fields.next().ok_or("too few fields")?.parse().map_err(|_| what)
    };
    let utime = next("utime (field 14) is not a number")?;
    let stime = next("stime (field 15) is not a number")?;
    Ok(utime + stime)
}

/// utime + stime of `/proc/{pid}/stat`; `pid` is a number or `self`.
fn read_ticks(pid: &str) -> Result<u64, StatError> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|source| StatError::Read { pid: pid.to_string(), source })?;
    parse_stat(&text).map_err(|why| StatError::Malformed { pid: pid.to_string(), why })
}

/// Clock ticks per second, the unit of utime and stime.
fn ticks_per_s() -> f64 {
    // SAFETY: sysconf only reads a constant of the running system.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    // -1 means "unknown"; 100 is what Linux has reported to user space on
    // every architecture for decades.
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// Checks that the server's stat can be read, before any load is sent.
pub fn check(server_pid: u32) -> Result<(), StatError> {
    read_ticks(&server_pid.to_string()).map(|_| ())
}

/// Both processes' CPU ticks at one instant.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    server: u64,
    client: u64,
}

impl Sample {
    pub fn take(server_pid: u32) -> Result<Sample, StatError> {
        Ok(Sample { server: read_ticks(&server_pid.to_string())?, client: read_ticks("self")? })
    }
}

/// CPU seconds each side spent between two samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Usage {
    pub server_s: f64,
    pub client_s: f64,
}

impl Usage {
    pub fn between(start: Sample, end: Sample) -> Usage {
        let tps = ticks_per_s();
        Usage {
            server_s: end.server.saturating_sub(start.server) as f64 / tps,
            client_s: end.client.saturating_sub(start.client) as f64 / tps,
        }
    }

    /// The report's figures for `ops` ops over `wall_s` seconds.
    pub fn summarize(&self, ops: u64, wall_s: f64) -> CpuSummary {
        let wall_s = wall_s.max(1e-9);
        CpuSummary {
            server_us_per_op: round(self.server_s * 1e6 / ops.max(1) as f64, 100.0),
            server_cores: round(self.server_s / wall_s, 1000.0),
            client_cores: round(self.client_s / wall_s, 1000.0),
        }
    }
}

/// The `cpu` object of the JSON report.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct CpuSummary {
    /// Server CPU microseconds per successful measured op.
    pub server_us_per_op: f64,
    /// Server CPU seconds per wall second (1.0 = one core kept busy).
    pub server_cores: f64,
    /// The bench's own CPU seconds per wall second.
    pub client_cores: f64,
}

fn round(x: f64, scale: f64) -> f64 {
    (x * scale).round() / scale
}

/// The measured window as the phase driver saw it: its length, and the CPU
/// spent in it when a server pid was given.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub secs: f64,
    pub cpu: Option<Usage>,
}

/// Starts timing a window: the wall clock and, with a pid, a CPU sample.
pub struct WindowStart {
    at: Instant,
    server_pid: Option<u32>,
    sample: Option<Sample>,
}

impl WindowStart {
    pub fn now(server_pid: Option<u32>) -> Result<WindowStart, StatError> {
        let sample = server_pid.map(Sample::take).transpose()?;
        Ok(WindowStart { at: Instant::now(), server_pid, sample })
    }

    pub fn end(self) -> Result<Window, StatError> {
        let secs = self.at.elapsed().as_secs_f64();
        let cpu = match (self.server_pid, self.sample) {
            (Some(pid), Some(start)) => Some(Usage::between(start, Sample::take(pid)?)),
            _ => None,
        };
        Ok(Window { secs, cpu })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_stat_line_whose_name_has_spaces_and_parens() {
        // Fields 14 and 15 (utime 1234, stime 56) follow a comm holding
        // both separators the naive parse trips on.
        let line = "4242 (redis (a) b) c) S 1 4242 4242 0 -1 4194560 900 0 0 0 \
                    1234 56 0 0 20 0 4 0 777 12345678 2048 18446744073709551615\n";
        assert_eq!(parse_stat(line), Ok(1290));
        let plain = "7 (plaudit-node) R 1 7 7 0 -1 0 0 0 0 0 10 20 0 0 20 0 1 0 5 0 0";
        assert_eq!(parse_stat(plain), Ok(30));
    }

    #[test]
    fn rejects_malformed_stat_lines() {
        assert!(parse_stat("4242 redis S 1 2 3").is_err());
        assert!(parse_stat("4242 (redis) S 1 4242 4242 0 -1 0 0 0 0").is_err());
        assert!(parse_stat("4242 (redis) S 1 4242 4242 0 -1 0 0 0 0 0 x 5").is_err());
    }

    #[test]
    fn reads_a_live_process_by_pid_and_itself() {
        // Server and client are the same process here, read by pid and as
        // `self`: the two figures can differ only by the ticks between reads.
        let me = std::process::id();
        let start = Sample::take(me).unwrap();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let u = Usage::between(start, Sample::take(me).unwrap());
        assert!((u.server_s - u.client_s).abs() <= 0.05, "{u:?}");
        assert!(check(me).is_ok());
        assert!(matches!(check(u32::MAX), Err(StatError::Read { .. })), "no such pid");
    }

    #[test]
    fn per_op_and_core_arithmetic() {
        // 1.5 server CPU seconds over 500,000 ops in 2 s: 3 µs/op, 0.75 of a
        // core; the bench used 2.5 CPU seconds, more than one core.
        let u = Usage { server_s: 1.5, client_s: 2.5 };
        let s = u.summarize(500_000, 2.0);
        assert_eq!(s, CpuSummary { server_us_per_op: 3.0, server_cores: 0.75, client_cores: 1.25 });
        // No ops: the CPU is charged to one op rather than divided by zero.
        assert_eq!(u.summarize(0, 2.0).server_us_per_op, 1_500_000.0);
        let s = Usage { server_s: 0.01, client_s: 0.0 }.summarize(3, 1.0);
        assert_eq!(s.server_us_per_op, 3333.33);
    }

    #[test]
    fn usage_between_samples_is_in_seconds() {
        let tps = ticks_per_s();
        let a = Sample { server: 100, client: 50 };
        let b = Sample { server: 100 + 3 * tps as u64, client: 50 + tps as u64 };
        assert_eq!(Usage::between(a, b), Usage { server_s: 3.0, client_s: 1.0 });
        // A counter that went backwards (a reused pid) never turns negative.
        assert_eq!(Usage::between(b, a), Usage { server_s: 0.0, client_s: 0.0 });
    }
}
