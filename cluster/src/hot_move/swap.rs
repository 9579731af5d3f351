//! The best exchange of two shards' leaderships for the most loaded node:
//! it hands shard `hot` to node `to`, which hands shard `back` to it.
//!
//! Why an exchange and not a hand-off alone: the leader spread
//! (`rebalance::spread_leaders`) keeps every node at its share of
//! leaderships, so a node given one more would be handed one away again.
//! An exchange keeps the shares and moves the difference of the two
//! shards' loads.

use super::Look;
use plaudit_proto::ShardId;

/// Two shards whose leaderships are exchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Swap {
    /// A shard `from` leads, handed to `to`.
    pub hot: ShardId,
    pub from: u64,
    /// A shard `to` leads, handed to `from`.
    pub back: ShardId,
    pub to: u64,
}

impl Swap {
    /// Whether `leaders` (index: shard) show the exchange made.
    pub fn followed(&self, leaders: &[Option<u64>]) -> bool {
        let led = |s: ShardId| leaders.get(s as usize).copied().flatten();
        led(self.hot) == Some(self.to) && led(self.back) == Some(self.from)
    }
}

/// The exchange that leaves the highest node load lowest, with that load,
/// if it is at least `min_gain` below the most loaded node's now. Only the
/// most loaded node gives (the lowest id of equals); the taker must hold a
/// replica of what it takes and the giver of what it gets back; shards for
/// which `cooling` holds are left alone. Of equals: the one that gives the
/// less loaded shard (the hot actor stays where it is, and the fewer
/// writes wait for the hand-off), then to the quieter node, then the
/// lowest shards.
pub fn best(look: &Look, min_gain: u64, cooling: impl Fn(ShardId) -> bool) -> Option<(Swap, u64)> {
    let nodes = look.leader_nodes();
    let from = nodes.iter().copied().max_by_key(|&n| (look.node_load(n), std::cmp::Reverse(n)))?;
    let load = look.node_load(from);
    let holds = |s: ShardId, n: u64| look.replicas.get(s as usize).is_some_and(|r| r.contains(&n));
    // (highest load after, load given, taker's load, shards): lowest wins.
    type Rank = (u64, u64, u64, ShardId, ShardId);
    let mut best: Option<(Rank, Swap)> = None;
    for &to in nodes.iter().filter(|&&n| n != from) {
        for hot in look.led_by(from).filter(|&s| !cooling(s) && holds(s, to)) {
            for back in look.led_by(to).filter(|&s| !cooling(s) && holds(s, from)) {
                let (give, take) = (look.shard_load(hot), look.shard_load(back));
                if give <= take {
                    continue;
                }
                let max = look.max_after(give - take, from, to);
                if max + min_gain > load {
                    continue;
                }
                let rank = (max, give, look.node_load(to), hot, back);
                if best.is_none_or(|(r, _)| rank < r) {
                    best = Some((rank, Swap { hot, from, back, to }));
                }
            }
        }
    }
    best.map(|((max, ..), s)| (s, max))
}
