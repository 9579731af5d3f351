//! The SDK's own account of a load (`plaudit_client` at debug: redirects,
//! nodes marked down, calls with no answer by their deadline, calls that
//! gave up), kept in memory, the last `KEEP` lines, so that a test whose
//! load had a failed call can print what the client went through before
//! it. A node's log says what the node did; this says what the caller saw.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Mutex, Once};
use tracing_subscriber::fmt::MakeWriter;

/// Lines kept: a few seconds of a hand-off's redirects under load.
const KEEP: usize = 4096;

static LINES: Mutex<VecDeque<String>> = Mutex::new(VecDeque::new());
static INSTALL: Once = Once::new();

/// Starts keeping the SDK's debug log in this process (once; a test binary
/// that installed another subscriber keeps its own).
pub fn install() {
    INSTALL.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("plaudit_client=debug"))
            .with_ansi(false)
            .with_writer(Ring)
            .try_init();
    });
}

/// The last `n` lines kept, oldest first.
pub fn tail(n: usize) -> String {
    let lines = LINES.lock().unwrap_or_else(|e| e.into_inner());
    let skip = lines.len().saturating_sub(n);
    lines.iter().skip(skip).map(String::as_str).collect()
}

/// The last `n` lines kept that were logged at or before `at`, a UTC time
/// of day `HH:MM:SS.mmm` (what a load's first failure records), oldest
/// first: what the SDK went through up to a failure, which `tail` has
/// lost once the load went on for long after it. Lines start with an
/// RFC 3339 time (`2026-12-07T22:33:40.765123Z`), compared by text.
pub fn until(at: &str, n: usize) -> String {
    let at = at.get(..12).unwrap_or(at);
    let lines = LINES.lock().unwrap_or_else(|e| e.into_inner());
    let upto: Vec<&String> =
        lines.iter().filter(|l| l.get(11..23).is_some_and(|t| t <= at)).collect();
    let skip = upto.len().saturating_sub(n);
    upto.into_iter().skip(skip).map(String::as_str).collect()
}

struct Ring;

/// One event's formatted line, kept when the formatter is done with it.
struct Line(Vec<u8>);

impl<'a> MakeWriter<'a> for Ring {
    type Writer = Line;
    fn make_writer(&'a self) -> Line {
        Line(Vec::new())
    }
}

impl Write for Line {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let line = String::from_utf8_lossy(&self.0).into_owned();
        let mut lines = LINES.lock().unwrap_or_else(|e| e.into_inner());
        if lines.len() == KEEP {
            lines.pop_front();
        }
        lines.push_back(line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_lines_of_the_sdk_only() {
        install();
        tracing::debug!(target: "plaudit_client::cluster::call", op = "like", "gave up");
        tracing::debug!(target: "plaudit_node::elsewhere", "not the SDK's");
        for i in 0..KEEP + 5 {
            tracing::debug!(target: "plaudit_client::connection", i, "filler");
        }
        let all = tail(usize::MAX);
        assert_eq!(all.lines().count(), KEEP);
        assert!(!all.contains("gave up"), "the oldest lines went first");
        assert!(!all.contains("not the SDK's"));
        assert!(tail(1).contains(&format!("i={}", KEEP + 4)), "{}", tail(1));
        // Every line kept was logged before the end of the day, none
        // before its start.
        assert_eq!(until("23:59:59.999", usize::MAX).lines().count(), KEEP);
        assert_eq!(until("00:00:00.000", usize::MAX), "");
    }
}
