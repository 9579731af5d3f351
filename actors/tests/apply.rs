//! The shard actor's apply against a real store: what a replica must
//! compute from its own log alone.
//!
//! - a data shard applies scoring events with nothing in its registry view
//!   (a replica whose metadata group lags, or a replay that runs before the
//!   registry's): the rules travel in the command;
//! - time never goes backwards within a shard, whichever leader stamped an
//!   entry, and the floor survives a restart (it is replicated state);
//! - a likers page queued to an entity's actor when the entity's release
//!   to another shard stops it is answered `Moved`, not "stopped".

use plaudit_actors::active::Budget;
use plaudit_actors::command::{Dedup, ScoreCmd, ScoreEvent};
use plaudit_actors::{ApplyEntry, Batch, CmdResult, Command, Directory};
use plaudit_actors::{ShardActor, ShardConfig, ShardHandle};
use plaudit_proto::likes::LikeRequest;
use plaudit_proto::rankings::{Aggregation, TieMode};
use plaudit_proto::scoring::{BoardQuery, Outcome};
use plaudit_proto::{LikeAction, Millis};
use plaudit_storage::StateStore;
use std::sync::Arc;
use std::time::Duration;

const SHARD: u32 = 0;

async fn shard(store: &StateStore, directory: Directory) -> ShardHandle {
    spawn(store, directory, SHARD, 1, false).await
}

/// A shard actor on `store`: shard `id` of `count`, the metadata group if `meta`.
async fn spawn(
    store: &StateStore,
    directory: Directory,
    id: u32,
    count: u32,
    meta: bool,
) -> ShardHandle {
    let actor = ShardActor {
        cfg: ShardConfig {
            shard: id,
            shard_count: count,
            is_meta: meta,
            actor_budget: Budget::new(100),
            actor_idle: Duration::from_secs(60),
        },
        store: store.clone(),
        directory,
        outbox: Arc::default(),
        gauges: Arc::default(),
        boards: Default::default(),
    };
    ShardHandle::spawn(actor).await.expect("spawn shard")
}

/// A restart after a snapshot of shard `id` (with the registry if `meta`):
/// a new store holding what the snapshot held, as a node's start loads it.
fn restarted(store: &StateStore, id: u32, meta: bool) -> (tempfile::TempDir, StateStore) {
    let frozen = store.freeze(id).unwrap();
    let mut file = Vec::new();
    store.export(&frozen, meta, b"", &mut file).unwrap();
    drop(frozen);
    let dir = tempfile::tempdir().unwrap();
    let fresh = StateStore::open(&sled::open(dir.path()).unwrap()).unwrap();
    let mut input = &file[..];
    plaudit_storage::snapshot::read_header(&mut input).unwrap();
    fresh.install(id, meta, &mut input).unwrap();
    (dir, fresh)
}

fn entry(index: u64, now: Millis, cmds: Vec<Command>) -> ApplyEntry {
    ApplyEntry {
        log_id: index.to_be_bytes().to_vec(),
        membership: None,
        batch: Some(Batch::new(now, cmds)),
    }
}

fn like(user: u64, entity: u64) -> Command {
    Command::Like(LikeRequest { biz: 1, entity, user, owner: None, action: LikeAction::Like })
}

fn like_mtime(r: &CmdResult) -> Millis {
    match r {
        CmdResult::Like(reply) => reply.mtime,
        other => panic!("not a like result: {other:?}"),
    }
}

#[tokio::test]
async fn a_data_shard_scores_without_knowing_the_ranking() {
    let dir = tempfile::tempdir().unwrap();
    let db = sled::open(dir.path()).unwrap();
    let store = StateStore::open(&db).unwrap();
    // An empty registry view: this replica has not applied the ranking's
    // creation (its metadata group lags).
    let s = shard(&store, Directory::default()).await;
    let score = |event_id, score| {
        Command::ScoreV2(ScoreCmd {
            rank: 7,
            type_key: vec![9, 9],
            item: 42,
            aggregation: Aggregation::Best,
            ties: TieMode::LaterFirst,
            cap: 10,
            events: vec![ScoreEvent { score, sub: None, event_id }],
            dedup: Dedup::DEFAULT,
        })
    };
    let out = s.apply(vec![entry(1, 1000, vec![score(1, 5), score(2, 3)])]).await.unwrap();
    let outcomes: Vec<_> = out[0]
        .iter()
        .map(|r| match r {
            CmdResult::Scored(ev) => ev[0].clone().expect("applied").0,
            other => panic!("not a scoring result: {other:?}"),
        })
        .collect();
    assert_eq!(outcomes, vec![Outcome::Applied, Outcome::Applied]);
    // `best` keeps 5, as the command's aggregation says.
    let rules = plaudit_actors::rankings::board::Rules {
        aggregation: Aggregation::Best,
        ties: TieMode::LaterFirst,
        cap: 10,
    };
    let q = s.board_query(7, vec![9, 9], rules, BoardQuery::Scores { items: vec![42] }).await;
    match q.unwrap() {
        plaudit_actors::board_host::QueryOut::Scores(v) => assert_eq!(v, vec![(42, Some(5))]),
        other => panic!("{other:?}"),
    }
    s.stop().await;
}

#[tokio::test]
async fn a_board_check_foretells_the_apply_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = sled::open(dir.path()).unwrap();
    let store = StateStore::open(&db).unwrap();
    let s = shard(&store, Directory::default()).await;
    let rules = plaudit_actors::rankings::board::Rules {
        aggregation: Aggregation::Incr,
        ties: TieMode::EarlierFirst,
        cap: 10,
    };
    let ev = |event_id, score| ScoreEvent { score, sub: None, event_id };
    let score = |e: ScoreEvent| {
        Command::ScoreV2(ScoreCmd {
            rank: 7,
            type_key: vec![1],
            item: 42,
            aggregation: rules.aggregation,
            ties: rules.ties,
            cap: 10,
            events: vec![e],
            dedup: Dedup::DEFAULT,
        })
    };
    let result = |out: &[Vec<CmdResult>]| match &out[0][0] {
        CmdResult::Scored(v) => v[0].clone(),
        other => panic!("not a scoring result: {other:?}"),
    };
    let high = i64::MAX - 10;
    result(&s.apply(vec![entry(1, 10, vec![score(ev(1, high))])]).await.unwrap()).unwrap();

    let check = |e| s.board_check(7, vec![1], rules, 42, e);
    let refused = check(ev(2, 100)).await.unwrap().unwrap_err();
    assert!(refused.message.contains("overflow"), "{refused}");
    assert_eq!(check(ev(2, 5)).await.unwrap(), Ok((Outcome::Applied, Some(high))));
    assert_eq!(check(ev(1, 100)).await.unwrap(), Ok((Outcome::Duplicate, Some(high))));
    // A board nobody wrote: a new member cannot overflow.
    let fresh = s.board_check(7, vec![2], rules, 42, ev(2, i64::MAX)).await.unwrap();
    assert_eq!(fresh, Ok((Outcome::Applied, None)));

    // Apply agrees, and neither the checks nor the refused event used id 2.
    let out = s.apply(vec![entry(2, 20, vec![score(ev(2, 100))])]).await.unwrap();
    assert!(result(&out).unwrap_err().message.contains("overflow"));
    let out = s.apply(vec![entry(3, 30, vec![score(ev(2, 5))])]).await.unwrap();
    assert_eq!(result(&out), Ok((Outcome::Applied, Some(high + 5))));
    s.stop().await;
}

#[tokio::test]
async fn time_never_goes_backwards_within_a_shard_even_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let db = sled::open(dir.path()).unwrap();
    let store = StateStore::open(&db).unwrap();
    let s = shard(&store, Directory::default()).await;
    // A leader stamps 5000; the next leader's clock is behind and stamps 3000.
    let out = s
        .apply(vec![entry(1, 5000, vec![like(1, 10)]), entry(2, 3000, vec![like(1, 11)])])
        .await
        .unwrap();
    assert_eq!(like_mtime(&out[0][0]), 5000);
    assert_eq!(like_mtime(&out[1][0]), 5000, "clamped to the previous entry's time");
    // Newest first follows log order: 11 was liked after 10.
    let page = s.user_page(1, 1, None, 10).await.unwrap();
    assert_eq!(page.iter().map(|i| i.id).collect::<Vec<_>>(), vec![11, 10]);
    s.stop().await;

    // A restart from a snapshot: a fresh store and shard actor.
    let (_d, store) = restarted(&store, SHARD, false);
    let s = shard(&store, Directory::default()).await;
    let out = s.apply(vec![entry(3, 100, vec![like(1, 12)])]).await.unwrap();
    assert_eq!(like_mtime(&out[0][0]), 5000, "the floor is stored with the shard's state");
    let out = s.apply(vec![entry(4, 7000, vec![like(1, 13)])]).await.unwrap();
    assert_eq!(like_mtime(&out[0][0]), 7000, "a later clock moves the floor up");
    let page = s.user_page(1, 1, None, 10).await.unwrap();
    assert_eq!(page.iter().map(|i| i.id).collect::<Vec<_>>(), vec![13, 12, 11, 10]);
    s.stop().await;
}

#[tokio::test]
async fn a_registry_change_with_an_id_applies_once_however_often_it_is_sent() {
    use plaudit_proto::business::CreateBiz;
    let dir = tempfile::tempdir().unwrap();
    let db = sled::open(dir.path()).unwrap();
    let store = StateStore::open(&db).unwrap();
    let directory = Directory::load(&store).unwrap();
    let s = spawn(&store, directory.clone(), 9, 9, true).await;
    let create = |name: &str| {
        Command::CreateBiz(CreateBiz { id: None, name: name.into(), config: Default::default() })
    };
    let once = |id, cmd| Command::Once { id, cmd: Box::new(cmd) };
    let biz_id = |r: &CmdResult| match r {
        CmdResult::Biz(b) => b.id,
        other => panic!("not a business: {other:?}"),
    };
    // The same id twice in one entry, again in the next entry, and after a restart.
    let out = s
        .apply(vec![
            entry(1, 10, vec![once(77, create("video")), once(77, create("video"))]),
            entry(2, 20, vec![once(77, create("video")), once(78, create("comment"))]),
        ])
        .await
        .unwrap();
    let first = biz_id(&out[0][0]);
    assert_eq!(biz_id(&out[0][1]), first);
    assert_eq!(biz_id(&out[1][0]), first);
    assert_ne!(biz_id(&out[1][1]), first, "another id is another change");
    assert_eq!(directory.list().len(), 2);
    s.stop().await;
    let (_d, store) = restarted(&store, 9, true);
    let directory = Directory::load(&store).unwrap();
    assert_eq!(directory.list().len(), 2, "once-records are not businesses");
    let s = spawn(&store, directory.clone(), 9, 9, true).await;
    let out = s.apply(vec![entry(3, 30, vec![once(77, create("video"))])]).await.unwrap();
    assert_eq!(biz_id(&out[0][0]), first);
    assert_eq!(directory.list().len(), 2);
    s.stop().await;
}

/// A likers page the shard passes to an entity's actor is answered even
/// when the entity's Release, next in the shard's mailbox, stops that actor
/// with the request still queued: the page is asked again and answered
/// `Moved` (which the node follows), where it failed with "the shard has
/// stopped".
#[tokio::test]
async fn a_likers_page_queued_to_an_entity_that_moves_away_is_answered_moved() {
    use plaudit_actors::residence::{MoveCmdOf, StepOf};
    use plaudit_actors::ShardError;
    use plaudit_proto::placement::EntityKey;
    use plaudit_proto::routing::shard_of;
    use plaudit_proto::ErrorCode;

    for round in 0..50u64 {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(&sled::open(dir.path()).unwrap()).unwrap();
        let s = spawn(&store, Directory::default(), 0, 2, false).await;
        // An entity whose home is this shard, frozen for shard 1.
        let entity = (round * 100..).find(|&e| shard_of(1, e, 2) == 0).unwrap();
        let key = EntityKey { biz: 1, entity };
        let step = |i, cmd| entry(i, 1_000 + i, vec![Command::MoveEntity(StepOf { mv: 1, cmd })]);
        let frozen = s.apply(vec![step(1, MoveCmdOf::Freeze { key, to: 1 })]).await.unwrap();
        assert!(matches!(frozen[0][0], CmdResult::Done), "{frozen:?}");
        // In the shard's mailbox in this order: the page starts the
        // entity's actor and passes the request on; the release stops it.
        let (page, released) = tokio::join!(
            s.liker_page(1, entity, None, 10),
            s.apply(vec![step(2, MoveCmdOf::Release { key, to: 1 })]),
        );
        assert!(matches!(released.unwrap()[0][0], CmdResult::Done));
        match page {
            Ok(items) => assert!(items.is_empty()),
            Err(ShardError::Rejected(e)) => assert_eq!(e.code, ErrorCode::Moved, "{e}"),
            Err(e) => panic!("round {round}: the page failed: {e}"),
        }
        s.stop().await;
    }
}

/// The deltas a frozen entity held go on at its Release in records of at
/// most `MAX_RECORD_DELTAS`, in order, under consecutive seqs (a record is
/// delivered whole, in one log entry and one peer frame); the target,
/// holding the copy, applies them all once.
#[tokio::test]
async fn a_release_sends_many_held_deltas_in_records_of_bounded_size() {
    use plaudit_actors::command::{Delta, EntityDelta};
    use plaudit_actors::likes::residence::EntityCopy;
    use plaudit_actors::residence::{MoveCmdOf, StepOf};
    use plaudit_actors::shard::MAX_RECORD_DELTAS;
    use plaudit_proto::placement::EntityKey;
    use plaudit_proto::routing::shard_of;

    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::open(&sled::open(dir.path()).unwrap()).unwrap();
    let (home, target) = (spawn(&store, Directory::default(), 0, 2, false).await, {
        spawn(&store, Directory::default(), 1, 2, false).await
    });
    let entity = (0..).find(|&e| shard_of(1, e, 2) == 0).unwrap();
    let key = EntityKey { biz: 1, entity };
    let step = |i, cmd| entry(i, 1_000 + i, vec![Command::MoveEntity(StepOf { mv: 1, cmd })]);
    let done = |r: Vec<Vec<CmdResult>>| assert!(matches!(r[0][0], CmdResult::Done), "{r:?}");
    done(home.apply(vec![step(1, MoveCmdOf::Freeze { key, to: 1 })]).await.unwrap());
    // Two records' worth and more, delivered from a users' shard while frozen.
    let n = 2 * MAX_RECORD_DELTAS as u64 + 100;
    let deltas: Vec<Delta> = (1..=n)
        .map(|user| {
            Delta::Entity(EntityDelta {
                biz: 1,
                entity,
                owner: None,
                user,
                d_likes: 1,
                d_dislikes: 0,
                liker_added: Some(user as Millis),
                liker_removed: None,
            })
        })
        .collect();
    let deliver = Command::Deliver { source: 9, records: vec![(1, deltas.clone())] };
    done(home.apply(vec![entry(2, 1_002, vec![deliver])]).await.unwrap());
    let copy = EntityCopy { key, likes: 0, dislikes: 0, owner: None, likers: vec![] };
    done(target.apply(vec![step(1, MoveCmdOf::Import(Box::new(copy)))]).await.unwrap());
    done(home.apply(vec![step(3, MoveCmdOf::Release { key, to: 1 })]).await.unwrap());

    let records = store.outbox_after(0, 1, 0, (100, usize::MAX)).unwrap();
    assert_eq!(records.len(), 3, "{} deltas in records of {MAX_RECORD_DELTAS}", n);
    let mut sent = Vec::new();
    for (i, (seq, bytes)) in records.iter().enumerate() {
        assert_eq!(*seq, i as u64 + 1, "consecutive seqs");
        let ds: Vec<Delta> = plaudit_proto::codec::from_bytes(bytes).unwrap();
        assert!(ds.len() <= MAX_RECORD_DELTAS);
        sent.push((*seq, ds));
    }
    assert_eq!(sent.iter().flat_map(|(_, d)| d.clone()).collect::<Vec<_>>(), deltas, "in order");
    let deliver = Command::Deliver { source: 0, records: sent };
    done(target.apply(vec![entry(2, 1_002, vec![deliver])]).await.unwrap());
    assert_eq!(store.get_counts(1, 1, entity).unwrap().likes, n, "each applied once");
    home.stop().await;
    target.stop().await;
}
