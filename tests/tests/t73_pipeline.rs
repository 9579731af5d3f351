//! `Client::pipeline` and the reads a node answers inline, on real nodes:
//! answers come back in request order, each as the single call would give
//! it (errors included, and an `Auth` refused in its place); board queries,
//! counts and states read in place on a single node give what the future
//! path gives, through passivation and re-activation of the boards; and a
//! pipeline over a three-node cluster reaches every shard's leader.

use plaudit_client::proto::auth::{AuthRequest, TokenSecret};
use plaudit_client::proto::likes::{CountsRequest, LikeRequest, StatusRequest};
use plaudit_client::proto::rankings::RankDef;
use plaudit_client::proto::routing::board_shard;
use plaudit_client::proto::scoring::{
    BoardQuery, BoardRef, Outcome, QueryReply, QueryRequest, RankedItem, ScoreRequest,
};
use plaudit_client::proto::window::{Granularity, TypeId};
use plaudit_client::proto::Envelope;
use plaudit_client::proto::{BizConfig, ErrorCode, LikeAction, LikeState, Request, Response};
use plaudit_client::{Client, ClientError, ClientOptions};
use plaudit_tests::raw::{request_frame, RawConn, READ_TIMEOUT};
use plaudit_tests::{metric_sum, total_ranking, wait_until, Cluster, Node};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

fn like(biz: u32, user: u64, entity: u64) -> Request {
    Request::Like(LikeRequest { biz, entity, user, owner: None, action: LikeAction::Like })
}

/// A ranking with one dimension, so that it has many boards.
fn ranking(id: u32) -> RankDef {
    RankDef { dims: vec!["room".into()], ..total_ranking(id, &format!("r{id}")) }
}

fn board(room: u64) -> BoardRef {
    BoardRef::At { dims: vec![("room".into(), room)], granularity: Granularity::Total, ts: now() }
}

fn score(rank: u32, room: u64, item: u64, score: i64, event_id: u64) -> Request {
    Request::Score(ScoreRequest {
        rank,
        item,
        score,
        sub: None,
        dims: vec![("room".into(), room)],
        ts: now(),
        event_id,
    })
}

fn query(rank: u32, room: u64, query: BoardQuery) -> Request {
    Request::Query(QueryRequest { rank, board: board(room), query })
}

fn items(r: &Result<Response, ClientError>) -> Vec<(u64, i64)> {
    match r {
        Ok(Response::Query(QueryReply::Items { items, .. })) => {
            items.iter().map(|i| (i.item, i.score)).collect()
        }
        other => panic!("expected items, got {other:?}"),
    }
}

fn rank_row(r: &Result<Response, ClientError>) -> Option<RankedItem> {
    match r {
        Ok(Response::Query(QueryReply::RankOf { row, .. })) => *row,
        other => panic!("expected a rank, got {other:?}"),
    }
}

fn code(r: &Result<Response, ClientError>) -> Option<ErrorCode> {
    r.as_ref().err().and_then(ClientError::code)
}

/// Waits until each of `entities` counts `likes`.
async fn delivered(client: &Client, biz: u32, entities: &[u64], likes: u64) {
    wait_until(Duration::from_secs(20), "likes are counted", || async {
        let counts = client.counts(biz, entities).await.unwrap();
        counts.iter().all(|c| c.likes == likes)
    })
    .await;
}

async fn setup(client: &Client, biz: u32, rank: u32) {
    client.create_biz(Some(biz), "pipe", BizConfig::default()).await.unwrap();
    client.create_rank(ranking(rank)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_answers_in_order_each_as_its_single_call_would() {
    let node = Node::start();
    let client = node.client().await;
    let (biz, rank) = (3, 31);
    setup(&client, biz, rank).await;

    let likes: Vec<Request> = (0..200).map(|i| like(biz, 1000 + i % 20, 50 + i / 20)).collect();
    for (i, a) in client.pipeline(likes).await.iter().enumerate() {
        assert!(matches!(a, Ok(Response::Like(r)) if r.now == LikeState::Like), "like {i}: {a:?}");
    }
    // Room r gets members 1..=5, member m scoring 10 * m + r.
    let mut events = Vec::new();
    for room in 0..4u64 {
        for m in 1..=5u64 {
            events.push(score(rank, room, m, (10 * m + room) as i64, room * 100 + m));
        }
    }
    for a in client.pipeline(events).await {
        assert!(matches!(a, Ok(Response::Score(_))), "{a:?}");
    }
    // Counts follow a like by delivery between shards: wait until they are in.
    delivered(&client, biz, &[50, 59], 20).await;
    // More writes than a connection may have in flight (256): the SDK
    // sends them in chunks, and none is refused.
    let many: Vec<Request> = (0..600).map(|u| like(biz, 5000 + u, 99)).collect();
    for (i, a) in client.pipeline(many).await.iter().enumerate() {
        assert!(matches!(a, Ok(Response::Like(_))), "like {i}: {a:?}");
    }
    delivered(&client, biz, &[99], 600).await;

    let too_many = (0..10_000).collect::<Vec<u64>>();
    let answers = client
        .pipeline(vec![
            Request::Counts(CountsRequest { biz, entities: vec![50, 59, 60] }),
            Request::Auth(AuthRequest { token: TokenSecret("not here".into()) }),
            query(rank, 2, BoardQuery::Top { offset: 0, limit: 3 }),
            Request::Status(StatusRequest { biz, user: 1000, entities: vec![50, 51, 60] }),
            Request::Status(StatusRequest { biz, user: 1, entities: too_many }),
            query(rank, 3, BoardQuery::RankOf { item: 4 }),
            query(999, 0, BoardQuery::Size),
            Request::Counts(CountsRequest { biz: 77, entities: vec![1] }),
            Request::Ping,
        ])
        .await;
    assert_eq!(answers.len(), 9);
    match &answers[0] {
        Ok(Response::Counts(c)) => {
            let likes: Vec<(u64, u64)> = c.iter().map(|c| (c.entity, c.likes)).collect();
            assert_eq!(likes, [(50, 20), (59, 20), (60, 0)]);
        }
        other => panic!("counts: {other:?}"),
    }
    assert!(matches!(&answers[1], Err(ClientError::Protocol(_))), "{:?}", answers[1]);
    assert_eq!(items(&answers[2]), [(5, 52), (4, 42), (3, 32)]);
    match &answers[3] {
        Ok(Response::Status(s)) => {
            let states: Vec<LikeState> = s.iter().map(|s| s.state).collect();
            assert_eq!(states, [LikeState::Like, LikeState::Like, LikeState::None]);
        }
        other => panic!("status: {other:?}"),
    }
    assert_eq!(code(&answers[4]), Some(ErrorCode::BadRequest), "{:?}", answers[4]);
    let row = rank_row(&answers[5]).expect("member 4 is on room 3's board");
    assert_eq!((row.rank, row.item, row.score), (2, 4, 43));
    assert_eq!(code(&answers[6]), Some(ErrorCode::NotFound), "{:?}", answers[6]);
    assert_eq!(code(&answers[7]), Some(ErrorCode::NotFound), "{:?}", answers[7]);
    assert!(matches!(answers[8], Ok(Response::Pong)));
}

/// With one active actor per shard, every board query evicts the board
/// read before it: the reads alternate between boards being activated
/// (the shard's path) and boards found active (read in place), and a write
/// must be visible to the next read whichever way it goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_in_place_follow_writes_through_passivation() {
    let node = Node::builder().shards(2).env("PLAUDIT_ACTOR_BUDGET_PER_SHARD", 1).start();
    let client = node.client().await;
    let rank = 41;
    setup(&client, 4, rank).await;
    let mut expected = [0i64; 6];
    let mut event = 0;
    for round in 1..=30i64 {
        for room in 0..6u64 {
            event += 1;
            let s = round * (room as i64 + 1);
            let a = client.request(score(rank, room, 9, s, event)).await.unwrap();
            assert!(matches!(a, Response::Score(_)), "{a:?}");
            expected[room as usize] += s;
            let r = client.request(query(rank, room, BoardQuery::RankOf { item: 9 })).await;
            let row = rank_row(&r).expect("member 9 is on the board");
            assert_eq!(row.score, expected[room as usize], "room {room}, round {round}");
            let top = client.request(query(rank, (room + 3) % 6, BoardQuery::Size)).await;
            let size = match top {
                Ok(Response::Query(QueryReply::Size(n))) => n,
                other => panic!("size: {other:?}"),
            };
            let seen = if round > 1 || (room + 3) % 6 < room { 1 } else { 0 };
            assert_eq!(size, seen, "room {}, round {round}", (room + 3) % 6);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_reaches_every_leader_of_a_cluster() {
    let cluster = Cluster::builder(3).shards(6).start();
    cluster.wait_converged().await;
    let client = cluster.client().await;
    let (biz, rank) = (5, 51);
    setup(&client, biz, rank).await;
    // 300 users spread over every shard, each liking entity 7 and 8.
    let likes: Vec<Request> =
        (0..300u64).flat_map(|u| [like(biz, 10_000 + u, 7), like(biz, 10_000 + u, 8)]).collect();
    for (i, a) in client.pipeline(likes).await.iter().enumerate() {
        assert!(matches!(a, Ok(Response::Like(_))), "like {i}: {a:?}");
    }
    delivered(&client, biz, &[7, 8], 300).await;
    let events: Vec<Request> = (1..=40u64).map(|m| score(rank, m % 4, m, m as i64, m)).collect();
    for a in client.pipeline(events).await {
        assert!(matches!(a, Ok(Response::Score(_))), "{a:?}");
    }
    let answers = client
        .pipeline(vec![
            Request::Counts(CountsRequest { biz, entities: vec![7, 8, 9] }),
            query(rank, 0, BoardQuery::Top { offset: 0, limit: 2 }),
            query(rank, 1, BoardQuery::RankOf { item: 37 }),
        ])
        .await;
    match &answers[0] {
        Ok(Response::Counts(c)) => {
            let likes: Vec<u64> = c.iter().map(|c| c.likes).collect();
            assert_eq!(likes, [300, 300, 0]);
        }
        other => panic!("counts: {other:?}"),
    }
    assert_eq!(items(&answers[1]), [(40, 40), (36, 36)]);
    let row = rank_row(&answers[2]).expect("member 37 is in room 1");
    assert_eq!((row.rank, row.score), (1, 37));

    // Counts of 20 entities span the shards: the SDK sends each shard's
    // part to its leader, so no node forwards any, and the answer is the
    // one a node's own fan-out gives.
    let entities: Vec<u64> = (1..=20).collect();
    let counts = || Request::Counts(CountsRequest { biz, entities: entities.clone() });
    let forwarded = || cluster.metric_total("plaudit_forwarded_requests_total");
    let before = forwarded();
    let split = client.pipeline((0..30).map(|_| counts()).collect()).await;
    let single = client.counts(biz, &entities).await.unwrap();
    assert_eq!(forwarded(), before, "the SDK's split reads went to the leaders");
    let whole =
        cluster.client_with(ClientOptions { split_reads: false, ..Default::default() }).await;
    let fanned = whole.pipeline((0..30).map(|_| counts()).collect()).await;
    assert!(forwarded() > before, "a whole read is fanned out by the node it reached");
    let likes = |r: &Result<Response, ClientError>| match r {
        Ok(Response::Counts(c)) => c.iter().map(|c| (c.entity, c.likes)).collect::<Vec<_>>(),
        other => panic!("counts: {other:?}"),
    };
    let want: Vec<(u64, u64)> =
        entities.iter().map(|&e| (e, if e == 7 || e == 8 { 300 } else { 0 })).collect();
    assert_eq!(likes(&Ok(Response::Counts(single))), want);
    for (a, b) in split.iter().zip(&fanned) {
        assert_eq!(likes(a), want);
        assert_eq!(likes(b), want);
    }

    // Scoring events go to the leader of their board's shard once the SDK
    // knows the ranking's shape (`client/src/rank_shapes.rs`), which a new
    // client asks for in the background after its first event: each node
    // then receives exactly the events of the boards it leads. Two
    // dimensions, named in the other order than the ranking's: a board
    // named with them swapped lives on another shard.
    let rank2 = 52;
    let two = RankDef { dims: vec!["anchor".into(), "room".into()], ..ranking(rank2) };
    client.create_rank(two).await.unwrap();
    let leaders = cluster.leaders();
    let leader_of = |anchor: u64, room: u64| {
        let board = TypeId { gran: Granularity::Total, start: 0, dims: vec![anchor, room] };
        leaders[board_shard(rank2, &board.to_key(), 6) as usize].expect("every shard led")
    };
    let scored = |id: u64| -> f64 {
        let text = cluster.node(id).metrics_text();
        metric_sum(&text, "plaudit_requests_total{op=\"score\"}").unwrap_or(0.0)
    };
    let fresh = cluster.client().await;
    let mut id = 50_000u64;
    let mut event = |room: u64, anchor: u64| {
        id += 1;
        let dims = vec![("room".into(), room), ("anchor".into(), anchor)];
        ScoreRequest { rank: rank2, item: 1, score: 1, sub: None, dims, ts: now(), event_id: id }
    };
    let mut rounds = 0;
    wait_until(Duration::from_secs(10), "each node receives the events of its boards", || {
        rounds += 1;
        let boards: Vec<(u64, u64)> = (0..24u64).map(|b| (b / 6 + 1, b % 6)).collect();
        let mut want: BTreeMap<u64, f64> = cluster.ids().iter().map(|&n| (n, 0.0)).collect();
        for &(anchor, room) in boards.iter().chain([&(9, 9)]) {
            *want.get_mut(&leader_of(anchor, room)).unwrap() += 1.0;
        }
        let before: BTreeMap<u64, f64> = cluster.ids().iter().map(|&n| (n, scored(n))).collect();
        let events: Vec<Request> =
            boards.iter().map(|&(anchor, room)| Request::Score(event(room, anchor))).collect();
        let single = event(9, 9);
        let (fresh, cluster, before) = (&fresh, &cluster, before);
        async move {
            for a in fresh.pipeline(events).await {
                assert!(matches!(a, Ok(Response::Score(_))), "{a:?}");
            }
            fresh.score(single).await.unwrap();
            cluster.ids().iter().all(|&n| scored(n) - before[&n] == want[&n])
        }
    })
    .await;
    // The first round went before the shape was known: to any node.
    assert!(rounds > 1, "the first events cannot have been routed by board");
}

/// The writes of one pipeline that go to the same group are proposed
/// together (`node/src/server/batch.rs`): each reply is still its own
/// request's, in a burst that mixes boards, duplicates, likes, repeats and
/// a refused write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_proposed_together_each_get_their_own_result() {
    let node = Node::start();
    let client = node.client().await;
    let (biz, rank) = (4, 41);
    setup(&client, biz, rank).await;
    let strict = BizConfig { dislike_enabled: false, ..BizConfig::default() };
    client.create_biz(Some(5), "strict", strict).await.unwrap();

    // Member m sits on room m % 3's board and gets 7 * m, then m more in a
    // second event; member 4's first event id comes again (a duplicate).
    let mut burst = Vec::new();
    for m in 1..=30u64 {
        burst.push(score(rank, m % 3, m, 7 * m as i64, 1000 + m));
    }
    for m in 1..=30u64 {
        burst.push(score(rank, m % 3, m, m as i64, 2000 + m));
    }
    burst.push(score(rank, 1, 4, 1_000, 1004));
    burst.push(like(biz, 7, 8));
    burst.push(like(biz, 7, 8));
    let dislike =
        LikeRequest { biz: 5, entity: 1, user: 1, owner: None, action: LikeAction::Dislike };
    burst.push(Request::Like(dislike));
    burst.push(like(biz, 7, 9));
    let answers = client.pipeline(burst).await;
    assert_eq!(answers.len(), 65);
    let scored = |a: &Result<Response, ClientError>| match a {
        Ok(Response::Score(r)) => match r.boards.as_slice() {
            [b] => (b.outcome, b.score),
            other => panic!("one board per event, got {other:?}"),
        },
        other => panic!("expected a score reply, got {other:?}"),
    };
    for m in 1..=30u64 {
        let first = scored(&answers[m as usize - 1]);
        assert_eq!(first, (Outcome::Applied, Some(7 * m as i64)), "member {m}, first event");
        let second = scored(&answers[30 + m as usize - 1]);
        assert_eq!(second, (Outcome::Applied, Some(8 * m as i64)), "member {m}, second event");
    }
    assert_eq!(scored(&answers[60]).0, Outcome::Duplicate, "a repeated event id");
    let liked = |a: &Result<Response, ClientError>| match a {
        Ok(Response::Like(r)) => (r.now, r.changed),
        other => panic!("expected a like reply, got {other:?}"),
    };
    assert_eq!(liked(&answers[61]), (LikeState::Like, true));
    assert_eq!(liked(&answers[62]), (LikeState::Like, false), "a repeated like changes nothing");
    assert_eq!(code(&answers[63]), Some(ErrorCode::BadRequest), "{:?}", answers[63]);
    assert_eq!(liked(&answers[64]), (LikeState::Like, true));
    // What the replies said is what the boards hold: nothing applied twice.
    let top = client.pipeline(vec![query(rank, 1, BoardQuery::Top { offset: 0, limit: 3 })]).await;
    assert_eq!(items(&top[0]), [(28, 224), (25, 200), (22, 176)]);
}

/// A read pass's replies leave together once its writes have ended
/// (`node/src/server/hold.rs`): a score and two board reads sent in one
/// segment come back in one segment, the reads' answers with the score's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_pass_is_answered_in_one_write() {
    let node = Node::start();
    let client = node.client().await;
    let (biz, rank) = (6, 61);
    setup(&client, biz, rank).await;
    let mut conn = first_event_then_raw(&client, rank, &node.addr()).await;
    answered_together(&mut conn, rank, 10).await;
}

/// On a cluster a pass's replies do not wait for its replicated writes,
/// unless every request of the pass came in a pipeline (ids with
/// `PIPELINED`, as `Client::pipeline` sends them): then they leave in one
/// write, as on one node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipelined_pass_is_answered_in_one_write_on_a_cluster() {
    use plaudit_client::proto::message::PIPELINED;
    let cluster = Cluster::builder(3).shards(6).start();
    cluster.wait_converged().await;
    let client = cluster.client().await;
    let (biz, rank) = (7, 71);
    setup(&client, biz, rank).await;
    let key = TypeId { gran: Granularity::Total, start: 0, dims: vec![1] }.to_key();
    let leader = cluster.leader_of(board_shard(rank, &key, 6)).await;
    let mut conn = first_event_then_raw(&client, rank, &cluster.node(leader).addr()).await;
    answered_together(&mut conn, rank, PIPELINED | 10).await;

    // Without the bit the reads leave at once, before the score's round
    // ends: seen in one round of twenty at least (a reader that came late
    // finds both segments in one read).
    let mut reads_first = false;
    for k in 0..20u64 {
        let replies = send_and_read(&mut conn, &pass(rank, 8, 20, 1000 + k), 3, |env| {
            expect_score(env, 20, 3 * (k as i64 + 1))
        })
        .await;
        if replies.first == [21, 22] {
            reads_first = true;
            break;
        }
    }
    assert!(reads_first, "a pass without the pipeline bit held its reads for its write");
}

/// Scores a board's first event through `client` (a board's first event on
/// a node reserves it against the ranking's limit on the way `handle_as`
/// takes, not staged with its pass's replies), then opens a raw connection
/// to `addr` that takes redirects.
async fn first_event_then_raw(client: &Client, rank: u32, addr: &str) -> RawConn {
    use plaudit_client::proto::cluster::{ClientHello, Routing};
    let first = client.pipeline(vec![score(rank, 1, 9, 1, 99)]).await;
    assert!(matches!(first[0], Ok(Response::Score(_))), "{:?}", first[0]);
    let mut conn = RawConn::connect(addr).await;
    conn.send_request(1, Request::Hello(ClientHello { routing: Routing::Redirect })).await;
    assert_eq!(conn.recv().await.body, Response::Hello);
    conn
}

/// A score of member `item` of board 1 under id `id` and two reads of the
/// board under the next two ids, in one segment.
fn pass(rank: u32, item: u64, id: u64, event_id: u64) -> Vec<u8> {
    let mut burst = request_frame(id, score(rank, 1, item, 3, event_id));
    burst.extend(request_frame(id + 1, query(rank, 1, BoardQuery::Top { offset: 0, limit: 3 })));
    burst.extend(request_frame(id + 2, query(rank, 1, BoardQuery::RankOf { item })));
    burst
}

fn expect_score(env: &Envelope<Response>, id: u64, want: i64) {
    if env.req_id == id {
        let Response::Score(r) = &env.body else { panic!("{:?}", env.body) };
        assert_eq!(r.boards[0].score, Some(want), "reply {id}");
    }
}

/// Five passes (`pass`, ids from `id`) whose three replies came back in
/// one segment. A hold ends after `MAX_HOLD` whether its write has or not
/// (`node/src/server/hold.rs`): on a loaded machine a round whose score
/// took longer comes back in two segments, which proves nothing either
/// way, and is tried again. Replies without the score sooner than that are
/// a hold that did not hold.
async fn answered_together(conn: &mut RawConn, rank: u32, id: u64) {
    const MAX_HOLD: Duration = Duration::from_millis(20);
    let (mut together, mut round) = (0, 0u64);
    while together < 5 {
        assert!(round < 50, "only {together} of {round} rounds' writes took under {MAX_HOLD:?}");
        let burst = pass(rank, 7, id, 100 + round);
        let want = 3 * (round as i64 + 1);
        let replies = send_and_read(conn, &burst, 3, |env| expect_score(env, id, want)).await;
        if replies.first == [id, id + 1, id + 2] {
            assert_eq!(replies.partial, 0, "round {round}: a partial frame");
            together += 1;
        } else {
            let (first, took) = (&replies.first, replies.took);
            assert!(
                took >= MAX_HOLD,
                "round {round}: replies {first:?} left after {took:?}, before their pass's write"
            );
        }
        round += 1;
    }
}

/// What came back for a burst: the ids in the first segment read (sorted),
/// how long after sending it came, and the bytes of a partial frame left.
struct Replies {
    first: Vec<u64>,
    took: Duration,
    partial: usize,
}

/// Sends `burst` and reads until `n` replies are in, handing each to `each`.
async fn send_and_read(
    conn: &mut RawConn,
    burst: &[u8],
    n: usize,
    mut each: impl FnMut(&Envelope<Response>),
) -> Replies {
    use plaudit_client::proto::frame;
    use tokio::io::AsyncReadExt;
    let sent = std::time::Instant::now();
    conn.send(burst).await;
    let mut ids = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut have = 0;
    let mut first_segment = None;
    // One read takes what the first segment brought; more reads only after
    // a hold that ran out (or a pass that holds nothing).
    while ids.len() < n {
        let n = tokio::time::timeout(READ_TIMEOUT, conn.stream.read(&mut buf[have..]))
            .await
            .expect("replies in time")
            .expect("read");
        have += n;
        let mut rest = &buf[..have];
        while rest.len() >= 4 {
            let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
            if rest.len() < 4 + len {
                break;
            }
            let env = frame::decode_payload::<Response>(&rest[4..4 + len]).expect("a reply");
            each(&env);
            ids.push(env.req_id);
            rest = &rest[4 + len..];
        }
        let used = have - rest.len();
        buf.copy_within(used..have, 0);
        have -= used;
        first_segment.get_or_insert((ids.clone(), sent.elapsed()));
    }
    let (mut first, took) = first_segment.expect("a first segment");
    first.sort_unstable();
    Replies { first, took, partial: have }
}
