//! One sub-board: members with exact integer scores, kept in rank order.
//!
//! Ordering is a single ascending key per member, `(score desc, tie, member
//! asc)`, encoded as three `u64`s so that comparisons are integer compares
//! and never floating point (the Redis "integer + time fraction" trick loses
//! precision once scores pass 2^53). The tie component depends on the mode:
//!
//! | mode | tie key | meaning |
//! | --- | --- | --- |
//! | `earlier_first` | `stamp` | reached the score first ranks higher |
//! | `later_first` | `!stamp` | reached the score last ranks higher |
//! | `custom` | `!sub` | higher sub-score ranks higher |
//!
//! A stamp is the board's own counter, bumped on every change. It comes from
//! the order in which changes are applied, which is the Raft log order, so
//! every replica computes the same stamps; event timestamps would not do (many
//! events share a second, and late events would reorder the past).
//!
//! Pure: no IO. The board is the truth while its shard holds it; its
//! members are written out whole (`members`) when the shard lets it go or
//! takes a snapshot, not member by member as they change.

use crate::rankings::order::OrderList;
use plaudit_proto::keyed_hash::KeyedHash;
use plaudit_proto::rankings::{Aggregation, ItemId, TieMode};
use std::collections::HashMap;

/// A member's stored value: its score and the raw tie value (a stamp, or
/// the sub-score in `custom` mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    pub score: i64,
    pub tie: u64,
}

/// The position of a member in rank order: smaller ranks higher.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BoardKey {
    score: u64,
    tie: u64,
    item: ItemId,
}

/// How a board orders and combines scores (from the ranking definition).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    pub aggregation: Aggregation,
    pub ties: TieMode,
    pub cap: usize,
}

/// One row of a query result; `rank` starts at 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ranked {
    pub rank: u64,
    pub item: ItemId,
    pub score: i64,
    /// The sub-score, in `custom` mode.
    pub sub: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BoardError {
    #[error("score of item {item} would overflow: {current} + {delta}")]
    Overflow { item: ItemId, current: i64, delta: i64 },
}

pub struct Board {
    rules: Rules,
    /// Keyed-hashed: clients choose the item ids (`keyed_hash.rs`).
    members: HashMap<ItemId, Member, KeyedHash>,
    order: OrderList<BoardKey>,
    /// The next stamp to hand out; stored with the board.
    next_stamp: u64,
}

/// `current + delta`, or the overflow that refuses the event.
fn incremented(item: ItemId, current: i64, delta: i64) -> Result<i64, BoardError> {
    current.checked_add(delta).ok_or(BoardError::Overflow { item, current, delta })
}

/// Scores map to keys so that a higher score is a smaller key: flipping the
/// sign bit makes `i64` order equal `u64` order, and `!` reverses it.
fn score_key(score: i64) -> u64 {
    !((score as u64) ^ (1 << 63))
}

/// The inverse of [`score_key`].
fn score_of_key(key: u64) -> i64 {
    ((!key) ^ (1 << 63)) as i64
}

impl Board {
    pub fn new(rules: Rules) -> Board {
        Board { rules, members: HashMap::default(), order: OrderList::new(), next_stamp: 1 }
    }

    /// Rebuilds a board from stored members (any order) and its stored stamp.
    pub fn from_loaded(rules: Rules, loaded: Vec<(ItemId, Member)>, next_stamp: u64) -> Board {
        let mut b = Board::new(rules);
        let mut keys: Vec<BoardKey> = loaded.iter().map(|(i, m)| b.key(*i, *m)).collect();
        keys.sort_unstable();
        b.order = OrderList::from_sorted(keys);
        b.members = loaded.into_iter().collect();
        b.next_stamp = next_stamp.max(1);
        // A cap lowered while the board was stored takes effect on load.
        b.enforce_cap();
        b
    }

    pub fn rules(&self) -> Rules {
        self.rules
    }

    /// Settings that may change at run time (the cap); ordering rules are fixed.
    pub fn set_cap(&mut self, cap: usize) {
        self.rules.cap = cap;
        self.enforce_cap();
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    pub fn next_stamp(&self) -> u64 {
        self.next_stamp
    }

    fn key(&self, item: ItemId, m: Member) -> BoardKey {
        let tie = match self.rules.ties {
            TieMode::EarlierFirst => m.tie,
            TieMode::LaterFirst | TieMode::Custom => !m.tie,
        };
        BoardKey { score: score_key(m.score), tie, item }
    }

    /// Applies one event's score; returns the member's score afterwards (it
    /// may have been pushed out by the cap at once). Fails without changing
    /// anything if an increment would overflow.
    pub fn apply(&mut self, item: ItemId, score: i64, sub: Option<u32>) -> Result<i64, BoardError> {
        let old = self.members.get(&item).copied();
        match self.next_state(item, old, score, sub)? {
            Some(m) => {
                self.place(item, old, m);
                Ok(m.score)
            }
            None => Ok(old.map_or(score, |o| o.score)),
        }
    }

    /// Whether `apply(item, score, _)` would succeed, without applying it:
    /// an edge asks this of every sub-board of an event before it proposes
    /// the event to any (`rankings/all_or_nothing.rs`). Agrees with `apply`
    /// (property-tested) and changes nothing, not even the stamp counter.
    pub fn check(&self, item: ItemId, score: i64) -> Result<(), BoardError> {
        match (self.rules.aggregation, self.members.get(&item)) {
            (Aggregation::Incr, Some(o)) => incremented(item, o.score, score).map(|_| ()),
            // A new member takes the score as it is; `best` and `set` never add.
            _ => Ok(()),
        }
    }

    /// A member's state after one event, from `cur`: `None` if nothing moves
    /// (so it keeps the time it reached its score). Takes a stamp when it
    /// moves. Touches neither the order nor the member map.
    fn next_state(
        &mut self,
        item: ItemId,
        cur: Option<Member>,
        score: i64,
        sub: Option<u32>,
    ) -> Result<Option<Member>, BoardError> {
        let custom = self.rules.ties == TieMode::Custom;
        // In custom mode the tie value is the sub-score: an event without one
        // keeps the member's. Otherwise it is a stamp, taken below.
        let new_sub = match (custom, sub, cur) {
            (false, _, _) => 0,
            (true, Some(s), _) => u64::from(s),
            (true, None, Some(o)) => o.tie,
            (true, None, None) => 0,
        };
        // What "higher" compares: the sub-score only matters in custom mode.
        let rank_value = |m: Member| (m.score, if custom { m.tie } else { 0 });
        let new_score = match (self.rules.aggregation, cur) {
            (_, None) | (Aggregation::Set, Some(_)) => score,
            (Aggregation::Incr, Some(o)) => incremented(item, o.score, score)?,
            (Aggregation::Best, Some(o)) => {
                if (score, new_sub) <= rank_value(o) {
                    return Ok(None);
                }
                score
            }
        };
        if let Some(o) = cur {
            if (new_score, new_sub) == rank_value(o) {
                return Ok(None); // nothing moved: keep the time it was reached
            }
        }
        let tie = if custom {
            new_sub
        } else {
            let stamp = self.next_stamp;
            self.next_stamp += 1;
            stamp
        };
        Ok(Some(Member { score: new_score, tie }))
    }

    /// Moves a member from `old` to `new` in rank order, then enforces the cap.
    fn place(&mut self, item: ItemId, old: Option<Member>, new: Member) {
        let placed = match old {
            Some(o) => self.order.replace(&self.key(item, o), self.key(item, new)),
            None => self.order.insert(self.key(item, new)),
        };
        debug_assert!(placed, "keys hold their item: no two members share one");
        self.members.insert(item, new);
        self.enforce_cap();
    }

    /// Starts a run of events for one member (a leader coalesces a member's
    /// events into one command): each `MemberRun::apply` behaves exactly as
    /// `Board::apply` would, one after the other, but the member moves in
    /// rank order once, when the run ends, instead of once per event.
    pub fn run(&mut self, item: ItemId) -> MemberRun<'_> {
        let old = self.members.get(&item).copied();
        // The cap can push someone out only when a new member joins a full
        // board; such a run applies event by event (the member may even be
        // pushed out and come back). A member already on the board never
        // makes it longer, so its run can wait to move.
        let direct = old.is_none() && self.order.len() >= self.rules.cap;
        MemberRun { board: self, item, old, cur: old, moved: false, direct }
    }

    /// Drops members below the cap, lowest first.
    fn enforce_cap(&mut self) {
        while self.order.len() > self.rules.cap {
            let Some(k) = self.order.pop_last() else { break };
            self.members.remove(&k.item);
        }
    }

    /// Every member, in item order (what is stored for the board: the
    /// order is that of its keys, whatever the hashing).
    pub fn members(&self) -> Vec<(ItemId, Member)> {
        let mut out: Vec<_> = self.members.iter().map(|(&i, &m)| (i, m)).collect();
        out.sort_unstable_by_key(|(i, _)| *i);
        out
    }

    pub fn score(&self, item: ItemId) -> Option<i64> {
        self.members.get(&item).map(|m| m.score)
    }

    /// A member's row from its key alone: the key holds its score and tie
    /// (`key` inverted), so a top-N reads no member map entry (a hash and a
    /// cache miss per row, 4% of the node in the rankings mix).
    fn ranked(&self, pos: usize, k: &BoardKey) -> Ranked {
        let tie = match self.rules.ties {
            TieMode::EarlierFirst => k.tie,
            TieMode::LaterFirst | TieMode::Custom => !k.tie,
        };
        let sub = (self.rules.ties == TieMode::Custom).then_some(tie as u32);
        Ranked { rank: pos as u64 + 1, item: k.item, score: score_of_key(k.score), sub }
    }

    /// The member's row, if it is on the board. O(log n).
    pub fn rank_of(&self, item: ItemId) -> Option<Ranked> {
        let m = *self.members.get(&item)?;
        let k = self.key(item, m);
        let pos = self.order.rank(&k)?;
        Some(self.ranked(pos, &k))
    }

    /// `limit` rows from 0-based `offset`.
    pub fn top(&self, offset: usize, limit: usize) -> Vec<Ranked> {
        self.order
            .iter_from(offset)
            .take(limit)
            .enumerate()
            .map(|(i, k)| self.ranked(offset + i, k))
            .collect()
    }

    /// Up to `k` rows above the member, the member, and up to `k` below.
    pub fn around(&self, item: ItemId, k: usize) -> Vec<Ranked> {
        let Some(r) = self.rank_of(item) else { return Vec::new() };
        let pos = r.rank as usize - 1;
        let from = pos.saturating_sub(k);
        self.top(from, pos - from + 1 + k)
    }

    /// Estimated memory held by this board, for metrics and the benchmark.
    pub fn heap_bytes(&self) -> usize {
        // hashbrown: one (key, value) slot plus one control byte per bucket,
        // and buckets are 8/7 of the capacity it reports.
        let slot = std::mem::size_of::<(ItemId, Member)>() + 1;
        self.order.heap_bytes() + self.members.capacity() * 8 / 7 * slot
    }
}

/// See [`Board::run`]. The member's final move happens when the run is
/// dropped, so an early return cannot leave the board half-updated.
pub struct MemberRun<'a> {
    board: &'a mut Board,
    item: ItemId,
    old: Option<Member>,
    cur: Option<Member>,
    /// Whether any event moved the member (it may have come back to `old`).
    moved: bool,
    direct: bool,
}

impl MemberRun<'_> {
    /// Applies one event; returns the member's score afterwards (`None` if
    /// the cap pushed it out at once). An overflow changes nothing.
    pub fn apply(&mut self, score: i64, sub: Option<u32>) -> Result<Option<i64>, BoardError> {
        if self.direct {
            self.board.apply(self.item, score, sub)?;
            return Ok(self.board.score(self.item));
        }
        if let Some(m) = self.board.next_state(self.item, self.cur, score, sub)? {
            self.cur = Some(m);
            self.moved = true;
        }
        Ok(self.score())
    }

    /// The member's score at this point of the run.
    pub fn score(&self) -> Option<i64> {
        if self.direct {
            self.board.score(self.item)
        } else {
            self.cur.map(|m| m.score)
        }
    }
}

impl Drop for MemberRun<'_> {
    fn drop(&mut self) {
        if let (false, true, Some(new)) = (self.direct, self.moved, self.cur) {
            self.board.place(self.item, self.old, new);
        }
    }
}

#[cfg(test)]
mod tests;
