//! The virtual actor of one user in one business: hosts `UserLikes`, loads it
//! from storage on activation, answers list pages from its recent window.
//! It never writes: the shard persists what it returns, batch by batch.

use crate::error::{Fatal, ShardError};
use crate::likes::recent::Recent;
use crate::likes::user::{Applied, UserLikes};
use plaudit_proto::likes::{ListItem, PageCursor};
use plaudit_proto::{BizId, EntityId, LikeAction, LikeState, Millis, UserId};
use plaudit_storage::StateStore;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use std::collections::HashMap;

pub enum UserOp {
    Like { entity: EntityId, owner: Option<UserId>, action: LikeAction, now: Millis },
    Received(i64),
}

pub enum UserOut {
    Like(Applied),
    /// The new received total.
    Received(u64),
}

pub enum UserMsg {
    Apply(Vec<UserOp>, RpcReplyPort<Result<Vec<UserOut>, Fatal>>),
    Page(Option<PageCursor>, usize, RpcReplyPort<Result<Vec<ListItem>, ShardError>>),
    /// Stop after the messages already queued.
    Passivate,
}

// A local message: never sent to another node (ractor's `cluster` feature
// asks every message type to say so).
impl ractor::Message for UserMsg {}

pub struct UserArgs {
    pub biz: BizId,
    pub user: UserId,
    pub shard: u32,
    pub list_memory: usize,
}

/// Dependencies only; the mutable state is `UserState`.
pub struct UserActor {
    pub store: StateStore,
}

pub struct UserState {
    args: UserArgs,
    core: UserLikes,
}

impl Actor for UserActor {
    type Msg = UserMsg;
    type State = UserState;
    type Arguments = UserArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<UserMsg>,
        args: UserArgs,
    ) -> Result<UserState, ActorProcessingErr> {
        let loaded =
            self.store.user_list(args.biz, args.shard, args.user, None, args.list_memory + 1)?;
        let received = self.store.get_received(args.biz, args.shard, args.user)?;
        let core = UserLikes::new(
            args.biz,
            args.user,
            Recent::from_loaded(loaded, args.list_memory),
            received,
        );
        Ok(UserState { args, core })
    }

    async fn handle(
        &self,
        myself: ActorRef<UserMsg>,
        msg: UserMsg,
        state: &mut UserState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            UserMsg::Apply(ops, reply) => {
                let _ = reply.send(self.apply(state, ops).map_err(Fatal::from));
            }
            UserMsg::Page(after, limit, reply) => {
                let page = match state.core.recent().page(after, limit) {
                    Some(p) => Ok(p),
                    None => self
                        .store
                        .user_list(state.args.biz, state.args.shard, state.args.user, after, limit)
                        .map_err(ShardError::from),
                };
                let _ = reply.send(page);
            }
            UserMsg::Passivate => myself.stop(None),
        }
        Ok(())
    }
}

impl UserActor {
    fn apply(
        &self,
        state: &mut UserState,
        ops: Vec<UserOp>,
    ) -> Result<Vec<UserOut>, plaudit_storage::StateError> {
        let a = &state.args;
        apply_ops(&self.store, (a.biz, a.shard, a.user), &mut state.core, ops)
    }
}

/// Applies a user's ops in order to `core`, reading a state it has not
/// cached from the store (staged writes included).
fn apply_ops(
    store: &StateStore,
    (biz, shard, user): (BizId, u32, UserId),
    core: &mut UserLikes,
    ops: Vec<UserOp>,
) -> Result<Vec<UserOut>, plaudit_storage::StateError> {
    let mut out = Vec::with_capacity(ops.len());
    // States this call decided: not staged until the whole apply call
    // ends, so they must not be read from the store, and `core`'s cache
    // may drop them (it is bounded): this map is not.
    let mut decided: HashMap<EntityId, (LikeState, Millis)> = HashMap::new();
    let several = ops.len() > 1;
    for op in ops {
        match op {
            UserOp::Like { entity, owner, action, now } => {
                let prev = match decided.get(&entity).copied().or_else(|| core.cached(entity)) {
                    Some(s) => s,
                    None => store.get_state(biz, shard, user, entity)?.unwrap_or_default(),
                };
                let applied = core.apply(entity, owner, action, now, prev);
                if several {
                    decided.insert(entity, (applied.reply.now, applied.reply.mtime));
                }
                out.push(UserOut::Like(applied));
            }
            UserOp::Received(d) => out.push(UserOut::Received(core.add_received(d))),
        }
    }
    Ok(out)
}

/// A user's ops applied without its actor (it is not active): the same
/// decisions from the stored state, with no actor to start, no list to
/// load and none to evict. The actor's recent window is only a cache for
/// pages; whoever activates it later loads the list these ops changed.
pub fn apply_without_actor(
    store: &StateStore,
    (biz, shard, user): (BizId, u32, UserId),
    ops: Vec<UserOp>,
) -> Result<Vec<UserOut>, plaudit_storage::StateError> {
    let received = match ops.iter().any(|o| matches!(o, UserOp::Received(_))) {
        true => store.get_received(biz, shard, user)?,
        // Not read unless an op adds to it.
        false => 0,
    };
    let mut core = UserLikes::new(biz, user, Recent::from_loaded(Vec::new(), 0), received);
    apply_ops(store, (biz, shard, user), &mut core, ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn like(entity: EntityId, action: LikeAction) -> UserOp {
        UserOp::Like { entity, owner: None, action, now: 1_000 + entity }
    }

    /// One call with more distinct entities than the core's state cache
    /// holds, then the first entity again: it must see the state this call
    /// gave it (nothing is staged until the call ends), or a like would be
    /// counted twice.
    #[test]
    fn a_long_call_sees_its_own_earlier_decisions() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        let store = StateStore::open(&db).unwrap();
        let mut ops: Vec<UserOp> = (0..5_000).map(|e| like(e, LikeAction::Like)).collect();
        ops.push(like(0, LikeAction::Like));
        ops.push(like(1, LikeAction::Unlike));
        let out = apply_without_actor(&store, (1, 0, 42), ops).unwrap();
        let replies: Vec<_> = out
            .iter()
            .map(|o| match o {
                UserOut::Like(a) => (a.reply.prev, a.reply.now, a.reply.changed),
                UserOut::Received(_) => panic!("no received op was sent"),
            })
            .collect();
        assert_eq!(replies[0], (LikeState::None, LikeState::Like, true));
        assert_eq!(replies[5_000], (LikeState::Like, LikeState::Like, false), "a repeat");
        assert_eq!(replies[5_001], (LikeState::Like, LikeState::None, true));
    }
}
