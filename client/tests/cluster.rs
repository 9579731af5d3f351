//! The SDK against scripted clusters of several nodes (`support::FakeCluster`):
//! where calls go, how they follow `NotLeader` hints, wait out elections,
//! leave dead or stopped nodes, and keep the routing table current.

mod support;

use plaudit_client::proto::cluster::NodeId;
use plaudit_client::proto::error::LeaderHint;
use plaudit_client::proto::likes::{
    CountsRequest, EntityCounts, LikeAction, LikeReply, LikeRequest,
};
use plaudit_client::proto::routing::shard_of;
use plaudit_client::proto::{
    BizConfig, Business, ErrorCode, LikeState, Request, Response, ShardId, WireError,
};
use plaudit_client::{Client, ClientError, ClientOptions};
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{FakeCluster, Handler, Reply};
use tokio::net::TcpListener;

const SHARDS: u32 = 3;
const BIZ: u32 = 1;

/// Three nodes, three shards on all three, node `s + 1` leading shard `s`,
/// node 1 leading the metadata group.
fn placement(addrs: &[String]) -> plaudit_client::proto::cluster::RoutingTable {
    support::table(
        addrs,
        vec![vec![1, 2, 3], vec![2, 3, 1], vec![3, 1, 2]],
        vec![Some(1), Some(2), Some(3)],
        Some(1),
    )
}

fn shard(user: u64) -> ShardId {
    shard_of(BIZ, user, SHARDS)
}

/// A user whose likes land on shard `s`.
fn user_on(s: ShardId) -> u64 {
    (0..).find(|&u| shard(u) == s).unwrap()
}

fn liked() -> Response {
    Response::Like(LikeReply {
        prev: LikeState::None,
        now: LikeState::Like,
        changed: true,
        mtime: 1,
    })
}

fn not_leader(shard: u32, leader: Option<NodeId>, epoch: u64) -> Response {
    let mut e = WireError::new(ErrorCode::NotLeader, "not the leader");
    e.leader = Some(LeaderHint { shard, leader, epoch });
    Response::Error(e)
}

fn is_like(r: &Request) -> bool {
    matches!(r, Request::Like(_))
}

/// Likes are served by `leader(shard)`; others answer with a hint naming it.
fn likes_led_by(leader: impl Fn(ShardId) -> NodeId + Send + Sync + 'static) -> Handler {
    Arc::new(move |node, req| match req {
        Request::Like(r) => {
            let s = shard_of(r.biz, r.user, SHARDS);
            if node == leader(s) {
                Reply::Now(liked())
            } else {
                Reply::Now(not_leader(s, Some(leader(s)), 1))
            }
        }
        Request::GetBiz(id) if node == 1 => Reply::Now(Response::Biz(Business {
            id: *id,
            name: "b".into(),
            config: BizConfig::default(),
        })),
        Request::GetBiz(_) => Reply::Now(not_leader(SHARDS, Some(1), 1)),
        other => panic!("unexpected {other:?}"),
    })
}

fn opts(timeout_ms: u64) -> ClientOptions {
    ClientOptions { pool_size: 1, timeout: Duration::from_millis(timeout_ms), ..Default::default() }
}

async fn wait_until<F: Future<Output = bool>>(what: &str, mut cond: impl FnMut() -> F) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn calls_go_straight_to_the_leader_of_their_shard_from_one_seed() {
    let cluster = FakeCluster::start(3, placement, likes_led_by(|s| s as NodeId + 1)).await;
    // One seed is enough: the others come from its routing table.
    let client = Client::connect_with(&cluster.addr(2), opts(5_000)).await.unwrap();
    assert_eq!(client.routing_table().map.nodes.len(), 3);

    for user in 0..30 {
        client.like(BIZ, 7, user, None).await.unwrap();
    }
    let likes: Vec<(NodeId, Request)> =
        cluster.log().into_iter().filter(|(_, r)| is_like(r)).collect();
    assert_eq!(likes.len(), 30, "no call was redirected");
    for (node, req) in likes {
        let Request::Like(r) = req else { unreachable!() };
        assert_eq!(node, shard(r.user) as NodeId + 1, "user {}", r.user);
    }
    client.get_biz(9).await.unwrap();
    assert_eq!(cluster.seen_by(|r| matches!(r, Request::GetBiz(_))), vec![1]);
}

#[tokio::test]
async fn a_not_leader_hint_moves_the_call_and_the_cached_leader() {
    // Node 2 leads everything, but the table still says otherwise.
    let cluster = FakeCluster::start(3, placement, likes_led_by(|_| 2)).await;
    let client = Client::connect_with(&cluster.seeds(), opts(5_000)).await.unwrap();
    let user = user_on(0);

    client.like(BIZ, 7, user, None).await.unwrap();
    assert_eq!(cluster.seen_by(is_like), vec![1, 2]);
    assert_eq!(client.routing_table().leaders[0], Some(2));
    // The next call on the shard goes straight to the hinted leader.
    client.like(BIZ, 7, user, None).await.unwrap();
    assert_eq!(cluster.seen_by(is_like), vec![1, 2, 2]);
}

#[tokio::test]
async fn an_election_in_progress_is_waited_out() {
    let tries = Arc::new(AtomicUsize::new(0));
    let seen = tries.clone();
    let handler: Handler = Arc::new(move |_, req| match req {
        Request::Like(r) if seen.fetch_add(1, Ordering::SeqCst) < 2 => {
            Reply::Now(not_leader(shard(r.user), None, 1))
        }
        Request::Like(_) => Reply::Now(liked()),
        other => panic!("unexpected {other:?}"),
    });
    let cluster = FakeCluster::start(3, placement, handler).await;
    let client = Client::connect_with(&cluster.seeds(), opts(5_000)).await.unwrap();

    let started = Instant::now();
    client.like(BIZ, 7, user_on(1), None).await.unwrap();
    assert_eq!(tries.load(Ordering::SeqCst), 3);
    // Two backoff steps (20 ms and 40 ms, each at least half taken).
    assert!(started.elapsed() >= Duration::from_millis(30), "{:?}", started.elapsed());
    assert_eq!(client.routing_table().leaders[1], None, "the election was noted");
}

#[tokio::test]
async fn a_failover_reaches_the_new_leader_through_hints() {
    // Shard 0's leader is node 1 until it dies, then node 3.
    let leader0 = Arc::new(AtomicU64::new(1));
    let l = leader0.clone();
    let cluster = FakeCluster::start(
        3,
        placement,
        likes_led_by(move |s| if s == 0 { l.load(Ordering::SeqCst) } else { s as NodeId + 1 }),
    )
    .await;
    let client = Client::connect_with(&cluster.seeds(), opts(5_000)).await.unwrap();
    let user = user_on(0);
    client.like(BIZ, 7, user, None).await.unwrap();

    cluster.kill(1);
    leader0.store(3, Ordering::SeqCst);
    let started = Instant::now();
    client.like(BIZ, 7, user, None).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
    // Served by node 3, reached directly or through node 2's hint.
    assert_eq!(cluster.seen_by(is_like).last(), Some(&3));
    assert_eq!(client.routing_table().leaders[0], Some(3));
}

#[tokio::test]
async fn a_stopped_leader_is_left_once_it_does_not_answer_a_ping() {
    let leader0 = Arc::new(AtomicU64::new(1));
    let l = leader0.clone();
    let cluster = FakeCluster::start(
        3,
        placement,
        likes_led_by(move |s| if s == 0 { l.load(Ordering::SeqCst) } else { s as NodeId + 1 }),
    )
    .await;
    let client = Client::connect_with(&cluster.seeds(), opts(5_000)).await.unwrap();
    let user = user_on(0);
    client.like(BIZ, 7, user, None).await.unwrap();

    // A paused process: its sockets stay open, nothing answers.
    cluster.silence(1);
    leader0.store(2, Ordering::SeqCst);
    let started = Instant::now();
    client.like(BIZ, 7, user, None).await.unwrap();
    let took = started.elapsed();
    // One second of silence, half a second for the ping, then node 2.
    assert!(took >= Duration::from_millis(1400) && took < Duration::from_secs(3), "{took:?}");
    assert_eq!(cluster.seen_by(is_like).last(), Some(&2));
}

#[tokio::test]
async fn a_slow_node_that_answers_pings_is_waited_for() {
    let handler: Handler = Arc::new(|_, req| match req {
        Request::Like(_) => Reply::After(Duration::from_millis(2500), liked()),
        other => panic!("unexpected {other:?}"),
    });
    let cluster = FakeCluster::start(3, placement, handler).await;
    let client = Client::connect_with(&cluster.seeds(), opts(5_000)).await.unwrap();
    client.like(BIZ, 7, user_on(0), None).await.unwrap();
    assert_eq!(cluster.seen_by(is_like), vec![1], "not abandoned, not sent twice");
}

#[tokio::test]
async fn dead_seeds_are_skipped() {
    let cluster = FakeCluster::start(3, placement, likes_led_by(|s| s as NodeId + 1)).await;
    let dead = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead_addr = dead.local_addr().unwrap().to_string();
    drop(dead);
    let seeds = vec![dead_addr, cluster.addr(3)];
    let client = Client::connect_cluster(&seeds, opts(5_000)).await.unwrap();
    assert_eq!(client.routing_table().map.nodes.len(), 3);
    client.like(BIZ, 7, user_on(1), None).await.unwrap();
}

#[tokio::test]
async fn when_every_node_is_gone_a_call_fails_as_unreachable_within_its_timeout() {
    let cluster = FakeCluster::start(3, placement, likes_led_by(|s| s as NodeId + 1)).await;
    let client = Client::connect_with(&cluster.seeds(), opts(1_000)).await.unwrap();
    for n in 1..=3 {
        cluster.kill(n);
    }
    let started = Instant::now();
    let err = client.like(BIZ, 7, user_on(0), None).await.unwrap_err();
    assert!(err.is_connection(), "{err:?}");
    assert!(started.elapsed() < Duration::from_millis(1500), "{:?}", started.elapsed());
}

#[tokio::test]
async fn errors_that_retrying_cannot_fix_come_back_at_once() {
    let handler: Handler = Arc::new(|_, req| match req {
        Request::Like(_) => Reply::Now(Response::Error(WireError::not_found("no business 1"))),
        other => panic!("unexpected {other:?}"),
    });
    let cluster = FakeCluster::start(3, placement, handler).await;
    let client = Client::connect_with(&cluster.seeds(), opts(5_000)).await.unwrap();
    let err = client.like(BIZ, 7, user_on(2), None).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::NotFound));
    assert_eq!(cluster.seen_by(is_like), vec![3]);
}

#[tokio::test]
async fn a_hint_from_a_newer_map_refreshes_the_table() {
    let handler: Handler = Arc::new(|node, req| match req {
        Request::Like(_) if node == 2 => Reply::Now(liked()),
        Request::Like(r) => Reply::Now(not_leader(shard(r.user), Some(2), 2)),
        other => panic!("unexpected {other:?}"),
    });
    let cluster = FakeCluster::start(3, placement, handler).await;
    let client = Client::connect_with(&cluster.seeds(), opts(5_000)).await.unwrap();
    {
        let mut t = cluster.table.lock().unwrap();
        t.map.epoch = 2;
        t.leaders = vec![Some(2); 3];
    }
    client.like(BIZ, 7, user_on(0), None).await.unwrap();
    let c = client.clone();
    wait_until("the client holds the epoch-2 table", || {
        let epoch = c.routing_table().map.epoch;
        async move { epoch == 2 }
    })
    .await;
    assert_eq!(client.routing_table().leaders, vec![Some(2); 3]);
}

#[tokio::test]
async fn the_table_is_refreshed_in_the_background_and_departed_nodes_lose_their_pool() {
    let cluster = FakeCluster::start(3, placement, likes_led_by(|s| s as NodeId + 1)).await;
    let client = Client::connect_with(&cluster.seeds(), opts(5_000)).await.unwrap();
    client.like(BIZ, 7, user_on(2), None).await.unwrap();
    assert_eq!(cluster.open_connections(3), 1);

    // Node 3 leaves the map; nobody calls.
    {
        let mut t = cluster.table.lock().unwrap();
        t.map.epoch = 2;
        t.map.nodes.truncate(2);
        t.map.shards = vec![vec![1, 2], vec![2, 1], vec![1, 2]];
        t.leaders = vec![Some(1), Some(2), Some(1)];
    }
    let c = client.clone();
    wait_until("a periodic refresh brings epoch 2", || {
        let epoch = c.routing_table().map.epoch;
        async move { epoch == 2 }
    })
    .await;
    wait_until("the pool of node 3 is closed", || {
        let open = cluster.open_connections(3);
        async move { open == 0 }
    })
    .await;
}

#[tokio::test]
async fn cluster_status_is_asked_of_any_node() {
    let handler: Handler = Arc::new(|node, req| match req {
        Request::ClusterStatus => Reply::Now(Response::ClusterStatus(Box::new(
            plaudit_client::proto::cluster::ClusterStatus {
                reporter: node,
                epoch: 1,
                nodes: vec![],
                meta: plaudit_client::proto::cluster::GroupStatus {
                    shard: None,
                    leader: Some(1),
                    replicas: vec![1, 2, 3],
                    states: vec![],
                },
                shards: vec![],
                moves: vec![],
            },
        ))),
        other => panic!("unexpected {other:?}"),
    });
    let cluster = FakeCluster::start(3, placement, handler).await;
    let client = Client::connect_with(&cluster.seeds(), opts(5_000)).await.unwrap();
    let status = client.cluster_status().await.unwrap();
    assert!((1..=3).contains(&status.reporter));
    assert_eq!(status.meta.replicas, vec![1, 2, 3]);
}

#[tokio::test]
async fn a_write_left_unanswered_does_not_time_out_the_reads_sent_beside_it() {
    // Every node answers counts at once and never answers a like (a write
    // stuck behind a hand-off, say).
    let handler: Handler = Arc::new(|_, req| match req {
        Request::Like(_) => Reply::Never,
        Request::Counts(c) => Reply::Now(Response::Counts(
            c.entities.iter().map(|&e| EntityCounts { entity: e, likes: e, dislikes: 0 }).collect(),
        )),
        other => panic!("unexpected {other:?}"),
    });
    let cluster = FakeCluster::start(3, placement, handler).await;
    let client = Client::connect_with(&cluster.seeds(), opts(300)).await.unwrap();
    // A like and two reads for node 1, in one pipeline: one batch on one
    // connection.
    let entity = (0..).find(|&e| shard(e) == 0).unwrap();
    let like = Request::Like(LikeRequest {
        biz: BIZ,
        entity,
        user: user_on(0),
        owner: None,
        action: LikeAction::Like,
    });
    let read = || Request::Counts(CountsRequest { biz: BIZ, entities: vec![entity] });
    let answers = client.pipeline(vec![read(), like, read()]).await;
    assert!(matches!(answers[1], Err(ClientError::Timeout)), "{:?}", answers[1]);
    for a in [&answers[0], &answers[2]] {
        let Ok(Response::Counts(c)) = a else { panic!("the read timed out with the like: {a:?}") };
        assert_eq!(c[0].likes, entity);
    }
}
