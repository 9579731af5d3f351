//! Reads that span shards, split on the client so that each part goes
//! straight to the node that leads its shards, and put back together: one
//! part per leader node (the shards of a node whose leader is not known
//! go one part each).
//!
//! The counts reads of one pipeline are split together: each business's
//! entities that one node serves go as one part, whichever reads asked for
//! them, so a pipeline of 16 reads of 20 entities costs each node one
//! request rather than one per read (per request, a node's decode, routing,
//! lease check and reply cost more than its lookups of a few entities).
//!
//! ```text
//! [Like, Counts{e1..e20}, Counts{e21..e40}, Status]
//!   ─ plan ─►  [Like, Counts{node 1's of both}, Counts{node 2's}, Counts{node 3's}, Status]
//!                                  │ sent as one pipeline (each part: Target::Leader)
//! [Like's, Counts{e1..e20 in order}, Counts{e21..e40 in order}, Status's]  ◄ merge ┘
//! ```
//!
//! Without this, a node took the whole read and forwarded each shard's part
//! to that shard's leader: a second hop, a second encode and decode, and a
//! task per part on a node that often led none of them. The client knows the
//! map, so it sends each part where it is served. Pure: no IO, no clock.

use crate::entity_routes::EntityRoutes;
use crate::error::ClientError;
use plaudit_proto::cluster::NodeId;
use plaudit_proto::keyed_hash::KeyedHash;
use plaudit_proto::likes::{CountsRequest, EntityCounts};
use plaudit_proto::limits::MAX_BATCH;
use plaudit_proto::{BizId, EntityId, Request, Response};
use std::collections::HashMap;

type Answer = Result<Response, ClientError>;

/// Entities by business, hashed cheaply (SipHash was a tenth of a read
/// pipeline's client CPU).
type ByEntity<V> = HashMap<(BizId, EntityId), V, KeyedHash>;

/// How the answers of the sent parts become the answers of the requests
/// asked, in their order.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    spans: Vec<Span>,
    /// Whether any read was split or merged (else the answers pass through,
    /// one per request).
    split: bool,
    /// The counts parts, each with its business.
    counts_parts: Vec<(usize, BizId)>,
}

#[derive(Debug)]
enum Span {
    /// Sent as it was, as part `part`; its answer is the part's.
    Whole { part: usize },
    /// A counts read of `biz`, served by parts `parts` (which other reads
    /// may share), answered in `entities`' order.
    Counts { biz: BizId, entities: Vec<EntityId>, parts: Vec<usize> },
}

impl Span {
    /// How many entities the span's read asked for.
    fn asked(&self) -> usize {
        match self {
            Span::Whole { .. } => 0,
            Span::Counts { entities, .. } => entities.len(),
        }
    }
}

/// The parts being filled: each business's entities by the server that
/// serves them, and which part each entity went into.
struct Parts<'a> {
    shards: u32,
    leaders: &'a [Option<NodeId>],
    routes: &'a EntityRoutes,
    /// The part of `(biz, server)` still taking entities.
    open: Vec<((BizId, Server), usize)>,
    /// The part each `(biz, entity)` asked so far went into.
    placed: ByEntity<usize>,
}

/// The parts to send for `reqs` in a cluster of `shards` shards (0: no map,
/// nothing is split or merged) whose leaders are `leaders` (by shard, as
/// far as the client knows), and the plan that merges their answers. A
/// part's first entity's shard is led by the node every shard of the part
/// is, so routing the part by it (`route::target`) sends it there; the node
/// reads all of it in place if it still leads them. A part holds each
/// entity once and at most `MAX_BATCH` of them.
pub(crate) fn plan(
    reqs: Vec<Request>,
    shards: u32,
    leaders: &[Option<NodeId>],
    routes: &EntityRoutes,
) -> (Vec<Request>, Plan) {
    let mut parts = Vec::with_capacity(reqs.len());
    let mut plan =
        Plan { spans: Vec::with_capacity(reqs.len()), split: false, counts_parts: Vec::new() };
    let asked = reqs.iter().map(|r| if let Request::Counts(c) = r { c.entities.len() } else { 0 });
    let placed = ByEntity::with_capacity_and_hasher(asked.sum(), KeyedHash::default());
    let mut filling = Parts { shards, leaders, routes, open: Vec::new(), placed };
    for req in reqs {
        match req {
            // A request the node would refuse goes whole, to be refused
            // whole (its parts might each pass: 501 entities as parts of
            // fewer).
            Request::Counts(r) if shards > 0 && r.validate().is_ok() => {
                let mut mine = Vec::new();
                for &e in &r.entities {
                    let part = filling.place(r.biz, e, &mut parts, &mut plan);
                    if !mine.contains(&part) {
                        mine.push(part);
                    }
                }
                plan.spans.push(Span::Counts { biz: r.biz, entities: r.entities, parts: mine });
                plan.split = true;
            }
            req => {
                plan.spans.push(Span::Whole { part: parts.len() });
                parts.push(req);
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

impl Parts<'_> {
    /// The part that asks for `entity` of `biz`: the one an earlier read
    /// put it in, else its server's open part (a new one when there is
    /// none or it is full), which it joins.
    fn place(
        &mut self,
        biz: BizId,
        entity: EntityId,
        parts: &mut Vec<Request>,
        plan: &mut Plan,
    ) -> usize {
        if let Some(&part) = self.placed.get(&(biz, entity)) {
            return part;
        }
        // An entity by the shard it lives on (`entity_routes.rs`).
        let shard = self.routes.shard(biz, entity, self.shards);
        let server = match self.leaders.get(shard as usize) {
            Some(Some(n)) => Server::Node(*n),
            _ => Server::Shard(shard),
        };
        let key = (biz, server);
        // A linear search: a pipeline's parts are its businesses times the
        // cluster's nodes, a few.
        let open = self.open.iter().position(|(k, _)| *k == key);
        let room = |i: usize| match &parts[i] {
            Request::Counts(r) => r.entities.len() < MAX_BATCH,
            _ => false,
        };
        let part = match open.map(|o| self.open[o].1) {
            Some(i) if room(i) => i,
            _ => {
                parts.push(Request::Counts(CountsRequest { biz, entities: Vec::new() }));
                let i = parts.len() - 1;
                plan.counts_parts.push((i, biz));
                match open {
                    Some(o) => self.open[o].1 = i,
                    None => self.open.push((key, i)),
                }
                i
            }
        };
        if let Request::Counts(r) = &mut parts[part] {
            r.entities.push(entity);
        }
        self.placed.insert((biz, entity), part);
        part
    }
}

impl Plan {
    /// The answers of the requests planned, from the answers of the parts
    /// sent (as many, in the same order).
    pub(crate) fn merge(self, answers: Vec<Answer>) -> Vec<Answer> {
        if !self.split {
            return answers;
        }
        let mut answers: Vec<Option<Answer>> = answers.into_iter().map(Some).collect();
        // Every part's counts, by business and entity: an entity is in one
        // part of its business.
        let mut found = ByEntity::with_capacity_and_hasher(
            self.spans.iter().map(Span::asked).sum(),
            KeyedHash::default(),
        );
        for &(p, biz) in &self.counts_parts {
            if let Some(Some(Ok(Response::Counts(counts)))) = answers.get(p) {
                found.extend(counts.iter().map(|c| ((biz, c.entity), *c)));
            }
        }
        let mut out = Vec::with_capacity(self.spans.len());
        for span in self.spans {
            out.push(match span {
                Span::Whole { part } => {
                    answers.get_mut(part).and_then(Option::take).unwrap_or(Err(ClientError::Closed))
                }
                Span::Counts { biz, entities, parts } => {
                    merge_counts(biz, &entities, &parts, &answers, &found)
                }
            });
        }
        out
    }
}

/// A counts read's answer from its parts': the first part that failed
/// decides the whole (the read is one call to its caller), else every
/// entity's counts in the order asked.
fn merge_counts(
    biz: BizId,
    entities: &[EntityId],
    parts: &[usize],
    answers: &[Option<Answer>],
    found: &ByEntity<EntityCounts>,
) -> Answer {
    for &p in parts {
        match answers.get(p).and_then(Option::as_ref) {
            Some(Ok(Response::Counts(_))) => {}
            Some(Ok(other)) => return Ok(other.clone()),
            Some(Err(e)) => return Err(e.duplicate()),
            None => return Err(ClientError::Closed),
        }
    }
    let out = entities
        .iter()
        .map(|e| {
            found.get(&(biz, *e)).copied().ok_or_else(|| {
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
        counts_of(3, entities)
    }

    fn counts_of(biz: BizId, entities: &[EntityId]) -> Request {
        Request::Counts(CountsRequest { biz, entities: entities.to_vec() })
    }

    /// What a node holds for an entity: likes = 10 x entity + business,
    /// dislikes = 2 x entity.
    fn held(biz: BizId, e: EntityId) -> EntityCounts {
        EntityCounts { entity: e, likes: 10 * e + u64::from(biz), dislikes: 2 * e }
    }

    /// What a node would answer each part.
    fn serve(part: &Request) -> Answer {
        match part {
            Request::Counts(r) => {
                Ok(Response::Counts(r.entities.iter().map(|&e| held(r.biz, e)).collect()))
            }
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
        assert!(c.iter().all(|c| *c == held(3, c.entity)));
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
        routes.accept(vec![(plaudit_proto::placement::EntityKey { biz: 3, entity: e }, to)], None);
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

    /// Shards 0..6 led by nodes 1, 2, 3, 1, 2, 3.
    const SPREAD: [Option<NodeId>; 6] = [Some(1), Some(2), Some(3), Some(1), Some(2), Some(3)];

    /// The node serving entity `e` of `biz` under `SPREAD`.
    fn node_of(biz: BizId, e: EntityId) -> Option<NodeId> {
        SPREAD[shard_of(biz, e, 6) as usize]
    }

    #[test]
    fn the_reads_of_a_pipeline_share_one_part_per_business_and_node() {
        let a: Vec<EntityId> = (100..120).collect();
        let b: Vec<EntityId> = (110..140).collect();
        let reqs = vec![counts_of(3, &a), Request::Ping, counts_of(3, &b), counts_of(4, &a)];
        let whole: Vec<Answer> = reqs.iter().map(serve).collect();
        let (parts, merger) = plan(reqs, 6, &SPREAD, &EntityRoutes::default());
        let mut seen: Vec<(BizId, Option<NodeId>)> = Vec::new();
        let mut asked: Vec<(BizId, EntityId)> = Vec::new();
        for part in parts.iter().filter(|p| !matches!(p, Request::Ping)) {
            let Request::Counts(r) = part else { panic!("{part:?}") };
            let node = node_of(r.biz, r.entities[0]);
            assert!(r.entities.iter().all(|&e| node_of(r.biz, e) == node), "{r:?}");
            assert!(!seen.contains(&(r.biz, node)), "a second part for {:?}", (r.biz, node));
            seen.push((r.biz, node));
            asked.extend(r.entities.iter().map(|&e| (r.biz, e)));
        }
        assert_eq!(seen.len(), 6, "three nodes for each of two businesses: {parts:?}");
        let distinct: std::collections::HashSet<_> = asked.iter().copied().collect();
        assert_eq!(distinct.len(), asked.len(), "an entity asked twice: {asked:?}");
        assert_eq!(asked.len(), 40 + 20, "entities 100..140 of business 3, 100..120 of 4");
        let merged = merger.merge(parts.iter().map(serve).collect());
        assert_eq!(format!("{merged:?}"), format!("{whole:?}"));
    }

    #[test]
    fn a_part_holds_at_most_the_batch_limit() {
        let one_node = [Some(1); 6];
        let reqs: Vec<Request> = (0..3u64)
            .map(|r| counts_of(3, &(r * 400..(r + 1) * 400).collect::<Vec<_>>()))
            .collect();
        let whole: Vec<Answer> = reqs.iter().map(serve).collect();
        let (parts, merger) = plan(reqs, 6, &one_node, &EntityRoutes::default());
        assert_eq!(parts.len(), 3, "1,200 entities in parts of at most {MAX_BATCH}");
        for part in &parts {
            let Request::Counts(r) = part else { panic!("{part:?}") };
            assert!(r.entities.len() <= MAX_BATCH && r.validate().is_ok(), "{}", r.entities.len());
        }
        let merged = merger.merge(parts.iter().map(serve).collect());
        assert_eq!(format!("{merged:?}"), format!("{whole:?}"));
    }

    #[test]
    fn a_failed_shared_part_fails_every_read_in_it_and_only_those() {
        let on = |node: NodeId, n: usize| -> Vec<EntityId> {
            (0..).filter(|&e| node_of(3, e) == Some(node)).take(n).collect()
        };
        let (one, two) = (on(1, 6), on(2, 6));
        let both: Vec<EntityId> = one[..3].iter().chain(&two[..3]).copied().collect();
        let reqs = vec![counts_of(3, &both), counts_of(3, &two[3..]), counts_of(3, &one[3..])];
        let (parts, merger) = plan(reqs, 6, &SPREAD, &EntityRoutes::default());
        assert_eq!(parts.len(), 2, "{parts:?}");
        let mut answers: Vec<Answer> = parts.iter().map(serve).collect();
        let node_two = parts
            .iter()
            .position(|p| matches!(p, Request::Counts(r) if node_of(3, r.entities[0]) == Some(2)))
            .expect("a part for node 2");
        answers[node_two] = Err(ClientError::Timeout);
        let out = merger.merge(answers);
        assert!(matches!(out[0], Err(ClientError::Timeout)), "{out:?}");
        assert!(matches!(out[1], Err(ClientError::Timeout)), "{out:?}");
        let Ok(Response::Counts(c)) = &out[2] else { panic!("{out:?}") };
        assert_eq!(c.iter().map(|c| c.entity).collect::<Vec<_>>(), one[3..].to_vec());
    }

    proptest! {
        #[test]
        fn merged_answers_are_what_one_node_would_answer(
            reqs in proptest::collection::vec(
                (1u32..4, proptest::collection::vec(0u64..50, 0..30)), 0..8),
            shards in 0u32..9,
            leaders in proptest::collection::vec(proptest::option::of(1u64..4), 0..9),
        ) {
            let reqs: Vec<Request> = reqs.iter().map(|(biz, e)| counts_of(*biz, e)).collect();
            let whole: Vec<Answer> = reqs.iter().map(serve).collect();
            let (parts, merger) = plan(reqs, shards, &leaders, &EntityRoutes::default());
            let merged = merger.merge(parts.iter().map(serve).collect());
            prop_assert_eq!(format!("{merged:?}"), format!("{whole:?}"));
        }
    }
}
