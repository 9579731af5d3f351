//! `FileLogStore` (a group's handle on the node's `Wal`) against openraft's
//! storage conformance suite, plus what the suite cannot see: what survives
//! closing and opening the directory again, groups that share the log,
//! torn and corrupt tails cut at recovery, segments that rotate and go, and
//! a log moved over from sled's trees.

mod common;

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use common::{log_id, normal, payload, MemStateMachine, TestConfig};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{LogId, RaftLogReader, StorageError, StorageIOError, Vote};
use plaudit_storage::file_log::FileLogStore;
use plaudit_storage::file_log::MAX_REPLICATION_READ_BYTES;
use plaudit_storage::group_commit::GroupCommit;
use plaudit_storage::sled_log;
use plaudit_storage::wal::Wal;
use tempfile::TempDir;

type Store = FileLogStore<TestConfig>;

struct Builder;

impl StoreBuilder<TestConfig, Store, MemStateMachine, TempDir> for Builder {
    async fn build(&self) -> Result<(TempDir, Store, MemStateMachine), StorageError<u64>> {
        let dir = tempfile::tempdir().map_err(|e| StorageIOError::write(&e))?;
        let db = sled::open(dir.path().join("sled")).map_err(|e| StorageIOError::write(&e))?;
        let commit = GroupCommit::start(db, &dir.path().join("sled"))
            .map_err(|e| StorageIOError::write(&e))?;
        let wal = Wal::open(&dir.path().join("log")).map_err(|e| StorageIOError::write(&e))?;
        let store = Store::open(wal, 7, commit);
        Ok((dir, store, MemStateMachine::default()))
    }
}

#[test]
fn passes_openraft_storage_suite() {
    Suite::test_all(Builder).expect("openraft storage suite");
}

/// A node's flusher (over a sled `Db` of its own), its log and group 1's handle.
struct Node {
    commit: GroupCommit,
    wal: std::sync::Arc<Wal>,
    store: Store,
    db: sled::Db,
}

fn log_dir(dir: &Path) -> PathBuf {
    dir.join("log")
}

fn open_sized(dir: &Path, segment_bytes: u64) -> Node {
    let db = sled::open(dir.join("sled")).expect("open sled");
    let commit = GroupCommit::start(db.clone(), &dir.join("sled")).expect("group commit");
    let wal = Wal::open_with_segment_bytes(&log_dir(dir), segment_bytes).expect("open log");
    let store = Store::open(wal.clone(), 1, commit.clone());
    Node { commit, wal, store, db }
}

fn open(dir: &Path) -> Node {
    open_sized(dir, plaudit_storage::wal::SEGMENT_BYTES)
}

impl Node {
    fn group(&self, id: u32) -> Store {
        Store::open(self.wal.clone(), id, self.commit.clone())
    }

    /// A clean stop, as the engine's: the log's buffer written and synced
    /// (a poisoned log refuses, as it would there).
    fn close(self) {
        let Node { commit, wal, store, db } = self;
        let _ = wal.sync_round();
        drop(store);
        drop(wal);
        drop(commit);
        drop(db);
    }
}

fn segments(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(log_dir(dir))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("wal-") && n.ends_with(".log"))
        .collect();
    names.sort();
    names
}

fn spares(dir: &Path) -> Vec<String> {
    std::fs::read_dir(log_dir(dir))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("wal-spare"))
        .collect()
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
    assert_eq!(node.store.read_committed().await.unwrap(), Some(log_id(2, 8)));
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
    f.write_all(&[200, 0, 0, 0, 1, 2, 3, 4, 1, 0, 0, 0, 1, 5, 0, 0, 0, 0, 0, 0, 0, 9, 9]).unwrap();
    drop(f);

    let mut node = open(dir.path());
    assert_eq!(indexes(&mut node.store).await, vec![1, 2, 3, 4]);
    assert_eq!(std::fs::metadata(&seg).unwrap().len(), intact, "the torn bytes are gone");
    node.store.blocking_append([normal(1, 5, payload(5))]).await.unwrap();
    node.close();

    // A flipped byte inside record 3: recovery keeps 1 and 2 only.
    let bytes = std::fs::read(&seg).unwrap();
    let third = (0..2).fold(0usize, |off, _| {
        off + 21 + u32::from_le_bytes(bytes[off..off + 4].try_into().unwrap()) as usize
    });
    let mut damaged = bytes.clone();
    damaged[third + 25] ^= 0xFF;
    std::fs::write(&seg, damaged).unwrap();
    let mut node = open(dir.path());
    assert_eq!(indexes(&mut node.store).await, vec![1, 2]);
    let state = node.store.get_log_state().await.unwrap();
    assert_eq!(state.last_log_id, Some(log_id(1, 2)));
    node.close();
}

#[tokio::test]
async fn groups_share_the_log_but_not_their_entries() {
    let dir = tempfile::tempdir().unwrap();
    let node = open(dir.path());
    let (mut a, mut b) = (node.group(1), node.group(2));
    a.blocking_append((1..=3).map(|i| normal(1, i, payload(i)))).await.unwrap();
    b.blocking_append((1..=2).map(|i| normal(5, i, b"b".to_vec()))).await.unwrap();
    a.truncate(log_id(1, 2)).await.unwrap();
    b.save_vote(&Vote::new(5, 2)).await.unwrap();
    assert_eq!(indexes(&mut a).await, vec![1]);
    assert_eq!(indexes(&mut b).await, vec![1, 2]);
    assert_eq!(a.read_vote().await.unwrap(), None);
    drop((a, b));
    node.close();

    let node = open(dir.path());
    let (mut a, mut b) = (node.group(1), node.group(2));
    assert_eq!(indexes(&mut a).await, vec![1], "the truncation was replayed");
    assert_eq!(b.try_get_log_entries(..).await.unwrap()[1], normal(5, 2, b"b".to_vec()));
    assert_eq!(b.read_vote().await.unwrap(), Some(Vote::new(5, 2)));
    drop((a, b));
    node.close();
}

#[tokio::test]
async fn segments_rotate_keep_hard_state_and_go_when_nothing_lives_in_them() {
    let dir = tempfile::tempdir().unwrap();
    // Small segments: about twenty one-entry appends each.
    let mut node = open_sized(dir.path(), 1000);
    let mut idle = node.group(2);
    idle.blocking_append([normal(1, 1, payload(1))]).await.unwrap();
    idle.save_vote(&Vote::new(1, 9)).await.unwrap();
    for i in 1..=300 {
        node.store.blocking_append([normal(1, i, payload(i))]).await.unwrap();
    }
    node.store.truncate(log_id(1, 290)).await.unwrap();
    node.store.purge(log_id(1, 250)).await.unwrap();
    for i in 290..=330 {
        node.store.blocking_append([normal(2, i, payload(i))]).await.unwrap();
    }
    // The idle group's one entry was copied forward, so the segments of
    // the purged entries went (at most 8 kept, plus the new one).
    let names = segments(dir.path());
    assert!(names.len() <= 9, "{names:?}");
    assert_ne!(names[0], "wal-00000000000000000001.log", "the first segment went");
    drop(idle);
    node.close();

    let mut node = open_sized(dir.path(), 1000);
    assert_eq!(indexes(&mut node.store).await, (251..=330).collect::<Vec<_>>());
    let got = node.store.try_get_log_entries(290..291).await.unwrap();
    assert_eq!(got, vec![normal(2, 290, payload(290))], "the entry after the truncation");
    let state = node.store.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 250)));
    let mut idle = node.group(2);
    assert_eq!(idle.try_get_log_entries(..).await.unwrap(), vec![normal(1, 1, payload(1))]);
    assert_eq!(idle.read_vote().await.unwrap(), Some(Vote::new(1, 9)));
    drop(idle);
    node.close();
}

/// Writes a log as builds before the WAL kept it in sled's trees
/// (`sled_log.rs` has the layout): `v1 | bincode` values.
fn write_old_log(db: &sled::Db, group: &str, entries: &[u64], purged: LogId<u64>, vote: Vote<u64>) {
    let v1 = |bytes: Vec<u8>| [vec![1u8], bytes].concat();
    let log = db.open_tree(format!("raft/{group}/log")).unwrap();
    for &i in entries {
        let entry = normal(1, i, payload(i));
        log.insert(i.to_be_bytes(), v1(plaudit_proto::codec::to_bytes(&entry).unwrap())).unwrap();
    }
    let meta = db.open_tree(format!("raft/{group}/meta")).unwrap();
    meta.insert("last_purged", v1(plaudit_proto::codec::to_bytes(&purged).unwrap())).unwrap();
    meta.insert("vote", v1(plaudit_proto::codec::to_bytes(&vote).unwrap())).unwrap();
}

#[tokio::test]
async fn a_log_in_sled_trees_moves_over_once() {
    let dir = tempfile::tempdir().unwrap();
    let node = open(dir.path());
    write_old_log(&node.db, "g1", &[3, 4, 5, 6], log_id(1, 2), Vote::new(3, 1));
    assert!(sled_log::read::<TestConfig>(&node.db, "g2").unwrap().is_none(), "no trees, no log");
    let old = || sled_log::read::<TestConfig>(&node.db, "g1").unwrap().expect("the old log");
    let mut store = node.store.clone();
    // What a move interrupted after its purge record, before its vote, left.
    store.blocking_append((3..=4).map(|i| normal(1, i, payload(i)))).await.unwrap();
    store.purge(log_id(1, 2)).await.unwrap();
    assert!(store.import(old()).await.unwrap(), "no vote yet: the move runs again");
    assert!(!store.import(old()).await.unwrap(), "a second start finds this log in place");
    assert_eq!(indexes(&mut store).await, vec![3, 4, 5, 6]);
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 2)));
    assert_eq!(store.read_vote().await.unwrap(), Some(Vote::new(3, 1)));
    sled_log::drop_trees(&node.db, "g1").unwrap();
    assert!(sled_log::read::<TestConfig>(&node.db, "g1").unwrap().is_none(), "the trees went");
    drop(store);
    node.close();
}

/// The sled store recorded its purge point before it deleted entries, so
/// an old log may still hold entries up to that point: after the move,
/// reads (served from the newest entries kept in memory when they can be)
/// see the log as purged.
#[tokio::test]
async fn entries_an_old_log_kept_up_to_its_purge_point_stay_purged() {
    let dir = tempfile::tempdir().unwrap();
    let node = open(dir.path());
    write_old_log(&node.db, "g1", &[1, 2, 3, 4, 5], log_id(1, 3), Vote::new(3, 1));
    let old = sled_log::read::<TestConfig>(&node.db, "g1").unwrap().expect("the old log");
    let mut store = node.store.clone();
    assert!(store.import(old).await.unwrap());
    assert_eq!(indexes(&mut store).await, vec![4, 5]);
    let from_one = store.try_get_log_entries(1..6).await.unwrap();
    assert_eq!(from_one.iter().map(|e| e.log_id.index).collect::<Vec<_>>(), vec![4, 5]);
    // Appends after the move are read back whole.
    store.blocking_append([normal(1, 6, payload(6))]).await.unwrap();
    assert_eq!(indexes(&mut store).await, vec![4, 5, 6]);
    drop(store);
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
async fn purging_everything_keeps_the_last_log_id_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = open(dir.path());
    node.store.blocking_append((1..=3).map(|i| normal(1, i, payload(i)))).await.unwrap();
    node.store.purge(log_id(1, 3)).await.unwrap();
    node.close();

    let mut node = open(dir.path());
    let state = node.store.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 3)));
    assert_eq!(state.last_log_id, Some(log_id(1, 3)), "no entries left: last is the purge point");
    node.close();
}

/// A segment started from a spare (zeros made ahead, `wal.rs`) recovers to
/// exactly its records and keeps its zeros for appends; bytes past a zero
/// gap (a record written back before an earlier one) are cut, so they can
/// never line up with a later append and come back.
#[tokio::test]
async fn segments_made_ahead_as_zeros_recover_to_their_records() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = open_sized(dir.path(), 4000);
    let mut last = 0;
    // Past half of the first segment a spare is made; once it is ready,
    // the next rotation starts the second segment in it.
    while segments(dir.path()).len() < 2 {
        last += 1;
        assert!(last < 10_000, "no second segment");
        node.store.blocking_append([normal(1, last, payload(last))]).await.unwrap();
        // Each append here is ~35 bytes: past half of 4000 after ~60.
        if segments(dir.path()).len() == 1 && last >= 70 {
            let mut waited = 0;
            while !node.wal.spare_ready() {
                waited += 1;
                assert!(waited < 2_000, "no spare made");
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        }
    }
    let second = log_dir(dir.path()).join(&segments(dir.path())[1]);
    let made = std::fs::metadata(&second).unwrap().len();
    assert!(made > 4000, "the second segment is a spare of zeros ({made} bytes)");
    node.close();

    let mut node = open_sized(dir.path(), 4000);
    assert_eq!(indexes(&mut node.store).await, (1..=last).collect::<Vec<_>>());
    assert_eq!(std::fs::metadata(&second).unwrap().len(), made, "its zeros are kept");
    assert!(spares(dir.path()).is_empty(), "no spare is left at open");
    last += 1;
    node.store.blocking_append([normal(1, last, payload(last))]).await.unwrap();
    node.close();

    // A stray byte far past the records, after zeros: cut with the zeros.
    let mut f = OpenOptions::new().write(true).open(&second).unwrap();
    std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(made - 100)).unwrap();
    f.write_all(&[7]).unwrap();
    drop(f);
    let mut node = open_sized(dir.path(), 4000);
    assert_eq!(indexes(&mut node.store).await, (1..=last).collect::<Vec<_>>());
    let cut = std::fs::metadata(&second).unwrap().len();
    assert!(cut < 4000, "the tail after the gap is gone ({cut} bytes left)");
    last += 1;
    node.store.blocking_append([normal(1, last, payload(last))]).await.unwrap();
    node.close();
    let mut node = open_sized(dir.path(), 4000);
    assert_eq!(indexes(&mut node.store).await, (1..=last).collect::<Vec<_>>());
    node.close();
}

/// A segment that started without a spare (a fresh log) asks for one
/// early (at 1/64 of a segment) and gives way to it as soon as it is
/// ready, long before it is full: appends to a growing file make every
/// sync write its inode too.
#[tokio::test]
async fn a_segment_started_empty_gives_way_to_a_spare_early() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = open_sized(dir.path(), 1 << 20);
    let mut last = 0;
    while !node.wal.spare_ready() {
        last += 1;
        assert!(last < 20_000, "no spare asked for");
        node.store.blocking_append([normal(1, last, payload(last))]).await.unwrap();
        if last % 100 == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
    last += 1;
    node.store.blocking_append([normal(1, last, payload(last))]).await.unwrap();
    let names = segments(dir.path());
    assert_eq!(names.len(), 2, "the first segment gave way: {names:?}");
    let first = std::fs::metadata(log_dir(dir.path()).join(&names[0])).unwrap().len();
    assert!(first < 1 << 18, "it was far from full ({first} bytes)");
    let second = std::fs::metadata(log_dir(dir.path()).join(&names[1])).unwrap().len();
    assert!(second > 1 << 20, "the second segment is the spare ({second} bytes)");
    for i in last + 1..=last + 20 {
        node.store.blocking_append([normal(1, i, payload(i))]).await.unwrap();
    }
    assert_eq!(segments(dir.path()).len(), 2, "appends stay in the spare");
    node.close();
    let mut node = open_sized(dir.path(), 1 << 20);
    assert_eq!(indexes(&mut node.store).await, (1..=last + 20).collect::<Vec<_>>());
    node.close();
}

/// No spare is made where the disk would keep less than its floor after it
/// (the node's write reserve): segments then start empty, as before; and a
/// spare left by a crash is removed at open.
#[tokio::test]
async fn no_spare_eats_the_disk_reserve_and_stale_spares_go() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = open_sized(dir.path(), 4000);
    node.wal.set_spare_floor(u64::MAX / 4);
    let mut last = 0;
    while segments(dir.path()).len() < 3 {
        last += 1;
        assert!(last < 10_000, "no third segment");
        node.store.blocking_append([normal(1, last, payload(last))]).await.unwrap();
        assert!(!node.wal.spare_ready() && spares(dir.path()).is_empty(), "a spare was made");
    }
    for name in &segments(dir.path())[1..] {
        let len = std::fs::metadata(log_dir(dir.path()).join(name)).unwrap().len();
        assert!(len < 4000 + 1000, "{name} started empty ({len} bytes)");
    }
    node.close();
    std::fs::write(log_dir(dir.path()).join("wal-spare-1-0.tmp"), [0u8; 64]).unwrap();
    let mut node = open_sized(dir.path(), 4000);
    assert!(spares(dir.path()).is_empty(), "a stale spare is removed");
    assert_eq!(indexes(&mut node.store).await, (1..=last).collect::<Vec<_>>());
    node.close();
}

/// After a failed sync the log takes no more appends, from any group: a
/// later sync could report clean over pages the kernel dropped.
#[tokio::test]
async fn a_failed_sync_stops_every_append() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = open(dir.path());
    node.store.blocking_append([normal(1, 1, payload(1))]).await.unwrap();
    node.wal.poison_on(&Ok(()));
    node.store.blocking_append([normal(1, 2, payload(2))]).await.unwrap();
    node.wal.poison_on(&Err(std::io::Error::other("EIO")));
    assert!(node.store.blocking_append([normal(1, 3, payload(3))]).await.is_err());
    let mut other = node.group(2);
    assert!(other.save_vote(&Vote::new(1, 1)).await.is_err(), "other groups stop too");
    drop(other);
    node.close();
    // A restart recovers what is on disk and appends again.
    let mut node = open(dir.path());
    assert_eq!(indexes(&mut node.store).await, vec![1, 2]);
    node.store.blocking_append([normal(1, 3, payload(3))]).await.unwrap();
    node.close();
}
