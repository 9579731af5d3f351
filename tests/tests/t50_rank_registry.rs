//! Ranking definitions in the registry: create, duplicates, get, list,
//! update of the mutable settings only, validation errors, and persistence
//! across a restart (SDK and CLI against a real node).

use plaudit_client::proto::rankings::{
    Aggregation, Filters, RankDef, RankSettings, TieMode, ValueFilter,
};
use plaudit_client::proto::window::{Granularity, UtcOffset};
use plaudit_client::proto::ErrorCode;
use plaudit_tests::Node;

fn gifts(id: u32) -> RankDef {
    RankDef {
        id,
        name: "gifts".into(),
        dims: vec!["ruid".into()],
        granularities: vec![Granularity::Day, Granularity::Month],
        utc_offset: UtcOffset::parse("+08:00").expect("valid offset"),
        aggregation: Aggregation::Incr,
        ties: TieMode::EarlierFirst,
        settings: RankSettings { cap: 1000, retention: 3, ..RankSettings::default() },
    }
}

#[tokio::test]
async fn rankings_are_created_listed_updated_and_survive_a_restart() {
    let mut node = Node::start();
    let c = node.client().await;

    let a = c.create_rank(gifts(7)).await.expect("create");
    assert_eq!(a, gifts(7));
    let b = RankDef {
        name: "fans".into(),
        dims: vec![],
        granularities: vec![Granularity::Total],
        aggregation: Aggregation::Best,
        ties: TieMode::Custom,
        ..gifts(3)
    };
    c.create_rank(b.clone()).await.expect("create another");

    let dup = c.create_rank(RankDef { name: "again".into(), ..gifts(7) }).await.expect_err("dup");
    assert_eq!(dup.code(), Some(ErrorCode::BadRequest), "{dup}");
    assert_eq!(c.get_rank(7).await.unwrap(), a, "a failed duplicate changes nothing");
    let bad = c.create_rank(RankDef { granularities: vec![], ..gifts(8) }).await.expect_err("bad");
    assert_eq!(bad.code(), Some(ErrorCode::BadRequest), "{bad}");
    let missing = c.get_rank(999).await.expect_err("unknown");
    assert_eq!(missing.code(), Some(ErrorCode::NotFound), "{missing}");

    assert_eq!(c.list_ranks().await.unwrap(), vec![b.clone(), a.clone()], "listed by id");

    let settings = RankSettings {
        cap: 10,
        retention: 1,
        priority: 9,
        filters: Filters {
            dims: vec![("ruid".into(), ValueFilter::Deny(vec![5]))],
            items: Some(ValueFilter::Allow(vec![1, 2, 3])),
            score_range: Some((0, 1_000)),
        },
    };
    let updated = c.update_rank(7, settings.clone()).await.expect("update");
    assert_eq!(updated, RankDef { settings: settings.clone(), ..gifts(7) });
    let on_unknown_dim = RankSettings {
        filters: Filters {
            dims: vec![("room".into(), ValueFilter::Allow(vec![1]))],
            ..Filters::default()
        },
        ..settings.clone()
    };
    let e = c.update_rank(7, on_unknown_dim).await.expect_err("filter on a missing dimension");
    assert_eq!(e.code(), Some(ErrorCode::BadRequest), "{e}");
    let e = c.update_rank(42, settings.clone()).await.expect_err("update of unknown");
    assert_eq!(e.code(), Some(ErrorCode::NotFound), "{e}");

    drop(c);
    node.terminate();
    node.restart();
    let c = node.client().await;
    assert_eq!(c.list_ranks().await.unwrap(), vec![b, updated]);
}

#[tokio::test]
async fn the_cli_creates_shows_and_updates_rankings() {
    let node = Node::start();
    let created = node.cli(
        "rank create --id 4 --name streamers --dims ruid --granularity day,month \
         --utc-offset +08:00 --cap 50",
    );
    assert_eq!(created["id"], 4);
    assert_eq!(created["granularities"], serde_json::json!(["day", "month"]));
    assert_eq!(created["utc_offset"], "+08:00");
    assert_eq!(created["agg"], "incr");
    assert_eq!(created["ties"], "earlier_first");
    assert_eq!(created["cap"], 50);

    let updated = node.cli("rank update 4 --deny ruid=9,10 --retention 2");
    assert_eq!(updated["retention"], 2);
    assert_eq!(updated["cap"], 50, "untouched settings keep their values");
    assert_eq!(updated["filters"]["deny"], serde_json::json!([["ruid", [9, 10]]]));

    let listed = node.cli("rank list");
    assert_eq!(listed["rankings"].as_array().map(Vec::len), Some(1));
    let missing = node.cli("rank get 77");
    assert_eq!(missing["error"]["code"], "NotFound");
}
