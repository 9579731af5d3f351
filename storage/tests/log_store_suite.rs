//! `SledLogStore` against openraft's storage conformance suite, on a real sled
//! `Db` in a temporary directory, plus the durability properties the suite
//! cannot see: what survives dropping the `Db` and opening the directory again.
//!
//! The suite also drives a state machine; `MemStateMachine` below is only
//! scaffolding for it (the real one lives with the shards).

mod common;

use std::path::Path;

use common::{log_id, normal, payload, MemStateMachine, TestConfig};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{RaftLogReader, StorageError, StorageIOError, Vote};
use plaudit_storage::group_commit::GroupCommit;
use plaudit_storage::log_store::{SledLogStore, MAX_REPLICATION_READ_BYTES};
use tempfile::TempDir;

type Store = SledLogStore<TestConfig>;

// ---- the conformance suite -------------------------------------------------

/// Builds a fresh store per suite case: its own directory, `Db` and flusher.
struct Builder;

impl StoreBuilder<TestConfig, Store, MemStateMachine, TempDir> for Builder {
    async fn build(&self) -> Result<(TempDir, Store, MemStateMachine), StorageError<u64>> {
        let dir = tempfile::tempdir().map_err(|e| StorageIOError::write(&e))?;
        let db = sled::open(dir.path()).map_err(|e| StorageIOError::write(&e))?;
        let commit =
            GroupCommit::start(db.clone(), dir.path()).map_err(|e| StorageIOError::write(&e))?;
        let store =
            SledLogStore::open(&db, commit, "suite").map_err(|e| StorageIOError::write(&e))?;
        // The guard is the directory: dropped after the case, once the store is gone.
        Ok((dir, store, MemStateMachine::default()))
    }
}

#[test]
fn passes_openraft_storage_suite() {
    // The suite runs each case on its own fresh tokio runtime, so no #[tokio::test].
    Suite::test_all(Builder).expect("openraft storage suite");
}

// ---- durability across reopen ----------------------------------------------

/// What a node holds for one group: the `Db`, its flusher and the group's log.
struct Opened {
    db: sled::Db,
    commit: GroupCommit,
    store: Store,
}

fn open(dir: &Path) -> Opened {
    let db = sled::open(dir).expect("open sled");
    let commit = GroupCommit::start(db.clone(), dir).expect("start group commit");
    let store = SledLogStore::open(&db, commit.clone(), "g1").expect("open log store");
    Opened { db, commit, store }
}

impl Opened {
    /// Drops every handle; the last `GroupCommit` waits for its thread, so the
    /// directory can be opened again straight away (sled holds a file lock).
    fn close(self) {
        let Opened { db, commit, store } = self;
        drop(store);
        drop(commit);
        drop(db);
    }
}

#[tokio::test]
async fn entries_reported_durable_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = open(dir.path());
    // `blocking_append` returns once our callback reported the entries durable.
    node.store.blocking_append((1..=5).map(|i| normal(1, i, payload(i)))).await.unwrap();
    node.store.blocking_append((6..=10).map(|i| normal(2, i, payload(i)))).await.unwrap();
    node.close();

    let mut node = open(dir.path());
    let got = node.store.try_get_log_entries(..).await.unwrap();
    let want: Vec<_> =
        (1..=10).map(|i| normal(if i <= 5 { 1 } else { 2 }, i, payload(i))).collect();
    assert_eq!(got, want);
    let state = node.store.get_log_state().await.unwrap();
    assert_eq!(state.last_log_id, Some(log_id(2, 10)));
    assert_eq!(state.last_purged_log_id, None);
    node.close();
}

#[tokio::test]
async fn saved_vote_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = open(dir.path());
    assert_eq!(node.store.read_vote().await.unwrap(), None);
    let vote = Vote::new_committed(7, 3);
    node.store.save_vote(&vote).await.unwrap();
    node.close();

    let mut node = open(dir.path());
    assert_eq!(node.store.read_vote().await.unwrap(), Some(vote));
    node.close();
}

#[tokio::test]
async fn purge_point_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = open(dir.path());
    node.store.blocking_append((1..=10).map(|i| normal(1, i, payload(i)))).await.unwrap();
    node.store.purge(log_id(1, 4)).await.unwrap();
    // A purge is not flushed by itself; the next durable write carries it.
    node.store.save_vote(&Vote::new(1, 0)).await.unwrap();
    node.close();

    let mut node = open(dir.path());
    let state = node.store.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 4)));
    assert_eq!(state.last_log_id, Some(log_id(1, 10)));
    let got = node.store.try_get_log_entries(..).await.unwrap();
    assert_eq!(got.first().map(|e| e.log_id), Some(log_id(1, 5)));
    assert_eq!(got.len(), 6);
    node.close();
}

#[tokio::test]
async fn purging_everything_keeps_the_last_log_id_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = open(dir.path());
    node.store.blocking_append((1..=3).map(|i| normal(1, i, payload(i)))).await.unwrap();
    node.store.purge(log_id(1, 3)).await.unwrap();
    node.commit.flush().await.unwrap();
    node.close();

    let mut node = open(dir.path());
    let state = node.store.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 3)));
    assert_eq!(state.last_log_id, Some(log_id(1, 3)), "no entries left: last is the purge point");
    node.close();
}

#[tokio::test]
async fn committed_id_round_trips_and_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = open(dir.path());
    assert_eq!(node.store.read_committed().await.unwrap(), None);
    node.store.save_committed(Some(log_id(3, 42))).await.unwrap();
    node.commit.flush().await.unwrap();
    node.close();

    let mut node = open(dir.path());
    assert_eq!(node.store.read_committed().await.unwrap(), Some(log_id(3, 42)));
    node.close();
}

#[tokio::test]
async fn groups_sharing_a_db_do_not_see_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let node = open(dir.path());
    let mut other: Store = SledLogStore::open(&node.db, node.commit.clone(), "g2").unwrap();
    let mut g1 = node.store.clone();
    g1.blocking_append([normal(1, 1, payload(1))]).await.unwrap();
    assert!(other.try_get_log_entries(..).await.unwrap().is_empty());
    assert_eq!(other.get_log_state().await.unwrap().last_log_id, None);
    drop(other);
    drop(g1);
    node.close();
}

#[tokio::test]
async fn entries_larger_than_a_segment_survive_reopen() {
    // Over sled's ~128 KiB inline limit: stored as a blob file beside the log.
    let big = vec![0xAB; 600 << 10];
    let dir = tempfile::tempdir().unwrap();
    let mut node = open(dir.path());
    node.store
        .blocking_append([normal(1, 1, big.clone()), normal(1, 2, payload(2))])
        .await
        .unwrap();
    node.close();

    let mut node = open(dir.path());
    let got = node.store.try_get_log_entries(1..3).await.unwrap();
    assert_eq!(got, vec![normal(1, 1, big), normal(1, 2, payload(2))]);
    node.close();
}

#[tokio::test]
async fn replication_reads_are_bounded_in_bytes_but_never_empty() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = open(dir.path());
    let one_mib = vec![7u8; 1 << 20];
    node.store.blocking_append((1..=8).map(|i| normal(1, i, one_mib.clone()))).await.unwrap();

    let got = node.store.limited_get_log_entries(1, 9).await.unwrap();
    assert!(!got.is_empty() && got.len() < 8, "got {} entries", got.len());
    assert!(got.len() <= MAX_REPLICATION_READ_BYTES / (1 << 20));
    assert_eq!(got[0].log_id, log_id(1, 1));
    // A single entry above the budget still comes back.
    let got = node.store.limited_get_log_entries(8, 9).await.unwrap();
    assert_eq!(got.len(), 1);
    node.close();
}

#[tokio::test]
async fn truncate_removes_the_tail_and_appends_continue() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = open(dir.path());
    node.store.blocking_append((1..=6).map(|i| normal(1, i, payload(i)))).await.unwrap();
    node.store.truncate(log_id(1, 4)).await.unwrap();
    node.store.blocking_append((4..=5).map(|i| normal(2, i, payload(i)))).await.unwrap();
    node.close();

    let mut node = open(dir.path());
    let ids: Vec<_> =
        node.store.try_get_log_entries(..).await.unwrap().into_iter().map(|e| e.log_id).collect();
    assert_eq!(ids, vec![log_id(1, 1), log_id(1, 2), log_id(1, 3), log_id(2, 4), log_id(2, 5)]);
    node.close();
}
