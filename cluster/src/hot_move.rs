//! When a hot board is moved on its own: the metadata leader looks at every
//! node's hot keys once a second (`board_mover.rs`), and this pure policy
//! picks at most one board to move.
//!
//! ```text
//! every look: boards at hot_move_min_rps or more (summed over the nodes that counted them)
//!   hot for hot_move_after without a break, not moved in the last COOLDOWN,
//!   heaviest first ─> its shard's leader node is the source; the least loaded
//!   other node that leads a shard is the target; moved only if the target's load
//!   plus the board's stays below the source's ─> the quietest shard that node leads
//! ```
//!
//! A node's load is the requests a second of the hot keys (boards, entities,
//! users) whose shards it leads: the keys it serves as a leader. A board
//! whose move would only shift the hot spot (the target would end up as
//! loaded as the source) stays. The cooldown keeps a board from moving
//! back and forth when loads are close.

use plaudit_proto::placement::BoardKey;
use plaudit_proto::ShardId;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A board moved on its own is not moved again for this long.
pub const COOLDOWN: Duration = Duration::from_secs(60);

/// `hot_move_*` settings; `min_rps` 0 turns moves off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub min_rps: u64,
    pub after: Duration,
}

/// What one look saw.
#[derive(Debug, Default, Clone)]
pub struct Look {
    /// Each hot board, where it lives and its requests a second.
    pub boards: Vec<(BoardKey, ShardId, u64)>,
    /// Requests a second of the hot keys each node serves as a leader.
    pub node_load: HashMap<u64, u64>,
    /// Each shard's leader, if known (index: shard).
    pub leaders: Vec<Option<u64>>,
}

/// What the policy remembers between looks.
#[derive(Debug, Default)]
pub struct HotMoves {
    hot_since: HashMap<BoardKey, Instant>,
    moved_at: HashMap<BoardKey, Instant>,
}

impl HotMoves {
    /// The board to move now and its target shard, if any.
    pub fn decide(&mut self, p: Policy, look: &Look, now: Instant) -> Option<(BoardKey, ShardId)> {
        if p.min_rps == 0 {
            return None;
        }
        let hot: HashMap<&BoardKey, (ShardId, u64)> = look
            .boards
            .iter()
            .filter(|(_, _, rps)| *rps >= p.min_rps)
            .map(|(b, s, rps)| (b, (*s, *rps)))
            .collect();
        self.hot_since.retain(|b, _| hot.contains_key(b));
        for b in hot.keys() {
            self.hot_since.entry((*b).clone()).or_insert(now);
        }
        self.moved_at.retain(|_, at| now.duration_since(*at) < COOLDOWN);
        let mut ready: Vec<(&BoardKey, ShardId, u64)> = hot
            .iter()
            .filter(|(b, _)| {
                self.hot_since.get(**b).is_some_and(|s| now.duration_since(*s) >= p.after)
                    && !self.moved_at.contains_key(**b)
            })
            .map(|(b, (s, rps))| (*b, *s, *rps))
            .collect();
        ready.sort_by(|x, y| y.2.cmp(&x.2).then_with(|| x.0.cmp(y.0)));
        for (board, shard, rps) in ready {
            if let Some(to) = target(look, shard, rps) {
                self.moved_at.insert(board.clone(), now);
                self.hot_since.remove(board);
                return Some((board.clone(), to));
            }
        }
        None
    }
}

/// The shard to move a board of `rps` on `from` to, if a move relieves.
fn target(look: &Look, from: ShardId, rps: u64) -> Option<ShardId> {
    let src = (*look.leaders.get(from as usize)?)?;
    let load = |n: u64| look.node_load.get(&n).copied().unwrap_or(0);
    let quiet = look
        .leaders
        .iter()
        .flatten()
        .copied()
        .filter(|&n| n != src)
        .min_by_key(|&n| (load(n), n))?;
    if load(quiet) + rps >= load(src) {
        return None;
    }
    // The shard of that node with the least hot load on it.
    let on_shard = |s: ShardId| -> u64 {
        look.boards.iter().filter(|(_, at, _)| *at == s).map(|(_, _, r)| r).sum()
    };
    (0..look.leaders.len() as ShardId)
        .filter(|&s| look.leaders[s as usize] == Some(quiet))
        .min_by_key(|&s| (on_shard(s), s))
}

#[cfg(test)]
mod tests;
