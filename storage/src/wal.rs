//! One write-ahead log per node for the Raft logs of all its groups:
//! append-only segments in `<dir>/`, records tagged with their group.
//!
//! ```text
//! wal-<seq, 20 digits>.log   record*
//! record = len u32 | crc u32 | group u32 | kind u8 | index u64 | payload   (crc over all after it)
//! kind   = entry (payload: v1 | Entry) | truncate (from index) | purge (v1 | LogId)
//!        | vote (v1 | Vote) | committed (v1 | Option<LogId>)
//!        | drop (no payload, index 0)
//! ```
//!
//! Why one file for all groups (each group had a file of its own before):
//! a round of group commit then costs one `fdatasync`, whatever the number
//! of groups that appended. With a file per group the likes mix made ~4,100
//! `fdatasync`s a second over 17 groups, and the sync threads were a fifth
//! of the node's CPU (mostly the device flush each one issues).
//!
//! Every group's state is rebuilt by reading the segments in order: an entry
//! record places that entry, a truncate record removes the group's entries
//! from its index on, a purge record removes those up to its log id and
//! records it, vote and committed records replace the group's, and a drop
//! record removes everything recorded for the group before it (the node
//! no longer holds the group; records after it are the group created again
//! here, and count as usual). A torn or corrupt record ends its segment,
//! which is cut there (only the newest segment can end torn: each is
//! synced before the next one starts).
//!
//! Segments are written in place over zeros: a background thread fills
//! the next segment's file with zeros and syncs it before it is needed
//! (`wal-spare-*.tmp`, renamed at rotation; only while the disk keeps
//! its write reserve after it), so an append rewrites blocks
//! the file already has and a round's `fdatasync` flushes data only, with
//! no block allocation or file size to journal (measured on a hot board:
//! 2.6 to 2.4 us of node CPU per event). Zeros never parse as a record
//! (the checksum of a zero header is not zero), so recovery reads up to
//! the first zero header; what follows a torn record is cut unless it is
//! all zeros (a stale record past the cut must not line up with a later
//! append and come back). Without a spare ready, a segment starts empty
//! and asks for one once it holds 1/64 of a segment; it gives way to the spare as soon as that is
//! ready (it grows the file on every append, so every `fdatasync` also
//! wrote its inode: on a fresh node, the first 64 MiB of the log).
//!
//! Space: a segment is deleted once no group has a live entry in it. When a
//! new segment starts, it first records every group's vote, purge point and
//! committed id (made durable before any old segment is deleted), so old
//! segments are never needed for those. A group that writes rarely could
//! still pin every segment it touched until its next snapshot; so when more
//! than `MAX_SEGMENTS` exist and the oldest is mostly spent, its live
//! entries are copied into the new segment (same payload, same index:
//! replaying them is placing them again) and the oldest is deleted.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::wal_spare::{Spare, SPARE_PREFIX, SPARE_SLACK};

/// The format version byte in front of every payload.
pub(crate) const FORMAT_V1: u8 = 1;
/// `len u32 | crc u32 | group u32 | kind u8 | index u64`.
const HEADER: usize = 21;
/// A new segment starts once the active one is this large.
pub const SEGMENT_BYTES: u64 = 64 << 20;
/// More segments than this and the oldest one's live entries are moved on.
const MAX_SEGMENTS: usize = 8;
/// The most one record may hold; anything larger on disk is a torn length.
const MAX_RECORD: usize = 1 << 30;

pub(crate) const KIND_ENTRY: u8 = 1;
pub(crate) const KIND_TRUNCATE: u8 = 2;
pub(crate) const KIND_PURGE: u8 = 3;
pub(crate) const KIND_VOTE: u8 = 4;
pub(crate) const KIND_COMMITTED: u8 = 5;
pub(crate) const KIND_DROP: u8 = 6;

/// Where one entry's payload is.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Loc {
    seg: u64,
    off: u64,
    len: u32,
}

/// What the log holds for one group. The hard state is kept encoded: this
/// module does not know the group's type config, the handle does.
#[derive(Default)]
pub(crate) struct GroupLog {
    pub locs: BTreeMap<u64, Loc>,
    /// `v1 | Vote`, `v1 | LogId`, `v1 | Option<LogId>` as last recorded.
    pub vote: Option<Vec<u8>>,
    pub purged: Option<Vec<u8>>,
    pub committed: Option<Vec<u8>>,
    /// The index the last purge went through (with `purged`).
    purged_at: u64,
}

struct Segment {
    seq: u64,
    path: PathBuf,
    file: Arc<File>,
    len: u64,
    /// Bytes written when it started (hard state and moved entries): not
    /// counted toward its size, or a segment that starts with a large move
    /// would be full at once and every append would start another.
    base: u64,
    /// Live entries in it, of every group, and their bytes.
    live: usize,
    live_bytes: u64,
    /// Started without a spare: each append grows the file, so each sync
    /// also writes its inode (one more device write a round); it gives way
    /// to a spare as soon as one is ready.
    grows: bool,
}

pub(crate) struct WalInner {
    dir: PathBuf,
    segment_bytes: u64,
    segments: Vec<Segment>,
    pub groups: HashMap<u32, GroupLog>,
    spare: Arc<Spare>,
    /// A sync of the log failed: why. Nothing more is appended (see `poison_on`).
    poisoned: Option<String>,
    /// The active segment's newest records, appended but not yet written
    /// to its file (they end at its `len`): see [`Wal::write_out`].
    pending: Vec<u8>,
}

/// The node's log. Group handles (`file_log::FileLogStore`) share it.
pub struct Wal {
    inner: Mutex<WalInner>,
}

/// One record to write.
pub(crate) struct Record<'a> {
    pub kind: u8,
    pub index: u64,
    pub payload: &'a [u8],
}

impl Wal {
    /// Opens (creating if needed) the log in `dir`, recovered to the longest
    /// intact prefix.
    pub fn open(dir: &Path) -> io::Result<Arc<Wal>> {
        Self::open_with_segment_bytes(dir, SEGMENT_BYTES)
    }

    /// [`open`](Self::open) with another segment size (tests use small ones
    /// to see segments rotate and go).
    pub fn open_with_segment_bytes(dir: &Path, segment_bytes: u64) -> io::Result<Arc<Wal>> {
        std::fs::create_dir_all(dir)?;
        let mut inner = WalInner {
            dir: dir.to_path_buf(),
            segment_bytes,
            segments: Vec::new(),
            groups: HashMap::new(),
            spare: Arc::new(Spare::new(dir)),
            poisoned: None,
            pending: Vec::new(),
        };
        // Spares left by a crash (or by an earlier `Wal` of this process):
        // never used, they may be half written.
        for e in std::fs::read_dir(dir)? {
            let path = e?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if name.starts_with(SPARE_PREFIX) && name.ends_with(".tmp") {
                std::fs::remove_file(&path)?;
            }
        }
        inner.recover()?;
        Ok(Arc::new(Wal { inner: Mutex::new(inner) }))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, WalInner> {
        // Every mutation leaves `WalInner` consistent before it can fail.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The groups the log holds records of, in no particular order.
    pub fn group_ids(&self) -> Vec<u32> {
        self.lock().groups.keys().copied().collect()
    }

    /// Segment files on disk, for tests and status.
    pub fn segment_count(&self) -> usize {
        self.lock().segments.len()
    }

    /// The free space the disk must keep after a spare segment is made:
    /// the node's write reserve, so that making one never pushes the disk
    /// below it (1 GiB until set).
    pub fn set_spare_floor(&self, bytes: u64) {
        self.lock().spare.floor.store(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    /// Stops the log taking appends after a failed sync. After an
    /// `fdatasync` error the kernel may have dropped the pages it could not
    /// write and report the next sync clean; appending on would leave a
    /// hole that recovery cuts, with every later acknowledged record (of
    /// every group) behind it. Every group's next append fails instead, so
    /// Raft stops them, and a restart recovers what is really on disk.
    pub fn poison_on(&self, result: &io::Result<()>) {
        if let Err(e) = result {
            let mut inner = self.lock();
            if inner.poisoned.is_none() {
                tracing::error!(error = %e, "the Raft log failed to sync: it takes no more writes");
                inner.poisoned = Some(e.to_string());
            }
        }
    }

    /// Writes the records appended since the last write to the page cache,
    /// in one `pwrite`. A kill then keeps them; only a sync makes them
    /// survive a power loss. The state machine calls this before it applies
    /// (so a committed record is in the file before anything it let through
    /// is visible), and so does each group-commit round before its sync.
    ///
    /// Why appends do not write at once: a round of the rankings mix
    /// carried up to 16 groups' entries and as many committed records, and
    /// each `pwrite` of a few hundred bytes cost about 4 µs of the node's
    /// core in ext4's per-call path (7% of the node). One write per round
    /// (or per apply) costs that once.
    pub fn write_out(&self) -> io::Result<()> {
        self.lock().write_pending()
    }

    /// One group-commit round's work for the log: what is appended is
    /// written, then the active segment synced (outside the lock, so
    /// appends go on meanwhile). A segment that gave way since the appends
    /// this round covers was synced by the rotation.
    pub fn sync_round(&self) -> io::Result<()> {
        let file = {
            let mut inner = self.lock();
            if let Some(why) = &inner.poisoned {
                return Err(poisoned(why));
            }
            inner.write_pending()?;
            match inner.segments.last() {
                Some(seg) => seg.file.clone(),
                None => return Ok(()),
            }
        };
        // Only a failed sync poisons: a failed write keeps its bytes and
        // is tried again, and another request's failure in the same round
        // (sled's flush) says nothing about this file.
        let synced = file.sync_data();
        self.poison_on(&synced);
        synced
    }

    /// Forgets `group` (its replica moved to another node), durably: a
    /// drop record is appended, written and synced, and from its append
    /// the group is gone from memory: its entries no longer keep their
    /// segments (a spent one is deleted at the next rotation), its vote,
    /// purge point and committed id are gone, and rotations record no hard
    /// state for it. Recovery reads the record the same way; records of
    /// the group after it (created again here later) count as usual. An
    /// error is a failed append, write or sync (a failed sync poisons the
    /// log, as a round's does): the drop may or may not survive a restart.
    ///
    /// The caller drops every `FileLogStore` of the group (clones too:
    /// openraft's log readers) before this, i.e. shuts the group's Raft
    /// down. A handle caches the group's newest entries and answers reads
    /// from that cache while its newest index is the log's, so one that
    /// outlived the drop could serve the old entries to a group created
    /// again at the same indexes; a handle opened afterwards starts empty.
    ///
    /// Why the record is applied at its append, not after the sync: a
    /// rotation by another group between the two would record this
    /// group's hard state after the drop record, and recovery would bring
    /// the group back with it.
    pub fn drop_group(&self, group: u32) -> io::Result<()> {
        {
            let mut inner = self.lock();
            // A group the log holds nothing of needs no record (nothing on
            // disk is its); still synced below: after an earlier drop whose
            // write or sync failed, a retry must not report it durable.
            if inner.groups.contains_key(&group) {
                inner.append(group, &[Record { kind: KIND_DROP, index: 0, payload: &[] }])?;
            }
        }
        self.sync_round()
    }

    /// Whether a zero-filled file waits to be the next segment (tests).
    pub fn spare_ready(&self) -> bool {
        self.lock().spare.ready()
    }
}

fn poisoned(why: &str) -> io::Error {
    io::Error::other(format!(
        "the Raft log failed to sync ({why}); it takes no writes until the node restarts"
    ))
}

/// Appended bytes held before they are written regardless of the next
/// round: bounds the buffer whatever the appends between two rounds.
const PENDING_MAX: usize = 1 << 20;

impl WalInner {
    /// Appends `records` of `group` and applies them to the group's state.
    /// They are readable at once; they reach the file with the next
    /// [`Wal::write_out`] or round (`Wal::sync_round`).
    pub fn append(&mut self, group: u32, records: &[Record<'_>]) -> io::Result<()> {
        if let Some(why) = &self.poisoned {
            return Err(poisoned(why));
        }
        let full = |s: &Segment| s.len - s.base >= self.segment_bytes;
        if self.segments.last().is_none_or(|s| full(s) || (s.grows && self.spare.ready())) {
            self.rotate()?;
        }
        let start = self.pending.len();
        for r in records {
            if let Err(e) = encode(group, r, &mut self.pending) {
                self.pending.truncate(start);
                return Err(e);
            }
        }
        let seg = self.segments.last_mut().ok_or_else(|| io::Error::other("no segment"))?;
        let (seq, base) = (seg.seq, seg.len);
        seg.len += (self.pending.len() - start) as u64;
        // A segment that grows asks early (but not before 1/64 of a
        // segment is in it: a spare is a whole segment of zeros, and a node
        // that writes little should not make one).
        let asks = if seg.grows { self.segment_bytes / 64 } else { self.segment_bytes / 2 };
        if seg.len - seg.base >= asks {
            self.spare.make(&self.dir, self.segment_bytes + SPARE_SLACK);
        }
        let mut off = base;
        for r in records {
            let loc = Loc { seg: seq, off: off + HEADER as u64, len: r.payload.len() as u32 };
            self.apply(group, r.kind, r.index, r.payload, loc);
            off += (HEADER + r.payload.len()) as u64;
        }
        if self.pending.len() >= PENDING_MAX {
            // The records are indexed already: a failed write here is left
            // to the next round, which writes them again and reports it.
            if let Err(e) = self.write_pending() {
                tracing::warn!(error = %e, "could not write the Raft log's buffer");
            }
        }
        Ok(())
    }

    /// Writes the pending records to the active segment. A failed write
    /// keeps them, to be written again at the same place (the bytes are
    /// the same, so a part that did land is rewritten, not doubled).
    fn write_pending(&mut self) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let seg = self.segments.last().ok_or_else(|| io::Error::other("no segment"))?;
        seg.file.write_all_at(&self.pending, seg.len - self.pending.len() as u64)?;
        self.pending.clear();
        if self.pending.capacity() > PENDING_MAX {
            self.pending = Vec::new();
        }
        Ok(())
    }

    /// A record's effect on its group's state (at append and at recovery).
    fn apply(&mut self, group: u32, kind: u8, index: u64, payload: &[u8], loc: Loc) {
        let segments = &mut self.segments;
        let mut unref = |l: Loc| {
            if let Some(s) = segments.iter_mut().find(|s| s.seq == l.seg) {
                s.live = s.live.saturating_sub(1);
                s.live_bytes = s.live_bytes.saturating_sub(HEADER as u64 + u64::from(l.len));
            }
        };
        if kind == KIND_DROP {
            // The whole group goes, hard state included: `rotate` records
            // only the groups in this map.
            if let Some(g) = self.groups.remove(&group) {
                g.locs.into_values().for_each(unref);
            }
            return;
        }
        let g = self.groups.entry(group).or_default();
        match kind {
            KIND_ENTRY => {
                if let Some(old) = g.locs.insert(index, loc) {
                    unref(old);
                }
                if let Some(s) = segments.iter_mut().find(|s| s.seq == loc.seg) {
                    s.live += 1;
                    s.live_bytes += HEADER as u64 + u64::from(loc.len);
                }
            }
            KIND_TRUNCATE => g.locs.split_off(&index).into_values().for_each(unref),
            KIND_PURGE => {
                let kept = g.locs.split_off(&index.saturating_add(1));
                std::mem::replace(&mut g.locs, kept).into_values().for_each(unref);
                g.purged = Some(payload.to_vec());
                g.purged_at = index;
            }
            KIND_VOTE => g.vote = Some(payload.to_vec()),
            KIND_COMMITTED => g.committed = Some(payload.to_vec()),
            _ => {}
        }
    }

    /// Reads one entry's payload (from memory while it is pending).
    pub fn read(&self, loc: Loc, buf: &mut Vec<u8>) -> io::Result<()> {
        let seg = self
            .segments
            .iter()
            .find(|s| s.seq == loc.seg)
            .ok_or_else(|| io::Error::other(format!("no log segment {}", loc.seg)))?;
        // Only the active segment has pending bytes (an older one may be
        // shorter than the buffer).
        let unwritten = seg.len.saturating_sub(self.pending.len() as u64);
        let active = self.segments.last().is_some_and(|s| s.seq == loc.seg);
        if active && loc.off >= unwritten {
            let at = (loc.off - unwritten) as usize;
            let bytes = self.pending.get(at..at + loc.len as usize);
            let bytes = bytes.ok_or_else(|| io::Error::other("log entry past the log's end"))?;
            buf.clear();
            buf.extend_from_slice(bytes);
            return Ok(());
        }
        buf.resize(loc.len as usize, 0);
        seg.file.read_exact_at(buf, loc.off)
    }

    /// Starts a new segment: the outgoing one synced first (a truncate or
    /// purge record at its end asked for no sync of its own, and nothing in
    /// a later segment may outlive it), then every group's hard state and,
    /// if there are too many segments, the live entries of the oldest,
    /// written and synced before the segment is used; then the segments
    /// nothing lives in are deleted, oldest first.
    ///
    /// Runs under the log's lock, on whichever task appended: once per
    /// `segment_bytes` of appends, a few syncs and at most
    /// `segment_bytes / 8` of moved entries.
    fn rotate(&mut self) -> io::Result<()> {
        self.write_pending()?;
        if let Some(out) = self.segments.last() {
            // Its unused zeros go: only the active segment has a zero tail.
            if out.file.metadata()?.len() > out.len {
                out.file.set_len(out.len)?;
            }
            // A failed sync may have dropped pages that the flusher's next
            // sync of this file then reports clean: stop appends, as a
            // failed round does (`Wal::poison_on`).
            if let Err(e) = out.file.sync_data() {
                tracing::error!(error = %e, "the Raft log failed to sync: it takes no more writes");
                self.poisoned = Some(e.to_string());
                return Err(e);
            }
        }
        let seq = self.segments.last().map_or(1, |s| s.seq + 1);
        let mut buf = Vec::new();
        // The groups in the map only: a dropped group's hard state must not
        // be recorded after its drop record, or recovery brings it back.
        for (&group, g) in &self.groups {
            for (kind, v) in
                [(KIND_PURGE, &g.purged), (KIND_VOTE, &g.vote), (KIND_COMMITTED, &g.committed)]
            {
                if let Some(payload) = v {
                    // A purge record's index is what it purges through.
                    let index = if kind == KIND_PURGE { g.purged_at } else { 0 };
                    encode(group, &Record { kind, index, payload }, &mut buf)?;
                }
            }
        }
        let moved = self.move_oldest_if_pinned(&mut buf)?;
        let path = self.dir.join(format!("wal-{seq:020}.log"));
        let mut grows = false;
        let file = match self.spare.take() {
            Some(f) => match std::fs::rename(&self.spare.path, &path) {
                Ok(()) => f,
                Err(e) => {
                    tracing::warn!(error = %e, "could not use the prepared log segment");
                    grows = true;
                    new_file(&path)?
                }
            },
            None => {
                grows = true;
                new_file(&path)?
            }
        };
        let written = file.write_all_at(&buf, 0).and_then(|()| file.sync_data());
        if let Err(e) = written.and_then(|()| sync_dir(&self.dir)) {
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        let len = buf.len() as u64;
        let file = Arc::new(file);
        let seg = Segment { seq, path, file, len, base: len, live: 0, live_bytes: 0, grows };
        self.segments.push(seg);
        for (group, index, off, len) in moved {
            self.apply(group, KIND_ENTRY, index, &[], Loc { seg: seq, off, len });
        }
        // Oldest first, and only while nothing lives in them: a truncate
        // or drop record may only go once the older records it removed are
        // gone. A file that cannot be removed stops the sweep (it stays
        // listed).
        let mut removed = false;
        while self.segments.first().is_some_and(|s| s.live == 0 && s.seq != seq) {
            if let Err(e) = std::fs::remove_file(&self.segments[0].path) {
                tracing::warn!(error = %e, "could not delete a spent log segment");
                break;
            }
            self.segments.remove(0);
            removed = true;
        }
        if removed {
            sync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// With more than `MAX_SEGMENTS` segments and the oldest one mostly
    /// spent (at most an eighth of a segment still live: a group that writes
    /// rarely, pinning it), encodes its live entries into `buf` (written at
    /// the start of the new segment) and returns where each will be:
    /// `(group, index, payload offset, len)`. A mostly live oldest segment
    /// is log its groups still need; copying it would only move the problem.
    fn move_oldest_if_pinned(
        &mut self,
        buf: &mut Vec<u8>,
    ) -> io::Result<Vec<(u32, u64, u64, u32)>> {
        let pinned = self.segments.len() > MAX_SEGMENTS
            && self.segments[0].live_bytes <= self.segment_bytes / 8;
        if !pinned {
            return Ok(Vec::new());
        }
        let oldest = self.segments[0].seq;
        let mut live: Vec<(u32, u64, Loc)> = Vec::new();
        for (&group, g) in &self.groups {
            live.extend(
                g.locs.iter().filter(|(_, l)| l.seg == oldest).map(|(&i, &l)| (group, i, l)),
            );
        }
        let mut moved = Vec::with_capacity(live.len());
        let mut payload = Vec::new();
        for (group, index, loc) in live {
            self.read(loc, &mut payload)?;
            let off = buf.len() + HEADER;
            encode(group, &Record { kind: KIND_ENTRY, index, payload: &payload }, buf)?;
            moved.push((group, index, off as u64, loc.len));
        }
        Ok(moved)
    }
}

fn new_file(path: &Path) -> io::Result<File> {
    OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path)
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

mod recover;

use recover::encode;

#[cfg(test)]
#[path = "wal_tests.rs"]
mod tests;
