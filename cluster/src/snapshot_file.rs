//! The snapshot data openraft moves around: a file on disk that knows its
//! own path, so that the state machine can rename, reopen and delete it
//! (openraft hands back only the data object it was given).
//!
//! Files live in `<data_dir>/snapshots/<group>/`:
//!
//! ```text
//! <index>-<term>-<ms>.snap    a complete snapshot (the newest is served to followers)
//! building-<n>.tmp            an export in progress (renamed when complete)
//! incoming-<n>.tmp            a snapshot being received from the leader
//! installing.snap             left only by older versions: a received snapshot, complete and
//!                             synced, whose install a crash interrupted (a start promotes it)
//! ```
//!
//! The state machine serialises everything that renames or deletes these
//! files behind one lock per group (a build, an install and a send can
//! overlap), and snapshots are ordered by the log position in their names.
//!
//! A received file is read whole and checked (`plaudit_storage::snapshot::
//! verify`) when openraft shuts its writer down after the last chunk, and
//! a failure fails that shutdown. Why there: openraft purges the log up to
//! a snapshot as soon as it accepts one, before the state machine installs
//! it, so a cut or damaged file found only at install time would leave a
//! replica with neither its old state nor the log to rebuild it. Failed
//! here, the transfer fails, the leader sends the snapshot again, and
//! nothing of the replica's has changed.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};
use tokio::task::JoinHandle;

/// A snapshot file opened for openraft to read (sending) or write (receiving).
#[derive(Debug)]
pub struct SnapshotFile {
    file: tokio::fs::File,
    path: PathBuf,
    /// A received file's check, run by `poll_shutdown`.
    check: Check,
}

/// What a received file must be, and how far its check has come.
#[derive(Debug)]
enum Check {
    /// Nothing to check (a file this node built or is sending), or checked.
    None,
    /// A snapshot of `shards` (with the registry if `registry`).
    Pending {
        shards: Vec<u32>,
        registry: bool,
    },
    Running(JoinHandle<io::Result<()>>),
}

/// Distinguishes temporary files of one process.
static NEXT_TMP: AtomicU64 = AtomicU64::new(0);

impl SnapshotFile {
    pub async fn open(path: PathBuf) -> io::Result<SnapshotFile> {
        let file = tokio::fs::File::open(&path).await?;
        Ok(SnapshotFile { file, path, check: Check::None })
    }

    /// A file already open (at its start), with its path.
    pub fn from_std(path: PathBuf, file: std::fs::File) -> SnapshotFile {
        SnapshotFile { file: tokio::fs::File::from_std(file), path, check: Check::None }
    }

    /// A new empty file for receiving a snapshot of `shards` (with the
    /// registry if `registry`): its shutdown fails unless it is one.
    pub async fn create_incoming(
        dir: &Path,
        shards: Vec<u32>,
        registry: bool,
    ) -> io::Result<SnapshotFile> {
        tokio::fs::create_dir_all(dir).await?;
        let path = tmp_path(dir, "incoming");
        let file = tokio::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .await?;
        Ok(SnapshotFile { file, path, check: Check::Pending { shards, registry } })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Syncs what was written and closes the file, returning its path.
    pub async fn finish(self) -> io::Result<PathBuf> {
        self.file.sync_all().await?;
        Ok(self.path)
    }
}

/// A fresh temporary file name in `dir`.
pub fn tmp_path(dir: &Path, kind: &str) -> PathBuf {
    let n = NEXT_TMP.fetch_add(1, Ordering::Relaxed);
    dir.join(format!("{kind}-{}-{n}.tmp", std::process::id()))
}

/// The file name of a complete snapshot.
pub fn complete_name(snapshot_id: &str) -> String {
    format!("{snapshot_id}.snap")
}

/// The position of a complete snapshot, from its name
/// (`<index>-<term>-<ms>.snap`): snapshots order by it.
fn position(path: &Path) -> Option<(u64, u64, u128)> {
    let name = path.file_name()?.to_str()?.strip_suffix(".snap")?;
    let mut parts = name.split('-');
    let index = parts.next()?.parse().ok()?;
    let term = parts.next()?.parse().ok()?;
    let ms = parts.next()?.parse().ok()?;
    Some((index, term, ms))
}

/// The newest complete snapshot in `dir` (by log position), if any. A file
/// that disappears while the directory is read is skipped.
pub fn newest_complete(dir: &Path) -> io::Result<Option<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let best = entries
        .flatten()
        .map(|e| e.path())
        .filter_map(|p| position(&p).map(|pos| (pos, p)))
        .max_by_key(|(pos, _)| *pos);
    Ok(best.map(|(_, p)| p))
}

/// Removes the complete snapshots older than `keep`. Temporary files are
/// not touched here: a transfer or a build may own them (`remove_leftovers`
/// clears them at start). Failures are logged: a stale file only costs disk.
pub fn remove_older(dir: &Path, keep: &Path) {
    let Some(kept) = position(keep) else { return };
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for p in entries.flatten().map(|e| e.path()) {
        if position(&p).is_some_and(|pos| pos < kept) {
            if let Err(err) = std::fs::remove_file(&p) {
                tracing::warn!(path = %p.display(), error = %err, "removing an old snapshot file");
            }
        }
    }
}

/// Removes every temporary file of `dir` but those named `except`: before
/// a group starts (nothing can own them then), and when a new transfer
/// begins (an older one was abandoned).
pub fn remove_leftovers(dir: &Path, kind: &str, except: Option<&Path>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for p in entries.flatten().map(|e| e.path()) {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with(kind) && name.ends_with(".tmp") && Some(p.as_path()) != except {
            if let Err(err) = std::fs::remove_file(&p) {
                tracing::warn!(path = %p.display(), error = %err, "removing a leftover snapshot file");
            }
        }
    }
}

/// The header (the cluster's snapshot meta, encoded) of the snapshot file
/// at `path`.
pub fn read_meta_header(path: &Path) -> io::Result<Vec<u8>> {
    let mut input = std::io::BufReader::new(std::fs::File::open(path)?);
    plaudit_storage::snapshot::read_header(&mut input).map_err(io::Error::other)
}

/// Syncs the snapshot file at `path` and reads it whole: an error unless
/// it is a complete, undamaged snapshot of `shards`.
pub fn verify_file(path: &Path, shards: &[u32], registry: bool) -> io::Result<()> {
    let file = std::fs::File::open(path)?;
    file.sync_all()?;
    let mut input = std::io::BufReader::with_capacity(1 << 20, file);
    plaudit_storage::snapshot::verify(shards, registry, &mut input)
        .map(|_| ())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
}

/// Makes a rename in `dir` durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

impl AsyncRead for SnapshotFile {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.file).poll_read(cx, buf)
    }
}

impl AsyncWrite for SnapshotFile {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.file).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.file).poll_flush(cx)
    }

    /// Flushes, then checks a received file (on the blocking pool: it reads
    /// the whole file).
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(Pin::new(&mut self.file).poll_shutdown(cx))?;
        let this = &mut *self;
        loop {
            match &mut this.check {
                Check::None => return Poll::Ready(Ok(())),
                Check::Pending { shards, registry } => {
                    let (path, shards, registry) =
                        (this.path.clone(), std::mem::take(shards), *registry);
                    let task =
                        tokio::task::spawn_blocking(move || verify_file(&path, &shards, registry));
                    this.check = Check::Running(task);
                }
                Check::Running(task) => {
                    let res = ready!(Pin::new(task).poll(cx)).unwrap_or_else(|e| {
                        Err(io::Error::other(format!("checking a received snapshot: {e}")))
                    });
                    this.check = Check::None;
                    if let Err(e) = &res {
                        tracing::warn!(path = %this.path.display(), error = %e, "a received snapshot is refused");
                    }
                    return Poll::Ready(res);
                }
            }
        }
    }
}

impl AsyncSeek for SnapshotFile {
    fn start_seek(mut self: Pin<&mut Self>, position: io::SeekFrom) -> io::Result<()> {
        Pin::new(&mut self.file).start_seek(position)
    }

    fn poll_complete(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<u64>> {
        Pin::new(&mut self.file).poll_complete(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_snapshot_is_the_highest_log_position_whatever_the_file_times() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // Written newest first: modification times say the opposite.
        for name in ["900-3-5.snap", "120-2-9.snap", "120-2-7.snap", "incoming-1-1.tmp"] {
            std::fs::write(d.join(name), b"x").unwrap();
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        std::fs::write(d.join("installing.snap"), b"x").unwrap();
        let newest = newest_complete(d).unwrap().unwrap();
        assert_eq!(newest.file_name().unwrap(), "900-3-5.snap");
        remove_older(d, &d.join("120-2-9.snap"));
        let mut left: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        // Only the older complete snapshot went; a newer one, temporary files
        // and the install in progress stay.
        assert_eq!(
            left,
            vec!["120-2-9.snap", "900-3-5.snap", "incoming-1-1.tmp", "installing.snap"]
        );
        remove_leftovers(d, "incoming", None);
        assert!(!d.join("incoming-1-1.tmp").exists());
    }
}
