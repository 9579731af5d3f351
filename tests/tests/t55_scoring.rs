//! Scoring and leaderboard queries against a real node: a ranking with one
//! dimension and day + month windows receives events (duplicates, filtered
//! ones, past and expired windows); top, rank-of, around, batch scores,
//! sizes and the board list are exactly right, before and after a restart;
//! and after a SIGKILL during concurrent scoring, re-sending every event
//! counts each exactly once.

use plaudit_client::proto::rankings::{Aggregation, RankDef, RankSettings, TieMode, ValueFilter};
use plaudit_client::proto::scoring::{BoardRef, Outcome, RankedItem, ScoreRequest};
use plaudit_client::proto::window::{window_start, Granularity, TypeId, UtcOffset};
use plaudit_client::proto::ErrorCode;
use plaudit_client::Client;
use plaudit_tests::Node;
use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

const STREAMER: u64 = 110000260;
const DAY: i64 = 86_400;

fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

fn offset() -> UtcOffset {
    UtcOffset::parse("+08:00").unwrap()
}

fn def(id: u32) -> RankDef {
    RankDef {
        id,
        name: "gifts".into(),
        dims: vec!["ruid".into()],
        granularities: vec![Granularity::Day, Granularity::Month],
        utc_offset: offset(),
        aggregation: Aggregation::Incr,
        ties: TieMode::EarlierFirst,
        settings: RankSettings { retention: 2, ..RankSettings::default() },
    }
}

fn event(rank: u32, item: u64, score: i64, ts: i64, event_id: u64) -> ScoreRequest {
    ScoreRequest {
        rank,
        item,
        score,
        sub: None,
        dims: vec![("ruid".into(), STREAMER)],
        ts,
        event_id,
    }
}

fn board(g: Granularity, ts: i64) -> TypeId {
    TypeId { gran: g, start: window_start(g, offset(), ts), dims: vec![STREAMER] }
}

fn by_id(t: &TypeId) -> BoardRef {
    BoardRef::TypeId(t.format())
}

async fn outcomes(c: &Client, e: ScoreRequest) -> Vec<(String, Outcome, Option<i64>)> {
    let r = c.score(e).await.expect("score");
    r.boards.into_iter().map(|b| (b.type_id, b.outcome, b.score)).collect()
}

#[tokio::test]
async fn leaderboards_are_exact_through_duplicates_filters_windows_and_restarts() {
    let mut node = Node::start();
    let c = node.client().await;
    c.create_rank(def(1)).await.unwrap();
    let t = now();
    let (today, month) = (board(Granularity::Day, t), board(Granularity::Month, t));

    // item -> (final score): 1:50, 2:30, 3:30 (3 reaches 30 after 2), 4:10, 5:-5.
    let events = [(1, 20), (2, 30), (1, 30), (3, 10), (4, 10), (3, 20), (5, -5)];
    for (i, (item, score)) in events.iter().enumerate() {
        let got = outcomes(&c, event(1, *item, *score, t, 100 + i as u64)).await;
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].0.as_str(), got[0].1), (today.format().as_str(), Outcome::Applied));
        assert_eq!((got[1].0.as_str(), got[1].1), (month.format().as_str(), Outcome::Applied));
    }
    // A repeat changes nothing and says so, with the current score.
    let dup = outcomes(&c, event(1, 1, 20, t, 100)).await;
    assert!(dup.iter().all(|(_, o, s)| *o == Outcome::Duplicate && *s == Some(50)), "{dup:?}");

    let expected = |ranks: &[(u64, u64, i64)]| -> Vec<RankedItem> {
        ranks
            .iter()
            .map(|&(rank, item, score)| RankedItem { rank, item, score, sub: None })
            .collect()
    };
    let full = expected(&[(1, 1, 50), (2, 2, 30), (3, 3, 30), (4, 4, 10), (5, 5, -5)]);
    for b in [&today, &month] {
        assert_eq!(c.top(1, by_id(b), 0, 10).await.unwrap(), full, "{b}");
    }
    assert_eq!(c.top(1, by_id(&today), 1, 2).await.unwrap(), full[1..3].to_vec());
    let at = BoardRef::At {
        dims: vec![("ruid".into(), STREAMER)],
        granularity: Granularity::Day,
        ts: t,
    };
    assert_eq!(c.top(1, at, 0, 10).await.unwrap(), full, "the same board by coordinates");
    assert_eq!(c.rank_of(1, by_id(&today), 3).await.unwrap(), Some(full[2]));
    assert_eq!(c.rank_of(1, by_id(&today), 42).await.unwrap(), None);
    assert_eq!(c.around(1, by_id(&today), 3, 1).await.unwrap(), full[1..4].to_vec());
    assert_eq!(c.around(1, by_id(&today), 1, 2).await.unwrap(), full[0..3].to_vec());
    assert_eq!(
        c.scores(1, by_id(&today), &[5, 42, 1]).await.unwrap(),
        vec![(5, Some(-5)), (42, None), (1, Some(50))]
    );
    assert_eq!(c.board_size(1, by_id(&month)).await.unwrap(), 5);

    // Filters: a denied item and an out-of-range score are reported, not applied.
    let mut settings = def(1).settings;
    settings.filters.items = Some(ValueFilter::Deny(vec![99]));
    settings.filters.score_range = Some((-100, 1000));
    c.update_rank(1, settings).await.unwrap();
    for e in [event(1, 99, 5, t, 200), event(1, 1, 5000, t, 201)] {
        let got = outcomes(&c, e).await;
        assert!(got.iter().all(|(_, o, _)| *o == Outcome::Filtered), "{got:?}");
    }
    assert_eq!(c.board_size(1, by_id(&today)).await.unwrap(), 5);

    // Past windows: yesterday is kept (retention 2), ten days ago is not.
    let yesterday = outcomes(&c, event(1, 7, 3, t - DAY, 300)).await;
    assert_eq!(yesterday[0].0, board(Granularity::Day, t - DAY).format());
    assert_eq!(yesterday[0].1, Outcome::Applied);
    let old = outcomes(&c, event(1, 7, 3, t - 10 * DAY, 301)).await;
    assert_eq!(old[0].1, Outcome::Filtered, "an expired day window: {old:?}");
    assert_eq!(old[1].1, Outcome::Applied, "its month is still kept: {old:?}");

    // Unknown rankings and bad references are clear errors.
    let e = c.score(event(9, 1, 1, t, 1)).await.expect_err("unknown ranking");
    assert_eq!(e.code(), Some(ErrorCode::NotFound));
    let e = c.top(1, BoardRef::TypeId("week:0_1".into()), 0, 10).await.expect_err("no weeks");
    assert_eq!(e.code(), Some(ErrorCode::BadRequest));
    let mut no_dims = event(1, 1, 1, t, 2);
    no_dims.dims.clear();
    assert_eq!(
        c.score(no_dims).await.expect_err("missing dim").code(),
        Some(ErrorCode::BadRequest)
    );

    let page = c.boards(1, None, 100).await.unwrap();
    let names: Vec<&str> = page.boards.iter().map(|b| b.type_id.as_str()).collect();
    assert!(names.contains(&today.format().as_str()) && names.contains(&month.format().as_str()));
    assert_eq!(page.next, None);
    let first = c.boards(1, None, 1).await.unwrap();
    let rest = c.boards(1, first.next.as_deref(), 100).await.unwrap();
    assert_eq!(first.boards.len() + rest.boards.len(), page.boards.len(), "paging covers all");

    let before = c.top(1, by_id(&today), 0, 10).await.unwrap();
    drop(c);
    node.kill9();
    node.restart();
    let c = node.client().await;
    assert_eq!(c.top(1, by_id(&today), 0, 10).await.unwrap(), before, "after SIGKILL");
    let dup = outcomes(&c, event(1, 3, 20, t, 105)).await;
    assert!(dup.iter().all(|(_, o, _)| *o == Outcome::Duplicate), "ids survive: {dup:?}");
}

#[tokio::test]
async fn every_acknowledged_event_counts_exactly_once_after_a_sigkill() {
    let mut node = Node::start();
    let c = node.client().await;
    let def = RankDef { granularities: vec![Granularity::Total], dims: vec![], ..def(2) };
    c.create_rank(def).await.unwrap();
    let t = now();
    let ev = move |id: u64| ScoreRequest {
        rank: 2,
        item: id % 50,
        score: (id % 7) as i64 + 1,
        sub: None,
        dims: vec![],
        ts: t,
        event_id: id,
    };
    // Far more events than get through before the kill, which comes once a
    // good share is acknowledged (a condition, not a guess at the speed).
    const N: u64 = 40_000;
    const WRITERS: u64 = 8;
    let acks = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let (c, acks) = (c.clone(), acks.clone());
        tasks.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for id in (w..N).step_by(WRITERS as usize) {
                match c.score(ev(id)).await {
                    Ok(r) if r.boards[0].outcome == Outcome::Applied => {
                        acked.push(id);
                        acks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    Ok(r) => panic!("unexpected outcome {r:?}"),
                    Err(_) => break, // the node died
                }
            }
            acked
        }));
    }
    let progress = acks.clone();
    plaudit_tests::wait_until(
        std::time::Duration::from_secs(60),
        "2000 events acknowledged",
        || {
            let n = progress.load(std::sync::atomic::Ordering::Relaxed);
            async move { n >= 2000 }
        },
    )
    .await;
    node.kill9();
    let mut acked = Vec::new();
    for t in tasks {
        acked.extend(t.await.unwrap());
    }
    assert!(!acked.is_empty() && (acked.len() as u64) < N, "killed mid-load: {}", acked.len());
    node.restart();
    let c = node.client().await;
    // Re-send everything: acknowledged events must come back as duplicates.
    let acked: std::sync::Arc<std::collections::HashSet<u64>> =
        std::sync::Arc::new(acked.into_iter().collect());
    let mut resend = Vec::new();
    for w in 0..WRITERS {
        let (c, acked) = (c.clone(), acked.clone());
        resend.push(tokio::spawn(async move {
            for id in (w..N).step_by(WRITERS as usize) {
                let r = c.score(ev(id)).await.unwrap();
                if acked.contains(&id) {
                    assert_eq!(
                        r.boards[0].outcome,
                        Outcome::Duplicate,
                        "event {id} was acknowledged"
                    );
                }
            }
        }));
    }
    for t in resend {
        t.await.unwrap();
    }
    let mut want: HashMap<u64, i64> = HashMap::new();
    for id in 0..N {
        *want.entry(id % 50).or_default() += (id % 7) as i64 + 1;
    }
    let board = BoardRef::TypeId("total:0".into());
    let items: Vec<u64> = (0..50).collect();
    let got = c.scores(2, board, &items).await.unwrap();
    for (item, score) in got {
        assert_eq!(score, Some(want[&item]), "item {item} counts every event exactly once");
    }
}

#[tokio::test]
async fn the_cli_scores_and_queries_with_the_documented_shapes() {
    let node = Node::start();
    let created = node.cli(
        "rank create --id 5 --name streamers --dims ruid --granularity day,month \
         --utc-offset +08:00 --retention 10000",
    );
    assert_eq!(created["id"], 5, "{created}");
    let score = |item: &str, score: &str, id: &str| {
        let ev = "--dim ruid=110000260 --ts 1713165315";
        node.cli(&format!("score --rank 5 --item {item} --score {score} {ev} --event-id {id}"))
    };
    let first = score("1", "10", "1");
    assert_eq!(
        first,
        serde_json::json!({"boards":[
            {"type_id":"day:1713110400_110000260","outcome":"applied","score":10},
            {"type_id":"month:1711900800_110000260","outcome":"applied","score":10}
        ]})
    );
    assert_eq!(score("1", "10", "1")["boards"][0]["outcome"], "duplicate");
    score("2", "20", "2");

    let month = "--type-id month:1711900800_110000260";
    let top = node.cli(&format!("top --rank 5 {month}"));
    assert_eq!(
        top,
        serde_json::json!({"type_id":"month:1711900800_110000260","items":[
            {"rank":1,"item":2,"score":20,"sub":null},
            {"rank":2,"item":1,"score":10,"sub":null}
        ]})
    );
    let by_coords =
        node.cli("top --rank 5 --dim ruid=110000260 --granularity day --ts 1713165315 --limit 1");
    assert_eq!(by_coords["type_id"], "day:1713110400_110000260");
    assert_eq!(by_coords["items"].as_array().map(Vec::len), Some(1));
    let rank_of = node.cli(&format!("rank-of --rank 5 --item 1 {month}"));
    assert_eq!(rank_of, serde_json::json!({"item":1,"rank":2,"score":10}));
    let absent = node.cli(&format!("rank-of --rank 5 --item 9 {month}"));
    assert_eq!(absent, serde_json::json!({"item":9,"rank":null,"score":null}));
    let around = node.cli(&format!("around --rank 5 --item 1 --k 1 {month}"));
    assert_eq!(around["items"].as_array().map(Vec::len), Some(2));
    let size = node.cli(&format!("board-size --rank 5 {month}"));
    assert_eq!(size, serde_json::json!({"size":2}));
    let boards = node.cli("boards --rank 5");
    assert_eq!(
        boards,
        serde_json::json!({"boards":[
            {"type_id":"day:1713110400_110000260","size":2},
            {"type_id":"month:1711900800_110000260","size":2}
        ],"next":null})
    );
    let err = node.cli("top --rank 6 --type-id total:0");
    assert_eq!(err["error"]["code"], "NotFound");
}

#[tokio::test]
async fn retention_deletes_expired_sub_boards() {
    let mut node = Node::builder().env("PLAUDIT_RETENTION_SWEEP_SECS", 1).start();
    let c = node.client().await;
    c.create_rank(def(3)).await.unwrap();
    let t = now();
    for (i, ts) in [t, t - DAY, t - 2 * DAY].into_iter().enumerate() {
        let got = outcomes(&c, event(3, 1, 5, ts, i as u64)).await;
        assert_eq!(got[0].1, Outcome::Applied, "{got:?}");
    }
    let names = |c: Client| async move {
        let page = c.boards(3, None, 100).await.unwrap();
        page.boards.into_iter().map(|b| b.type_id).collect::<Vec<_>>()
    };
    let old =
        [board(Granularity::Day, t - DAY).format(), board(Granularity::Day, t - 2 * DAY).format()];
    let listed = names(c.clone()).await;
    assert!(old.iter().all(|o| listed.contains(o)), "{listed:?}");

    // Keep only the current window from now on: the sweep deletes the rest.
    let settings = RankSettings { retention: 0, ..def(3).settings };
    c.update_rank(3, settings).await.unwrap();
    let c2 = c.clone();
    plaudit_tests::wait_until(std::time::Duration::from_secs(20), "expired boards deleted", || {
        let c = c2.clone();
        let old = old.clone();
        async move {
            let listed = names(c).await;
            !old.iter().any(|o| listed.contains(o))
        }
    })
    .await;
    let listed = names(c.clone()).await;
    assert!(listed.contains(&board(Granularity::Day, t).format()), "today stays: {listed:?}");
    assert!(listed.contains(&board(Granularity::Month, t).format()), "{listed:?}");
    assert_eq!(c.board_size(3, BoardRef::TypeId(old[0].clone())).await.unwrap(), 0);

    drop(c);
    node.kill9();
    node.restart();
    let c = node.client().await;
    let listed = names(c.clone()).await;
    assert!(!old.iter().any(|o| listed.contains(o)), "deleted for good: {listed:?}");
}

/// A sub-board remembers event ids for a time (ten minutes by default),
/// not for a count: a retry that arrives after 200,000 newer events on the
/// same board (milliseconds of a hot board's traffic) is still answered
/// `duplicate` and counted once.
#[tokio::test]
async fn a_retry_after_two_hundred_thousand_newer_events_is_a_duplicate() {
    let node = Node::start();
    let c = node.client().await;
    let mut d = def(3);
    d.granularities = vec![Granularity::Day];
    c.create_rank(d).await.unwrap();
    let t = now();
    let first = event(3, 1, 7, t, u64::MAX);
    assert_eq!(outcomes(&c, first.clone()).await[0].1, Outcome::Applied);

    const NEWER: u64 = 200_000;
    const WORKERS: u64 = 256;
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..WORKERS {
        let c = c.clone();
        workers.spawn(async move {
            for i in (w..NEWER).step_by(WORKERS as usize) {
                let r = c.score(event(3, 2 + i % 1000, 1, t, i)).await.expect("score");
                assert_eq!(r.boards[0].outcome, Outcome::Applied, "event {i}");
            }
        });
    }
    while let Some(done) = workers.join_next().await {
        done.unwrap();
    }

    let retry = outcomes(&c, first).await;
    assert_eq!(retry[0].1, Outcome::Duplicate, "{retry:?}");
    assert_eq!(retry[0].2, Some(7), "counted once");
    let today = by_id(&board(Granularity::Day, t));
    assert_eq!(
        c.scores(3, today.clone(), &[1, 2]).await.unwrap(),
        vec![(1, Some(7)), (2, Some(200))]
    );
    assert_eq!(c.board_size(3, today).await.unwrap(), 1001);
}
