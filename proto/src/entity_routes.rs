//! Where moved entities live, page by page, and whether that changed since
//! a client last asked (`Request::EntityRoutesPage`): what an SDK asks
//! with every routing table (every few seconds), so that it sends a moved
//! entity's reads to the shard that holds it.
//!
//! ```text
//! SDK ─ EntityRoutesPage{known: its version, after: None} ─► node
//!     ◄─ unchanged                        (the set is the one it holds: nothing sent)
//!     ◄─ version V, routes r1..rN, next k  (then asks again after k, until next is None)
//! ```
//!
//! The version is a digest of the routes the asker may see (a business's
//! token: its own entities only), the same on every node, so an SDK that
//! holds the current set is told so in a few bytes however many entities
//! moved; the placements' epoch would serve as well but would tell one
//! tenant how often others' entities move. Pages bound a reply whatever
//! the number of moved entities. A route is a hint (a read sent to the
//! wrong shard is forwarded or answered `Moved`), so pages taken while the
//! set changes need no snapshot: the next refresh sees the new version.

use crate::ids::{BizId, ShardId};
use crate::placement::EntityKey;
use crate::routing::mix;
use crate::WireError;
use serde::{Deserialize, Serialize};

/// Routes in one page at most (~16 bytes each, well inside a 1 MiB frame).
pub const MAX_ROUTES_PAGE: u32 = 32_768;

/// `Request::EntityRoutesPage`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoutesPage {
    /// The version of the routes the asker holds, if any: the same version
    /// is answered `unchanged`, with no routes.
    pub known: Option<u64>,
    /// The page after this entity (`None`: the first page).
    pub after: Option<EntityKey>,
    pub limit: u32,
}

impl RoutesPage {
    pub fn validate(&self) -> Result<(), WireError> {
        if self.limit == 0 || self.limit > MAX_ROUTES_PAGE {
            return Err(WireError::bad_request(format!("limit must be in 1..={MAX_ROUTES_PAGE}")));
        }
        Ok(())
    }
}

/// The reply to `Request::EntityRoutesPage`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoutesReply {
    /// The version of every route the asker may see (not only this page's).
    pub version: u64,
    /// The asker holds this version already: no routes follow.
    pub unchanged: bool,
    /// Moved entities and their shards, in key order.
    pub routes: Vec<(EntityKey, ShardId)>,
    /// Where the next page starts (`after`), if there are more.
    pub next: Option<EntityKey>,
}

/// The routes of `placed` (every moved entity, sorted by key) that a
/// business's token (`only`), or the admin (`None`), may see.
pub fn visible(placed: &[(EntityKey, ShardId)], only: Option<BizId>) -> &[(EntityKey, ShardId)] {
    let Some(biz) = only else { return placed };
    let start = placed.partition_point(|(k, _)| k.biz < biz);
    let end = placed.partition_point(|(k, _)| k.biz <= biz);
    &placed[start..end]
}

/// A digest of `routes` that every node computes alike: each route's words
/// folded through the routing hash's fixed mix (`routing::mix`), then
/// their count.
pub fn version(routes: &[(EntityKey, ShardId)]) -> u64 {
    let words = routes
        .iter()
        .flat_map(|(k, shard)| [(u64::from(k.biz) << 32) | u64::from(*shard), k.entity]);
    let h = words.fold(0u64, |h, w| mix(h ^ w));
    mix(h ^ routes.len() as u64)
}

/// The answer to `req` from `placed` (sorted by key), as `only` may see it.
/// Pure.
pub fn page(placed: &[(EntityKey, ShardId)], only: Option<BizId>, req: &RoutesPage) -> RoutesReply {
    let mine = visible(placed, only);
    let version = version(mine);
    if req.known == Some(version) {
        return RoutesReply { version, unchanged: true, routes: Vec::new(), next: None };
    }
    let from = match &req.after {
        Some(after) => mine.partition_point(|(k, _)| k <= after),
        None => 0,
    };
    let rest = &mine[from..];
    let n = rest.len().min(req.limit as usize);
    let routes = rest[..n].to_vec();
    let next = (n < rest.len()).then(|| routes.last().map(|(k, _)| *k)).flatten();
    RoutesReply { version, unchanged: false, routes, next }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn placed(keys: &[(BizId, u64)]) -> Vec<(EntityKey, ShardId)> {
        let mut v: Vec<(EntityKey, ShardId)> = keys
            .iter()
            .map(|&(biz, entity)| (EntityKey { biz, entity }, (entity % 6) as ShardId))
            .collect();
        v.sort();
        v.dedup_by(|a, b| a.0 == b.0);
        v
    }

    /// Every page from the first until `next` is `None`, as an SDK reads them.
    fn read_all(p: &[(EntityKey, ShardId)], only: Option<BizId>, limit: u32) -> RoutesReply {
        let mut req = RoutesPage { known: None, after: None, limit };
        let mut all = Vec::new();
        loop {
            let reply = page(p, only, &req);
            assert!(reply.routes.len() <= limit as usize);
            all.extend(reply.routes);
            match reply.next {
                Some(k) => req.after = Some(k),
                None => {
                    return RoutesReply { routes: all, next: None, ..reply };
                }
            }
        }
    }

    #[test]
    fn a_business_sees_its_own_routes_only() {
        let p = placed(&[(1, 5), (2, 7), (2, 9), (3, 1)]);
        let two = read_all(&p, Some(2), 10);
        let keys: Vec<(BizId, u64)> = two.routes.iter().map(|(k, _)| (k.biz, k.entity)).collect();
        assert_eq!(keys, vec![(2, 7), (2, 9)]);
        assert_eq!(read_all(&p, None, 10).routes, p, "the admin sees all");
        assert!(read_all(&p, Some(4), 10).routes.is_empty());
        // Another tenant's moves do not change a business's version.
        let more = placed(&[(1, 5), (1, 6), (2, 7), (2, 9), (3, 1)]);
        assert!(page(&more, Some(2), &two_known(&two)).unchanged);
        assert_ne!(version(visible(&more, None)), version(visible(&p, None)));
    }

    fn two_known(r: &RoutesReply) -> RoutesPage {
        RoutesPage { known: Some(r.version), after: None, limit: 10 }
    }

    #[test]
    fn the_version_held_is_answered_unchanged_and_a_change_is_not() {
        let p = placed(&[(1, 5), (1, 8)]);
        let first = page(&p, None, &RoutesPage { known: None, after: None, limit: 10 });
        assert!(!first.unchanged && first.routes.len() == 2);
        let again =
            page(&p, None, &RoutesPage { known: Some(first.version), after: None, limit: 10 });
        assert!(again.unchanged && again.routes.is_empty() && again.next.is_none());
        // The same entity on another shard is another set.
        let mut moved = p.clone();
        moved[0].1 += 1;
        let after =
            page(&moved, None, &RoutesPage { known: Some(first.version), after: None, limit: 10 });
        assert!(!after.unchanged && after.routes == moved, "{after:?}");
        assert_ne!(version(&[]), version(&moved));
    }

    #[test]
    fn limits_outside_one_to_the_page_maximum_are_refused() {
        for limit in [0, MAX_ROUTES_PAGE + 1] {
            assert!(RoutesPage { known: None, after: None, limit }.validate().is_err());
        }
        assert!(RoutesPage { known: None, after: None, limit: MAX_ROUTES_PAGE }.validate().is_ok());
    }

    proptest! {
        /// Read page by page at any limit, a business gets exactly its
        /// routes, in order, each once.
        #[test]
        fn pages_together_are_every_visible_route_once(
            keys in prop::collection::vec((1u32..4, 0u64..40), 0..60),
            only in prop::option::of(1u32..4),
            limit in 1u32..8,
        ) {
            let p = placed(&keys);
            let all = read_all(&p, only, limit);
            prop_assert_eq!(&all.routes, &visible(&p, only).to_vec());
            prop_assert_eq!(all.version, version(visible(&p, only)));
        }
    }
}
