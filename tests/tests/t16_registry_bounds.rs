//! The registry at its bounds: an explicit business id at the top of the
//! range does not use up assigned ids.

use plaudit_client::proto::limits::MAX_BIZ_ID;
use plaudit_client::proto::BizConfig;
use plaudit_tests::Node;

#[tokio::test]
async fn an_explicit_id_at_the_top_leaves_assigned_ids_available() {
    let mut node = Node::start();
    let c = node.client().await;
    let top = c.create_biz(Some(MAX_BIZ_ID), "top", BizConfig::default()).await.expect("top id");
    assert_eq!(top.id, MAX_BIZ_ID);
    // Nothing is free above the highest id, so assignment takes the lowest free one.
    let a = c.create_biz(None, "a", BizConfig::default()).await.expect("assigned after the top");
    assert_eq!(a.id, 1);
    let b = c.create_biz(None, "b", BizConfig::default()).await.expect("and again");
    assert_eq!(b.id, 2);
    let cli = node.cli("biz create --name from-cli");
    assert_eq!(cli["id"], 3, "{cli}");

    // The rule is the registry's own state: a restart assigns the same way.
    drop(c);
    node.restart();
    let c = node.client().await;
    assert_eq!(c.create_biz(None, "d", BizConfig::default()).await.unwrap().id, 4);
}
