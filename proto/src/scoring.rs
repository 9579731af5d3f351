//! Scoring events and leaderboard queries: the request and reply types of
//! `score`, `top`, `rank-of`, `around`, batch scores, `board-size` and
//! `boards`, with the bounds each is checked against.
//!
//! A query names one sub-board either by its `type_id` string or by the
//! event coordinates that select it (dimension values, granularity, a
//! timestamp inside the window): the node turns both into the same board.

use crate::error::WireError;
use crate::rankings::{ItemId, RankId, MAX_DIMS};
use crate::window::Granularity;
use serde::{Deserialize, Serialize};

/// Most rows of one `top` page.
pub const MAX_TOP: u32 = 1000;
/// Most members in one batch-scores request.
pub const MAX_SCORE_BATCH: usize = 500;
/// Most neighbours on each side of an `around` query.
pub const MAX_AROUND: u32 = 100;
/// Most sub-boards in one `boards` page.
pub const MAX_BOARDS_PAGE: u32 = 1000;

/// One scoring event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScoreRequest {
    pub rank: RankId,
    pub item: ItemId,
    pub score: i64,
    /// The sub-score, for rankings that break ties with one.
    pub sub: Option<u32>,
    /// A value for every dimension of the ranking, by name.
    pub dims: Vec<(String, u64)>,
    /// Event time, epoch seconds; it picks the windows. An event later
    /// than the node's clock plus its future horizon (default one day) is
    /// `filtered`, as is one whose window has expired.
    pub ts: i64,
    /// Makes the event idempotent per sub-board. An event refused with
    /// `BadRequest` (its increment would overflow a board) is recorded on no
    /// board, so the same id may be sent again with a corrected score.
    pub event_id: u64,
}

impl ScoreRequest {
    pub fn validate(&self) -> Result<(), WireError> {
        check_dims(&self.dims)
    }
}

/// What happened to an event on one sub-board.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Outcome {
    Applied,
    /// The sub-board had applied this event id already; nothing changed.
    Duplicate,
    /// A filter of the ranking refused it, its window has expired, or it is
    /// stamped past the node's future horizon.
    Filtered,
    /// The shard was overloaded and this ranking's priority class was shed.
    Shed,
}

impl Outcome {
    /// Declaration order: an outcome's index here is its wire index.
    pub const ALL: [Outcome; 4] =
        [Outcome::Applied, Outcome::Duplicate, Outcome::Filtered, Outcome::Shed];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Applied => "applied",
            Outcome::Duplicate => "duplicate",
            Outcome::Filtered => "filtered",
            Outcome::Shed => "shed",
        }
    }
}

/// One sub-board's part of a score reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoardOutcome {
    pub type_id: String,
    pub outcome: Outcome,
    /// The member's score on this board afterwards, when it has one.
    pub score: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScoreReply {
    pub boards: Vec<BoardOutcome>,
}

/// Which sub-board a query reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BoardRef {
    TypeId(String),
    At { dims: Vec<(String, u64)>, granularity: Granularity, ts: i64 },
}

impl BoardRef {
    fn validate(&self) -> Result<(), WireError> {
        match self {
            BoardRef::TypeId(t) if t.len() > 256 => {
                Err(WireError::bad_request("type_id is longer than 256 bytes"))
            }
            BoardRef::TypeId(_) => Ok(()),
            BoardRef::At { dims, .. } => check_dims(dims),
        }
    }
}

fn check_dims(dims: &[(String, u64)]) -> Result<(), WireError> {
    if dims.len() > MAX_DIMS {
        return Err(WireError::bad_request(format!("at most {MAX_DIMS} dimension values")));
    }
    Ok(())
}

/// The query kinds on one sub-board.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum BoardQuery {
    /// `limit` rows from 0-based `offset`.
    Top {
        offset: u32,
        limit: u32,
    },
    RankOf {
        item: ItemId,
    },
    /// `k` rows above and below the member.
    Around {
        item: ItemId,
        k: u32,
    },
    Scores {
        items: Vec<ItemId>,
    },
    Size,
}

impl BoardQuery {
    fn validate(&self) -> Result<(), WireError> {
        match self {
            BoardQuery::Top { limit, .. } if *limit == 0 || *limit > MAX_TOP => {
                Err(WireError::bad_request(format!("limit must be in 1..={MAX_TOP}")))
            }
            BoardQuery::Around { k, .. } if *k > MAX_AROUND => {
                Err(WireError::bad_request(format!("k must be at most {MAX_AROUND}")))
            }
            BoardQuery::Scores { items } if items.is_empty() || items.len() > MAX_SCORE_BATCH => {
                Err(WireError::bad_request(format!("a batch holds 1..={MAX_SCORE_BATCH} items")))
            }
            _ => Ok(()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueryRequest {
    pub rank: RankId,
    pub board: BoardRef,
    pub query: BoardQuery,
}

impl QueryRequest {
    pub fn validate(&self) -> Result<(), WireError> {
        self.board.validate()?;
        self.query.validate()
    }
}

/// One row of a leaderboard; `rank` starts at 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankedItem {
    pub rank: u64,
    pub item: ItemId,
    pub score: i64,
    /// The sub-score, for `custom` tie mode.
    pub sub: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum QueryReply {
    /// `Top` and `Around`.
    Items {
        type_id: String,
        items: Vec<RankedItem>,
    },
    /// `RankOf`: `None` when the member is not on the board.
    RankOf {
        item: ItemId,
        row: Option<RankedItem>,
    },
    /// `Scores`, in request order.
    Scores(Vec<(ItemId, Option<i64>)>),
    Size(u64),
}

/// The sub-boards of a ranking, paged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoardsRequest {
    pub rank: RankId,
    pub cursor: Option<String>,
    pub limit: u32,
}

impl BoardsRequest {
    pub fn validate(&self) -> Result<(), WireError> {
        if self.limit == 0 || self.limit > MAX_BOARDS_PAGE {
            return Err(WireError::bad_request(format!("limit must be in 1..={MAX_BOARDS_PAGE}")));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoardInfo {
    pub type_id: String,
    pub size: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoardsPage {
    pub boards: Vec<BoardInfo>,
    pub next: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(query: BoardQuery) -> QueryRequest {
        QueryRequest { rank: 1, board: BoardRef::TypeId("total:0".into()), query }
    }

    #[test]
    fn query_bounds_are_checked() {
        assert!(q(BoardQuery::Top { offset: 0, limit: MAX_TOP }).validate().is_ok());
        assert!(q(BoardQuery::Top { offset: 0, limit: MAX_TOP + 1 }).validate().is_err());
        assert!(q(BoardQuery::Top { offset: 0, limit: 0 }).validate().is_err());
        assert!(q(BoardQuery::Around { item: 1, k: MAX_AROUND + 1 }).validate().is_err());
        let items = vec![1; MAX_SCORE_BATCH];
        assert!(q(BoardQuery::Scores { items: items.clone() }).validate().is_ok());
        let mut over = items;
        over.push(2);
        assert!(q(BoardQuery::Scores { items: over }).validate().is_err());
        assert!(q(BoardQuery::Scores { items: vec![] }).validate().is_err());
        let long = QueryRequest { board: BoardRef::TypeId("x".repeat(257)), ..q(BoardQuery::Size) };
        assert!(long.validate().is_err());
    }

    #[test]
    fn boards_pages_are_bounded() {
        let r = BoardsRequest { rank: 1, cursor: None, limit: MAX_BOARDS_PAGE + 1 };
        assert!(r.validate().is_err());
    }

    #[test]
    fn outcomes_print_as_the_cli_names_them() {
        let names: Vec<_> =
            [Outcome::Applied, Outcome::Duplicate, Outcome::Filtered, Outcome::Shed]
                .iter()
                .map(|o| o.as_str())
                .collect();
        assert_eq!(names, vec!["applied", "duplicate", "filtered", "shed"]);
    }
}
