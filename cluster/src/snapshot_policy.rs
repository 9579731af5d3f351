//! When a group takes a snapshot besides openraft's own count of entries
//! (`snapshot_every_entries`): once the log it appended since its last
//! snapshot outgrows that snapshot (and at least [`MIN_LOG_BYTES`]).
//!
//! Applied state lives in memory, so a start after a kill replays the log
//! since each group's last snapshot. Batched entries hold thousands of
//! commands each: with 2M likes preloaded no group reached 50,000 entries,
//! and a start after `kill -9` replayed the whole 130 MB log (8.95 s). By
//! bytes, the replay stays about the size of the state, and writing a
//! snapshot costs at most about as much as the log it lets go.

use crate::snapshot_file;
use crate::types::Raft;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The log a group may append past its last snapshot, whatever that
/// snapshot's size.
pub const MIN_LOG_BYTES: u64 = 4 << 20;

/// How often a group looks.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Whether `since` bytes appended after a snapshot of `snapshot_bytes`
/// call for a new one.
pub fn due(since: u64, snapshot_bytes: u64) -> bool {
    since >= snapshot_bytes.max(MIN_LOG_BYTES)
}

/// Watches one group until its Raft stops: `appended` counts the bytes its
/// log store appends, `dir` holds its snapshot files.
pub async fn watch(raft: Raft, appended: Arc<AtomicU64>, dir: PathBuf) {
    let mut seen = raft.metrics().borrow().snapshot;
    let mut base = appended.load(Ordering::Relaxed);
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        let m = raft.metrics().borrow().clone();
        if m.running_state.is_err() || m.state == openraft::ServerState::Shutdown {
            return;
        }
        let now = appended.load(Ordering::Relaxed);
        if m.snapshot != seen {
            // A snapshot was taken (by this policy, openraft's count, or
            // a received one): count from here.
            seen = m.snapshot;
            base = now;
            continue;
        }
        if now - base < MIN_LOG_BYTES {
            continue; // not due whatever the snapshot's size: no look at the disk
        }
        let size = snapshot_file::newest_complete(&dir)
            .ok()
            .flatten()
            .and_then(|p| std::fs::metadata(p).ok())
            .map_or(0, |md| md.len());
        if due(now - base, size) && m.last_applied > m.snapshot {
            tracing::debug!(since = now - base, snapshot_bytes = size, "snapshot by log size");
            // Counted from here even if the build fails: try again later.
            base = now;
            let _ = raft.trigger().snapshot().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_is_due_once_the_log_outgrows_it() {
        assert!(!due(MIN_LOG_BYTES - 1, 0), "small logs wait for the floor");
        assert!(due(MIN_LOG_BYTES, 0));
        assert!(!due(100 << 20, 200 << 20), "a large state waits for as much log");
        assert!(due(200 << 20, 200 << 20));
    }
}
