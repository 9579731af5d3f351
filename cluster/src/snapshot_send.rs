//! Snapshots this node sends, paced and counted: every group's transfers
//! share one rate (`snapshot_send_mib_per_sec`, default 32 MiB/s), so a
//! node that feeds a new member several replicas at once does not take the
//! disk and network its clients' writes need; and each transfer's bytes
//! are counted for the status (`moves[].bytes_done`).
//!
//! Pacing is a virtual clock: a chunk of `n` bytes may leave at
//! `max(now, free_at)` and moves `free_at` on by `n / rate`. No burst
//! builds up while nothing is sent, and transfers in parallel take turns
//! chunk by chunk (openraft sends a snapshot in chunks of up to 3 MiB).

use crate::peer::wire::GroupId;
use crate::types::NodeId;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct SnapshotSends {
    /// Bytes a second; 0: unpaced.
    rate: u64,
    free_at: Mutex<Option<Instant>>,
    /// Bytes sent so far of the transfer under way (or last made) per
    /// `(group, target)`.
    sent: Mutex<HashMap<(GroupId, NodeId), u64>>,
}

impl SnapshotSends {
    pub fn new(bytes_per_sec: u64) -> SnapshotSends {
        SnapshotSends { rate: bytes_per_sec, free_at: Mutex::new(None), sent: Mutex::default() }
    }

    /// When a chunk of `bytes` asked for at `now` may leave, with the clock
    /// moved on for the next one. Pure but for the clock it keeps.
    fn slot(&self, now: Instant, bytes: usize) -> Instant {
        if self.rate == 0 {
            return now;
        }
        let mut free_at = self.free_at.lock().unwrap_or_else(|e| e.into_inner());
        let start = free_at.map_or(now, |f| f.max(now));
        let takes = Duration::from_secs_f64(bytes as f64 / self.rate as f64);
        *free_at = Some(start + takes);
        start
    }

    /// Waits for this chunk's turn, then counts it: `offset` is where the
    /// chunk starts in the snapshot (0: a transfer begins again).
    pub async fn pace(&self, group: GroupId, to: NodeId, offset: u64, bytes: usize) {
        let at = self.slot(Instant::now(), bytes);
        tokio::time::sleep_until(at.into()).await;
        let mut sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        sent.insert((group, to), offset + bytes as u64);
    }

    /// Bytes sent of the snapshot transfer of `group` to `to`, if one began.
    pub fn sent(&self, group: GroupId, to: NodeId) -> Option<u64> {
        self.sent.lock().unwrap_or_else(|e| e.into_inner()).get(&(group, to)).copied()
    }

    /// Every `(target, bytes sent)` of `group`'s transfers.
    pub fn of_group(&self, group: GroupId) -> Vec<(NodeId, u64)> {
        let sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        sent.iter().filter(|((g, _), _)| *g == group).map(|((_, n), b)| (*n, *b)).collect()
    }

    /// Forgets what was sent for `group` (its replica left this node).
    pub fn forget(&self, group: GroupId) {
        self.sent.lock().unwrap_or_else(|e| e.into_inner()).retain(|(g, _), _| *g != group);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_leave_at_the_rate_whatever_the_transfers() {
        let s = SnapshotSends::new(1 << 20); // 1 MiB/s
        let t0 = Instant::now();
        let a = s.slot(t0, 1 << 19);
        let b = s.slot(t0, 1 << 19);
        let c = s.slot(t0, 1 << 20);
        assert_eq!(a, t0, "the first chunk goes at once");
        assert_eq!(b - t0, Duration::from_millis(500));
        assert_eq!(c - t0, Duration::from_secs(1));
        // Idle for a while: no burst saved up, the next goes now.
        let later = t0 + Duration::from_secs(10);
        assert_eq!(s.slot(later, 1 << 20), later);
        assert_eq!(s.slot(later, 1), later + Duration::from_secs(1));
    }

    #[test]
    fn unpaced_sends_go_at_once_and_are_counted() {
        let s = SnapshotSends::new(0);
        let t0 = Instant::now();
        assert_eq!(s.slot(t0, 1 << 30), t0);
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        rt.block_on(async {
            s.pace(3, 7, 0, 100).await;
            s.pace(3, 7, 100, 50).await;
            s.pace(4, 7, 0, 10).await;
        });
        assert_eq!(s.sent(3, 7), Some(150));
        assert_eq!(s.of_group(4), vec![(7, 10)]);
        s.forget(3);
        assert_eq!(s.sent(3, 7), None);
        // A transfer that begins again counts from its start.
        rt.block_on(s.pace(4, 7, 0, 5));
        assert_eq!(s.sent(4, 7), Some(5));
    }
}
