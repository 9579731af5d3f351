//! Moving a sub-board to another shard: the request that records a move,
//! and the board's side of the mover (`actor_mover.rs` drives the steps;
//! the copy is the frozen board's members, tie stamps, cap and remembered
//! event ids). `hot_relief.rs` moves hot boards on its own.
//!
//! Events for the board are refused from the freeze to the activation,
//! and the edge retries them (`rankings.rs`): that is the pause writers
//! see. Reads are served throughout.

use crate::actor_mover::Movable;
use crate::engine::Engine;
use crate::peer::wire::{PeerRequest, PeerResponse};
use crate::router::Hop;
use plaudit_actors::rankings::residence::{BoardCopy, BoardStep};
use plaudit_actors::{Command, Directory, ShardError};
use plaudit_proto::placement::{BoardKey, BoardMove, MoveBoard, Placements};
use plaudit_proto::window::TypeId;
use plaudit_proto::{Request, Response, WireError};
use std::sync::Arc;

impl Movable for BoardKey {
    type Copy = BoardCopy;
    const KIND: &'static str = "board";

    fn placements(d: &Directory) -> Arc<Placements> {
        d.placements()
    }

    fn record(p: Placements) -> Command {
        Command::SetPlacementsV2(Box::new(p))
    }

    fn step(s: BoardStep) -> Command {
        Command::MoveBoardV2(s)
    }

    async fn export(e: &Engine, m: &BoardMove) -> Result<BoardCopy, WireError> {
        e.export_board(m).await
    }
}

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
        let meta = self.router.meta_id;
        let m = &m;
        let board = &board;
        self.router
            .on_leader(
                meta,
                redirect,
                |_| async move {
                    self.record_move(board, m.to_shard).await?;
                    Ok(Response::Done)
                },
                |n| async move { self.router.forward(n, Request::MoveBoard(m.clone())).await },
            )
            .await
    }

    /// The frozen board's copy, from the source shard's leader.
    pub(crate) async fn export_board(&self, m: &BoardMove) -> Result<BoardCopy, WireError> {
        let (shard, board) = (m.from, &m.key);
        self.router
            .on_leader(
                shard,
                false,
                |g| async move { self.export_board_here(&g, shard, board.clone()).await },
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
        shard: u32,
        board: BoardKey,
    ) -> Result<BoardCopy, WireError> {
        g.read_barrier(shard).await?;
        let copy =
            g.shard_handle(shard)?.export_board(board).await.map_err(ShardError::into_wire)?;
        self.check_copy_size(&copy)?;
        Ok(copy)
    }
}
