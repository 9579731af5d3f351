//! Moving an entity's counts and likers to another shard: the request that
//! records a move, and the entity's side of the mover (`actor_mover.rs`
//! drives the steps; the copy is the frozen entity's counts, owner and
//! every liker).
//!
//! Likes are never refused: they are decided on the likers' shards. What a
//! move holds back is the deltas those likes send the entity, from the
//! freeze until the source lets go, or, for an entity moved from elsewhere
//! than its home, from the home's Hold to its Pass
//! (`actors/src/likes/residence.rs`), so counts lag by the move's time at
//! most. Reads are served throughout.

use crate::actor_mover::Movable;
use crate::engine::Engine;
use crate::peer::wire::{PeerRequest, PeerResponse};
use crate::router::Hop;
use plaudit_actors::likes::residence::{EntityCopy, EntityStep};
use plaudit_actors::{Command, Directory, ShardError};
use plaudit_proto::entity_routes::{self, RoutesPage, RoutesReply, MAX_ROUTES_PAGE};
use plaudit_proto::placement::{EntityKey, EntityMove, EntityPlacements, MoveEntity};
use plaudit_proto::{BizId, Request, Response, ShardId, WireError};
use std::sync::Arc;

/// At most this many routes in one `EntityRoutes` answer (~16 bytes each,
/// well inside a client's 1 MiB frame), the first page of what
/// `EntityRoutesPage` pages through. An older SDK not told of a moved
/// entity is still answered: the node its read reaches forwards it.
pub const MAX_ENTITY_ROUTES: usize = MAX_ROUTES_PAGE as usize;

impl Engine {
    /// `EntityRoutes`: the moved entities and their shards, of business
    /// `only` when given (what a business's token is told: another
    /// tenant's ids are not its to know), at most `MAX_ENTITY_ROUTES`.
    pub fn entity_routes(&self, only: Option<BizId>) -> Vec<(EntityKey, ShardId)> {
        let placements = self.directory.entity_placements();
        let mine = entity_routes::visible(&placements.placed, only);
        mine.iter().take(MAX_ENTITY_ROUTES).copied().collect()
    }

    /// `EntityRoutesPage`: one page of `entity_routes`, or word that the
    /// asker's version is current.
    pub fn entity_routes_page(
        &self,
        only: Option<BizId>,
        req: &RoutesPage,
    ) -> Result<RoutesReply, WireError> {
        req.validate()?;
        Ok(entity_routes::page(&self.directory.entity_placements().placed, only, req))
    }
}

impl Movable for EntityKey {
    type Copy = EntityCopy;
    const KIND: &'static str = "entity";

    fn placements(d: &Directory) -> Arc<EntityPlacements> {
        d.entity_placements()
    }

    fn record(p: EntityPlacements) -> Command {
        Command::SetEntityPlacements(Box::new(p))
    }

    fn step(s: EntityStep) -> Command {
        Command::MoveEntity(s)
    }

    async fn export(e: &Engine, m: &EntityMove) -> Result<EntityCopy, WireError> {
        e.export_entity(m).await
    }
}

impl Engine {
    /// `plaudit admin move --entity`: records the move on the metadata leader.
    pub(crate) async fn move_entity(
        &self,
        m: MoveEntity,
        redirect: bool,
    ) -> Result<Response, WireError> {
        self.require_business(m.biz).await?;
        let key = EntityKey { biz: m.biz, entity: m.entity };
        let key = &key;
        let m = &m;
        self.router
            .on_leader(
                self.router.meta_id,
                redirect,
                |_| async move {
                    self.record_move(key, m.to_shard).await?;
                    Ok(Response::Done)
                },
                |n| async move { self.router.forward(n, Request::MoveEntity(m.clone())).await },
            )
            .await
    }

    /// The frozen entity's copy, from the source shard's leader.
    async fn export_entity(&self, m: &EntityMove) -> Result<EntityCopy, WireError> {
        let (shard, key) = (m.from, m.key);
        self.router
            .on_leader(
                shard,
                false,
                |g| async move { self.export_entity_here(&g, shard, key).await },
                |n| async move {
                    let req = PeerRequest::ExportEntity { group: shard, key };
                    self.router
                        .call(n, req, |r| match r {
                            PeerResponse::ExportEntity(Ok(c)) => Ok(*c),
                            PeerResponse::ExportEntity(Err(e)) => Err(Hop::Answer(e)),
                            other => Err(Hop::unexpected(other)),
                        })
                        .await
                },
            )
            .await
    }

    /// The frozen entity's copy on this node, which leads its shard: after
    /// the read barrier, so the freeze (acknowledged before) has applied.
    pub(crate) async fn export_entity_here(
        &self,
        g: &crate::group::Group,
        shard: u32,
        key: EntityKey,
    ) -> Result<EntityCopy, WireError> {
        g.read_barrier(shard).await?;
        let copy =
            g.shard_handle(shard)?.export_entity(key).await.map_err(ShardError::into_wire)?;
        self.check_copy_size(&copy)?;
        Ok(copy)
    }
}
