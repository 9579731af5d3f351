//! A counts read through the SDK, against scripted nodes: split by the node
//! that leads each entity's shard, each entity asked once, and answered in
//! the order asked, repeats included, whether it was one call or part of a
//! pipeline.

mod support;

use plaudit_client::proto::likes::CountsRequest;
use plaudit_client::proto::routing::shard_of;
use plaudit_client::proto::{EntityId, Request, Response};
use plaudit_client::{Client, ClientOptions};
use std::time::Duration;
use support::FakeCluster;

const BIZ: u32 = 4;

fn counts(entities: &[EntityId]) -> Request {
    Request::Counts(CountsRequest { biz: BIZ, entities: entities.to_vec() })
}

fn entities_of(answer: &Response) -> Vec<EntityId> {
    match answer {
        Response::Counts(c) => {
            assert!(c.iter().all(|c| c.likes == c.entity), "{c:?}");
            c.iter().map(|c| c.entity).collect()
        }
        other => panic!("not counts: {other:?}"),
    }
}

#[tokio::test]
async fn repeated_entities_are_asked_once_and_answered_as_often_as_asked() {
    let cluster = FakeCluster::start(2, support::two_shards, support::counts_by_id()).await;
    let opts =
        ClientOptions { pool_size: 1, timeout: Duration::from_secs(5), ..Default::default() };
    let client = Client::connect_with(&cluster.seeds(), opts).await.unwrap();
    let a: EntityId = (0..).find(|&e| shard_of(BIZ, e, 2) == 0).unwrap();
    let b: EntityId = (0..).find(|&e| shard_of(BIZ, e, 2) == 1).unwrap();

    // One node's entities: one part, with `a` once.
    let one = client.request(counts(&[a, a])).await.unwrap();
    assert_eq!(entities_of(&one), vec![a, a]);
    // Both nodes' entities, in a call and in a pipeline beside another read.
    let both = client.request(counts(&[a, b, a])).await.unwrap();
    assert_eq!(entities_of(&both), vec![a, b, a]);
    let piped = client.pipeline(vec![counts(&[b, a]), counts(&[a, a, b])]).await;
    assert_eq!(entities_of(piped[0].as_ref().unwrap()), vec![b, a]);
    assert_eq!(entities_of(piped[1].as_ref().unwrap()), vec![a, a, b]);
    for (node, req) in cluster.log() {
        let Request::Counts(c) = req else { continue };
        let mut seen = c.entities.clone();
        seen.dedup();
        assert_eq!(seen, c.entities, "an entity asked twice of node {node}");
        assert!(c.entities.iter().all(|&e| shard_of(BIZ, e, 2) + 1 == node as u32), "{c:?}");
    }
}
