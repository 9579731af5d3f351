//! Refusing writes before the disk is full, and taking them again once
//! space is back.
//!
//! sled fails a write that finds no space, and a Raft group whose log
//! append fails stops (openraft treats a storage error as fatal): every
//! shard on the node would stop, reads included, until a restart. So the
//! node keeps a reserve: a watcher reads the data directory's free space
//! every second, and while it is below `min_free_disk_mb` every proposal
//! that adds state (likes, scores, registry changes) is refused with
//! `Overloaded` and a message that says why, before it reaches the log.
//! Reads never write and keep serving. What keeps running is what finishes
//! work already accepted or frees space: deliveries and acks between
//! shards, retention's board drops, checkpoints of applied state, cluster
//! map changes. When free space is back above the reserve, the next check
//! lets writes in again; no restart.
//!
//! The reserve is what the accepted-but-unfinished work may still write
//! (in-flight batches, checkpoints, the outbox) before the watcher's next
//! look; a disk filled by another process faster than that can still run
//! out (docs/notes.md).

use plaudit_actors::Command;
use plaudit_proto::WireError;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often the watcher looks at free space.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub struct DiskGuard {
    /// Writes are refused below this many free bytes (0: never).
    min_free: u64,
    /// Free bytes at the last check (`u64::MAX` before the first).
    free: AtomicU64,
    low: AtomicBool,
}

impl DiskGuard {
    pub fn new(min_free_bytes: u64) -> Arc<DiskGuard> {
        Arc::new(DiskGuard {
            min_free: min_free_bytes,
            free: AtomicU64::new(u64::MAX),
            low: AtomicBool::new(false),
        })
    }

    /// Records a measurement of free space.
    pub fn observe(&self, free: u64) {
        self.free.store(free, Ordering::Relaxed);
        let low = free < self.min_free;
        if self.low.swap(low, Ordering::Relaxed) != low {
            if low {
                tracing::warn!(
                    free_mib = free >> 20,
                    min_free_mib = self.min_free >> 20,
                    "disk space below the reserve: refusing writes, serving reads"
                );
            } else {
                tracing::info!(
                    free_mib = free >> 20,
                    "disk space back above the reserve: taking writes"
                );
            }
        }
    }

    /// Whether writes are being refused.
    /// The reserve: free bytes below which new writes are refused.
    pub fn min_free(&self) -> u64 {
        self.min_free
    }

    pub fn is_low(&self) -> bool {
        self.low.load(Ordering::Relaxed)
    }

    /// Free bytes at the last check, if there was one.
    pub fn free_bytes(&self) -> Option<u64> {
        Some(self.free.load(Ordering::Relaxed)).filter(|&f| f != u64::MAX)
    }

    /// Refuses `cmd` if it adds state while space is low.
    pub fn admit(&self, cmd: &Command) -> Result<(), WireError> {
        if !self.is_low() || !adds_state(cmd) {
            return Ok(());
        }
        Err(WireError::overloaded(format!(
            "the node's disk is nearly full ({} MiB free, below min_free_disk_mb = {}): \
             writes are refused until space is freed; reads keep serving",
            self.free.load(Ordering::Relaxed) >> 20,
            self.min_free >> 20
        )))
    }
}

/// Whether a command is new work from a client (refused when space is
/// low), rather than the completion of accepted work or a deletion.
pub fn adds_state(cmd: &Command) -> bool {
    match cmd {
        Command::Like(_)
        | Command::Score(_)
        | Command::ScoreV2(_)
        | Command::CreateBiz(_)
        | Command::CreateBizV2(_)
        | Command::UpdateBiz(_)
        | Command::CreateRank(_)
        | Command::CreateRankInfo(_)
        | Command::UpdateRank(_)
        | Command::CreateToken(_)
        | Command::ReserveBoards { .. } => true,
        Command::Once { cmd, .. } => adds_state(cmd),
        // Revoking a leaked token must work during a disk incident too.
        Command::RevokeToken { .. }
        | Command::SetBoardLimit(_)
        | Command::Deliver { .. }
        | Command::Ack { .. }
        | Command::DropBoard { .. }
        | Command::SetCluster(_)
        | Command::SetClusterState(_)
        // A move under way finishes: it adds no board, it carries one.
        | Command::MoveBoard(_)
        | Command::SetPlacements(_)
        | Command::MoveEntity(_)
        | Command::SetEntityPlacements(_)
        | Command::MoveBoardV2(_)
        | Command::SetPlacementsV2(_) => false,
    }
}

pub use plaudit_storage::disk_space::free_bytes;

/// Looks at `dir`'s free space every [`CHECK_EVERY`] until the guard is
/// the only reference left. A failed look changes nothing.
pub async fn watch(guard: std::sync::Weak<DiskGuard>, dir: PathBuf) {
    loop {
        let Some(g) = guard.upgrade() else { return };
        match free_bytes(&dir) {
            Ok(free) => g.observe(free),
            Err(e) => {
                tracing::warn!(error = %e, dir = %dir.display(), "cannot read free disk space")
            }
        }
        drop(g);
        tokio::time::sleep(CHECK_EVERY).await;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use plaudit_proto::likes::{LikeAction, LikeRequest};
    use plaudit_proto::ErrorCode;

    /// A like: new work, refused by the node's guards.
    pub(crate) fn like() -> Command {
        Command::Like(LikeRequest {
            biz: 1,
            entity: 2,
            user: 3,
            owner: None,
            action: LikeAction::Like,
        })
    }

    #[test]
    fn new_work_is_refused_below_the_reserve_and_taken_again_above_it() {
        let g = DiskGuard::new(100 << 20);
        assert!(g.admit(&like()).is_ok(), "before the first look, writes are taken");
        assert_eq!(g.free_bytes(), None);
        g.observe(99 << 20);
        let err = g.admit(&like()).unwrap_err();
        assert_eq!(err.code, ErrorCode::Overloaded);
        assert!(err.message.contains("99 MiB free") && err.message.contains("reads keep"), "{err}");
        let once = Command::Once { id: 1, cmd: Box::new(like()) };
        assert!(g.admit(&once).is_err(), "a Once is judged by what it wraps");
        // Finishing accepted work and freeing space go on.
        let drop = Command::DropBoard { rank: 1, type_key: vec![1] };
        assert!(g.admit(&drop).is_ok());
        assert!(g.admit(&Command::Ack { target: 1, seqs: vec![1] }).is_ok());
        let revoke = Command::Once { id: 2, cmd: Box::new(Command::RevokeToken { id: 1 }) };
        assert!(g.admit(&revoke).is_ok(), "a revocation removes access: always taken");
        g.observe(100 << 20);
        assert!(g.admit(&like()).is_ok() && !g.is_low());
        assert_eq!(g.free_bytes(), Some(100 << 20));
    }

    #[test]
    fn a_zero_reserve_never_refuses() {
        let g = DiskGuard::new(0);
        g.observe(0);
        assert!(g.admit(&like()).is_ok());
    }

    #[test]
    fn free_space_of_a_real_directory_is_read() {
        let dir = tempfile::tempdir().unwrap();
        assert!(free_bytes(dir.path()).unwrap() > 0);
        assert!(free_bytes(&dir.path().join("missing")).is_err());
    }
}
