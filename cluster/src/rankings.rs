//! Ranking requests on the engine: scoring (admission, one command per
//! sub-board on the board's shard, shedding by priority class), queries on
//! one sub-board, and the paged list of a ranking's sub-boards.
//!
//! ```text
//! Score ─> ranking known? ─> admit (dims, filters, windows) ─┬─ board 1: shard_of(board) ─> propose
//!                                                            └─ board 2: ...            (concurrently)
//! Query ─> board_of(ref) ─> shard ─> read barrier ─> board actor
//! ```

use crate::engine::{internal, unknown_rank, Engine};
use plaudit_actors::board_actor::QueryOut;
use plaudit_actors::command::{ScoreCmd, ScoreEvent};
use plaudit_actors::rankings::board::Rules;
use plaudit_actors::rankings::route::{self, Admission};
use plaudit_actors::ShardError;
use plaudit_actors::{CmdResult, Command};
use plaudit_proto::rankings::MAX_PRIORITY;
use plaudit_proto::routing::board_shard;
use plaudit_proto::scoring::{
    BoardInfo, BoardOutcome, BoardQuery, BoardsPage, BoardsRequest, Outcome, QueryReply,
    QueryRequest, ScoreReply, ScoreRequest,
};
use plaudit_proto::window::TypeId;
use plaudit_proto::{Response, WireError};
use std::time::{SystemTime, UNIX_EPOCH};

fn now_secs() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

impl Engine {
    pub(crate) async fn score(&self, r: ScoreRequest) -> Result<Response, WireError> {
        let def = self.directory.rank(r.rank).ok_or_else(|| unknown_rank(r.rank))?;
        // Expiry is decided here, at the edge, with the leader's clock: the
        // command that reaches the log is already admitted.
        let targets = match route::admit(&def, &r, now_secs())? {
            Admission::Boards(t) => t,
            Admission::Filtered(why) => {
                tracing::debug!(rank = r.rank, why, "event filtered");
                // Filtered events still name the boards they would have touched.
                let dims = route::dim_values(&def, &r.dims)?;
                let boards = route::targets(&def, dims, r.ts, 0)
                    .into_iter()
                    .map(|t| BoardOutcome {
                        type_id: t.type_id.format(),
                        outcome: Outcome::Filtered,
                        score: None,
                    })
                    .collect();
                return Ok(Response::Score(ScoreReply { boards }));
            }
        };
        let per_board = targets.into_iter().map(|t| {
            let r = &r;
            let priority = def.settings.priority;
            let cap = def.settings.cap;
            let (aggregation, ties) = (def.aggregation, def.ties);
            async move {
                let type_id = t.type_id.format();
                if t.expired {
                    return Ok(BoardOutcome { type_id, outcome: Outcome::Filtered, score: None });
                }
                let type_key = t.type_id.to_key();
                let shard = board_shard(r.rank, &type_key, self.cfg.shards);
                let g = &self.groups[shard as usize];
                if g.should_shed(priority, MAX_PRIORITY) {
                    return Ok(BoardOutcome { type_id, outcome: Outcome::Shed, score: None });
                }
                let cmd = Command::Score(ScoreCmd {
                    rank: r.rank,
                    type_key,
                    item: r.item,
                    aggregation,
                    ties,
                    cap,
                    events: vec![ScoreEvent { score: r.score, sub: r.sub, event_id: r.event_id }],
                });
                match g.propose(cmd).await? {
                    CmdResult::Scored(events) => match <[_; 1]>::try_from(events) {
                        Ok([event]) => {
                            let (outcome, score) = event?;
                            Ok(BoardOutcome { type_id, outcome, score })
                        }
                        Err(v) => Err(internal(format!("{} results for one event", v.len()))),
                    },
                    CmdResult::Failed(e) => Err(e),
                    other => Err(internal(format!("unexpected result {other:?}"))),
                }
            }
        });
        // A board that failed (an overflow) fails the call; the boards that
        // applied keep the event, and a retry with the same event id reports
        // them as duplicates.
        let boards = futures::future::join_all(per_board)
            .await
            .into_iter()
            .collect::<Result<Vec<_>, WireError>>()?;
        Ok(Response::Score(ScoreReply { boards }))
    }

    pub(crate) async fn query(&self, q: QueryRequest) -> Result<Response, WireError> {
        let def = self.directory.rank(q.rank).ok_or_else(|| unknown_rank(q.rank))?;
        let t = route::board_of(&def, &q.board)?;
        let type_key = t.to_key();
        let shard = board_shard(q.rank, &type_key, self.cfg.shards);
        let g = &self.groups[shard as usize];
        g.read_barrier().await?;
        let item = match q.query {
            BoardQuery::RankOf { item } => item,
            _ => 0,
        };
        let rules =
            Rules { aggregation: def.aggregation, ties: def.ties, cap: def.settings.cap as usize };
        let out = g
            .handle
            .board_query(q.rank, type_key, rules, q.query)
            .await
            .map_err(ShardError::into_wire)?;
        let type_id = t.format();
        Ok(Response::Query(match out {
            QueryOut::Items(items) => QueryReply::Items { type_id, items },
            QueryOut::RankOf(row) => QueryReply::RankOf { item, row },
            QueryOut::Scores(s) => QueryReply::Scores(s),
            QueryOut::Size(n) => QueryReply::Size(n),
        }))
    }

    /// Sub-boards in type-id order (granularity, window, dimension values),
    /// merged across shards; the cursor is the last type id returned.
    pub(crate) async fn boards(&self, b: BoardsRequest) -> Result<Response, WireError> {
        if self.directory.rank(b.rank).is_none() {
            return Err(unknown_rank(b.rank));
        }
        let after = match &b.cursor {
            Some(c) => Some(
                TypeId::parse(c)
                    .ok_or_else(|| WireError::bad_request(format!("{c:?} is not a cursor")))?
                    .to_key(),
            ),
            None => None,
        };
        let barriers = self.groups.iter().map(|g| g.read_barrier());
        for res in futures::future::join_all(barriers).await {
            res?;
        }
        let want = b.limit as usize + 1;
        let mut all = Vec::new();
        for g in self.groups.iter() {
            let page = self
                .store
                .boards_on_shard(b.rank, g.id, after.as_deref(), want)
                .map_err(internal)?;
            all.extend(page);
        }
        all.sort_by(|x, y| x.0.cmp(&y.0));
        let more = all.len() > b.limit as usize;
        all.truncate(b.limit as usize);
        let boards = all
            .iter()
            .map(|(k, m)| {
                let type_id = TypeId::from_key(k)
                    .map(|t| t.format())
                    .ok_or_else(|| internal(format!("stored board key {k:?} is not a type id")))?;
                Ok(BoardInfo { type_id, size: m.size })
            })
            .collect::<Result<Vec<_>, WireError>>()?;
        let next = if more { boards.last().map(|b| b.type_id.clone()) } else { None };
        Ok(Response::Boards(BoardsPage { boards, next }))
    }
}
