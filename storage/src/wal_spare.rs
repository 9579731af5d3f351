//! The zero-filled file the write-ahead log's next segment will be
//! (`wal.rs`): made by a thread of its own, off the append path, so that
//! appends rewrite blocks the file already has.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

/// The zero-filled file the next segment will be, made off the append path
/// once the active segment is half full (a node that writes little never
/// makes one), or at 1/64 for a segment that started without one.
pub(crate) struct Spare {
    /// This log's own spare file: a name no other `Wal` of the process (one
    /// closed and reopened in place, its thread still writing) can share.
    pub(crate) path: PathBuf,
    file: Mutex<Option<File>>,
    /// `IDLE`, `MAKING`, `READY` or `FAILED`: lets every append check it
    /// for free.
    state: AtomicU8,
    /// Free space the disk must keep after a spare is made (the node's
    /// write reserve, `min_free_disk_mb`).
    pub(crate) floor: AtomicU64,
}

const IDLE: u8 = 0;
const MAKING: u8 = 1;
const READY: u8 = 2;
/// Not made for this segment (too little space, or it failed): the next
/// segment starts empty, and the one after it tries again.
const FAILED: u8 = 3;
pub(crate) const SPARE_PREFIX: &str = "wal-spare-";
/// Room a spare has past `segment_bytes`: a segment's last append may run
/// over, and a segment may start with moved entries.
pub(crate) const SPARE_SLACK: u64 = 1 << 20;
/// The floor until the node sets its own: a spare is never what fills a disk.
const DEFAULT_SPARE_FLOOR: u64 = 1 << 30;

impl Spare {
    pub(crate) fn new(dir: &Path) -> Spare {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        Spare {
            path: dir.join(format!("{SPARE_PREFIX}{}-{n}.tmp", std::process::id())),
            file: Mutex::new(None),
            state: AtomicU8::new(IDLE),
            floor: AtomicU64::new(DEFAULT_SPARE_FLOOR),
        }
    }

    pub(crate) fn ready(&self) -> bool {
        self.state.load(Ordering::Acquire) == READY
    }

    /// The ready spare, if any; either way the next segment may make one.
    pub(crate) fn take(&self) -> Option<File> {
        let state = self.state.load(Ordering::Acquire);
        if state == FAILED {
            self.state.store(IDLE, Ordering::Release);
        }
        if state != READY {
            return None;
        }
        let f = self.file.lock().unwrap_or_else(|e| e.into_inner()).take();
        self.state.store(IDLE, Ordering::Release);
        f
    }

    /// Starts making a spare unless one is ready or being made, or this
    /// segment's attempt failed; only if the disk keeps its floor after it.
    pub(crate) fn make(self: &Arc<Self>, dir: &Path, bytes: u64) {
        if self.state.compare_exchange(IDLE, MAKING, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return;
        }
        let floor = self.floor.load(Ordering::Relaxed);
        let room = crate::disk_space::free_bytes(dir)
            .is_ok_and(|free| free >= bytes.saturating_add(floor));
        if !room {
            self.state.store(FAILED, Ordering::Release);
            return;
        }
        let spare = self.clone();
        let spawned = std::thread::Builder::new().name("wal-spare".into()).spawn(move || {
            match zero_file(&spare.path, bytes) {
                Ok(f) => {
                    *spare.file.lock().unwrap_or_else(|e| e.into_inner()) = Some(f);
                    spare.state.store(READY, Ordering::Release);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not prepare the next log segment");
                    let _ = std::fs::remove_file(&spare.path);
                    spare.state.store(FAILED, Ordering::Release);
                }
            }
        });
        if spawned.is_err() {
            self.state.store(FAILED, Ordering::Release);
        }
    }
}

/// How much of a spare is written between two of its syncs.
///
/// Why not one write of the whole file and one `fsync`: the device
/// flush that every round of the log issues (`fdatasync`) waits for
/// whatever the device has been handed before it, and a 64 MiB fill
/// handed over at once made a round wait for all of it. A loop of
/// 8 KiB `pwrite`+`fdatasync` on this machine, with such a fill every
/// 3 s beside it, saw its longest sync at 37–48 ms, against 14 ms
/// without fills. Synced a chunk at a time, a round waits for at most
/// one chunk of someone else's data.
const FILL_CHUNK: usize = 1 << 20;

/// Creates `path` as `bytes` of zeros, synced.
fn zero_file(path: &Path, bytes: u64) -> io::Result<File> {
    // A file of that name is one this log made and failed to remove.
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let file = OpenOptions::new().read(true).write(true).create_new(true).open(path)?;
    let zeros = vec![0u8; FILL_CHUNK];
    let mut at = 0u64;
    while at < bytes {
        let n = zeros.len().min((bytes - at) as usize);
        file.write_all_at(&zeros[..n], at)?;
        file.sync_data()?;
        at += n as u64;
    }
    // The size and the blocks are durable chunk by chunk; this makes the
    // rest of the inode so, as before.
    file.sync_all()?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// Every size, whole chunks or not, comes out as exactly that many zeros.
    #[test]
    fn zero_file_writes_exactly_the_size_asked_in_zeros() {
        let dir = tempfile::tempdir().unwrap();
        for bytes in [0, 1, FILL_CHUNK as u64 - 1, FILL_CHUNK as u64, 2 * FILL_CHUNK as u64 + 5] {
            let path = dir.path().join(format!("spare-{bytes}"));
            drop(zero_file(&path, bytes).unwrap());
            let mut read = Vec::new();
            File::open(&path).unwrap().read_to_end(&mut read).unwrap();
            assert_eq!(read.len() as u64, bytes);
            assert!(read.iter().all(|&b| b == 0), "a non-zero byte in {bytes}");
        }
    }

    /// A leftover of the same name (a fill that failed to clean up) is replaced.
    #[test]
    fn zero_file_replaces_a_leftover() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spare");
        std::fs::write(&path, vec![7u8; 3 * FILL_CHUNK]).unwrap();
        drop(zero_file(&path, 10).unwrap());
        assert_eq!(std::fs::read(&path).unwrap(), vec![0u8; 10]);
    }
}
