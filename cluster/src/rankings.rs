//! Ranking requests on the engine: scoring (admission, a check of every
//! sub-board where one could refuse the event, one command per sub-board on
//! the board's shard, shedding by priority class), queries on one
//! sub-board, and the paged list of a ranking's sub-boards.
//!
//! ```text
//! Score ─> ranking known? ─> admit (dims, filters, windows, horizon)
//!            ─> incr on 2+ boards? check each on its leader (all would apply, or fail: nothing written)
//!            ─┬─ board 1: its shard's leader ─> propose
//!             └─ board 2: ...   (concurrently, here or there)
//! Query ─> board_of(ref) ─> the board shard's leader ─> read barrier ─> the board's view (or its actor, activated)
//! Boards ─> every shard's leader ─> its page of headers ─> merged in type-id order
//! ```

use crate::dispatch::unknown_rank;
use crate::engine::{internal, Engine};
use crate::group::Group;
use crate::peer::wire::{PeerRequest, PeerResponse};
use crate::router::Hop;
use plaudit_actors::command::{Dedup, EventResult, ScoreCmd, ScoreEvent};
use plaudit_actors::rankings::all_or_nothing;
use plaudit_actors::rankings::board::Rules;
use plaudit_actors::rankings::route::{self, Admission};
use plaudit_actors::{CmdResult, Command, ShardError};
use plaudit_proto::rankings::MAX_PRIORITY;
use plaudit_proto::routing::board_shard;
use plaudit_proto::scoring::{
    BoardInfo, BoardOutcome, BoardsPage, BoardsRequest, Outcome, QueryRequest, ScoreReply,
    ScoreRequest,
};
use plaudit_proto::window::TypeId;
use plaudit_proto::{Request, Response, WireError};
use std::sync::Arc;
use std::time::Duration;
use std::time::{SystemTime, UNIX_EPOCH};

/// The first and the longest wait between two `Moved` redirects of one
/// request (`Engine::on_board`).
const MOVED_PAUSE_MIN: Duration = Duration::from_millis(2);
const MOVED_PAUSE_MAX: Duration = Duration::from_millis(50);

pub(crate) fn now_secs() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

impl Engine {
    /// A ranking's definition, catching up with the registry first if this
    /// node does not know it yet.
    pub(crate) async fn rank_def(
        &self,
        rank: u32,
    ) -> Result<Arc<plaudit_proto::rankings::RankDef>, WireError> {
        if let Some(d) = self.directory.rank(rank) {
            return Ok(d);
        }
        // Boxed: rare, and as large as the rest of a request's future.
        Box::pin(self.sync_registry()).await?;
        self.directory.rank(rank).ok_or_else(|| unknown_rank(rank))
    }

    /// Scores one event on every sub-board it names. A client that asked
    /// to be redirected (the SDK) is answered `NotLeader` for an event on
    /// one board whose shard another node leads, as a like is, rather than
    /// having its command passed on: the SDK sends such an event to the
    /// board's leader, so arriving here means its table is stale (this
    /// node just handed the shard away, or is stopping).
    pub(crate) async fn score(
        &self,
        r: ScoreRequest,
        redirect: bool,
    ) -> Result<Response, WireError> {
        let def = self.rank_def(r.rank).await?;
        // Expiry and the future horizon are decided here, at the edge, with
        // this node's clock: the command that reaches the log is already
        // admitted, and apply never reads a clock.
        let horizon = i64::try_from(self.cfg.score_future_horizon.as_secs()).unwrap_or(i64::MAX);
        let targets = match route::admit(&def, &r, now_secs(), horizon)? {
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
        // One command per live board: every board of the event gets the same
        // event; an expired window only reports `filtered`.
        let mut plan: Vec<(String, Option<(u32, ScoreCmd)>)> = targets
            .into_iter()
            .map(|t| {
                let type_id = t.type_id.format();
                if t.expired {
                    return (type_id, None);
                }
                let cmd = score_cmd(&def, &r, &t.type_id, self.cfg.event_ids);
                let shard = self.board_home(r.rank, &cmd.type_key);
                (type_id, Some((shard, cmd)))
            })
            .collect();
        // All or nothing: where one board could refuse the event (an
        // overflow), every board is asked first and none is written unless
        // all would take it (`rankings/all_or_nothing.rs` says exactly what
        // this guarantees and what it does not).
        let live: Vec<(&str, u32, &ScoreCmd)> = plan
            .iter()
            .filter_map(|(t, p)| p.as_ref().map(|(shard, cmd)| (t.as_str(), *shard, cmd)))
            .collect();
        if all_or_nothing::must_check(def.aggregation, r.score, live.len()) {
            // Boxed: only multi-board increments take this path.
            Box::pin(self.check_every_board(r.event_id, &live)).await?;
        }
        // New boards are reserved against the ranking's limit, all or
        // none, after the checks (a refused event reserves nothing) and
        // before anything is proposed.
        let keys: Vec<&[u8]> = live.iter().map(|(_, _, c)| c.type_key.as_slice()).collect();
        if !keys.iter().all(|k| self.board_reserved(r.rank, k)) {
            Box::pin(self.reserve_boards(r.rank, &keys, def.settings.priority)).await?;
        }
        let priority = def.settings.priority;
        let redirect = redirect && live.len() == 1;
        let per_board = |(type_id, planned): (String, Option<(u32, ScoreCmd)>)| async move {
            let Some((_, cmd)) = planned else {
                return Ok(BoardOutcome { type_id, outcome: Outcome::Filtered, score: None });
            };
            let (rank, key) = (cmd.rank, cmd.type_key.clone());
            let cmd = &cmd;
            // A board on its way to another shard refuses the event with
            // `Moved` (nothing applied): it is sent where that says.
            let event = self
                .on_board(rank, &key, |shard| async move {
                    let proposed = Command::ScoreV2(cmd.clone());
                    match self.propose_on(shard, proposed, Some(priority), redirect).await? {
                        None => Ok(None),
                        Some(CmdResult::Scored(events)) => match <[_; 1]>::try_from(events) {
                            Ok([Err(e)]) if e.moved_to().is_some() => Err(e),
                            Ok([event]) => Ok(Some(event)),
                            Err(v) => Err(internal(format!("{} results for one event", v.len()))),
                        },
                        Some(CmdResult::Failed(e)) => Err(e),
                        Some(other) => Err(internal(format!("unexpected result {other:?}"))),
                    }
                })
                .await?;
            match event {
                None => Ok(BoardOutcome { type_id, outcome: Outcome::Shed, score: None }),
                Some(event) => {
                    let (outcome, score) = event?;
                    Ok(BoardOutcome { type_id, outcome, score })
                }
            }
        };
        // One board (an event on a ranking with one window and no
        // dimension fan-out) is awaited as it is: `join_all`'s vector of
        // futures was a tenth of a hot board's CPU.
        if plan.len() == 1 {
            if let Some(one) = plan.pop() {
                let board = per_board(one).await?;
                return Ok(Response::Score(ScoreReply { boards: vec![board] }));
            }
        }
        // A board that still fails here (an overflow reached only through
        // a concurrent event, after the check) fails the call; the boards
        // that applied keep the event, and a retry with the same event id
        // reports them as duplicates.
        let boards = futures::future::join_all(plan.into_iter().map(per_board))
            .await
            .into_iter()
            .collect::<Result<Vec<_>, WireError>>()?;
        Ok(Response::Score(ScoreReply { boards }))
    }

    /// Asks every live board of an event (concurrently, each on its
    /// leader) whether it would apply; fails if any would refuse it, or if
    /// any cannot be asked. Nothing is written either way.
    async fn check_every_board(
        &self,
        event_id: u64,
        live: &[(&str, u32, &ScoreCmd)],
    ) -> Result<(), WireError> {
        let checks = live.iter().map(|&(type_id, _, cmd)| async move {
            let checked = self
                .on_board(cmd.rank, &cmd.type_key, |shard| {
                    self.router.on_leader(
                        shard,
                        false,
                        move |g| async move { self.check_score_here(&g, shard, cmd).await },
                        move |n| async move {
                            let req = PeerRequest::CheckScore { group: shard, cmd: cmd.clone() };
                            self.router
                                .call(n, req, |r| match r {
                                    PeerResponse::CheckScore(Ok(r)) => Ok(r),
                                    PeerResponse::CheckScore(Err(e)) => Err(Hop::Answer(e)),
                                    other => Err(Hop::unexpected(other)),
                                })
                                .await
                        },
                    )
                })
                .await?;
            Ok::<_, WireError>((type_id.to_string(), checked))
        });
        let checks = futures::future::join_all(checks)
            .await
            .into_iter()
            .collect::<Result<Vec<_>, WireError>>()?;
        all_or_nothing::verdict(event_id, &checks)
    }

    /// Whether `cmd`'s one event would apply on this node's replica of its
    /// board's shard, which leads it, after the read barrier (so every
    /// event acknowledged before is counted). Changes nothing.
    pub(crate) async fn check_score_here(
        &self,
        g: &Group,
        shard: u32,
        cmd: &ScoreCmd,
    ) -> Result<EventResult, WireError> {
        let [event] = cmd.events.as_slice() else {
            return Err(internal(format!("a check is of one event, not {}", cmd.events.len())));
        };
        g.read_barrier(shard).await?;
        let rules = Rules { aggregation: cmd.aggregation, ties: cmd.ties, cap: cmd.cap as usize };
        g.shard_handle(shard)?
            .board_check(cmd.rank, cmd.type_key.clone(), rules, cmd.item, *event)
            .await
            .map_err(ShardError::into_wire)
    }

    /// Proposes `cmd` on shard `shard`'s leader, here or on another node;
    /// `None` if it was shed (`shed` gives the priority class to shed by).
    pub(crate) async fn propose_routed(
        &self,
        shard: u32,
        cmd: Command,
        shed: Option<u8>,
    ) -> Result<Option<CmdResult>, WireError> {
        self.propose_on(shard, cmd, shed, false).await
    }

    /// `propose_routed`, or with `redirect`, `NotLeader` naming the leader
    /// when another node leads the shard.
    async fn propose_on(
        &self,
        shard: u32,
        cmd: Command,
        shed: Option<u8>,
        redirect: bool,
    ) -> Result<Option<CmdResult>, WireError> {
        let cmd = &cmd;
        self.router
            .on_leader(
                shard,
                redirect,
                |g| async move { propose_here(&g, shard, cmd.clone(), shed).await },
                |n| async move {
                    let req = PeerRequest::Propose { group: shard, cmd: cmd.clone(), shed };
                    self.router
                        .call(n, req, |r| match r {
                            PeerResponse::Propose(Ok(r)) => Ok(r),
                            PeerResponse::Propose(Err(e)) => Err(Hop::Answer(e)),
                            other => Err(Hop::unexpected(other)),
                        })
                        .await
                },
            )
            .await
    }

    pub(crate) async fn query(
        &self,
        q: QueryRequest,
        redirect: bool,
    ) -> Result<Response, WireError> {
        let def = self.rank_def(q.rank).await?;
        let t = route::board_of(&def, &q.board)?;
        let (rank, key) = (q.rank, t.to_key());
        let req = &Request::Query(q);
        self.on_board(rank, &key, |shard| {
            self.router.on_leader(
                shard,
                redirect,
                move |g| async move {
                    match req {
                        Request::Query(q) => self.query_here(&g, shard, q.clone(), true).await,
                        _ => Err(internal("not a query")),
                    }
                },
                |n| async move { self.router.forward(n, req.clone()).await },
            )
        })
        .await
    }

    /// The shard a sub-board lives on: its hash shard unless it was moved
    /// (`board_mover.rs`).
    pub(crate) fn board_home(&self, rank: u32, type_key: &[u8]) -> u32 {
        if !self.directory.any_placed() {
            return board_shard(rank, type_key, self.cfg.shards);
        }
        self.directory.placements().shard_of(rank, type_key, self.cfg.shards)
    }

    /// Whether a move of a sub-board is under way.
    pub(crate) fn board_moving(&self, rank: u32, type_key: &[u8]) -> bool {
        self.directory.any_placed()
            && self
                .directory
                .placements()
                .moves
                .iter()
                .any(|m| m.key.rank == rank && m.key.type_key == type_key)
    }

    /// Runs `on(shard)` on the sub-board's shard, following `Moved`
    /// answers until the request's deadline (`follow_moved`): a board
    /// between shards (from its freeze to its activation,
    /// `rankings/residence.rs`) is refused by both.
    pub(crate) async fn on_board<T, F, Fut>(
        &self,
        rank: u32,
        type_key: &[u8],
        on: F,
    ) -> Result<T, WireError>
    where
        F: Fn(u32) -> Fut,
        Fut: std::future::Future<Output = Result<T, WireError>>,
    {
        let mut shard = self.board_home(rank, type_key);
        let on = &on;
        self.follow_moved(|named| {
            // Another shard named: there. "Ask here again" (a copy not
            // taking events yet): where the placements say now, which
            // is the source again if the move was given up.
            shard = match named {
                Some(to) if to != shard => to,
                Some(_) => self.board_home(rank, type_key),
                None => shard,
            };
            on(shard)
        })
        .await
    }

    /// Runs `attempt` again while it fails with `Moved`, passing the shard
    /// named (`None` the first time), until the request's deadline: after
    /// the first redirect each further one waits a little longer, up to
    /// `MOVED_PAUSE_MAX` (an actor between shards, or placements this node
    /// has not applied yet).
    pub(crate) async fn follow_moved<T, Fut>(
        &self,
        mut attempt: impl FnMut(Option<u32>) -> Fut,
    ) -> Result<T, WireError>
    where
        Fut: std::future::Future<Output = Result<T, WireError>>,
    {
        let deadline = tokio::time::Instant::now() + self.router.deadline;
        let mut pause: Option<Duration> = None;
        let mut named = None;
        loop {
            let e = match attempt(named).await {
                Err(e) if e.moved_to().is_some() => e,
                done => return done,
            };
            if let Some(p) = pause {
                if tokio::time::Instant::now() + p > deadline {
                    return Err(e);
                }
                tokio::time::sleep(p).await;
            }
            pause = Some(pause.map_or(MOVED_PAUSE_MIN, |p| (p * 2).min(MOVED_PAUSE_MAX)));
            named = e.moved_to();
        }
    }

    /// A board query on this node's replica of the board's shard: with
    /// `fresh`, this node leads it and passes the read barrier first.
    pub(crate) async fn query_here(
        &self,
        g: &Group,
        shard: u32,
        q: QueryRequest,
        fresh: bool,
    ) -> Result<Response, WireError> {
        let def = self.rank_def(q.rank).await?;
        let t = route::board_of(&def, &q.board)?;
        if fresh {
            g.read_barrier(shard).await?;
        }
        let rules =
            Rules { aggregation: def.aggregation, ties: def.ties, cap: def.settings.cap as usize };
        let out = g
            .shard_handle(shard)?
            .board_query(q.rank, t.to_key(), rules, q.query.clone())
            .await
            .map_err(ShardError::into_wire)?;
        Ok(Response::Query(crate::inline::query_reply(|| t.format(), &q.query, out)))
    }

    /// One shard's page of a ranking's sub-boards, on this node, which
    /// leads the shard: `(type_key, size)` after `after`.
    pub(crate) async fn boards_here(
        &self,
        g: &Group,
        shard: u32,
        rank: u32,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, u64)>, WireError> {
        g.read_barrier(shard).await?;
        let page = self.store.boards_on_shard(rank, shard, after, limit).map_err(internal)?;
        // A held board's stored header is as of its load or first batch. A
        // board let go after the page was read was written back before it
        // was unlisted: its header, read again, is current.
        let handle = g.shard_handle(shard)?;
        let size = |k: &[u8], stored: u64| match handle.board_size_now(rank, k) {
            Some(size) => Ok(size),
            None => match self.store.board_meta(rank, shard, k).map_err(internal)? {
                Some(m) => Ok(m.size),
                None => Ok(stored),
            },
        };
        page.into_iter()
            .map(|(k, m)| {
                let s = size(&k, m.size)?;
                Ok((k, s))
            })
            .collect()
    }

    /// Sub-boards in type-id order (granularity, window, dimension values),
    /// merged across shards; the cursor is the last type id returned.
    pub(crate) async fn boards(&self, b: BoardsRequest) -> Result<Response, WireError> {
        self.rank_def(b.rank).await?;
        let after = match &b.cursor {
            Some(c) => Some(
                TypeId::parse(c)
                    .ok_or_else(|| WireError::bad_request(format!("{c:?} is not a cursor")))?
                    .to_key(),
            ),
            None => None,
        };
        let want = b.limit + 1;
        let after = &after;
        let per_shard = (0..self.cfg.shards).map(|shard| async move {
            self.router
                .on_leader(
                    shard,
                    false,
                    |g| async move {
                        self.boards_here(&g, shard, b.rank, after.as_deref(), want as usize).await
                    },
                    |n| async move {
                        let req = PeerRequest::Boards {
                            shard,
                            rank: b.rank,
                            after: after.clone(),
                            limit: want,
                        };
                        self.router
                            .call(n, req, |r| match r {
                                PeerResponse::Boards(Ok(v)) => Ok(v),
                                PeerResponse::Boards(Err(e)) => Err(Hop::Answer(e)),
                                other => Err(Hop::unexpected(other)),
                            })
                            .await
                    },
                )
                .await
        });
        let mut all = Vec::new();
        for page in futures::future::join_all(per_shard).await {
            all.extend(page?);
        }
        all.sort_by(|x, y| x.0.cmp(&y.0));
        // A board being moved is on two shards for a moment (frozen on
        // one, copied to the other): listed once.
        all.dedup_by(|x, y| x.0 == y.0);
        let more = all.len() > b.limit as usize;
        all.truncate(b.limit as usize);
        let boards = all
            .iter()
            .map(|(k, size)| {
                let type_id = TypeId::from_key(k)
                    .map(|t| t.format())
                    .ok_or_else(|| internal(format!("stored board key {k:?} is not a type id")))?;
                Ok(BoardInfo { type_id, size: *size })
            })
            .collect::<Result<Vec<_>, WireError>>()?;
        let next = if more { boards.last().map(|b| b.type_id.clone()) } else { None };
        Ok(Response::Boards(BoardsPage { boards, next }))
    }
}

/// The command that puts event `r` on the board `type_id` of ranking `def`.
pub(crate) fn score_cmd(
    def: &plaudit_proto::rankings::RankDef,
    r: &ScoreRequest,
    type_id: &TypeId,
    dedup: Dedup,
) -> ScoreCmd {
    score_cmd_keyed(def, r, type_id.to_key(), dedup)
}

/// [`score_cmd`] for a sub-board whose binary key is known.
pub(crate) fn score_cmd_keyed(
    def: &plaudit_proto::rankings::RankDef,
    r: &ScoreRequest,
    type_key: Vec<u8>,
    dedup: Dedup,
) -> ScoreCmd {
    ScoreCmd {
        rank: r.rank,
        type_key,
        item: r.item,
        aggregation: def.aggregation,
        ties: def.ties,
        cap: def.settings.cap,
        events: vec![ScoreEvent { score: r.score, sub: r.sub, event_id: r.event_id }],
        dedup,
    }
}

/// Proposes on a group this node leads; `None` if the priority class is shed.
pub(crate) async fn propose_here(
    g: &Group,
    shard: u32,
    cmd: Command,
    shed: Option<u8>,
) -> Result<Option<CmdResult>, WireError> {
    if let Some(p) = shed {
        if g.should_shed(shard, p, MAX_PRIORITY) {
            return Ok(None);
        }
    }
    g.propose(shard, cmd).await.map(Some)
}
