//! The virtual actor of one user in one business: hosts `UserLikes`, loads it
//! from storage on activation, answers list pages from its recent window.
//! It never writes: the shard persists what it returns, batch by batch.

use crate::error::{Fatal, ShardError};
use crate::likes::recent::Recent;
use crate::likes::user::{Applied, UserLikes};
use plaudit_proto::likes::{ListItem, PageCursor};
use plaudit_proto::{BizId, EntityId, LikeAction, Millis, UserId};
use plaudit_storage::StateStore;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

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
        let mut out = Vec::with_capacity(ops.len());
        for op in ops {
            match op {
                UserOp::Like { entity, owner, action, now } => {
                    let prev = match state.core.cached(entity) {
                        Some(s) => s,
                        None => self
                            .store
                            .get_state(a.biz, a.shard, a.user, entity)?
                            .unwrap_or_default(),
                    };
                    out.push(UserOut::Like(state.core.apply(entity, owner, action, now, prev)));
                }
                UserOp::Received(d) => out.push(UserOut::Received(state.core.add_received(d))),
            }
        }
        Ok(out)
    }
}
