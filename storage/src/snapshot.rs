//! Raft snapshots of a shard: its applied state streamed to a file in
//! chunks from a consistent point, and installed from such a file
//! atomically.
//!
//! **What a shard's state is.** Every key of the shard in every business
//! and ranking tree (each starts with the shard id, so the slice is one
//! prefix scan per tree), its whole meta tree (applied id, membership, time
//! floor, inbox and outbox), and, for the metadata group, the registry;
//! with the rows of the boards the shard holds taken from their images,
//! since a held board's tree rows may be stale (`board_image.rs`).
//!
//! **A consistent point without stopping apply.** Applied state is staged
//! (`state.rs`): a shard's trees change only when a checkpoint moves a
//! staged overlay into them. `freeze_with` checkpoints the shard (so its
//! trees hold exactly what is applied, with its applied id, except for the
//! held boards whose images it is given) and then stops further
//! checkpoints of it until the returned guard drops. Apply goes on
//! meanwhile, staging into the overlay, while the export walks the
//! unchanging trees, chunk by chunk. Memory: one chunk, plus the images
//! (a copy of each changed held board: ~24 B per member and 8 B per
//! remembered event id), held until the export ends.
//!
//! **Durability.** The snapshot files are the durable state of a shard
//! (with the Raft log after them): a restart installs each shard's newest
//! file. An install replaces the shard's keys in memory; a crash during it
//! loses memory only, and the file is installed again at restart.
//!
//! File layout:
//!
//! ```text
//! "PLAUDITSNAP" 0x01 | header len u32 BE | header (the cluster's snapshot meta, opaque here)
//! then records: len u32 BE | bincode(Record)
//!   Record = Chunk { tree, [(key, value)] } | Sealed { items, crc } (last)
//!          | End { items } (last, in files written before `Sealed`)
//! ```
//!
//! **Verified before it replaces anything.** `Sealed` carries the item
//! count and a CRC-32 of every record before it, so a cut or damaged file
//! is found by reading it once (`verify`), before a received snapshot is
//! made current: a node never trades a good snapshot for a bad one.

use crate::board_image::{BoardImage, Merged};
use crate::keys;
use crate::pending::{prefix_range, KeyRange};
use crate::state::{Result, StateError, StateStore};
use crate::trees::TreeRef;
use plaudit_proto::codec;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::Arc;

const MAGIC: &[u8; 12] = b"PLAUDITSNAP\x01";
/// Keys and values per chunk are gathered up to about this many bytes.
const CHUNK_BYTES: usize = 1 << 20;
/// A record longer than this is corrupt (chunks stay near `CHUNK_BYTES`,
/// plus one key and value, which sled bounds well below this).
const MAX_RECORD: usize = 256 << 20;

/// Variants are only appended: bincode writes the variant index.
#[derive(Serialize, Deserialize)]
enum Record {
    Chunk {
        tree: TreeRef,
        items: Vec<(Vec<u8>, Vec<u8>)>,
    },
    /// The last record of files written before `Sealed` existed: a count
    /// only, which finds a cut file but not a damaged one.
    End {
        items: u64,
    },
    /// The last record: the item count and the CRC-32 of every record
    /// before it (length prefixes included).
    Sealed {
        items: u64,
        crc: u32,
    },
}

/// What an export or install moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotStats {
    pub items: u64,
    pub bytes: u64,
}

/// Holds a shard's trees still: checkpoints of the shard are skipped
/// (writes stay staged and readable) until this drops.
pub struct Frozen {
    shard: u32,
    slot: Arc<crate::state::PendingSlot>,
    /// Changed boards the shard holds: the snapshot takes their rows from
    /// these images, not from the trees (`board_image.rs`).
    held: Vec<BoardImage>,
}

impl Frozen {
    pub fn shard(&self) -> u32 {
        self.shard
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        self.slot.frozen.store(false, Ordering::Release);
    }
}

fn snap_err(detail: impl ToString) -> StateError {
    StateError::Corrupt { what: "snapshot", detail: detail.to_string() }
}

fn io_err(e: std::io::Error) -> StateError {
    StateError::Io(e)
}

/// Writes one record, adding its bytes to `crc`.
fn write_record(out: &mut impl Write, r: &Record, crc: &mut crc32fast::Hasher) -> Result<u64> {
    let bytes = codec::to_bytes(r).map_err(snap_err)?;
    let len = (bytes.len() as u32).to_be_bytes();
    crc.update(&len);
    crc.update(&bytes);
    out.write_all(&len).map_err(io_err)?;
    out.write_all(&bytes).map_err(io_err)?;
    Ok(4 + bytes.len() as u64)
}

/// Reads one record; `crc` holds the CRC of the records before it.
fn read_record(
    input: &mut impl Read,
    buf: &mut Vec<u8>,
    crc: &mut crc32fast::Hasher,
) -> Result<Record> {
    let mut len = [0u8; 4];
    input.read_exact(&mut len).map_err(|e| snap_err(format!("truncated ({e})")))?;
    let n = u32::from_be_bytes(len) as usize;
    if n > MAX_RECORD {
        return Err(snap_err(format!("a record of {n} bytes")));
    }
    buf.resize(n, 0);
    input.read_exact(buf).map_err(|e| snap_err(format!("truncated ({e})")))?;
    let record = codec::from_bytes(buf).map_err(snap_err)?;
    // The seal covers the records before it, not itself.
    if !matches!(record, Record::Sealed { .. }) {
        crc.update(&len);
        crc.update(buf);
    }
    Ok(record)
}

/// Reads the records of a snapshot of `shards` (positioned after its
/// header) to the end, checking that each chunk belongs to one of them,
/// that the count and checksum match, and that nothing follows; hands each
/// chunk to `take`.
fn walk(
    shards: &[u32],
    registry: bool,
    input: &mut impl Read,
    mut take: impl FnMut(TreeRef, Vec<(Vec<u8>, Vec<u8>)>),
) -> Result<SnapshotStats> {
    let mut stats = SnapshotStats::default();
    let mut buf = Vec::new();
    let mut crc = crc32fast::Hasher::new();
    loop {
        let (items, sealed) = match read_record(input, &mut buf, &mut crc)? {
            Record::Chunk { tree, items } => {
                check_chunk(shards, registry, tree, &items)?;
                for (k, v) in &items {
                    stats.bytes += (k.len() + v.len()) as u64;
                }
                stats.items += items.len() as u64;
                take(tree, items);
                continue;
            }
            Record::End { items } => (items, None),
            Record::Sealed { items, crc } => (items, Some(crc)),
        };
        if items != stats.items {
            return Err(snap_err(format!(
                "the snapshot announces {items} items and holds {}",
                stats.items
            )));
        }
        if let Some(want) = sealed {
            let got = std::mem::take(&mut crc).finalize();
            if got != want {
                return Err(snap_err(format!("checksum {got:08x}, sealed as {want:08x}")));
            }
        }
        let mut extra = [0u8; 1];
        return match input.read(&mut extra) {
            Ok(0) => Ok(stats),
            Ok(_) => Err(snap_err("bytes after the last record")),
            Err(e) => Err(io_err(e)),
        };
    }
}

/// Refuses a chunk that is not one of `shards`' to install.
fn check_chunk(
    shards: &[u32],
    registry: bool,
    tree: TreeRef,
    items: &[(Vec<u8>, Vec<u8>)],
) -> Result<()> {
    let belongs = match tree {
        TreeRef::Shard(s) => shards.contains(&s),
        TreeRef::Biz(_) | TreeRef::Rank(_) => true,
        TreeRef::Registry => registry,
    };
    if !belongs {
        return Err(snap_err(format!("a chunk of {tree:?} in shards {shards:?}")));
    }
    // The source may be another shard id only for the meta tree, which is
    // refused above; data keys are checked here.
    let mine = |k: &[u8]| shards.iter().any(|&s| k.starts_with(&keys::shard_prefix(s)));
    let foreign =
        matches!(tree, TreeRef::Biz(_) | TreeRef::Rank(_)) && items.iter().any(|(k, _)| !mine(k));
    if foreign {
        return Err(snap_err(format!("a key of another shard in {tree:?}")));
    }
    Ok(())
}

/// Reads a whole snapshot file of `shards` (header included) and says
/// whether installing it would succeed: every record decodes and belongs
/// to one of the shards, the count and checksum match, nothing is cut off
/// or added. Changes nothing.
pub fn verify(shards: &[u32], registry: bool, input: &mut impl Read) -> Result<SnapshotStats> {
    read_header(input)?;
    walk(shards, registry, input, |_, _| {})
}

/// Decodes a header read by [`read_header`], with what its strings may
/// claim bounded by the header's own limit. Why: bincode 2 allocates a
/// string's announced length before it reads the string, and a header
/// holds strings (the membership's node addresses), so a corrupted
/// length, in a file or in a snapshot sent by a peer, would abort the
/// node instead of failing the install (`codec::from_bytes_within`).
pub fn decode_header<T: serde::de::DeserializeOwned>(
    header: &[u8],
) -> std::result::Result<T, codec::CodecError> {
    codec::from_bytes_within::<MAX_RECORD, _>(header)
}

/// Reads the header of a snapshot file (what `export` was given).
pub fn read_header(input: &mut impl Read) -> Result<Vec<u8>> {
    let mut magic = [0u8; 12];
    input.read_exact(&mut magic).map_err(|e| snap_err(format!("no header ({e})")))?;
    if &magic != MAGIC {
        return Err(snap_err("not a Plaudit snapshot (bad magic)"));
    }
    let mut len = [0u8; 4];
    input.read_exact(&mut len).map_err(|e| snap_err(format!("no header ({e})")))?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_RECORD {
        return Err(snap_err(format!("a header of {len} bytes")));
    }
    let mut header = vec![0u8; len];
    input.read_exact(&mut header).map_err(|e| snap_err(format!("truncated header ({e})")))?;
    Ok(header)
}

/// Gathers `(key, value)`s of one tree into chunks and writes them.
struct ChunkWriter<'a, W: Write> {
    out: &'a mut W,
    tree: TreeRef,
    items: Vec<(Vec<u8>, Vec<u8>)>,
    size: usize,
    stats: SnapshotStats,
    crc: crc32fast::Hasher,
}

impl<W: Write> ChunkWriter<'_, W> {
    fn push(&mut self, tree: TreeRef, k: &[u8], v: &[u8]) -> Result<()> {
        if tree != self.tree || self.size >= CHUNK_BYTES {
            self.flush()?;
            self.tree = tree;
        }
        self.size += k.len() + v.len();
        self.items.push((k.to_vec(), v.to_vec()));
        self.stats.items += 1;
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if self.items.is_empty() {
            return Ok(());
        }
        let items = std::mem::take(&mut self.items);
        self.size = 0;
        let chunk = Record::Chunk { tree: self.tree, items };
        self.stats.bytes += write_record(self.out, &chunk, &mut self.crc)?;
        Ok(())
    }
}

impl StateStore {
    /// Checkpoints `shard` and stops further checkpoints of it until the
    /// guard drops, so that its trees hold exactly the applied state, at
    /// the applied id stored with it, *except for boards the shard holds*:
    /// a shard with boards is frozen through its actor
    /// (`ShardHandle::freeze`, which calls `freeze_with`). Call between
    /// applies.
    pub fn freeze(&self, shard: u32) -> Result<Frozen> {
        self.freeze_with(shard, Vec::new())
    }

    /// `freeze`, with the images of the changed boards the shard holds
    /// (taken at the same point, between applies).
    pub fn freeze_with(&self, shard: u32, held: Vec<BoardImage>) -> Result<Frozen> {
        let slot = self.slot(shard);
        // Holding the checkpoint lock while setting the flag: a checkpoint
        // that waits for the lock finds the shard frozen and does nothing.
        let _one_at_a_time = slot.checkpoint.lock().unwrap_or_else(|e| e.into_inner());
        if slot.frozen.load(Ordering::Acquire) {
            return Err(snap_err(format!("shard {shard} is frozen by another export")));
        }
        self.checkpoint_locked(shard, &slot)?;
        slot.frozen.store(true, Ordering::Release);
        Ok(Frozen { shard, slot: slot.clone(), held })
    }

    /// Whether a snapshot export holds `shard`'s trees still.
    pub fn is_frozen(&self, shard: u32) -> bool {
        self.slot(shard).frozen.load(Ordering::Acquire)
    }

    /// Streams the frozen shard (and the registry, with `registry`) to
    /// `out` after `header`. Reads the trees only: frozen, they are the
    /// state at the point of `freeze`, whatever is applied meanwhile.
    pub fn export(
        &self,
        frozen: &Frozen,
        registry: bool,
        header: &[u8],
        out: &mut impl Write,
    ) -> Result<SnapshotStats> {
        self.write_file(header, out, |w| self.export_slices(frozen, registry, w))
    }

    /// `export` of several shards frozen at one point (the shards of one
    /// group, between two of its applies) into one file, one shard after
    /// the other: what `install_many` of the same shards reads. Each shard
    /// thaws as soon as its part is written: a frozen shard's checkpoints
    /// wait, and one over its staging limit holds its applies (and so its
    /// whole group's) until it thaws.
    pub fn export_many(
        &self,
        frozen: Vec<Frozen>,
        registry: bool,
        header: &[u8],
        out: &mut impl Write,
    ) -> Result<SnapshotStats> {
        let last = frozen.len().saturating_sub(1);
        self.write_file(header, out, |w| {
            for (i, f) in frozen.into_iter().enumerate() {
                // The registry once, after the last shard's slices.
                self.export_slices(&f, registry && i == last, w)?;
            }
            Ok(())
        })
    }

    /// A snapshot file: `header`, the chunks `body` writes, the seal.
    fn write_file<W: Write>(
        &self,
        header: &[u8],
        out: &mut W,
        body: impl FnOnce(&mut ChunkWriter<'_, W>) -> Result<()>,
    ) -> Result<SnapshotStats> {
        out.write_all(MAGIC).map_err(io_err)?;
        out.write_all(&(header.len() as u32).to_be_bytes()).map_err(io_err)?;
        out.write_all(header).map_err(io_err)?;
        let mut w = ChunkWriter {
            out,
            tree: TreeRef::Registry,
            items: Vec::new(),
            size: 0,
            stats: SnapshotStats::default(),
            crc: crc32fast::Hasher::new(),
        };
        body(&mut w)?;
        w.flush()?;
        let mut stats = w.stats;
        let seal = Record::Sealed { items: stats.items, crc: w.crc.clone().finalize() };
        stats.bytes += write_record(w.out, &seal, &mut w.crc)?;
        w.out.flush().map_err(io_err)?;
        Ok(stats)
    }

    /// Writes the chunks of one frozen shard (and the registry, with
    /// `registry`).
    fn export_slices<W: Write>(
        &self,
        frozen: &Frozen,
        registry: bool,
        w: &mut ChunkWriter<'_, W>,
    ) -> Result<()> {
        let shard = frozen.shard;
        let mut slices = self.slices(shard, registry);
        // A held board's ranking always has a tree (a new board is written
        // back with its first batch); listed anyway, so its rows are never
        // left out.
        for b in &frozen.held {
            let tree = TreeRef::Rank(b.rank);
            if !slices.iter().any(|(t, _)| *t == tree) {
                let at = slices.iter().position(|(t, _)| *t == TreeRef::Registry);
                let mine = prefix_range(&keys::shard_prefix(shard));
                slices.insert(at.unwrap_or(slices.len()), (tree, mine));
            }
        }
        for (tree, range) in slices {
            let stored = self.find_tree(tree).map(|t| t.scan(range, false)).into_iter().flatten();
            let held: Vec<&BoardImage> = match tree {
                TreeRef::Rank(r) => frozen.held.iter().filter(|b| b.rank == r).collect(),
                _ => Vec::new(),
            };
            for (k, v) in Merged::new(shard, stored, &held) {
                w.push(tree, &k, &v)?;
            }
        }
        Ok(())
    }

    /// A hash of `shard`'s applied state (what a snapshot of it would
    /// hold) and the applied id it is at. Two replicas at the same applied
    /// id must have the same hash: tests compare them. Like `freeze`, it
    /// sees held boards as their (possibly stale) tree rows: with a shard
    /// running, use `digest_frozen` on the shard's own freeze.
    pub fn digest(&self, shard: u32, registry: bool) -> Result<(Option<Vec<u8>>, u64)> {
        let frozen = self.freeze(shard)?;
        self.digest_frozen(&frozen, registry)
    }

    /// `digest` of a shard frozen by the caller (with its held boards).
    pub fn digest_frozen(&self, frozen: &Frozen, registry: bool) -> Result<(Option<Vec<u8>>, u64)> {
        let shard = frozen.shard;
        struct Hashing(std::collections::hash_map::DefaultHasher);
        impl Write for Hashing {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                std::hash::Hasher::write(&mut self.0, buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        // From the trees, as frozen: what is applied meanwhile is only staged.
        let applied = self
            .find_tree(TreeRef::Shard(shard))
            .and_then(|t| t.get(crate::shard_meta::meta::APPLIED));
        let mut h = Hashing(Default::default());
        self.export(frozen, registry, b"", &mut h)?;
        Ok((applied, std::hash::Hasher::finish(&h.0)))
    }

    /// The trees and key ranges that hold `shard`'s state: its meta tree,
    /// its slice of every business and ranking tree, and with `registry`
    /// the registry.
    fn slices(&self, shard: u32, registry: bool) -> Vec<(TreeRef, KeyRange)> {
        let all = || (Bound::Unbounded, Bound::Unbounded);
        let mine = || prefix_range(&keys::shard_prefix(shard));
        let mut out = vec![(TreeRef::Shard(shard), all())];
        let mut bizs = self.biz_ids();
        bizs.sort_unstable();
        out.extend(bizs.into_iter().map(|b| (TreeRef::Biz(b), mine())));
        let mut ranks = self.rank_ids();
        ranks.sort_unstable();
        out.extend(ranks.into_iter().map(|r| (TreeRef::Rank(r), mine())));
        if registry {
            out.push((TreeRef::Registry, all()));
        }
        out
    }
}

/// Test helpers: a whole snapshot as bytes, and installing one.
#[cfg(test)]
impl StateStore {
    pub(crate) fn snapshot_bytes(&self, shard: u32) -> Vec<u8> {
        let frozen = self.freeze(shard).unwrap();
        let mut file = Vec::new();
        self.export(&frozen, false, b"", &mut file).unwrap();
        file
    }

    pub(crate) fn install_bytes(&self, shard: u32, mut file: &[u8]) {
        read_header(&mut file).unwrap();
        self.install(shard, false, &mut file).unwrap();
    }
}

/// A snapshot of a shard with no state at all.
#[cfg(test)]
pub(crate) fn empty_snapshot() -> Vec<u8> {
    let mut file = MAGIC.to_vec();
    file.extend_from_slice(&0u32.to_be_bytes());
    let seal = Record::Sealed { items: 0, crc: crc32fast::Hasher::new().finalize() };
    write_record(&mut file, &seal, &mut crc32fast::Hasher::new()).unwrap();
    file
}

mod install;

#[cfg(test)]
mod tests;
