//! `plaudit score|top|rank-of|around|board-size|boards`: the clap pieces
//! (how a board is named on the command line), running them, and their
//! JSON and human output.

use super::human::{table, Align};
use super::json;
use super::Output;
use crate::{Client, ClientError};
use clap::Args;
use plaudit_proto::rankings::{ItemId, RankId};
use plaudit_proto::scoring::{
    BoardRef, BoardsPage, QueryReply, RankedItem, ScoreReply, ScoreRequest,
};
use plaudit_proto::window::Granularity;
use serde::Serialize;

/// A sub-board: `--type-id T`, or `--dim K=V... --granularity G --ts T`.
#[derive(Debug, Args)]
pub struct BoardArgs {
    /// The sub-board's type id, e.g. `day:1713110400_110000260`.
    #[arg(long, value_name = "T", conflicts_with_all = ["dim", "granularity", "ts"])]
    pub type_id: Option<String>,
    /// A dimension value, K=V (repeat for each dimension).
    #[arg(long, value_name = "K=V", value_parser = parse_dim)]
    pub dim: Vec<(String, u64)>,
    /// The window's granularity: total, hour, day, week or month.
    #[arg(long, value_name = "G", value_parser = parse_gran, required_unless_present = "type_id")]
    pub granularity: Option<Granularity>,
    /// A time inside the window, epoch seconds (default: now).
    #[arg(long, value_name = "T", allow_hyphen_values = true)]
    pub ts: Option<i64>,
}

impl BoardArgs {
    pub fn to_ref(&self) -> BoardRef {
        match (&self.type_id, self.granularity) {
            (Some(t), _) => BoardRef::TypeId(t.clone()),
            (None, g) => BoardRef::At {
                dims: self.dim.clone(),
                // clap requires one of the two; Total is never reached.
                granularity: g.unwrap_or(Granularity::Total),
                ts: self.ts.unwrap_or_else(now),
            },
        }
    }
}

pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

pub fn parse_dim(s: &str) -> Result<(String, u64), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("{s:?} is not K=V"))?;
    let v = v.parse::<u64>().map_err(|_| format!("{v:?} is not an unsigned integer"))?;
    Ok((k.to_string(), v))
}

fn parse_gran(s: &str) -> Result<Granularity, String> {
    Granularity::parse(s)
        .ok_or_else(|| format!("{s:?} is not one of total, hour, day, week, month"))
}

/// The flags of `plaudit score`.
#[derive(Debug, Args)]
pub struct ScoreArgs {
    /// Ranking id.
    #[arg(long)]
    pub rank: RankId,
    /// Member id.
    #[arg(long)]
    pub item: ItemId,
    /// The event's score (an increment, a candidate best, or a new value).
    #[arg(long, allow_hyphen_values = true)]
    pub score: i64,
    /// Sub-score, for rankings with `--ties custom`.
    #[arg(long, value_name = "U")]
    pub sub: Option<u32>,
    /// A dimension value, K=V (repeat for each dimension).
    #[arg(long, value_name = "K=V", value_parser = parse_dim)]
    pub dim: Vec<(String, u64)>,
    /// Event time, epoch seconds (default: now).
    #[arg(long, allow_hyphen_values = true)]
    pub ts: Option<i64>,
    /// Unique id of this event: repeating it is a no-op.
    #[arg(long)]
    pub event_id: u64,
}

impl ScoreArgs {
    pub fn request(&self) -> ScoreRequest {
        ScoreRequest {
            rank: self.rank,
            item: self.item,
            score: self.score,
            sub: self.sub,
            dims: self.dim.clone(),
            ts: self.ts.unwrap_or_else(now),
            event_id: self.event_id,
        }
    }
}

/// Runs `rank-of`: a reply with the item even when it is absent.
pub async fn rank_of(
    client: &Client,
    rank: RankId,
    board: &BoardArgs,
    item: ItemId,
) -> Result<Output, ClientError> {
    let row = client.rank_of(rank, board.to_ref(), item).await?;
    Ok(Output::RankOf { item, row })
}

/// Runs `top` and `around`, which answer with rows of one board.
pub fn items(reply: QueryReply) -> Result<Output, ClientError> {
    match reply {
        QueryReply::Items { type_id, items } => Ok(Output::Items { type_id, items }),
        _ => Err(ClientError::Protocol("expected leaderboard rows".into())),
    }
}

#[derive(Serialize)]
struct ScoreJson<'a> {
    boards: Vec<OutcomeJson<'a>>,
}

#[derive(Serialize)]
struct OutcomeJson<'a> {
    type_id: &'a str,
    outcome: &'static str,
    score: Option<i64>,
}

#[derive(Serialize)]
struct ItemsJson<'a> {
    type_id: &'a str,
    items: Vec<ItemJson>,
}

#[derive(Serialize)]
struct ItemJson {
    rank: u64,
    item: u64,
    score: i64,
    sub: Option<u32>,
}

#[derive(Serialize)]
struct RankOfJson {
    item: u64,
    rank: Option<u64>,
    score: Option<i64>,
}

#[derive(Serialize)]
struct SizeJson {
    size: u64,
}

#[derive(Serialize)]
struct BoardsJson<'a> {
    boards: Vec<BoardJson<'a>>,
    next: Option<&'a str>,
}

#[derive(Serialize)]
struct BoardJson<'a> {
    type_id: &'a str,
    size: u64,
}

fn item_json(r: &RankedItem) -> ItemJson {
    ItemJson { rank: r.rank, item: r.item, score: r.score, sub: r.sub }
}

pub fn score_json(r: &ScoreReply) -> String {
    json::encode(&ScoreJson {
        boards: r
            .boards
            .iter()
            .map(|b| OutcomeJson {
                type_id: &b.type_id,
                outcome: b.outcome.as_str(),
                score: b.score,
            })
            .collect(),
    })
}

pub fn items_json(type_id: &str, items: &[RankedItem]) -> String {
    json::encode(&ItemsJson { type_id, items: items.iter().map(item_json).collect() })
}

pub fn rank_of_json(item: ItemId, row: &Option<RankedItem>) -> String {
    json::encode(&RankOfJson { item, rank: row.map(|r| r.rank), score: row.map(|r| r.score) })
}

pub fn size_json(size: u64) -> String {
    json::encode(&SizeJson { size })
}

pub fn boards_json(p: &BoardsPage) -> String {
    json::encode(&BoardsJson {
        boards: p.boards.iter().map(|b| BoardJson { type_id: &b.type_id, size: b.size }).collect(),
        next: p.next.as_deref(),
    })
}

pub fn score_human(r: &ScoreReply) -> String {
    let rows: Vec<Vec<String>> = r
        .boards
        .iter()
        .map(|b| {
            let score = b.score.map_or("-".to_string(), |s| s.to_string());
            vec![b.type_id.clone(), b.outcome.as_str().to_string(), score]
        })
        .collect();
    table(&[("BOARD", Align::Left), ("OUTCOME", Align::Left), ("SCORE", Align::Right)], &rows)
}

pub fn items_human(type_id: &str, items: &[RankedItem]) -> String {
    if items.is_empty() {
        return format!("{type_id}: no members here\n");
    }
    let custom = items.iter().any(|i| i.sub.is_some());
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|i| {
            let mut row = vec![i.rank.to_string(), i.item.to_string(), i.score.to_string()];
            if custom {
                row.push(i.sub.map_or("-".into(), |s| s.to_string()));
            }
            row
        })
        .collect();
    let mut cols = vec![("RANK", Align::Right), ("ITEM", Align::Right), ("SCORE", Align::Right)];
    if custom {
        cols.push(("SUB", Align::Right));
    }
    format!("{type_id}\n{}", table(&cols, &rows))
}

pub fn rank_of_human(item: ItemId, row: &Option<RankedItem>) -> String {
    match row {
        Some(r) => format!("item {item} is #{} with score {}\n", r.rank, r.score),
        None => format!("item {item} is not on this board\n"),
    }
}

pub fn boards_human(p: &BoardsPage) -> String {
    let rows: Vec<Vec<String>> =
        p.boards.iter().map(|b| vec![b.type_id.clone(), b.size.to_string()]).collect();
    let mut out = if rows.is_empty() {
        "no boards\n".to_string()
    } else {
        table(&[("BOARD", Align::Left), ("SIZE", Align::Right)], &rows)
    };
    if let Some(n) = &p.next {
        out += &format!("more: --cursor {n}\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaudit_proto::scoring::{BoardInfo, BoardOutcome, Outcome};

    #[test]
    fn json_shapes_are_the_documented_ones() {
        let r = ScoreReply {
            boards: vec![BoardOutcome {
                type_id: "day:1713110400_7".into(),
                outcome: Outcome::Duplicate,
                score: Some(5),
            }],
        };
        assert_eq!(
            score_json(&r),
            r#"{"boards":[{"type_id":"day:1713110400_7","outcome":"duplicate","score":5}]}"#
        );
        let row = RankedItem { rank: 1, item: 9, score: -3, sub: None };
        assert_eq!(
            items_json("total:0", &[row]),
            r#"{"type_id":"total:0","items":[{"rank":1,"item":9,"score":-3,"sub":null}]}"#
        );
        assert_eq!(rank_of_json(4, &None), r#"{"item":4,"rank":null,"score":null}"#);
        assert_eq!(rank_of_json(9, &Some(row)), r#"{"item":9,"rank":1,"score":-3}"#);
        assert_eq!(size_json(3), r#"{"size":3}"#);
        let p = BoardsPage {
            boards: vec![BoardInfo { type_id: "total:0".into(), size: 2 }],
            next: None,
        };
        assert_eq!(boards_json(&p), r#"{"boards":[{"type_id":"total:0","size":2}],"next":null}"#);
    }

    #[test]
    fn dims_parse_as_key_value() {
        assert_eq!(parse_dim("ruid=7"), Ok(("ruid".into(), 7)));
        assert!(parse_dim("ruid").is_err());
        assert!(parse_dim("ruid=x").is_err());
    }
}
