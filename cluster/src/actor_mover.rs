//! Moving an actor (a sub-board, an entity's counts and likers) to another
//! shard, driven by the metadata group's leader: the record of the
//! placements, and the task that takes each recorded move through its
//! steps (`proto/src/placement.rs` holds the record,
//! `actors/src/residence.rs` what each step does on a shard). What differs
//! per kind (the copy, its export, the commands) is `Movable`'s:
//! `board_mover.rs`, `entity_mover.rs`.
//!
//! ```text
//! admin move ─> metadata leader: PlacementsOf::start ─> recorded (move at Freeze,
//!                                                      or at Hold: below)
//! mover (one task per kind, moves one at a time, in the order recorded):
//!   Hold      (an entity moved from elsewhere than its home)
//!             propose Hold{source} on its home          ─> recorded: Freeze
//!   Freeze    propose Freeze{to} on the source        ─> recorded: Copy
//!             (after a Hold, refused until the home's barrier arrived: tried again)
//!   Copy      export the frozen copy from the source's leader,
//!             propose Import(copy) on the target       ─> recorded: Release + placed on the target
//!   Release   propose Release{to} on the source        ─> recorded: Activate (or Pass)
//!   Pass      (after a Hold) propose Pass{target} on its home ─> recorded: Activate
//!   Activate  propose Activate on the target           ─> recorded: the move gone
//! ```
//!
//! Each step is recorded only after the shard applied it, and every step
//! may be proposed again (a repeat changes nothing), so a new metadata
//! leader resumes a move at the step recorded, whatever the old one had
//! done since. Each step carries its move's id (`MoveOf::id`), so a step
//! the old leader still had on its way, landing late, is refused or
//! changes nothing (`actors/src/residence.rs`). A Copy that keeps failing
//! for `COPY_PATIENCE`, or cannot succeed (too large), gives the move up
//! (`Abort`); so does a Hold or a Freeze after a Hold that keeps failing
//! that long (a barrier that does not arrive must not hold an entity's
//! deltas for ever).

use crate::engine::{internal, Engine};
use plaudit_actors::residence::{Copied, MoveCmdOf, StepOf};
use plaudit_actors::{CmdResult, Command, Directory};
use plaudit_proto::placement::{
    BoardKey, EntityKey, MoveId, MoveOf, MoveStep, Placeable, PlacementsOf,
};
use plaudit_proto::WireError;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tracing::{debug, info, warn};

/// A Copy step that keeps failing this long gives its move up: the
/// actor's writes, held back since the freeze, wait no longer than that.
const COPY_PATIENCE: Duration = Duration::from_secs(10);
/// The largest copy a move carries: one peer frame and one log entry
/// (`MAX_FRAME` is 32 MiB).
pub const MAX_COPY_BYTES: usize = 16 << 20;
/// Between two tries of a step that failed (a shard without a leader, a
/// node down): the move waits, it does not give up.
const RETRY: Duration = Duration::from_millis(100);

pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// A kind of actor that moves between shards.
pub(crate) trait Movable: Placeable + Send + Sync + 'static {
    /// The frozen state a move carries.
    type Copy: Copied<Self> + serde::Serialize + Send + Sync + 'static;
    /// For logs: "board", "entity".
    const KIND: &'static str;

    fn placements(d: &Directory) -> Arc<PlacementsOf<Self>>;
    /// The metadata command that records `p`.
    fn record(p: PlacementsOf<Self>) -> Command;
    /// The shard command that carries one step.
    fn step(s: StepOf<Self, Self::Copy>) -> Command;
    /// The frozen copy, from the source shard's leader.
    fn export(
        e: &Engine,
        m: &MoveOf<Self>,
    ) -> impl Future<Output = Result<Self::Copy, WireError>> + Send;
}

/// The movers of boards and entities a metadata leader runs: one task per
/// kind while a move of that kind is recorded, one move at a time.
#[derive(Default)]
pub(crate) struct ActorMovers {
    board: Option<tokio::task::JoinHandle<()>>,
    entity: Option<tokio::task::JoinHandle<()>>,
}

impl ActorMovers {
    /// Starts the mover of each kind that has a move recorded and no mover.
    pub(crate) fn tend(&mut self, e: &Arc<Engine>) {
        if self.board.as_ref().is_none_or(|m| m.is_finished())
            && !e.directory.placements().moves.is_empty()
        {
            self.board = Some(tokio::spawn(e.clone().drive_moves::<BoardKey>()));
        }
        if self.entity.as_ref().is_none_or(|m| m.is_finished())
            && !e.directory.entity_placements().moves.is_empty()
        {
            self.entity = Some(tokio::spawn(e.clone().drive_moves::<EntityKey>()));
        }
    }

    /// Stops them (this node no longer leads the metadata group).
    pub(crate) fn abort(&mut self) {
        for m in [self.board.take(), self.entity.take()].into_iter().flatten() {
            m.abort();
        }
    }
}

impl Engine {
    /// A node without a cluster (no secret: no membership manager) drives
    /// its moves itself: it always leads its metadata group.
    pub(crate) async fn drive_moves_alone(self: Arc<Self>) {
        let mut movers = ActorMovers::default();
        loop {
            let _ = tokio::time::timeout(Duration::from_secs(1), self.nudge.notified()).await;
            movers.tend(&self);
        }
    }

    /// Proposes the placements `change` makes of the newest ones (`None`:
    /// nothing to record), on the metadata group this node leads.
    pub(crate) async fn change_placements<K: Movable>(
        &self,
        mut change: impl FnMut(&PlacementsOf<K>) -> Result<Option<PlacementsOf<K>>, WireError>,
    ) -> Result<bool, WireError> {
        let _one = self.state_changes.lock().await;
        let meta = self.led_meta()?;
        // What this leader applied is the newest: it leads the group.
        meta.read_barrier(meta.gid).await?;
        let Some(next) = change(&K::placements(&self.directory))? else { return Ok(false) };
        match meta.propose(meta.gid, K::record(next)).await? {
            CmdResult::Done => Ok(true),
            CmdResult::Failed(e) => Err(e),
            other => Err(internal(format!("unexpected result {other:?} recording placements"))),
        }
    }

    /// Records a move of `key` to shard `to` (`admin move`); a repeat of
    /// this very move (a retry whose first answer was lost) is answered
    /// like the first.
    pub(crate) async fn record_move<K: Movable>(&self, key: &K, to: u32) -> Result<(), WireError> {
        let shards = self.cfg.shards;
        self.change_placements::<K>(|p| match p.move_of(key) {
            Some(under_way) if under_way.to == to => Ok(None),
            _ => p.start(key.clone(), to, shards, now_ms()).map(Some),
        })
        .await?;
        info!(kind = K::KIND, key = ?key, to, "move recorded");
        self.nudge.notify_one();
        Ok(())
    }

    /// The mover of one kind: runs while this node leads the metadata
    /// group and a move of that kind is recorded (`membership.rs` starts it).
    pub(crate) async fn drive_moves<K: Movable>(self: Arc<Self>) {
        // Since when the current move's current step has kept failing (a
        // step's patience is its own: a slow Hold leaves its Freeze the
        // whole of it).
        let mut failing: Option<(MoveId, MoveStep, Instant)> = None;
        // When the current move's freeze was applied (for its pause).
        let mut frozen: Option<(K, Instant)> = None;
        while self.leads_meta() {
            let Some(m) = K::placements(&self.directory).moves.first().cloned() else { return };
            if !self.cfg.move_step_pause.is_zero() {
                tokio::time::sleep(self.cfg.move_step_pause).await;
            }
            let started = Instant::now();
            match self.move_step(&m).await {
                Ok(applied) => {
                    failing = None;
                    let (kind, step) = (K::KIND, m.step.as_str());
                    let ms = started.elapsed().as_millis() as u64;
                    info!(kind, key = ?m.key, step, from = m.from, to = m.to, ms, "move step done");
                    match m.step {
                        // Writes are held from the hold, if the move
                        // takes one, else from the freeze.
                        MoveStep::Hold => frozen = Some((m.key.clone(), applied)),
                        MoveStep::Freeze if !m.through_home(self.cfg.shards) => {
                            frozen = Some((m.key.clone(), applied))
                        }
                        MoveStep::Activate | MoveStep::Abort => {
                            // The writers' pause, as this node saw it: from
                            // the freeze applied to the activation applied.
                            if let Some((k, at)) = frozen.take().filter(|(k, _)| *k == m.key) {
                                let paused = applied.duration_since(at).as_millis() as u64;
                                info!(
                                    kind,
                                    key = ?k,
                                    from = m.from,
                                    to = m.to,
                                    done = step,
                                    "move over: writes held back for {paused} ms"
                                );
                            }
                        }
                        _ => {}
                    }
                }
                Err(e) => {
                    // A freeze waiting for its barrier is refused until the
                    // barrier arrives: expected, not worth a warning.
                    let draining = m.step == MoveStep::Freeze && m.through_home(self.cfg.shards);
                    if draining && e.code == plaudit_proto::ErrorCode::Refused {
                        debug!(kind = K::KIND, key = ?m.key, error = %e, "the freeze waits for its barrier");
                    } else {
                        warn!(kind = K::KIND, key = ?m.key, step = m.step.as_str(), error = %e, "a move step failed; trying again");
                    }
                    let patient = matches!(m.step, MoveStep::Copy | MoveStep::Hold) || draining;
                    if patient {
                        let since = match failing {
                            Some((id, step, at)) if id == m.id && step == m.step => at,
                            _ => Instant::now(),
                        };
                        failing = Some((m.id, m.step, since));
                        // A copy too large fails the same way every time.
                        let hopeless = e.code == plaudit_proto::ErrorCode::BadRequest;
                        if hopeless || since.elapsed() >= COPY_PATIENCE {
                            warn!(kind = K::KIND, key = ?m.key, from = m.from, to = m.to, error = %e, "giving the move up: it stays where it was");
                            let _ = self.change_placements::<K>(|p| Ok(p.abort(&m.key))).await;
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
    async fn move_step<K: Movable>(&self, m: &MoveOf<K>) -> Result<Instant, WireError> {
        let key = m.key.clone();
        let home = key.home(self.cfg.shards);
        let (shard, cmd) = match m.step {
            MoveStep::Hold => (home, MoveCmdOf::Hold { key, to: m.from }),
            MoveStep::Pass => (home, MoveCmdOf::Pass { key, to: m.to }),
            MoveStep::Freeze => (m.from, MoveCmdOf::Freeze { key, to: m.to }),
            MoveStep::Copy => (m.to, MoveCmdOf::Import(Box::new(K::export(self, m).await?))),
            MoveStep::Release => (m.from, MoveCmdOf::Release { key, to: m.to }),
            MoveStep::Activate => (m.to, MoveCmdOf::Activate { key }),
            MoveStep::Abort => {
                // The target's copy goes first: once the source takes
                // writes again, no other shard may serve the actor.
                let discard = MoveCmdOf::Discard { key: key.clone(), to: m.from };
                self.move_command::<K>(m.to, m.id, discard).await?;
                if !m.through_home(self.cfg.shards) {
                    (m.from, MoveCmdOf::Unfreeze { key })
                } else {
                    // The source takes deltas again, then its home sends it
                    // what it held, and the later ones.
                    let unfreeze = MoveCmdOf::Unfreeze { key: key.clone() };
                    self.move_command::<K>(m.from, m.id, unfreeze).await?;
                    (home, MoveCmdOf::Pass { key, to: m.from })
                }
            }
        };
        self.move_command::<K>(shard, m.id, cmd).await?;
        let applied = Instant::now();
        let shards = self.cfg.shards;
        self.change_placements::<K>(|p| Ok(p.advance(&m.key, m.step, shards))).await?;
        Ok(applied)
    }

    /// Proposes one step's command of move `mv` on `shard`'s leader.
    async fn move_command<K: Movable>(
        &self,
        shard: u32,
        mv: MoveId,
        cmd: MoveCmdOf<K, K::Copy>,
    ) -> Result<(), WireError> {
        match self.propose_routed(shard, K::step(StepOf { mv, cmd }), None).await? {
            Some(CmdResult::Done) => Ok(()),
            Some(CmdResult::Failed(e)) => Err(e),
            other => Err(internal(format!("unexpected result {other:?} of a move step"))),
        }
    }

    /// Refuses a copy larger than a move may carry (`move_max_copy_bytes`).
    pub(crate) fn check_copy_size<C: serde::Serialize>(&self, copy: &C) -> Result<(), WireError> {
        let bytes = plaudit_proto::codec::to_bytes(copy).map_err(internal)?.len();
        let most = self.cfg.move_max_copy_bytes;
        if bytes > most {
            return Err(WireError::bad_request(format!(
                "too large to move: its copy is {bytes} bytes, at most {most}"
            )));
        }
        Ok(())
    }
}
