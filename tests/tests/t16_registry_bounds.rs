//! The registry at its bounds: an explicit business id at the top of the
//! range does not use up assigned ids, and listings of businesses and
//! rankings larger than one frame (1 MiB) come back whole, page by page,
//! through the SDK and the CLI; the whole-list request of older callers
//! answers while the list fits and asks for pages once it does not.

use plaudit_client::proto::limits::{MAX_BIZ_ID, MAX_FRAME_LEN, MAX_NAME_LEN};
use plaudit_client::proto::listing::ListPage;
use plaudit_client::proto::rankings::{
    Aggregation, Filters, RankDef, RankSettings, TieMode, ValueFilter, MAX_FILTER_VALUES,
};
use plaudit_client::proto::window::{Granularity, UtcOffset};
use plaudit_client::proto::{codec, BizConfig, ErrorCode, Request, Response};
use plaudit_client::Client;
use plaudit_tests::raw::RawConn;
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

/// A name of the longest length, unique per `i`.
fn long_name(i: usize) -> String {
    format!("{i:0>width$}", width = MAX_NAME_LEN)
}

#[tokio::test]
async fn a_business_list_over_the_frame_limit_is_read_whole_in_pages() {
    let node = Node::start();
    let c = node.client().await;
    // While the list fits a frame, the whole-list request still answers.
    let mut raw = RawConn::connect(&node.addr()).await;
    raw.send_request(1, Request::ListBiz).await;
    assert_eq!(raw.recv().await.body, Response::BizList(vec![]));

    // A business of the longest name encodes to ~73 bytes: enough of them
    // to pass the frame limit by 5%.
    let one = plaudit_client::proto::Business {
        id: MAX_BIZ_ID,
        name: long_name(0),
        config: BizConfig::default(),
    };
    let n = MAX_FRAME_LEN * 21 / 20 / codec::to_bytes(&one).unwrap().len();
    assert_eq!(create_many(&c, n).await, n);

    let listed = c.list_biz().await.expect("the SDK reads every page");
    assert_eq!(listed.len(), n);
    let ids: Vec<u32> = listed.iter().map(|b| b.id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "in id order, each once");
    assert_eq!(ids.first(), Some(&1));
    assert_eq!(ids.last(), Some(&(n as u32)));

    let cli = node.cli("biz list");
    let items = cli["businesses"].as_array().unwrap_or_else(|| panic!("no list: {cli:.300}"));
    assert_eq!(items.len(), n, "the CLI fetches every page");
    let names: std::collections::HashSet<&str> =
        items.iter().filter_map(|b| b["name"].as_str()).collect();
    assert_eq!(names.len(), n, "every business once");

    // A caller of the whole-list request (before paging) is told to page.
    let mut raw = RawConn::connect(&node.addr()).await;
    raw.send_request(1, Request::ListBiz).await;
    match raw.recv().await.body {
        Response::Error(e) => {
            assert_eq!(e.code, ErrorCode::BadRequest, "{e}");
            assert!(e.message.contains("ListBizPage"), "{e}");
        }
        other => panic!("expected BadRequest, got {other:.200?}"),
    }
    // Pages can be read stale from any replica too.
    let stale = Request::Stale(Box::new(Request::ListBizPage(ListPage { after: None, limit: 3 })));
    raw.send_request(2, stale).await;
    match raw.recv().await.body {
        Response::Stale { reply, .. } => match *reply {
            Response::BizPage(p) => {
                assert_eq!(p.items.iter().map(|b| b.id).collect::<Vec<_>>(), vec![1, 2, 3]);
                assert_eq!(p.next, Some(3));
            }
            other => panic!("expected a page, got {other:.200?}"),
        },
        other => panic!("expected a stale reply, got {other:.200?}"),
    }
}

/// Creates businesses named `long_name(0..n)` (assigned ids) 64 at a
/// time; returns how many.
async fn create_many(c: &Client, n: usize) -> usize {
    let mut done = 0;
    for start in (0..n).step_by(64) {
        let mut calls = tokio::task::JoinSet::new();
        for i in start..(start + 64).min(n) {
            let c = c.clone();
            calls.spawn(
                async move { (i, c.create_biz(None, &long_name(i), Default::default()).await) },
            );
        }
        while let Some(r) = calls.join_next().await {
            let (i, created) = r.expect("join");
            created.unwrap_or_else(|e| panic!("create {i}: {e}"));
            done += 1;
        }
    }
    done
}

/// A ranking whose filters are as long as validation allows (~450 KB).
fn heavy(id: u32) -> RankDef {
    let values = |seed: u64| -> Vec<u64> {
        (0..MAX_FILTER_VALUES as u64).map(|i| u64::MAX - seed * 100_000 - i).collect()
    };
    let dims: Vec<String> = (0..4).map(|d| format!("d{d}")).collect();
    RankDef {
        id,
        name: format!("heavy{id}"),
        dims: dims.clone(),
        granularities: vec![Granularity::Total],
        utc_offset: UtcOffset::UTC,
        aggregation: Aggregation::Incr,
        ties: TieMode::EarlierFirst,
        settings: RankSettings {
            filters: Filters {
                dims: dims
                    .iter()
                    .enumerate()
                    .map(|(i, d)| (d.clone(), ValueFilter::Deny(values(i as u64))))
                    .collect(),
                items: Some(ValueFilter::Deny(values(9))),
                score_range: None,
            },
            ..RankSettings::default()
        },
    }
}

#[tokio::test]
async fn a_ranking_list_over_the_frame_limit_is_read_whole_in_pages() {
    let node = Node::start();
    let c = node.client().await;
    let defs: Vec<RankDef> = (1..=3).map(heavy).collect();
    let whole: usize = defs.iter().map(|d| codec::to_bytes(d).unwrap().len()).sum();
    assert!(whole > MAX_FRAME_LEN, "the test needs a list over the frame limit ({whole} bytes)");
    for d in &defs {
        c.create_rank(d.clone()).await.expect("create a heavy ranking");
    }
    assert_eq!(c.list_ranks().await.expect("the SDK reads every page"), defs);

    let cli = node.cli("rank list");
    let listed = cli["rankings"].as_array().unwrap_or_else(|| panic!("no list: {cli:.300}"));
    let ids: Vec<u64> = listed.iter().filter_map(|r| r["id"].as_u64()).collect();
    assert_eq!(ids, vec![1, 2, 3], "the CLI fetches every page");
    assert_eq!(listed[2]["filters"]["deny_items"].as_array().map(Vec::len), Some(10_000));
}
