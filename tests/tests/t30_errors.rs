//! Every error code a healthy single node can return, each from a request
//! (or load) that must produce it.
//!
//! Codes a healthy single node cannot return, and so are not provoked here:
//! - `NotLeader`: this node leads every shard (it is the only voter), so no
//!   request is ever forwarded or refused for leadership;
//! - `Unauthorized`: this node runs open (no admin token); roles and
//!   tokens are `t71_auth.rs`'s;
//! - `Internal`: only storage failures, a stopped shard (during shutdown) or
//!   an unencodable reply produce it, none of which a healthy node does.
//!   Faking them (e.g. by corrupting the data dir) would test the fault, not
//!   the contract.

use plaudit_client::proto::likes::{
    CountsRequest, LikeRequest, LikersRequest, ReceivedRequest, StatusRequest, UserLikesRequest,
};
use plaudit_client::proto::limits::{MAX_LIST_MEMORY, MAX_NAME_LEN, MAX_PAGE};
use plaudit_client::proto::{BizConfig, ErrorCode, LikeAction, LikeState, Request, Response};
use plaudit_client::{Client, ClientError, ClientOptions};
use plaudit_tests::raw::{self, RawConn};
use plaudit_tests::{wait_until, Node};
use std::time::Duration;

fn code_of<T: std::fmt::Debug>(r: Result<T, ClientError>, what: &str) -> ErrorCode {
    match r {
        Err(ClientError::Server(e)) => e.code,
        other => panic!("{what}: expected a server error, got {other:?}"),
    }
}

#[tokio::test]
async fn invalid_arguments_are_bad_request() {
    let node = Node::start();
    let c = node.client().await;
    let biz = c.create_biz(None, "errors", BizConfig::default()).await.unwrap().id;
    c.like(biz, 1, 1, None).await.unwrap();
    let bad = ErrorCode::BadRequest;

    for cursor in ["zz", "", "1", "g.1", "1.", ".1", "11111111111111111.1"] {
        let r = c.user_likes(biz, 1, Some(cursor), 10).await;
        assert_eq!(code_of(r, cursor), bad, "user_likes cursor {cursor:?}");
        let r = c.likers(biz, 1, Some(cursor), 10).await;
        assert_eq!(code_of(r, cursor), bad, "likers cursor {cursor:?}");
    }
    for limit in [0, MAX_PAGE + 1, u32::MAX] {
        assert_eq!(code_of(c.user_likes(biz, 1, None, limit).await, "limit"), bad, "{limit}");
        assert_eq!(code_of(c.likers(biz, 1, None, limit).await, "limit"), bad, "{limit}");
    }
    // The bounds themselves are fine. The likers list is the entity
    // shard's, written by a delivery after the like is acknowledged: wait
    // for it rather than race it (this line failed once in a loaded run).
    assert_eq!(c.user_likes(biz, 1, None, 1).await.unwrap().items.len(), 1);
    wait_until(Duration::from_secs(10), "the like reaches the likers list", || async {
        c.likers(biz, 1, None, MAX_PAGE).await.unwrap().items.len() == 1
    })
    .await;

    let long = "n".repeat(MAX_NAME_LEN + 1);
    let cfg = BizConfig::default();
    for (what, id, name) in [
        ("name too long", None, long.as_str()),
        ("empty name", None, ""),
        ("control character", None, "a\nb"),
        ("id 0", Some(0), "zero"),
        ("reserved id", Some(u32::MAX), "max"),
    ] {
        assert_eq!(code_of(c.create_biz(id, name, cfg.clone()).await, what), bad, "{what}");
    }
    let ok_name = "n".repeat(MAX_NAME_LEN);
    c.create_biz(None, &ok_name, cfg.clone()).await.expect("a 64-byte name is fine");

    let huge = BizConfig { user_list_memory: MAX_LIST_MEMORY + 1, ..cfg.clone() };
    assert_eq!(code_of(c.create_biz(None, "huge", huge.clone()).await, "memory"), bad);
    assert_eq!(code_of(c.update_biz(biz, huge).await, "update memory"), bad);
    let huge = BizConfig { liker_list_memory: MAX_LIST_MEMORY + 1, ..cfg };
    assert_eq!(code_of(c.update_biz(biz, huge).await, "update memory"), bad);
    assert_eq!(c.get_biz(biz).await.unwrap().config, BizConfig::default());

    // Validation comes first: a malformed request to an unknown business is
    // still BadRequest.
    assert_eq!(code_of(c.user_likes(12345, 1, Some("zz"), 10).await, "unknown+bad"), bad);
}

#[tokio::test]
async fn every_operation_on_an_unknown_business_is_not_found() {
    let node = Node::start();
    let c = node.client().await;
    // One business exists, so "unknown" is not "none at all".
    let known = c.create_biz(None, "known", BizConfig::default()).await.unwrap().id;
    let biz = known + 100;
    let requests = vec![
        Request::GetBiz(biz),
        Request::UpdateBiz(plaudit_client::proto::business::UpdateBiz {
            id: biz,
            config: BizConfig::default(),
        }),
        Request::Status(StatusRequest { biz, user: 1, entities: vec![1] }),
        Request::Counts(CountsRequest { biz, entities: vec![1] }),
        Request::UserLikes(UserLikesRequest { biz, user: 1, cursor: None, limit: 10 }),
        Request::Likers(LikersRequest { biz, entity: 1, cursor: None, limit: 10 }),
        Request::Received(ReceivedRequest { biz, user: 1 }),
    ]
    .into_iter()
    .chain(LikeAction::ALL.into_iter().map(|action| {
        Request::Like(LikeRequest { biz, entity: 1, user: 1, owner: Some(2), action })
    }));
    for req in requests {
        let op = req.op();
        let what = format!("{req:?}");
        assert_eq!(code_of(c.request(req).await, &what), ErrorCode::NotFound, "{op}");
    }
    // Nothing was created by any of it.
    assert_eq!(c.list_biz().await.unwrap().len(), 1);
}

#[tokio::test]
async fn pipelining_past_the_in_flight_cap_is_overloaded() {
    let node = Node::builder().env("PLAUDIT_MAX_IN_FLIGHT_PER_CONNECTION", 1).start();
    let c = node.client().await;
    let biz = c.create_biz(None, "cap", BizConfig::default()).await.unwrap().id;

    // 64 writes in one TCP write: the first holds the only slot while it
    // goes through Raft; the node reads the rest at once and refuses them.
    const N: u64 = 64;
    let mut conn = RawConn::connect(&node.addr()).await;
    let mut burst = Vec::new();
    for id in 1..=N {
        let req = LikeRequest { biz, entity: id, user: 1, owner: None, action: LikeAction::Like };
        burst.extend(raw::request_frame(id, Request::Like(req)));
    }
    conn.send(&burst).await;
    let (mut ok, mut overloaded, mut seen) = (Vec::new(), 0, Vec::new());
    for _ in 0..N {
        let reply = conn.recv().await;
        seen.push(reply.req_id);
        match reply.body {
            Response::Like(r) => ok.push((reply.req_id, r)),
            Response::Error(e) if e.code == ErrorCode::Overloaded => overloaded += 1,
            other => panic!("unexpected reply {other:?}"),
        }
    }
    seen.sort_unstable();
    assert_eq!(seen, (1..=N).collect::<Vec<_>>(), "every request answered exactly once");
    assert!(overloaded >= 1, "no Overloaded among {N} pipelined writes ({} ok)", ok.len());
    assert!(!ok.is_empty(), "the first write holds the slot and succeeds");
    eprintln!("in-flight cap: {} of {N} pipelined writes ok, {overloaded} Overloaded", ok.len());

    // Refused means not applied; accepted means applied.
    let states = c.status(biz, 1, &(1..=N).collect::<Vec<_>>()).await.unwrap();
    for s in states {
        let accepted = ok.iter().any(|(id, _)| *id == s.entity);
        let want = if accepted { LikeState::Like } else { LikeState::None };
        assert_eq!(s.state, want, "entity {}", s.entity);
    }
    // The connection keeps serving once the burst is over.
    conn.send_request(1000, Request::Ping).await;
    let pong = conn.recv().await;
    assert_eq!((pong.req_id, pong.body), (1000, Response::Pong));
}

#[tokio::test]
async fn a_connection_over_the_cap_gets_overloaded_with_req_id_zero_and_is_closed() {
    let node = Node::builder().env("PLAUDIT_MAX_CONNECTIONS", 1).start();
    let opts = ClientOptions { pool_size: 1, ..ClientOptions::default() };
    let c = node.client_with(opts).await;
    c.ping().await.expect("the first connection is served");

    let mut second = RawConn::connect(&node.addr()).await;
    let reply = second.recv().await;
    assert_eq!(reply.req_id, 0);
    match reply.body {
        Response::Error(e) => assert_eq!(e.code, ErrorCode::Overloaded, "{e}"),
        other => panic!("expected Overloaded, got {other:?}"),
    }
    assert!(second.closed_by_peer().await, "the refused connection is closed");
    c.ping().await.expect("the first connection is unaffected");

    // Once the first connection closes, its slot is free again.
    drop(c);
    let addr = node.addr();
    wait_until(Duration::from_secs(10), "a new connection is served", || {
        let addr = addr.clone();
        async move {
            let mut conn = RawConn::connect(&addr).await;
            conn.send_request(7, Request::Ping).await;
            matches!(conn.try_recv().await, Ok(r) if r.req_id == 7 && r.body == Response::Pong)
        }
    })
    .await;
}

#[tokio::test]
async fn a_full_shard_queue_is_overloaded() {
    let node = Node::builder()
        .shards(1)
        .env("PLAUDIT_MAX_PENDING_PER_SHARD", 1)
        .env("PLAUDIT_MAX_PROPOSALS_IN_FLIGHT", 1)
        .start();
    let c = node.client().await;
    let biz = c.create_biz(None, "queue", BizConfig::default()).await.unwrap().id;
    let outcomes = burst_of_likes(std::slice::from_ref(&c), biz, 300).await;
    let overloaded = outcomes.iter().filter(|(_, r)| r == &Err(ErrorCode::Overloaded)).count();
    let ok = outcomes.iter().filter(|(_, r)| r.is_ok()).count();
    assert!(overloaded >= 1, "no Overloaded among 300 concurrent writes to one shard");
    assert_eq!(ok + overloaded, outcomes.len(), "only Ok or Overloaded: {outcomes:?}");
    eprintln!("shard queue: {ok} of 300 concurrent writes ok, {overloaded} Overloaded");
    // Refused writes were not applied.
    let states = c.status(biz, 1, &(1..=300).collect::<Vec<_>>()).await.unwrap();
    for (s, (e, r)) in states.iter().zip(&outcomes) {
        assert_eq!(s.entity, *e);
        let want = if r.is_ok() { LikeState::Like } else { LikeState::None };
        assert_eq!(s.state, want, "entity {e}: {r:?}");
    }
}

/// `n` concurrent likes by user 1 on entities `1..=n`, spread over
/// `clients` in turn; `(entity, Ok(now) or Err(code))` in entity order.
async fn burst_of_likes(
    clients: &[Client],
    biz: u32,
    n: u64,
) -> Vec<(u64, Result<LikeState, ErrorCode>)> {
    let mut tasks = tokio::task::JoinSet::new();
    for e in 1..=n {
        let c = clients[e as usize % clients.len()].clone();
        tasks.spawn(async move {
            let r = c.like(biz, e, 1, None).await;
            (e, r.map(|r| r.now).map_err(|err| err.code().unwrap_or_else(|| panic!("{err}"))))
        });
    }
    let mut out = Vec::new();
    while let Some(r) = tasks.join_next().await {
        out.push(r.expect("task"));
    }
    out.sort_by_key(|(e, _)| *e);
    out
}

/// A 1 ms request timeout times out a burst of writes. To make this
/// deterministic rather than a race against fsync, each write gets its own
/// Raft entry and one entry is in flight at a time: every write comes over
/// its own connection (a connection's pipelined writes of one read are
/// proposed together, as one share that an entry does not split), entries
/// hold one share (`batch_max_commands = 1`), and
/// `max_proposals_in_flight = 1`. The last of 200 queued writes waits for
/// ~199 sequential commits, far beyond 1 ms on any machine.
#[tokio::test]
async fn a_request_over_the_timeout_answers_timeout() {
    let mut node = Node::builder().shards(1).start();
    let c = node.client().await;
    // Created before the timeout is lowered: creating takes a commit too.
    let biz = c.create_biz(None, "slow", BizConfig::default()).await.unwrap().id;
    drop(c);
    node.set_env("PLAUDIT_REQUEST_TIMEOUT_MS", 1);
    node.set_env("PLAUDIT_BATCH_MAX_COMMANDS", 1);
    node.set_env("PLAUDIT_MAX_PROPOSALS_IN_FLIGHT", 1);
    node.restart();

    let mut clients = Vec::new();
    for _ in 0..200 {
        clients.push(node.client().await);
    }
    let outcomes = burst_of_likes(&clients, biz, 200).await;
    let c = clients.swap_remove(0);
    drop(clients);
    let timeouts: Vec<u64> =
        outcomes.iter().filter(|(_, r)| r == &Err(ErrorCode::Timeout)).map(|(e, _)| *e).collect();
    assert!(!timeouts.is_empty(), "no Timeout among 200 writes with a 1 ms timeout");
    eprintln!("1 ms timeout: {} of 200 writes timed out", timeouts.len());
    for (e, r) in &outcomes {
        assert!(matches!(r, Ok(LikeState::Like) | Err(ErrorCode::Timeout)), "entity {e}: {r:?}");
    }
    assert!(node.is_ready());

    // "It may still apply": with a normal timeout, every write answered Ok
    // is applied and each timed-out one is either applied or not, nothing else.
    drop(c);
    node.unset_env("PLAUDIT_REQUEST_TIMEOUT_MS");
    node.restart();
    let c = node.client().await;
    let states = c.status(biz, 1, &(1..=200).collect::<Vec<_>>()).await.unwrap();
    for (s, (_, r)) in states.iter().zip(&outcomes) {
        match r {
            Ok(_) => assert_eq!(s.state, LikeState::Like, "{s:?}"),
            Err(_) => assert!(matches!(s.state, LikeState::Like | LikeState::None), "{s:?}"),
        }
    }
}
