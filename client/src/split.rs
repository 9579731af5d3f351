//! Reads that span shards, split on the client so that each part goes
//! straight to the node that leads its shards, and put back together: one
//! part per leader node (the shards of a node whose leader is not known
//! go one part each).
//!
//! ```text
//! [Like, Counts{e1..e20}, Status]  ─ plan ─►  [Like, Counts{shard 0's}, ..., Counts{shard 5's}, Status]
//!                                                      │ sent as one pipeline (each part: Target::Leader)
//! [Like's, Counts{e1..e20 in order}, Status's]  ◄ merge ┘
//! ```
//!
//! Without this, a node took the whole read and forwarded each shard's part
//! to that shard's leader: a second hop, a second encode and decode, and a
//! task per part on a node that often led none of them. The client knows the
//! map, so it sends each part where it is served. Pure: no IO, no clock.

use crate::entity_routes::EntityRoutes;
use crate::error::ClientError;
use plaudit_proto::cluster::NodeId;
use plaudit_proto::likes::{CountsRequest, EntityCounts};
use plaudit_proto::{BizId, EntityId, Request, Response};
use std::collections::HashMap;
use std::ops::Range;

type Answer = Result<Response, ClientError>;

/// How the answers of the sent parts become the answers of the requests
/// asked, in their order.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    spans: Vec<Span>,
    /// Whether any request was split (else the answers pass through).
    split: bool,
}

#[derive(Debug)]
enum Span {
    /// Sent as it was; its answer is the part's.
    Whole,
    /// A counts read, as parts `parts`, answered in `entities`' order.
    Counts { entities: Vec<EntityId>, parts: Range<usize> },
}

/// The parts to send for `reqs` in a cluster of `shards` shards (0: no map,
/// nothing is split) whose leaders are `leaders` (by shard, as far as the
/// client knows), and the plan that merges their answers. A part's first
/// entity's shard is led by the node every shard of the part is, so
/// routing the part by it (`route::target`) sends it there; the node reads
/// all of it in place if it still leads them.
pub(crate) fn plan(
    reqs: Vec<Request>,
    shards: u32,
    leaders: &[Option<NodeId>],
    routes: &EntityRoutes,
) -> (Vec<Request>, Plan) {
    let mut parts = Vec::with_capacity(reqs.len());
    let mut plan = Plan { spans: Vec::with_capacity(reqs.len()), split: false };
    for req in reqs {
        // A request the node would refuse goes whole, to be refused whole
        // (its parts might each pass: 501 entities as parts of fewer).
        let groups = match &req {
            Request::Counts(r) if shards > 1 && r.validate().is_ok() => {
                by_leader(r.biz, &r.entities, shards, leaders, routes)
            }
            _ => Vec::new(),
        };
        match req {
            Request::Counts(r) if groups.len() > 1 => {
                let start = parts.len();
                parts.extend(
                    groups.into_iter().map(|(_, entities)| {
                        Request::Counts(CountsRequest { biz: r.biz, entities })
                    }),
                );
                plan.spans.push(Span::Counts { entities: r.entities, parts: start..parts.len() });
                plan.split = true;
            }
            req => {
                parts.push(req);
                plan.spans.push(Span::Whole);
            }
        }
    }
    (parts, plan)
}

/// Who serves a part: the node leading its shards, or one shard whose
/// leader is not known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Server {
    Node(NodeId),
    Shard(u32),
}

/// The entities of each server, in the order each first appears (an
/// entity by the shard it lives on: `entity_routes.rs`). A linear search:
/// a request spans at most the cluster's shards, a few.
fn by_leader(
    biz: BizId,
    entities: &[EntityId],
    shards: u32,
    leaders: &[Option<NodeId>],
    routes: &EntityRoutes,
) -> Vec<(Server, Vec<EntityId>)> {
    let mut groups: Vec<(Server, Vec<EntityId>)> = Vec::new();
    for &e in entities {
        let shard = routes.shard(biz, e, shards);
        let s = match leaders.get(shard as usize) {
            Some(Some(n)) => Server::Node(*n),
            _ => Server::Shard(shard),
        };
        match groups.iter_mut().find(|(g, _)| *g == s) {
            Some((_, of)) => of.push(e),
            None => groups.push((s, vec![e])),
        }
    }
    groups
}

impl Plan {
    /// The answers of the requests planned, from the answers of the parts
    /// sent (as many, in the same order).
    pub(crate) fn merge(self, answers: Vec<Answer>) -> Vec<Answer> {
        if !self.split {
            return answers;
        }
        let mut answers = answers.into_iter();
        let mut out = Vec::with_capacity(self.spans.len());
        for span in self.spans {
            out.push(match span {
                Span::Whole => answers.next().unwrap_or(Err(ClientError::Closed)),
                Span::Counts { entities, parts } => {
                    let mine: Vec<Answer> = answers.by_ref().take(parts.len()).collect();
                    merge_counts(&entities, mine)
                }
            });
        }
        out
    }
}

/// A counts read's answer from its parts': the first part that failed
/// decides the whole (the read is one call to its caller), else every
/// entity's counts in the order asked.
fn merge_counts(entities: &[EntityId], parts: Vec<Answer>) -> Answer {
    let mut found: HashMap<EntityId, EntityCounts> = HashMap::with_capacity(entities.len());
    for part in parts {
        match part? {
            Response::Counts(counts) => found.extend(counts.into_iter().map(|c| (c.entity, c))),
            other => return Ok(other),
        }
    }
    let out = entities
        .iter()
        .map(|e| {
            found.get(e).copied().ok_or_else(|| {
                ClientError::Protocol(format!("a node answered no counts for entity {e}"))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Response::Counts(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaudit_proto::likes::StatusRequest;
    use plaudit_proto::routing::shard_of;
    use plaudit_proto::WireError;
    use proptest::prelude::*;

    fn counts(entities: &[EntityId]) -> Request {
        Request::Counts(CountsRequest { biz: 3, entities: entities.to_vec() })
    }

    /// What a node would answer each part: likes = entity, dislikes = 2 x entity.
    fn serve(part: &Request) -> Answer {
        match part {
            Request::Counts(r) => Ok(Response::Counts(
                r.entities
                    .iter()
                    .map(|&e| EntityCounts { entity: e, likes: e, dislikes: 2 * e })
                    .collect(),
            )),
            _ => Ok(Response::Pong),
        }
    }

    #[test]
    fn nothing_is_split_without_a_map_or_within_one_shard() {
        let reqs = vec![counts(&[1, 2, 3, 4, 5]), Request::Ping];
        let (parts, merger) = plan(reqs.clone(), 0, &[], &EntityRoutes::default());
        assert_eq!(parts, reqs);
        assert!(!merger.split);
        let one_shard: Vec<EntityId> = (0..1000).filter(|&e| shard_of(3, e, 6) == 2).collect();
        let (parts, _) = plan(vec![counts(&one_shard)], 6, &[], &EntityRoutes::default());
        assert_eq!(parts, vec![counts(&one_shard)]);
        let (parts, _) = plan(vec![counts(&[])], 6, &[], &EntityRoutes::default());
        assert_eq!(parts, vec![counts(&[])]);
    }

    #[test]
    fn every_part_is_one_shard_and_answers_come_back_in_order() {
        let entities: Vec<EntityId> = (100..120).collect();
        let status = Request::Status(StatusRequest { biz: 3, user: 9, entities: vec![1] });
        let (parts, merger) =
            plan(vec![Request::Ping, counts(&entities), status], 6, &[], &EntityRoutes::default());
        assert!(parts.len() > 3);
        for part in &parts[1..parts.len() - 1] {
            let Request::Counts(r) = part else { panic!("{part:?}") };
            let shard = shard_of(3, r.entities[0], 6);
            assert!(r.entities.iter().all(|&e| shard_of(3, e, 6) == shard), "{r:?}");
        }
        let answers = merger.merge(parts.iter().map(serve).collect());
        assert_eq!(answers.len(), 3);
        let Ok(Response::Counts(c)) = &answers[1] else { panic!("{answers:?}") };
        assert_eq!(c.iter().map(|c| c.entity).collect::<Vec<_>>(), entities);
        assert!(c.iter().all(|c| c.likes == c.entity && c.dislikes == 2 * c.entity));
    }

    #[test]
    fn a_failed_part_fails_the_read_it_belongs_to_only() {
        let (parts, merger) = plan(
            vec![counts(&[1, 2, 3, 4, 5, 6, 7]), Request::Ping],
            6,
            &[],
            &EntityRoutes::default(),
        );
        let mut answers: Vec<Answer> = parts.iter().map(serve).collect();
        answers[0] = Err(ClientError::Timeout);
        let out = merger.merge(answers);
        assert!(matches!(out[0], Err(ClientError::Timeout)), "{out:?}");
        assert!(matches!(out[1], Ok(Response::Pong)), "{out:?}");

        let (parts, merger) =
            plan(vec![counts(&[1, 2, 3, 4, 5, 6, 7])], 6, &[], &EntityRoutes::default());
        let mut answers: Vec<Answer> = parts.iter().map(serve).collect();
        let refused = Response::Error(WireError::bad_request("no such business"));
        *answers.last_mut().unwrap() = Ok(refused.clone());
        assert_eq!(merger.merge(answers).pop().unwrap().unwrap(), refused);
    }

    #[test]
    fn a_moved_entity_goes_with_the_shard_it_lives_on() {
        // Shards 0..3 led by nodes 1..3 twice over; entity `e` moved from
        // its hash shard to one another node leads.
        let leaders = [Some(1), Some(2), Some(3), Some(1), Some(2), Some(3)];
        let e: EntityId = 100;
        let home = shard_of(3, e, 6);
        let to = (home + 1) % 6;
        let mut routes = EntityRoutes::default();
        routes.accept(vec![(plaudit_proto::placement::EntityKey { biz: 3, entity: e }, to)]);
        let entities: Vec<EntityId> = (100..120).collect();
        let (parts, merger) = plan(vec![counts(&entities)], 6, &leaders, &routes);
        let part_of_e = parts
            .iter()
            .find_map(|p| match p {
                Request::Counts(r) if r.entities.contains(&e) => Some(r.clone()),
                _ => None,
            })
            .expect("a part holds the moved entity");
        let node = leaders[to as usize];
        let on = |x: &EntityId| if *x == e { to } else { shard_of(3, *x, 6) };
        assert!(
            part_of_e.entities.iter().all(|x| leaders[on(x) as usize] == node),
            "{part_of_e:?}"
        );
        let answers = merger.merge(parts.iter().map(serve).collect());
        let Ok(Response::Counts(c)) = &answers[0] else { panic!("{answers:?}") };
        assert_eq!(c.iter().map(|c| c.entity).collect::<Vec<_>>(), entities);
    }

    #[test]
    fn parts_go_one_per_leader_node() {
        let entities: Vec<EntityId> = (100..140).collect();
        // Shards 0 and 3 on node 1, 1 and 4 on node 2, 2 on node 3; shard 5's
        // leader unknown.
        let leaders = [Some(1), Some(2), Some(3), Some(1), Some(2), None];
        let (parts, merger) = plan(vec![counts(&entities)], 6, &leaders, &EntityRoutes::default());
        let by_node = |r: &CountsRequest| leaders[shard_of(3, r.entities[0], 6) as usize];
        let mut seen = Vec::new();
        for part in &parts {
            let Request::Counts(r) = part else { panic!("{part:?}") };
            let node = by_node(r);
            let same = |e: &EntityId| leaders[shard_of(3, *e, 6) as usize] == node;
            assert!(r.entities.iter().all(same), "one node's shards per part: {r:?}");
            if node.is_none() {
                let shard = shard_of(3, r.entities[0], 6);
                assert!(r.entities.iter().all(|&e| shard_of(3, e, 6) == shard), "{r:?}");
            }
            seen.push(node);
        }
        assert_eq!(parts.len(), 4, "nodes 1, 2, 3 and the leaderless shard: {parts:?}");
        let answers = merger.merge(parts.iter().map(serve).collect());
        let Ok(Response::Counts(c)) = &answers[0] else { panic!("{answers:?}") };
        assert_eq!(c.iter().map(|c| c.entity).collect::<Vec<_>>(), entities);
    }

    #[test]
    fn a_read_the_node_would_refuse_goes_whole() {
        let too_many: Vec<EntityId> = (0..=plaudit_proto::limits::MAX_BATCH as u64).collect();
        let (parts, merger) = plan(vec![counts(&too_many)], 6, &[], &EntityRoutes::default());
        assert_eq!(parts, vec![counts(&too_many)]);
        assert!(!merger.split);
    }

    #[test]
    fn a_part_that_leaves_an_entity_out_is_a_protocol_error() {
        let (parts, merger) =
            plan(vec![counts(&[1, 2, 3, 4, 5, 6, 7])], 6, &[], &EntityRoutes::default());
        let mut answers: Vec<Answer> = parts.iter().map(serve).collect();
        answers[0] = Ok(Response::Counts(vec![]));
        assert!(matches!(merger.merge(answers)[0], Err(ClientError::Protocol(_))));
    }

    proptest! {
        #[test]
        fn merged_answers_are_what_one_node_would_answer(
            reqs in proptest::collection::vec(
                proptest::collection::vec(0u64..50, 0..30), 0..8),
            shards in 0u32..9,
            leaders in proptest::collection::vec(proptest::option::of(1u64..4), 0..9),
        ) {
            let reqs: Vec<Request> = reqs.iter().map(|e| counts(e)).collect();
            let whole: Vec<Answer> = reqs.iter().map(serve).collect();
            let (parts, merger) = plan(reqs, shards, &leaders, &EntityRoutes::default());
            let merged = merger.merge(parts.iter().map(serve).collect());
            prop_assert_eq!(format!("{merged:?}"), format!("{whole:?}"));
        }
    }
}
