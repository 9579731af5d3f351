//! Where moved entities live, as the cluster told this client
//! (`Request::EntityRoutes`, asked with every routing table): an entity's
//! counts and likers live on its hash shard unless it was moved
//! (`cluster/src/entity_mover.rs`). Splitting a counts read and routing a
//! likers page by it sends a moved entity's part straight to the leader of
//! the shard that holds it, where the node reached by hash would forward
//! it (measured: a moved hot entity cost the hot-key load 10-15% that way,
//! docs/benchmarks.md).
//!
//! A placement this client has not learned yet costs only that forward;
//! so does one it learned that has changed since. Pure.

use crate::route::Target;
use plaudit_proto::placement::EntityKey;
use plaudit_proto::routing::shard_of;
use plaudit_proto::{BizId, EntityId, Request, ShardId};
use std::collections::HashMap;

#[derive(Debug, Clone, Default)]
pub(crate) struct EntityRoutes {
    placed: HashMap<(BizId, EntityId), ShardId>,
    /// The cluster's version of the list (`proto/src/entity_routes.rs`),
    /// when the node that gave it said one.
    version: Option<u64>,
}

impl EntityRoutes {
    /// Replaces what was known with the cluster's list, of `version`.
    pub(crate) fn accept(&mut self, placed: Vec<(EntityKey, ShardId)>, version: Option<u64>) {
        self.placed = placed.into_iter().map(|(k, s)| ((k.biz, k.entity), s)).collect();
        self.version = version;
    }

    /// The version of the list held, to ask whether it changed.
    pub(crate) fn version(&self) -> Option<u64> {
        self.version
    }

    /// The shard `entity` lives on.
    pub(crate) fn shard(&self, biz: BizId, entity: EntityId, shards: u32) -> ShardId {
        if self.placed.is_empty() {
            return shard_of(biz, entity, shards);
        }
        self.placed.get(&(biz, entity)).copied().unwrap_or_else(|| shard_of(biz, entity, shards))
    }

    /// `routed` (what `route::target` gave `req`), sent where the entity
    /// it reads (a likers page's, or a counts read's first) lives instead.
    pub(crate) fn target(&self, req: &Request, routed: Target, shards: u32) -> Target {
        if self.placed.is_empty() || shards == 0 {
            return routed;
        }
        let shard = match req {
            Request::Likers(r) => self.shard(r.biz, r.entity, shards),
            Request::Counts(r) => match r.entities.first() {
                Some(&first) => self.shard(r.biz, first, shards),
                None => return routed,
            },
            Request::Stale(inner) | Request::Replica(inner) => {
                return self.target(inner, routed, shards)
            }
            _ => return routed,
        };
        match routed {
            Target::Leader(_) => Target::Leader(shard),
            Target::Replica(_) => Target::Replica(shard),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaudit_proto::likes::{CountsRequest, LikersRequest};

    const SHARDS: u32 = 6;

    fn routes(biz: BizId, entity: EntityId, to: ShardId) -> EntityRoutes {
        let mut r = EntityRoutes::default();
        r.accept(vec![(EntityKey { biz, entity }, to)], Some(1));
        r
    }

    fn likers(entity: EntityId) -> Request {
        Request::Likers(LikersRequest { biz: 1, entity, cursor: None, limit: 10 })
    }

    #[test]
    fn a_moved_entity_is_read_where_it_lives_and_others_by_hash() {
        let home = shard_of(1, 5, SHARDS);
        let to = (home + 1) % SHARDS;
        let r = routes(1, 5, to);
        assert_eq!(r.shard(1, 5, SHARDS), to);
        assert_eq!(r.shard(1, 6, SHARDS), shard_of(1, 6, SHARDS));
        assert_eq!(r.shard(2, 5, SHARDS), shard_of(2, 5, SHARDS), "another business's");
        let routed = Target::Leader(home);
        assert_eq!(r.target(&likers(5), routed, SHARDS), Target::Leader(to));
        let counts = Request::Counts(CountsRequest { biz: 1, entities: vec![5, 6] });
        assert_eq!(r.target(&counts, routed, SHARDS), Target::Leader(to), "by its first");
        let replica = Request::Replica(Box::new(likers(5)));
        assert_eq!(r.target(&replica, Target::Replica(home), SHARDS), Target::Replica(to));
        let other = likers(6);
        let routed = Target::Leader(shard_of(1, 6, SHARDS));
        assert_eq!(r.target(&other, routed, SHARDS), routed);
        assert_eq!(r.target(&Request::Ping, Target::Any, SHARDS), Target::Any);
    }

    #[test]
    fn a_new_list_replaces_the_old() {
        let mut r = routes(1, 5, 3);
        r.accept(vec![], Some(2));
        assert_eq!(r.version(), Some(2));
        assert_eq!(r.shard(1, 5, SHARDS), shard_of(1, 5, SHARDS));
        assert_eq!(r.target(&likers(5), Target::Leader(0), SHARDS), Target::Leader(0));
    }
}
