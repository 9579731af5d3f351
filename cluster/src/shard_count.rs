//! The shard count a data directory was made with, recorded in
//! `<data_dir>/shards` and checked at every start.
//!
//! Why: the count is configuration (`shards`), but the data depends on it.
//! A key's shard is a hash modulo the count, and the metadata group's id is
//! the count itself; a node restarted on the same directory with another
//! count would read a data group's log as the registry's (or the other
//! way round) and look for every key on another shard. So a node refuses
//! to start with a count other than the one its directory was made with.
//!
//! A directory from before the record has none: its Raft log still tells
//! when the count asked for is too small (a group id above it; the
//! metadata group's id is the count and every data group's is below it).
//! A larger count cannot be told apart from the log alone (a node need not
//! hold the metadata group), so such a directory takes the count it is
//! started with, as before, and keeps it from then on.

use crate::layout::Layout;
use anyhow::{bail, Context};
use std::io::Write;
use std::path::Path;

/// The record's file name, in the data directory.
pub const FILE: &str = "shards";

/// Fails unless `shards` is the count the data directory `dir` was made
/// with (`log_groups`: the group ids its Raft log holds records of);
/// records the count if the directory has no record yet.
pub fn check(dir: &Path, shards: u32, log_groups: &[u32]) -> anyhow::Result<()> {
    let path = dir.join(FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let made: u32 = text.trim().parse().with_context(|| {
                format!("{} holds {:?}, not a shard count", path.display(), text.trim())
            })?;
            if made != shards {
                bail!(mismatch(made, shards));
            }
            return Ok(());
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    }
    if let Some(&top) = log_groups.iter().max() {
        if top > shards {
            bail!(mismatch(top, shards));
        }
    }
    record(dir, shards).with_context(|| format!("writing {}", path.display()))
}

/// The group-count record's file name, in the data directory.
pub const GROUPS_FILE: &str = "groups";

/// Fails unless `layout`'s group count is the one the data directory `dir`
/// was made with; records it if the directory has no record yet. A
/// directory from before the record was made with one group per shard: it
/// takes no other count (its state and snapshots are per shard), so a
/// count other than one per shard is recorded only in a directory with no
/// Raft log and no snapshot yet (`log_groups` empty, `snapshot_groups`
/// false).
pub fn check_groups(
    dir: &Path,
    layout: Layout,
    log_groups: &[u32],
    snapshot_groups: bool,
) -> anyhow::Result<()> {
    let path = dir.join(GROUPS_FILE);
    let wrong = |made: String| {
        format!(
            "the data directory was made with {made} Raft groups and this node was started \
             with {}: which group hosts a shard depends on the count, so start it with the \
             count it was made with (groups = ...), or on an empty data directory",
            layout.groups()
        )
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let made: u32 = text.trim().parse().with_context(|| {
                format!("{} holds {:?}, not a group count", path.display(), text.trim())
            })?;
            if made != layout.groups() {
                bail!(wrong(made.to_string()));
            }
            return Ok(());
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    }
    let identity = layout.groups() == layout.shards();
    if !identity && (!log_groups.is_empty() || snapshot_groups) {
        bail!(wrong("one per shard".into()));
    }
    write_record(dir, GROUPS_FILE, layout.groups())
        .with_context(|| format!("writing {}", path.display()))
}

fn mismatch(made: u32, asked: u32) -> String {
    format!(
        "the data directory was made with {made} shards and this node was started with \
         {asked}: a key's shard and the registry's group depend on the count, so start it \
         with shards = {made} (--shards {made}), or on an empty data directory"
    )
}

fn record(dir: &Path, shards: u32) -> std::io::Result<()> {
    write_record(dir, FILE, shards)
}

/// Writes a record durably: a temporary file, synced, renamed, and the
/// directory synced (a crash leaves the old state or the new, never half).
fn write_record(dir: &Path, name: &str, n: u32) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    writeln!(f, "{n}")?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(name))?;
    crate::snapshot_file::sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_keeps_its_group_count() {
        let dir = tempfile::tempdir().unwrap();
        check_groups(dir.path(), Layout::new(6, 1), &[], false).unwrap();
        check_groups(dir.path(), Layout::new(6, 1), &[0, 6], true).unwrap();
        let err = check_groups(dir.path(), Layout::new(6, 0), &[], false).unwrap_err().to_string();
        assert!(err.contains("made with 1 Raft groups"), "{err}");
        // From before the record: one group per shard, whatever ids its log
        // holds (all of them groups of the new layout too here), or only
        // snapshots.
        let old = tempfile::tempdir().unwrap();
        let err = check_groups(old.path(), Layout::new(6, 3), &[0, 1, 2, 6], false).unwrap_err();
        assert!(err.to_string().contains("one per shard"), "{err}");
        let err = check_groups(old.path(), Layout::new(6, 3), &[], true).unwrap_err();
        assert!(err.to_string().contains("one per shard"), "{err}");
        check_groups(old.path(), Layout::new(6, 0), &[0, 3, 6], true).unwrap();
    }

    #[test]
    fn a_new_directory_records_its_count_and_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        check(dir.path(), 4, &[]).unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join(FILE)).unwrap(), "4\n");
        check(dir.path(), 4, &[0, 3, 4]).unwrap();
        let err = check(dir.path(), 16, &[]).unwrap_err().to_string();
        assert!(err.contains("made with 4 shards") && err.contains("--shards 4"), "{err}");
        let err = check(dir.path(), 2, &[]).unwrap_err().to_string();
        assert!(err.contains("made with 4 shards"), "{err}");
    }

    #[test]
    fn a_directory_without_a_record_is_checked_against_its_log() {
        let dir = tempfile::tempdir().unwrap();
        // Made with 16 shards (data groups 0..16, the registry's 16).
        let err = check(dir.path(), 6, &[0, 5, 16]).unwrap_err().to_string();
        assert!(err.contains("made with 16 shards"), "{err}");
        assert!(!dir.path().join(FILE).exists(), "nothing recorded on a refusal");
        check(dir.path(), 16, &[0, 5, 16]).unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join(FILE)).unwrap(), "16\n");
    }

    #[test]
    fn a_damaged_record_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE), "sixteen\n").unwrap();
        let err = check(dir.path(), 16, &[]).unwrap_err().to_string();
        assert!(err.contains("not a shard count"), "{err}");
    }
}
