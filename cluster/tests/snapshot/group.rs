//! A group that hosts two shards, through the same state machine API: each
//! command applied on its own shard, answered in its place, and both
//! shards in the group's snapshot (to a follower, and back at a restart).

use super::*;

/// A group of two shards (1 and 3 of four, in two groups): the layout
/// `plaudit_cluster::layout` gives group 1.
const GROUP_SHARDS: [u32; 2] = [1, 3];

/// Opens a replica of that group in `dir`: its snapshot loaded, one actor
/// per shard.
async fn open_group(dir: &Path) -> (sled::Db, ShardStateMachine) {
    let db = open_db(&dir.join("sled")).await;
    let store = StateStore::open(&db).unwrap();
    let layout = plaudit_cluster::layout::Layout::new(4, 2);
    assert_eq!(layout.shards_of(GROUP_SHARDS[0]), GROUP_SHARDS);
    plaudit_cluster::durable::load_snapshots(&store, dir, 4, layout).unwrap();
    let directory = Directory::load(&store).unwrap();
    let mut shards = Vec::new();
    for shard in GROUP_SHARDS {
        shards.push((shard, spawn_shard(shard, false, 100, &store, &directory).await));
    }
    let sm = ShardStateMachine {
        shard: GROUP_SHARDS[0],
        is_meta: false,
        shards,
        store,
        directory,
        snapshot_dir: dir.join("snapshots").join("shard1"),
        wal: plaudit_storage::wal::Wal::open(&dir.join("raft")).unwrap(),
        files: Default::default(),
    };
    (db, sm)
}

async fn group_replica() -> Replica {
    let dir = tempfile::tempdir().unwrap();
    let (db, sm) = open_group(dir.path()).await;
    Replica { _dir: dir, _db: db, sm }
}

/// A type key of ranking 4 that routes to `shard` (of four).
fn board_key_on(shard: u32) -> Vec<u8> {
    (0..=u8::MAX)
        .map(|n| vec![1, 2, n])
        .find(|k| plaudit_proto::routing::board_shard(4, k, 4) == shard)
        .expect("some key routes to the shard")
}

fn score_on(shard: u32, item: u64, event_id: u64) -> Command {
    let Command::ScoreV2(mut c) = score(item, event_id) else { unreachable!() };
    c.type_key = board_key_on(shard);
    Command::ScoreV2(c)
}

fn tagged(index: u64, cmds: Vec<(u32, Command)>) -> Entry<TypeConfig> {
    let (tags, cmds): (Vec<u32>, Vec<Command>) = cmds.into_iter().unzip();
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(2, 1), index),
        payload: EntryPayload::Normal(Batch::tagged(1000 + index, cmds, tags)),
    }
}

async fn board_on(r: &Replica, shard: u32) -> String {
    let rules = Rules { aggregation: Aggregation::Incr, ties: TieMode::EarlierFirst, cap: 100 };
    let top = BoardQuery::Top { offset: 0, limit: 1000 };
    let (_, h) = r.sm.shards.iter().find(|(s, _)| *s == shard).unwrap();
    format!("{:?}", h.board_query(4, board_key_on(shard), rules, top).await.unwrap())
}

/// A group that hosts two shards applies each command on its own shard,
/// answers each in its place, and its snapshot carries both shards: a
/// follower that installs it, and the leader restarted on it, hold what
/// the leader held.
#[tokio::test]
async fn a_group_of_two_shards_applies_each_on_its_own_and_snapshots_both() {
    let mut leader = group_replica().await;
    let mut follower = group_replica().await;
    let mut cmds = Vec::new();
    for u in 0..100 {
        let shard = GROUP_SHARDS[(u % 2) as usize];
        cmds.push((shard, like(u, u % 7, LikeAction::Like)));
        cmds.push((shard, score_on(shard, u % 20, u)));
    }
    let blank =
        Entry { log_id: LogId::new(CommittedLeaderId::new(2, 1), 2), payload: EntryPayload::Blank };
    let res = leader
        .sm
        .apply(vec![
            tagged(1, cmds),
            blank,
            tagged(3, vec![(3, score_on(3, 1, 1)), (3, score_on(3, 0, 0))]),
        ])
        .await
        .unwrap();
    assert_eq!(res.len(), 3);
    assert_eq!(res[0].len(), 200);
    for (i, r) in res[0].iter().enumerate() {
        match (i % 2, r) {
            (0, CmdResult::Like(_)) | (1, CmdResult::Scored(_)) => {}
            _ => panic!("command {i}: {r:?}"),
        }
    }
    assert!(res[1].is_empty());
    // Event 1 (u = 1, shard 3) on shard 3's board again: a duplicate
    // there; event 0 went to shard 1's board, so it is new on shard 3's.
    let outcome = |r: &CmdResult| match r {
        CmdResult::Scored(outs) => outs[0].clone().map(|(o, _)| o),
        other => panic!("{other:?}"),
    };
    assert_eq!(outcome(&res[2][0]), Ok(Outcome::Duplicate));
    assert_eq!(outcome(&res[2][1]), Ok(Outcome::Applied));
    // Each board holds its own shard's events only.
    assert_ne!(board_on(&leader, 1).await, board_on(&leader, 3).await);

    follower.sm.apply(vec![tagged(1, vec![(3, like(999, 1, LikeAction::Like))])]).await.unwrap();
    let meta = transfer(&mut leader, &mut follower).await;
    assert_eq!(meta.last_log_id.map(|l| l.index), Some(3));
    assert_eq!(dump(&follower).await, dump(&leader).await);
    for shard in GROUP_SHARDS {
        assert_eq!(board_on(&follower, shard).await, board_on(&leader, shard).await);
    }
    let (applied, _) = follower.sm.applied_state().await.unwrap();
    assert_eq!(applied, meta.last_log_id);

    // The leader, restarted on its own snapshot: the same state.
    let before = dump(&leader).await;
    let Replica { _dir: dir, _db: db, sm } = leader;
    for (_, h) in &sm.shards {
        h.stop().await;
    }
    drop((sm, db));
    let (db, sm) = open_group(dir.path()).await;
    let restarted = Replica { _dir: dir, _db: db, sm };
    assert_eq!(dump(&restarted).await, before);
}
