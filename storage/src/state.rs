//! The applied state of every shard, in sled: one tree per business and one
//! per ranking (so a tenant's or a ranking's data is isolated and can be
//! dropped whole; `boards.rs` has the ranking layout), one meta tree per
//! shard (applied log id, membership, inbox and outbox), and the registry.
//!
//! Writes of one applied Raft batch are collected in a `WriteSet`, which
//! also records the applied log id, and *staged* (`stage`): they go into the
//! shard's in-memory overlay (`pending.rs`), where every read sees them at
//! once. A *checkpoint* (`checkpoint`, when the overlay is old or large, and
//! before a snapshot or shutdown) writes the overlay to sled atomically: the
//! whole set is first written as one redo record, then applied key by key,
//! then the record is removed. sled recovers a prefix of its writes after a
//! crash, so either the record survives (and `open` re-applies it: every op
//! is an absolute put or remove, so applying twice is harmless) or none of
//! the set's keys changed. The stored state therefore always corresponds to
//! exactly one applied index, the one in the same checkpoint. None of this
//! needs an fsync of its own: the Raft log is durable and is not purged past
//! a checkpoint, and after a crash openraft replays everything after the
//! stored applied id, staging again what the lost overlay held.
//!
//! Why not sled's `Batch` or transactions: in sled 0.34 the first one used
//! switches the whole process to a global RwLock, whose read side `flush()`
//! holds for its entire IO wait; every batch then waits for the flush and
//! every other sled call waits behind the batch. Measured here: it capped a
//! node at a few thousand likes per second with both cores idle.

use crate::keys::{self, read_u64, VALUE_V1};
use crate::pending::{prefix_range, Entries, KeyRange, Layers, OpRef, Overlay};
use plaudit_proto::codec;
use plaudit_proto::likes::{ListItem, PageCursor};
use plaudit_proto::{BizId, EntityId, LikeState, Millis, UserId};
use serde::{Deserialize, Serialize};
use sled::Tree;
use std::collections::HashMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("sled: {0}")]
    Sled(#[from] sled::Error),
    #[error("corrupt value under {what}: {detail}")]
    Corrupt { what: &'static str, detail: String },
}

pub type Result<T> = std::result::Result<T, StateError>;

/// An entity's stored counters and owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CountsRec {
    pub likes: u64,
    pub dislikes: u64,
    pub owner: Option<UserId>,
}

/// Pending outbox entries towards one target shard: `(target, [(seq, encoded delta)])`.
pub type OutboxRun = (u32, Vec<(u64, Vec<u8>)>);

/// One key of an exported shard: `(tree name, key, value)`.
pub type ExportItem = (String, Vec<u8>, Vec<u8>);

/// Meta keys of a shard tree.
mod meta {
    pub const APPLIED: &[u8] = b"a:applied";
    pub const MEMBERSHIP: &[u8] = b"a:membership";
    pub const SNAPSHOT: &[u8] = b"a:snapshot";
    /// The time of the last applied entry: apply never stamps below it.
    pub const FLOOR: &[u8] = b"a:floor";
    /// `i:` + source shard -> highest applied delta seq from that source.
    pub const INBOX: u8 = b'i';
    /// `o:` + target shard + seq -> encoded delta.
    pub const OUTBOX: u8 = b'o';
    /// `n:` + target shard -> next outbox seq for that target.
    pub const NEXT: u8 = b'n';
}

fn tagged(tag: u8, shard: u32) -> Vec<u8> {
    let mut k = vec![tag, b':'];
    k.extend_from_slice(&shard.to_be_bytes());
    k
}

/// When a shard's staged writes are checkpointed into sled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointPolicy {
    /// Once this many distinct keys are staged.
    pub max_keys: usize,
    /// Once the oldest staged write is this old.
    pub max_age: Duration,
}

impl CheckpointPolicy {
    pub const DEFAULT_MAX_KEYS: usize = 32_768;
    pub const DEFAULT_MAX_AGE: Duration = Duration::from_millis(1000);
    /// A shard whose checkpoints keep failing stops applying once this many
    /// times `max_keys` are staged, rather than growing without bound.
    pub const HARD_LIMIT_FACTOR: usize = 8;
}

impl Default for CheckpointPolicy {
    fn default() -> Self {
        CheckpointPolicy { max_keys: Self::DEFAULT_MAX_KEYS, max_age: Self::DEFAULT_MAX_AGE }
    }
}

/// One shard's staged writes, and the lock that serialises its checkpoints.
#[derive(Default)]
struct PendingSlot {
    layers: Mutex<Layers>,
    checkpoint: Mutex<()>,
}

impl PendingSlot {
    fn layers(&self) -> MutexGuard<'_, Layers> {
        // Only map operations run under the lock; a poisoned lock still
        // holds consistent maps.
        self.layers.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Handle to all applied state of a node. Cheap to clone.
#[derive(Clone)]
pub struct StateStore {
    db: sled::Db,
    bizs: Arc<RwLock<HashMap<BizId, Tree>>>,
    /// One tree per ranking (`rank/{id}`): its sub-boards on every shard.
    ranks: Arc<RwLock<HashMap<u32, Tree>>>,
    shards: Arc<RwLock<HashMap<u32, Tree>>>,
    registry: Tree,
    /// Redo records of checkpoints in progress, one key per shard.
    redo: Tree,
    counts_cache: Arc<CountsCache>,
    /// Staged writes per shard (the write-behind overlay).
    pending: Arc<RwLock<HashMap<u32, Arc<PendingSlot>>>>,
    policy: CheckpointPolicy,
}

/// A stored or staged value.
pub type Value = Vec<u8>;

/// Counts are the hottest read (every feed item asks for them) and a few
/// entities take most of it, so they are cached in memory. Commits write
/// through; a read that misses fills the cache only if no commit of that
/// shard ran meanwhile (a seqlock-style epoch per shard: odd while a commit
/// is applying), so a stale value is never installed.
struct CountsCache {
    epochs: Vec<AtomicU64>,
    parts: Vec<Mutex<CountsPart>>,
}

/// `(biz, shard, entity) -> counts`.
type CountsPart = HashMap<(BizId, u32, EntityId), CountsRec>;

/// Entries per cache part before it is dropped and refilled (64 parts).
const COUNTS_CACHE_PART: usize = 4096;
const COUNTS_CACHE_PARTS: usize = 64;
const EPOCHS: usize = 1025;

impl CountsCache {
    fn new() -> CountsCache {
        CountsCache {
            epochs: (0..EPOCHS).map(|_| AtomicU64::new(0)).collect(),
            parts: (0..COUNTS_CACHE_PARTS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }

    fn epoch(&self, shard: u32) -> &AtomicU64 {
        &self.epochs[shard as usize % EPOCHS]
    }

    fn part(&self, shard: u32, entity: EntityId) -> std::sync::MutexGuard<'_, CountsPart> {
        let i = (entity as usize ^ shard as usize) % COUNTS_CACHE_PARTS;
        // Only plain map operations run under the lock; a poisoned lock
        // still holds a consistent map.
        self.parts[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    fn put(&self, part: &mut CountsPart, k: (BizId, u32, EntityId), c: CountsRec) {
        if part.len() >= COUNTS_CACHE_PART && !part.contains_key(&k) {
            part.clear();
        }
        part.insert(k, c);
    }
}

impl StateStore {
    /// Opens with the default checkpoint policy.
    pub fn open(db: &sled::Db) -> Result<StateStore> {
        StateStore::open_with(db, CheckpointPolicy::default())
    }

    pub fn open_with(db: &sled::Db, policy: CheckpointPolicy) -> Result<StateStore> {
        let store = StateStore {
            db: db.clone(),
            bizs: Arc::default(),
            ranks: Arc::default(),
            shards: Arc::default(),
            registry: db.open_tree("registry")?,
            redo: db.open_tree("redo")?,
            counts_cache: Arc::new(CountsCache::new()),
            pending: Arc::default(),
            policy,
        };
        store.recover()?;
        Ok(store)
    }

    fn slot(&self, shard: u32) -> Arc<PendingSlot> {
        if let Some(s) = self.pending.read().unwrap_or_else(|e| e.into_inner()).get(&shard) {
            return s.clone();
        }
        let mut all = self.pending.write().unwrap_or_else(|e| e.into_inner());
        all.entry(shard).or_default().clone()
    }

    /// The value of `key` in `tree` as applied on `shard`: staged, else stored.
    pub(crate) fn get(&self, shard: u32, tree: TreeRef, key: &[u8]) -> Result<Option<Value>> {
        // Staged layers first: a checkpoint drops them only after sled holds
        // them, so a miss here means sled is current for this key.
        if let Some(v) = self.slot(shard).layers().get(tree, key) {
            return Ok(v);
        }
        Ok(self.tree(tree)?.get(key)?.map(|v| v.to_vec()))
    }

    /// Walks the keys of `tree` in `range` as applied on `shard` (staged
    /// writes over stored ones, deletions hidden), ascending or, with `rev`,
    /// descending, until `f` returns false.
    pub(crate) fn scan(
        &self,
        shard: u32,
        tree: TreeRef,
        range: KeyRange,
        rev: bool,
        f: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        let staged = self.slot(shard).layers().range(tree, &range);
        self.scan_over(tree, range, staged, rev, f)
    }

    /// `scan` with the staged entries already collected.
    fn scan_over(
        &self,
        tree: TreeRef,
        range: KeyRange,
        staged: Entries,
        rev: bool,
        f: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        let stored = self.tree(tree)?.range(range);
        if rev {
            merge(stored.rev(), staged.into_iter().rev(), true, f)
        } else {
            merge(stored, staged.into_iter(), false, f)
        }
    }

    /// Stages an applied batch's writes: visible to every read at once,
    /// written to sled by a later checkpoint (see the module doc).
    pub fn stage(&self, ws: WriteSet) {
        if ws.ops.is_empty() {
            return;
        }
        // Reads look for a key in its own shard's overlay.
        debug_assert!(
            ws.ops.iter().all(|op| op.shard().is_none_or(|s| s == ws.owner)),
            "a write set of shard {} holds another shard's keys",
            ws.owner
        );
        let slot = self.slot(ws.owner);
        let epoch = self.counts_cache.epoch(ws.owner);
        epoch.fetch_add(1, Ordering::AcqRel);
        {
            let mut layers = slot.layers();
            if layers.active.is_empty() {
                layers.since = Some(Instant::now());
            }
            for op in ws.ops {
                layers.active.put(op.tree, op.key, op.value);
            }
        }
        for (biz, shard, entity, c) in &ws.counts {
            let mut part = self.counts_cache.part(*shard, *entity);
            self.counts_cache.put(&mut part, (*biz, *shard, *entity), *c);
        }
        epoch.fetch_add(1, Ordering::AcqRel);
    }

    pub fn checkpoint_policy(&self) -> CheckpointPolicy {
        self.policy
    }

    /// Whether `shard`'s staged writes should be checkpointed now.
    pub fn checkpoint_due(&self, shard: u32) -> bool {
        let slot = self.slot(shard);
        let layers = slot.layers();
        layers.active.keys() >= self.policy.max_keys
            || layers.since.is_some_and(|t| t.elapsed() >= self.policy.max_age)
    }

    /// Whether `shard` has staged more than a failing checkpoint may leave behind.
    pub fn over_hard_limit(&self, shard: u32) -> bool {
        let limit = self.policy.max_keys.saturating_mul(CheckpointPolicy::HARD_LIMIT_FACTOR);
        self.slot(shard).layers().active.keys() >= limit
    }

    /// Writes `shard`'s staged writes to sled atomically (see the module
    /// doc). A checkpoint that failed part-way leaves its layer readable and
    /// is finished first by the next call.
    pub fn checkpoint(&self, shard: u32) -> Result<()> {
        let slot = self.slot(shard);
        let _one_at_a_time = slot.checkpoint.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let (layer, last) = {
                let mut layers = slot.layers();
                match &layers.flushing {
                    Some(f) => (f.clone(), false),
                    None if layers.active.is_empty() => return Ok(()),
                    None => {
                        let layer = Arc::new(std::mem::take(&mut layers.active));
                        layers.since = None;
                        layers.flushing = Some(layer.clone());
                        (layer, true)
                    }
                }
            };
            self.write_through(shard, &layer)?;
            slot.layers().flushing = None;
            if last {
                return Ok(());
            }
        }
    }

    /// Redo record, every op, then the record's removal.
    fn write_through(&self, shard: u32, layer: &Overlay) -> Result<()> {
        let ops: Vec<OpRef<'_>> = layer.ops().collect();
        let key = shard.to_be_bytes();
        if ops.len() > 1 {
            let mut record = vec![VALUE_V1];
            codec::encode_into(&ops, &mut record)
                .map_err(|e| StateError::Corrupt { what: "redo", detail: e.to_string() })?;
            self.redo.insert(key, record)?;
        }
        for op in &ops {
            let tree = self.tree(op.tree)?;
            match op.value {
                Some(v) => tree.insert(op.key, v)?,
                None => tree.remove(op.key)?,
            };
        }
        if ops.len() > 1 {
            self.redo.remove(key)?;
        }
        Ok(())
    }

    /// Finishes every commit a crash interrupted.
    fn recover(&self) -> Result<()> {
        for kv in self.redo.iter() {
            let (k, v) = kv?;
            let ops: Vec<Op> = match v.split_first() {
                Some((&VALUE_V1, rest)) => codec::from_bytes(rest)
                    .map_err(|e| StateError::Corrupt { what: "redo", detail: e.to_string() })?,
                _ => return Err(corrupt("redo", &v)),
            };
            tracing::info!(ops = ops.len(), "finishing a commit interrupted by a crash");
            for op in &ops {
                self.apply_op(op)?;
            }
            self.redo.remove(k)?;
        }
        Ok(())
    }

    fn tree(&self, t: TreeRef) -> Result<Tree> {
        match t {
            TreeRef::Biz(b) => self.biz_tree(b),
            TreeRef::Shard(s) => self.shard_tree(s),
            TreeRef::Registry => Ok(self.registry.clone()),
            TreeRef::Rank(r) => self.rank_tree(r),
        }
    }

    fn apply_op(&self, op: &Op) -> Result<()> {
        let tree = self.tree(op.tree)?;
        match &op.value {
            Some(v) => tree.insert(&op.key, v.as_slice())?,
            None => tree.remove(&op.key)?,
        };
        Ok(())
    }

    /// Every registry entry (businesses and rankings), staged or stored.
    /// The registry is written by the metadata group only, but which shard
    /// id that is stays the cluster's business: every shard's staged
    /// registry writes are merged (other shards have none).
    pub fn registry_entries(&self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let all = (Bound::Unbounded, Bound::Unbounded);
        let mut staged = Entries::new();
        let slots: Vec<_> =
            self.pending.read().unwrap_or_else(|e| e.into_inner()).values().cloned().collect();
        for slot in slots {
            for (k, v) in slot.layers().range(TreeRef::Registry, &all) {
                staged.entry(k).or_insert(v);
            }
        }
        let mut out = Vec::new();
        self.scan_over(TreeRef::Registry, all, staged, false, |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            Ok(true)
        })?;
        Ok(out)
    }

    /// The tree of one business, opened on first use.
    pub fn biz_tree(&self, biz: BizId) -> Result<Tree> {
        // The lock guards a map of handles only; poisoning would need a panic
        // while inserting, which sled's open_tree does not do under the lock.
        if let Some(t) = self.bizs.read().unwrap_or_else(|e| e.into_inner()).get(&biz) {
            return Ok(t.clone());
        }
        let tree = self.db.open_tree(format!("biz/{biz}"))?;
        self.bizs.write().unwrap_or_else(|e| e.into_inner()).insert(biz, tree.clone());
        Ok(tree)
    }

    /// Every business tree that exists on disk, by id.
    pub fn biz_ids_on_disk(&self) -> Vec<BizId> {
        self.db
            .tree_names()
            .iter()
            .filter_map(|n| std::str::from_utf8(n).ok()?.strip_prefix("biz/")?.parse().ok())
            .collect()
    }

    /// The tree of one ranking, opened on first use.
    pub fn rank_tree(&self, rank: u32) -> Result<Tree> {
        if let Some(t) = self.ranks.read().unwrap_or_else(|e| e.into_inner()).get(&rank) {
            return Ok(t.clone());
        }
        let tree = self.db.open_tree(format!("rank/{rank}"))?;
        self.ranks.write().unwrap_or_else(|e| e.into_inner()).insert(rank, tree.clone());
        Ok(tree)
    }

    /// Every ranking tree that exists on disk, by id.
    pub fn rank_ids_on_disk(&self) -> Vec<u32> {
        self.db
            .tree_names()
            .iter()
            .filter_map(|n| std::str::from_utf8(n).ok()?.strip_prefix("rank/")?.parse().ok())
            .collect()
    }

    pub fn shard_tree(&self, shard: u32) -> Result<Tree> {
        if let Some(t) = self.shards.read().unwrap_or_else(|e| e.into_inner()).get(&shard) {
            return Ok(t.clone());
        }
        let tree = self.db.open_tree(format!("shard/{shard}/meta"))?;
        self.shards.write().unwrap_or_else(|e| e.into_inner()).insert(shard, tree.clone());
        Ok(tree)
    }

    pub fn get_state(
        &self,
        biz: BizId,
        shard: u32,
        mid: UserId,
        entity: EntityId,
    ) -> Result<Option<(LikeState, Millis)>> {
        match self.get(shard, TreeRef::Biz(biz), &keys::state(shard, mid, entity))? {
            None => Ok(None),
            Some(v) => decode_state(&v).map(Some),
        }
    }

    pub fn get_counts(&self, biz: BizId, shard: u32, entity: EntityId) -> Result<CountsRec> {
        let cache = &self.counts_cache;
        if let Some(c) = cache.part(shard, entity).get(&(biz, shard, entity)) {
            return Ok(*c);
        }
        let before = cache.epoch(shard).load(Ordering::Acquire);
        let c = match self.get(shard, TreeRef::Biz(biz), &keys::counts(shard, entity))? {
            None => CountsRec::default(),
            Some(v) => decode_counts(&v)?,
        };
        let mut part = cache.part(shard, entity);
        if before.is_multiple_of(2) && cache.epoch(shard).load(Ordering::Acquire) == before {
            cache.put(&mut part, (biz, shard, entity), c);
        }
        Ok(c)
    }

    pub fn get_received(&self, biz: BizId, shard: u32, owner: UserId) -> Result<u64> {
        match self.get(shard, TreeRef::Biz(biz), &keys::received(shard, owner))? {
            None => Ok(0),
            Some(v) => decode_u64_value(&v, "received"),
        }
    }

    /// A user's liked entities, newest first, strictly after `after`.
    pub fn user_list(
        &self,
        biz: BizId,
        shard: u32,
        mid: UserId,
        after: Option<PageCursor>,
        limit: usize,
    ) -> Result<Vec<ListItem>> {
        self.list_page(biz, keys::user_list_prefix(shard, mid), after, limit)
    }

    /// An entity's likers, newest first, strictly after `after`.
    pub fn likers(
        &self,
        biz: BizId,
        shard: u32,
        entity: EntityId,
        after: Option<PageCursor>,
        limit: usize,
    ) -> Result<Vec<ListItem>> {
        self.list_page(biz, keys::likers_prefix(shard, entity), after, limit)
    }

    /// Both list layouts are `prefix, mtime, id`: walk backwards from the
    /// cursor (exclusive) or from the end of the prefix.
    fn list_page(
        &self,
        biz: BizId,
        prefix: Vec<u8>,
        after: Option<PageCursor>,
        limit: usize,
    ) -> Result<Vec<ListItem>> {
        let shard = read_u32(&prefix).ok_or_else(|| corrupt("list prefix", &prefix))?;
        let end = match after {
            Some(c) => {
                let mut k = prefix.clone();
                k.extend_from_slice(&c.mtime.to_be_bytes());
                k.extend_from_slice(&c.id.to_be_bytes());
                Bound::Excluded(k)
            }
            None => prefix_range(&prefix).1,
        };
        let range = (Bound::Included(prefix.clone()), end);
        let mut out = Vec::with_capacity(limit);
        if limit == 0 {
            return Ok(out);
        }
        let at = prefix.len();
        self.scan(shard, TreeRef::Biz(biz), range, true, |k, _| {
            match (read_u64(k, at), read_u64(k, at + 8)) {
                (Some(mtime), Some(id)) => out.push(ListItem { id, mtime }),
                _ => return Err(corrupt("list key", k)),
            }
            Ok(out.len() < limit)
        })?;
        Ok(out)
    }

    /// The applied log id of a shard, as the encoding the cluster stored.
    pub fn applied(&self, shard: u32) -> Result<Option<Value>> {
        self.get(shard, TreeRef::Shard(shard), meta::APPLIED)
    }

    /// The time floor of a shard: the time of its last applied entry (0
    /// before any).
    pub fn time_floor(&self, shard: u32) -> Result<u64> {
        match self.get(shard, TreeRef::Shard(shard), meta::FLOOR)? {
            None => Ok(0),
            Some(v) => decode_u64_value(&v, "time floor"),
        }
    }

    pub fn membership(&self, shard: u32) -> Result<Option<Value>> {
        self.get(shard, TreeRef::Shard(shard), meta::MEMBERSHIP)
    }

    pub fn snapshot_meta(&self, shard: u32) -> Result<Option<sled::IVec>> {
        Ok(self.shard_tree(shard)?.get(meta::SNAPSHOT)?)
    }

    pub fn put_snapshot_meta(&self, shard: u32, value: &[u8]) -> Result<()> {
        self.shard_tree(shard)?.insert(meta::SNAPSHOT, value)?;
        Ok(())
    }

    /// Highest delta seq applied from `source` into `shard`.
    pub fn inbox_seq(&self, shard: u32, source: u32) -> Result<u64> {
        match self.get(shard, TreeRef::Shard(shard), &tagged(meta::INBOX, source))? {
            None => Ok(0),
            Some(v) => decode_u64_value(&v, "inbox seq"),
        }
    }

    /// Next outbox seq of `shard` towards `target` (seqs start at 1).
    pub fn outbox_next(&self, shard: u32, target: u32) -> Result<u64> {
        match self.get(shard, TreeRef::Shard(shard), &tagged(meta::NEXT, target))? {
            None => Ok(1),
            Some(v) => decode_u64_value(&v, "outbox next"),
        }
    }

    /// Pending outbox entries of `shard`, grouped by target, oldest first, at
    /// most `limit` per target.
    pub fn outbox_pending(&self, shard: u32, limit: usize) -> Result<Vec<OutboxRun>> {
        let mut out: Vec<OutboxRun> = Vec::new();
        // The outbox is drained continuously, so it is short; a plain scan is
        // cheaper than seeking per target.
        let range = prefix_range(&[meta::OUTBOX, b':']);
        self.scan(shard, TreeRef::Shard(shard), range, false, |k, v| {
            push_outbox(&mut out, k, v.to_vec(), limit)?;
            Ok(true)
        })?;
        Ok(out)
    }

    /// Number of outbox entries waiting in `shard` (for metrics).
    pub fn outbox_len(&self, shard: u32) -> Result<usize> {
        let mut n = 0;
        let range = prefix_range(&[meta::OUTBOX, b':']);
        self.scan(shard, TreeRef::Shard(shard), range, false, |_, _| {
            n += 1;
            Ok(true)
        })?;
        Ok(n)
    }

    /// Every key of `shard` in every business tree and its meta tree, for a
    /// snapshot: `(tree name, key, value)`. Checkpoints first, so the export
    /// holds everything applied.
    pub fn export_shard(&self, shard: u32) -> Result<Vec<ExportItem>> {
        self.checkpoint(shard)?;
        let mut out = Vec::new();
        for biz in self.biz_ids_on_disk() {
            let tree = self.biz_tree(biz)?;
            for kv in tree.scan_prefix(keys::shard_prefix(shard)) {
                let (k, v) = kv?;
                out.push((format!("biz/{biz}"), k.to_vec(), v.to_vec()));
            }
        }
        for rank in self.rank_ids_on_disk() {
            let tree = self.rank_tree(rank)?;
            for kv in tree.scan_prefix(keys::shard_prefix(shard)) {
                let (k, v) = kv?;
                out.push((format!("rank/{rank}"), k.to_vec(), v.to_vec()));
            }
        }
        for kv in self.shard_tree(shard)?.iter() {
            let (k, v) = kv?;
            if k.as_ref() != meta::SNAPSHOT {
                out.push((format!("shard/{shard}/meta"), k.to_vec(), v.to_vec()));
            }
        }
        Ok(out)
    }

    /// Replaces every key of `shard` with `items` (from `export_shard`),
    /// dropping what is staged for it. Not atomic: a crash part-way leaves
    /// the shard to be re-installed from a snapshot.
    pub fn import_shard(&self, shard: u32, items: Vec<ExportItem>) -> Result<()> {
        let slot = self.slot(shard);
        let _no_checkpoint = slot.checkpoint.lock().unwrap_or_else(|e| e.into_inner());
        {
            let mut layers = slot.layers();
            layers.active.drop_shard(&keys::shard_prefix(shard), TreeRef::Shard(shard));
            layers.flushing = None;
            if layers.active.is_empty() {
                layers.since = None;
            }
        }
        // The import rewrites counts behind the cache: hold the shard's epoch
        // odd throughout so no read refills it, and drop what it holds.
        let epoch = self.counts_cache.epoch(shard);
        epoch.fetch_add(1, Ordering::AcqRel);
        for part in &self.counts_cache.parts {
            part.lock().unwrap_or_else(|e| e.into_inner()).retain(|k, _| k.1 != shard);
        }
        let res = self.import_shard_keys(shard, items);
        epoch.fetch_add(1, Ordering::AcqRel);
        res
    }

    fn import_shard_keys(&self, shard: u32, items: Vec<ExportItem>) -> Result<()> {
        for biz in self.biz_ids_on_disk() {
            let tree = self.biz_tree(biz)?;
            for kv in tree.scan_prefix(keys::shard_prefix(shard)) {
                tree.remove(kv?.0)?;
            }
        }
        for rank in self.rank_ids_on_disk() {
            let tree = self.rank_tree(rank)?;
            for kv in tree.scan_prefix(keys::shard_prefix(shard)) {
                tree.remove(kv?.0)?;
            }
        }
        self.shard_tree(shard)?.clear()?;
        let meta_name = format!("shard/{shard}/meta");
        for (name, k, v) in items {
            if name == meta_name {
                self.shard_tree(shard)?.insert(k, v)?;
            } else if let Some(biz) = name.strip_prefix("biz/").and_then(|b| b.parse().ok()) {
                self.biz_tree(biz)?.insert(k, v)?;
            } else if let Some(r) = name.strip_prefix("rank/").and_then(|r| r.parse().ok()) {
                self.rank_tree(r)?.insert(k, v)?;
            }
        }
        Ok(())
    }
}

/// Walks stored and staged entries together in key order (descending with
/// `rev`); a staged entry replaces the stored one of the same key, and a
/// staged deletion hides it.
fn merge<S, P>(
    mut stored: S,
    mut staged: P,
    rev: bool,
    mut f: impl FnMut(&[u8], &[u8]) -> Result<bool>,
) -> Result<()>
where
    S: Iterator<Item = sled::Result<(sled::IVec, sled::IVec)>>,
    P: Iterator<Item = (Vec<u8>, Option<Vec<u8>>)>,
{
    use std::cmp::Ordering as O;
    let mut s = stored.next().transpose()?;
    let mut p = staged.next();
    loop {
        // Which comes first in walk order: the staged entry or the stored one?
        let staged_first = match (&s, &p) {
            (None, None) => return Ok(()),
            (None, Some(_)) => true,
            (Some(_), None) => false,
            (Some((sk, _)), Some((pk, _))) => {
                let o = pk.as_slice().cmp(sk.as_ref());
                let o = if rev { o.reverse() } else { o };
                if o == O::Equal {
                    s = stored.next().transpose()?; // replaced by the staged entry
                }
                o != O::Greater
            }
        };
        let more = if staged_first {
            match p.take() {
                Some((k, Some(v))) => f(&k, &v)?,
                _ => true, // a staged deletion
            }
        } else {
            match s.take() {
                Some((k, v)) => f(&k, &v)?,
                None => true,
            }
        };
        if !more {
            return Ok(());
        }
        if staged_first {
            p = staged.next();
        } else {
            s = stored.next().transpose()?;
        }
    }
}

/// The shard id a state key starts with.
fn read_u32(bytes: &[u8]) -> Option<u32> {
    bytes.get(..4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn push_outbox(out: &mut Vec<OutboxRun>, k: &[u8], v: Vec<u8>, limit: usize) -> Result<()> {
    let target = k.get(2..6).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let (Some(target), Some(seq)) = (target, read_u64(k, 6)) else {
        return Err(corrupt("outbox key", k));
    };
    match out.last_mut() {
        Some((t, items)) if *t == target => {
            if items.len() < limit {
                items.push((seq, v));
            }
        }
        _ => out.push((target, vec![(seq, v)])),
    }
    Ok(())
}

pub(crate) fn corrupt(what: &'static str, bytes: &[u8]) -> StateError {
    StateError::Corrupt { what, detail: format!("{bytes:?}") }
}

fn decode_state(v: &[u8]) -> Result<(LikeState, Millis)> {
    match v {
        [VALUE_V1, s, rest @ ..] if rest.len() == 8 => {
            let state = match s {
                0 => LikeState::None,
                1 => LikeState::Like,
                2 => LikeState::Dislike,
                _ => return Err(corrupt("state", v)),
            };
            Ok((state, read_u64(rest, 0).unwrap_or(0)))
        }
        _ => Err(corrupt("state", v)),
    }
}

fn decode_counts(v: &[u8]) -> Result<CountsRec> {
    match v {
        [VALUE_V1, rest @ ..] if rest.len() == 24 => {
            let owner = read_u64(rest, 16).unwrap_or(0);
            Ok(CountsRec {
                likes: read_u64(rest, 0).unwrap_or(0),
                dislikes: read_u64(rest, 8).unwrap_or(0),
                owner: (owner != 0).then_some(owner),
            })
        }
        _ => Err(corrupt("counts", v)),
    }
}

fn decode_u64_value(v: &[u8], what: &'static str) -> Result<u64> {
    match v {
        [VALUE_V1, rest @ ..] if rest.len() == 8 => Ok(read_u64(rest, 0).unwrap_or(0)),
        _ => Err(corrupt(what, v)),
    }
}

fn u64_value(x: u64) -> [u8; 9] {
    let mut v = [0u8; 9];
    v[0] = VALUE_V1;
    v[1..].copy_from_slice(&x.to_be_bytes());
    v
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(crate) enum TreeRef {
    Biz(BizId),
    Shard(u32),
    Registry,
    /// Appended: redo records name trees by variant index.
    Rank(u32),
}

/// One absolute change: applying it twice is the same as once.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Op {
    pub tree: TreeRef,
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

impl Op {
    /// The shard whose state this key is part of (`None`: the registry).
    fn shard(&self) -> Option<u32> {
        match self.tree {
            TreeRef::Biz(_) | TreeRef::Rank(_) => read_u32(&self.key),
            TreeRef::Shard(s) => Some(s),
            TreeRef::Registry => None,
        }
    }
}

/// The writes of one applied batch, across trees, staged together.
/// `owner` names the shard that applied them: its overlay holds them, and
/// its checkpoints write them.
pub struct WriteSet {
    owner: u32,
    ops: Vec<Op>,
    /// Counts written, for the read cache.
    counts: Vec<(BizId, u32, EntityId, CountsRec)>,
}

impl WriteSet {
    pub fn new(owner: u32) -> WriteSet {
        WriteSet { owner, ops: Vec::new(), counts: Vec::new() }
    }

    pub(crate) fn put(&mut self, tree: TreeRef, key: impl Into<Vec<u8>>, value: &[u8]) {
        self.ops.push(Op { tree, key: key.into(), value: Some(value.to_vec()) });
    }

    pub(crate) fn del(&mut self, tree: TreeRef, key: impl Into<Vec<u8>>) {
        self.ops.push(Op { tree, key: key.into(), value: None });
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The shard whose apply these writes are.
    pub fn owner(&self) -> u32 {
        self.owner
    }

    /// Stores a state with the time it was set. A cleared state (`None`)
    /// keeps its row: `status` reports when it was cleared, and a repeated
    /// unlike reports that time whether or not the user's actor is active.
    pub fn put_state(
        &mut self,
        biz: BizId,
        shard: u32,
        mid: UserId,
        entity: EntityId,
        state: LikeState,
        mtime: Millis,
    ) {
        let mut v = [0u8; 10];
        v[0] = VALUE_V1;
        v[1] = match state {
            LikeState::None => 0,
            LikeState::Like => 1,
            LikeState::Dislike => 2,
        };
        v[2..].copy_from_slice(&mtime.to_be_bytes());
        self.put(TreeRef::Biz(biz), keys::state(shard, mid, entity), &v);
    }

    pub fn add_user_item(
        &mut self,
        biz: BizId,
        shard: u32,
        mid: UserId,
        mtime: Millis,
        entity: EntityId,
    ) {
        self.put(TreeRef::Biz(biz), keys::user_item(shard, mid, mtime, entity), &[]);
    }

    pub fn del_user_item(
        &mut self,
        biz: BizId,
        shard: u32,
        mid: UserId,
        mtime: Millis,
        entity: EntityId,
    ) {
        self.del(TreeRef::Biz(biz), keys::user_item(shard, mid, mtime, entity));
    }

    pub fn add_liker(
        &mut self,
        biz: BizId,
        shard: u32,
        entity: EntityId,
        mtime: Millis,
        mid: UserId,
    ) {
        self.put(TreeRef::Biz(biz), keys::liker(shard, entity, mtime, mid), &[]);
    }

    pub fn del_liker(
        &mut self,
        biz: BizId,
        shard: u32,
        entity: EntityId,
        mtime: Millis,
        mid: UserId,
    ) {
        self.del(TreeRef::Biz(biz), keys::liker(shard, entity, mtime, mid));
    }

    pub fn put_counts(&mut self, biz: BizId, shard: u32, entity: EntityId, c: CountsRec) {
        let mut v = [0u8; 25];
        v[0] = VALUE_V1;
        v[1..9].copy_from_slice(&c.likes.to_be_bytes());
        v[9..17].copy_from_slice(&c.dislikes.to_be_bytes());
        v[17..25].copy_from_slice(&c.owner.unwrap_or(0).to_be_bytes());
        self.put(TreeRef::Biz(biz), keys::counts(shard, entity), &v);
        self.counts.push((biz, shard, entity, c));
    }

    pub fn put_received(&mut self, biz: BizId, shard: u32, owner: UserId, total: u64) {
        self.put(TreeRef::Biz(biz), keys::received(shard, owner), &u64_value(total));
    }

    pub fn put_applied(&mut self, shard: u32, encoded_log_id: &[u8]) {
        self.put(TreeRef::Shard(shard), meta::APPLIED, encoded_log_id);
    }

    pub fn put_time_floor(&mut self, shard: u32, ms: u64) {
        self.put(TreeRef::Shard(shard), meta::FLOOR, &u64_value(ms));
    }

    pub fn put_membership(&mut self, shard: u32, encoded: &[u8]) {
        self.put(TreeRef::Shard(shard), meta::MEMBERSHIP, encoded);
    }

    pub fn put_inbox_seq(&mut self, shard: u32, source: u32, seq: u64) {
        self.put(TreeRef::Shard(shard), tagged(meta::INBOX, source), &u64_value(seq));
    }

    pub fn push_outbox(&mut self, shard: u32, target: u32, seq: u64, encoded: &[u8]) {
        let mut k = tagged(meta::OUTBOX, target);
        k.extend_from_slice(&seq.to_be_bytes());
        self.put(TreeRef::Shard(shard), k, encoded);
        self.put(TreeRef::Shard(shard), tagged(meta::NEXT, target), &u64_value(seq + 1));
    }

    pub fn ack_outbox(&mut self, shard: u32, target: u32, seqs: impl IntoIterator<Item = u64>) {
        for seq in seqs {
            let mut k = tagged(meta::OUTBOX, target);
            k.extend_from_slice(&seq.to_be_bytes());
            self.del(TreeRef::Shard(shard), k);
        }
    }

    pub fn put_registry(&mut self, key: &[u8], value: &[u8]) {
        self.put(TreeRef::Registry, key.to_vec(), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, StateStore) {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::open(dir.path()).unwrap();
        let s = StateStore::open(&db).unwrap();
        (dir, s)
    }

    #[test]
    fn state_counts_and_received_round_trip() {
        let (_d, s) = store();
        let mut ws = WriteSet::new(0);
        ws.put_state(1, 0, 10, 20, LikeState::Dislike, 99);
        ws.put_counts(1, 0, 20, CountsRec { likes: 3, dislikes: 4, owner: Some(7) });
        ws.put_received(1, 0, 7, 12);
        ws.put_applied(0, b"x");
        s.stage(ws);
        assert_eq!(s.get_state(1, 0, 10, 20).unwrap(), Some((LikeState::Dislike, 99)));
        assert_eq!(
            s.get_counts(1, 0, 20).unwrap(),
            CountsRec { likes: 3, dislikes: 4, owner: Some(7) }
        );
        assert_eq!(s.get_received(1, 0, 7).unwrap(), 12);
        assert_eq!(s.applied(0).unwrap().as_deref(), Some(&b"x"[..]));
        // Another business sees nothing: data is isolated per tree.
        assert_eq!(s.get_state(2, 0, 10, 20).unwrap(), None);
    }

    #[test]
    fn counts_cache_follows_commits() {
        let (_d, s) = store();
        assert_eq!(s.get_counts(1, 0, 5).unwrap(), CountsRec::default());
        for likes in 1..=3 {
            let mut ws = WriteSet::new(0);
            ws.put_counts(1, 0, 5, CountsRec { likes, dislikes: 0, owner: None });
            ws.put_applied(0, b"x");
            s.stage(ws);
            // Served from the cache after the first read, and never stale.
            assert_eq!(s.get_counts(1, 0, 5).unwrap().likes, likes);
            assert_eq!(s.get_counts(1, 0, 5).unwrap().likes, likes);
        }
        // The stored value matches what the cache served.
        s.checkpoint(0).unwrap();
        let fresh = StateStore::open(&s.db).unwrap();
        assert_eq!(fresh.get_counts(1, 0, 5).unwrap().likes, 3);
        s.import_shard(0, Vec::new()).unwrap();
        assert_eq!(s.get_counts(1, 0, 5).unwrap(), CountsRec::default());
    }

    #[test]
    fn lists_page_newest_first() {
        let (_d, s) = store();
        let mut ws = WriteSet::new(2);
        for i in 0..10u64 {
            ws.add_user_item(1, 2, 5, 100 + i / 2, i);
        }
        ws.add_user_item(1, 2, 6, 500, 1); // another user
        s.stage(ws);
        let p1 = s.user_list(1, 2, 5, None, 4).unwrap();
        assert_eq!(p1.iter().map(|i| i.id).collect::<Vec<_>>(), vec![9, 8, 7, 6]);
        let c = PageCursor { mtime: p1[3].mtime, id: p1[3].id };
        let p2 = s.user_list(1, 2, 5, Some(c), 100).unwrap();
        assert_eq!(p2.iter().map(|i| i.id).collect::<Vec<_>>(), vec![5, 4, 3, 2, 1, 0]);
    }

    #[test]
    fn outbox_groups_by_target_and_acks() {
        let (_d, s) = store();
        let mut ws = WriteSet::new(0);
        ws.push_outbox(0, 3, 1, b"a");
        ws.push_outbox(0, 3, 2, b"b");
        ws.push_outbox(0, 1, 1, b"c");
        s.stage(ws);
        let p = s.outbox_pending(0, 10).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].0, 1);
        assert_eq!(p[1].1.iter().map(|(q, _)| *q).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(s.outbox_next(0, 3).unwrap(), 3);
        let limited = s.outbox_pending(0, 1).unwrap();
        assert_eq!(limited[1].1.len(), 1);
        let mut ws = WriteSet::new(0);
        ws.ack_outbox(0, 3, [1, 2]);
        s.stage(ws);
        assert_eq!(s.outbox_len(0).unwrap(), 1);
    }
}
