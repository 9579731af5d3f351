//! An entity's residence: the generic move steps (`crate::residence`) with
//! an entity's counts and likers as the copy, and what residence means for
//! the deltas its likers' shards deliver.
//!
//! Every user shard sends an entity's deltas to the entity's hash shard
//! (`routing::shard_of`): a user shard's apply reads only its own state, so
//! it cannot know where an entity moved. The hash shard passes them on:
//!
//! ```text
//! delta for E arrives at a shard ─> E owned here (home, Here, Drained, Incoming) ─> applied
//!                                   E Frozen{to} (moving away)           ─> held, in order
//!                                   E Held{..}, IncomingHeld (its home, during a move
//!                                     from elsewhere)                   ─> held, in order
//!                                   E Away{to}  (moved)                  ─> outbox to `to`
//! Release{to}: the held deltas go to the outbox for `to`, in order, before any later one
//! Pass{to} (at its home): likewise, or applied here when `to` is here
//! Unfreeze (the move given up): the held deltas are applied here, in order
//! ```
//!
//! Why the order holds: a user's like and unlike of one entity must reach
//! it in the order the user's shard made them (a liker removed before it
//! was added would stay). Everything before the freeze is in the copy;
//! everything after is held, then sent over the single source -> target
//! stream, which delivers in seq order, and the target applies it only
//! once it holds the copy (it gets nothing before the Release, which comes
//! after the copy was imported). An entity that lives elsewhere than its
//! home moves on (or back home) through its home: the home holds its
//! deltas and sends the shard it lives on a barrier behind those sent
//! before, which that shard must have applied before it freezes; the home
//! passes what it held to the target after the release
//! (`crate::residence`). One path carries its deltas at every moment.
//!
//! Writers never wait: a like is acknowledged by the user's shard whatever
//! its entity is doing; the counts lag by the move's time at most.

use crate::residence::{Copied, Elsewhere, MoveCmdOf, Residence, Residences, StepOf};
use plaudit_proto::placement::EntityKey;
use plaudit_proto::{BizId, EntityId, Millis, ShardId, UserId};
use serde::{Deserialize, Serialize};

/// One step of an entity's move.
pub type EntityMoveCmd = MoveCmdOf<EntityKey, EntityCopy>;
/// One step of an entity's move, with the move's id.
pub type EntityStep = StepOf<EntityKey, EntityCopy>;
/// The entity residence entries of one shard.
pub type EntityResidences = Residences<EntityKey>;

/// A frozen entity's whole derived state, as the target imports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntityCopy {
    pub key: EntityKey,
    pub likes: u64,
    pub dislikes: u64,
    pub owner: Option<UserId>,
    /// Its likers, `(since, user)`.
    pub likers: Vec<(Millis, UserId)>,
}

impl Copied<EntityKey> for EntityCopy {
    fn key(&self) -> &EntityKey {
        &self.key
    }
}

/// What a shard does with a delivered delta for an entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeltaRoute {
    Apply,
    /// Kept until the move ends (`Release` sends it on, `Unfreeze` applies it).
    Hold,
    /// Sent on to the shard the entity moved to.
    Forward(ShardId),
}

impl Residences<EntityKey> {
    /// What to do with a delta for `(biz, entity)` arriving here.
    pub fn route_delta(&self, biz: BizId, entity: EntityId) -> DeltaRoute {
        let key = EntityKey { biz, entity };
        let entry = if self.map.is_empty() { None } else { self.get(&key) };
        match entry {
            Some(Residence::Here | Residence::Drained | Residence::Incoming) => DeltaRoute::Apply,
            Some(Residence::Frozen { .. } | Residence::Held { .. } | Residence::IncomingHeld) => {
                DeltaRoute::Hold
            }
            Some(Residence::Away { to }) => DeltaRoute::Forward(to),
            // A delta for an entity that never lived here goes to its home
            // (only a delta from a build that routed differently could).
            None => match self.at_home(&key) {
                Ok(()) => DeltaRoute::Apply,
                Err(home) => DeltaRoute::Forward(home),
            },
        }
    }

    /// Whether this shard serves reads of the entity, or the shard to ask.
    pub fn entity_readable(&self, biz: BizId, entity: EntityId) -> Result<(), Elsewhere> {
        let key = EntityKey { biz, entity };
        let entry = if self.map.is_empty() { None } else { self.get(&key) };
        match entry {
            Some(r) => r.serves_reads(),
            None => self.at_home(&key),
        }
    }
}

#[cfg(test)]
mod tests;
