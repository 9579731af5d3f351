//! Snapshots through openraft's state machine API, between two "replicas"
//! (two data directories), as a follower that lags behind a purged log
//! receives them:
//!
//! - export -> install -> compare: the follower's state equals the
//!   leader's, and the metadata group's snapshot carries the registry (the
//!   follower's registry view is reloaded);
//! - a restart brings back exactly the newest snapshot's state (applied
//!   state lives in memory; the snapshot is its durable copy) and drops a
//!   transfer a crash interrupted; an `installing.snap` an older version
//!   left is promoted and loaded.

use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, RaftSnapshotBuilder};
use plaudit_actors::command::{Dedup, ScoreCmd, ScoreEvent};
use plaudit_actors::rankings::board::Rules;
use plaudit_actors::{Batch, CmdResult, Command, Directory, ShardActor, ShardConfig, ShardHandle};
use plaudit_cluster::state_machine::ShardStateMachine;
use plaudit_cluster::types::TypeConfig;
use plaudit_proto::business::CreateBiz;
use plaudit_proto::likes::LikeRequest;
use plaudit_proto::rankings::{Aggregation, TieMode};
use plaudit_proto::scoring::{BoardQuery, Outcome};
use plaudit_proto::{BizConfig, LikeAction};
use plaudit_storage::StateStore;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

struct Replica {
    _dir: tempfile::TempDir,
    _db: sled::Db,
    sm: ShardStateMachine,
}

const SHARD: u32 = 1;

async fn replica(is_meta: bool) -> Replica {
    replica_with(is_meta, 100).await
}

/// A replica that holds at most `budget` actors and boards.
async fn replica_with(is_meta: bool, budget: usize) -> Replica {
    let dir = tempfile::tempdir().unwrap();
    let (db, sm) = open_with(dir.path(), is_meta, budget).await;
    Replica { _dir: dir, _db: db, sm }
}

/// Opens sled at `path`, waiting for the file lock of an earlier handle in
/// this process: the last clone of a dropped `Db` (the group-commit thread,
/// a checkpoint on the blocking pool) may still be letting go of it (seen
/// once: "could not acquire lock").
async fn open_db(path: &Path) -> sled::Db {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match sled::Config::new().path(path).flush_every_ms(None).open() {
            Ok(db) => return db,
            Err(e) if std::time::Instant::now() < deadline && e.to_string().contains("lock") => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => panic!("opening sled at {}: {e}", path.display()),
        }
    }
}

/// Opens a replica in `dir` as the engine does at start: the store, then
/// the group's newest snapshot loaded into it.
async fn open(dir: &Path, is_meta: bool) -> (sled::Db, ShardStateMachine) {
    open_with(dir, is_meta, 100).await
}

async fn open_with(dir: &Path, is_meta: bool, budget: usize) -> (sled::Db, ShardStateMachine) {
    let db = open_db(&dir.join("sled")).await;
    let store = StateStore::open(&db).unwrap();
    plaudit_cluster::durable::load_snapshots(
        &store,
        dir,
        SHARD,
        plaudit_cluster::layout::Layout::new(SHARD, 0),
    )
    .unwrap();
    let directory = Directory::load(&store).unwrap();
    let handle = spawn_shard(SHARD, is_meta, budget, &store, &directory).await;
    let sm = ShardStateMachine {
        shard: SHARD,
        is_meta,
        shards: vec![(SHARD, handle)],
        store,
        directory,
        snapshot_dir: dir.join("snapshots").join(if is_meta { "meta" } else { "shard1" }),
        wal: plaudit_storage::wal::Wal::open(&dir.join("raft")).unwrap(),
        files: Default::default(),
    };
    (db, sm)
}

/// The actor of `shard` (of four) on `store`, holding at most `budget`
/// actors and boards.
async fn spawn_shard(
    shard: u32,
    is_meta: bool,
    budget: usize,
    store: &StateStore,
    directory: &Directory,
) -> ShardHandle {
    let actor = ShardActor {
        cfg: ShardConfig {
            shard,
            shard_count: 4,
            is_meta,
            actor_budget: plaudit_actors::active::Budget::new(budget),
            actor_idle: Duration::from_secs(60),
        },
        store: store.clone(),
        directory: directory.clone(),
        outbox: Arc::default(),
        gauges: Arc::default(),
        boards: Default::default(),
    };
    ShardHandle::spawn(actor).await.unwrap()
}

fn entry(index: u64, cmds: Vec<Command>) -> Entry<TypeConfig> {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(2, 1), index),
        payload: EntryPayload::Normal(Batch::new(1000 + index, cmds)),
    }
}

fn like(user: u64, entity: u64, action: LikeAction) -> Command {
    Command::Like(LikeRequest { biz: 3, entity, user, owner: Some(9), action })
}

/// The test board's type key: one that routes to `SHARD` (a shard answers
/// `Moved` for a board it does not hold, `rankings/residence.rs`).
fn board_key() -> Vec<u8> {
    (0..=u8::MAX)
        .map(|n| vec![1, 2, n])
        .find(|k| plaudit_proto::routing::board_shard(4, k, 4) == SHARD)
        .expect("some key routes to the shard")
}

fn score(item: u64, event_id: u64) -> Command {
    scored(item, 10, event_id)
}

fn scored(item: u64, score: i64, event_id: u64) -> Command {
    Command::ScoreV2(ScoreCmd {
        rank: 4,
        type_key: board_key(),
        item,
        aggregation: Aggregation::Incr,
        ties: TieMode::EarlierFirst,
        cap: 100,
        events: vec![ScoreEvent { score, sub: None, event_id }],
        dedup: Dedup::DEFAULT,
    })
}

/// A hash of the replica's state (what a snapshot of it holds) and its
/// applied id: equal hashes at the same id mean the same keys and values.
async fn dump(r: &Replica) -> (Option<Vec<u8>>, u64) {
    r.sm.digest().await.unwrap()
}

/// Copies a snapshot's bytes as the chunked transfer would.
async fn transfer(
    from: &mut Replica,
    to: &mut Replica,
) -> openraft::SnapshotMeta<u64, openraft::BasicNode> {
    let snap = from.sm.get_snapshot_builder().await.build_snapshot().await.unwrap();
    let bytes = std::fs::read(snap.snapshot.path()).unwrap();
    let mut incoming = to.sm.begin_receiving_snapshot().await.unwrap();
    incoming.write_all(&bytes).await.unwrap();
    incoming.shutdown().await.unwrap();
    to.sm.install_snapshot(&snap.meta, incoming).await.unwrap();
    snap.meta
}

#[tokio::test]
async fn a_follower_installs_the_leaders_snapshot_and_holds_the_same_state() {
    let mut leader = replica(false).await;
    let mut follower = replica(false).await;
    let mut cmds = Vec::new();
    for u in 0..300 {
        cmds.push(like(u, u % 17, LikeAction::Like));
        cmds.push(score(u % 50, u));
    }
    leader
        .sm
        .apply(vec![entry(1, cmds), entry(2, vec![like(5, 5, LikeAction::Dislike)])])
        .await
        .unwrap();
    // The follower has state of its own that the snapshot must replace.
    follower.sm.apply(vec![entry(1, vec![like(999, 1, LikeAction::Like)])]).await.unwrap();

    let meta = transfer(&mut leader, &mut follower).await;
    assert_eq!(meta.last_log_id.map(|l| l.index), Some(2));
    assert_eq!(dump(&follower).await, dump(&leader).await);
    let (applied, _) = follower.sm.applied_state().await.unwrap();
    assert_eq!(applied, meta.last_log_id);
    // The follower's actors were reset: a later entry applies on the new state.
    follower.sm.apply(vec![entry(3, vec![like(5, 5, LikeAction::Undislike)])]).await.unwrap();
    leader.sm.apply(vec![entry(3, vec![like(5, 5, LikeAction::Undislike)])]).await.unwrap();
    assert_eq!(dump(&follower).await, dump(&leader).await);
    // The snapshot is kept as the follower's current one, to serve on.
    let current = follower.sm.get_current_snapshot().await.unwrap().expect("a current snapshot");
    assert_eq!(current.meta.snapshot_id, meta.snapshot_id);
}

/// The whole of the test board of ranking 4 as `r` answers it.
async fn board(r: &Replica) -> String {
    let rules = Rules { aggregation: Aggregation::Incr, ties: TieMode::EarlierFirst, cap: 100 };
    let top = BoardQuery::Top { offset: 0, limit: 1000 };
    format!("{:?}", r.sm.shards[0].1.board_query(4, board_key(), rules, top).await.unwrap())
}

/// A board the shard holds is the truth, and its tree rows may be stale
/// (only its first batch and a write-back store them): a snapshot takes the
/// held board's image. The snapshot must not depend on which boards a
/// replica happens to hold: one replica holds the board throughout, the
/// other (a budget of 0) writes it back after every apply. Without the
/// images, the first replica's snapshot would lack everything after the
/// board's first batch.
#[tokio::test]
async fn a_snapshot_holds_a_held_boards_changes_whichever_boards_a_replica_holds() {
    let mut holding = replica_with(false, 100).await;
    let mut letting_go = replica_with(false, 0).await;
    for r in [&mut holding, &mut letting_go] {
        let first: Vec<_> = (0..100).map(|u| scored(u % 50, u as i64, u)).collect();
        // Past the cap of 100 members, 200 event ids (four records): members
        // leave the board, and old records are rewritten.
        let second: Vec<_> = (0..300).map(|u| scored(u % 140, (u % 7) as i64, 1000 + u)).collect();
        // The board is new in the first call, which stores it whole; the
        // second call's changes are only in the held board (and retries
        // of the first call's events change nothing).
        r.sm.apply(vec![entry(1, first)]).await.unwrap();
        let retries: Vec<_> = (0..10).map(|u| scored(u, 5, u)).collect();
        r.sm.apply(vec![entry(2, second), entry(3, retries)]).await.unwrap();
    }
    assert_eq!(board(&holding).await, board(&letting_go).await);
    assert_eq!(dump(&holding).await, dump(&letting_go).await);

    let mut follower = replica(false).await;
    transfer(&mut holding, &mut follower).await;
    assert_eq!(dump(&follower).await, dump(&holding).await);
    assert_eq!(board(&follower).await, board(&holding).await);
    // The remembered event ids came along: a retry is a duplicate.
    let res = follower.sm.apply(vec![entry(4, vec![scored(3, 5, 1003)])]).await.unwrap();
    let CmdResult::Scored(outs) = &res[0][0] else { panic!("{res:?}") };
    assert!(matches!(outs[0], Ok((Outcome::Duplicate, _))), "{outs:?}");
}

#[tokio::test]
async fn the_metadata_groups_snapshot_carries_the_registry() {
    let mut leader = replica(true).await;
    let mut follower = replica(true).await;
    let create = CreateBiz { id: Some(3), name: "video".into(), config: BizConfig::default() };
    leader.sm.apply(vec![entry(1, vec![Command::CreateBiz(create)])]).await.unwrap();
    assert!(follower.sm.directory.get(3).is_none());
    transfer(&mut leader, &mut follower).await;
    assert_eq!(follower.sm.directory.get(3).map(|b| b.name), Some("video".to_string()));
    assert_eq!(dump(&follower).await, dump(&leader).await);
}

#[tokio::test]
async fn a_restart_brings_back_the_newest_snapshot_and_drops_an_unfinished_transfer() {
    let mut leader = replica(false).await;
    let dir = tempfile::tempdir().unwrap();
    let mut cmds = Vec::new();
    for u in 0..200 {
        cmds.push(like(u, u % 7, LikeAction::Like));
        cmds.push(score(u % 30, u));
    }
    leader.sm.apply(vec![entry(1, cmds)]).await.unwrap();
    let snap = leader.sm.get_snapshot_builder().await.build_snapshot().await.unwrap();
    let bytes = std::fs::read(snap.snapshot.path()).unwrap();
    let at_snapshot = dump(&leader).await;

    let at_install = {
        let (db, mut sm) = open(dir.path(), false).await;
        sm.apply(vec![entry(1, vec![like(999, 1, LikeAction::Like)])]).await.unwrap();
        let mut follower = Replica { _dir: tempfile::tempdir().unwrap(), _db: db, sm };
        transfer(&mut leader, &mut follower).await;
        // Applied after the snapshot: in memory only, replayed from the log
        // after a restart (not here: there is no log in this test).
        follower.sm.apply(vec![entry(2, vec![like(5, 5, LikeAction::Dislike)])]).await.unwrap();
        assert_ne!(dump(&follower).await, at_snapshot);
        // A crash during a later transfer leaves half a file behind.
        let incoming = follower.sm.snapshot_dir.join("incoming-1-1.tmp");
        std::fs::write(&incoming, &bytes[..bytes.len() / 2]).unwrap();
        follower.sm.shards[0].1.stop().await;
        at_snapshot.clone()
    };
    let (db, sm) = open(dir.path(), false).await;
    sm.remove_leftovers();
    assert!(!sm.snapshot_dir.join("incoming-1-1.tmp").exists());
    let (applied, _) = {
        let mut sm = sm;
        let a = sm.applied_state().await.unwrap();
        let follower = Replica { _dir: dir, _db: db, sm };
        assert_eq!(
            dump(&follower).await,
            at_install,
            "the state the snapshot held, nothing after it"
        );
        follower.sm.shards[0].1.stop().await;
        a
    };
    assert_eq!(applied, snap.meta.last_log_id);
}

/// A received snapshot is checked whole when its last chunk is written,
/// before openraft may purge the log for it: a file cut short or damaged
/// in flight fails the transfer (the leader sends it again) and leaves the
/// replica's own snapshot current; a good one replaces it only once
/// installed.
#[tokio::test]
async fn a_cut_or_damaged_snapshot_is_refused_on_receipt_and_the_previous_one_stays() {
    let mut leader = replica(false).await;
    let mut cmds = Vec::new();
    for u in 0..300 {
        cmds.push(like(u, u % 11, LikeAction::Like));
        cmds.push(score(u % 40, u));
    }
    leader.sm.apply(vec![entry(1, vec![]), entry(2, cmds)]).await.unwrap();
    let snap = leader.sm.get_snapshot_builder().await.build_snapshot().await.unwrap();
    let bytes = std::fs::read(snap.snapshot.path()).unwrap();

    // The follower's own snapshot is at index 1, behind the leader's.
    let mut follower = replica(false).await;
    follower.sm.apply(vec![entry(1, vec![like(7, 7, LikeAction::Like)])]).await.unwrap();
    let own = follower.sm.get_snapshot_builder().await.build_snapshot().await.unwrap();
    let before = dump(&follower).await;

    let mut damaged = bytes.clone();
    damaged[bytes.len() / 2] ^= 0x01;
    for bad in [&bytes[..bytes.len() / 2], &bytes[..bytes.len() - 1], &damaged[..]] {
        let mut incoming = follower.sm.begin_receiving_snapshot().await.unwrap();
        incoming.write_all(bad).await.unwrap();
        incoming.shutdown().await.expect_err("a cut or damaged snapshot is refused");
        let current = follower.sm.get_current_snapshot().await.unwrap().expect("still one");
        assert_eq!(current.meta.snapshot_id, own.meta.snapshot_id);
        assert_eq!(dump(&follower).await, before, "nothing of the replica's changed");
    }

    let sent = transfer(&mut leader, &mut follower).await;
    let current = follower.sm.get_current_snapshot().await.unwrap().expect("the new one");
    assert_eq!(current.meta.snapshot_id, sent.snapshot_id);
    assert_eq!(dump(&follower).await, dump(&leader).await);
    let files: Vec<_> = std::fs::read_dir(&follower.sm.snapshot_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".snap"))
        .collect();
    assert_eq!(files, vec![format!("{}.snap", sent.snapshot_id)], "the old one went after");
    leader.sm.shards[0].1.stop().await;
    follower.sm.shards[0].1.stop().await;
}

/// Older versions renamed a received snapshot to `installing.snap` before
/// installing it, and openraft may have purged the log up to it already: a
/// start promotes that file and loads it, not the older complete one.
#[tokio::test]
async fn an_installing_snapshot_left_by_an_older_version_is_what_a_start_loads() {
    let mut leader = replica(false).await;
    leader.sm.apply(vec![entry(1, vec![like(1, 1, LikeAction::Like)])]).await.unwrap();
    let old = leader.sm.get_snapshot_builder().await.build_snapshot().await.unwrap();
    let old_bytes = std::fs::read(old.snapshot.path()).unwrap();
    leader.sm.apply(vec![entry(2, vec![like(2, 2, LikeAction::Like)])]).await.unwrap();
    let new = leader.sm.get_snapshot_builder().await.build_snapshot().await.unwrap();
    let new_bytes = std::fs::read(new.snapshot.path()).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let snaps = dir.path().join("snapshots").join("shard1");
    std::fs::create_dir_all(&snaps).unwrap();
    std::fs::write(snaps.join(format!("{}.snap", old.meta.snapshot_id)), &old_bytes).unwrap();
    std::fs::write(snaps.join("installing.snap"), &new_bytes).unwrap();
    let (db, mut sm) = open(dir.path(), false).await;
    assert!(!snaps.join("installing.snap").exists());
    let current = sm.get_current_snapshot().await.unwrap().expect("a current snapshot");
    assert_eq!(current.meta.snapshot_id, new.meta.snapshot_id);
    assert_eq!(sm.applied_state().await.unwrap().0, new.meta.last_log_id);
    let follower = Replica { _dir: dir, _db: db, sm };
    assert_eq!(dump(&follower).await, dump(&leader).await);
    follower.sm.shards[0].1.stop().await;
}

/// openraft purges a follower's log up to a received snapshot without
/// waiting for its install. A kill after the purge but before the file
/// became current leaves the log purged past the newest complete snapshot
/// and the received file as `incoming-*.tmp`: the start installs that file;
/// without it, the group refuses to start rather than fail inside openraft.
#[tokio::test]
async fn a_log_purged_past_the_newest_snapshot_takes_the_received_file_or_refuses() {
    use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
    use plaudit_storage::file_log::FileLogStore;
    use plaudit_storage::group_commit::GroupCommit;

    let mut leader = replica(false).await;
    leader.sm.apply(vec![entry(1, vec![like(1, 1, LikeAction::Like)])]).await.unwrap();
    leader.sm.apply(vec![entry(2, vec![like(2, 2, LikeAction::Like)])]).await.unwrap();
    let snap = leader.sm.get_snapshot_builder().await.build_snapshot().await.unwrap();
    let bytes = std::fs::read(snap.snapshot.path()).unwrap();
    let purge_to = snap.meta.last_log_id.unwrap();

    for with_file in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let (db, sm) = open(dir.path(), false).await;
        std::fs::create_dir_all(&sm.snapshot_dir).unwrap();
        if with_file {
            std::fs::write(sm.snapshot_dir.join("incoming-9-9.tmp"), &bytes).unwrap();
        }
        let commit = GroupCommit::start(db.clone(), &dir.path().join("sled")).unwrap();
        let mut log =
            FileLogStore::<plaudit_cluster::types::TypeConfig>::open(sm.wal.clone(), 1, commit);
        let blank = |i| Entry {
            log_id: LogId::new(CommittedLeaderId::new(2, 1), i),
            payload: EntryPayload::Blank,
        };
        log.blocking_append([blank(1), blank(2)]).await.unwrap();
        log.purge(purge_to).await.unwrap();
        let got = sm.check_log_covers(&mut log).await;
        if with_file {
            got.expect("the received file covers the purge");
            let mut sm = sm;
            assert_eq!(sm.applied_state().await.unwrap().0, snap.meta.last_log_id);
            let current = sm.get_current_snapshot().await.unwrap().expect("current");
            assert_eq!(current.meta.snapshot_id, snap.meta.snapshot_id);
            let follower = Replica { _dir: dir, _db: db, sm };
            assert_eq!(dump(&follower).await, dump(&leader).await);
            follower.sm.shards[0].1.stop().await;
        } else {
            let err = got.expect_err("nothing covers the purge").to_string();
            assert!(err.contains("purged"), "{err}");
            sm.shards[0].1.stop().await;
        }
    }
}

/// The committed record openraft saves before an apply reaches the file
/// before the apply's effects can be seen: a copy of the log taken right
/// after the apply (what a kill leaves) has it.
#[tokio::test]
async fn an_apply_writes_the_committed_record_that_allowed_it_first() {
    use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
    use plaudit_storage::file_log::FileLogStore;
    use plaudit_storage::group_commit::GroupCommit;
    use plaudit_storage::wal::Wal;

    let dir = tempfile::tempdir().unwrap();
    let (db, mut sm) = open(dir.path(), false).await;
    let commit = GroupCommit::start(db.clone(), &dir.path().join("sled")).unwrap();
    let mut log = FileLogStore::<TypeConfig>::open(sm.wal.clone(), 1, commit.clone());
    let first = entry(1, vec![like(1, 1, LikeAction::Like)]);
    log.blocking_append([first.clone()]).await.unwrap();
    log.save_committed(Some(first.log_id)).await.unwrap();
    let copy_log = |name: &str| {
        let to = dir.path().join(name);
        std::fs::create_dir_all(&to).unwrap();
        for e in std::fs::read_dir(dir.path().join("raft")).unwrap() {
            let path = e.unwrap().path();
            let file = path.file_name().unwrap().to_str().unwrap().to_owned();
            if file.starts_with("wal-") && file.ends_with(".log") {
                std::fs::copy(&path, to.join(file)).unwrap();
            }
        }
        FileLogStore::<TypeConfig>::open(Wal::open(&to).unwrap(), 1, commit.clone())
    };
    let mut before = copy_log("before");
    assert_eq!(before.read_committed().await.unwrap(), None, "the record waits in the buffer");
    sm.apply(vec![first.clone()]).await.unwrap();
    let mut after = copy_log("after");
    assert_eq!(after.read_committed().await.unwrap(), Some(first.log_id));
    sm.shards[0].1.stop().await;
}

mod group;
