//! `StateStore`, the applied state of every shard in sled, and `WriteSet`,
//! the writes of one applied Raft batch; the core that stages writes and
//! checkpoints them. The trees are in `trees.rs`, and each concept's layout,
//! encoders and accessors in its own file: `likes.rs`, `boards.rs`,
//! `shard_meta.rs`, `registry.rs`, with `snapshot.rs` for export and import.
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

use crate::counts_cache::CountsCache;
use crate::keys::{read_u32, VALUE_V1};
use crate::merge::merge;
use crate::pending::{Entries, KeyRange, Layers, OpRef, Overlay};
use crate::states_cache::StatesCache;
use crate::trees::TreeRef;
use plaudit_proto::codec;
use plaudit_proto::{BizId, EntityId, LikeState, Millis, UserId};
use serde::{Deserialize, Serialize};
use sled::Tree;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

// Paths that were defined here before the store was split by concept.
pub use crate::likes::CountsRec;

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("sled: {0}")]
    Sled(#[from] sled::Error),
    #[error("corrupt value under {what}: {detail}")]
    Corrupt { what: &'static str, detail: String },
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

pub type Result<T> = std::result::Result<T, StateError>;

pub(crate) fn corrupt(what: &'static str, bytes: &[u8]) -> StateError {
    StateError::Corrupt { what, detail: format!("{bytes:?}") }
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

/// One shard's staged writes, the lock that serialises its checkpoints,
/// and whether a snapshot export holds its stored copy still.
#[derive(Default)]
pub(crate) struct PendingSlot {
    layers: Mutex<Layers>,
    pub(crate) checkpoint: Mutex<()>,
    pub(crate) frozen: AtomicBool,
}

impl PendingSlot {
    pub(crate) fn layers(&self) -> MutexGuard<'_, Layers> {
        // Only map operations run under the lock; a poisoned lock still
        // holds consistent maps.
        self.layers.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Handle to all applied state of a node. Cheap to clone.
#[derive(Clone)]
pub struct StateStore {
    pub(crate) db: sled::Db,
    pub(crate) bizs: Arc<RwLock<HashMap<BizId, Tree>>>,
    /// One tree per ranking (`rank/{id}`): its sub-boards on every shard.
    pub(crate) ranks: Arc<RwLock<HashMap<u32, Tree>>>,
    pub(crate) shards: Arc<RwLock<HashMap<u32, Tree>>>,
    pub(crate) registry: Tree,
    /// Redo records of checkpoints in progress, one key per shard.
    pub(crate) redo: Tree,
    /// Markers of snapshot installs in progress, one key per shard (`snapshot.rs`).
    pub(crate) installs: Tree,
    pub(crate) counts_cache: Arc<CountsCache>,
    /// Users' states for `status`, kept coherent by the same epochs.
    pub(crate) states_cache: Arc<StatesCache>,
    /// Staged writes per shard (the write-behind overlay).
    pub(crate) pending: Arc<RwLock<HashMap<u32, Arc<PendingSlot>>>>,
    policy: CheckpointPolicy,
}

/// A stored or staged value.
pub type Value = Vec<u8>;

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
            installs: db.open_tree("installs")?,
            counts_cache: Arc::new(CountsCache::new()),
            states_cache: Arc::new(StatesCache::new()),
            pending: Arc::default(),
            policy,
        };
        store.recover()?;
        Ok(store)
    }

    pub(crate) fn slot(&self, shard: u32) -> Arc<PendingSlot> {
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
    pub(crate) fn scan_over(
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
        for &(biz, shard, user, entity, state) in &ws.states {
            let mut part = self.states_cache.part(shard, user);
            part.write((biz, shard, user), entity, state, crate::likes::STATES_SCAN);
        }
        epoch.fetch_add(1, Ordering::AcqRel);
    }

    pub fn checkpoint_policy(&self) -> CheckpointPolicy {
        self.policy
    }

    /// Whether `shard`'s staged writes should be checkpointed now (never
    /// while a snapshot export holds the shard still).
    pub fn checkpoint_due(&self, shard: u32) -> bool {
        let slot = self.slot(shard);
        if slot.frozen.load(Ordering::Acquire) {
            return false;
        }
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
    /// is finished first by the next call. While a snapshot export holds the
    /// shard still (`freeze`) this does nothing: the writes stay staged and
    /// readable, and the next checkpoint after the export writes them.
    pub fn checkpoint(&self, shard: u32) -> Result<()> {
        let slot = self.slot(shard);
        let _one_at_a_time = slot.checkpoint.lock().unwrap_or_else(|e| e.into_inner());
        if slot.frozen.load(Ordering::Acquire) {
            return Ok(());
        }
        self.checkpoint_locked(shard, &slot)
    }

    /// `checkpoint`, with the shard's checkpoint lock held by the caller.
    pub(crate) fn checkpoint_locked(&self, shard: u32, slot: &PendingSlot) -> Result<()> {
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

    fn apply_op(&self, op: &Op) -> Result<()> {
        let tree = self.tree(op.tree)?;
        match &op.value {
            Some(v) => tree.insert(&op.key, v.as_slice())?,
            None => tree.remove(&op.key)?,
        };
        Ok(())
    }
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

/// A staged like state: `(biz, shard, user, entity, (state, mtime))`.
pub(crate) type StateWrite = (BizId, u32, UserId, EntityId, (LikeState, Millis));

/// The writes of one applied batch, across trees, staged together.
/// `owner` names the shard that applied them: its overlay holds them, and
/// its checkpoints write them. The typed writes are with their layouts
/// (`likes.rs`, `boards.rs`, `shard_meta.rs`, `registry.rs`).
pub struct WriteSet {
    owner: u32,
    ops: Vec<Op>,
    /// Counts written, for the read cache.
    pub(crate) counts: Vec<(BizId, u32, EntityId, CountsRec)>,
    /// States written, for the read cache.
    pub(crate) states: Vec<StateWrite>,
}

impl WriteSet {
    pub fn new(owner: u32) -> WriteSet {
        WriteSet { owner, ops: Vec::new(), counts: Vec::new(), states: Vec::new() }
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

    /// The keys of `tree` this write set puts (not deletes), in write order.
    pub(crate) fn keys_put(&self, tree: TreeRef) -> impl Iterator<Item = &[u8]> {
        self.ops
            .iter()
            .filter(move |op| op.tree == tree && op.value.is_some())
            .map(|op| &op.key[..])
    }

    /// The shard whose apply these writes are.
    pub fn owner(&self) -> u32 {
        self.owner
    }
}

/// A store in a fresh temporary directory, for the unit tests of every
/// module of this crate.
#[cfg(test)]
pub(crate) fn test_store() -> (tempfile::TempDir, StateStore) {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = sled::open(dir.path()).expect("sled");
    let s = StateStore::open(&db).expect("store");
    (dir, s)
}
