//! The Raft log and hard state of one openraft group, in files of its own:
//! append-only segments and a small meta file, in `<dir>/` (one directory
//! per group).
//!
//! ```text
//! seg-<first index, 20 digits>.log   record*  (record = len u32 | crc u32 | index u64 | payload)
//! meta                               crc u32 | v1 | (vote, committed, last purged)
//! ```
//!
//! Why not a sled tree (it was one, `log_store.rs`): every append was a
//! B-tree insert, every apply read the entries back through sled, and the
//! durability of each round was a `Db::flush`, which seals sled's IO buffer
//! and hands it to sled's thread pool; that pool wakes all of its idle
//! threads for every buffer (`notify_all`), so each round cost a handful of
//! context switches besides the flush. Here an append is one `pwrite` to the
//! page cache and its round one `fdatasync` of the segment, shared by every
//! append queued meanwhile (`GroupCommit::submit_file`); sled is flushed
//! only when something needs its state durable (a purge, a vote is not).
//!
//! Durability follows openraft's contract. `append` makes entries readable at
//! once and completes `LogFlushed` after an `fdatasync` that covers them.
//! `save_vote` writes the meta file durably (temporary file, `fdatasync`,
//! rename, directory sync) before it returns. `save_committed` only updates
//! memory and rides along with the next meta write: a committed id lost in a
//! crash is re-learned, never over-claimed. `purge` first waits for a sled
//! flush (the shards' checkpoints live in sled, and the log is the only
//! other copy of what they hold), then records the purge point durably, then
//! deletes whole segments below it. `truncate` cuts the segment holding the
//! first removed entry and deletes later segments (directory synced); the
//! next append's `fdatasync` makes the new length durable.
//!
//! Recovery reads every segment in order and stops at the first record that
//! is torn, fails its checksum or breaks the index sequence; the segment is
//! cut there and later segments are deleted, so the log is always a prefix
//! of what was appended.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{
    Entry, ErrorSubject, ErrorVerb, LogId, LogState, OptionalSend, RaftLogReader, RaftTypeConfig,
    StorageError, StorageIOError, Vote,
};
use plaudit_proto::codec::{from_bytes, to_bytes};

use crate::group_commit::GroupCommit;
use crate::log_store::MAX_REPLICATION_READ_BYTES;

/// The format version byte in front of every payload and of the meta record.
const FORMAT_V1: u8 = 1;
/// `len u32 | crc u32 | index u64`.
const HEADER: usize = 16;
/// A new segment starts once the current one is this large: purges delete
/// whole segments, so this bounds what a purged log still holds on disk.
pub const SEGMENT_BYTES: u64 = 64 << 20;
/// The most one record may hold; anything larger on disk is a torn length.
const MAX_RECORD: usize = 1 << 30;
const META: &str = "meta";

type StorageResult<T, C> = Result<T, StorageError<<C as RaftTypeConfig>::NodeId>>;
type NodeIdOf<C> = <C as RaftTypeConfig>::NodeId;
/// vote, committed, last purged.
type MetaRecord<NID> = (Option<Vote<NID>>, Option<LogId<NID>>, Option<LogId<NID>>);

/// openraft log storage for one group over its own files. Cloning gives
/// another handle to the same log (openraft uses clones as log readers).
pub struct FileLogStore<C: RaftTypeConfig> {
    inner: Arc<Mutex<Inner<NodeIdOf<C>>>>,
    commit: GroupCommit,
    _config: PhantomData<fn() -> C>,
}

impl<C: RaftTypeConfig> Clone for FileLogStore<C> {
    fn clone(&self) -> Self {
        FileLogStore {
            inner: self.inner.clone(),
            commit: self.commit.clone(),
            _config: PhantomData,
        }
    }
}

impl<C: RaftTypeConfig> Debug for FileLogStore<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("FileLogStore").field("dir", &g.dir).field("entries", &g.locs.len()).finish()
    }
}

struct Segment {
    first: u64,
    path: PathBuf,
    file: Arc<File>,
    len: u64,
}

/// Where one entry's payload is.
#[derive(Clone, Copy)]
struct Loc {
    /// The `first` of its segment.
    seg: u64,
    /// Offset of the payload (the header is just before it).
    off: u64,
    len: u32,
}

struct Inner<NID: openraft::NodeId> {
    dir: PathBuf,
    /// A new segment starts once the newest is this large.
    segment_bytes: u64,
    segments: Vec<Segment>,
    /// Every entry's place, by index. Indexes only grow along the log; they
    /// are contiguous in practice, but nothing here relies on that.
    locs: BTreeMap<u64, Loc>,
    vote: Option<Vote<NID>>,
    committed: Option<LogId<NID>>,
    last_purged: Option<LogId<NID>>,
}

impl<C> FileLogStore<C>
where
    C: RaftTypeConfig<Entry = Entry<C>>,
{
    /// Opens (creating if needed) the log in `dir`, recovering it to the
    /// longest intact prefix. `commit` is the node's flusher: it syncs the
    /// segments, and its sled flush is what a purge waits for.
    pub fn open(dir: &Path, commit: GroupCommit) -> io::Result<Self> {
        Self::open_with_segment_bytes(dir, commit, SEGMENT_BYTES)
    }

    /// [`open`](Self::open) with another segment size (tests use small ones
    /// to see segments rotate, cut and go).
    pub fn open_with_segment_bytes(
        dir: &Path,
        commit: GroupCommit,
        segment_bytes: u64,
    ) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let (vote, committed, last_purged) = read_meta::<NodeIdOf<C>>(dir)?;
        let mut inner = Inner {
            dir: dir.to_path_buf(),
            segment_bytes,
            segments: Vec::new(),
            locs: BTreeMap::new(),
            vote,
            committed,
            last_purged,
        };
        inner.recover()?;
        Ok(FileLogStore { inner: Arc::new(Mutex::new(inner)), commit, _config: PhantomData })
    }

    /// Whether the log holds nothing at all: no entry, vote or purge point
    /// (a new group, or one whose log is still in sled's trees).
    pub fn is_blank(&self) -> bool {
        let g = self.lock();
        g.locs.is_empty() && g.vote.is_none() && g.last_purged.is_none()
    }

    /// Moves a log kept in sled's trees (`log_store.rs`, data directories
    /// written before this store) into this one, if this one is blank:
    /// every entry, then the purge point, vote and committed id, durably.
    /// Returns whether there was anything to move; the caller then drops
    /// the old trees. A crash half way leaves entries but no meta here and
    /// the old trees intact, so the next start moves them again over the
    /// partial copy (`truncate` to the old log's start first).
    pub async fn import(
        &mut self,
        old: &mut crate::log_store::SledLogStore<C>,
    ) -> io::Result<bool> {
        use openraft::storage::RaftLogStorageExt;
        let meta_here = {
            let g = self.lock();
            g.vote.is_some() || g.last_purged.is_some()
        };
        if meta_here {
            return Ok(false);
        }
        let state = old.get_log_state().await.map_err(io::Error::other)?;
        let vote = old.read_vote().await.map_err(io::Error::other)?;
        if state.last_log_id.is_none() && vote.is_none() {
            return Ok(false);
        }
        let committed = old.read_committed().await.map_err(io::Error::other)?;
        let entries = old.try_get_log_entries(..).await.map_err(io::Error::other)?;
        if let Some(first) = entries.first() {
            // A copy an earlier crash left half done.
            self.truncate(first.log_id.clone()).await.map_err(io::Error::other)?;
            let mut g = self.lock();
            if g.locs.is_empty() {
                for s in std::mem::take(&mut g.segments) {
                    std::fs::remove_file(&s.path)?;
                }
            }
        }
        if !entries.is_empty() {
            self.blocking_append(entries).await.map_err(io::Error::other)?;
        }
        let mut g = self.lock();
        g.last_purged = state.last_purged_log_id;
        g.vote = vote;
        g.committed = committed;
        g.write_meta()?;
        Ok(true)
    }

    /// The last committed index this store was told of, if any.
    pub fn committed_index(&self) -> Option<u64> {
        self.lock().committed.as_ref().map(|c| c.index)
    }

    fn lock(&self) -> MutexGuard<'_, Inner<NodeIdOf<C>>> {
        // Every mutation leaves `Inner` consistent before it can fail, so a
        // panic elsewhere while holding the lock leaves nothing half done.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    // openraft's `StorageError` is large (a subject and a backtrace string);
    // this helper returns it because the trait methods it serves must.
    #[allow(clippy::result_large_err)]
    fn read_range(
        &self,
        start: u64,
        end: Option<u64>,
        budget: usize,
    ) -> StorageResult<Vec<C::Entry>, C> {
        let g = self.lock();
        let hi = end.map_or(Bound::Unbounded, Bound::Excluded);
        let mut out = Vec::new();
        let mut bytes = 0usize;
        let mut buf = Vec::new();
        for (&index, &loc) in g.locs.range((Bound::Included(start), hi)) {
            g.read_payload(loc, &mut buf).map_err(|e| read_err(index, &e))?;
            out.push(decode_entry::<C>(&buf).map_err(|e| read_err(index, &e))?);
            bytes += buf.len();
            if bytes >= budget {
                break;
            }
        }
        Ok(out)
    }
}

impl<NID: openraft::NodeId> Inner<NID> {
    fn segment(&self, first: u64) -> io::Result<&Segment> {
        self.segments
            .binary_search_by_key(&first, |s| s.first)
            .map(|i| &self.segments[i])
            .map_err(|_| io::Error::other(format!("no log segment starting at {first}")))
    }

    fn read_payload(&self, loc: Loc, buf: &mut Vec<u8>) -> io::Result<()> {
        buf.resize(loc.len as usize, 0);
        self.segment(loc.seg)?.file.read_exact_at(buf, loc.off)
    }

    fn last_index(&self) -> Option<u64> {
        self.locs.last_key_value().map(|(&i, _)| i)
    }

    /// Reads every segment, keeps the intact prefix, cuts the rest.
    fn recover(&mut self) -> io::Result<()> {
        let mut names: Vec<(u64, PathBuf)> = Vec::new();
        for e in std::fs::read_dir(&self.dir)? {
            let path = e?.path();
            let first = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix("seg-")?.strip_suffix(".log")?.parse().ok());
            if let Some(first) = first {
                names.push((first, path));
            }
        }
        names.sort();
        let mut last: Option<u64> = None;
        let mut broken = false;
        for (first, path) in names {
            if broken || last.is_some_and(|l| first <= l) {
                // After a cut, or out of order: not part of the prefix.
                std::fs::remove_file(&path)?;
                broken = true;
                continue;
            }
            let file = OpenOptions::new().read(true).write(true).open(&path)?;
            let bytes = std::fs::read(&path)?;
            let mut off = 0usize;
            // A segment's name is its first record's index; records grow.
            let mut floor = first;
            while off < bytes.len() {
                let Some((index, len)) = parse_record(&bytes[off..]) else { break };
                if index < floor || (off == 0 && index != first) {
                    break;
                }
                self.locs.insert(index, Loc { seg: first, off: (off + HEADER) as u64, len });
                off += HEADER + len as usize;
                floor = index + 1;
                last = Some(index);
            }
            if off < bytes.len() {
                tracing::warn!(segment = %path.display(), at = off, "cutting a torn or corrupt log tail");
                file.set_len(off as u64)?;
                file.sync_all()?;
                broken = true;
            }
            self.segments.push(Segment { first, path, file: Arc::new(file), len: off as u64 });
        }
        if broken {
            sync_dir(&self.dir)?;
        }
        // Entries a purge recorded but whose segment was still kept.
        if let Some(p) = &self.last_purged {
            self.drop_through(p.index);
        }
        Ok(())
    }

    /// Forgets the entries at or below `index`.
    fn drop_through(&mut self, index: u64) {
        self.locs = self.locs.split_off(&(index + 1));
    }

    fn write_meta(&self) -> io::Result<()> {
        let record = (&self.vote, &self.committed, &self.last_purged);
        let body = to_bytes(&record).map_err(io::Error::other)?;
        let mut out = Vec::with_capacity(5 + body.len());
        out.extend_from_slice(&crc(&[&[FORMAT_V1], &body]).to_le_bytes());
        out.push(FORMAT_V1);
        out.extend_from_slice(&body);
        let tmp = self.dir.join("meta.tmp");
        let f = File::create(&tmp)?;
        f.write_all_at(&out, 0)?;
        f.sync_data()?;
        std::fs::rename(&tmp, self.dir.join(META))?;
        sync_dir(&self.dir)
    }
}

fn read_meta<NID: openraft::NodeId>(dir: &Path) -> io::Result<MetaRecord<NID>> {
    let bytes = match std::fs::read(dir.join(META)) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((None, None, None)),
        Err(e) => return Err(e),
    };
    // Written whole and renamed into place: anything unreadable is damage,
    // not a torn write, and guessing a vote could elect two leaders.
    let bad = |what: &str| io::Error::other(format!("raft meta {}: {what}", dir.display()));
    let (sum, body) = bytes.split_at_checked(4).ok_or_else(|| bad("too short"))?;
    if crc(&[body]).to_le_bytes() != sum {
        return Err(bad("checksum mismatch"));
    }
    match body.split_first() {
        Some((&FORMAT_V1, rest)) => from_bytes(rest).map_err(|e| bad(&e.to_string())),
        _ => Err(bad("unknown format")),
    }
}

/// `(index, payload len)` of the record at the start of `b`, if it is whole
/// and its checksum holds.
fn parse_record(b: &[u8]) -> Option<(u64, u32)> {
    let header = b.get(..HEADER)?;
    let len = u32::from_le_bytes(header[0..4].try_into().ok()?);
    let sum = u32::from_le_bytes(header[4..8].try_into().ok()?);
    let index_bytes = &header[8..16];
    if len as usize > MAX_RECORD {
        return None;
    }
    let payload = b.get(HEADER..HEADER + len as usize)?;
    (crc(&[index_bytes, payload]) == sum)
        .then(|| (u64::from_le_bytes(index_bytes.try_into().unwrap_or_default()), len))
}

fn crc(parts: &[&[u8]]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for p in parts {
        h.update(p);
    }
    h.finalize()
}

fn encode_record<C: RaftTypeConfig<Entry = Entry<C>>>(
    entry: &Entry<C>,
    out: &mut Vec<u8>,
) -> io::Result<u32> {
    let body = to_bytes(entry).map_err(io::Error::other)?;
    let len = body.len() + 1;
    if len > MAX_RECORD {
        return Err(io::Error::other(format!("log entry of {len} bytes")));
    }
    let index = entry.log_id.index.to_le_bytes();
    let sum = crc(&[&index, &[FORMAT_V1], &body]);
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(&sum.to_le_bytes());
    out.extend_from_slice(&index);
    out.push(FORMAT_V1);
    out.extend_from_slice(&body);
    Ok(len as u32)
}

fn decode_entry<C: RaftTypeConfig<Entry = Entry<C>>>(b: &[u8]) -> io::Result<Entry<C>> {
    match b.split_first() {
        Some((&FORMAT_V1, body)) => from_bytes(body).map_err(io::Error::other),
        _ => Err(io::Error::other("unknown log entry format")),
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn err<NID: openraft::NodeId>(
    subject: ErrorSubject<NID>,
    verb: ErrorVerb,
    e: &io::Error,
) -> StorageError<NID> {
    StorageIOError::new(subject, verb, e).into()
}

fn read_err<NID: openraft::NodeId>(index: u64, e: &io::Error) -> StorageError<NID> {
    err(ErrorSubject::LogIndex(index), ErrorVerb::Read, e)
}

impl<C> RaftLogReader<C> for FileLogStore<C>
where
    C: RaftTypeConfig<Entry = Entry<C>>,
{
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<C::Entry>, C> {
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => match s.checked_add(1) {
                Some(s) => s,
                None => return Ok(Vec::new()),
            },
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e.checked_add(1),
            Bound::Excluded(&e) => Some(e),
            Bound::Unbounded => None,
        };
        self.read_range(start, end, usize::MAX)
    }

    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> StorageResult<Vec<C::Entry>, C> {
        self.read_range(start, Some(end), MAX_REPLICATION_READ_BYTES)
    }
}

impl<C> RaftLogStorage<C> for FileLogStore<C>
where
    C: RaftTypeConfig<Entry = Entry<C>>,
{
    type LogReader = Self;

    async fn get_log_state(&mut self) -> StorageResult<LogState<C>, C> {
        let g = self.lock();
        let last_purged_log_id = g.last_purged.clone();
        let last_entry = match g.locs.last_key_value() {
            Some((&index, &loc)) => {
                let mut buf = Vec::new();
                g.read_payload(loc, &mut buf).map_err(|e| read_err(index, &e))?;
                Some(decode_entry::<C>(&buf).map_err(|e| read_err(index, &e))?.log_id)
            }
            None => None,
        };
        let last_log_id = std::cmp::max(last_entry, last_purged_log_id.clone());
        Ok(LogState { last_purged_log_id, last_log_id })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<C::NodeId>) -> StorageResult<(), C> {
        // Written in place on this task: votes change on elections only, and
        // openraft must not go on before the vote is durable anyway.
        let mut g = self.lock();
        let old = g.vote.replace(vote.clone());
        g.write_meta().map_err(|e| {
            g.vote = old;
            err(ErrorSubject::Vote, ErrorVerb::Write, &e)
        })
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote<C::NodeId>>, C> {
        Ok(self.lock().vote.clone())
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<C::NodeId>>,
    ) -> StorageResult<(), C> {
        self.lock().committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> StorageResult<Option<LogId<C::NodeId>>, C> {
        Ok(self.lock().committed.clone())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<C>) -> StorageResult<(), C>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut g = self.lock();
        let mut buf = Vec::new();
        let mut lens = Vec::new();
        let mut first_index = None;
        let mut last_appended: Option<u64> = None;
        for entry in entries {
            let index = entry.log_id.index;
            // Entries only go after the log's end: openraft truncates a
            // conflicting tail before it appends over it.
            let after = last_appended.or(g.last_index());
            if after.is_some_and(|a| index <= a) {
                let e = io::Error::other(format!("append of {index} after {after:?}"));
                return Err(err(ErrorSubject::Log(entry.log_id.clone()), ErrorVerb::Write, &e));
            }
            first_index.get_or_insert(index);
            last_appended = Some(index);
            let len = encode_record(&entry, &mut buf)
                .map_err(|e| err(ErrorSubject::Log(entry.log_id.clone()), ErrorVerb::Write, &e))?;
            lens.push((index, len));
        }
        let Some(first_index) = first_index else {
            callback.log_io_completed(Ok(()));
            return Ok(());
        };
        let write_err = |e: &io::Error| err(ErrorSubject::Logs, ErrorVerb::Write, e);
        let rotate = g.segments.last().is_none_or(|s| s.len >= g.segment_bytes);
        if rotate {
            let path = g.dir.join(format!("seg-{first_index:020}.log"));
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)
                .map_err(|e| write_err(&e))?;
            sync_dir(&g.dir).map_err(|e| write_err(&e))?;
            g.segments.push(Segment { first: first_index, path, file: Arc::new(file), len: 0 });
        }
        let Some(seg) = g.segments.last_mut() else {
            return Err(write_err(&io::Error::other("no log segment")));
        };
        let (seg_first, base) = (seg.first, seg.len);
        // On failure nothing is indexed; a partly written tail is cut by the
        // length we keep (the next append overwrites it) or by recovery.
        seg.file.write_all_at(&buf, base).map_err(|e| write_err(&e))?;
        seg.len += buf.len() as u64;
        let file = seg.file.clone();
        let mut off = base;
        for (index, len) in lens {
            g.locs.insert(index, Loc { seg: seg_first, off: off + HEADER as u64, len });
            off += HEADER as u64 + len as u64;
        }
        drop(g);
        self.commit.submit_file(file, Box::new(move |r| callback.log_io_completed(r)));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<C::NodeId>) -> StorageResult<(), C> {
        let mut g = self.lock();
        let index = log_id.index;
        let Some((_, &cut)) = g.locs.range(index..).next() else { return Ok(()) };
        let io = |e: io::Error| err(ErrorSubject::Logs, ErrorVerb::Delete, &e);
        let cut_at = cut.off - HEADER as u64;
        let mut removed = false;
        while g.segments.last().is_some_and(|s| s.first > cut.seg) {
            if let Some(s) = g.segments.pop() {
                std::fs::remove_file(&s.path).map_err(io)?;
                removed = true;
            }
        }
        if let Some(s) = g.segments.last_mut() {
            s.file.set_len(cut_at).map_err(io)?;
            s.len = cut_at;
        }
        g.locs.split_off(&index);
        if removed {
            sync_dir(&g.dir).map_err(io)?;
        }
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<C::NodeId>) -> StorageResult<(), C> {
        // The shards' checkpoints up to here must be durable before the only
        // other copy of them goes.
        self.commit.flush().await.map_err(|e| err(ErrorSubject::Logs, ErrorVerb::Delete, &e))?;
        let mut g = self.lock();
        let io = |e: io::Error| err(ErrorSubject::Logs, ErrorVerb::Delete, &e);
        g.last_purged = Some(log_id.clone());
        g.write_meta().map_err(io)?;
        g.drop_through(log_id.index);
        // A segment goes once the next one starts at or below the first kept
        // index; the newest segment always stays (appends continue there).
        while g.segments.len() > 1 && g.segments[1].first <= log_id.index + 1 {
            let s = g.segments.remove(0);
            std::fs::remove_file(&s.path).map_err(io)?;
        }
        Ok(())
    }
}
