use super::*;
use plaudit_proto::likes::LikeRequest;
use plaudit_proto::scoring::{
    BoardOutcome, BoardQuery, BoardRef, Outcome, ScoreReply, ScoreRequest,
};
use plaudit_proto::window::Granularity;
use plaudit_proto::LikeAction;
use proptest::prelude::*;

const TTL: Duration = Duration::from_millis(250);

fn counts(entities: &[u64]) -> Request {
    Request::Counts(CountsRequest { biz: 1, entities: entities.to_vec() })
}

fn like(entity: u64) -> Request {
    Request::Like(LikeRequest { biz: 1, entity, user: 9, owner: None, action: LikeAction::Like })
}

fn answer(entities: &[u64], likes: u64) -> Response {
    Response::Counts(
        entities.iter().map(|&entity| EntityCounts { entity, likes, dislikes: 0 }).collect(),
    )
}

fn hot(entity: u64) -> HotKey {
    HotKey::Entity { biz: 1, entity }
}

#[test]
fn only_hot_keys_are_kept_and_only_for_the_ttl() {
    let t0 = Instant::now();
    let mut c = HotCache::new(TTL);
    c.listed([hot(5)], t0);
    let e = c.epoch();
    c.filled(&counts(&[5, 6]), e, t0, &answer(&[5, 6], 3));
    // 5 is hot and here; 6 is not hot, so it is asked for.
    let later = t0 + Duration::from_millis(100);
    match c.plan(counts(&[6, 5]), later) {
        Plan::Part { send, have, age } => {
            assert_eq!(send, counts(&[6]));
            assert_eq!(have, vec![None, Some(EntityCounts { entity: 5, likes: 3, dislikes: 0 })]);
            assert_eq!(age, Duration::from_millis(100));
            let merged = merge_part(have, answer(&[6], 1)).unwrap();
            assert_eq!(
                merged,
                Response::Counts(vec![
                    EntityCounts { entity: 6, likes: 1, dislikes: 0 },
                    EntityCounts { entity: 5, likes: 3, dislikes: 0 },
                ])
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(
        matches!(c.plan(counts(&[5]), later), Plan::Hit(_, age) if age == Duration::from_millis(100))
    );
    assert!(matches!(c.plan(counts(&[5]), t0 + TTL), Plan::Send(_)), "expired at the TTL");
    // A short answer cannot be merged.
    assert!(merge_part(vec![None, None], answer(&[6], 1)).is_none());
}

#[test]
fn an_answered_write_drops_its_key_and_answers_sent_before_it_ended() {
    let t0 = Instant::now();
    let mut c = HotCache::new(TTL);
    c.listed([hot(5)], t0);
    let before = c.epoch();
    c.filled(&counts(&[5]), before, t0, &answer(&[5], 3));
    // A like is sent: nothing changes until it is answered.
    let during = c.epoch();
    assert!(matches!(c.plan(counts(&[5]), t0), Plan::Hit(..)), "a write in flight drops nothing");
    c.wrote(&like(5), None);
    assert!(matches!(c.plan(counts(&[5]), t0), Plan::Send(_)), "dropped when it is answered");
    // A read sent while the write was in flight may not show it.
    c.filled(&counts(&[5]), during, t0, &answer(&[5], 3));
    assert!(matches!(c.plan(counts(&[5]), t0), Plan::Send(_)));
    let after = c.epoch();
    c.filled(&counts(&[5]), after, t0, &answer(&[5], 4));
    assert!(
        matches!(c.plan(counts(&[5]), t0), Plan::Hit(Response::Counts(v), _) if v[0].likes == 4)
    );
}

fn top(board: &str, offset: u32) -> Request {
    Request::Query(QueryRequest {
        rank: 4,
        board: BoardRef::TypeId(board.into()),
        query: BoardQuery::Top { offset, limit: 10 },
    })
}

fn score() -> Request {
    Request::Score(ScoreRequest {
        rank: 4,
        item: 1,
        score: 1,
        sub: None,
        dims: vec![],
        ts: 0,
        event_id: 0,
    })
}

/// A score's answer, naming the boards it scored.
fn scored(boards: &[&str]) -> Response {
    Response::Score(ScoreReply {
        boards: boards
            .iter()
            .map(|b| BoardOutcome {
                type_id: b.to_string(),
                outcome: Outcome::Applied,
                score: Some(1),
            })
            .collect(),
    })
}

/// A cache where boards "a" and "b" of ranking 4 are hot.
fn two_hot_boards(t0: Instant) -> HotCache {
    let mut c = HotCache::new(TTL);
    let reply = Response::Query(QueryReply::Size(3));
    // Read once so the ranking is in scope, then listed hot.
    c.filled(&top("a", 0), 0, t0, &reply);
    assert_eq!(c.scope(), Some(HotSetRequest { bizs: vec![], ranks: vec![4] }));
    c.listed(["a", "b"].map(|b| HotKey::Board { rank: 4, board: b.into() }), t0);
    c
}

#[test]
fn board_pages_are_kept_per_query_and_dropped_by_a_score_of_their_board() {
    let t0 = Instant::now();
    let mut c = two_hot_boards(t0);
    let reply = Response::Query(QueryReply::Size(3));
    let fill = |c: &mut HotCache, q: &Request| c.filled(q, c.epoch(), t0, &reply);
    fill(&mut c, &top("a", 0));
    fill(&mut c, &top("b", 0));
    assert!(matches!(c.plan(top("a", 0), t0), Plan::Hit(..)));
    assert!(matches!(c.plan(top("a", 10), t0), Plan::Send(_)), "another page is another entry");
    // An event answered as scored on "a" drops "a" only.
    c.wrote(&score(), Some(&scored(&["a"])));
    assert!(matches!(c.plan(top("a", 0), t0), Plan::Send(_)));
    assert!(matches!(c.plan(top("b", 0), t0), Plan::Hit(..)));
    // One that failed may have scored any board: it drops them all.
    fill(&mut c, &top("a", 0));
    c.wrote(&score(), None);
    assert!(matches!(c.plan(top("a", 0), t0), Plan::Send(_)));
    assert!(matches!(c.plan(top("b", 0), t0), Plan::Send(_)));
}

#[test]
fn a_read_sent_before_a_score_ended_fills_only_boards_it_did_not_score() {
    let t0 = Instant::now();
    let reply = Response::Query(QueryReply::Size(3));
    let at = |dims| {
        Request::Query(QueryRequest {
            rank: 4,
            board: BoardRef::At { dims, granularity: Granularity::Total, ts: 0 },
            query: BoardQuery::Top { offset: 0, limit: 10 },
        })
    };
    let mut c = two_hot_boards(t0);
    c.listed(
        [HotKey::board(4, &BoardRef::At { dims: vec![], granularity: Granularity::Total, ts: 0 })],
        t0,
    );
    let before = c.epoch();
    c.wrote(&score(), Some(&scored(&["a"])));
    c.filled(&top("a", 0), before, t0, &reply);
    c.filled(&top("b", 0), before, t0, &reply);
    c.filled(&at(vec![]), before, t0, &reply);
    assert!(matches!(c.plan(top("a", 0), t0), Plan::Send(_)), "it may predate the score");
    assert!(matches!(c.plan(top("b", 0), t0), Plan::Hit(..)), "the score did not touch it");
    // A board named by dimensions may be the one scored: held to every stamp.
    assert!(matches!(c.plan(at(vec![]), t0), Plan::Send(_)));
}

#[test]
fn keys_no_node_lists_stay_hot_while_this_client_reads_them() {
    let t0 = Instant::now();
    let mut c = HotCache::new(TTL);
    c.tick(t0);
    c.listed([hot(5), hot(6)], t0);
    let t1 = t0 + Duration::from_secs(1);
    for _ in 0..50 {
        let _ = c.plan(counts(&[5]), t1);
    }
    c.tick(t1);
    assert_eq!(c.hot_keys(), 2, "both were listed since the last tick");
    let t2 = t1 + Duration::from_secs(1);
    for _ in 0..50 {
        let _ = c.plan(counts(&[5]), t2);
    }
    c.tick(t2);
    assert_eq!(c.hot_keys(), 1, "6 was neither listed nor read");
    assert!(c.marks.contains_key(&hot(5)));
}

/// One step of a client's life with one entity, as the cache sees it.
#[derive(Debug, Clone)]
enum Step {
    SendRead,
    /// Answers the oldest read in flight with the value it saw at its
    /// send (`false`) or now (`true`).
    AnswerRead(bool),
    SendWrite,
    /// The oldest write sent and not yet applied is applied.
    ApplyWrite,
    /// The oldest applied write is answered.
    AnswerWrite,
    Listed,
    Tick,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => Just(Step::SendRead),
        4 => any::<bool>().prop_map(Step::AnswerRead),
        2 => Just(Step::SendWrite),
        2 => Just(Step::ApplyWrite),
        2 => Just(Step::AnswerWrite),
        1 => Just(Step::Listed),
        1 => Just(Step::Tick),
    ]
}

proptest! {
    /// Whatever the interleaving of reads, writes, listings and ticks, a
    /// cached answer never shows fewer likes than this client's
    /// acknowledged likes: a client reads its own writes.
    #[test]
    fn a_cached_answer_is_never_older_than_an_acknowledged_write(
        steps in proptest::collection::vec(step(), 1..200),
        listed_first in any::<bool>(),
    ) {
        let t0 = Instant::now();
        let mut c = HotCache::new(Duration::from_secs(3600));
        if listed_first {
            c.listed([hot(5)], t0);
        }
        let mut truth = 0u64;
        let mut acked = 0u64;
        // Reads in flight: (epoch, value when sent); writes: applied?
        let mut reads: std::collections::VecDeque<(u64, u64)> = Default::default();
        let mut writes: std::collections::VecDeque<bool> = Default::default();
        for (i, s) in steps.into_iter().enumerate() {
            let now = t0 + Duration::from_millis(i as u64);
            match s {
                Step::SendRead => match c.plan(counts(&[5]), now) {
                    Plan::Hit(Response::Counts(v), _) => {
                        prop_assert!(v[0].likes >= acked, "cached {} after {} acked", v[0].likes, acked);
                    }
                    Plan::Hit(..) | Plan::Part { .. } => prop_assert!(false, "one entity"),
                    Plan::Send(_) => reads.push_back((c.epoch(), truth)),
                },
                Step::AnswerRead(late) => {
                    if let Some((epoch, at_send)) = reads.pop_front() {
                        let seen = if late { truth } else { at_send };
                        c.filled(&counts(&[5]), epoch, now, &answer(&[5], seen));
                    }
                }
                // A write stamps nothing when it is sent (`cluster/cached.rs`).
                Step::SendWrite => writes.push_back(false),
                Step::ApplyWrite => {
                    if let Some(w) = writes.iter_mut().find(|w| !**w) {
                        *w = true;
                        truth += 1;
                    }
                }
                Step::AnswerWrite => {
                    if writes.front() == Some(&true) {
                        writes.pop_front();
                        c.wrote(&like(5), None);
                        acked += 1;
                    }
                }
                Step::Listed => c.listed([hot(5)], now),
                Step::Tick => c.tick(now),
            }
        }
    }
}

#[test]
fn misses_of_hot_keys_go_to_any_replica_only_when_asked() {
    let t0 = Instant::now();
    for spread in [false, true] {
        let mut c = HotCache::new(TTL).spreading(spread);
        c.listed([hot(5)], t0);
        let plan = c.plan(counts(&[5]), t0);
        let Plan::Send(sent) = plan else { panic!("{plan:?}") };
        assert_eq!(matches!(sent, Request::Replica(_)), spread, "{sent:?}");
        // A key that is not hot goes to its leader either way.
        assert!(matches!(c.plan(counts(&[6]), t0), Plan::Send(Request::Counts(_))));
        // An answer to the spread read fills the cache like any other.
        c.filled(&sent, c.epoch(), t0, &answer(&[5], 3));
        assert!(matches!(c.plan(counts(&[5]), t0), Plan::Hit(..)));
    }
}
