//! The Raft log and hard state of one openraft group: a handle on the
//! node's write-ahead log (`wal.rs`), where every group's records share one
//! file and one `fdatasync` per group-commit round.
//!
//! Why not a sled tree (it was one; `sled_log.rs` reads such a log to move
//! it here): every append was a
//! B-tree insert, every apply read the entries back through sled, and each
//! round of durability was a `Db::flush`, which seals sled's IO buffer and
//! hands it to sled's thread pool; that pool wakes all of its idle threads
//! for every buffer (`notify_all`), so each round cost a handful of context
//! switches besides the flush. Here an append is encoded into the log's
//! buffer, and its round one `pwrite` of every group's appends plus one
//! `fdatasync` of the active segment (`GroupCommit::submit_wal`).
//!
//! Durability follows openraft's contract. `append` makes entries readable at
//! once and completes `LogFlushed` after an `fdatasync` that covers them.
//! `save_vote` appends a vote record and returns once it is synced.
//! `save_committed` appends a record without waiting for a sync; the state
//! machine writes it to the page cache (`Wal::write_out`) before it applies
//! anything the record lets through. After a kill the page cache still has
//! it, so a leader restored in the same term replays what it had committed
//! before serving; after a power loss an older committed id is re-learned,
//! never over-claimed.
//! `truncate` appends a truncate record, durable with the next round (the
//! removed entries were not committed). `purge` appends its record; openraft
//! purges only up to a snapshot, and applied state is durable in snapshot
//! files (a follower's purge may race its install of a received snapshot:
//! the cluster crate's state machine covers that at start).

use std::fmt::Debug;
use std::io;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{
    Entry, ErrorSubject, ErrorVerb, LogId, LogState, OptionalSend, RaftLogReader, RaftTypeConfig,
    StorageError, StorageIOError, Vote,
};
use plaudit_proto::codec::{from_bytes, to_bytes};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::group_commit::GroupCommit;
use crate::recent::Recent;
use crate::wal::{
    GroupLog, Record, Wal, FORMAT_V1, KIND_COMMITTED, KIND_ENTRY, KIND_PURGE, KIND_TRUNCATE,
    KIND_VOTE,
};

type StorageResult<T, C> = Result<T, StorageError<<C as RaftTypeConfig>::NodeId>>;

/// Encoded bytes of a group's newest entries kept decoded for readers
/// (`recent.rs`): the rounds between an append and its apply; the newest
/// entry is kept whatever its size. 256 KiB was slower on hot scoring
/// (2.61–2.66 against 2.51 µs/op): the entries it kept went cold in the
/// CPU's caches, and apply rarely reads further back than this.
const RECENT_BYTES: usize = 32 << 10;

/// openraft log storage for one group. Cloning gives another handle to the
/// same log (openraft uses clones as log readers).
///
/// Every handle of a group is dropped before the log drops the group
/// (`Wal::drop_group`): the cache of recent entries would otherwise outlive
/// the entries it copies.
pub struct FileLogStore<C: RaftTypeConfig> {
    wal: Arc<Wal>,
    group: u32,
    commit: GroupCommit,
    /// The last committed index openraft reported (+1; 0: none), for metrics.
    committed: Arc<AtomicU64>,
    /// Bytes of entries appended since this store was opened: what a
    /// restart would replay, for the snapshot policy.
    appended: Arc<AtomicU64>,
    /// The newest entries, shared by the store and its readers. Locked
    /// after `wal`, never before it.
    recent: Arc<Mutex<Recent<C::Entry>>>,
    _config: PhantomData<fn() -> C>,
}

impl<C: RaftTypeConfig> Clone for FileLogStore<C> {
    fn clone(&self) -> Self {
        FileLogStore {
            wal: self.wal.clone(),
            group: self.group,
            commit: self.commit.clone(),
            committed: self.committed.clone(),
            appended: self.appended.clone(),
            recent: self.recent.clone(),
            _config: PhantomData,
        }
    }
}

impl<C: RaftTypeConfig> Debug for FileLogStore<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileLogStore").field("group", &self.group).finish()
    }
}

impl<C> FileLogStore<C>
where
    C: RaftTypeConfig<Entry = Entry<C>>,
    C::D: Clone,
{
    /// The log of `group` in the node's `wal`. `commit` is the node's
    /// flusher: it syncs the log, and its sled flush is what a purge waits
    /// for. One handle per group id (clones aside).
    pub fn open(wal: Arc<Wal>, group: u32, commit: GroupCommit) -> Self {
        let store = FileLogStore {
            wal,
            group,
            commit,
            committed: Arc::default(),
            appended: Arc::default(),
            recent: Arc::new(Mutex::new(Recent::new(RECENT_BYTES))),
            _config: PhantomData,
        };
        let committed: Option<LogId<C::NodeId>> = store.hard_state(|g| &g.committed).flatten();
        store.note_committed(committed.as_ref());
        store
    }

    // Only the cache's own methods run under this lock, and they do not
    // panic; a poisoned lock still holds a consistent cache.
    fn recent(&self) -> MutexGuard<'_, Recent<C::Entry>> {
        self.recent.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A counter of the bytes of entries appended since the store was
    /// opened (shared: it goes on counting).
    pub fn appended_bytes(&self) -> Arc<AtomicU64> {
        self.appended.clone()
    }

    /// The last committed index this store was told of, if any.
    pub fn committed_index(&self) -> Option<u64> {
        match self.committed.load(Ordering::Relaxed) {
            0 => None,
            n => Some(n - 1),
        }
    }

    fn note_committed(&self, c: Option<&LogId<C::NodeId>>) {
        self.committed.store(c.map_or(0, |l| l.index + 1), Ordering::Relaxed);
    }

    /// One of the group's recorded hard-state values, decoded. A value that
    /// does not decode is treated as absent and logged: the group then
    /// relearns it (a vote from the next election, a purge point from the
    /// log's first entry).
    fn hard_state<T: DeserializeOwned>(
        &self,
        pick: impl Fn(&GroupLog) -> &Option<Vec<u8>>,
    ) -> Option<T> {
        let wal = self.wal.lock();
        let bytes = pick(wal.groups.get(&self.group)?).as_ref()?;
        match decode(bytes) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::error!(group = self.group, error = %e, "unreadable Raft hard state");
                None
            }
        }
    }

    /// Appends records for this group and waits for a sync that covers them.
    async fn append_durable(&self, records: &[Record<'_>]) -> io::Result<()> {
        self.wal.lock().append(self.group, records)?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.commit.submit_wal(
            self.wal.clone(),
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        rx.await.unwrap_or_else(|_| Err(io::Error::other("group commit stopped")))
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
        let wal = self.wal.lock();
        let Some(g) = wal.groups.get(&self.group) else { return Ok(Vec::new()) };
        // The cache answers only while its newest entry is the log's.
        let last = g.locs.last_key_value().map(|(&i, _)| i);
        let recent = self.recent();
        if last.is_some() && recent.last() == last {
            if let Some(entries) = recent.read(start, end, budget) {
                return Ok(entries);
            }
        }
        drop(recent);
        let hi = end.map_or(Bound::Unbounded, Bound::Excluded);
        let mut out = Vec::new();
        let mut bytes = 0usize;
        let mut buf = Vec::new();
        for (&index, &loc) in g.locs.range((Bound::Included(start), hi)) {
            wal.read(loc, &mut buf).map_err(|e| read_err(index, &e))?;
            out.push(decode::<Entry<C>>(&buf).map_err(|e| read_err(index, &e))?);
            bytes += buf.len();
            if bytes >= budget {
                break;
            }
        }
        Ok(out)
    }

    /// Moves a log kept in sled's trees (`sled_log.rs`, data directories
    /// written before this store) into this one, if this one holds nothing
    /// for the group: every entry, then the purge point and vote, durably.
    /// Returns whether there was anything to move; the caller then drops the
    /// old trees. A crash half way leaves part of the entries here and the
    /// old trees intact, so the next start moves them again over the part.
    pub async fn import(&mut self, old: crate::sled_log::OldLog<C>) -> io::Result<bool> {
        use openraft::storage::RaftLogStorageExt;
        // The vote is written last: only it says an earlier move finished.
        let moved = {
            let wal = self.wal.lock();
            wal.groups.get(&self.group).is_some_and(|g| g.vote.is_some())
        };
        if moved {
            return Ok(false);
        }
        let crate::sled_log::OldLog { entries, last_purged, vote } = old;
        if entries.is_empty() && last_purged.is_none() && vote.is_none() {
            return Ok(false);
        }
        if let Some(first) = entries.first() {
            // Whatever an earlier, interrupted move left.
            self.truncate(first.log_id.clone()).await.map_err(io::Error::other)?;
            self.blocking_append(entries).await.map_err(io::Error::other)?;
        }
        if let Some(purged) = last_purged {
            let payload = encode(&purged)?;
            let r = Record { kind: KIND_PURGE, index: purged.index, payload: &payload };
            self.append_durable(&[r]).await?;
            // The old log may hold entries up to its purge point (it wrote
            // the point before deleting them): the cache must not keep them.
            let _wal = self.wal.lock();
            self.recent().purge(purged.index);
        }
        // The vote last: its presence says the move is complete.
        if let Some(vote) = vote {
            self.save_vote(&vote).await.map_err(io::Error::other)?;
        }
        Ok(true)
    }
}

fn encode<T: Serialize + ?Sized>(value: &T) -> io::Result<Vec<u8>> {
    let body = to_bytes(value).map_err(io::Error::other)?;
    let mut out = Vec::with_capacity(1 + body.len());
    out.push(FORMAT_V1);
    out.extend_from_slice(&body);
    Ok(out)
}

/// How much encoded log one `limited_get_log_entries` call returns at most
/// (at least one entry is always returned): it becomes one AppendEntries
/// message, and a follower far behind must not get its whole log in one frame.
pub const MAX_REPLICATION_READ_BYTES: usize = 4 << 20;

/// A log index range as `[start, end)`, `end` `None` for "to the end of the
/// log"; `None` if it is empty by construction (starts after `u64::MAX`).
fn index_range(range: &impl RangeBounds<u64>) -> Option<(u64, Option<u64>)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.checked_add(1)?,
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        // `..=u64::MAX` has no exclusive end: read to the end of the log.
        Bound::Included(&e) => e.checked_add(1),
        Bound::Excluded(&e) => Some(e),
        Bound::Unbounded => None,
    };
    Some((start, end))
}

pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> io::Result<T> {
    match bytes.split_first() {
        Some((&FORMAT_V1, body)) => from_bytes(body).map_err(io::Error::other),
        Some((&v, _)) => Err(io::Error::other(format!("unknown log format version {v}"))),
        None => Err(io::Error::other("empty log record")),
    }
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
    C::D: Clone,
{
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<C::Entry>, C> {
        let Some((start, end)) = index_range(&range) else { return Ok(Vec::new()) };
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
    C::D: Clone,
{
    type LogReader = Self;

    async fn get_log_state(&mut self) -> StorageResult<LogState<C>, C> {
        let last_purged_log_id: Option<LogId<C::NodeId>> = self.hard_state(|g| &g.purged);
        let last = {
            let wal = self.wal.lock();
            match wal.groups.get(&self.group).and_then(|g| g.locs.last_key_value()) {
                Some((&index, &loc)) => {
                    let mut buf = Vec::new();
                    let read = wal.read(loc, &mut buf).and_then(|()| decode::<Entry<C>>(&buf));
                    Some(read.map_err(|e| read_err(index, &e))?)
                }
                None => None,
            }
        };
        let last_entry = last.map(|e| e.log_id);
        let last_log_id = std::cmp::max(last_entry, last_purged_log_id.clone());
        Ok(LogState { last_purged_log_id, last_log_id })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<C::NodeId>) -> StorageResult<(), C> {
        let io = |e: io::Error| err(ErrorSubject::Vote, ErrorVerb::Write, &e);
        let payload = encode(vote).map_err(io)?;
        self.append_durable(&[Record { kind: KIND_VOTE, index: 0, payload: &payload }])
            .await
            .map_err(io)
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote<C::NodeId>>, C> {
        Ok(self.hard_state(|g| &g.vote))
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<C::NodeId>>,
    ) -> StorageResult<(), C> {
        self.note_committed(committed.as_ref());
        let payload =
            encode(&committed).map_err(|e| err(ErrorSubject::Store, ErrorVerb::Write, &e))?;
        // Recorded, not synced: written to the page cache before the apply
        // it allows (`ShardStateMachine::apply`), which keeps it across a
        // kill, and a leader restored after one replays up to it before
        // serving reads that passed a read-index check (which trusts the
        // committed index).
        let r = Record { kind: KIND_COMMITTED, index: 0, payload: &payload };
        let mut wal = self.wal.lock();
        wal.append(self.group, &[r]).map_err(|e| err(ErrorSubject::Store, ErrorVerb::Write, &e))?;
        Ok(())
    }

    async fn read_committed(&mut self) -> StorageResult<Option<LogId<C::NodeId>>, C> {
        Ok(self.hard_state::<Option<LogId<C::NodeId>>>(|g| &g.committed).flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<C>) -> StorageResult<(), C>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut payloads = Vec::new();
        let mut kept = Vec::new();
        for entry in entries {
            let payload = encode(&entry)
                .map_err(|e| err(ErrorSubject::Log(entry.log_id.clone()), ErrorVerb::Write, &e))?;
            payloads.push((entry.log_id.index, payload));
            kept.push(entry);
        }
        if payloads.is_empty() {
            callback.log_io_completed(Ok(()));
            return Ok(());
        }
        let bytes: usize = payloads.iter().map(|(_, p)| p.len()).sum();
        self.appended.fetch_add(bytes as u64, Ordering::Relaxed);
        let records: Vec<Record<'_>> = payloads
            .iter()
            .map(|(index, p)| Record { kind: KIND_ENTRY, index: *index, payload: p })
            .collect();
        let mut gone = Vec::new();
        {
            let mut wal = self.wal.lock();
            // Entries only go after the log's end: openraft truncates a
            // conflicting tail before it appends over it.
            let last = wal.groups.get(&self.group).and_then(|g| g.locs.last_key_value());
            if let Some((&last, _)) = last.filter(|(&l, _)| records[0].index <= l) {
                let e = io::Error::other(format!("append of {} after {last}", records[0].index));
                return Err(err(ErrorSubject::Logs, ErrorVerb::Write, &e));
            }
            wal.append(self.group, &records)
                .map_err(|e| err(ErrorSubject::Logs, ErrorVerb::Write, &e))?;
            let mut recent = self.recent();
            for (entry, (index, payload)) in kept.into_iter().zip(&payloads) {
                recent.push(*index, payload.len(), entry, &mut gone);
            }
        }
        self.commit.submit_wal(self.wal.clone(), Box::new(move |r| callback.log_io_completed(r)));
        drop(gone); // after the sync is asked for (see `Recent::push`)
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<C::NodeId>) -> StorageResult<(), C> {
        let mut wal = self.wal.lock();
        let has_tail = wal
            .groups
            .get(&self.group)
            .is_some_and(|g| g.locs.range(log_id.index..).next().is_some());
        if !has_tail {
            return Ok(());
        }
        let r = Record { kind: KIND_TRUNCATE, index: log_id.index, payload: &[] };
        wal.append(self.group, &[r]).map_err(|e| err(ErrorSubject::Logs, ErrorVerb::Delete, &e))?;
        self.recent().truncate(log_id.index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<C::NodeId>) -> StorageResult<(), C> {
        let io = |e: io::Error| err(ErrorSubject::Logs, ErrorVerb::Delete, &e);
        let payload = encode(&log_id).map_err(io)?;
        let r = Record { kind: KIND_PURGE, index: log_id.index, payload: &payload };
        let mut wal = self.wal.lock();
        wal.append(self.group, &[r]).map_err(io)?;
        self.recent().purge(log_id.index);
        Ok(())
    }
}
