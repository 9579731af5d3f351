//! How a node hot for long is relieved on its own: the metadata leader
//! looks at every node's hot keys once a second (`hot_relief.rs`), and this
//! pure policy picks at most one relief: an actor (a board, an entity)
//! moved to another shard, or two shards' leaderships exchanged.
//!
//! ```text
//! every look:
//!   a swap of leaderships recorded and not yet followed by the leaders ─> nothing
//!     (until they follow, at most SWAP_WAIT)
//!   the move: actors at hot_move_min_rps or more (summed over the nodes that
//!     counted them), not moved in the last COOLDOWN, heaviest first ─> its shard's
//!     leader node is the source; the least loaded other node that leads a shard is the
//!     target; moved only if the target's load plus the actor's stays below the
//!     source's ─> the quietest shard that node leads
//!   the swap (`hot_move/swap.rs`): the most loaded node hands one of its shards to
//!     another node, which hands one back, if that lowers the higher of their loads
//!     by hot_move_min_rps or more
//!   both ─> the swap, unless the move leaves the busiest node less loaded by more
//!     than hot_move_min_rps
//!   the chosen relief is made once it has been possible for hot_move_after: an
//!     actor hot that long without a break; a swap relieving the same node at every
//!     look that long
//! ```
//!
//! A node's load is the requests a second of the hot keys (boards, entities,
//! users) whose shards it leads: the keys it serves as a leader. A relief
//! that would only shift the hot spot (the other node would end up as
//! loaded) is not made. Why a swap wins unless the move is clearly better
//! (the keys an actor's shard holds beside it, a few requests each, stay
//! with a move and go with a swap): it moves no data, and each
//! of its two shards stops taking writes for one hand-off (~22 ms), where
//! an actor's move holds its writes for its copy (100–170 ms); and it is
//! the only relief of a node whose load is mostly one actor, or keys that
//! do not move (users' lists): that actor stays where
//! it is and the node's other shards go to a quieter node, each for one of
//! that node's quieter shards, so every node still leads its share (the
//! leader spread keeps it). The cooldowns keep a board, an entity, or a
//! shard's leadership, from going back and forth when loads are close.

mod swap;

pub use swap::Swap;

use plaudit_proto::placement::{BoardKey, EntityKey};
use plaudit_proto::ShardId;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// An actor moved, or a shard whose leadership was swapped, on its own is
/// not moved or swapped again for this long.
pub const COOLDOWN: Duration = Duration::from_secs(60);
/// An actor whose move the policy picked and the mover gave up (its copy
/// too large, its target without a quorum) is not picked again for this
/// long: each try freezes it and copies it for nothing.
pub const GAVE_UP_FOR: Duration = Duration::from_secs(3600);
/// How long a recorded swap may take to be followed by the leaders (the
/// leader balancer hands a group over within ~5 s) before the policy
/// decides again.
pub const SWAP_WAIT: Duration = Duration::from_secs(30);

/// `hot_move_*` settings; `min_rps` 0 turns reliefs off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub min_rps: u64,
    pub after: Duration,
}

/// An actor the policy may move.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Actor {
    Board(BoardKey),
    Entity(EntityKey),
}

/// A hot actor as one look saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hot {
    pub actor: Actor,
    /// Where it lives now.
    pub shard: ShardId,
    pub rps: u64,
}

/// What one look saw.
#[derive(Debug, Default, Clone)]
pub struct Look {
    /// Each hot actor.
    pub actors: Vec<Hot>,
    /// Requests a second of the hot keys (actors and users) on each shard
    /// (index: shard).
    pub shard_load: Vec<u64>,
    /// Each shard's leader, if known (index: shard).
    pub leaders: Vec<Option<u64>>,
    /// Each shard's replicas (index: shard): a leadership goes only to one.
    pub replicas: Vec<Vec<u64>>,
}

impl Look {
    fn shard_load(&self, s: ShardId) -> u64 {
        self.shard_load.get(s as usize).copied().unwrap_or(0)
    }

    /// The shards `node` leads.
    fn led_by(&self, node: u64) -> impl Iterator<Item = ShardId> + '_ {
        (0..self.leaders.len() as ShardId).filter(move |&s| self.leaders[s as usize] == Some(node))
    }

    /// Requests a second of the hot keys `node` serves as a leader.
    pub fn node_load(&self, node: u64) -> u64 {
        self.led_by(node).map(|s| self.shard_load(s)).sum()
    }

    /// Each node that leads a shard, with its load (for the log).
    pub fn loads(&self) -> Vec<(u64, u64)> {
        self.leader_nodes().into_iter().map(|n| (n, self.node_load(n))).collect()
    }

    /// The nodes that lead a shard, lowest id first.
    fn leader_nodes(&self) -> Vec<u64> {
        let mut n: Vec<u64> = self.leaders.iter().flatten().copied().collect();
        n.sort_unstable();
        n.dedup();
        n
    }

    /// The highest node load once `shift` (load, from, to) has moved.
    fn max_after(&self, shift: u64, from: u64, to: u64) -> u64 {
        self.leader_nodes()
            .into_iter()
            .map(|n| {
                let load = self.node_load(n);
                if n == from {
                    load.saturating_sub(shift)
                } else if n == to {
                    load + shift
                } else {
                    load
                }
            })
            .max()
            .unwrap_or(0)
    }
}

/// What the policy decided to do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Relief {
    /// Move the actor to the shard.
    Move(Actor, ShardId),
    /// Exchange two shards' leaderships.
    Swap(Swap),
}

/// What the policy remembers between looks.
#[derive(Debug, Default)]
pub struct HotMoves {
    hot_since: HashMap<Actor, Instant>,
    moved_at: HashMap<Actor, Instant>,
    gave_up: HashMap<Actor, Instant>,
    /// The node a swap has relieved at every look since when (which swap
    /// may change from look to look as loads wobble).
    swap_since: Option<(u64, Instant)>,
    swapped_at: HashMap<ShardId, Instant>,
    /// The swap recorded last, until the leaders follow it.
    pending: Option<(Swap, Instant)>,
}

impl HotMoves {
    /// The relief to make now, if any.
    pub fn decide(&mut self, p: Policy, look: &Look, now: Instant) -> Option<Relief> {
        if p.min_rps == 0 {
            return None;
        }
        self.moved_at.retain(|_, at| now.duration_since(*at) < COOLDOWN);
        self.gave_up.retain(|_, at| now.duration_since(*at) < GAVE_UP_FOR);
        self.swapped_at.retain(|_, at| now.duration_since(*at) < COOLDOWN);
        if let Some((s, at)) = self.pending {
            if !s.followed(&look.leaders) && now.duration_since(at) < SWAP_WAIT {
                return None;
            }
            self.pending = None;
        }
        let mv = self.best_move(p, look, now);
        let cooling = |s: ShardId| self.swapped_at.contains_key(&s);
        let sw = swap::best(look, p.min_rps, cooling);
        match &sw {
            Some((s, _)) if self.swap_since.is_some_and(|(from, _)| from == s.from) => {}
            Some((s, _)) => self.swap_since = Some((s.from, now)),
            None => self.swap_since = None,
        }
        let swap_ready = |since: Instant| now.duration_since(since) >= p.after;
        match (mv, sw) {
            (Some((_, _, moved_max)), Some((s, swapped_max)))
                if swapped_max <= moved_max + p.min_rps =>
            {
                let since = self.swap_since.map(|(_, t)| t)?;
                swap_ready(since).then(|| self.record_swap(s, now))
            }
            (None, Some((s, _))) => {
                let since = self.swap_since.map(|(_, t)| t)?;
                swap_ready(since).then(|| self.record_swap(s, now))
            }
            (Some((actor, to, _)), _) => {
                let ready = self.hot_since.get(&actor).is_some_and(|t| swap_ready(*t));
                ready.then(|| {
                    self.moved_at.insert(actor.clone(), now);
                    self.hot_since.remove(&actor);
                    Relief::Move(actor, to)
                })
            }
            (None, None) => None,
        }
    }

    /// The mover gave up the move of `actor` this policy picked.
    pub fn gave_up(&mut self, actor: Actor, now: Instant) {
        self.gave_up.insert(actor, now);
    }

    fn record_swap(&mut self, s: Swap, now: Instant) -> Relief {
        self.swapped_at.insert(s.hot, now);
        self.swapped_at.insert(s.back, now);
        self.swap_since = None;
        self.pending = Some((s, now));
        Relief::Swap(s)
    }

    /// The heaviest hot actor whose move relieves, its target shard
    /// and the highest node load after it; updates how long each actor has
    /// been hot.
    fn best_move(&mut self, p: Policy, look: &Look, now: Instant) -> Option<(Actor, ShardId, u64)> {
        let hot: HashMap<&Actor, (ShardId, u64)> = look
            .actors
            .iter()
            .filter(|h| h.rps >= p.min_rps)
            .map(|h| (&h.actor, (h.shard, h.rps)))
            .collect();
        self.hot_since.retain(|b, _| hot.contains_key(b));
        for b in hot.keys() {
            self.hot_since.entry((*b).clone()).or_insert(now);
        }
        let mut candidates: Vec<(&Actor, ShardId, u64)> = hot
            .iter()
            .filter(|(b, _)| !self.moved_at.contains_key(**b) && !self.gave_up.contains_key(**b))
            .map(|(b, (s, rps))| (*b, *s, *rps))
            .collect();
        candidates.sort_by(|x, y| y.2.cmp(&x.2).then_with(|| x.0.cmp(y.0)));
        candidates.into_iter().find_map(|(actor, shard, rps)| {
            let (to, max) = target(look, shard, rps)?;
            Some((actor.clone(), to, max))
        })
    }
}

/// The shard to move an actor of `rps` on `from` to, if a move relieves,
/// and the highest node load after it.
fn target(look: &Look, from: ShardId, rps: u64) -> Option<(ShardId, u64)> {
    let src = (*look.leaders.get(from as usize)?)?;
    let quiet = look
        .leader_nodes()
        .into_iter()
        .filter(|&n| n != src)
        .min_by_key(|&n| (look.node_load(n), n))?;
    if look.node_load(quiet) + rps >= look.node_load(src) {
        return None;
    }
    // The shard of that node with the least hot load on it.
    let to = look.led_by(quiet).min_by_key(|&s| (look.shard_load(s), s))?;
    Some((to, look.max_after(rps, src, quiet)))
}

#[cfg(test)]
mod tests;
