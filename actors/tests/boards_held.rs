//! Boards are held by their shard, not by actors of their own: what the
//! shard lets go (over its budget) it loads again from the staged and
//! stored state, with its members and its memory of event ids, and the
//! gauges, the load and write-back counters and the readers' list follow
//! exactly the boards it holds.

use plaudit_actors::active::Budget;
use plaudit_actors::active_boards::ActiveBoards;
use plaudit_actors::board_host::QueryOut;
use plaudit_actors::command::{Dedup, ScoreCmd, ScoreEvent};
use plaudit_actors::rankings::board::Rules;
use plaudit_actors::shard::ShardGauges;
use plaudit_actors::{ApplyEntry, Batch, CmdResult, Command, Directory};
use plaudit_actors::{ShardActor, ShardConfig, ShardHandle};
use plaudit_proto::rankings::{Aggregation, TieMode};
use plaudit_proto::scoring::{BoardQuery, Outcome};
use plaudit_storage::StateStore;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

const RULES: Rules = Rules { aggregation: Aggregation::Incr, ties: TieMode::EarlierFirst, cap: 10 };

fn score(board: u8, item: u64, event_id: u64, score: i64) -> Command {
    Command::ScoreV2(ScoreCmd {
        rank: 7,
        type_key: vec![board],
        item,
        aggregation: RULES.aggregation,
        ties: RULES.ties,
        cap: RULES.cap as u32,
        events: vec![ScoreEvent { score, sub: None, event_id }],
        dedup: Dedup::DEFAULT,
    })
}

fn entry(index: u64, cmds: Vec<Command>) -> ApplyEntry {
    ApplyEntry {
        log_id: index.to_be_bytes().to_vec(),
        membership: None,
        batch: Some(Batch::new(1000 * index, cmds)),
    }
}

fn outcome(out: &[Vec<CmdResult>]) -> (Outcome, Option<i64>) {
    match &out[0][0] {
        CmdResult::Scored(v) => v[0].clone().expect("not refused"),
        other => panic!("not a scoring result: {other:?}"),
    }
}

#[tokio::test]
async fn a_board_let_go_comes_back_whole_and_the_gauges_follow() {
    let dir = tempfile::tempdir().unwrap();
    let db = sled::open(dir.path()).unwrap();
    let store = StateStore::open(&db).unwrap();
    let gauges = Arc::new(ShardGauges::default());
    let boards = Arc::new(ActiveBoards::default());
    let actor = ShardActor {
        cfg: ShardConfig {
            shard: 0,
            shard_count: 1,
            is_meta: false,
            // One board held at a time.
            actor_budget: Budget::new(1),
            actor_idle: Duration::from_secs(60),
        },
        store: store.clone(),
        directory: Directory::default(),
        outbox: Arc::default(),
        gauges: gauges.clone(),
        boards: boards.clone(),
    };
    let s = ShardHandle::spawn(actor).await.unwrap();
    let held = || {
        (
            gauges.active_boards.load(Ordering::Relaxed),
            gauges.board_members.load(Ordering::Relaxed),
            boards.len(),
        )
    };

    let out = s.apply(vec![entry(1, vec![score(1, 42, 1, 5), score(1, 43, 2, 1)])]).await.unwrap();
    assert_eq!(outcome(&out), (Outcome::Applied, Some(5)));
    assert_eq!(held(), (1, 2, 1));
    // A second board: the first is let go after this batch.
    s.apply(vec![entry(2, vec![score(2, 50, 3, 7)])]).await.unwrap();
    assert_eq!(held(), (1, 1, 1), "only board 2 is held, listed and counted");
    let churn = || {
        (
            gauges.boards_loaded.load(Ordering::Relaxed),
            gauges.boards_written_back.load(Ordering::Relaxed),
        )
    };
    // A new board's rows are written with its first batch: nothing left
    // to write back when it goes unchanged since.
    assert_eq!(churn(), (2, 0), "two loads, nothing written back");
    assert!(boards.get(7, &[1]).is_none() && boards.get(7, &[2]).is_some());
    assert!(s.board_query_now(7, &[1], &BoardQuery::Size).is_none(), "readers ask the shard");

    // A query loads board 1 again from what was staged.
    let q = s.board_query(7, vec![1], RULES, BoardQuery::Scores { items: vec![42, 43] }).await;
    match q.unwrap() {
        QueryOut::Scores(v) => assert_eq!(v, vec![(42, Some(5)), (43, Some(1))]),
        other => panic!("{other:?}"),
    }
    assert!(boards.get(7, &[1]).is_some());
    assert_eq!(gauges.board_members.load(Ordering::Relaxed), 3, "both boards held for now");

    // It still knows event 1: a retry is a duplicate, not a second +5.
    let out = s.apply(vec![entry(3, vec![score(1, 42, 1, 5)])]).await.unwrap();
    assert_eq!(outcome(&out), (Outcome::Duplicate, Some(5)));
    let out = s.apply(vec![entry(4, vec![score(1, 42, 4, 5)])]).await.unwrap();
    assert_eq!(outcome(&out), (Outcome::Applied, Some(10)));
    assert_eq!(held(), (1, 2, 1), "board 2 let go in turn");
    assert_eq!(churn(), (3, 0), "board 1 loaded again; board 2 unchanged since its first batch");
    // Board 2 again: board 1, changed since it was loaded, is written back.
    s.apply(vec![entry(5, vec![score(2, 50, 5, 1)])]).await.unwrap();
    assert_eq!(churn(), (4, 1));
    s.stop().await;
}
