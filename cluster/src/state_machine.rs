//! openraft's state machine for one group: hands committed entries to the
//! shard actor, and builds and installs snapshots as files.
//!
//! Applied state lives in memory; a group's newest snapshot file is its
//! durable state, with the log after it (openraft never purges past a
//! snapshot). The applied log id is staged by the shard actor in the same
//! write set as the state it describes, so a snapshot holds both, and
//! `applied_state` after a restart (the engine installs every group's newest
//! snapshot first, `durable.rs`) names exactly what the snapshot held;
//! openraft replays the rest from the log.
//!
//! Snapshots (`plaudit_storage::snapshot` has the file format and the
//! guarantees):
//!
//! ```text
//! build:   (state machine task) freeze: checkpoint, hold the shard's trees still
//!          (builder task)       stream the shard's trees to building-*.tmp,
//!                               fsync, rename to <id>.snap, thaw
//! send:    openraft reads <id>.snap in chunks (install_snapshot RPCs)
//! receive: incoming-*.tmp (fsync) ─> <id>.snap, the current snapshot ─>
//!          replace the keys in memory; actors reset; the registry view
//!          reloaded (metadata group). Current first: openraft purges the
//!          log up to a received snapshot without waiting for the install.
//! restart: the newest <id>.snap is loaded; an installing.snap (left by an
//!          older version, complete and synced) is promoted to its name first
//! ```

use crate::snapshot_file::{self, SnapshotFile};
use crate::types::{LogId, StorageError, StoredMembership, TypeConfig};
use openraft::storage::{RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    EntryPayload, ErrorSubject, ErrorVerb, RaftSnapshotBuilder, SnapshotMeta, StorageIOError,
};
use plaudit_actors::{ApplyEntry, CmdResult, Directory, ShardHandle};
use plaudit_proto::codec;
use plaudit_storage::snapshot::{decode_header, read_header, Frozen};
use plaudit_storage::wal::Wal;
use plaudit_storage::StateStore;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

type Meta = SnapshotMeta<u64, openraft::BasicNode>;

pub struct ShardStateMachine {
    /// The group's id, its first shard's: that shard's meta tree holds the
    /// group's applied log id and membership.
    pub shard: u32,
    /// The metadata group's state includes the registry.
    pub is_meta: bool,
    /// The shards the group hosts and their actors, `shard` first.
    pub shards: Vec<(u32, ShardHandle)>,
    pub store: StateStore,
    /// The registry view, reloaded after the metadata group installs a snapshot.
    pub directory: Directory,
    /// Where this group's snapshot files live.
    pub snapshot_dir: PathBuf,
    /// The node's Raft log: its buffered records (this group's committed
    /// record among them) are written out before an apply.
    pub wal: Arc<Wal>,
    /// Held while snapshot files are renamed, deleted or chosen.
    pub files: FileLock,
}

/// Serialises the snapshot file operations of one group (a build, an
/// install and a send may overlap). A std mutex: it is held only around
/// short file operations, never across an `.await`.
pub type FileLock = Arc<std::sync::Mutex<()>>;

fn lock(files: &FileLock) -> std::sync::MutexGuard<'_, ()> {
    files.lock().unwrap_or_else(|e| e.into_inner())
}

fn sm_err(verb: ErrorVerb, e: impl ToString) -> StorageError {
    let io = std::io::Error::other(e.to_string());
    StorageIOError::new(ErrorSubject::StateMachine, verb, openraft::AnyError::new(&io)).into()
}

fn snap_err(verb: ErrorVerb, e: impl ToString) -> StorageError {
    let io = std::io::Error::other(e.to_string());
    StorageIOError::new(ErrorSubject::Snapshot(None), verb, openraft::AnyError::new(&io)).into()
}

fn now_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0)
}

// openraft's own trait methods return `StorageError` by value; helpers that
// feed them do the same rather than boxing and unboxing on every call.
#[allow(clippy::result_large_err)]
impl ShardStateMachine {
    /// A hash of the group's applied state (every hosted shard's, frozen
    /// by its actor with the boards it holds: `StateStore::digest_frozen`)
    /// and its applied id. For tests that compare replicas.
    pub async fn digest(&self) -> Result<(Option<Vec<u8>>, u64), String> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        let mut applied = None;
        for (i, (_, handle)) in self.shards.iter().enumerate() {
            let frozen = handle.freeze().await.map_err(|e| e.to_string())?;
            let (a, hash) =
                self.store.digest_frozen(&frozen, self.is_meta).map_err(|e| e.to_string())?;
            if i == 0 {
                applied = a;
            }
            hash.hash(&mut h);
        }
        Ok((applied, h.finish()))
    }

    fn ids(&self) -> Vec<u32> {
        self.shards.iter().map(|(s, _)| *s).collect()
    }

    /// Freezes every hosted shard through its actor (which adds the images
    /// of the boards it holds), in order. Freezing runs a checkpoint: on the
    /// blocking pool, not a runtime worker. Another export (a test's digest)
    /// may hold a shard for a moment: wait for it rather than fail the build
    /// (a failed build stops the group).
    async fn freeze_all(&self) -> Result<Vec<Frozen>, String> {
        let mut all = Vec::with_capacity(self.shards.len());
        for (shard, handle) in &self.shards {
            all.push(loop {
                match handle.freeze().await {
                    Ok(f) => break f,
                    Err(_) if self.store.is_frozen(*shard) => {
                        tokio::time::sleep(Duration::from_millis(10)).await
                    }
                    Err(e) => return Err(e.to_string()),
                }
            });
        }
        Ok(all)
    }

    /// Resets every hosted shard's actor.
    async fn reset_all(&self) -> Result<(), StorageError> {
        for (_, h) in &self.shards {
            h.reset().await.map_err(|e| snap_err(ErrorVerb::Write, e))?;
        }
        Ok(())
    }

    fn applied(&self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let applied =
            match self.store.applied(self.shard).map_err(|e| sm_err(ErrorVerb::Read, e))? {
                Some(v) => Some(codec::from_bytes(&v).map_err(|e| sm_err(ErrorVerb::Read, e))?),
                None => None,
            };
        let membership =
            match self.store.membership(self.shard).map_err(|e| sm_err(ErrorVerb::Read, e))? {
                Some(v) => codec::from_bytes(&v).map_err(|e| sm_err(ErrorVerb::Read, e))?,
                None => StoredMembership::default(),
            };
        Ok((applied, membership))
    }

    /// Refuses to start the group if its log was purged past its applied
    /// state: the entries in between are gone, and openraft would fail
    /// later, inside, on the first apply or the start's re-apply.
    pub async fn check_log_covers(
        &self,
        log: &mut impl RaftLogStorage<TypeConfig>,
    ) -> anyhow::Result<()> {
        let purged = log.get_log_state().await?.last_purged_log_id;
        let index = |l: Option<LogId>| l.map(|l| l.index);
        if index(purged) > index(self.applied()?.0) {
            self.take_received_snapshot(index(purged)).await?;
        }
        let (applied, _) = self.applied()?;
        if index(purged) > index(applied) {
            anyhow::bail!(
                "shard {}: the log is purged up to {purged:?} but the newest snapshot holds state \
                 at {applied:?} only; the entries in between are gone. Restore the data \
                 directory from a backup, or remove this replica from the group and add it back",
                self.shard
            );
        }
        Ok(())
    }

    /// openraft purges a follower's log up to a snapshot it received
    /// without waiting for the install, which makes the file current only
    /// after `finish` synced it: a kill in between leaves the log purged
    /// past the newest complete snapshot, and the received file as
    /// `incoming-*.tmp`. Installs the newest such file that covers `purged`
    /// and passes its check (a file cut short or damaged does not) and
    /// makes it the current snapshot.
    async fn take_received_snapshot(&self, purged: Option<u64>) -> anyhow::Result<()> {
        let mut candidates = Vec::new();
        for entry in std::fs::read_dir(&self.snapshot_dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if !(name.starts_with("incoming") && name.ends_with(".tmp")) {
                continue;
            }
            let Ok(header) = snapshot_file::read_meta_header(&path) else { continue };
            let Ok(meta) = decode_header::<Meta>(&header) else { continue };
            if meta.last_log_id.map(|l| l.index) < purged {
                continue;
            }
            if let Err(e) = snapshot_file::verify_file(&path, &self.ids(), self.is_meta) {
                tracing::warn!(shard = self.shard, path = %path.display(), error = %e, "a received snapshot a crash left is damaged; not installed");
                continue;
            }
            candidates.push((meta.last_log_id, path, meta.snapshot_id));
        }
        candidates.sort();
        let Some((_, path, id)) = candidates.pop() else { return Ok(()) };
        tracing::warn!(shard = self.shard, snapshot = %id, "installing a received snapshot a crash left unfinished");
        self.install_file(&path).await?;
        let current = self.snapshot_dir.join(snapshot_file::complete_name(&id));
        let _files = lock(&self.files);
        std::fs::rename(&path, &current)?;
        snapshot_file::sync_dir(&self.snapshot_dir)?;
        snapshot_file::remove_older(&self.snapshot_dir, &current);
        Ok(())
    }

    /// Removes what a crash left in the snapshot dir before the group
    /// starts: temporary files of transfers and builds.
    pub fn remove_leftovers(&self) {
        let dir = &self.snapshot_dir;
        snapshot_file::remove_leftovers(dir, "incoming", None);
        snapshot_file::remove_leftovers(dir, "building", None);
    }

    /// Replaces the hosted shards' state with the complete snapshot at `path`.
    async fn install_file(&self, path: &Path) -> Result<Meta, StorageError> {
        // An export holds a shard's trees still; wait for it to finish.
        while self.shards.iter().any(|(s, _)| self.store.is_frozen(*s)) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Held boards let go first, written back nowhere: a shard must not
        // write a board back (an idle sweep) over the state being installed.
        self.reset_all().await?;
        let (store, shards, registry) = (self.store.clone(), self.ids(), self.is_meta);
        let file = path.to_path_buf();
        let meta = tokio::task::spawn_blocking(move || -> Result<Meta, String> {
            let mut input = BufReader::new(std::fs::File::open(&file).map_err(|e| e.to_string())?);
            let header = read_header(&mut input).map_err(|e| e.to_string())?;
            let meta: Meta = decode_header(&header).map_err(|e| e.to_string())?;
            store.install_many(&shards, registry, &mut input).map_err(|e| e.to_string())?;
            Ok(meta)
        })
        .await
        .map_err(|e| snap_err(ErrorVerb::Write, e))?
        .map_err(|e| snap_err(ErrorVerb::Write, e))?;
        // The file's state must be the state at the meta's log id.
        let (applied, _) = self.applied()?;
        if applied != meta.last_log_id {
            return Err(snap_err(
                ErrorVerb::Read,
                format!("snapshot {} holds state at {applied:?}", meta.snapshot_id),
            ));
        }
        self.reset_all().await?;
        if self.is_meta {
            self.directory.reload(&self.store).map_err(|e| snap_err(ErrorVerb::Read, e))?;
        }
        Ok(meta)
    }
}

/// Holds the group's shards frozen at the point they were taken; building
/// streams them to a file.
pub struct Builder {
    shard: u32,
    is_meta: bool,
    store: StateStore,
    snapshot_dir: PathBuf,
    files: FileLock,
    taken: Result<(Vec<Frozen>, Meta), String>,
}

impl RaftSnapshotBuilder<TypeConfig> for Builder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let (frozen, meta) = std::mem::replace(&mut self.taken, Err("built already".into()))
            .map_err(|e| snap_err(ErrorVerb::Read, e))?;
        let header = codec::to_bytes(&meta).map_err(|e| snap_err(ErrorVerb::Write, e))?;
        let (store, registry, dir) = (self.store.clone(), self.is_meta, self.snapshot_dir.clone());
        let name = snapshot_file::complete_name(&meta.snapshot_id);
        let shard = self.shard;
        let files = self.files.clone();
        let path = tokio::task::spawn_blocking(move || -> Result<PathBuf, String> {
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            let tmp = snapshot_file::tmp_path(&dir, "building");
            let file = std::fs::File::create(&tmp).map_err(|e| e.to_string())?;
            let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
            // Each shard thaws as soon as its trees have been read.
            let stats = store
                .export_many(frozen, registry, &header, &mut out)
                .map_err(|e| e.to_string())?;
            let file = out.into_inner().map_err(|e| e.to_string())?;
            file.sync_all().map_err(|e| e.to_string())?;
            let done = dir.join(&name);
            let _files = lock(&files);
            std::fs::rename(&tmp, &done).map_err(|e| e.to_string())?;
            // Durable before openraft may purge the log up to it.
            snapshot_file::sync_dir(&dir).map_err(|e| e.to_string())?;
            snapshot_file::remove_older(&dir, &done);
            tracing::info!(shard, items = stats.items, bytes = stats.bytes, "snapshot built");
            Ok(done)
        })
        .await
        .map_err(|e| snap_err(ErrorVerb::Write, e))?
        .map_err(|e| snap_err(ErrorVerb::Write, e))?;
        let file = SnapshotFile::open(path).await.map_err(|e| snap_err(ErrorVerb::Read, e))?;
        Ok(Snapshot { meta, snapshot: Box::new(file) })
    }
}

impl RaftStateMachine<TypeConfig> for ShardStateMachine {
    type SnapshotBuilder = Builder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let a = self.applied()?;
        tracing::debug!(shard = self.shard, applied = ?a.0, "applied state");
        Ok(a)
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Vec<CmdResult>>, StorageError>
    where
        I: IntoIterator<Item = openraft::Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let mut batch = Vec::new();
        let mut first = None;
        for entry in entries {
            first.get_or_insert(entry.log_id);
            let log_id = codec::to_bytes(&entry.log_id).map_err(|e| sm_err(ErrorVerb::Write, e))?;
            let (membership, payload) = match entry.payload {
                EntryPayload::Blank => (None, None),
                EntryPayload::Normal(b) => (None, Some(b)),
                EntryPayload::Membership(m) => {
                    let stored = StoredMembership::new(Some(entry.log_id), m);
                    (Some(codec::to_bytes(&stored).map_err(|e| sm_err(ErrorVerb::Write, e))?), None)
                }
            };
            batch.push(ApplyEntry { log_id, membership, batch: payload });
        }
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        tracing::trace!(shard = self.shard, first = ?first, entries = batch.len(), "apply");
        // The committed record that let these entries through reaches the
        // page cache before anything they do is visible (`file_log.rs`),
        // in one write with whatever else the log holds by now.
        self.wal.write_out().map_err(|e| sm_err(ErrorVerb::Write, e))?;
        if let [(_, only)] = &self.shards[..] {
            return only.apply(batch).await.map_err(|e| sm_err(ErrorVerb::Write, e));
        }
        let split = crate::group_apply::split(self.shard, &self.ids(), batch);
        let applied = futures::future::try_join_all(self.shards.iter().zip(split.parts).map(
            |((_, h), part)| async move {
                if part.is_empty() {
                    return Ok(Vec::new());
                }
                h.apply(part).await
            },
        ))
        .await
        .map_err(|e| sm_err(ErrorVerb::Write, e))?;
        split.routes.merge(applied).map_err(|e| sm_err(ErrorVerb::Write, e))
    }

    /// Runs in the state machine task, between applies: the point frozen
    /// here is exactly the applied state, at the applied id.
    async fn get_snapshot_builder(&mut self) -> Builder {
        let frozen = self.freeze_all().await;
        let taken = (|| {
            let frozen = frozen?;
            let (last_log_id, last_membership) = self.applied().map_err(|e| e.to_string())?;
            let snapshot_id = format!(
                "{}-{}-{}",
                last_log_id.map(|l| l.index).unwrap_or(0),
                last_log_id.map(|l| l.leader_id.term).unwrap_or(0),
                now_ms()
            );
            Ok((frozen, Meta { last_log_id, last_membership, snapshot_id }))
        })();
        Builder {
            shard: self.shard,
            is_meta: self.is_meta,
            store: self.store.clone(),
            snapshot_dir: self.snapshot_dir.clone(),
            files: self.files.clone(),
            taken,
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<SnapshotFile>, StorageError> {
        {
            // A transfer begins: an earlier one was abandoned.
            let _files = lock(&self.files);
            snapshot_file::remove_leftovers(&self.snapshot_dir, "incoming", None);
        }
        let f = SnapshotFile::create_incoming(&self.snapshot_dir, self.ids(), self.is_meta)
            .await
            .map_err(|e| snap_err(ErrorVerb::Write, e))?;
        Ok(Box::new(f))
    }

    async fn install_snapshot(
        &mut self,
        meta: &Meta,
        snapshot: Box<SnapshotFile>,
    ) -> Result<(), StorageError> {
        let received = snapshot.finish().await.map_err(|e| snap_err(ErrorVerb::Write, e))?;
        // The file must hold what openraft says it received.
        let header =
            snapshot_file::read_meta_header(&received).map_err(|e| snap_err(ErrorVerb::Read, e))?;
        let got: Meta = decode_header(&header).map_err(|e| snap_err(ErrorVerb::Read, e))?;
        if got.snapshot_id != meta.snapshot_id {
            let _ = std::fs::remove_file(&received);
            return Err(snap_err(
                ErrorVerb::Read,
                format!("received {} but its file holds {}", meta.snapshot_id, got.snapshot_id),
            ));
        }
        // Current (durable) before it is installed: openraft purges the log
        // up to a received snapshot without waiting for the install
        // (`following_handler`), so from here on a restart must find this
        // file, not the previous one. `finish` synced its bytes, and the
        // writer's shutdown checked them (`snapshot_file.rs`). The previous
        // file goes only once this one is installed.
        let current = self.snapshot_dir.join(snapshot_file::complete_name(&meta.snapshot_id));
        {
            let _files = lock(&self.files);
            std::fs::rename(&received, &current).map_err(|e| snap_err(ErrorVerb::Write, e))?;
            snapshot_file::sync_dir(&self.snapshot_dir)
                .map_err(|e| snap_err(ErrorVerb::Write, e))?;
        }
        self.install_file(&current).await?;
        {
            let _files = lock(&self.files);
            snapshot_file::remove_older(&self.snapshot_dir, &current);
        }
        tracing::info!(shard = self.shard, snapshot = %meta.snapshot_id, "snapshot installed");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        // Chosen and opened under the lock: an open file stays readable
        // even if a newer build deletes its name afterwards.
        let (path, file) = {
            let _files = lock(&self.files);
            let Some(path) = snapshot_file::newest_complete(&self.snapshot_dir)
                .map_err(|e| snap_err(ErrorVerb::Read, e))?
            else {
                return Ok(None);
            };
            let file = std::fs::File::open(&path).map_err(|e| snap_err(ErrorVerb::Read, e))?;
            (path, file)
        };
        let header = {
            let mut f = BufReader::new(file.try_clone().map_err(|e| snap_err(ErrorVerb::Read, e))?);
            read_header(&mut f).map_err(|e| snap_err(ErrorVerb::Read, e))?
        };
        let meta: Meta = decode_header(&header).map_err(|e| snap_err(ErrorVerb::Read, e))?;
        let file = SnapshotFile::from_std(path, file);
        Ok(Some(Snapshot { meta, snapshot: Box::new(file) }))
    }
}
