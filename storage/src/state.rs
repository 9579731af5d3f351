//! `StateStore`, the applied state of every shard, in memory, and
//! `WriteSet`, the writes of one applied Raft batch; the core that stages
//! writes and checkpoints them. The trees are in `trees.rs` (over
//! `mem_tree.rs`), and each concept's layout, encoders and accessors in its
//! own file: `likes.rs`, `boards.rs`, `shard_meta.rs`, `registry.rs`, with
//! `snapshot.rs` for export and import.
//!
//! Writes of one applied Raft batch are collected in a `WriteSet`, which
//! also records the applied log id, and *staged* (`stage`): they go into the
//! shard's overlay (`pending.rs`), where every read sees them at once. A
//! *checkpoint* (`checkpoint`, when the overlay is old or large, and before
//! a snapshot) moves the overlay into the shard's trees. Nothing here is
//! durable on its own: the durable state of a shard is its newest snapshot
//! file plus the Raft log after it, which openraft never purges past a
//! snapshot. A restart loads each shard's newest snapshot (the cluster's
//! engine does, before anything reads) and openraft replays the log from
//! the snapshot's applied id, the one stored in the same state. openraft's
//! own model, and why: a checkpoint into sled (the design before this one)
//! copied a sled leaf per insert, a sixth of the likes mix's node CPU and a
//! third of cold scoring's.
//!
//! The overlay stays between apply and the trees for two reasons: a
//! snapshot export walks the trees of a *frozen* shard (checkpoints held
//! back) while apply goes on staging, and a hot key written many times
//! between checkpoints is moved once.
//!
//! Data directories written before kept this state in sled trees; `open`
//! reads them in (`legacy.rs`), and a shard's snapshot file, if it has one,
//! replaces its part.

use crate::commit_epoch::Committing;
use crate::compact::Bytes;
use crate::counts_cache::CountsCache;
use crate::keys::read_u32;
use crate::mem_tree::MemTree;
use crate::merge::merge;
use crate::pending::{Entries, KeyRange, Layers, Overlay};
use crate::states_cache::StatesCache;
use crate::trees::TreeRef;
use plaudit_proto::{BizId, EntityId, LikeState, Millis, UserId};
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

/// When a shard's staged writes are moved into its trees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointPolicy {
    /// Once this many distinct keys are staged.
    pub max_keys: usize,
    /// Once the oldest staged write is this old.
    pub max_age: Duration,
}

impl CheckpointPolicy {
    pub const DEFAULT_MAX_KEYS: usize = 4096;
    pub const DEFAULT_MAX_AGE: Duration = Duration::from_millis(100);
    /// A shard whose checkpoints keep failing (or a snapshot export holds
    /// back) stops applying once this many times `max_keys` are staged,
    /// rather than growing without bound.
    pub const HARD_LIMIT_FACTOR: usize = 8;
    /// ... and never below this many: an export of a large shard holds
    /// checkpoints back for seconds, and apply must not stall meanwhile
    /// (the floor is the limit the 1 s / 32,768-key default had).
    pub const HARD_LIMIT_FLOOR: usize = 262_144;
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
    /// Set while a snapshot install replaces the shard's keys, and left set
    /// if it fails: the shard's state is then a mix and must not be read.
    pub(crate) incomplete: AtomicBool,
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
    /// The sled database older data directories kept this state in
    /// (`legacy.rs`); read once, at `open`.
    pub(crate) db: sled::Db,
    pub(crate) bizs: Arc<RwLock<HashMap<BizId, MemTree>>>,
    /// One tree per ranking (`rank/{id}`): its sub-boards on every shard.
    pub(crate) ranks: Arc<RwLock<HashMap<u32, MemTree>>>,
    pub(crate) shards: Arc<RwLock<HashMap<u32, MemTree>>>,
    pub(crate) registry: MemTree,
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
    /// Opens with the default checkpoint policy. `db` is read for the state
    /// of data directories written before state moved to memory.
    pub fn open(db: &sled::Db) -> Result<StateStore> {
        StateStore::open_with(db, CheckpointPolicy::default())
    }

    pub fn open_with(db: &sled::Db, policy: CheckpointPolicy) -> Result<StateStore> {
        let store = StateStore {
            db: db.clone(),
            bizs: Arc::default(),
            ranks: Arc::default(),
            shards: Arc::default(),
            registry: MemTree::default(),
            counts_cache: Arc::new(CountsCache::new()),
            states_cache: Arc::new(StatesCache::new()),
            pending: Arc::default(),
            policy,
        };
        crate::legacy::load(&store)?;
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
        // Staged layers first: a checkpoint drops them only after the trees
        // hold them, so a miss here means the tree is current for this key.
        if let Some(v) = self.slot(shard).layers().get(tree, key) {
            return Ok(v);
        }
        Ok(self.find_tree(tree).and_then(|t| t.get(key)))
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
        let stored = self.find_tree(tree).map(|t| t.scan(range, rev)).into_iter().flatten();
        if rev {
            merge(stored, staged.into_iter().rev(), true, f)
        } else {
            merge(stored, staged.into_iter(), false, f)
        }
    }
    /// Stages an applied batch's writes: visible to every read at once,
    /// moved into the trees by a later checkpoint (see the module doc).
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
        // Odd until the caches are written through (`commit_epoch.rs`).
        let _committing = Committing::begin(self.counts_cache.epoch(ws.owner));
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
            self.counts_cache.put((*biz, *shard, *entity), *c);
        }
        for &(biz, shard, user, entity, state) in &ws.states {
            let mut part = self.states_cache.part(shard, user);
            part.write((biz, shard, user), entity, state, crate::likes::STATES_SCAN);
        }
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
        let limit = self
            .policy
            .max_keys
            .saturating_mul(CheckpointPolicy::HARD_LIMIT_FACTOR)
            .max(CheckpointPolicy::HARD_LIMIT_FLOOR);
        self.slot(shard).layers().active.keys() >= limit
    }

    /// Moves `shard`'s staged writes into its trees (see the module doc).
    /// While a snapshot export holds the shard still (`freeze`) this does
    /// nothing: the writes stay staged and readable, and the next
    /// checkpoint after the export moves them.
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

    /// Every op of `layer`, one tree (and one write lock) at a time.
    fn write_through(&self, _shard: u32, layer: &Overlay) -> Result<()> {
        for (tree, entries) in layer.trees() {
            let ops = entries.iter().map(|(k, v)| (&k[..], v.as_deref()));
            self.tree(*tree).apply(ops);
        }
        Ok(())
    }
}

/// One absolute change: applying it twice is the same as once. Short keys
/// and values are held in place (`compact.rs`), so the overlay takes them
/// as they are.
#[derive(Debug, Clone)]
pub(crate) struct Op {
    pub tree: TreeRef,
    pub key: Bytes,
    pub value: Option<Bytes>,
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
        let key = Bytes::from(key.into());
        self.ops.push(Op { tree, key, value: Some(Bytes::from(value)) });
    }

    pub(crate) fn del(&mut self, tree: TreeRef, key: impl Into<Vec<u8>>) {
        self.ops.push(Op { tree, key: Bytes::from(key.into()), value: None });
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

/// A fresh store (no caches filled) holding `shard`'s state as `s` has it:
/// what a restart from a snapshot taken now would read.
#[cfg(test)]
pub(crate) fn reloaded(s: &StateStore, shard: u32) -> (tempfile::TempDir, StateStore) {
    let (dir, fresh) = test_store();
    fresh.install_bytes(shard, &s.snapshot_bytes(shard));
    (dir, fresh)
}
