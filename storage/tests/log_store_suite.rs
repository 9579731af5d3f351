//! `SledLogStore` against openraft's storage conformance suite, on a real sled
//! `Db` in a temporary directory, plus the durability properties the suite
//! cannot see: what survives dropping the `Db` and opening the directory again.
//!
//! The suite also drives a state machine; `MemStateMachine` below is only
//! scaffolding for it (the real one lives with the shards).

use std::io::Cursor;
use std::path::Path;
use std::sync::{Arc, Mutex};

use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{
    BasicNode, CommittedLeaderId, Entry, EntryPayload, LogId, OptionalSend, RaftLogReader,
    RaftSnapshotBuilder, Snapshot, SnapshotMeta, StorageError, StorageIOError, StoredMembership,
    Vote,
};
use plaudit_storage::group_commit::GroupCommit;
use plaudit_storage::log_store::{SledLogStore, MAX_REPLICATION_READ_BYTES};
use tempfile::TempDir;

openraft::declare_raft_types!(
    /// Application data is opaque bytes: enough to exercise the codec and
    /// large (out-of-segment) entries.
    pub TestConfig:
        D = Vec<u8>,
        R = (),
        SnapshotData = Cursor<Vec<u8>>,
);

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

fn log_id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 0), index)
}

fn normal(term: u64, index: u64, data: Vec<u8>) -> Entry<TestConfig> {
    Entry { log_id: log_id(term, index), payload: EntryPayload::Normal(data) }
}

fn payload(index: u64) -> Vec<u8> {
    format!("command {index}").into_bytes()
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

// ---- state machine scaffolding for the suite --------------------------------

/// Just enough of a state machine for the suite: applied id, membership, a
/// count of normal entries, and the last snapshot. Clones share state, which is
/// how the snapshot builder sees it.
#[derive(Clone, Default)]
struct MemStateMachine {
    state: Arc<Mutex<SmState>>,
}

#[derive(Default)]
struct SmState {
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, BasicNode>,
    applied_commands: u64,
    snapshot: Option<(SnapshotMeta<u64, BasicNode>, Vec<u8>)>,
    snapshots_built: u64,
}

impl MemStateMachine {
    fn lock(&self) -> std::sync::MutexGuard<'_, SmState> {
        self.state.lock().expect("state machine mutex poisoned by a failed test")
    }
}

impl RaftSnapshotBuilder<TestConfig> for MemStateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TestConfig>, StorageError<u64>> {
        let mut s = self.lock();
        s.snapshots_built += 1;
        let meta = SnapshotMeta {
            last_log_id: s.last_applied,
            last_membership: s.membership.clone(),
            snapshot_id: format!("snap-{}", s.snapshots_built),
        };
        let data = s.applied_commands.to_be_bytes().to_vec();
        s.snapshot = Some((meta.clone(), data.clone()));
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(data)) })
    }
}

impl RaftStateMachine<TestConfig> for MemStateMachine {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<u64>>, StoredMembership<u64, BasicNode>), StorageError<u64>> {
        let s = self.lock();
        Ok((s.last_applied, s.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<()>, StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<TestConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut s = self.lock();
        let mut replies = Vec::new();
        for entry in entries {
            s.last_applied = Some(entry.log_id);
            match entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(_) => s.applied_commands += 1,
                EntryPayload::Membership(m) => {
                    s.membership = StoredMembership::new(Some(entry.log_id), m)
                }
            }
            replies.push(());
        }
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<u64>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<u64>> {
        let data = snapshot.into_inner();
        let count = <[u8; 8]>::try_from(data.as_slice())
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        let mut s = self.lock();
        s.applied_commands = u64::from_be_bytes(count);
        s.last_applied = meta.last_log_id;
        s.membership = meta.last_membership.clone();
        s.snapshot = Some((meta.clone(), data));
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TestConfig>>, StorageError<u64>> {
        let s = self.lock();
        Ok(s.snapshot.as_ref().map(|(meta, data)| Snapshot {
            meta: meta.clone(),
            snapshot: Box::new(Cursor::new(data.clone())),
        }))
    }
}
