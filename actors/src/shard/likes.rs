//! Applying the like family: a `Like` on the user's shard (the truth), and
//! the deltas a `Deliver` brings to an entity's shard (counts, likers) and
//! to an owner's shard (received totals).
//!
//! ```text
//! Like ──────────────> UserActor (biz, mid) if active, else the same decision here:
//!                      transition ─> state, user list, entity delta ─> outbox
//! Deliver: Entity ───> EntityActor (biz, entity) if active, else here: counts, likers, owner delta ─> outbox
//!          Received ─> UserActor (biz, owner) if active, else here: received total
//!
//! An actor is started only to serve a page (it caches the recent window);
//! writes for an inactive user or entity are decided here from the stored
//! state, which is what the actor would load.
//! ```
//!
//! The user side decides (`likes/user.rs`), this module turns the decisions
//! into stored writes and outbox deltas, `plaudit_storage`'s like layout
//! encodes them.

use super::apply::{Applied, Grouped, Slot};
use super::{ShardActor, ShardState};
use crate::command::{CmdResult, Delta, EntityDelta};
use crate::entity_actor::{self, EntityMsg};
use crate::error::Fatal;
use crate::likes::entity::{DeltaEffects, LikerChange};
use crate::likes::residence::DeltaRoute;
use crate::user_actor::{apply_without_actor, UserMsg, UserOp, UserOut};
use plaudit_proto::likes::LikeRequest;
use plaudit_proto::placement::MoveId;
use plaudit_proto::routing::shard_of;
use plaudit_proto::{BizId, EntityId, Millis, ShardId, UserId};
use plaudit_storage::CountsRec;
use std::time::Instant;
use tokio::sync::oneshot;

type UserKey = (BizId, UserId);
type EntityKey = (BizId, EntityId);

/// The like-family work of one apply call, grouped per actor.
pub(super) struct LikesPlan {
    users: Grouped<UserKey, UserOp>,
    ents: Grouped<EntityKey, EntityDelta>,
    /// Delivered deltas for entities moving away, in arrival order
    /// (`entity_moves.rs` holds them).
    pub held: Vec<EntityDelta>,
    /// Delivered deltas for entities moved away: `(entry, k, to, delta)`,
    /// for the outbox.
    pub forwarded: Vec<(usize, usize, ShardId, Delta)>,
    /// Delivered barriers of moves (`Delta::Barrier`), in arrival order
    /// (`entity_moves.rs` marks their entities drained).
    pub barriers: Vec<(plaudit_proto::placement::EntityKey, MoveId)>,
}

impl LikesPlan {
    pub fn new() -> Self {
        LikesPlan {
            users: Grouped::new(),
            ents: Grouped::new(),
            held: Vec::new(),
            forwarded: Vec::new(),
            barriers: Vec::new(),
        }
    }

    /// Plans an entity delta applied here, numbered `(entry, delivered)`.
    pub fn entity_delta(&mut self, ed: EntityDelta, entry: usize, delivered: &mut usize) {
        // The slot only orders what this delta emits.
        self.ents.push((ed.biz, ed.entity), ed, Some((entry, *delivered)));
        *delivered += 1;
    }

    pub fn like(&mut self, r: &LikeRequest, now: Millis, slot: Slot) {
        let op = UserOp::Like { entity: r.entity, owner: r.owner, action: r.action, now };
        self.users.push((r.biz, r.user), op, slot);
    }

    /// Plans the deltas of a `Deliver` whose seq is above `seen` (anything
    /// at or below it was applied before: a repeat after a leader change or
    /// a retry) and returns the highest seq now applied. Entity deltas are
    /// numbered `(entry, delivered)` in command order, which orders the
    /// owner deltas they cause in the outbox.
    /// `route` says what to do with an entity's delta (`likes/residence.rs`):
    /// apply it, hold it for a move, or send it on.
    pub fn deliver(
        &mut self,
        seen: u64,
        records: &[(u64, Vec<Delta>)],
        entry: usize,
        delivered: &mut usize,
        route: impl Fn(BizId, EntityId) -> DeltaRoute,
    ) -> u64 {
        let mut applied = seen;
        for (seq, deltas) in records {
            if *seq <= seen {
                continue;
            }
            applied = applied.max(*seq);
            for d in deltas {
                match *d {
                    Delta::Entity(ed) => match route(ed.biz, ed.entity) {
                        DeltaRoute::Apply => self.entity_delta(ed, entry, delivered),
                        DeltaRoute::Hold => self.held.push(ed),
                        DeltaRoute::Forward(to) => {
                            self.forwarded.push((entry, *delivered, to, *d));
                            *delivered += 1;
                        }
                    },
                    Delta::Received { biz, owner, d_likes } => {
                        self.users.push((biz, owner), UserOp::Received(d_likes), None)
                    }
                    Delta::Barrier { biz, entity, mv } => self
                        .barriers
                        .push((plaudit_proto::placement::EntityKey { biz, entity }, mv)),
                }
            }
        }
        applied
    }
}

type UserReply = oneshot::Receiver<Result<Vec<UserOut>, Fatal>>;
type EntityReply = oneshot::Receiver<(CountsRec, Vec<DeltaEffects>)>;

/// Like-family work handed to actors, waiting to be collected.
pub(super) struct LikesInFlight {
    users: Vec<(UserKey, Vec<Slot>, UserReply)>,
    ents: Vec<(EntityKey, Vec<Slot>, EntityReply)>,
}

impl ShardActor {
    pub(super) fn cast_likes(
        &self,
        state: &mut ShardState,
        plan: LikesPlan,
    ) -> Result<LikesInFlight, Fatal> {
        let mut users = Vec::with_capacity(plan.users.groups.len());
        for (key, ops, slots) in plan.users.groups {
            let (tx, rx) = oneshot::channel();
            match state.users.touch(&key, Instant::now()) {
                // An active user's actor holds its cached states and window.
                Some(actor) => actor
                    .cast(UserMsg::Apply(ops, tx.into()))
                    .map_err(|e| lost("user", key.1, e))?,
                // Starting an actor per like (and evicting another) was a
                // third of a like's CPU with many users (docs/benchmarks.md).
                None => {
                    let at = (key.0, self.cfg.shard, key.1);
                    let _ = tx.send(apply_without_actor(&self.store, at, ops).map_err(Fatal::from));
                }
            }
            users.push((key, slots, rx));
        }
        let mut ents = Vec::with_capacity(plan.ents.groups.len());
        for (key, deltas, slots) in plan.ents.groups {
            let (tx, rx) = oneshot::channel();
            match state.entities.touch(&key, Instant::now()) {
                Some(actor) => actor
                    .cast(EntityMsg::Apply(deltas, tx.into()))
                    .map_err(|e| lost("entity", key.1, e))?,
                None => {
                    let at = (key.0, self.cfg.shard, key.1);
                    let _ = tx.send(entity_actor::apply_without_actor(&self.store, at, &deltas)?);
                }
            }
            ents.push((key, slots, rx));
        }
        Ok(LikesInFlight { users, ents })
    }
}

fn lost(kind: &str, id: u64, e: impl std::fmt::Display) -> Fatal {
    Fatal::Actor(format!("{kind} actor {id} stopped while applying: {e}"))
}

impl LikesInFlight {
    /// Turns the actors' results into replies, stored writes and outbox
    /// deltas, users first, then entities, each in order of first appearance.
    pub async fn collect(self, out: &mut Applied, shard_count: u32) -> Result<(), Fatal> {
        let shard = out.ws.owner();
        for ((biz, user), slots, rx) in self.users {
            let outs = rx.await.map_err(|e| lost("user", user, e))??;
            for (slot, o) in slots.into_iter().zip(outs) {
                match o {
                    UserOut::Like(applied) => {
                        let Some((ei, ci)) = slot else {
                            return Err(Fatal::Invariant(format!(
                                "a like of user {user} lost its log position"
                            )));
                        };
                        out.set(slot, CmdResult::Like(applied.reply));
                        let Some(c) = applied.change else { continue };
                        out.ws.put_state(biz, shard, user, c.entity, c.state, c.mtime);
                        if let Some(m) = c.list_del {
                            out.ws.del_user_item(biz, shard, user, m, c.entity);
                        }
                        if let Some(m) = c.list_add {
                            out.ws.add_user_item(biz, shard, user, m, c.entity);
                        }
                        let target = shard_of(biz, c.entity, shard_count);
                        out.outbox.like_delta(ei, ci, target, Delta::Entity(c.delta));
                    }
                    UserOut::Received(total) => out.ws.put_received(biz, shard, user, total),
                }
            }
        }
        for ((biz, entity), slots, rx) in self.ents {
            let (counts, effects) = rx.await.map_err(|e| lost("entity", entity, e))?;
            out.ws.put_counts(biz, shard, entity, counts);
            for (slot, fx) in slots.into_iter().zip(effects) {
                for ch in fx.likers {
                    match ch {
                        LikerChange::Add(i) => out.ws.add_liker(biz, shard, entity, i.mtime, i.id),
                        LikerChange::Remove(i) => {
                            out.ws.del_liker(biz, shard, entity, i.mtime, i.id)
                        }
                    }
                }
                if let Some((owner, d_likes)) = fx.owner_delta {
                    let Some((ei, k)) = slot else {
                        return Err(Fatal::Invariant(format!(
                            "a delta of entity {entity} lost its log position"
                        )));
                    };
                    let target = shard_of(biz, owner, shard_count);
                    out.outbox.owner_delta(ei, k, target, Delta::Received { biz, owner, d_likes });
                }
            }
        }
        Ok(())
    }
}
