//! Group commit: one flusher thread per `sled::Db` that turns many durability
//! requests into one `flush` plus one `fdatasync`, and many appends to the
//! node's Raft log into one `pwrite` of its buffer and one `fdatasync`.
//!
//! Why it exists: every Raft group on a node appends to the same `Db`, and an
//! fsync per append caps a node at a few thousand entries per second, while one
//! `Db::flush` covers every tree. So callers `submit` a callback and a single
//! named thread ("plaudit-flush") loops:
//!
//! ```text
//! recv (block for the first request) -> drain the queue -> Db::flush
//!   -> fdatasync new blob files -> fdatasync <dir>/db -> complete every drained callback
//! ```
//!
//! Why the extra `fdatasync`s: sled 0.34's `flush` ends in `sync_file_range`,
//! which pushes pages to the device but does not flush its cache and does not
//! persist file metadata; sled's own `fsync` runs every 500 ms in the
//! background. Values too large for a log segment (about 128 KiB with the
//! default 512 KiB segments) live in `<dir>/blobs/<lsn>`, which sled writes
//! without any sync at all, so the flusher syncs blobs it has not seen before.
//! `flush_async` is never used: it deadlocks under concurrency in 0.34.
//!
//! The thread exits once every `GroupCommit` clone is dropped, after completing
//! the callbacks still queued; dropping the last clone waits for that, so the
//! `Db` clone the thread holds is released when the drop returns. Errors are
//! handed to the callbacks; nothing here panics the node.

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::thread::{JoinHandle, ThreadId};

use crate::wal::Wal;

/// What a durability request runs once its flush has finished (or failed).
pub type FlushCallback = Box<dyn FnOnce(io::Result<()>) + Send + 'static>;

/// One durability request: sled's `Db` (its buffers written and synced), or
/// the Raft log's appends written and its active segment `fdatasync`ed.
enum Request {
    Db(FlushCallback),
    Wal(Arc<Wal>, FlushCallback),
}

/// The shortest time between the starts of two shared flush rounds.
/// Without it, rounds ran back to back as soon as any group appended
/// (~1,800 a second in the likes mix, each an fdatasync that costs the
/// node ~65 us of CPU in the kernel and the device); a round of a busy node
/// now carries more appends, for at most this much added latency. A round
/// after a lone request does not wait: with one busy group (a hot board)
/// the wait was a third of every entry's cycle and nobody shared it.
///
/// 2 ms rather than 1 (alternating builds, server on one core, µs of node
/// CPU per op, mean of 5–7 runs): cold scoring 12.8 -> 11.2 (`fdatasync`s
/// 920 -> 525 a second, ops per `sendto` 6.6 -> 8.3), likes mix 9.4 -> 8.3
/// with like p99 12.5 -> 11.4 ms, rankings mix 9.6 -> 8.7; a hot board
/// unchanged (its rounds are lone).
///
/// The floor ends early once every runtime worker has parked
/// (`runtime_idle.rs`): then nothing can join the round, and waiting only
/// idled the core (alternating builds, ops/s: cold scoring 90, 91, 76k ->
/// 109, 107, 108k; rankings mix better in 6 of 7 pairs, e.g. 111, 115,
/// 112k -> 139, 125, 134k).
const MIN_ROUND: std::time::Duration = std::time::Duration::from_millis(2);

/// The name of sled 0.34's single data file inside the `Db` directory
/// (`Inner::db_path` in sled's `config.rs`).
const DATA_FILE: &str = "db";
/// The directory sled 0.34 keeps out-of-segment values in (`Inner::blob_path`).
const BLOB_DIR: &str = "blobs";

/// A handle to the node's flusher thread. Cheap to clone; the thread lives as
/// long as any clone does.
#[derive(Clone)]
pub struct GroupCommit {
    inner: Arc<Inner>,
}

/// Counters for metrics, read without stopping the flusher.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupCommitStats {
    /// Flush rounds run (each one `Db::flush` plus `fdatasync`), failed or not.
    pub flushes: u64,
    /// Callbacks completed, with `Ok` or `Err`.
    pub callbacks_completed: u64,
    /// Flush rounds that failed; their callbacks all received the error.
    pub flush_errors: u64,
}

#[derive(Default)]
struct Counters {
    flushes: AtomicU64,
    callbacks_completed: AtomicU64,
    flush_errors: AtomicU64,
}

struct Inner {
    /// `Some` until `Drop` takes it: closing the channel is what stops the thread.
    tx: Option<Sender<Request>>,
    counters: Arc<Counters>,
    thread_id: ThreadId,
    /// Taken and joined by `Drop`.
    handle: Option<JoinHandle<()>>,
}

impl GroupCommit {
    /// Starts the flusher for `db`, whose directory is `dir` (the path the `Db`
    /// was opened with). Fails if `dir` holds no sled data file.
    pub fn start(db: sled::Db, dir: &Path) -> io::Result<GroupCommit> {
        let data_path = dir.join(DATA_FILE);
        // Read-only is enough for fdatasync, and a second descriptor leaves
        // sled's exclusive lock alone: fs2 takes it with flock(2), which
        // belongs to sled's own open file description, not to the inode.
        let data_file = File::open(&data_path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("sled data file {} (is this the Db's dir?): {e}", data_path.display()),
            )
        })?;
        // The data file and blob directory were created by `sled::open`; make
        // their directory entries durable once, so later syncs have a file to find.
        sync_dir(dir)?;
        let blobs = BlobSync::new(dir.join(BLOB_DIR));

        let (tx, rx) = mpsc::channel();
        let counters = Arc::new(Counters::default());
        let flusher = Flusher { rx, db, data_file, blobs, counters: counters.clone() };
        let handle = std::thread::Builder::new()
            .name("plaudit-flush".into())
            .spawn(move || flusher.run())?;
        let thread_id = handle.thread().id();
        Ok(GroupCommit {
            inner: Arc::new(Inner { tx: Some(tx), counters, thread_id, handle: Some(handle) }),
        })
    }

    /// Completes `done` after a flush+fdatasync that began after this call.
    ///
    /// `done` runs on the flusher thread: it must be quick and must not block
    /// on another flush (see [`GroupCommit::flush_blocking`]).
    pub fn submit(&self, done: FlushCallback) {
        self.send(Request::Db(done));
    }

    /// Completes `done` after a round of `wal` (its appends written, its
    /// active segment `fdatasync`ed) that began after this call, sharing
    /// the round with every other request queued meanwhile (a log named by
    /// several requests is synced once). No sled flush unless another
    /// request in the round asks for one.
    pub fn submit_wal(&self, wal: Arc<Wal>, done: FlushCallback) {
        self.send(Request::Wal(wal, done));
    }

    fn send(&self, req: Request) {
        let Some(tx) = self.inner.tx.as_ref() else {
            // Only `Drop` clears `tx`, and it holds the last handle, so no
            // caller can get here; answer rather than lose the callback anyway.
            req.into_callback()(Err(stopped()));
            return;
        };
        if let Err(mpsc::SendError(req)) = tx.send(req) {
            // The thread is gone (it contains panics, so this means it could
            // not be kept alive): the request can never become durable through it.
            req.into_callback()(Err(stopped()));
        }
    }

    /// Waits, without blocking the executor, for a flush that began after this call.
    pub async fn flush(&self) -> io::Result<()> {
        self.wait_for(Request::Db).await
    }

    /// Waits, without blocking the executor, for a round of `wal` (its
    /// buffered records written and synced) that began after this call.
    pub async fn flush_wal(&self, wal: Arc<Wal>) -> io::Result<()> {
        self.wait_for(|done| Request::Wal(wal, done)).await
    }

    async fn wait_for(&self, request: impl FnOnce(FlushCallback) -> Request) -> io::Result<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.send(request(Box::new(move |result| {
            // The waiter may have been cancelled; then nobody wants the answer.
            let _ = tx.send(result);
        })));
        rx.await.unwrap_or_else(|_| Err(stopped()))
    }

    /// Blocks the calling thread until a flush that began after this call is
    /// done. For synchronous callers; inside async code use [`GroupCommit::flush`].
    /// Called from a flush callback it fails instead of deadlocking.
    pub fn flush_blocking(&self) -> io::Result<()> {
        if std::thread::current().id() == self.inner.thread_id {
            return Err(io::Error::other(
                "flush_blocking called on the group-commit thread would wait on itself",
            ));
        }
        let (tx, rx) = mpsc::sync_channel(1);
        self.submit(Box::new(move |result| {
            let _ = tx.send(result);
        }));
        rx.recv().unwrap_or_else(|_| Err(stopped()))
    }

    /// A snapshot of the flusher's counters.
    pub fn stats(&self) -> GroupCommitStats {
        let c = &self.inner.counters;
        GroupCommitStats {
            flushes: c.flushes.load(Ordering::Relaxed),
            callbacks_completed: c.callbacks_completed.load(Ordering::Relaxed),
            flush_errors: c.flush_errors.load(Ordering::Relaxed),
        }
    }
}

impl std::fmt::Debug for GroupCommit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommit").field("stats", &self.stats()).finish()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Closing the channel lets the thread finish what is queued and exit.
        drop(self.tx.take());
        // Wait for it, so that the thread's `Db` clone (and sled's file lock)
        // is released when the last handle goes: a restart in the same process
        // can reopen the directory at once. Not when the last handle is dropped
        // by a callback on the flusher thread itself: it would wait on itself.
        if std::thread::current().id() == self.thread_id {
            return;
        }
        if let Some(handle) = self.handle.take() {
            if handle.join().is_err() {
                tracing::error!("group-commit flusher thread panicked");
            }
        }
    }
}

/// The state owned by the flusher thread.
impl Request {
    fn into_callback(self) -> FlushCallback {
        match self {
            Request::Db(done) | Request::Wal(_, done) => done,
        }
    }
}

struct Flusher {
    rx: Receiver<Request>,
    db: sled::Db,
    data_file: File,
    blobs: BlobSync,
    counters: Arc<Counters>,
}

impl Flusher {
    fn run(mut self) {
        tracing::debug!("group-commit flusher started");
        let mut batch: Vec<FlushCallback> = Vec::new();
        let mut logs: Vec<Arc<Wal>> = Vec::new();
        // `recv` fails only once every sender is gone *and* the queue is empty,
        // so callbacks submitted before the last handle dropped are still served.
        let mut last_round: Option<std::time::Instant> = None;
        let mut last_size = 0usize;
        // Parks of the runtime's workers when the last round's callbacks
        // had run: only a park after them means their tasks are done.
        let mut parks_after = 0u64;
        loop {
            // A round whose predecessor was shared by several requests waits
            // until MIN_ROUND after that one began, and whatever arrives
            // meanwhile shares its fdatasync. One that followed a lone
            // request starts at once: one busy group (a hot board) has
            // nobody to wait for, and its next entry waits for this round.
            // The wait comes before the first request, not after it: a
            // flusher asleep on the queue is woken by the first send (a
            // `futex` call on the sender's thread and a switch here) only to
            // sleep again, ~700 times a second on a busy node.
            let wait = last_round.and_then(|t| MIN_ROUND.checked_sub(t.elapsed()));
            if let Some(wait) = wait.filter(|_| last_size > 1) {
                // Less once no task is left to append (`runtime_idle.rs`).
                crate::runtime_idle::RUNTIME.sleep_unless_idle(wait, parks_after);
            }
            let first = match self.rx.try_recv() {
                Ok(req) => req,
                Err(TryRecvError::Empty) => {
                    let Ok(req) = self.rx.recv() else { break };
                    // The wait above found nothing to wait for, or ended
                    // when the runtime idled before any request: one that
                    // comes inside a shared round's floor now waits out the
                    // rest, as one that came during the wait would have.
                    let wait = last_round.and_then(|t| MIN_ROUND.checked_sub(t.elapsed()));
                    if let Some(wait) = wait.filter(|_| last_size > 1) {
                        crate::runtime_idle::RUNTIME.sleep_unless_idle(wait, parks_after);
                    }
                    req
                }
                Err(TryRecvError::Disconnected) => break,
            };
            last_round = Some(std::time::Instant::now());
            let mut db = false;
            // Everything queued now was submitted before the flush below begins.
            for req in std::iter::once(first).chain(self.rx.try_iter()) {
                match req {
                    Request::Db(done) => {
                        db = true;
                        batch.push(done);
                    }
                    Request::Wal(wal, done) => {
                        if !logs.iter().any(|w| Arc::ptr_eq(w, &wal)) {
                            logs.push(wal);
                        }
                        batch.push(done);
                    }
                }
            }
            // A panic inside sled must not drop the batch unanswered.
            let result = catch_unwind(AssertUnwindSafe(|| {
                if db {
                    self.flush_once()?;
                }
                // One log in practice: the node's.
                logs.iter().try_for_each(|w| w.sync_round())
            }))
            .unwrap_or_else(|_| Err(io::Error::other("sled panicked during flush")));
            logs.clear();
            last_size = batch.len();
            self.counters.flushes.fetch_add(1, Ordering::Relaxed);
            if let Err(e) = &result {
                self.counters.flush_errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, waiting = batch.len(), "group-commit flush failed");
            }
            for done in batch.drain(..) {
                let result = match &result {
                    Ok(()) => Ok(()),
                    // io::Error is not Clone: every waiter gets an equal copy.
                    Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
                };
                // Counted before the call: whoever the callback wakes must
                // already see it in `stats()` (the test for one flush raced).
                self.counters.callbacks_completed.fetch_add(1, Ordering::Relaxed);
                // A panicking callback must not take durability away from the
                // rest of the node: contain it and carry on.
                if catch_unwind(AssertUnwindSafe(|| done(result))).is_err() {
                    tracing::error!("a group-commit callback panicked");
                }
            }
            parks_after = crate::runtime_idle::RUNTIME.parks();
        }
        tracing::debug!("group-commit flusher stopped: every handle dropped");
    }

    /// One round: sled writes its buffers, then we make them (and any new
    /// blobs) reach stable storage.
    fn flush_once(&mut self) -> io::Result<()> {
        self.db.flush().map_err(io::Error::from)?;
        // Blobs first: the log records written by `flush` point at them.
        self.blobs.sync_new()?;
        self.data_file.sync_data()
    }
}

/// Tracks which blob files are already durable, so each is synced once.
struct BlobSync {
    dir: PathBuf,
    synced: HashSet<OsString>,
}

impl BlobSync {
    fn new(dir: PathBuf) -> BlobSync {
        BlobSync { dir, synced: HashSet::new() }
    }

    /// Syncs blob files not seen before, then the directory holding their names.
    /// Cheap when there are no blobs: one directory read per flush round.
    fn sync_new(&mut self) -> io::Result<()> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let mut present = HashSet::with_capacity(self.synced.len());
        let mut new = 0usize;
        for entry in entries {
            let name = entry?.file_name();
            if !self.synced.contains(&name) {
                match File::open(self.dir.join(&name)) {
                    Ok(file) => file.sync_data()?,
                    // sled garbage-collected it between the listing and the open.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(e),
                }
                new += 1;
            }
            present.insert(name);
        }
        if new > 0 {
            sync_dir(&self.dir)?;
        }
        // Forget blobs sled has removed, so the set tracks the directory.
        self.synced = present;
        Ok(())
    }
}

/// fsync of a directory: makes the names it holds durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn stopped() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "group-commit flusher has stopped")
}
