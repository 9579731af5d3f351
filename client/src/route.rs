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
    /// none (ping, routing).
    Any,
    /// The seeds first, in the order given: a cluster's status as the node
    /// the caller named sees it (a node cut off from the others would say
    /// something else, and should be asked only when named).
    Seed,
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
        | Request::CreateRankInfo(_)
        | Request::GetRank(_)
        | Request::GetRankInfo(_)
        | Request::SetBoardLimit(_)
        | Request::BoardUsage(_)
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
        Request::Stale(inner) | Request::Replica(inner) => match target(inner, shards) {
            Target::Leader(s) => Target::Replica(s),
            _ => Target::Any,
        },
        // A read goes to the leader of its first entity's shard: the SDK
        // splits a read by leader node (`split.rs`), so that node leads
        // every shard of the part and reads it in place; a node that does
        // not (a stale table, a read sent whole) fans the rest out.
        Request::Counts(r) => match r.entities.first() {
            Some(&first) => Target::Leader(shard_of(r.biz, first, shards)),
            None => Target::Any,
        },
        Request::Score(_)
        | Request::Boards(_)
        | Request::Ping
        | Request::Hello(_)
        | Request::Routing
        | Request::EntityRoutes
        | Request::EntityRoutesPage(_)
        // Any node passes it on to the node it names (or leads the change).
        | Request::DrainNode(_)
        | Request::MoveBoard(_)
        | Request::MoveEntity(_)
        | Request::Members(_) => Target::Any,
        // Every node follows the metadata group: its leader has the newest.
        Request::Placements | Request::EntityPlacements => Target::Meta,
        Request::ClusterStatus | Request::Nodes | Request::HotKeys(_) => Target::Seed,
        // Each node tells its own; the SDK asks each (`cluster/cached.rs`).
        Request::HotSet(_) => Target::Any,
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
    /// Boards learned to live off their hash shard (`placed.rs`).
    pub(crate) placed: crate::placed::Placed,
    /// Entities the cluster said were moved (`entity_routes.rs`).
    pub(crate) entities: crate::entity_routes::EntityRoutes,
    /// The rankings' shapes, which route scoring events (`rank_shapes.rs`).
    pub(crate) shapes: crate::rank_shapes::RankShapes,
}

impl View {
    /// A view with no table yet: only the seeds.
    pub(crate) fn new(seeds: Vec<String>) -> View {
        let table = RoutingTable { map: Default::default(), leaders: vec![], meta_leader: None };
        View {
            table,
            seeds,
            down: HashMap::new(),
            doubtful: HashMap::new(),
            stale: false,
            placed: Default::default(),
            entities: Default::default(),
            shapes: Default::default(),
        }
    }

    pub(crate) fn table(&self) -> &RoutingTable {
        &self.table
    }

    /// Where `req` goes: `target`, with the boards and entities learned to
    /// have moved where they live.
    pub(crate) fn target(&self, req: &Request) -> Target {
        if let Some(t) = self.score_target(req) {
            return t;
        }
        let shards = self.shards();
        self.entities.target(req, self.placed.target(req, target(req, shards)), shards)
    }

    /// A scoring event's target: the leader of its sub-board's shard (where
    /// a learned placement says, or its hash shard) when the ranking's shape
    /// names one board; `None` for any other request, or an event that goes
    /// to any node (`rank_shapes.rs`).
    pub(crate) fn score_target(&self, req: &Request) -> Option<Target> {
        let Request::Score(e) = req else { return None };
        let shards = self.shards();
        if shards == 0 {
            return None;
        }
        let board = self.shapes.board(e)?;
        let shard = self
            .placed
            .board(e.rank, &board)
            .unwrap_or_else(|| board_shard(e.rank, &board.to_key(), shards));
        Some(Target::Leader(shard))
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
    /// address strings) was an eighth of the client's CPU on hot scoring;
    /// the first match of a walk is the first match of the list, since
    /// dropping repeats keeps first occurrences.
    fn walk(&self, target: Target, spin: usize) -> impl Iterator<Item = (Option<NodeId>, &str)> {
        let map = &self.table.map;
        let (head, group, by): (Option<NodeId>, &[NodeId], usize) = match target {
            Target::Leader(s) => {
                (self.table.leaders.get(s as usize).copied().flatten(), map.replicas(s), 0)
            }
            Target::Meta => (self.table.meta_leader, &map.meta_voters, 0),
            Target::Replica(s) => (None, map.replicas(s), spin),
            Target::Any | Target::Seed => (None, &[], 0),
        };
        let members = rotated(&map.nodes, spin).map(|n| (Some(n.id), n.client.as_str()));
        let seeds = rotated(&self.seeds, if map.nodes.is_empty() { spin } else { 0 });
        let named = match target {
            Target::Seed => &self.seeds[..],
            _ => &[],
        };
        let node_at = |a: &str| map.nodes.iter().find(|n| n.client == a).map(|n| n.id);
        named
            .iter()
            .map(move |a| (node_at(a), a.as_str()))
            .chain(
                head.into_iter()
                    .chain(rotated(group, by).copied())
                    .filter_map(|n| map.node(n).map(|info| (Some(n), info.client.as_str()))),
            )
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
mod tests;
