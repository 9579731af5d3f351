//! Where moved entities live, from the SDK's side, against scripted nodes:
//! the routes are read page by page, a refresh that holds the current
//! version is told "unchanged", a node from before pages is asked the
//! one-reply list, and a moved entity's reads go to the node that leads
//! the shard it lives on.

mod support;

use plaudit_client::proto::entity_routes::version;
use plaudit_client::proto::likes::CountsRequest;
use plaudit_client::proto::placement::EntityKey;
use plaudit_client::proto::routing::shard_of;
use plaudit_client::proto::{EntityId, Request, Response, ShardId};
use plaudit_client::{Client, ClientOptions};
use std::time::{Duration, Instant};
use support::{FakeCluster, Routes};

const BIZ: u32 = 4;

/// Two entities of shard 0 moved to shard 1, and one of shard 1 to shard 0.
fn moved() -> (Vec<(EntityKey, ShardId)>, EntityId) {
    let on = |shard: ShardId| (0..).filter(move |&e| shard_of(BIZ, e, 2) == shard);
    let mut to_one = on(0).take(2);
    let (a, b) = (to_one.next().unwrap(), to_one.next().unwrap());
    let c = on(1).next().unwrap();
    let key = |entity| EntityKey { biz: BIZ, entity };
    let mut routes = vec![(key(a), 1), (key(b), 1), (key(c), 0)];
    routes.sort();
    (routes, a)
}

fn opts() -> ClientOptions {
    ClientOptions { pool_size: 1, timeout: Duration::from_secs(5), ..Default::default() }
}

/// The nodes that served a counts read of `entity` alone.
async fn served_by(cluster: &FakeCluster, client: &Client, entity: EntityId) -> Vec<u64> {
    let before = cluster.log().len();
    let read = Request::Counts(CountsRequest { biz: BIZ, entities: vec![entity] });
    let answer = client.request(read).await.expect("a counts read");
    assert!(matches!(answer, Response::Counts(c) if c[0].entity == entity));
    cluster.log()[before..].iter().map(|(n, _)| *n).collect()
}

#[tokio::test]
async fn routes_are_read_page_by_page_and_then_only_asked_whether_they_changed() {
    let cluster = FakeCluster::start(2, support::two_shards, support::counts_by_id()).await;
    let (routes, a) = moved();
    *cluster.routes.lock().unwrap() = Routes::Paged(routes.clone());
    let client = Client::connect_with(&cluster.seeds(), opts()).await.unwrap();
    // Entity `a` hashes to shard 0 (node 1) but lives on shard 1 (node 2).
    assert_eq!(served_by(&cluster, &client, a).await, vec![2]);
    let asks = cluster.route_asks.lock().unwrap().clone();
    assert_eq!(asks.len(), 3, "one route a page: {asks:?}");
    assert_eq!(asks[0].after, None);
    assert_eq!(
        asks[1..].iter().map(|p| p.after).collect::<Vec<_>>(),
        [Some(routes[0].0), Some(routes[1].0)]
    );

    // The next refresh (every 3 s) names the version it holds, and is
    // answered in one "unchanged".
    let held = version(&routes);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cluster.route_asks.lock().unwrap().iter().any(|p| p.known == Some(held)) {
        assert!(Instant::now() < deadline, "no refresh named version {held}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let n = cluster.route_asks.lock().unwrap().len();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(cluster.route_asks.lock().unwrap().len(), n, "nothing more read");
    assert_eq!(served_by(&cluster, &client, a).await, vec![2]);

    // A move back home: the version changes, and the SDK reads the list again.
    let rest: Vec<_> = routes.iter().filter(|(k, _)| k.entity != a).copied().collect();
    *cluster.routes.lock().unwrap() = Routes::Paged(rest.clone());
    let deadline = Instant::now() + Duration::from_secs(10);
    while served_by(&cluster, &client, a).await != vec![1] {
        assert!(Instant::now() < deadline, "the SDK did not learn the entity came home");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_node_from_before_pages_is_asked_the_whole_list() {
    let cluster = FakeCluster::start(2, support::two_shards, support::counts_by_id()).await;
    let (routes, a) = moved();
    *cluster.routes.lock().unwrap() = Routes::Old(routes);
    let client = Client::connect_with(&cluster.seeds(), opts()).await.unwrap();
    assert_eq!(served_by(&cluster, &client, a).await, vec![2]);
}
