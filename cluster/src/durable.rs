//! Brings a node's applied state back at start: every group's newest
//! complete snapshot file is installed into the store, before anything reads
//! it (the registry view is loaded from it next). Applied state lives in
//! memory; the snapshot files and the Raft log after them are its durable
//! copy (`state_machine.rs`), and openraft replays the log from the applied
//! id each snapshot holds.
//!
//! Group directories are `<data_dir>/snapshots/meta` (the metadata group,
//! whose snapshots include the registry) and `.../shard<N>`.

use crate::group::Group;
use crate::layout::Layout;
use crate::snapshot_file;
use openraft::{BasicNode, SnapshotMeta};
use plaudit_storage::snapshot::{decode_header, read_header};
use plaudit_storage::StateStore;
use std::io::BufReader;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// `load_snapshots` on the blocking pool.
pub async fn load(
    store: &StateStore,
    data_dir: &Path,
    meta_id: u32,
    layout: Layout,
) -> anyhow::Result<()> {
    let (store, dir) = (store.clone(), data_dir.to_path_buf());
    tokio::task::spawn_blocking(move || load_snapshots(&store, &dir, meta_id, layout)).await?
}

/// Installs the newest snapshot of every group found under `data_dir`, two
/// groups at a time (decoding and inserting is CPU-bound: 6.3M keys took
/// 3.2 s on one core). Blocking: the caller runs it off the runtime's workers.
/// A group's file holds every shard it hosts (`layout`).
pub fn load_snapshots(
    store: &StateStore,
    data_dir: &Path,
    meta_id: u32,
    layout: Layout,
) -> anyhow::Result<()> {
    let root = data_dir.join("snapshots");
    let entries = match std::fs::read_dir(&root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let mut work = Vec::new();
    for entry in entries {
        let dir = entry?.path();
        let Some((shard, is_meta)) = group_of(&dir, meta_id) else { continue };
        promote_installing(&dir)?;
        if let Some(path) = snapshot_file::newest_complete(&dir)? {
            work.push((shard, is_meta, path));
        }
    }
    let started = std::time::Instant::now();
    let groups = work.len();
    let work = std::sync::Mutex::new(work);
    let next = || work.lock().unwrap_or_else(|e| e.into_inner()).pop();
    let load_all = || -> anyhow::Result<u64> {
        let mut items = 0;
        while let Some((shard, is_meta, path)) = next() {
            let load = || -> anyhow::Result<u64> {
                let mut input = BufReader::with_capacity(1 << 20, std::fs::File::open(&path)?);
                read_header(&mut input)?;
                Ok(store.install_many(&layout.shards_of(shard), is_meta, &mut input)?.items)
            };
            // A snapshot that cannot be read leaves the group without a
            // state to replay its log onto: the node must not serve it.
            items += load().map_err(|e| {
                anyhow::anyhow!("shard {shard}: loading its snapshot {}: {e}", path.display())
            })?;
        }
        Ok(items)
    };
    let items = std::thread::scope(|s| {
        let other = s.spawn(load_all);
        let mine = load_all();
        let theirs = other.join().unwrap_or_else(|_| Err(anyhow::anyhow!("a loader panicked")));
        anyhow::Ok(mine? + theirs?)
    })?;
    if groups > 0 {
        let ms = started.elapsed().as_millis() as u64;
        tracing::info!(groups, items, ms, "state loaded from snapshots");
    }
    Ok(())
}

/// Gives an `installing.snap` its complete name. Older versions renamed a
/// received snapshot (complete and synced) to `installing.snap` before
/// installing it, and openraft may have purged the log up to it already:
/// if a crash interrupted that install, this file, not an older one, is
/// what the group must start from.
fn promote_installing(dir: &Path) -> anyhow::Result<()> {
    let installing = dir.join("installing.snap");
    if !installing.exists() {
        return Ok(());
    }
    let header = snapshot_file::read_meta_header(&installing)?;
    let meta: SnapshotMeta<u64, BasicNode> = decode_header(&header)?;
    let complete = dir.join(snapshot_file::complete_name(&meta.snapshot_id));
    tracing::warn!(snapshot = %meta.snapshot_id, "promoting a snapshot whose install a crash interrupted");
    std::fs::rename(&installing, &complete)?;
    snapshot_file::sync_dir(dir)?;
    snapshot_file::remove_older(dir, &complete);
    Ok(())
}

/// The data groups with a snapshot directory under `data_dir`.
pub(crate) fn snapshot_groups(data_dir: &Path, meta_id: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(data_dir.join("snapshots")) else { return Vec::new() };
    entries
        .filter_map(|e| group_of(&e.ok()?.path(), meta_id))
        .filter(|(_, is_meta)| !is_meta)
        .map(|(g, _)| g)
        .collect()
}

/// The group a snapshot directory belongs to: `(shard id, is the metadata group)`.
fn group_of(dir: &Path, meta_id: u32) -> Option<(u32, bool)> {
    let name = dir.file_name()?.to_str()?;
    if name == "meta" {
        return Some((meta_id, true));
    }
    Some((name.strip_prefix("shard")?.parse().ok()?, false))
}

/// How long a stop waits, in all, for the groups' last snapshots.
const SNAPSHOT_AT_STOP: Duration = Duration::from_secs(20);

/// Has every group take a snapshot of what it applied, at a stop. Applied
/// state lives in memory: this lets the next start load it instead of
/// replaying the log since the last snapshot (up to
/// `snapshot_every_entries` entries per group). Bounded: a stop must not
/// hang on a group that cannot snapshot.
pub(crate) async fn snapshot_all(groups: &[Arc<Group>]) {
    let deadline = tokio::time::Instant::now() + SNAPSHOT_AT_STOP;
    for g in groups {
        snapshot_now(g, deadline).await;
    }
}

/// Has `g` take a snapshot of what it applied, unless its newest one holds
/// it already, and waits for it until `deadline`.
async fn snapshot_now(g: &Group, deadline: tokio::time::Instant) {
    let m = g.raft.metrics().borrow().clone();
    let applied = m.last_applied.map(|l| l.index);
    if m.snapshot.map(|l| l.index) >= applied {
        return;
    }
    if g.raft.trigger().snapshot().await.is_err() {
        return;
    }
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    let done = g
        .raft
        .wait(Some(left))
        .metrics(|m| m.snapshot.map(|l| l.index) >= applied, "snapshot at stop")
        .await;
    if let Err(e) = done {
        tracing::warn!(shard = g.gid, error = %e, "no snapshot at stop: the next start replays the log");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_dirs_name_their_groups() {
        assert_eq!(group_of(Path::new("/d/snapshots/meta"), 8), Some((8, true)));
        assert_eq!(group_of(Path::new("/d/snapshots/shard3"), 8), Some((3, false)));
        assert_eq!(group_of(Path::new("/d/snapshots/other"), 8), None);
        assert_eq!(group_of(Path::new("/d/snapshots/shardx"), 8), None);
    }
}
