//! The node's view of the entities its shard replicas hold other than by
//! hash: an entity's counts are read straight from the store
//! (`cluster/src/inline.rs`, `dispatch.rs`), not through its shard actor,
//! so a reader routed by a placement this node has not applied yet must
//! still learn that the shard it reads does not hold the entity, rather
//! than read zeros. Each shard actor publishes its entity residence entries
//! here whenever they change (`shard/entity_moves.rs`). One load answers
//! while nothing moved.

use plaudit_proto::routing::shard_of;
use plaudit_proto::{BizId, EntityId, ShardId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;

/// `(shard, business, entity)` -> `None`: held there (moving, or moved
/// there); `Some(to)`: given away to `to`.
type Entries = HashMap<(ShardId, BizId, EntityId), Option<ShardId>>;

#[derive(Default)]
pub struct MovedEntities {
    any: AtomicBool,
    entries: RwLock<Entries>,
}

impl MovedEntities {
    /// Replaces `shard`'s entries: `(business, entity, Some(to) if given away)`.
    pub fn set_shard(
        &self,
        shard: ShardId,
        entries: impl IntoIterator<Item = (BizId, EntityId, Option<ShardId>)>,
    ) {
        let mut map = self.entries.write().unwrap_or_else(|e| e.into_inner());
        map.retain(|(s, _, _), _| *s != shard);
        map.extend(entries.into_iter().map(|(b, e, to)| ((shard, b, e), to)));
        self.any.store(!map.is_empty(), Ordering::Release);
    }

    /// Whether `shard`'s replica here holds the entity's counts, or the
    /// shard to ask.
    pub fn readable(
        &self,
        shard: ShardId,
        biz: BizId,
        entity: EntityId,
        shards: u32,
    ) -> Result<(), ShardId> {
        if !self.any.load(Ordering::Acquire) {
            return Ok(());
        }
        let entry = self
            .entries
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(shard, biz, entity))
            .copied();
        match entry {
            Some(None) => Ok(()),
            Some(Some(to)) => Err(to),
            None => match shard_of(biz, entity, shards) {
                home if home == shard => Ok(()),
                home => Err(home),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_replaces_only_its_own_entries() {
        let m = MovedEntities::default();
        let home = shard_of(2, 3, 6);
        let (to, other) = ((home + 1) % 6, (home + 2) % 6);
        assert_eq!(m.readable(other, 2, 3, 6), Ok(()), "nothing moved: not looked at");
        m.set_shard(home, [(2, 3, Some(to))]);
        m.set_shard(to, [(2, 3, None)]);
        assert_eq!(m.readable(home, 2, 3, 6), Err(to));
        assert_eq!(m.readable(to, 2, 3, 6), Ok(()));
        assert_eq!(m.readable(other, 2, 3, 6), Err(home), "never here: its home");
        m.set_shard(home, []);
        assert_eq!(m.readable(home, 2, 3, 6), Ok(()));
        assert_eq!(m.readable(to, 2, 3, 6), Ok(()), "another shard's entry kept");
        m.set_shard(to, []);
        assert!(!m.any.load(Ordering::Acquire));
    }
}
