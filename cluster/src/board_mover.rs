//! Moving a sub-board to another shard, driven by the metadata group's
//! leader: the request that records a move, and the task that takes each
//! recorded move through its steps (`proto/src/placement.rs` holds the
//! record, `actors/src/rankings/residence.rs` what each step does on a
//! shard).
//!
//! ```text
//! MoveBoard ─> metadata leader: Placements::start ─> SetPlacements (move at Freeze)
//! mover (one task, moves one at a time, in the order recorded):
//!   Freeze    propose MoveBoard(Freeze{to}) on the source  ─> recorded: Copy
//!   Copy      export the frozen copy from the source's leader,
//!             propose MoveBoard(Import(copy)) on the target ─> recorded: Release + placed on the target
//!   Release   propose MoveBoard(Release{to}) on the source ─> recorded: Activate
//!   Activate  propose MoveBoard(Activate) on the target     ─> recorded: the move gone
//! ```
//!
//! Each step is recorded only after the shard applied it, and every step
//! may be proposed again (a repeat changes nothing), so a new metadata
//! leader resumes a move at the step recorded, whatever the old one had
//! done since. Events for the board are refused from the freeze to the
//! activation, and the edge retries them (`rankings.rs`): that is the
//! pause writers see. Reads are served throughout.

use crate::engine::{internal, Engine};
use crate::hot_move::{HotMoves, Look, Policy};
use crate::peer::wire::{PeerRequest, PeerResponse};
use crate::router::Hop;
use plaudit_actors::rankings::residence::{BoardCopy, MoveCmd};
use plaudit_actors::rankings::route;
use plaudit_actors::{CmdResult, Command, ShardError};
use plaudit_proto::hotkeys::HotKey;
use plaudit_proto::placement::{BoardKey, BoardMove, MoveBoard, MoveStep, Placements};
use plaudit_proto::routing::shard_of;
use plaudit_proto::window::TypeId;
use plaudit_proto::ShardId;
use plaudit_proto::{Request, Response, WireError};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tracing::{info, warn};

/// How often the automatic mover looks at the hot keys, and how many of
/// each node's it reads.
const HOT_LOOK_EVERY: Duration = Duration::from_secs(1);
const HOT_LOOK_TOP: u32 = 64;

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// A Copy step that keeps failing this long gives its move up: the
/// board's writes, refused since the freeze, wait no longer than that.
const COPY_PATIENCE: Duration = Duration::from_secs(10);
/// The largest copy a move carries: one peer frame and one log entry
/// (`MAX_FRAME` is 32 MiB).
pub const MAX_COPY_BYTES: usize = 16 << 20;

/// Between two tries of a step that failed (a shard without a leader, a
/// node down): the move waits, it does not give up.
const RETRY: Duration = Duration::from_millis(100);

impl Engine {
    /// `plaudit admin move`: records the move on the metadata leader.
    pub(crate) async fn move_board(
        &self,
        m: MoveBoard,
        redirect: bool,
    ) -> Result<Response, WireError> {
        self.rank_def(m.rank).await?;
        let t = TypeId::parse(&m.board)
            .ok_or_else(|| WireError::bad_request(format!("{:?} is not a type id", m.board)))?;
        let board = BoardKey { rank: m.rank, type_key: t.to_key() };
        let (to, shards) = (m.to_shard, self.cfg.shards);
        let meta = self.router.meta_id;
        let m = &m;
        let board = &board;
        self.router
            .on_leader(
                meta,
                redirect,
                |_| async move {
                    let now_ms = now_ms();
                    // A repeat of this very move (a retry whose first
                    // answer was lost) is answered like the first.
                    self.change_placements(|p| match p.move_of(board) {
                        Some(under_way) if under_way.to == to => Ok(None),
                        _ => p.start(board.clone(), to, shards, now_ms).map(Some),
                    })
                    .await?;
                    info!(rank = board.rank, board = %m.board, to, "board move recorded");
                    self.nudge.notify_one();
                    Ok(Response::Done)
                },
                |n| async move { self.router.forward(n, Request::MoveBoard(m.clone())).await },
            )
            .await
    }

    /// Proposes the placements `change` makes of the newest ones (`None`:
    /// nothing to record), on the metadata group this node leads.
    async fn change_placements(
        &self,
        mut change: impl FnMut(&Placements) -> Result<Option<Placements>, WireError>,
    ) -> Result<bool, WireError> {
        let _one = self.state_changes.lock().await;
        let meta = self.led_meta()?;
        // What this leader applied is the newest: it leads the group.
        meta.read_barrier().await?;
        let Some(next) = change(&self.directory.placements())? else { return Ok(false) };
        match meta.propose(Command::SetPlacements(Box::new(next))).await? {
            CmdResult::Done => Ok(true),
            CmdResult::Failed(e) => Err(e),
            other => Err(internal(format!("unexpected result {other:?} recording placements"))),
        }
    }

    /// The automatic mover (`hot_move.rs`): once a second, on the
    /// metadata leader, while `hot_move_min_rps` is set and no move is
    /// under way, looks at every node's hot keys and records the move the
    /// policy picks.
    pub(crate) async fn manage_hot_moves(self: Arc<Self>) {
        let policy = Policy { min_rps: self.cfg.hot_move_min_rps, after: self.cfg.hot_move_after };
        let mut moves = HotMoves::default();
        loop {
            tokio::time::sleep(HOT_LOOK_EVERY).await;
            if !self.leads_meta() || !self.directory.placements().moves.is_empty() {
                continue;
            }
            let look = self.hot_look().await;
            let Some((board, to)) = moves.decide(policy, &look, Instant::now()) else { continue };
            let shards = self.cfg.shards;
            let started = self
                .change_placements(|p| match p.move_of(&board) {
                    Some(_) => Ok(None),
                    None => p.start(board.clone(), to, shards, now_ms()).map(Some),
                })
                .await;
            match started {
                Ok(_) => {
                    info!(rank = board.rank, to, "hot board move recorded");
                    self.nudge.notify_one();
                }
                Err(e) => {
                    warn!(rank = board.rank, error = %e, "recording a hot board's move failed")
                }
            }
        }
    }

    /// Every node's hot keys, as the move policy reads them: boards by
    /// where they live (a board counted by the dimensions its events carry
    /// is each of its live windows' boards), and each node's load as the
    /// keys of the shards it leads.
    async fn hot_look(&self) -> Look {
        let mut summed: HashMap<HotKey, u64> = HashMap::new();
        for row in self.hot_keys(HOT_LOOK_TOP).await {
            *summed.entry(row.key).or_default() += row.requests_per_s;
        }
        let shards = self.cfg.shards;
        let leaders: Vec<Option<u64>> = (0..shards).map(|s| self.leader_id(s)).collect();
        let mut look = Look { leaders, ..Look::default() };
        for (key, rps) in summed {
            let on: Vec<(Option<BoardKey>, ShardId)> = match &key {
                HotKey::Entity { biz, entity } => vec![(None, shard_of(*biz, *entity, shards))],
                HotKey::User { biz, user } => vec![(None, shard_of(*biz, *user, shards))],
                HotKey::Board { rank, board } => self
                    .boards_named(*rank, board)
                    .into_iter()
                    .map(|k| {
                        let shard = self.board_home(*rank, &k);
                        (Some(BoardKey { rank: *rank, type_key: k }), shard)
                    })
                    .collect(),
            };
            for (board, shard) in on {
                if let Some(Some(n)) = look.leaders.get(shard as usize) {
                    *look.node_load.entry(*n).or_default() += rps;
                }
                if let Some(b) = board {
                    look.boards.push((b, shard, rps));
                }
            }
        }
        look
    }

    /// The boards a hot key's name stands for: its type id, or the live
    /// windows' boards of the dimensions it names (`room=7`; none when the
    /// ranking or a dimension is unknown).
    fn boards_named(&self, rank: u32, name: &str) -> Vec<Vec<u8>> {
        if let Some(t) = TypeId::parse(name) {
            return vec![t.to_key()];
        }
        let Some(def) = self.directory.rank(rank) else { return Vec::new() };
        let dims: Option<Vec<(String, u64)>> = name
            .split(',')
            .filter(|p| !p.is_empty())
            .map(|p| p.split_once('=').and_then(|(d, v)| Some((d.to_string(), v.parse().ok()?))))
            .collect();
        let Some(Ok(values)) = dims.map(|d| route::dim_values(&def, &d)) else { return Vec::new() };
        let now = crate::rankings::now_secs();
        route::targets(&def, values, now, now)
            .into_iter()
            .filter(|t| !t.expired)
            .map(|t| t.type_id.to_key())
            .collect()
    }

    /// The mover: runs while this node leads the metadata group and a move
    /// is recorded (`membership.rs` starts it).
    pub(crate) async fn drive_board_moves(self: Arc<Self>) {
        // Since when the current move's Copy has kept failing.
        let mut failing: Option<(BoardKey, Instant)> = None;
        // When the current move's freeze was applied (for its pause).
        let mut frozen: Option<(BoardKey, Instant)> = None;
        while self.leads_meta() {
            let Some(m) = self.directory.placements().moves.first().cloned() else { return };
            if !self.cfg.move_step_pause.is_zero() {
                tokio::time::sleep(self.cfg.move_step_pause).await;
            }
            let started = Instant::now();
            match self.board_move_step(&m).await {
                Ok(applied) => {
                    let (rank, step) = (m.board.rank, m.step.as_str());
                    let ms = started.elapsed().as_millis() as u64;
                    info!(rank, step, from = m.from, to = m.to, ms, "board move step done");
                    match m.step {
                        MoveStep::Freeze => frozen = Some((m.board.clone(), applied)),
                        MoveStep::Activate | MoveStep::Abort => {
                            // The writers' pause, as this node saw it: from
                            // the freeze applied to the activation applied.
                            if let Some((b, at)) = frozen.take().filter(|(b, _)| *b == m.board) {
                                let paused = applied.duration_since(at).as_millis() as u64;
                                info!(
                                    rank = b.rank,
                                    from = m.from,
                                    to = m.to,
                                    done = step,
                                    "board move over: writes paused for {paused} ms"
                                );
                            }
                        }
                        _ => {}
                    }
                }
                Err(e) => {
                    warn!(rank = m.board.rank, step = m.step.as_str(), error = %e, "a board move step failed; trying again");
                    if m.step == MoveStep::Copy {
                        let since = match &failing {
                            Some((b, at)) if *b == m.board => *at,
                            _ => Instant::now(),
                        };
                        failing = Some((m.board.clone(), since));
                        // A copy too large fails the same way every time.
                        let hopeless = e.code == plaudit_proto::ErrorCode::BadRequest;
                        if hopeless || since.elapsed() >= COPY_PATIENCE {
                            warn!(rank = m.board.rank, from = m.from, to = m.to, error = %e, "giving the board move up: the board stays where it was");
                            let _ = self.change_placements(|p| Ok(p.abort(&m.board))).await;
                            failing = None;
                            continue;
                        }
                    }
                    tokio::time::sleep(RETRY).await;
                }
            }
        }
    }

    /// Takes one step of `m` and records it; returns when the shard had
    /// applied the step's command.
    async fn board_move_step(&self, m: &BoardMove) -> Result<Instant, WireError> {
        let board = m.board.clone();
        let (shard, cmd) = match m.step {
            MoveStep::Freeze => (m.from, MoveCmd::Freeze { board, to: m.to }),
            MoveStep::Copy => (m.to, MoveCmd::Import(Box::new(self.export_board(m).await?))),
            MoveStep::Release => (m.from, MoveCmd::Release { board, to: m.to }),
            MoveStep::Activate => (m.to, MoveCmd::Activate { board }),
            MoveStep::Abort => {
                // The target's copy goes first: once the source takes
                // events again, no other shard may serve the board.
                let discard = MoveCmd::Discard { board: board.clone(), to: m.from };
                self.move_command(m.to, discard).await?;
                (m.from, MoveCmd::Unfreeze { board })
            }
        };
        self.move_command(shard, cmd).await?;
        let applied = Instant::now();
        let shards = self.cfg.shards;
        self.change_placements(|p| Ok(p.advance(&m.board, m.step, shards))).await?;
        Ok(applied)
    }

    /// Proposes one step's command on `shard`'s leader.
    async fn move_command(&self, shard: u32, cmd: MoveCmd) -> Result<(), WireError> {
        match self.propose_routed(shard, Command::MoveBoard(cmd), None).await? {
            Some(CmdResult::Done) => Ok(()),
            Some(CmdResult::Failed(e)) => Err(e),
            other => Err(internal(format!("unexpected result {other:?} of a move step"))),
        }
    }

    /// The frozen board's copy, from the source shard's leader.
    async fn export_board(&self, m: &BoardMove) -> Result<BoardCopy, WireError> {
        let (shard, board) = (m.from, &m.board);
        self.router
            .on_leader(
                shard,
                false,
                |g| async move { self.export_board_here(&g, board.clone()).await },
                |n| async move {
                    let req = PeerRequest::ExportBoard { group: shard, board: board.clone() };
                    self.router
                        .call(n, req, |r| match r {
                            PeerResponse::ExportBoard(Ok(c)) => Ok(*c),
                            PeerResponse::ExportBoard(Err(e)) => Err(Hop::Answer(e)),
                            other => Err(Hop::unexpected(other)),
                        })
                        .await
                },
            )
            .await
    }

    /// The frozen board's copy on this node, which leads its shard: after
    /// the read barrier, so the freeze (acknowledged before) has applied.
    pub(crate) async fn export_board_here(
        &self,
        g: &crate::group::Group,
        board: BoardKey,
    ) -> Result<BoardCopy, WireError> {
        g.read_barrier().await?;
        let copy = g.handle.export_board(board).await.map_err(ShardError::into_wire)?;
        let bytes = plaudit_proto::codec::to_bytes(&copy).map_err(internal)?.len();
        let most = self.cfg.move_max_copy_bytes;
        if bytes > most {
            return Err(WireError::bad_request(format!(
                "the board is too large to move: its copy is {bytes} bytes, at most {most}"
            )));
        }
        Ok(copy)
    }
}
