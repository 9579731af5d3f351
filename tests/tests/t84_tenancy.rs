//! Rankings that belong to a business: a ranking created with an owner
//! (`rank create --biz B`) may be named only by B's tokens, so two
//! businesses can no longer be given the same ranking by mistake; a ranking
//! created without one is shared, as before. The owner is kept across a
//! restart and shown by `rank get`.

use plaudit_client::proto::rankings::RankDef;
use plaudit_client::proto::scoring::ScoreRequest;
use plaudit_client::proto::{BizConfig, ErrorCode};
use plaudit_client::{Client, ClientError, ClientOptions};
use plaudit_tests::{total_ranking, Node};
use std::time::{SystemTime, UNIX_EPOCH};

const ADMIN: &str = "t84-admin-token-0123456789";

async fn client_as(node: &Node, token: &str) -> Client {
    node.client_with(ClientOptions { token: Some(token.to_string()), ..Default::default() }).await
}

fn rank_def(id: u32) -> RankDef {
    total_ranking(id, &format!("r{id}"))
}

fn failed_with<T: std::fmt::Debug>(r: Result<T, ClientError>, code: ErrorCode, what: &str) {
    match r {
        Err(e) => assert_eq!(e.code(), Some(code), "{what}: {e}"),
        Ok(v) => panic!("{what} was allowed: {v:?}"),
    }
}

#[tokio::test]
async fn a_ranking_of_one_business_is_never_given_to_another() {
    let mut node = Node::builder().env("PLAUDIT_ADMIN_TOKEN", ADMIN).start();
    let admin = client_as(&node, ADMIN).await;
    let mine = admin.create_biz(None, "mine", BizConfig::default()).await.unwrap().id;
    let theirs = admin.create_biz(None, "theirs", BizConfig::default()).await.unwrap().id;

    let owned = admin.create_rank_for(rank_def(21), Some(mine)).await.unwrap();
    assert_eq!(owned.owner, Some(mine));
    let shared = admin.create_rank_for(rank_def(22), None).await.unwrap();
    assert_eq!(shared.owner, None);
    admin.create_rank(rank_def(23)).await.unwrap(); // shared, the older call
    failed_with(
        admin.create_rank_for(rank_def(24), Some(9999)).await,
        ErrorCode::NotFound,
        "a ranking of a business that does not exist",
    );

    // Another business's token may not name it, alone or with others.
    failed_with(
        admin.create_token(theirs, &[21], false).await,
        ErrorCode::Refused,
        "a token of another business naming an owned ranking",
    );
    failed_with(
        admin.create_token(theirs, &[22, 21], true).await,
        ErrorCode::Refused,
        "a read-only token of another business naming it among shared ones",
    );
    let (their_token, info) = admin.create_token(theirs, &[22, 23], false).await.unwrap();
    assert_eq!(info.ranks, vec![22, 23], "shared rankings go to any business");
    let (my_token, _) = admin.create_token(mine, &[21, 22], false).await.unwrap();

    // Its own business scores on it; the other cannot reach it.
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64;
    let event = |rank, event_id| ScoreRequest {
        rank,
        item: 5,
        score: 2,
        sub: None,
        dims: vec![],
        ts: now,
        event_id,
    };
    let me = client_as(&node, &my_token).await;
    me.score(event(21, 1)).await.expect("the owner's token scores");
    let them = client_as(&node, &their_token).await;
    failed_with(them.score(event(21, 2)).await, ErrorCode::Unauthorized, "another's ranking");
    them.score(event(22, 3)).await.expect("a shared ranking");
    failed_with(them.get_rank_info(21).await, ErrorCode::Unauthorized, "reading its definition");

    // Kept across a restart (the registry is replayed and reloaded), and
    // shown by the CLI.
    node.restart();
    let admin = client_as(&node, ADMIN).await;
    assert_eq!(admin.get_rank_info(21).await.unwrap().owner, Some(mine));
    assert_eq!(admin.get_rank_info(22).await.unwrap().owner, None);
    failed_with(
        admin.create_token(theirs, &[21], false).await,
        ErrorCode::Refused,
        "after restart",
    );
    node.set_token(ADMIN);
    let got = node.cli("rank get 21");
    assert_eq!(got["owner"], mine, "{got}");
    assert_eq!(node.cli("rank get 23")["owner"], serde_json::Value::Null);
    let made = node.cli_json(&[
        "rank",
        "create",
        "--id",
        "25",
        "--name",
        "cli",
        "--granularity",
        "total",
        "--biz",
        &theirs.to_string(),
    ]);
    assert_eq!(made["owner"], theirs, "{made}");
    let listed = node.cli("rank list");
    let row = &listed["rankings"].as_array().unwrap()[0];
    assert!(row.get("owner").is_none(), "a list does not claim to know owners: {row}");
}

/// Where moved entities live is told to a business's token for its own
/// entities only; the admin sees them all.
#[tokio::test]
async fn a_business_is_told_where_its_own_moved_entities_live_only() {
    use plaudit_client::proto::entity_routes::RoutesPage;
    use plaudit_client::proto::placement::{EntityPlacements, MoveEntity};
    use plaudit_client::proto::routing::shard_of;
    use plaudit_client::proto::ErrorCode;
    use plaudit_client::proto::{Request, Response};
    use std::time::{Duration, Instant};

    let node = Node::builder().env("PLAUDIT_ADMIN_TOKEN", ADMIN).start();
    let shards = node.shards();
    let admin = client_as(&node, ADMIN).await;
    let mine = admin.create_biz(None, "mine", BizConfig::default()).await.unwrap().id;
    let theirs = admin.create_biz(None, "theirs", BizConfig::default()).await.unwrap().id;
    for biz in [mine, theirs] {
        admin.like(biz, 7, 1, None).await.expect("a like");
        let to_shard = (shard_of(biz, 7, shards) + 1) % shards;
        let moved = admin.request(Request::MoveEntity(MoveEntity { biz, entity: 7, to_shard }));
        assert!(matches!(moved.await, Ok(Response::Done)), "moving {biz}:7");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let p: EntityPlacements = match admin.request(Request::EntityPlacements).await {
            Ok(Response::EntityPlacements(p)) => *p,
            other => panic!("EntityPlacements answered {other:?}"),
        };
        if p.placed.len() == 2 && p.moves.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "the moves did not end: {p:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let routes = |c: Client| async move {
        match c.request(Request::EntityRoutes).await {
            Ok(Response::EntityRoutes(r)) => r.into_iter().map(|(k, _)| k.biz).collect::<Vec<_>>(),
            other => panic!("EntityRoutes answered {other:?}"),
        }
    };
    let (my_token, _) = admin.create_token(mine, &[], true).await.unwrap();
    let me = client_as(&node, &my_token).await;
    assert_eq!(routes(me.clone()).await, vec![mine]);
    let mut all = routes(admin.clone()).await;
    all.sort_unstable();
    assert_eq!(all, vec![mine, theirs], "the admin sees every business's");

    // Page by page, and "unchanged" for the version held.
    let page = |c: Client, known: Option<u64>, after, limit| async move {
        let req = RoutesPage { known, after, limit };
        match c.request(Request::EntityRoutesPage(req)).await {
            Ok(Response::EntityRoutesPage(r)) => r,
            other => panic!("EntityRoutesPage answered {other:?}"),
        }
    };
    let first = page(me.clone(), None, None, 10).await;
    let bizes: Vec<_> = first.routes.iter().map(|(k, _)| k.biz).collect();
    assert_eq!((bizes, first.next, first.unchanged), (vec![mine], None, false));
    let again = page(me.clone(), Some(first.version), None, 10).await;
    assert!(again.unchanged && again.routes.is_empty(), "{again:?}");
    let one = page(admin.clone(), None, None, 1).await;
    assert_eq!(one.routes.len(), 1);
    let two = page(admin.clone(), None, one.next, 1).await;
    let mut paged: Vec<_> = one.routes.iter().chain(&two.routes).map(|(k, _)| k.biz).collect();
    paged.sort_unstable();
    assert_eq!((paged, two.next), (vec![mine, theirs], None), "two pages of one");
    assert_ne!(one.version, first.version, "the admin's set is another");
    let refused =
        me.request(Request::EntityRoutesPage(RoutesPage { known: None, after: None, limit: 0 }));
    assert!(matches!(refused.await, Err(e) if e.code() == Some(ErrorCode::BadRequest)));
}
