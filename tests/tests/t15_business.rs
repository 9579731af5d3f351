//! Businesses (tenants): create with and without an id, duplicates, get,
//! list, update, persistence across a restart, and data isolation.

use plaudit_client::proto::{BizConfig, Business, ErrorCode};
use plaudit_tests::{wait_converged, Node};

#[tokio::test]
async fn businesses_are_created_listed_updated_and_survive_a_restart() {
    let mut node = Node::start();
    let c = node.client().await;

    let video = BizConfig { dislike_enabled: false, user_list_memory: 7, liker_list_memory: 9 };
    let a = c.create_biz(Some(10), "video", video.clone()).await.expect("create with id");
    assert_eq!(a, Business { id: 10, name: "video".into(), config: video.clone() });
    // An assigned id is the next one after the highest.
    let b = c.create_biz(None, "articles", BizConfig::default()).await.expect("assigned id");
    assert_eq!(b.id, 11);
    assert_eq!(b.config, BizConfig::default());
    let low = c.create_biz(Some(3), "low", BizConfig::default()).await.unwrap();
    let next = c.create_biz(None, "next", BizConfig::default()).await.unwrap();
    assert_eq!(next.id, 12, "assigned ids continue after the highest, not into gaps");

    let dup = c.create_biz(Some(10), "again", BizConfig::default()).await.expect_err("dup");
    assert_eq!(dup.code(), Some(ErrorCode::BadRequest), "{dup}");
    assert_eq!(c.get_biz(10).await.unwrap(), a, "a failed duplicate changes nothing");

    assert_eq!(c.get_biz(11).await.unwrap(), b);
    let missing = c.get_biz(999).await.expect_err("unknown");
    assert_eq!(missing.code(), Some(ErrorCode::NotFound), "{missing}");

    let mut list = c.list_biz().await.unwrap();
    list.sort_by_key(|b| b.id);
    assert_eq!(list, vec![low.clone(), a.clone(), b.clone(), next.clone()]);

    let changed = BizConfig { dislike_enabled: true, ..video };
    let updated = c.update_biz(10, changed.clone()).await.expect("update");
    assert_eq!(updated, Business { id: 10, name: "video".into(), config: changed.clone() });
    assert_eq!(c.get_biz(10).await.unwrap().config, changed);
    // The new config takes effect: dislikes are now accepted.
    c.dislike(10, 1, 1, None).await.expect("dislike after enabling dislikes");

    drop(c);
    node.terminate();
    node.restart();
    let c = node.client().await;
    let mut after = c.list_biz().await.unwrap();
    after.sort_by_key(|b| b.id);
    let a_now = Business { config: changed, ..a };
    assert_eq!(after, vec![low, a_now, b, next]);
    assert_eq!(c.create_biz(None, "post-restart", BizConfig::default()).await.unwrap().id, 13);
    let s = c.status(10, 1, &[1]).await.unwrap();
    assert_eq!(s[0].state, plaudit_client::proto::LikeState::Dislike);
}

#[tokio::test]
async fn same_entity_in_two_businesses_has_separate_state_and_counts() {
    let node = Node::start();
    let c = node.client().await;
    let x = c.create_biz(None, "x", BizConfig::default()).await.unwrap().id;
    let y = c.create_biz(None, "y", BizConfig::default()).await.unwrap().id;
    let e = 77;
    for u in 1..=3 {
        c.like(x, e, u, Some(500)).await.unwrap();
    }
    c.dislike(y, e, 1, Some(500)).await.unwrap();
    wait_converged(&node).await;

    let cx = c.counts(x, &[e]).await.unwrap()[0];
    let cy = c.counts(y, &[e]).await.unwrap()[0];
    assert_eq!((cx.likes, cx.dislikes), (3, 0));
    assert_eq!((cy.likes, cy.dislikes), (0, 1));
    use plaudit_client::proto::LikeState::{Dislike, Like, None as Neither};
    assert_eq!(c.status(x, 1, &[e]).await.unwrap()[0].state, Like);
    assert_eq!(c.status(y, 1, &[e]).await.unwrap()[0].state, Dislike);
    assert_eq!(c.status(y, 2, &[e]).await.unwrap()[0].state, Neither);
    assert_eq!(c.received(x, 500).await.unwrap().likes, 3);
    assert_eq!(c.received(y, 500).await.unwrap().likes, 0);
    let lx = c.likers(x, e, None, 100).await.unwrap();
    let ly = c.likers(y, e, None, 100).await.unwrap();
    assert_eq!(lx.items.len(), 3);
    assert!(ly.items.is_empty(), "{ly:?}");
    assert_eq!(c.user_likes(x, 1, None, 100).await.unwrap().items.len(), 1);
    assert!(c.user_likes(y, 1, None, 100).await.unwrap().items.is_empty());
}
