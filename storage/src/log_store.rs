//! The Raft log and hard state of one openraft group, kept in sled.
//!
//! Each group owns two trees of the node's single `Db`:
//!
//! ```text
//! raft/<group>/log   index (u64 big-endian, so scans run in log order) -> v1 | Entry
//! raft/<group>/meta  "vote" | "committed" | "last_purged"               -> v1 | value
//! ```
//!
//! Values are a format version byte followed by `plaudit_proto::codec`
//! bincode, the project's only encoder, so a later format can be read beside
//! this one.
//!
//! Durability follows openraft's contract. `append` makes the entries readable
//! at once (one sled batch) and hands the `LogFlushed` callback to the node's
//! [`GroupCommit`], which completes it after a flush that covers them; many
//! groups' appends thus share one fsync. `save_vote` waits for such a flush
//! before it returns. Truncate, purge and `save_committed` are not flushed on
//! their own: sled persists writes in order, so the next append or vote
//! carries them to disk, and openraft tolerates losing them before that (a
//! purge is redone, committed is re-learned from the leader, truncated
//! entries are still not committed).

use std::fmt::Debug;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{
    Entry, ErrorSubject, ErrorVerb, LogId, LogState, OptionalSend, RaftLogReader, RaftTypeConfig,
    StorageError, StorageIOError, Vote,
};
use plaudit_proto::codec::{from_bytes, to_bytes, CodecError};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::group_commit::GroupCommit;

/// The format version byte in front of every value this module writes.
const FORMAT_V1: u8 = 1;

/// Meta-tree keys.
const KEY_VOTE: &[u8] = b"vote";
const KEY_COMMITTED: &[u8] = b"committed";
const KEY_LAST_PURGED: &[u8] = b"last_purged";

/// How much encoded log one `limited_get_log_entries` call returns at most
/// (at least one entry is always returned): it becomes one AppendEntries
/// message, and a follower far behind must not get its whole log in one frame.
pub const MAX_REPLICATION_READ_BYTES: usize = 4 << 20;

type StorageResult<T, C> = Result<T, StorageError<<C as RaftTypeConfig>::NodeId>>;

/// openraft log storage for one Raft group over sled. Cloning gives another
/// handle to the same trees (openraft uses clones as log readers).
pub struct SledLogStore<C> {
    log: sled::Tree,
    meta: sled::Tree,
    commit: GroupCommit,
    /// The last committed index openraft reported (+1; 0: none), for metrics.
    committed: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// `fn() -> C`: the store holds no `C`, so it is Send + Sync whatever `C` is.
    _config: PhantomData<fn() -> C>,
}

impl<C> Clone for SledLogStore<C> {
    fn clone(&self) -> Self {
        SledLogStore {
            log: self.log.clone(),
            meta: self.meta.clone(),
            commit: self.commit.clone(),
            committed: self.committed.clone(),
            _config: PhantomData,
        }
    }
}

impl<C> Debug for SledLogStore<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SledLogStore")
            // Not the entry count: sled's `len` walks the whole tree.
            .field("log", &String::from_utf8_lossy(&self.log.name()))
            .finish()
    }
}

// The helpers return openraft's `StorageError` (large: it carries a subject
// and a backtrace string) because the trait methods they serve must; boxing
// it here would only add a conversion on the way out.
#[allow(clippy::result_large_err)]
impl<C> SledLogStore<C>
where
    C: RaftTypeConfig<Entry = Entry<C>>,
{
    /// Opens (creating if needed) the log of `group` in `db`. `commit` must be
    /// the group-commit flusher of this same `db`: its flush is what makes
    /// appends and votes durable.
    pub fn open(db: &sled::Db, commit: GroupCommit, group: &str) -> Result<Self, sled::Error> {
        Ok(SledLogStore {
            log: db.open_tree(format!("raft/{group}/log"))?,
            meta: db.open_tree(format!("raft/{group}/meta"))?,
            commit,
            committed: Default::default(),
            _config: PhantomData,
        })
    }

    /// The last committed index this store was told of, if any.
    pub fn committed_index(&self) -> Option<u64> {
        match self.committed.load(std::sync::atomic::Ordering::Relaxed) {
            0 => None,
            n => Some(n - 1),
        }
    }

    fn note_committed(&self, c: Option<&LogId<C::NodeId>>) {
        let v = c.map_or(0, |l| l.index + 1);
        self.committed.store(v, std::sync::atomic::Ordering::Relaxed);
    }

    /// Reads and decodes one meta value.
    fn read_meta<T: DeserializeOwned>(
        &self,
        key: &[u8],
        subject: ErrorSubject<C::NodeId>,
    ) -> StorageResult<Option<T>, C> {
        let bytes = self.meta.get(key).map_err(|e| io_err(subject.clone(), ErrorVerb::Read, &e))?;
        bytes.map(|b| decode(&b)).transpose().map_err(|e| io_err(subject, ErrorVerb::Read, &e))
    }

    /// Encodes and writes one meta value (readable at once, durable with the next flush).
    fn write_meta<T: Serialize>(
        &self,
        key: &[u8],
        value: &T,
        subject: ErrorSubject<C::NodeId>,
    ) -> StorageResult<(), C> {
        let bytes = encode(value).map_err(|e| io_err(subject.clone(), ErrorVerb::Write, &e))?;
        self.meta.insert(key, bytes).map_err(|e| io_err(subject, ErrorVerb::Write, &e))?;
        Ok(())
    }

    fn last_purged(&self) -> StorageResult<Option<LogId<C::NodeId>>, C> {
        self.read_meta(KEY_LAST_PURGED, ErrorSubject::Logs)
    }

    /// Reads entries in `[start, end)` (`end` `None`: to the end of the log),
    /// stopping after the first entry that brings the total to `byte_budget`.
    fn read_range(
        &self,
        start: u64,
        end: Option<u64>,
        byte_budget: usize,
    ) -> StorageResult<Vec<C::Entry>, C> {
        if end.is_some_and(|end| start >= end) {
            return Ok(Vec::new());
        }
        let hi = match end {
            Some(end) => Bound::Excluded(index_key(end)),
            None => Bound::Unbounded,
        };
        let mut entries = Vec::new();
        let mut bytes = 0usize;
        for item in self.log.range::<[u8; 8], _>((Bound::Included(index_key(start)), hi)) {
            let (key, value) = item.map_err(|e| read_logs_err(&e))?;
            let entry: Entry<C> = decode(&value).map_err(|e| {
                let subject = match key_index(&key) {
                    Some(index) => ErrorSubject::LogIndex(index),
                    None => ErrorSubject::Logs,
                };
                io_err(subject, ErrorVerb::Read, &e)
            })?;
            entries.push(entry);
            bytes += value.len();
            if bytes >= byte_budget {
                break;
            }
        }
        Ok(entries)
    }

    /// Removes every log key in `range`, one key at a time, newest first
    /// when `newest_first` (truncation: a crash leaves a contiguous log) and
    /// oldest first otherwise (purge: leftovers sit below the purge point).
    ///
    /// Never a `sled::Batch`: in sled 0.34 the first batch or transaction
    /// switches the process to a global RwLock that `flush()` holds for its
    /// whole IO wait, which stalls every other sled call behind it.
    fn remove_range(
        &self,
        range: (Bound<[u8; 8]>, Bound<[u8; 8]>),
        newest_first: bool,
    ) -> StorageResult<(), C> {
        let keys: Vec<_> = self
            .log
            .range::<[u8; 8], _>(range)
            .keys()
            .collect::<Result<_, _>>()
            .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Read, &e))?;
        let remove = |k: &sled::IVec| {
            self.log.remove(k).map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Delete, &e))
        };
        if newest_first {
            keys.iter().rev().try_for_each(|k| remove(k).map(drop))
        } else {
            keys.iter().try_for_each(|k| remove(k).map(drop))
        }
    }
}

impl<C> RaftLogReader<C> for SledLogStore<C>
where
    C: RaftTypeConfig<Entry = Entry<C>>,
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

impl<C> RaftLogStorage<C> for SledLogStore<C>
where
    C: RaftTypeConfig<Entry = Entry<C>>,
{
    type LogReader = Self;

    async fn get_log_state(&mut self) -> StorageResult<LogState<C>, C> {
        let last_purged_log_id = self.last_purged()?;
        let last_entry = match self.log.last().map_err(|e| read_logs_err(&e))? {
            Some((key, value)) => {
                let entry: Entry<C> = decode(&value).map_err(|e| {
                    let subject =
                        key_index(&key).map_or(ErrorSubject::Logs, ErrorSubject::LogIndex);
                    io_err(subject, ErrorVerb::Read, &e)
                })?;
                Some(entry.log_id)
            }
            None => None,
        };
        // Normally the last entry is above the purge point, or there is none.
        // A crash between recording a purge and deleting its entries can leave
        // entries at or below it; the purge point is then still the answer.
        let last_log_id = std::cmp::max(last_entry, last_purged_log_id.clone());
        Ok(LogState { last_purged_log_id, last_log_id })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<C::NodeId>) -> StorageResult<(), C> {
        self.write_meta(KEY_VOTE, vote, ErrorSubject::Vote)?;
        // openraft requires the vote durable before we return; this flush also
        // covers every earlier append, keeping the write order openraft relies on.
        self.commit.flush().await.map_err(|e| io_err(ErrorSubject::Vote, ErrorVerb::Write, &e))
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote<C::NodeId>>, C> {
        self.read_meta(KEY_VOTE, ErrorSubject::Vote)
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<C::NodeId>>,
    ) -> StorageResult<(), C> {
        // Not flushed: a committed id lost in a crash only means re-learning
        // it from the leader, never applying something uncommitted.
        self.note_committed(committed.as_ref());
        self.write_meta(KEY_COMMITTED, &committed, ErrorSubject::Store)
    }

    async fn read_committed(&mut self) -> StorageResult<Option<LogId<C::NodeId>>, C> {
        let c = self
            .read_meta::<Option<LogId<C::NodeId>>>(KEY_COMMITTED, ErrorSubject::Store)?
            .flatten();
        self.note_committed(c.as_ref());
        Ok(c)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<C>) -> StorageResult<(), C>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        // Inserted in index order, one at a time (see `remove_range` for why
        // not a batch): sled recovers a prefix of its writes, so a crash
        // never keeps a later entry without the earlier ones.
        for entry in entries {
            let value = encode(&entry).map_err(|e| {
                io_err(ErrorSubject::Log(entry.log_id.clone()), ErrorVerb::Write, &e)
            })?;
            self.log.insert(index_key(entry.log_id.index), value).map_err(|e| {
                io_err(ErrorSubject::Log(entry.log_id.clone()), ErrorVerb::Write, &e)
            })?;
        }
        // Readable now; durable when the flusher's next round completes.
        self.commit.submit(Box::new(move |result| callback.log_io_completed(result)));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<C::NodeId>) -> StorageResult<(), C> {
        self.remove_range((Bound::Included(index_key(log_id.index)), Bound::Unbounded), true)
    }

    async fn purge(&mut self, log_id: LogId<C::NodeId>) -> StorageResult<(), C> {
        // The purge point first: should we crash before the deletes, the log
        // still starts after it, and the leftovers go with the next purge
        // (which removes everything up to its index, not just the new part).
        self.write_meta(KEY_LAST_PURGED, &log_id, ErrorSubject::Logs)?;
        self.remove_range((Bound::Unbounded, Bound::Included(index_key(log_id.index))), false)
    }
}

/// A log index range as `[start, end)`, `end` `None` for "to the end of the
/// log"; `None` if it is empty by construction (starts after `u64::MAX`).
pub(crate) fn index_range(range: &impl RangeBounds<u64>) -> Option<(u64, Option<u64>)> {
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

/// The log key of an index: big-endian, so sled's byte order is log order.
fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

/// The index of a log key, `None` if the key is not one we wrote.
fn key_index(key: &[u8]) -> Option<u64> {
    <[u8; 8]>::try_from(key).ok().map(u64::from_be_bytes)
}

/// A stored value that cannot be read back.
#[derive(Debug, thiserror::Error)]
enum FormatError {
    #[error(transparent)]
    Codec(#[from] CodecError),
    #[error("unknown value format version {0}")]
    UnknownVersion(u8),
    #[error("empty value")]
    Empty,
}

fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, FormatError> {
    let body = to_bytes(value)?;
    let mut out = Vec::with_capacity(1 + body.len());
    out.push(FORMAT_V1);
    out.extend_from_slice(&body);
    Ok(out)
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, FormatError> {
    match bytes.split_first() {
        Some((&FORMAT_V1, body)) => Ok(from_bytes(body)?),
        Some((&version, _)) => Err(FormatError::UnknownVersion(version)),
        None => Err(FormatError::Empty),
    }
}

fn io_err<NID, E>(subject: ErrorSubject<NID>, verb: ErrorVerb, e: &E) -> StorageError<NID>
where
    NID: openraft::NodeId,
    E: std::error::Error + 'static,
{
    StorageIOError::new(subject, verb, e).into()
}

fn read_logs_err<NID: openraft::NodeId>(e: &sled::Error) -> StorageError<NID> {
    io_err(ErrorSubject::Logs, ErrorVerb::Read, e)
}
