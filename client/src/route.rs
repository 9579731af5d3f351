//! Where a call goes: the client's view of the cluster and the pure rules
//! that turn a request into a node to send it to. No IO and no clocks (the
//! time is passed in), so every rule here is unit-tested.
//!
//! ```text
//! Request ─ target() ─► Leader(shard) │ Meta │ Replica(shard) │ Any
//!                             │
//! View::pick(target) ─► first usable of: hinted leader, the group's
//!                       replicas, every other node, the seeds
//!                             │
//! a NotLeader reply ─ View::learn(hint) ─► Retry at the hinted node │ Wait │ Refresh
//! ```
//!
//! A `View` is the last routing table a node gave us, corrected by the
//! `NotLeader` hints calls have met since (a hint is fresher than any table),
//! plus the addresses that failed recently. A node that failed is skipped for
//! `DOWN_FOR`, not forgotten: when every candidate has failed, the first one
//! is tried anyway, since a node that restarted is the likeliest to answer.
//!
//! The cluster's shard count is the length of the map's `shards`; the
//! metadata group's id in a `LeaderHint` is that count. A view without a
//! table (the node did not answer `Routing`, e.g. an older single node) has
//! no shards: every request goes to a seed, which serves or forwards it.

use plaudit_proto::cluster::{NodeId, RoutingTable};
use plaudit_proto::error::LeaderHint;
use plaudit_proto::routing::{board_shard, shard_of};
use plaudit_proto::scoring::BoardRef;
use plaudit_proto::window::TypeId;
use plaudit_proto::{Request, ShardId};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long an address that failed is passed over while others remain.
pub(crate) const DOWN_FOR: Duration = Duration::from_secs(2);

/// Which node a request must (or may) be sent to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// The leader of a data shard: single-shard reads and writes.
    Leader(ShardId),
    /// The metadata group's leader: the business, ranking and token registry.
    Meta,
    /// Any replica of a shard: stale reads.
    Replica(ShardId),
    /// Any node: it fans out to the shards (counts, scores, boards) or needs
    /// none (ping, routing, status).
    Any,
}

/// The target of `req` in a cluster of `shards` shards (0: no table).
pub(crate) fn target(req: &Request, shards: u32) -> Target {
    if shards == 0 {
        return Target::Any;
    }
    match req {
        Request::Like(r) => Target::Leader(shard_of(r.biz, r.user, shards)),
        Request::Status(r) => Target::Leader(shard_of(r.biz, r.user, shards)),
        Request::UserLikes(r) => Target::Leader(shard_of(r.biz, r.user, shards)),
        Request::Received(r) => Target::Leader(shard_of(r.biz, r.user, shards)),
        Request::Likers(r) => Target::Leader(shard_of(r.biz, r.entity, shards)),
        Request::Query(q) => match &q.board {
            // An unparsable type id is the node's to refuse (BadRequest).
            BoardRef::TypeId(t) => TypeId::parse(t)
                .map_or(Target::Any, |t| Target::Leader(board_shard(q.rank, &t.to_key(), shards))),
            // Resolving a window needs the ranking's definition: the node does it.
            BoardRef::At { .. } => Target::Any,
        },
        Request::CreateBiz(_)
        | Request::GetBiz(_)
        | Request::ListBiz
        | Request::UpdateBiz(_)
        | Request::CreateRank(_)
        | Request::GetRank(_)
        | Request::ListRanks
        | Request::ListBizPage(_)
        | Request::ListRanksPage(_)
        | Request::UpdateRank(_)
        | Request::CreateToken(_)
        | Request::ListTokens
        | Request::RevokeToken(_)
        | Request::Once { .. } => Target::Meta,
        // Any replica of the inner request's shard answers a stale read;
        // registry reads are answered by every node.
        Request::Stale(inner) => match target(inner, shards) {
            Target::Leader(s) => Target::Replica(s),
            _ => Target::Any,
        },
        Request::Counts(_)
        | Request::Score(_)
        | Request::Boards(_)
        | Request::Ping
        | Request::Hello(_)
        | Request::Routing
        | Request::ClusterStatus => Target::Any,
        // Said by the pool on each connection it opens, never routed as a
        // call (`Client::request` refuses it); any node would take it.
        Request::Auth(_) => Target::Any,
    }
}

/// A node (or a seed, whose node id is unknown) to send a call to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dest {
    pub node: Option<NodeId>,
    pub addr: String,
}

/// What a `NotLeader` hint says to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Learned {
    /// Send the call again, to this node, now.
    Retry(Dest),
    /// The group has no leader (an election), or its leader is down: wait a
    /// little, then route again.
    Wait,
    /// The hint names a node the cached map does not have: fetch a newer
    /// table, then route again.
    Refresh,
}

/// The client's picture of the cluster.
#[derive(Debug, Clone)]
pub(crate) struct View {
    table: RoutingTable,
    seeds: Vec<String>,
    /// Addresses that failed, and when.
    down: HashMap<String, Instant>,
    /// Addresses that said a group has no leader, and when: an election is
    /// under way, or that node is cut off from the others (a partitioned
    /// old leader knows no leader and hands out stale tables). They are
    /// tried after the others, and asked for a table last, for `DOWN_FOR`.
    doubtful: HashMap<String, Instant>,
    /// A hint carried a newer map epoch than the table's.
    stale: bool,
}

impl View {
    /// A view with no table yet: only the seeds.
    pub(crate) fn new(seeds: Vec<String>) -> View {
        let table = RoutingTable { map: Default::default(), leaders: vec![], meta_leader: None };
        View { table, seeds, down: HashMap::new(), doubtful: HashMap::new(), stale: false }
    }

    pub(crate) fn table(&self) -> &RoutingTable {
        &self.table
    }

    pub(crate) fn shards(&self) -> u32 {
        self.table.map.shards.len() as u32
    }

    /// Whether a call has learned that the cluster map changed since the table.
    pub(crate) fn is_stale(&self) -> bool {
        self.stale
    }

    /// Takes a table fetched from a node, unless its map is older than the
    /// one held (a lagging node). Returns whether it was taken.
    pub(crate) fn accept(&mut self, table: RoutingTable) -> bool {
        if table.map.epoch < self.table.map.epoch {
            return false;
        }
        self.table = table;
        self.stale = false;
        true
    }

    /// The addresses worth keeping connections to: every member's, or the
    /// seeds while there is no map.
    pub(crate) fn addrs(&self) -> Vec<String> {
        if self.table.map.nodes.is_empty() {
            return self.seeds.clone();
        }
        self.table.map.nodes.iter().map(|n| n.client.clone()).collect()
    }

    pub(crate) fn mark_down(&mut self, addr: &str, now: Instant) {
        self.down.insert(addr.to_string(), now);
    }

    pub(crate) fn mark_up(&mut self, addr: &str) {
        self.down.remove(addr);
    }

    /// `addr` answered that a group has no leader.
    pub(crate) fn mark_doubtful(&mut self, addr: &str, now: Instant) {
        self.doubtful.insert(addr.to_string(), now);
    }

    fn is_doubtful(&self, addr: &str, now: Instant) -> bool {
        self.doubtful.get(addr).is_some_and(|&at| now.saturating_duration_since(at) < DOWN_FOR)
    }

    fn is_down(&self, addr: &str, now: Instant) -> bool {
        self.down.get(addr).is_some_and(|&at| now.saturating_duration_since(at) < DOWN_FOR)
    }

    fn dest(&self, node: NodeId) -> Option<Dest> {
        let info = self.table.map.node(node)?;
        Some(Dest { node: Some(node), addr: info.client.clone() })
    }

    /// Candidates for `target`, best first, without repeats: the group's
    /// known leader, its replicas in placement order (the first is the
    /// intended leader), every other member (rotated by `spin` so load
    /// spreads), then the seeds that are not members.
    fn candidates(&self, target: Target, spin: usize) -> Vec<Dest> {
        let mut out: Vec<Dest> = Vec::new();
        for (node, addr) in self.walk(target, spin) {
            if !out.iter().any(|o| o.addr == addr) {
                out.push(Dest { node, addr: addr.to_string() });
            }
        }
        out
    }

    /// The candidates of [`View::candidates`] in the same order, repeats
    /// included, borrowed and unallocated. Why a walk: `pick` runs once
    /// per request of a pipeline, and collecting the list (its vectors and
    /// address strings) was an eighth of the client's CPU on hot scoring
    /// (sixteenth Step 4 session); the first match of a walk is the first
    /// match of the list, since dropping repeats keeps first occurrences.
    fn walk(&self, target: Target, spin: usize) -> impl Iterator<Item = (Option<NodeId>, &str)> {
        let map = &self.table.map;
        let (head, group, by): (Option<NodeId>, &[NodeId], usize) = match target {
            Target::Leader(s) => {
                (self.table.leaders.get(s as usize).copied().flatten(), map.replicas(s), 0)
            }
            Target::Meta => (self.table.meta_leader, &map.meta_voters, 0),
            Target::Replica(s) => (None, map.replicas(s), spin),
            Target::Any => (None, &[], 0),
        };
        let members = rotated(&map.nodes, spin).map(|n| (Some(n.id), n.client.as_str()));
        let seeds = rotated(&self.seeds, if map.nodes.is_empty() { spin } else { 0 });
        head.into_iter()
            .chain(rotated(group, by).copied())
            .filter_map(|n| map.node(n).map(|info| (Some(n), info.client.as_str())))
            .chain(members)
            .chain(seeds.map(|a| (None, a.as_str())))
    }

    /// Where to send a call for `target` now: the best candidate that has
    /// not failed lately, else the best candidate anyway.
    pub(crate) fn pick(&self, target: Target, now: Instant, spin: usize) -> Option<Dest> {
        let fine = |a: &str| !self.is_down(a, now) && !self.is_doubtful(a, now);
        let (node, addr) = (self.walk(target, spin).find(|&(_, a)| fine(a)))
            .or_else(|| self.walk(target, spin).find(|&(_, a)| !self.is_down(a, now)))
            .or_else(|| self.walk(target, spin).next())?;
        Some(Dest { node, addr: addr.to_string() })
    }

    /// Whether some candidate for `target` other than `addr` is up: a call
    /// that failed at `addr` can go there at once, without backing off.
    pub(crate) fn has_other(&self, target: Target, addr: &str, now: Instant) -> bool {
        self.walk(target, 0).any(|(_, a)| a != addr && !self.is_down(a, now))
    }

    /// Addresses to ask for a fresh table, best first: members that have
    /// not failed lately (the metadata leader first, as it knows the newest
    /// map), the seeds, then the members that failed.
    pub(crate) fn refresh_order(&self, now: Instant, spin: usize) -> Vec<String> {
        let all = self.candidates(Target::Meta, spin);
        let (up, down): (Vec<Dest>, Vec<Dest>) =
            all.into_iter().partition(|d| !self.is_down(&d.addr, now));
        let (sure, doubtful): (Vec<Dest>, Vec<Dest>) =
            up.into_iter().partition(|d| !self.is_doubtful(&d.addr, now));
        let mut out: Vec<String> = sure.into_iter().chain(doubtful).map(|d| d.addr).collect();
        for s in &self.seeds {
            if !out.contains(s) {
                out.push(s.clone());
            }
        }
        for d in down {
            if !out.contains(&d.addr) {
                out.push(d.addr);
            }
        }
        out
    }

    /// Applies a `NotLeader` hint: remembers the group's leader (or that it
    /// has none) and the map's epoch, and says what the call should do.
    pub(crate) fn learn(&mut self, hint: &LeaderHint, now: Instant) -> Learned {
        if hint.epoch > self.table.map.epoch {
            self.stale = true;
        }
        let shards = self.shards();
        if hint.shard == shards {
            self.table.meta_leader = hint.leader;
        } else if let Some(slot) = self.table.leaders.get_mut(hint.shard as usize) {
            *slot = hint.leader;
        } else {
            // A shard this map does not have: the map is older than the cluster's.
            self.stale = true;
        }
        match hint.leader {
            None => Learned::Wait,
            Some(n) => match self.dest(n) {
                None => Learned::Refresh,
                Some(d) if self.is_down(&d.addr, now) => Learned::Wait,
                Some(d) => Learned::Retry(d),
            },
        }
    }
}

/// `items` from position `by` (modulo their number) round to the start.
fn rotated<T>(items: &[T], by: usize) -> impl Iterator<Item = &T> {
    let k = if items.is_empty() { 0 } else { by % items.len() };
    items[k..].iter().chain(&items[..k])
}

#[cfg(test)]
mod tests {
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
        let counts = Request::Counts(CountsRequest { biz: 1, entities: vec![1, 2] });
        assert_eq!(target(&counts, 3), Target::Any);
        assert_eq!(target(&Request::Ping, 3), Target::Any);
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
        assert_eq!(
            target(&q(BoardRef::TypeId(t.into())), 3),
            Target::Leader(board_shard(4, &key, 3))
        );
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
            Target::Any => {}
        }
        let all: Vec<NodeId> = map.nodes.iter().map(|n| n.id).collect();
        nodes.extend(rotated(&all, spin));
        let mut out: Vec<Dest> = Vec::new();
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
            .chain([Target::Meta, Target::Any])
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
                        let fine =
                            |d: &&Dest| !v.is_down(&d.addr, now) && !v.is_doubtful(&d.addr, now);
                        let want = (all.iter().find(fine))
                            .or_else(|| all.iter().find(|d| !v.is_down(&d.addr, now)))
                            .or(all.first())
                            .cloned();
                        assert_eq!(v.pick(t, now, spin), want, "{t:?} spin {spin} marks {marks:b}");
                        let other =
                            all.iter().any(|d| d.addr != addrs[0] && !v.is_down(&d.addr, now));
                        assert_eq!(v.has_other(t, &addrs[0], now), other);
                    }
                }
            }
        }
    }
}
