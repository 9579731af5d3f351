//! `FileLogStore` against openraft's storage conformance suite, plus what
//! the suite cannot see: what survives closing and opening the directory
//! again, torn and corrupt tails cut at recovery, segments that rotate and
//! go with purges, and a log moved over from sled's trees.

mod common;

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use common::{log_id, normal, payload, MemStateMachine, TestConfig};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{RaftLogReader, StorageError, StorageIOError, Vote};
use plaudit_storage::file_log::FileLogStore;
use plaudit_storage::group_commit::GroupCommit;
use plaudit_storage::log_store::SledLogStore;
use tempfile::TempDir;

type Store = FileLogStore<TestConfig>;

struct Builder;

impl StoreBuilder<TestConfig, Store, MemStateMachine, TempDir> for Builder {
    async fn build(&self) -> Result<(TempDir, Store, MemStateMachine), StorageError<u64>> {
        let dir = tempfile::tempdir().map_err(|e| StorageIOError::write(&e))?;
        let db = sled::open(dir.path().join("sled")).map_err(|e| StorageIOError::write(&e))?;
        let commit = GroupCommit::start(db, &dir.path().join("sled"))
            .map_err(|e| StorageIOError::write(&e))?;
        let store =
            Store::open(&dir.path().join("log"), commit).map_err(|e| StorageIOError::write(&e))?;
        Ok((dir, store, MemStateMachine::default()))
    }
}

#[test]
fn passes_openraft_storage_suite() {
    Suite::test_all(Builder).expect("openraft storage suite");
}

/// A node's flusher (over a sled `Db` of its own) and one group's log.
struct Node {
    commit: GroupCommit,
    store: Store,
    db: sled::Db,
}

fn log_dir(dir: &Path) -> PathBuf {
    dir.join("log")
}

fn open_sized(dir: &Path, segment_bytes: u64) -> Node {
    let db = sled::open(dir.join("sled")).expect("open sled");
    let commit = GroupCommit::start(db.clone(), &dir.join("sled")).expect("group commit");
    let store = Store::open_with_segment_bytes(&log_dir(dir), commit.clone(), segment_bytes)
        .expect("open log");
    Node { commit, store, db }
}

fn open(dir: &Path) -> Node {
    open_sized(dir, plaudit_storage::file_log::SEGMENT_BYTES)
}

impl Node {
    fn close(self) {
        let Node { commit, store, db } = self;
        drop(store);
        drop(commit);
        drop(db);
    }
}

fn segments(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(log_dir(dir))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("seg-"))
        .collect();
    names.sort();
    names
}

async fn indexes(store: &mut Store) -> Vec<u64> {
    store.try_get_log_entries(..).await.unwrap().into_iter().map(|e| e.log_id.index).collect()
}

#[tokio::test]
async fn entries_votes_and_purges_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = open(dir.path());
    node.store.blocking_append((1..=5).map(|i| normal(1, i, payload(i)))).await.unwrap();
    node.store.blocking_append((6..=10).map(|i| normal(2, i, payload(i)))).await.unwrap();
    node.store.save_vote(&Vote::new_committed(2, 0)).await.unwrap();
    node.store.save_committed(Some(log_id(2, 8))).await.unwrap();
    node.store.purge(log_id(1, 3)).await.unwrap();
    node.close();

    let mut node = open(dir.path());
    let got = node.store.try_get_log_entries(..).await.unwrap();
    let want: Vec<_> =
        (4..=10).map(|i| normal(if i <= 5 { 1 } else { 2 }, i, payload(i))).collect();
    assert_eq!(got, want);
    let state = node.store.get_log_state().await.unwrap();
    assert_eq!(state.last_log_id, Some(log_id(2, 10)));
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 3)));
    assert_eq!(node.store.read_vote().await.unwrap(), Some(Vote::new_committed(2, 0)));
    assert_eq!(node.store.read_committed().await.unwrap(), Some(log_id(2, 8)), "rode on the purge");
    node.close();
}

#[tokio::test]
async fn a_torn_or_corrupt_tail_is_cut_and_appends_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = open(dir.path());
    node.store.blocking_append((1..=4).map(|i| normal(1, i, payload(i)))).await.unwrap();
    node.close();
    let seg = log_dir(dir.path()).join(&segments(dir.path())[0]);
    let intact = std::fs::metadata(&seg).unwrap().len();
    // Half a record: a header announcing more than follows.
    let mut f = OpenOptions::new().append(true).open(&seg).unwrap();
    f.write_all(&[200, 0, 0, 0, 1, 2, 3, 4, 5, 0, 0, 0, 0, 0, 0, 0, 9, 9]).unwrap();
    drop(f);

    let mut node = open(dir.path());
    assert_eq!(indexes(&mut node.store).await, vec![1, 2, 3, 4]);
    assert_eq!(std::fs::metadata(&seg).unwrap().len(), intact, "the torn bytes are gone");
    node.store.blocking_append([normal(1, 5, payload(5))]).await.unwrap();
    node.close();

    // A flipped byte inside record 3: recovery keeps 1 and 2 only.
    let bytes = std::fs::read(&seg).unwrap();
    let third = (0..2).fold(0usize, |off, _| {
        off + 16 + u32::from_le_bytes(bytes[off..off + 4].try_into().unwrap()) as usize
    });
    let mut damaged = bytes.clone();
    damaged[third + 20] ^= 0xFF;
    std::fs::write(&seg, damaged).unwrap();
    let mut node = open(dir.path());
    assert_eq!(indexes(&mut node.store).await, vec![1, 2]);
    let state = node.store.get_log_state().await.unwrap();
    assert_eq!(state.last_log_id, Some(log_id(1, 2)));
    node.close();
}

#[tokio::test]
async fn segments_rotate_are_cut_by_truncate_and_go_with_purges() {
    let dir = tempfile::tempdir().unwrap();
    // Tiny segments: each append of two entries starts a new one.
    let mut node = open_sized(dir.path(), 1);
    for i in (1..=9).step_by(2) {
        node.store
            .blocking_append([normal(1, i, payload(i)), normal(1, i + 1, payload(i + 1))])
            .await
            .unwrap();
    }
    assert_eq!(segments(dir.path()).len(), 5);
    // Truncating inside the third segment deletes the fourth and fifth.
    node.store.truncate(log_id(1, 6)).await.unwrap();
    assert_eq!(segments(dir.path()).len(), 3);
    node.store.blocking_append([normal(2, 6, payload(6))]).await.unwrap();
    assert_eq!(indexes(&mut node.store).await, vec![1, 2, 3, 4, 5, 6]);
    // Purging through 4 deletes the two segments holding 1..=4.
    node.store.purge(log_id(1, 4)).await.unwrap();
    assert_eq!(segments(dir.path()).len(), 2);
    node.close();

    let mut node = open_sized(dir.path(), 1);
    let got = node.store.try_get_log_entries(..).await.unwrap();
    let ids: Vec<_> = got.iter().map(|e| e.log_id).collect();
    assert_eq!(ids, vec![log_id(1, 5), log_id(2, 6)]);
    node.close();
}

#[tokio::test]
async fn a_log_in_sled_trees_moves_over_once() {
    let dir = tempfile::tempdir().unwrap();
    let node = open(dir.path());
    let mut old: SledLogStore<TestConfig> =
        SledLogStore::open(&node.db, node.commit.clone(), "g1").unwrap();
    old.blocking_append((1..=6).map(|i| normal(1, i, payload(i)))).await.unwrap();
    old.purge(log_id(1, 2)).await.unwrap();
    old.save_vote(&Vote::new(3, 1)).await.unwrap();
    let mut store = node.store.clone();
    assert!(store.import(&mut old).await.unwrap());
    assert!(!store.import(&mut old).await.unwrap(), "a second start finds this log in place");
    assert_eq!(indexes(&mut store).await, vec![3, 4, 5, 6]);
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 2)));
    assert_eq!(store.read_vote().await.unwrap(), Some(Vote::new(3, 1)));
    drop((old, store));
    node.close();
}
