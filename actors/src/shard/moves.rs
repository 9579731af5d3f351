//! Applying the steps of a sub-board's move on a shard (the decisions are
//! `rankings/residence.rs`'s), and what the rest of the shard asks of
//! residence: whether a board's events or reads are served here, and the
//! frozen board's copy for the target.
//!
//! ```text
//! MoveBoard(step) ─> Residences::step ─> residence entry stored (shard meta `r:`)
//!                                      └─ Install: anything held for the board dropped, the copy written
//!                                      └─ Drop: the board dropped after this entry's other work
//! Score (per board, per batch) ─> writable? else each event answered Moved(shard)
//! query, check ─> readable / writable? else Moved(shard)
//! ```
//!
//! The entries are few (one per board moved to or from the shard) and are
//! read from the store at the first use after a start or a snapshot.

use super::rankings::BoardsPlan;
use super::{ShardActor, ShardState};
use crate::command::CmdResult;
use crate::error::{Fatal, ShardError};
use crate::rankings::residence::{BoardCopy, BoardResidences, MoveCmd};
use crate::residence::{Effect, Residence, ResidenceRecord};
use plaudit_proto::codec;
use plaudit_proto::placement::{BoardKey, MoveId};
use plaudit_proto::rankings::RankId;
use plaudit_proto::{ShardId, WireError};
use plaudit_storage::{BoardImage, BoardMeta, WriteSet};

/// The error a board's reader or writer gets when the board is elsewhere.
pub(crate) fn moved(rank: RankId, to: ShardId) -> WireError {
    WireError::moved(to, format!("this sub-board of ranking {rank} is served by shard {to}"))
}

impl ShardActor {
    /// The shard's residence entries, read from the store at first use.
    pub(super) fn residences<'s>(
        &self,
        state: &'s mut ShardState,
    ) -> Result<&'s mut BoardResidences, Fatal> {
        if state.residences.is_none() {
            let mut entries = Vec::new();
            for (rank, type_key, v) in self.store.residences(self.cfg.shard)? {
                let r: ResidenceRecord = codec::from_bytes(&v)?;
                entries.push((BoardKey { rank, type_key }, r.entry()));
            }
            state.residences =
                Some(BoardResidences::new(self.cfg.shard, self.cfg.shard_count, entries));
        }
        state
            .residences
            .as_mut()
            .ok_or_else(|| Fatal::Invariant("residences vanished on load".into()))
    }

    /// Applies one step of a move (an entry that carries one is applied in
    /// a call of its own, `apply.rs`). A step that does not fit the
    /// board's residence is a rejected command: nothing changes.
    pub(super) fn apply_move(
        &self,
        state: &mut ShardState,
        mv: MoveId,
        cmd: &MoveCmd,
        boards: &mut BoardsPlan<'_>,
        ws: &mut WriteSet,
    ) -> Result<CmdResult, Fatal> {
        let shard = self.cfg.shard;
        let (effect, entry) = match self.residences(state)?.step(mv, cmd) {
            Ok(done) => done,
            Err(e) => return Ok(CmdResult::Failed(e)),
        };
        let b = cmd.key();
        let value =
            entry.map(|(r, mv)| codec::to_bytes(&ResidenceRecord::V2(r, mv))).transpose()?;
        ws.put_residence(shard, b.rank, &b.type_key, value.as_deref());
        match (effect, cmd) {
            (Effect::Install, MoveCmd::Import(copy)) => {
                // Whatever this shard held for the board (an earlier stay)
                // goes first: the copy is the whole truth.
                self.drop_boards(state, ws, vec![(b.rank, b.type_key.clone())])?;
                ws.write_back_board(&image_of(copy), [], []);
            }
            (Effect::Drop, _) => boards.drop_board(b.rank, &b.type_key),
            _ => {}
        }
        tracing::info!(shard, rank = b.rank, step = cmd.name(), "board move step applied");
        Ok(CmdResult::Done)
    }

    /// Whether this shard takes events for the board, as a wire error if not.
    pub(super) fn board_writable(
        &self,
        state: &mut ShardState,
        rank: RankId,
        type_key: &[u8],
    ) -> Result<Result<(), WireError>, Fatal> {
        Ok(self.residences(state)?.writable(rank, type_key).map_err(|to| moved(rank, to)))
    }

    /// Whether this shard serves reads of the board, as a wire error if not.
    pub(super) fn board_readable(
        &self,
        state: &mut ShardState,
        rank: RankId,
        type_key: &[u8],
    ) -> Result<(), ShardError> {
        self.residences(state)?
            .readable(rank, type_key)
            .map_err(|to| ShardError::Rejected(moved(rank, to)))
    }

    /// The copy of a board this shard froze for a move: from the host if it
    /// is held (it may hold changes the tree lacks), else from the tree.
    pub(super) fn export_board(
        &self,
        state: &mut ShardState,
        board: BoardKey,
    ) -> Result<BoardCopy, ShardError> {
        match self.residences(state)?.get(&board) {
            Some(Residence::Frozen { .. }) => {}
            other => {
                return Err(ShardError::Rejected(WireError::refused(format!(
                    "shard {}: the board is not frozen here ({other:?})",
                    self.cfg.shard
                ))))
            }
        }
        let key = (board.rank, board.type_key.clone());
        let image = match state.boards.touch_mut(&key, std::time::Instant::now()) {
            Some(host) => host.image(),
            None => {
                let (rank, shard, tk) = (board.rank, self.cfg.shard, &board.type_key);
                let meta = self.store.board_meta(rank, shard, tk)?.unwrap_or_default();
                let members = self.store.board_members(rank, shard, tk)?;
                let events = self.store.board_events(rank, shard, tk)?;
                let events = events.into_iter().map(|(_, second, ids)| (second, ids)).collect();
                BoardImage::new(rank, tk.clone(), members, meta, events)
            }
        };
        Ok(BoardCopy {
            board,
            members: image.members,
            next_stamp: image.meta.next_stamp,
            cap: image.meta.cap,
            events: image.events,
        })
    }
}

fn image_of(c: &BoardCopy) -> BoardImage {
    let meta = BoardMeta { size: 0, next_stamp: c.next_stamp, next_events: 0, cap: c.cap };
    BoardImage::new(
        c.board.rank,
        c.board.type_key.clone(),
        c.members.clone(),
        meta,
        c.events.clone(),
    )
}
