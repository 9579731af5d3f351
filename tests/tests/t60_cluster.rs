//! A three-node cluster formed from nothing: every shard replicated on the
//! three nodes with leaders spread, every node serving every request, the
//! status an operator sees, and a node with the wrong secret refused.

use plaudit_client::proto::cluster::{ClientHello, Routing};
use plaudit_client::proto::{BizConfig, ErrorCode, Request, Response};
use plaudit_tests::{raw, wait_until, Cluster, Node};
use std::collections::BTreeSet;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_form_one_cluster_and_any_node_serves_any_request() {
    let cluster = Cluster::builder(3).shards(6).start();
    let s = cluster.status();
    // The documented shape.
    let nodes = s["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3);
    for n in nodes {
        assert_eq!(n["state"], "up", "{n}");
        assert_eq!(n["shards_led"], 2, "leaders spread: 6 shards over 3 nodes: {s}");
    }
    let shards = s["shards"].as_array().unwrap();
    assert_eq!(shards.len(), 6);
    for g in shards {
        let replicas: BTreeSet<u64> =
            g["replicas"].as_array().unwrap().iter().map(|r| r.as_u64().unwrap()).collect();
        assert_eq!(replicas, BTreeSet::from([1, 2, 3]), "{g}");
        assert!(g["leader"].as_u64().is_some(), "{g}");
    }
    assert_eq!(s["meta"]["replicas"], serde_json::json!([1, 2, 3]));

    // A business created through node 3, likes through every node (each
    // forwards what it does not lead), read back through another.
    let c3 = cluster.node(3).client().await;
    let biz = c3.create_biz(None, "video", BizConfig::default()).await.unwrap().id;
    for (i, id) in [1u64, 2, 3].into_iter().enumerate() {
        let c = cluster.node(id).client().await;
        for u in 0..20u64 {
            let r = c.like(biz, 100 + i as u64, u, Some(9)).await.unwrap();
            assert!(r.changed);
        }
    }
    let c1 = cluster.node(1).client().await;
    wait_until(Duration::from_secs(10), "counts derived on the entities' shards", || {
        let c1 = c1.clone();
        async move {
            let counts = c1.counts(biz, &[100, 101, 102]).await.unwrap();
            counts.iter().all(|c| c.likes == 20)
        }
    })
    .await;
    let received = c1.received(biz, 9).await.unwrap();
    wait_until(Duration::from_secs(10), "received totals derived", || {
        let c1 = c1.clone();
        async move { c1.received(biz, 9).await.unwrap().likes == 60 }
    })
    .await;
    assert!(received.likes <= 60);
    let status = c1.status(biz, 5, &[100, 101, 102]).await.unwrap();
    assert!(status.iter().all(|s| s.state == plaudit_client::proto::LikeState::Like));

    // The CLI against any one node.
    let out = cluster.node(2).cli(&format!("counts --biz {biz} 100"));
    assert_eq!(out["counts"][0]["likes"], 20, "{out}");
    let out = cluster.node(3).cli(&format!("biz get {biz}"));
    assert_eq!(out["name"], "video", "{out}");

    // A redirecting connection (raw frames: the SDK follows redirects
    // itself) gets NotLeader naming the leader for the shards its node does
    // not lead, and the answer for those it does.
    let mut redirected = 0;
    for id in [1u64, 2, 3] {
        let mut conn = raw::RawConn::connect(&cluster.node(id).addr()).await;
        conn.send_request(1, Request::Hello(ClientHello { routing: Routing::Redirect })).await;
        assert_eq!(conn.recv().await.body, Response::Hello);
        for u in 0..30u64 {
            let status =
                plaudit_client::proto::likes::StatusRequest { biz, user: u, entities: vec![100] };
            conn.send_request(2 + u, Request::Status(status)).await;
            match conn.recv().await.body {
                Response::Status(_) => {}
                Response::Error(e) if e.code == ErrorCode::NotLeader => {
                    let hint = e.leader.expect("a NotLeader error names the leader");
                    assert!(hint.leader.is_some_and(|l| l != id), "{hint:?} from node {id}");
                    assert_eq!(hint.epoch, 1);
                    redirected += 1;
                }
                other => panic!("node {id}: {other:?}"),
            }
        }
    }
    assert!(redirected > 0, "some shards are led elsewhere");

    // A stale read, served by whichever replica answers, says how far behind it may be.
    match c1
        .request(Request::Stale(Box::new(Request::Counts(
            plaudit_client::proto::likes::CountsRequest { biz, entities: vec![100, 101] },
        ))))
        .await
        .unwrap()
    {
        Response::Stale { reply, lag } => {
            assert!(lag < 1000);
            match *reply {
                Response::Counts(c) => assert_eq!(c.len(), 2),
                other => panic!("{other:?}"),
            }
        }
        other => panic!("{other:?}"),
    }

    // A registry change sent twice under one id applies once.
    let create = Request::CreateBiz(plaudit_client::proto::business::CreateBiz {
        id: None,
        name: "twice".into(),
        config: BizConfig::default(),
    });
    let once = |req: &Request| Request::Once { id: 0xfeed, req: Box::new(req.clone()) };
    let a = c3.request(once(&create)).await.unwrap();
    let b = c1.request(once(&create)).await.unwrap();
    assert_eq!(a, b, "the repeat returns the first result");
    let all = c1.list_biz().await.unwrap();
    assert_eq!(all.iter().filter(|b| b.name == "twice").count(), 1);

    cluster.wait_converged().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_the_wrong_secret_is_refused() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("wrong-secret");
    std::fs::write(&secret, "this-is-not-the-cluster-secret-at-all").unwrap();
    let peer = plaudit_tests::free_port();
    // Node 4 claims to be node 2 and dials the cluster's peers with its own secret.
    let join =
        cluster.ids().iter().map(|&i| cluster.node(i).peer_addr()).collect::<Vec<_>>().join(",");
    let mut intruder = Node::builder()
        .env("PLAUDIT_NODE_ID", 2)
        .env("PLAUDIT_PEER_LISTEN", format!("127.0.0.1:{peer}"))
        .env("PLAUDIT_JOIN", join)
        .env("PLAUDIT_BOOTSTRAP_EXPECT", 0)
        .env("PLAUDIT_CLUSTER_SECRET_FILE", secret.display())
        .spawn_only();
    // The cluster's nodes log the refusal; the intruder never becomes ready.
    wait_until(Duration::from_secs(20), "a cluster node logs the refused peer", || {
        let refused = cluster.ids().iter().any(|&i| {
            let log = cluster.node(i).log_tail(400);
            log.contains("refused a peer")
        });
        async move { refused }
    })
    .await;
    assert!(!intruder.is_ready());
    // The cluster is unaffected: still three nodes, all up, all shards led.
    let s = cluster.status();
    assert_eq!(s["nodes"].as_array().unwrap().len(), 3);
    assert!(s["shards"].as_array().unwrap().iter().all(|g| g["leader"].as_u64().is_some()));
    intruder.kill9();
}
