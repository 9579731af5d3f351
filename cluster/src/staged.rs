//! Writes a connection proposes together: the likes and scoring events of
//! one read pass that go to the same group, which this node leads, are
//! queued as one proposal (`Group::submit_many`) and answered together.
//!
//! ```text
//! Like  ─> business known? ─> the user's shard led here? ─┐
//! Score ─> ranking known? ─> one live board, no check? ───┤─> staged: (group, command, how to answer)
//!          its shard led here? not shed?                  │
//!                  any "no" ─> None: the future path (`handle_as`), which catches up or forwards
//! ```
//!
//! Why this is the answer `handle_as` gives: it is the same command proposed
//! on the same group, after the same checks in the same order; the only
//! difference is that the connection waits for several with one reply
//! channel and one timer (measured in `docs/benchmarks.md`: a request future
//! per event, its timer and its reply channel were most of a hot board's CPU).

use crate::engine::{internal, Engine};
use crate::group::Group;
use crate::router::Leader;
use crate::score_route::{BoardRoute, ScoreRoutes};
use plaudit_actors::rankings::all_or_nothing;
use plaudit_actors::rankings::route;
use plaudit_actors::{CmdResult, Command};
use plaudit_proto::rankings::MAX_PRIORITY;
use plaudit_proto::routing::shard_of;
use plaudit_proto::scoring::{BoardOutcome, Outcome, ScoreReply};
use plaudit_proto::{Request, Response, WireError};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// A write of `shard` ready to be proposed with others on `group`, the
/// group that hosts it.
pub struct Staged {
    pub group: Arc<Group>,
    pub shard: u32,
    pub cmd: Command,
    pub finish: Finish,
}

/// How a staged write's result becomes its reply.
pub enum Finish {
    Like,
    /// A scoring event on one board (its formatted type id).
    Score(Arc<str>),
}

/// What `stage_write` decided.
pub enum Stage {
    /// Propose it with the others of its group.
    Staged(Staged),
    /// Answered already (a shed event).
    Now(Response),
}

/// A staged write's reply: whole, or a scoring event's (the commonest) as
/// its parts, which the connection encodes without building the reply
/// (`plaudit_proto::fast_encode`).
pub enum Answer {
    Full(Response),
    Scored { type_id: Arc<str>, outcome: Outcome, score: Option<i64> },
}

impl Answer {
    pub fn into_response(self) -> Response {
        match self {
            Answer::Full(r) => r,
            Answer::Scored { type_id, outcome, score } => {
                let board = BoardOutcome { type_id: type_id.to_string(), outcome, score };
                Response::Score(ScoreReply { boards: vec![board] })
            }
        }
    }
}

impl Finish {
    /// The reply to the request, from its command's result; a scoring
    /// event's left in parts.
    pub fn answer(&self, res: Result<CmdResult, WireError>) -> Answer {
        let out = match (self, res) {
            (_, Err(e)) | (_, Ok(CmdResult::Failed(e))) => Err(e),
            (Finish::Like, Ok(CmdResult::Like(r))) => Ok(Answer::Full(Response::Like(r))),
            (Finish::Score(type_id), Ok(CmdResult::Scored(events))) => {
                match <[_; 1]>::try_from(events) {
                    Ok([Ok((outcome, score))]) => {
                        Ok(Answer::Scored { type_id: type_id.clone(), outcome, score })
                    }
                    Ok([Err(e)]) => Err(e),
                    Err(v) => Err(internal(format!("{} results for one event", v.len()))),
                }
            }
            (_, Ok(other)) => Err(internal(format!("unexpected result {other:?}"))),
        };
        out.unwrap_or_else(|e| Answer::Full(Response::Error(e)))
    }
}

/// The wall clock in epoch seconds: a connection reads it once per read
/// pass and hands it to `stage_write` (one clock read per event was a
/// sixth of what naming a board costs once its route is remembered).
pub fn wall_secs() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

impl Engine {
    /// The write `req` as a command to propose with others, if this node
    /// can propose it right now; `None` when it must take `handle_as`
    /// (anything to look up or catch up first, a leader elsewhere, an
    /// event on several boards). Bad requests are left to `handle_as` too,
    /// which reports them the same way. `routes` is the connection's memory
    /// of scoring routes, `now` the wall clock of its read pass
    /// ([`wall_secs`]).
    pub fn stage_write(&self, req: &Request, routes: &mut ScoreRoutes, now: i64) -> Option<Stage> {
        match req {
            Request::Like(r) => {
                let dislikes_allowed = self.directory.with(r.biz, |b| b.config.dislike_enabled)?;
                if (r.action.is_dislike() && !dislikes_allowed) || req.validate().is_err() {
                    return None;
                }
                let shard = shard_of(r.biz, r.user, self.cfg.shards);
                let group = self.led_here(shard)?;
                let cmd = Command::Like(r.clone());
                Some(Stage::Staged(Staged { group, shard, cmd, finish: Finish::Like }))
            }
            Request::Score(r) => {
                req.validate().ok()?;
                let def = self.directory.rank(r.rank)?;
                let horizon =
                    i64::try_from(self.cfg.score_future_horizon.as_secs()).unwrap_or(i64::MAX);
                // What `route::admit` checks, in two parts: the event's own
                // (here) and its board's (remembered per connection).
                if route::beyond_horizon(r, now, horizon)
                    || route::event_filtered(&def, r).is_some()
                {
                    return None;
                }
                let reserved = |b: &BoardRoute| self.board_reserved(r.rank, &b.type_key);
                let (board, reserved) =
                    routes.route_checked(&def, r, now, self.cfg.shards, reserved)?;
                // A board not known reserved takes `handle_as`, which
                // reserves it; so does a board being moved, which may
                // answer `Moved` (`handle_as` follows it).
                if all_or_nothing::must_check(def.aggregation, r.score, 1) || !reserved {
                    return None;
                }
                let shard = match self.directory.any_placed() {
                    false => board.shard,
                    true if self.board_moving(r.rank, &board.type_key) => return None,
                    // The memo remembers the hash shard; a moved board is elsewhere.
                    true => self.board_home(r.rank, &board.type_key),
                };
                let group = self.led_here(shard)?;
                if group.should_shed(shard, def.settings.priority, MAX_PRIORITY) {
                    let outcome = Outcome::Shed;
                    let board =
                        BoardOutcome { type_id: board.type_id.to_string(), outcome, score: None };
                    return Some(Stage::Now(Response::Score(ScoreReply { boards: vec![board] })));
                }
                let cmd =
                    crate::rankings::score_cmd_keyed(&def, r, board.type_key, self.cfg.event_ids);
                let finish = Finish::Score(board.type_id);
                let cmd = Command::ScoreV2(cmd);
                Some(Stage::Staged(Staged { group, shard, cmd, finish }))
            }
            _ => None,
        }
    }

    /// The group of `shard` if this node leads it now.
    fn led_here(&self, shard: u32) -> Option<Arc<Group>> {
        match self.router.leader(shard) {
            Leader::Here(g) => Some(g),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaudit_proto::ErrorCode;

    fn code(a: Answer) -> Option<ErrorCode> {
        match a {
            Answer::Full(Response::Error(e)) => Some(e.code),
            _ => None,
        }
    }

    #[test]
    fn a_single_board_result_stays_in_parts_and_anything_else_is_whole() {
        let score = Finish::Score("total".into());
        let applied = Ok((Outcome::Applied, Some(3)));
        match score.answer(Ok(CmdResult::Scored(vec![applied.clone()]))) {
            Answer::Scored { type_id, outcome, score } => {
                assert_eq!((&*type_id, outcome, score), ("total", Outcome::Applied, Some(3)));
            }
            Answer::Full(r) => panic!("built whole: {r:?}"),
        }
        let refused = Err(WireError::bad_request("overflow"));
        let one_refused = score.answer(Ok(CmdResult::Scored(vec![refused])));
        assert_eq!(code(one_refused), Some(ErrorCode::BadRequest));
        let two = score.answer(Ok(CmdResult::Scored(vec![applied.clone(), applied])));
        assert_eq!(code(two), Some(ErrorCode::Internal));
        let mismatched = Finish::Like.answer(Ok(CmdResult::Scored(vec![])));
        assert_eq!(code(mismatched), Some(ErrorCode::Internal));
        let failed = score.answer(Err(WireError::timeout("late")));
        assert_eq!(code(failed), Some(ErrorCode::Timeout));
    }
}
