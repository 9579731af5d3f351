//! A leader that briefly hears from no quorum (its links cut for less than
//! the followers' lease: what a loaded machine looks like to a read-index
//! check whose heartbeats time out after 100 ms): reads it is asked then
//! wait for the quorum to confirm its leadership and are answered, rather
//! than failing with `Internal`. Reads are idempotent, so waiting is safe;
//! the confirmation comes after they were asked, so they stay linearizable.

use plaudit_client::proto::likes::StatusRequest;
use plaudit_client::proto::routing::shard_of;
use plaudit_client::proto::{BizConfig, Request, Response};
use plaudit_tests::{raw, Cluster};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_waits_out_a_short_loss_of_quorum() {
    let cluster = Cluster::start(3);
    let admin = cluster.client().await;
    let biz = admin.create_biz(None, "quorum", BizConfig::default()).await.expect("biz").id;
    let leader = cluster.most_leading();
    let others: Vec<u64> = cluster.ids().into_iter().filter(|&i| i != leader).collect();
    let led = cluster.shards_led_by(leader);
    let shards = cluster.status_via(leader).unwrap()["shards"].as_array().unwrap().len() as u32;
    let user = (1..u64::MAX).find(|u| led.contains(&shard_of(biz, *u, shards))).unwrap();
    let status = || Request::Status(StatusRequest { biz, user, entities: vec![1, 2, 3] });

    // Asked of the leader itself (raw frames: no SDK routes around it).
    let mut conn = raw::RawConn::connect(&cluster.node(leader).addr()).await;
    conn.send_request(1, status()).await;
    let before = conn.recv().await;
    assert!(matches!(before.body, Response::Status(_)), "before the cut: {before:?}");

    cluster.cut(leader, &others);
    conn.send_request(2, status()).await;
    // Well inside the followers' lease (450-600 ms): the leader stays
    // leader, and only its read-index checks fail meanwhile (at once: the
    // links are cut). Were the lease to pass on a slow host, the read is
    // still answered: `NotLeader` sends it on to the new leader.
    tokio::time::sleep(Duration::from_millis(120)).await;
    cluster.heal();
    let during = conn.recv().await;
    assert_eq!(during.req_id, 2);
    assert!(
        matches!(during.body, Response::Status(_)),
        "a read asked while the quorum was out of reach: {during:?}"
    );
}
