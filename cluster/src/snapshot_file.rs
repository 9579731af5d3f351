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
//! installing.snap             the snapshot being installed (kept until the install is done,
//!                             so an install that a crash interrupted can be finished)
//! ```

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};

/// A snapshot file opened for openraft to read (sending) or write (receiving).
#[derive(Debug)]
pub struct SnapshotFile {
    file: tokio::fs::File,
    path: PathBuf,
}

/// Distinguishes temporary files of one process.
static NEXT_TMP: AtomicU64 = AtomicU64::new(0);

impl SnapshotFile {
    pub async fn open(path: PathBuf) -> io::Result<SnapshotFile> {
        let file = tokio::fs::File::open(&path).await?;
        Ok(SnapshotFile { file, path })
    }

    /// A new empty file for receiving a snapshot.
    pub async fn create_incoming(dir: &Path) -> io::Result<SnapshotFile> {
        tokio::fs::create_dir_all(dir).await?;
        let path = tmp_path(dir, "incoming");
        let file = tokio::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .await?;
        Ok(SnapshotFile { file, path })
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

/// The newest complete snapshot in `dir` (by modification time), if any.
pub fn newest_complete(dir: &Path) -> io::Result<Option<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut best: Option<(std::time::SystemTime, PathBuf)> = None;
    for e in entries {
        let e = e?;
        let name = e.file_name();
        let name = name.to_string_lossy();
        if !name.ends_with(".snap") || name == "installing.snap" {
            continue;
        }
        let t = e.metadata()?.modified()?;
        if best.as_ref().is_none_or(|(bt, _)| t > *bt) {
            best = Some((t, e.path()));
        }
    }
    Ok(best.map(|(_, p)| p))
}

/// Removes every file in `dir` but `keep`: older snapshots and temporary
/// files left by a crash. Failures are logged, not fatal: a stale file only
/// costs disk.
pub fn remove_all_but(dir: &Path, keep: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p != keep && p.file_name().is_some_and(|n| n != "installing.snap") {
            if let Err(err) = std::fs::remove_file(&p) {
                tracing::warn!(path = %p.display(), error = %err, "removing an old snapshot file");
            }
        }
    }
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

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.file).poll_shutdown(cx)
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
