//! The routing rules' tests: targets, candidate order, picks, hints.

use super::*;
use plaudit_proto::cluster::{ClusterMap, NodeInfo};
use plaudit_proto::likes::{CountsRequest, LikeRequest, LikersRequest, StatusRequest};
use plaudit_proto::scoring::{BoardQuery, QueryRequest};
use plaudit_proto::window::Granularity;
use plaudit_proto::LikeAction;

fn addr(n: NodeId) -> String {
    format!("10.0.0.{n}:7401")
}

/// Three nodes, three shards, node `s + 1` leading shard `s`, node 1 the
/// metadata leader.
fn table() -> RoutingTable {
    let nodes = (1..=3)
        .map(|id| NodeInfo {
            id,
            client: addr(id),
            peer: format!("10.0.0.{id}:7403"),
            admin: format!("10.0.0.{id}:7402"),
        })
        .collect();
    RoutingTable {
        map: ClusterMap {
            epoch: 4,
            nodes,
            shards: vec![vec![1, 2, 3], vec![2, 3, 1], vec![3, 1, 2]],
            meta_voters: vec![1, 2, 3],
        },
        leaders: vec![Some(1), Some(2), Some(3)],
        meta_leader: Some(1),
    }
}

fn view() -> View {
    let mut v = View::new(vec!["seed.example:7401".into()]);
    assert!(v.accept(table()));
    v
}

fn like(biz: u32, user: u64) -> Request {
    Request::Like(LikeRequest { biz, entity: 99, user, owner: None, action: LikeAction::Like })
}

fn to(node: NodeId) -> Option<Dest> {
    Some(Dest { node: Some(node), addr: addr(node) })
}

#[test]
fn user_requests_route_by_user_and_likers_by_entity() {
    for user in 0..50 {
        let want = Target::Leader(shard_of(7, user, 3));
        assert_eq!(target(&like(7, user), 3), want);
        let status = Request::Status(StatusRequest { biz: 7, user, entities: vec![1] });
        assert_eq!(target(&status, 3), want);
    }
    let likers = Request::Likers(LikersRequest { biz: 7, entity: 5, cursor: None, limit: 1 });
    assert_eq!(target(&likers, 3), Target::Leader(shard_of(7, 5, 3)));
}

#[test]
fn registry_requests_go_to_the_metadata_leader_and_fan_outs_anywhere() {
    assert_eq!(target(&Request::GetBiz(1), 3), Target::Meta);
    let once = Request::Once { id: 1, req: Box::new(Request::ListBiz) };
    assert_eq!(target(&once, 3), Target::Meta);
    // Counts go to the leader of their first entity's shard (the SDK
    // splits them by leader node; a node that leads not all fans out).
    let apart = (2..).find(|&e| shard_of(1, e, 3) != shard_of(1, 1, 3)).unwrap();
    let counts = Request::Counts(CountsRequest { biz: 1, entities: vec![1, apart] });
    assert_eq!(target(&counts, 3), Target::Leader(shard_of(1, 1, 3)));
    let none = Request::Counts(CountsRequest { biz: 1, entities: vec![] });
    assert_eq!(target(&none, 3), Target::Any);
    let together = (2..).find(|&e| shard_of(1, e, 3) == shard_of(1, 1, 3)).unwrap();
    let counts = Request::Counts(CountsRequest { biz: 1, entities: vec![1, together] });
    assert_eq!(target(&counts, 3), Target::Leader(shard_of(1, 1, 3)));
    assert_eq!(target(&Request::Ping, 3), Target::Any);
    assert_eq!(target(&Request::ClusterStatus, 3), Target::Seed);
    assert_eq!(target(&Request::ListTokens, 3), Target::Meta);
    assert_eq!(target(&Request::RevokeToken(2), 3), Target::Meta);
    // Without a table everything goes to a seed.
    assert_eq!(target(&like(1, 1), 0), Target::Any);
    assert_eq!(target(&Request::GetBiz(1), 0), Target::Any);
}

#[test]
fn board_queries_route_by_type_id_or_go_anywhere() {
    let q = |board| Request::Query(QueryRequest { rank: 4, board, query: BoardQuery::Size });
    let t = "day:1713110400_7";
    let key = TypeId::parse(t).unwrap().to_key();
    assert_eq!(target(&q(BoardRef::TypeId(t.into())), 3), Target::Leader(board_shard(4, &key, 3)));
    assert_eq!(target(&q(BoardRef::TypeId("nonsense".into())), 3), Target::Any);
    let at = BoardRef::At { dims: vec![], granularity: Granularity::Total, ts: 0 };
    assert_eq!(target(&q(at), 3), Target::Any);
}

#[test]
fn stale_reads_go_to_any_replica_of_the_shard() {
    let user = 11;
    let s = shard_of(7, user, 3);
    let stale = Request::Stale(Box::new(Request::Status(StatusRequest {
        biz: 7,
        user,
        entities: vec![1],
    })));
    assert_eq!(target(&stale, 3), Target::Replica(s));
    assert_eq!(target(&Request::Stale(Box::new(Request::ListBiz)), 3), Target::Any);
    // Each replica in turn, as the spin moves.
    let v = view();
    let now = Instant::now();
    let picked: Vec<_> =
        (0..3).map(|spin| v.pick(Target::Replica(1), now, spin).unwrap().node).collect();
    assert_eq!(picked, vec![Some(2), Some(3), Some(1)]);
}

#[test]
fn a_shard_request_goes_to_its_leader_and_registry_to_the_meta_leader() {
    let v = view();
    let now = Instant::now();
    assert_eq!(v.pick(Target::Leader(0), now, 5), to(1));
    assert_eq!(v.pick(Target::Leader(2), now, 5), to(3));
    assert_eq!(v.pick(Target::Meta, now, 5), to(1));
    // Any node, spread by the spin.
    assert_eq!(v.pick(Target::Any, now, 0), to(1));
    assert_eq!(v.pick(Target::Any, now, 1), to(2));
}

#[test]
fn a_status_goes_to_the_node_the_caller_named() {
    let v = uneven();
    let now = Instant::now();
    // The first seed is node 2's address: whatever the spin, node 2.
    for spin in 0..4 {
        assert_eq!(v.pick(Target::Seed, now, spin).map(|d| d.node), Some(Some(2)));
    }
}

#[test]
fn an_unknown_leader_falls_back_to_the_first_replica() {
    let mut t = table();
    t.leaders[1] = None;
    t.meta_leader = None;
    let mut v = View::new(vec![]);
    v.accept(t);
    let now = Instant::now();
    assert_eq!(v.pick(Target::Leader(1), now, 0), to(2));
    assert_eq!(v.pick(Target::Meta, now, 0), to(1));
}

#[test]
fn a_down_leader_is_passed_over_for_another_replica_until_it_expires() {
    let mut v = view();
    let now = Instant::now();
    v.mark_down(&addr(1), now);
    assert_eq!(v.pick(Target::Leader(0), now, 0), to(2));
    assert!(v.has_other(Target::Leader(0), &addr(1), now));
    assert_eq!(v.pick(Target::Leader(0), now + DOWN_FOR, 0), to(1));
    v.mark_down(&addr(2), now);
    assert_eq!(v.pick(Target::Leader(0), now, 0), to(3));
    v.mark_up(&addr(1));
    assert_eq!(v.pick(Target::Leader(0), now, 0), to(1));
}

#[test]
fn when_every_member_is_down_seeds_are_tried_then_the_best_candidate_anyway() {
    let mut v = view();
    let now = Instant::now();
    for n in 1..=3 {
        v.mark_down(&addr(n), now);
    }
    let seed = Dest { node: None, addr: "seed.example:7401".into() };
    assert_eq!(v.pick(Target::Leader(1), now, 0), Some(seed));
    assert!(!v.has_other(Target::Leader(1), "seed.example:7401", now));
    v.mark_down("seed.example:7401", now);
    assert_eq!(v.pick(Target::Leader(1), now, 0), to(2));
}

#[test]
fn without_a_table_calls_go_to_the_seeds_in_turn() {
    let v = View::new(vec!["a:1".into(), "b:1".into()]);
    let now = Instant::now();
    assert_eq!(v.shards(), 0);
    assert_eq!(v.pick(Target::Any, now, 0).unwrap().addr, "a:1");
    assert_eq!(v.pick(Target::Any, now, 1).unwrap().addr, "b:1");
    assert_eq!(v.addrs(), vec!["a:1".to_string(), "b:1".to_string()]);
    assert!(View::new(vec![]).pick(Target::Any, now, 0).is_none());
}

#[test]
fn a_hint_with_a_leader_moves_the_shard_and_retries_there() {
    let mut v = view();
    let now = Instant::now();
    let hint = LeaderHint { shard: 0, leader: Some(3), epoch: 4 };
    assert_eq!(v.learn(&hint, now), Learned::Retry(to(3).unwrap()));
    assert_eq!(v.table().leaders[0], Some(3));
    assert_eq!(v.pick(Target::Leader(0), now, 0), to(3));
    assert!(!v.is_stale());
}

#[test]
fn a_hint_for_the_metadata_group_uses_the_shard_count_as_its_id() {
    let mut v = view();
    let now = Instant::now();
    let hint = LeaderHint { shard: 3, leader: Some(2), epoch: 4 };
    assert_eq!(v.learn(&hint, now), Learned::Retry(to(2).unwrap()));
    assert_eq!(v.table().meta_leader, Some(2));
    assert_eq!(v.table().leaders, vec![Some(1), Some(2), Some(3)]);
}

#[test]
fn an_election_in_progress_means_wait() {
    let mut v = view();
    let hint = LeaderHint { shard: 2, leader: None, epoch: 4 };
    assert_eq!(v.learn(&hint, Instant::now()), Learned::Wait);
    assert_eq!(v.table().leaders[2], None);
    // Routing then falls back to the shard's replicas in placement order.
    assert_eq!(v.pick(Target::Leader(2), Instant::now(), 0), to(3));
}

#[test]
fn a_hint_at_a_down_node_means_wait() {
    let mut v = view();
    let now = Instant::now();
    v.mark_down(&addr(2), now);
    let hint = LeaderHint { shard: 0, leader: Some(2), epoch: 4 };
    assert_eq!(v.learn(&hint, now), Learned::Wait);
}

#[test]
fn a_newer_epoch_or_an_unknown_node_makes_the_table_stale() {
    let mut v = view();
    let now = Instant::now();
    let hint = LeaderHint { shard: 1, leader: Some(3), epoch: 5 };
    assert_eq!(v.learn(&hint, now), Learned::Retry(to(3).unwrap()));
    assert!(v.is_stale());
    let hint = LeaderHint { shard: 1, leader: Some(9), epoch: 5 };
    assert_eq!(v.learn(&hint, now), Learned::Refresh);
    let mut newer = table();
    newer.map.epoch = 5;
    assert!(v.accept(newer));
    assert!(!v.is_stale());
}

#[test]
fn an_older_table_is_refused() {
    let mut v = view();
    let mut older = table();
    older.map.epoch = 3;
    older.leaders = vec![None, None, None];
    assert!(!v.accept(older));
    assert_eq!(v.table().leaders, vec![Some(1), Some(2), Some(3)]);
}

#[test]
fn a_refresh_asks_live_members_then_seeds_then_failed_members() {
    let mut v = view();
    let now = Instant::now();
    v.mark_down(&addr(1), now);
    assert_eq!(
        v.refresh_order(now, 0),
        vec![addr(2), addr(3), "seed.example:7401".into(), addr(1)]
    );
}

/// The candidate list as it was built before `walk` (eagerly, then
/// without repeats): the reference the walk must match.
fn listed(v: &View, target: Target, spin: usize) -> Vec<Dest> {
    let map = &v.table.map;
    let mut nodes: Vec<NodeId> = Vec::new();
    match target {
        Target::Leader(s) => {
            nodes.extend(v.table.leaders.get(s as usize).copied().flatten());
            nodes.extend(map.replicas(s));
        }
        Target::Meta => {
            nodes.extend(v.table.meta_leader);
            nodes.extend(&map.meta_voters);
        }
        Target::Replica(s) => nodes.extend(rotated(map.replicas(s), spin)),
        Target::Any | Target::Seed => {}
    }
    let all: Vec<NodeId> = map.nodes.iter().map(|n| n.id).collect();
    nodes.extend(rotated(&all, spin));
    let mut out: Vec<Dest> = Vec::new();
    if target == Target::Seed {
        for a in &v.seeds {
            let node = map.nodes.iter().find(|n| &n.client == a).map(|n| n.id);
            if !out.iter().any(|o| &o.addr == a) {
                out.push(Dest { node, addr: a.clone() });
            }
        }
    }
    for d in nodes.into_iter().filter_map(|n| v.dest(n)) {
        if !out.iter().any(|o| o.addr == d.addr) {
            out.push(d);
        }
    }
    for addr in rotated(&v.seeds, if map.nodes.is_empty() { spin } else { 0 }) {
        if !out.iter().any(|o| &o.addr == addr) {
            out.push(Dest { node: None, addr: addr.clone() });
        }
    }
    out
}

/// Four nodes, each shard on three of them, leaders known, unknown
/// (an election) and unmapped (a node the map lacks), no metadata
/// leader: the walk's every branch with something to skip or rotate.
fn uneven() -> View {
    let mut t = table();
    t.map.nodes.push(NodeInfo {
        id: 4,
        client: addr(4),
        peer: "10.0.0.4:7403".into(),
        admin: "10.0.0.4:7402".into(),
    });
    t.map.shards = vec![vec![1, 2, 3], vec![2, 3, 4], vec![3, 4, 1], vec![4, 1, 2]];
    t.leaders = vec![Some(2), None, Some(9), Some(4)];
    t.meta_leader = None;
    let mut v = View::new(vec![addr(2), "seed.example:7401".into(), "other:1".into()]);
    assert!(v.accept(t));
    v
}

#[test]
fn the_walk_lists_the_candidates_in_the_order_they_were_listed() {
    let targets: Vec<Target> = (0..5)
        .flat_map(|s| [Target::Leader(s), Target::Replica(s)])
        .chain([Target::Meta, Target::Any, Target::Seed])
        .collect();
    let seeds_only = View::new(vec!["a:1".into(), "b:1".into(), "c:1".into()]);
    for v in [view(), uneven(), seeds_only] {
        for &t in &targets {
            for spin in 0..7 {
                assert_eq!(v.candidates(t, spin), listed(&v, t, spin), "{t:?} spin {spin}");
            }
        }
    }
    // Spot checks of the reference itself.
    let v = uneven();
    let order = |t, spin| -> Vec<Option<NodeId>> {
        listed(&v, t, spin).into_iter().map(|d| d.node).collect()
    };
    assert_eq!(
        order(Target::Leader(0), 1),
        [2, 1, 3, 4].map(Some).into_iter().chain([None, None]).collect::<Vec<_>>()
    );
    assert_eq!(order(Target::Replica(1), 1)[..3], [Some(3), Some(4), Some(2)]);
}

/// `pick` walks the candidates lazily; it must choose what the first
/// match over the listed candidates chooses, for every mix of down and
/// doubtful addresses (a seed that is also a member included).
#[test]
fn pick_chooses_as_the_candidate_list_would() {
    let now = Instant::now();
    let mut addrs: Vec<String> = (1..=3).map(addr).collect();
    addrs.push("seed.example:7401".into());
    let targets = [0, 1, 2]
        .into_iter()
        .flat_map(|s| [Target::Leader(s), Target::Replica(s)])
        .chain([Target::Meta, Target::Any, Target::Leader(9)]);
    let targets: Vec<Target> = targets.collect();
    for seeds in [vec![addrs[3].clone()], vec![addr(2), addrs[3].clone()]] {
        for marks in 0..256u32 {
            let mut v = View::new(seeds.clone());
            assert!(v.accept(table()));
            for (i, a) in addrs.iter().enumerate() {
                if marks & (1 << i) != 0 {
                    v.mark_down(a, now);
                }
                if marks & (16 << i) != 0 {
                    v.mark_doubtful(a, now);
                }
            }
            for &t in &targets {
                for spin in 0..4 {
                    let all = v.candidates(t, spin);
                    let fine = |d: &&Dest| !v.is_down(&d.addr, now) && !v.is_doubtful(&d.addr, now);
                    let want = (all.iter().find(fine))
                        .or_else(|| all.iter().find(|d| !v.is_down(&d.addr, now)))
                        .or(all.first())
                        .cloned();
                    assert_eq!(v.pick(t, now, spin), want, "{t:?} spin {spin} marks {marks:b}");
                    let other = all.iter().any(|d| d.addr != addrs[0] && !v.is_down(&d.addr, now));
                    assert_eq!(v.has_other(t, &addrs[0], now), other);
                }
            }
        }
    }
}
