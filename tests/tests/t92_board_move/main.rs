//! A sub-board moved to another shard under concurrent scoring loses
//! nothing and applies nothing twice, with a SIGKILL of the source or the
//! target shard's leader in the middle of the move.
//!
//! ```text
//! 3 nodes, 6 shards, PLAUDIT_MOVE_STEP_PAUSE_MS=300 (the mover sleeps before each step)
//! scorers ─ events with unique ids on items 1..=50, scores 1..=9, each retried with the
//!           same id until acknowledged (applied or duplicate) ─> ledger: per item, the
//!           scores of acknowledged events, each event once
//! move 1  ─ home shard -> a shard led elsewhere; at Copy/Release: SIGKILL of the
//!           source's leader, restart 1 s later; the move must finish there
//! move 2  ─ onwards (home again if led elsewhere); once copied (at Release/Activate):
//!           SIGKILL of the target's leader, restart; the move must finish there
//! end     ─ every item's score on the board = the ledger (more: applied twice; less:
//!           lost), at the leader and at replicas, every replica identical, and every
//!           acknowledged event re-sent comes back a duplicate; and not vacuously:
//!           each move changed the placements, events were sent while it ran, and
//!           some of them were held (>= 300 ms) and then applied
//! ```
//!
//! A second test checks that `Placements` answers with no move under way,
//! that a move to the board's own shard or to a shard that does not exist
//! is refused (`BadRequest`) and records nothing, and that a second move
//! of a board while one is under way is refused (`Refused`).

use plaudit_client::proto::placement::{BoardKey, BoardMove, MoveBoard, MoveStep, Placements};
use plaudit_client::proto::rankings::{RankDef, RankSettings};
use plaudit_client::proto::routing::board_shard;
use plaudit_client::proto::scoring::{BoardQuery, BoardRef, Outcome, QueryReply, QueryRequest};
use plaudit_client::proto::window::TypeId;
use plaudit_client::proto::{ErrorCode, Request, Response};
use plaudit_client::{Client, ClientError};
use plaudit_tests::{grows_by, total_ranking, Cluster};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod ledger;

use ledger::{event, scorer, Acked, Ledger};

const RANK: u32 = 92;
/// The ranking's only sub-board, named as queries (and `MoveBoard`) name it.
const BOARD: &str = "total:0";
const SHARDS: u32 = 6;
const ITEMS: u64 = 50;
const SCORERS: u64 = 6;
const STEP_PAUSE_MS: u64 = 300;
/// How long a move may take once its node is killed.
const MOVE_DEADLINE: Duration = Duration::from_secs(60);

/// The two tests each start three nodes: one at a time, so the SIGKILL
/// scenario's timings do not depend on the other's load on the cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn board() -> BoardRef {
    BoardRef::TypeId(BOARD.into())
}

fn board_key() -> BoardKey {
    let type_id = TypeId::parse(BOARD).expect("a canonical type id");
    BoardKey { rank: RANK, type_key: type_id.to_key() }
}

/// One `total` board, summed scores; the highest priority class, never
/// shed, so every event can be applied.
fn ranking() -> RankDef {
    let settings = RankSettings { priority: 9, ..RankSettings::default() };
    RankDef { settings, ..total_ranking(RANK, "moved") }
}

/// `Request::Placements` through `client`.
async fn placements(client: &Client) -> Result<Placements, ClientError> {
    match client.request(Request::Placements).await? {
        Response::Placements(p) => Ok(*p),
        other => panic!("Placements answered {other:?}"),
    }
}

/// `Request::MoveBoard` of the board to shard `to`.
async fn move_board(client: &Client, to: u32) -> Result<Response, ClientError> {
    let req = MoveBoard { rank: RANK, board: BOARD.into(), to_shard: to };
    client.request(Request::MoveBoard(req)).await
}

/// Polls `Placements` until the board's move is at one of `steps`. Panics
/// if the move finishes first (it was seen and is gone, or the board is
/// already on `to`) or nothing shows within 30 s.
async fn wait_step(cluster: &Cluster, c: &Client, to: u32, steps: &[MoveStep]) -> BoardMove {
    let key = board_key();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen: Vec<MoveStep> = Vec::new();
    let mut last = None;
    loop {
        if let Ok(p) = placements(c).await {
            match p.move_of(&key) {
                Some(m) if steps.contains(&m.step) => return m.clone(),
                Some(m) if seen.last() != Some(&m.step) => seen.push(m.step),
                Some(_) => {}
                None if !seen.is_empty() || p.shard_of(RANK, &key.type_key, SHARDS) == to => {
                    cluster.dump_logs();
                    panic!(
                        "the move to shard {to} ended before it was seen at {steps:?} \
                         (steps seen: {seen:?}): {p:?}"
                    );
                }
                None => {}
            }
            last = Some(p);
        }
        if Instant::now() > deadline {
            cluster.dump_logs();
            panic!("the move to shard {to} never reached {steps:?} (seen {seen:?}): {last:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls `Placements` until no move of the board is under way and it lives
/// on shard `to`.
async fn wait_moved(cluster: &Cluster, c: &Client, to: u32) -> Placements {
    let key = board_key();
    let deadline = Instant::now() + MOVE_DEADLINE;
    loop {
        let last = match placements(c).await {
            Ok(p) if p.move_of(&key).is_none() && p.shard_of(RANK, &key.type_key, SHARDS) == to => {
                return p
            }
            other => other,
        };
        if Instant::now() > deadline {
            cluster.dump_logs();
            panic!(
                "the move to shard {to} did not finish within {MOVE_DEADLINE:?}; \
                 placements last read: {last:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A shard other than `from` whose leader is not `from`'s leader: `prefer`
/// if it is one.
fn target(cluster: &Cluster, from: u32, prefer: u32) -> u32 {
    let leaders = cluster.leaders();
    let source_leader = leaders[from as usize];
    let led_elsewhere =
        |s: u32| s != from && leaders[s as usize].is_some_and(|l| Some(l) != source_leader);
    if led_elsewhere(prefer) {
        return prefer;
    }
    (0..SHARDS)
        .find(|&s| led_elsewhere(s))
        .unwrap_or_else(|| panic!("no shard led by another node than shard {from}'s: {leaders:?}"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Victim {
    Source,
    Target,
}

/// What one move under a SIGKILL did.
#[derive(Debug)]
struct MoveRun {
    from: u32,
    to: u32,
    /// The node killed, and the step the move was at.
    killed: u64,
    at: MoveStep,
    /// Events acknowledged between `MoveBoard` and the move's end.
    acks: u64,
    /// Events first sent in that time and acknowledged (by the end of the
    /// test), and of those the ones held `STEP_PAUSE_MS` or longer.
    sent: usize,
    held: usize,
    sent_at: Instant,
    done_at: Instant,
}

impl MoveRun {
    fn summary(&self) -> String {
        let MoveRun { from, to, killed, at, acks, sent, held, sent_at, done_at } = self;
        format!(
            "move {from} -> {to}: node {killed} killed at step {at:?}, {acks} events \
             acknowledged while it ran, {sent} sent while it ran ({held} of them held \
             {STEP_PAUSE_MS} ms or longer), done {:?} after MoveBoard",
            done_at.duration_since(*sent_at)
        )
    }
}

/// Moves the board from where it lives to `to`; once the move is at one of
/// `kill_at`, kills the leader of the `victim` shard with SIGKILL and
/// restarts it 1 s later; waits until the move is done.
async fn move_killing(
    cluster: &mut Cluster,
    admin: &Client,
    l: &Ledger,
    to: u32,
    victim: Victim,
    kill_at: &[MoveStep],
) -> MoveRun {
    let key = board_key();
    let before = placements(admin).await.expect("placements before the move");
    assert!(before.moves.is_empty(), "no move under way before: {before:?}");
    let from = before.shard_of(RANK, &key.type_key, SHARDS);
    let acks_before = l.acked.load(Ordering::SeqCst);
    let sent = Instant::now();
    match move_board(admin, to).await {
        Ok(Response::Done) => {}
        other => panic!("MoveBoard of shard {from}'s board to shard {to}: {other:?}"),
    }
    let m = wait_step(cluster, admin, to, kill_at).await;
    assert_eq!((m.key.clone(), m.from, m.to), (key, from, to), "the move recorded: {m:?}");
    let shard = if victim == Victim::Source { from } else { to };
    let killed = cluster.leader_of(shard).await;
    eprintln!(
        "t92: move {from} -> {to} at step {:?} after {:?}: SIGKILL of node {killed} \
         ({victim:?} shard {shard}'s leader; leaders {:?})",
        m.step,
        sent.elapsed(),
        cluster.leaders()
    );
    cluster.kill9(killed);
    tokio::time::sleep(Duration::from_secs(1)).await;
    tokio::task::block_in_place(|| cluster.restart(killed));
    let done = wait_moved(cluster, admin, to).await;
    let acks = l.acked.load(Ordering::SeqCst) - acks_before;
    let done_at = Instant::now();
    eprintln!("t92: move {from} -> {to} done after {:?}: {done:?}", done_at.duration_since(sent));
    MoveRun { from, to, killed, at: m.step, acks, sent: 0, held: 0, sent_at: sent, done_at }
}

/// The rows of a read of items 1..=ITEMS that differ from the ledger, as
/// `(item, read, ledger)` (item 0: the read had the wrong number of rows).
fn mismatches(l: &Ledger, rows: &[(u64, Option<i64>)]) -> Vec<(u64, Option<i64>, i64)> {
    let mut bad: Vec<(u64, Option<i64>, i64)> = rows
        .iter()
        .filter(|(item, got)| got.unwrap_or(0) != l.sum(*item))
        .map(|&(item, got)| (item, got, l.sum(item)))
        .collect();
    if rows.len() != ITEMS as usize {
        bad.push((0, Some(rows.len() as i64), ITEMS as i64));
    }
    bad
}

fn all_items() -> Vec<u64> {
    (1..=ITEMS).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_board_under_scoring_loses_nothing_and_applies_nothing_twice() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let phase = |what: &str| eprintln!("t92: {what} at {:.1} s", started.elapsed().as_secs_f64());
    let mut cluster =
        Cluster::builder(3).shards(SHARDS).env("PLAUDIT_MOVE_STEP_PAUSE_MS", STEP_PAUSE_MS).start();
    cluster.wait_converged().await;
    let admin = cluster.client().await;
    admin.create_rank(ranking()).await.expect("the ranking");
    let key = board_key();
    let home = board_shard(RANK, &key.type_key, SHARDS);
    let p = placements(&admin).await.expect("placements");
    assert_eq!(p.shard_of(RANK, &key.type_key, SHARDS), home, "{p:?}");
    phase("cluster formed");

    let l = Arc::new(Ledger::new());
    let mut tasks = Vec::new();
    for t in 0..SCORERS {
        tasks.push(tokio::spawn(scorer(cluster.client().await, t, l.clone())));
    }
    grows_by(&l.acked, 200, Duration::from_secs(30), "scoring before the moves").await;
    phase("scoring");

    // Move 1, away from home: the source's leader dies while the board is
    // being copied or released.
    let to = target(&cluster, home, (home + 1) % SHARDS);
    let mut first = move_killing(
        &mut cluster,
        &admin,
        &l,
        to,
        Victim::Source,
        &[MoveStep::Copy, MoveStep::Release],
    )
    .await;
    phase("move 1 done");
    grows_by(&l.acked, 200, Duration::from_secs(30), "scoring after move 1").await;
    let ids = cluster.ids();
    cluster.wait_led_by(1, &ids, Duration::from_secs(30)).await;

    // Move 2, home again if another node leads it (else to a third shard):
    // the target's leader dies once the copy is there (the move at Release
    // or Activate), so the copy must have reached its replicas.
    let to = target(&cluster, first.to, home);
    let mut second = move_killing(
        &mut cluster,
        &admin,
        &l,
        to,
        Victim::Target,
        &[MoveStep::Release, MoveStep::Activate],
    )
    .await;
    phase("move 2 done");
    grows_by(&l.acked, 200, Duration::from_secs(30), "scoring after move 2").await;

    l.stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("a scorer");
    }
    phase("scorers stopped");
    for run in [&mut first, &mut second] {
        (run.sent, run.held) = l.sent_within(run.sent_at, run.done_at);
        eprintln!("t92: {}", run.summary());
    }
    let violations = l.violations.lock().unwrap().clone();
    assert!(
        violations.is_empty(),
        "{} events went wrong: {:?}",
        violations.len(),
        &violations[..violations.len().min(10)]
    );
    let slowest = l.events.lock().unwrap().iter().map(|e| e.took).max();
    eprintln!(
        "t92: {} events acknowledged ({} as duplicates), {} failed calls retried {:?}, \
         slowest event {slowest:?}",
        l.acked.load(Ordering::Relaxed),
        l.duplicates.load(Ordering::Relaxed),
        l.errors.load(Ordering::Relaxed),
        l.error_kinds.lock().unwrap(),
    );

    // The moves happened, and events were acknowledged while each ran.
    assert_ne!(first.from, first.to);
    assert_ne!(second.from, second.to);
    assert_eq!(first.from, home);
    assert_eq!(second.from, first.to, "move 2 started where move 1 left the board");
    for run in [&first, &second] {
        // Writes went on around the move, and some were sent while the
        // board could not take them, held, and applied once it could.
        assert!(run.acks > 0 && run.sent > 0, "no events during the move: {}", run.summary());
        assert!(run.held > 0, "no event was held by the move: {}", run.summary());
    }
    let p = placements(&admin).await.expect("placements at the end");
    assert!(p.moves.is_empty(), "{p:?}");
    assert_eq!(p.shard_of(RANK, &key.type_key, SHARDS), second.to, "{p:?}");
    let placed = p.placed.iter().find(|(b, _)| *b == key).map(|(_, s)| *s);
    let want = (second.to != home).then_some(second.to);
    assert_eq!(placed, want, "placed only away from its hash shard: {p:?}");

    // Every replica holds the same state.
    cluster.wait_converged().await;
    phase("converged");

    // Each event once: the board shows the ledger exactly, at the leader...
    let rows = admin.scores(RANK, board(), &all_items()).await.expect("scores");
    let bad = mismatches(&l, &rows);
    assert!(
        bad.is_empty(),
        "(item, board, ledger) differ (more: applied twice; less: lost): {bad:?}"
    );
    let top = admin.top(RANK, board(), 0, 1000).await.expect("top");
    let on_top: BTreeMap<u64, i64> = top.iter().map(|r| (r.item, r.score)).collect();
    assert_eq!(on_top.len(), top.len(), "an item twice on the board: {top:?}");
    assert!(on_top.keys().all(|i| (1..=ITEMS).contains(i)), "a stray item: {top:?}");
    let from_top: Vec<(u64, Option<i64>)> =
        all_items().into_iter().map(|i| (i, on_top.get(&i).copied())).collect();
    let bad = mismatches(&l, &from_top);
    assert!(bad.is_empty(), "top rows (item, board, ledger) differ: {bad:?}");
    // ...and at any replica (the SDK spreads `Replica` reads over them).
    for _ in 0..9 {
        let q = QueryRequest {
            rank: RANK,
            board: board(),
            query: BoardQuery::Scores { items: all_items() },
        };
        let rows = match admin.request(Request::Replica(Box::new(Request::Query(q)))).await {
            Ok(Response::Query(QueryReply::Scores(rows))) => rows,
            other => panic!("a replica read: {other:?}"),
        };
        let bad = mismatches(&l, &rows);
        assert!(bad.is_empty(), "a replica read (item, board, ledger) differs: {bad:?}");
    }

    // The board still remembers every acknowledged event: each comes back
    // a duplicate and changes nothing.
    let events = l.events.lock().unwrap().clone();
    let mut not_dup = Vec::new();
    for chunk in events.chunks(200) {
        let reqs: Vec<Request> = chunk
            .iter()
            .map(|&Acked { item, score, id, .. }| Request::Score(event(item, score, id)))
            .collect();
        for (&Acked { item, id, .. }, answer) in chunk.iter().zip(admin.pipeline(reqs).await) {
            match answer {
                Ok(Response::Score(r))
                    if r.boards.iter().all(|b| b.outcome == Outcome::Duplicate) => {}
                other => not_dup.push(format!("event {id} (item {item}): {other:?}")),
            }
        }
    }
    assert!(
        not_dup.is_empty(),
        "{} of {} acknowledged events re-sent were not duplicates: {:?}",
        not_dup.len(),
        events.len(),
        &not_dup[..not_dup.len().min(10)]
    );
    let rows = admin.scores(RANK, board(), &all_items()).await.expect("scores");
    let bad = mismatches(&l, &rows);
    assert!(bad.is_empty(), "the re-sent events changed scores: {bad:?}");
    phase("checked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moves_to_where_the_board_is_or_to_no_shard_are_refused() {
    let _serial = SERIAL.lock().await;
    let cluster =
        Cluster::builder(3).shards(SHARDS).env("PLAUDIT_MOVE_STEP_PAUSE_MS", STEP_PAUSE_MS).start();
    cluster.wait_converged().await;
    let admin = cluster.client().await;
    admin.create_rank(ranking()).await.expect("the ranking");
    let r = admin.score(event(1, 3, 1)).await.expect("an event");
    assert_eq!(r.boards[0].outcome, Outcome::Applied, "{r:?}");

    // No move yet: every board on its hash shard.
    let key = board_key();
    let home = board_shard(RANK, &key.type_key, SHARDS);
    let p = placements(&admin).await.expect("placements");
    assert!(p.moves.is_empty() && p.placed.is_empty(), "{p:?}");
    assert_eq!(p.shard_of(RANK, &key.type_key, SHARDS), home);

    for to in [home, SHARDS, 1000] {
        match move_board(&admin, to).await {
            Err(ClientError::Server(e)) => {
                assert_eq!(e.code, ErrorCode::BadRequest, "a move to shard {to}: {e}")
            }
            other => panic!("a move to shard {to} (home {home}) was not refused: {other:?}"),
        }
    }

    // Nothing was recorded, and the board still answers from home.
    let after = placements(&admin).await.expect("placements");
    assert!(after.moves.is_empty() && after.placed.is_empty(), "{after:?}");
    assert_eq!(after.epoch, p.epoch, "a refused move changed the placements: {after:?}");
    let scores = admin.scores(RANK, board(), &[1]).await.expect("scores");
    assert_eq!(scores, vec![(1, Some(3))]);

    // One move of a board at a time: another while one is under way (the
    // mover pauses before each step) is refused, and the first one ends.
    let (to, other) = ((home + 1) % SHARDS, (home + 2) % SHARDS);
    match move_board(&admin, to).await {
        Ok(Response::Done) => {}
        other => panic!("a move to shard {to}: {other:?}"),
    }
    match move_board(&admin, other).await {
        Err(ClientError::Server(e)) => assert_eq!(e.code, ErrorCode::Refused, "{e}"),
        other => panic!("a second move while one is under way: {other:?}"),
    }
    let p = wait_moved(&cluster, &admin, to).await;
    assert_eq!(p.placed, vec![(key, to)], "{p:?}");
    let scores = admin.scores(RANK, board(), &[1]).await.expect("scores");
    assert_eq!(scores, vec![(1, Some(3))], "the moved board kept its scores");
}

/// A move whose copy cannot be made is given up: here every copy is too
/// large (`PLAUDIT_MOVE_MAX_COPY_BYTES`), so the move stops at its Copy
/// step, the target drops what it may hold, the source takes events again,
/// and the board stays whole where it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_whose_copy_cannot_be_made_is_given_up_and_the_board_stays() {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::builder(3)
        .shards(SHARDS)
        .env("PLAUDIT_MOVE_STEP_PAUSE_MS", STEP_PAUSE_MS)
        .env("PLAUDIT_MOVE_MAX_COPY_BYTES", 64)
        .start();
    cluster.wait_converged().await;
    let admin = cluster.client().await;
    admin.create_rank(ranking()).await.expect("the ranking");
    for item in 1..=ITEMS {
        let r = admin.score(event(item, item as i64, item)).await.expect("an event");
        assert_eq!(r.boards[0].outcome, Outcome::Applied, "{r:?}");
    }
    let key = board_key();
    let home = board_shard(RANK, &key.type_key, SHARDS);
    let to = (home + 1) % SHARDS;
    match move_board(&admin, to).await {
        Ok(Response::Done) => {}
        other => panic!("a move to shard {to}: {other:?}"),
    }
    // It is seen frozen (at Copy), then given up.
    let m = wait_step(&cluster, &admin, to, &[MoveStep::Copy, MoveStep::Abort]).await;
    eprintln!("t92: the move at step {:?}", m.step);
    let deadline = Instant::now() + Duration::from_secs(30);
    let p = loop {
        let p = placements(&admin).await.expect("placements");
        if p.moves.is_empty() {
            break p;
        }
        assert!(Instant::now() < deadline, "the move was not given up: {p:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(p.placed.is_empty(), "nothing placed: {p:?}");
    assert_eq!(p.shard_of(RANK, &key.type_key, SHARDS), home);
    // The board is whole, and takes events again where it was.
    let rows = admin.scores(RANK, board(), &all_items()).await.expect("scores");
    let want: Vec<(u64, Option<i64>)> = all_items().iter().map(|&i| (i, Some(i as i64))).collect();
    assert_eq!(rows, want, "the board after the move was given up");
    let r = admin.score(event(1, 100, 1 << 40)).await.expect("an event after");
    assert_eq!((r.boards[0].outcome, r.boards[0].score), (Outcome::Applied, Some(101)), "{r:?}");
    // And every replica agrees (the target dropped its copy, if it took one).
    cluster.wait_converged().await;
}
