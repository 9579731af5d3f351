//! Refusing writes before the node runs out of memory, and taking them
//! again once memory is back under the limit.
//!
//! Applied state lives in memory (`plaudit_storage::mem_tree`), so every
//! distinct like or board member a client adds grows the node's memory
//! until the kernel kills it. The node therefore keeps a ceiling, as it
//! keeps a disk reserve (`disk.rs`): a watcher reads the process's resident
//! memory every second, and while it is at or above `max_memory_mb` every
//! proposal that adds state is refused with `Overloaded` and a message that
//! says why. Reads, deliveries and acks between shards, retention's board
//! drops and token revocations go on (the same split as the disk reserve).
//! The default ceiling is 80% of the memory the process may use (the
//! machine's, or its cgroup's limit if lower): the rest is headroom for
//! what accepted work still allocates before the next look.

use plaudit_actors::Command;
use plaudit_proto::WireError;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Share of the available memory the default ceiling allows, in percent.
const DEFAULT_SHARE_PCT: u64 = 80;

#[derive(Debug)]
pub struct MemoryGuard {
    /// Writes are refused at or above this many resident bytes (0: never).
    max: u64,
    /// Resident bytes at the last check (0 before the first).
    rss: AtomicU64,
    high: AtomicBool,
}

impl MemoryGuard {
    /// A ceiling of `max_bytes` of resident memory; 0 takes the default
    /// (80% of what the process may use), or none if that is unknown.
    pub fn new(max_bytes: u64) -> Arc<MemoryGuard> {
        let max = match max_bytes {
            0 => available_bytes().map_or(0, |b| b / 100 * DEFAULT_SHARE_PCT),
            m => m,
        };
        Arc::new(MemoryGuard { max, rss: AtomicU64::new(0), high: AtomicBool::new(false) })
    }

    /// The ceiling in bytes (0: none).
    pub fn max_bytes(&self) -> u64 {
        self.max
    }

    /// Resident bytes at the last check, if there was one.
    pub fn rss_bytes(&self) -> Option<u64> {
        Some(self.rss.load(Ordering::Relaxed)).filter(|&r| r != 0)
    }

    pub fn is_high(&self) -> bool {
        self.high.load(Ordering::Relaxed)
    }

    /// Records a measurement of resident memory.
    pub fn observe(&self, rss: u64) {
        self.rss.store(rss, Ordering::Relaxed);
        let high = self.max != 0 && rss >= self.max;
        if self.high.swap(high, Ordering::Relaxed) != high {
            if high {
                tracing::warn!(
                    rss_mib = rss >> 20,
                    max_memory_mib = self.max >> 20,
                    "memory at the ceiling: refusing writes, serving reads"
                );
            } else {
                tracing::info!(rss_mib = rss >> 20, "memory back under the ceiling: taking writes");
            }
        }
    }

    /// Refuses `cmd` if it adds state while memory is at the ceiling.
    pub fn admit(&self, cmd: &Command) -> Result<(), WireError> {
        if !self.is_high() || !crate::disk::adds_state(cmd) {
            return Ok(());
        }
        Err(WireError::overloaded(format!(
            "the node's memory is at its ceiling ({} MiB resident, max_memory_mb = {}): \
             writes are refused until memory is freed or the limit raised; reads keep serving",
            self.rss.load(Ordering::Relaxed) >> 20,
            self.max >> 20
        )))
    }
}

/// This process's resident memory, from `/proc/self/status`.
pub fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    kib_field(&status, "VmRSS:").map(|k| k << 10)
}

/// What the process may use: the machine's memory, or its cgroup's limit
/// (v2 `memory.max`) if that is lower.
fn available_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let total = kib_field(&meminfo, "MemTotal:")? << 10;
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    Some(cgroup.map_or(total, |c| c.min(total)))
}

/// The value of a `Name:   123 kB` line.
fn kib_field(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(name))?;
    line[name.len()..].split_whitespace().next()?.parse().ok()
}

/// Looks at resident memory every second until the guard is the only
/// reference left. A failed look changes nothing.
pub async fn watch(guard: std::sync::Weak<MemoryGuard>) {
    loop {
        let Some(g) = guard.upgrade() else { return };
        if let Some(rss) = rss_bytes() {
            g.observe(rss);
        }
        drop(g);
        tokio::time::sleep(crate::disk::CHECK_EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::tests::like;
    use plaudit_proto::ErrorCode;

    #[test]
    fn new_work_is_refused_at_the_ceiling_and_taken_again_below_it() {
        let g = MemoryGuard::new(100 << 20);
        assert!(g.admit(&like()).is_ok(), "before the first look, writes are taken");
        g.observe(100 << 20);
        let err = g.admit(&like()).unwrap_err();
        assert_eq!(err.code, ErrorCode::Overloaded);
        assert!(err.message.contains("max_memory_mb = 100") && err.message.contains("reads keep"));
        assert!(
            g.admit(&Command::Ack { target: 1, seqs: vec![1] }).is_ok(),
            "accepted work finishes"
        );
        g.observe(99 << 20);
        assert!(g.admit(&like()).is_ok() && !g.is_high());
        assert_eq!(g.rss_bytes(), Some(99 << 20));
    }

    #[test]
    fn the_default_ceiling_is_a_share_of_what_the_process_may_use() {
        let g = MemoryGuard::new(0);
        let total = available_bytes().expect("/proc/meminfo");
        assert_eq!(g.max_bytes(), total / 100 * DEFAULT_SHARE_PCT);
        let rss = rss_bytes().expect("/proc/self/status");
        assert!(rss > 0 && rss < total);
        assert_eq!(kib_field("VmRSS:\t  2048 kB\n", "VmRSS:"), Some(2048));
    }
}
