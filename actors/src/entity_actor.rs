//! The virtual actor of one entity in one business: hosts `EntityLikes`
//! (counts, owner, recent likers), loaded from storage on activation.

use crate::command::EntityDelta;
use crate::error::ShardError;
use crate::likes::entity::{DeltaEffects, EntityLikes};
use crate::likes::recent::Recent;
use plaudit_proto::likes::{ListItem, PageCursor};
use plaudit_proto::{BizId, EntityId};
use plaudit_storage::{CountsRec, StateStore};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

pub enum EntityMsg {
    /// Deltas in log order; replies with the counts after all of them and
    /// each delta's effects.
    Apply(Vec<EntityDelta>, RpcReplyPort<(CountsRec, Vec<DeltaEffects>)>),
    Page(Option<PageCursor>, usize, RpcReplyPort<Result<Vec<ListItem>, ShardError>>),
    Passivate,
}

// A local message: never sent to another node (ractor's `cluster` feature
// asks every message type to say so).
impl ractor::Message for EntityMsg {}

pub struct EntityArgs {
    pub biz: BizId,
    pub entity: EntityId,
    pub shard: u32,
    pub list_memory: usize,
}

pub struct EntityActor {
    pub store: StateStore,
}

pub struct EntityState {
    args: EntityArgs,
    core: EntityLikes,
}

impl Actor for EntityActor {
    type Msg = EntityMsg;
    type State = EntityState;
    type Arguments = EntityArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<EntityMsg>,
        args: EntityArgs,
    ) -> Result<EntityState, ActorProcessingErr> {
        let counts = self.store.get_counts(args.biz, args.shard, args.entity)?;
        let loaded =
            self.store.likers(args.biz, args.shard, args.entity, None, args.list_memory + 1)?;
        let core = EntityLikes::new(counts, Recent::from_loaded(loaded, args.list_memory));
        Ok(EntityState { args, core })
    }

    async fn handle(
        &self,
        myself: ActorRef<EntityMsg>,
        msg: EntityMsg,
        state: &mut EntityState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            EntityMsg::Apply(deltas, reply) => {
                let fx = deltas.iter().map(|d| state.core.apply(d)).collect();
                let _ = reply.send((state.core.counts(), fx));
            }
            EntityMsg::Page(after, limit, reply) => {
                let page = match state.core.recent().page(after, limit) {
                    Some(p) => Ok(p),
                    None => self
                        .store
                        .likers(state.args.biz, state.args.shard, state.args.entity, after, limit)
                        .map_err(ShardError::from),
                };
                let _ = reply.send(page);
            }
            EntityMsg::Passivate => myself.stop(None),
        }
        Ok(())
    }
}

/// An entity's deltas applied without its actor (it is not active): the
/// same counts and effects from the stored counts, with no actor to start
/// and no likers to load (the actor's recent likers are only a cache for
/// pages).
pub fn apply_without_actor(
    store: &StateStore,
    (biz, shard, entity): (BizId, u32, EntityId),
    deltas: &[EntityDelta],
) -> Result<(CountsRec, Vec<DeltaEffects>), plaudit_storage::StateError> {
    let counts = store.get_counts(biz, shard, entity)?;
    let mut core = EntityLikes::new(counts, Recent::from_loaded(Vec::new(), 0));
    let fx = deltas.iter().map(|d| core.apply(d)).collect();
    Ok((core.counts(), fx))
}
