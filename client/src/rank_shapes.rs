//! Where a scoring event goes: the shard of the sub-board it scores, which
//! the SDK can name once it knows the ranking's shape (its dimension names
//! in order, its granularities and UTC offset: `RankDef` fixes them for the
//! ranking's life; `UpdateRank` changes only settings).
//!
//! ```text
//! Score(rank, dims, ts) ─► shape known? ─► one granularity? ─► dims as the ranking names them?
//!     ─► TypeId { gran, window_start(gran, offset, ts), dims in order } ─► board_shard ─► its leader
//!   any "no" ─► any node (which resolves the ranking and passes the event on)
//! unknown rank ─► asked for once (`GetRank`, in the background); until the
//!   answer comes, or for NEGATIVE_FOR after a refusal, events go to any node
//! ```
//!
//! Why: a node that does not lead the board's shard takes an event through
//! its request path and forwards it to the leader, a hop with its own
//! future and peer call; sent to the leader, the event is proposed with the
//! other writes of the connection's read pass (`cluster/src/staged.rs`).
//! Measured: the rankings mix on three nodes ran at ~47k ops/s with events
//! sent to any node and ~64k with them sent to the board's leader
//! (`docs/benchmarks.md`).
//!
//! Only a routing hint: a node still resolves the ranking, checks the
//! event and routes it by its own placements, so a shape that is wrong or
//! old costs a forward, never a wrong answer. An event of a ranking with
//! several granularities scores one board per granularity, on shards of
//! their own, and goes to any node as before.
//!
//! Pure, and bounded: past `MAX_SHAPES` rankings it starts over.

use plaudit_proto::rankings::{dims_in_order, RankDef, RankId};
use plaudit_proto::scoring::ScoreRequest;
use plaudit_proto::window::{window_start, Granularity, TypeId, UtcOffset};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Rankings remembered at most.
pub(crate) const MAX_SHAPES: usize = 4096;
/// How long a ranking the SDK could not learn (none by that id, or its
/// definition refused to this client's token) is not asked for again.
pub(crate) const NEGATIVE_FOR: Duration = Duration::from_secs(30);

/// What routing needs of a ranking with one granularity.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Shape {
    dims: Vec<String>,
    gran: Granularity,
    offset: UtcOffset,
}

#[derive(Debug, Clone)]
enum Known {
    /// One board per event: routed by it.
    One(Shape),
    /// Several boards per event: to any node.
    Several,
    /// Being asked for.
    Asking,
    /// Not learned (since this instant).
    Unknown(Instant),
}

#[derive(Debug, Clone, Default)]
pub(crate) struct RankShapes {
    known: HashMap<RankId, Known>,
}

impl RankShapes {
    /// The sub-board `e` scores, if its ranking's shape is known and names
    /// exactly one; `None` sends it to any node.
    pub(crate) fn board(&self, e: &ScoreRequest) -> Option<TypeId> {
        let Some(Known::One(shape)) = self.known.get(&e.rank) else { return None };
        // In the ranking's order, by the node's own rule; an event that
        // names a dimension twice, names one the ranking lacks, or leaves
        // one out is the node's to refuse.
        let dims = dims_in_order(&shape.dims, &e.dims).ok()?;
        let start = window_start(shape.gran, shape.offset, e.ts);
        Some(TypeId { gran: shape.gran, start, dims })
    }

    /// Whether the SDK should ask for `rank`'s definition now: it is not
    /// known, not being asked for, and not refused within `NEGATIVE_FOR`.
    /// A `true` marks it asked for: the caller asks, then calls `learned`.
    pub(crate) fn should_ask(&mut self, rank: RankId, now: Instant) -> bool {
        match self.known.get(&rank) {
            Some(Known::One(_) | Known::Several | Known::Asking) => false,
            Some(Known::Unknown(at)) if now.duration_since(*at) < NEGATIVE_FOR => false,
            _ => {
                if self.known.len() >= MAX_SHAPES {
                    self.known.clear();
                }
                self.known.insert(rank, Known::Asking);
                true
            }
        }
    }

    /// What asking for `rank` gave: its definition, or nothing (refused,
    /// missing, or no answer), which is asked for again after `NEGATIVE_FOR`.
    pub(crate) fn learned(&mut self, rank: RankId, def: Option<&RankDef>, now: Instant) {
        let known = match def {
            Some(d) if d.id == rank => match d.granularities.as_slice() {
                [gran] => {
                    Known::One(Shape { dims: d.dims.clone(), gran: *gran, offset: d.utc_offset })
                }
                _ => Known::Several,
            },
            _ => Known::Unknown(now),
        };
        self.known.insert(rank, known);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaudit_proto::rankings::{Aggregation, RankSettings, TieMode};

    fn def(id: RankId, dims: &[&str], grans: &[Granularity]) -> RankDef {
        RankDef {
            id,
            name: format!("r{id}"),
            dims: dims.iter().map(|d| d.to_string()).collect(),
            granularities: grans.to_vec(),
            utc_offset: UtcOffset::from_seconds(8 * 3600).expect("+08:00"),
            aggregation: Aggregation::Incr,
            ties: TieMode::EarlierFirst,
            settings: RankSettings::default(),
        }
    }

    fn event(rank: RankId, dims: &[(&str, u64)], ts: i64) -> ScoreRequest {
        ScoreRequest {
            rank,
            item: 1,
            score: 1,
            sub: None,
            dims: dims.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
            ts,
            event_id: 9,
        }
    }

    #[test]
    fn a_known_ranking_names_the_board_the_node_would_score() {
        let now = Instant::now();
        let mut s = RankShapes::default();
        let e = event(5, &[("room", 7), ("anchor", 3)], 1_700_000_000);
        assert_eq!(s.board(&e), None, "unknown: any node");
        assert!(s.should_ask(5, now));
        assert!(!s.should_ask(5, now), "asked once");
        s.learned(5, Some(&def(5, &["anchor", "room"], &[Granularity::Day])), now);
        let d = def(5, &["anchor", "room"], &[Granularity::Day]);
        let want = TypeId {
            gran: Granularity::Day,
            start: window_start(Granularity::Day, d.utc_offset, e.ts),
            dims: vec![3, 7],
        };
        assert_eq!(s.board(&e), Some(want), "dims in the ranking's order, the event's window");
        assert!(!s.should_ask(5, now), "known");
    }

    #[test]
    fn events_the_node_must_judge_go_to_any_node() {
        let now = Instant::now();
        let mut s = RankShapes::default();
        s.learned(1, Some(&def(1, &["a", "b"], &[Granularity::Total])), now);
        assert!(s.board(&event(1, &[("a", 1), ("b", 2)], 0)).is_some());
        assert_eq!(s.board(&event(1, &[("a", 1)], 0)), None, "a dimension missing");
        assert_eq!(s.board(&event(1, &[("a", 1), ("a", 2)], 0)), None, "given twice");
        assert_eq!(s.board(&event(1, &[("a", 1), ("c", 2)], 0)), None, "not the ranking's");
        s.learned(2, Some(&def(2, &["a"], &[Granularity::Day, Granularity::Month])), now);
        assert_eq!(s.board(&event(2, &[("a", 1)], 0)), None, "one board per granularity");
        assert!(!s.should_ask(2, now));
    }

    #[test]
    fn a_ranking_not_learned_is_asked_for_again_later() {
        let now = Instant::now();
        let mut s = RankShapes::default();
        assert!(s.should_ask(4, now));
        s.learned(4, None, now);
        assert!(!s.should_ask(4, now + NEGATIVE_FOR / 2));
        assert!(s.should_ask(4, now + NEGATIVE_FOR));
        // An answer about another ranking teaches nothing about this one.
        s.learned(4, Some(&def(8, &["a"], &[Granularity::Total])), now);
        assert_eq!(s.board(&event(4, &[("a", 1)], 0)), None);
    }

    #[test]
    fn memory_is_bounded() {
        let now = Instant::now();
        let mut s = RankShapes::default();
        for r in 0..(MAX_SHAPES as u32 + 10) {
            assert!(s.should_ask(r, now));
            s.learned(r, Some(&def(r, &["a"], &[Granularity::Total])), now);
        }
        assert!(s.known.len() <= MAX_SHAPES);
    }
}
