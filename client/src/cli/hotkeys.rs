//! `plaudit admin hotkeys`: the keys that take the most requests (or CPU,
//! `--by cpu`) on every node, heaviest first. `--json` prints
//!
//! ```text
//! {"keys":[{"kind":"entity","biz":1,"key":"42","node":2,"shard":3,
//!           "requests_per_s":1200,"cpu_share":0.031,"relief":"none"}]}
//! ```
//!
//! (`"rank":R` in place of `"biz"` for a board; `shard` is null for a board
//! named by its dimensions; `cpu_share` is the share of that node's CPU the
//! key's requests cost it, null while the node's CPU is not known yet).

use super::human::{table, Align};
use super::json;
use plaudit_proto::hotkeys::{HotKey, HotKeyRow};
use serde::Serialize;

#[derive(Serialize)]
struct Row<'a> {
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    biz: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rank: Option<u32>,
    key: String,
    node: u64,
    shard: Option<u32>,
    requests_per_s: u64,
    cpu_share: Option<f64>,
    relief: &'a str,
}

/// The `top` rows by `by`, heaviest first (the nodes send their top by
/// requests and their top by CPU).
pub fn ranked(mut rows: Vec<HotKeyRow>, by: super::admin::HotBy, top: u32) -> Vec<HotKeyRow> {
    match by {
        super::admin::HotBy::Requests => rows.sort_by(|a, b| {
            b.requests_per_s.cmp(&a.requests_per_s).then_with(|| a.key.cmp(&b.key))
        }),
        super::admin::HotBy::Cpu => {
            rows.sort_by(|a, b| b.cpu_us_per_s.cmp(&a.cpu_us_per_s).then_with(|| a.key.cmp(&b.key)))
        }
    }
    rows.truncate(top as usize);
    rows
}

fn row(r: &HotKeyRow) -> Row<'_> {
    let (biz, rank) = match &r.key {
        HotKey::Entity { biz, .. } | HotKey::User { biz, .. } => (Some(*biz), None),
        HotKey::Board { rank, .. } => (None, Some(*rank)),
    };
    Row {
        kind: r.key.kind(),
        biz,
        rank,
        key: r.key.name(),
        node: r.node,
        shard: r.shard,
        requests_per_s: r.requests_per_s,
        cpu_share: (r.node_cpu_us_per_s > 0).then(|| (r.cpu_share() * 1000.0).round() / 1000.0),
        relief: r.relief.name(),
    }
}

/// `admin hotkeys --json`.
pub fn hotkeys_json(rows: &[HotKeyRow]) -> String {
    #[derive(Serialize)]
    struct Keys<'a> {
        keys: Vec<Row<'a>>,
    }
    json::encode(&Keys { keys: rows.iter().map(row).collect() })
}

/// `admin hotkeys`, for people.
pub fn hotkeys_human(rows: &[HotKeyRow]) -> String {
    if rows.is_empty() {
        return "no requests sampled in the last 10 s".to_string();
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let r = row(r);
            let owner = match (r.biz, r.rank) {
                (Some(b), _) => format!("biz {b}"),
                (_, Some(k)) => format!("rank {k}"),
                _ => "-".into(),
            };
            vec![
                r.kind.to_string(),
                owner,
                r.key,
                r.node.to_string(),
                r.shard.map_or("-".into(), |s| s.to_string()),
                r.requests_per_s.to_string(),
                r.cpu_share.map_or("-".into(), |s| format!("{:.1}", s * 100.0)),
                r.relief.to_string(),
            ]
        })
        .collect();
    table(
        &[
            ("KIND", Align::Left),
            ("OF", Align::Left),
            ("KEY", Align::Left),
            ("NODE", Align::Right),
            ("SHARD", Align::Right),
            ("REQ/S", Align::Right),
            ("CPU%", Align::Right),
            ("RELIEF", Align::Left),
        ],
        &cells,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaudit_proto::hotkeys::Relief;

    #[test]
    fn the_json_has_the_documented_shape() {
        let rows = [
            HotKeyRow {
                key: HotKey::Entity { biz: 1, entity: 42 },
                node: 2,
                shard: Some(3),
                requests_per_s: 1200,
                relief: Relief::None,
                cpu_us_per_s: 31_000,
                node_cpu_us_per_s: 1_000_000,
            },
            HotKeyRow {
                key: HotKey::Board { rank: 9, board: "room=7".into() },
                node: 1,
                shard: None,
                requests_per_s: 80,
                relief: Relief::None,
                cpu_us_per_s: 50_000,
                node_cpu_us_per_s: 0,
            },
        ];
        let v: serde_json::Value = serde_json::from_str(&hotkeys_json(&rows)).unwrap();
        assert_eq!(
            v["keys"][0],
            serde_json::json!({"kind":"entity","biz":1,"key":"42","node":2,"shard":3,
                "requests_per_s":1200,"cpu_share":0.031,"relief":"none"})
        );
        assert_eq!(v["keys"][1]["rank"], 9);
        assert_eq!(v["keys"][1]["shard"], serde_json::Value::Null);
        assert_eq!(v["keys"][1]["cpu_share"], serde_json::Value::Null, "node CPU unknown");
        let human = hotkeys_human(&rows);
        assert!(human.contains("room=7") && human.contains("3.1"), "{human}");
        // By requests, then by CPU: the order turns over.
        let by_req = ranked(rows.to_vec(), super::super::admin::HotBy::Requests, 1);
        assert_eq!(by_req[0].requests_per_s, 1200);
        let by_cpu = ranked(rows.to_vec(), super::super::admin::HotBy::Cpu, 2);
        assert_eq!(by_cpu[0].cpu_us_per_s, 50_000);
        assert_eq!(by_cpu.len(), 2);
    }
}
