//! Snapshots through openraft's state machine API, between two "replicas"
//! (two sled databases in two directories), as a follower that lags behind
//! a purged log receives them:
//!
//! - export -> install -> compare: the follower's stored state equals the
//!   leader's, key for key, and the metadata group's snapshot carries the
//!   registry (the follower's registry view is reloaded);
//! - an install that a crash interrupted is finished at the next start from
//!   the kept file, or, if that file is gone, the replica refuses to start.

use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, RaftSnapshotBuilder};
use plaudit_actors::command::{ScoreCmd, ScoreEvent};
use plaudit_actors::{Batch, Command, Directory, ShardActor, ShardConfig, ShardHandle};
use plaudit_cluster::state_machine::ShardStateMachine;
use plaudit_cluster::types::TypeConfig;
use plaudit_proto::business::CreateBiz;
use plaudit_proto::likes::LikeRequest;
use plaudit_proto::rankings::{Aggregation, TieMode};
use plaudit_proto::{BizConfig, LikeAction};
use plaudit_storage::group_commit::GroupCommit;
use plaudit_storage::StateStore;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

struct Replica {
    _dir: tempfile::TempDir,
    db: sled::Db,
    sm: ShardStateMachine,
}

const SHARD: u32 = 1;

async fn replica(is_meta: bool) -> Replica {
    let dir = tempfile::tempdir().unwrap();
    let (db, sm) = open(dir.path(), is_meta).await;
    Replica { _dir: dir, db, sm }
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

async fn open(dir: &Path, is_meta: bool) -> (sled::Db, ShardStateMachine) {
    let db = open_db(&dir.join("sled")).await;
    let commit = GroupCommit::start(db.clone(), &dir.join("sled")).unwrap();
    let store = StateStore::open(&db).unwrap();
    let directory = Directory::load(&store).unwrap();
    let actor = ShardActor {
        cfg: ShardConfig {
            shard: SHARD,
            shard_count: 4,
            is_meta,
            actor_budget: 100,
            actor_idle: Duration::from_secs(60),
        },
        store: store.clone(),
        directory: directory.clone(),
        outbox: Arc::default(),
        gauges: Arc::default(),
        boards: Default::default(),
    };
    let handle = ShardHandle::spawn(actor).await.unwrap();
    let sm = ShardStateMachine {
        shard: SHARD,
        is_meta,
        handle,
        store,
        commit,
        directory,
        snapshot_dir: dir.join("snapshots").join("g1"),
        files: Default::default(),
    };
    (db, sm)
}

fn entry(index: u64, cmds: Vec<Command>) -> Entry<TypeConfig> {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(2, 1), index),
        payload: EntryPayload::Normal(Batch { now: 1000 + index, cmds }),
    }
}

fn like(user: u64, entity: u64, action: LikeAction) -> Command {
    Command::Like(LikeRequest { biz: 3, entity, user, owner: Some(9), action })
}

fn score(item: u64, event_id: u64) -> Command {
    Command::Score(ScoreCmd {
        rank: 4,
        type_key: vec![1, 2, 3],
        item,
        aggregation: Aggregation::Incr,
        ties: TieMode::EarlierFirst,
        cap: 100,
        events: vec![ScoreEvent { score: 10, sub: None, event_id }],
    })
}

/// Every key of every state tree, after a checkpoint: what the replica holds.
fn dump(r: &Replica) -> Vec<(String, Vec<u8>, Vec<u8>)> {
    r.sm.store.checkpoint(SHARD).unwrap();
    let mut out = Vec::new();
    for name in r.db.tree_names() {
        let name = String::from_utf8_lossy(&name).to_string();
        if !(name.starts_with("biz/")
            || name.starts_with("rank/")
            || name.starts_with("shard/")
            || name == "registry")
        {
            continue;
        }
        for kv in r.db.open_tree(&name).unwrap().iter() {
            let (k, v) = kv.unwrap();
            out.push((name.clone(), k.to_vec(), v.to_vec()));
        }
    }
    out.sort();
    out
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
    assert_eq!(dump(&follower), dump(&leader));
    let (applied, _) = follower.sm.applied_state().await.unwrap();
    assert_eq!(applied, meta.last_log_id);
    // The follower's actors were reset: a later entry applies on the new state.
    follower.sm.apply(vec![entry(3, vec![like(5, 5, LikeAction::Undislike)])]).await.unwrap();
    leader.sm.apply(vec![entry(3, vec![like(5, 5, LikeAction::Undislike)])]).await.unwrap();
    assert_eq!(dump(&follower), dump(&leader));
    // The snapshot is kept as the follower's current one, to serve on.
    let current = follower.sm.get_current_snapshot().await.unwrap().expect("a current snapshot");
    assert_eq!(current.meta.snapshot_id, meta.snapshot_id);
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
    assert_eq!(dump(&follower), dump(&leader));
}

#[tokio::test]
async fn an_interrupted_install_is_finished_at_start_or_refused() {
    let mut leader = replica(false).await;
    let dir = tempfile::tempdir().unwrap();
    let mut cmds = Vec::new();
    for u in 0..200 {
        cmds.push(like(u, u % 7, LikeAction::Like));
    }
    leader.sm.apply(vec![entry(1, cmds)]).await.unwrap();
    let snap = leader.sm.get_snapshot_builder().await.build_snapshot().await.unwrap();
    let bytes = std::fs::read(snap.snapshot.path()).unwrap();

    // A follower that crashed mid-install: the file was moved into place, the
    // marker written, and only part of the keys replaced.
    {
        let (db, mut sm) = open(dir.path(), false).await;
        sm.apply(vec![entry(1, vec![like(999, 1, LikeAction::Like)])]).await.unwrap();
        let installing = sm.snapshot_dir.join("installing.snap");
        std::fs::create_dir_all(&sm.snapshot_dir).unwrap();
        std::fs::write(&installing, &bytes).unwrap();
        let mut cut = &bytes[..bytes.len() / 2];
        plaudit_storage::snapshot::read_header(&mut cut).unwrap();
        let note = installing.to_string_lossy().into_owned();
        assert!(sm.store.install(SHARD, false, note.as_bytes(), &mut cut).is_err());
        sm.handle.stop().await;
        db.flush().unwrap();
    }
    // The next start finishes it from the kept file.
    let (db, sm) = open(dir.path(), false).await;
    sm.resume_install().await.unwrap();
    assert_eq!(sm.store.pending_install(SHARD).unwrap(), None);
    let follower = Replica { _dir: dir, db, sm };
    assert_eq!(dump(&follower), dump(&leader));
    follower.sm.handle.stop().await;
    drop(follower.sm);
    drop(follower.db);

    // Without the file, the replica refuses to start the shard.
    let dir = tempfile::tempdir().unwrap();
    {
        let (db, sm) = open(dir.path(), false).await;
        let mut cut = &bytes[..bytes.len() / 2];
        plaudit_storage::snapshot::read_header(&mut cut).unwrap();
        let gone = sm.snapshot_dir.join("installing.snap");
        let note = gone.to_string_lossy().into_owned();
        assert!(sm.store.install(SHARD, false, note.as_bytes(), &mut cut).is_err());
        sm.handle.stop().await;
        db.flush().unwrap();
    }
    let (_db, sm) = open(dir.path(), false).await;
    let err = sm.resume_install().await.unwrap_err().to_string();
    assert!(err.contains("half replaced"), "{err}");
}
