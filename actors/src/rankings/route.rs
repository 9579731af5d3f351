//! Where an event goes: checks it against its ranking (dimensions present,
//! filters) and the clock (not past the future horizon), and names every
//! sub-board it touches, one per granularity, each marked expired if its
//! window is older than the ranking keeps. Also turns a query's board
//! reference into the same `TypeId`. Pure: the caller passes the clock.
//!
//! **Why a future horizon.** Retention deletes windows that have ended
//! long enough ago; a window that starts in the year 292 billion never
//! does, so one event stamped `i64::MAX` (or in milliseconds by mistake)
//! would leave sub-boards for ever. An event later than `now + horizon` is
//! therefore `filtered`, like an event whose window has expired: both are
//! events outside the time the ranking keeps, reported per board and never
//! stored, rather than errors that fail a batch of otherwise good events.
//! The horizon (a node setting, default one day) leaves room for clients
//! whose clocks run ahead. The check runs at the edge with the node's clock,
//! before anything is proposed, so the log only carries admitted events and
//! apply stays free of clocks.

use plaudit_proto::rankings::{dims_in_order, DimsMismatch, RankDef};
use plaudit_proto::scoring::{BoardRef, ScoreRequest};
use plaudit_proto::window::{window_back, window_start, Granularity, TypeId};
use plaudit_proto::WireError;

/// The sub-boards an admitted event lands on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub type_id: TypeId,
    /// Older than `retention` windows: reported as filtered, never stored.
    pub expired: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    Boards(Vec<Target>),
    /// A filter refused the event (the reason is for logs and metrics).
    Filtered(&'static str),
}

/// Dimension values in the ranking's order; every dimension exactly once.
pub fn dim_values(def: &RankDef, given: &[(String, u64)]) -> Result<Vec<u64>, WireError> {
    dims_in_order(&def.dims, given).map_err(|m| {
        WireError::bad_request(match m {
            DimsMismatch::Unknown(name) => {
                format!("ranking {} has no dimension {name:?} (it has {:?})", def.id, def.dims)
            }
            DimsMismatch::Twice(name) => format!("dimension {name:?} given twice"),
            DimsMismatch::Missing(name) => format!("dimension {name:?} is missing"),
        })
    })
}

/// Is a window starting at `start` still kept at `now` (both epoch seconds)?
pub fn is_kept(def: &RankDef, gran: Granularity, start: i64, now: i64) -> bool {
    let current = window_start(gran, def.utc_offset, now);
    start >= window_back(gran, def.utc_offset, current, def.settings.retention)
}

/// The sub-board of every granularity for an event at `ts` with these
/// dimension values, each marked expired or not at `now`.
pub fn targets(def: &RankDef, dims: Vec<u64>, ts: i64, now: i64) -> Vec<Target> {
    def.granularities
        .iter()
        .map(|&gran| {
            let start = window_start(gran, def.utc_offset, ts);
            let type_id = TypeId { gran, start, dims: dims.clone() };
            Target { type_id, expired: !is_kept(def, gran, start, now) }
        })
        .collect()
}

/// Checks one event at `now` (epoch seconds) and names its sub-boards; an
/// event stamped later than `now + future_horizon` is filtered.
///
/// The checks come in two parts so that a caller that remembers routes
/// (`cluster/src/score_route.rs`) runs exactly these: what depends on the
/// event alone ([`beyond_horizon`], [`event_filtered`]) and what depends
/// on its dimension values ([`dims_filtered`], [`targets`]).
pub fn admit(
    def: &RankDef,
    ev: &ScoreRequest,
    now: i64,
    future_horizon: i64,
) -> Result<Admission, WireError> {
    let dims = dim_values(def, &ev.dims)?;
    if beyond_horizon(ev, now, future_horizon) {
        return Ok(Admission::Filtered("beyond the future horizon"));
    }
    if let Some(why) = dims_filtered(def, &dims).or_else(|| event_filtered(def, ev)) {
        return Ok(Admission::Filtered(why));
    }
    let targets = targets(def, dims, ev.ts, now);
    Ok(Admission::Boards(targets))
}

/// Is the event stamped later than `now + future_horizon`?
pub fn beyond_horizon(ev: &ScoreRequest, now: i64, future_horizon: i64) -> bool {
    ev.ts > now.saturating_add(future_horizon)
}

/// Why the ranking's dimension filters refuse these values, if they do.
pub fn dims_filtered(def: &RankDef, dims: &[u64]) -> Option<&'static str> {
    let refused = def
        .settings
        .filters
        .dims
        .iter()
        .any(|(name, filter)| !def.dim_index(name).is_some_and(|i| filter.admits(dims[i])));
    refused.then_some("dimension")
}

/// Why the ranking's item and score filters refuse the event, if they do.
pub fn event_filtered(def: &RankDef, ev: &ScoreRequest) -> Option<&'static str> {
    let f = &def.settings.filters;
    if f.items.as_ref().is_some_and(|filter| !filter.admits(ev.item)) {
        return Some("item");
    }
    if f.score_range.is_some_and(|(lo, hi)| ev.score < lo || ev.score > hi) {
        return Some("score range");
    }
    None
}

/// The sub-board a query names, checked against the ranking.
pub fn board_of(def: &RankDef, board: &BoardRef) -> Result<TypeId, WireError> {
    let t = match board {
        BoardRef::TypeId(s) => TypeId::parse(s)
            .ok_or_else(|| WireError::bad_request(format!("{s:?} is not a type_id")))?,
        BoardRef::At { dims, granularity, ts } => TypeId {
            gran: *granularity,
            start: window_start(*granularity, def.utc_offset, *ts),
            dims: dim_values(def, dims)?,
        },
    };
    if !def.granularities.contains(&t.gran) {
        return Err(WireError::bad_request(format!(
            "ranking {} has no {} boards",
            def.id,
            t.gran.as_str()
        )));
    }
    if t.dims.len() != def.dims.len() {
        return Err(WireError::bad_request(format!(
            "ranking {} boards have {} dimension values, not {}",
            def.id,
            def.dims.len(),
            t.dims.len()
        )));
    }
    if window_start(t.gran, def.utc_offset, t.start) != t.start {
        return Err(WireError::bad_request(format!("{} does not start a window", t.start)));
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaudit_proto::rankings::{Aggregation, RankSettings, TieMode, ValueFilter};
    use plaudit_proto::window::UtcOffset;

    const TS: i64 = 1713165315; // 2024-04-15 15:15:15 at +08:00
    /// A future horizon of one day.
    const H: i64 = 86_400;

    fn def() -> RankDef {
        RankDef {
            id: 1,
            name: "gifts".into(),
            dims: vec!["ruid".into()],
            granularities: vec![Granularity::Month, Granularity::Day],
            utc_offset: UtcOffset::parse("+08:00").unwrap(),
            aggregation: Aggregation::Incr,
            ties: TieMode::EarlierFirst,
            settings: RankSettings { retention: 2, ..RankSettings::default() },
        }
    }

    fn event(dims: &[(&str, u64)]) -> ScoreRequest {
        ScoreRequest {
            rank: 1,
            item: 5,
            score: 10,
            sub: None,
            dims: dims.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
            ts: TS,
            event_id: 1,
        }
    }

    fn names(a: Admission) -> Vec<(String, bool)> {
        match a {
            Admission::Boards(ts) => {
                ts.into_iter().map(|t| (t.type_id.format(), t.expired)).collect()
            }
            Admission::Filtered(why) => panic!("filtered: {why}"),
        }
    }

    #[test]
    fn the_worked_example_lands_in_its_month_and_day() {
        let got = names(admit(&def(), &event(&[("ruid", 110000260)]), TS, H).unwrap());
        assert_eq!(
            got,
            vec![
                ("month:1711900800_110000260".to_string(), false),
                ("day:1713110400_110000260".to_string(), false)
            ]
        );
    }

    #[test]
    fn windows_older_than_the_retention_are_expired() {
        let d = def();
        let ev = ScoreRequest { ts: TS - 3 * 86_400, ..event(&[("ruid", 1)]) };
        // Three days back: the day window is beyond 2 kept, the month is current.
        let expired: Vec<bool> =
            names(admit(&d, &ev, TS, H).unwrap()).into_iter().map(|n| n.1).collect();
        assert_eq!(expired, vec![false, true]);
        let two_days = ScoreRequest { ts: TS - 2 * 86_400, ..ev };
        let expired: Vec<bool> =
            names(admit(&d, &two_days, TS, H).unwrap()).into_iter().map(|n| n.1).collect();
        assert_eq!(expired, vec![false, false]);
    }

    #[test]
    fn events_past_the_future_horizon_are_filtered() {
        let d = def();
        let at = |ts: i64| admit(&d, &ScoreRequest { ts, ..event(&[("ruid", 1)]) }, TS, H);
        assert!(matches!(at(TS + H), Ok(Admission::Boards(_))), "the horizon itself is in");
        assert!(matches!(at(TS + 3600), Ok(Admission::Boards(_))), "a clock an hour ahead");
        for far in [TS + H + 1, TS + 365 * H, i64::MAX] {
            assert!(matches!(at(far), Ok(Admission::Filtered(_))), "{far}");
        }
        // The horizon is added without overflow, and dimensions are still checked first.
        let ev = ScoreRequest { ts: i64::MAX, ..event(&[("ruid", 1)]) };
        assert!(matches!(admit(&d, &ev, i64::MAX - 5, H), Ok(Admission::Boards(_))));
        let bad = ScoreRequest { ts: i64::MAX, ..event(&[("room", 1)]) };
        assert!(admit(&d, &bad, TS, H).is_err());
    }

    #[test]
    fn dimensions_must_match_the_definition() {
        let d = def();
        for bad in [vec![], vec![("room", 1)], vec![("ruid", 1), ("ruid", 2)]] {
            assert!(admit(&d, &event(&bad), TS, H).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn filters_refuse_events() {
        let mut d = def();
        d.settings.filters.dims = vec![("ruid".into(), ValueFilter::Deny(vec![9]))];
        d.settings.filters.items = Some(ValueFilter::Allow(vec![5]));
        d.settings.filters.score_range = Some((1, 100));
        assert!(matches!(admit(&d, &event(&[("ruid", 1)]), TS, H), Ok(Admission::Boards(_))));
        let filtered =
            |ev: ScoreRequest| matches!(admit(&d, &ev, TS, H), Ok(Admission::Filtered(_)));
        assert!(filtered(event(&[("ruid", 9)])));
        assert!(filtered(ScoreRequest { item: 6, ..event(&[("ruid", 1)]) }));
        assert!(filtered(ScoreRequest { score: 101, ..event(&[("ruid", 1)]) }));
        assert!(filtered(ScoreRequest { score: 0, ..event(&[("ruid", 1)]) }));
    }

    #[test]
    fn board_references_resolve_to_the_same_board() {
        let d = def();
        let by_name = board_of(&d, &BoardRef::TypeId("day:1713110400_7".into())).unwrap();
        let dims = vec![("ruid".to_string(), 7)];
        let at = BoardRef::At { dims, granularity: Granularity::Day, ts: TS };
        assert_eq!(board_of(&d, &at).unwrap(), by_name);
        for bad in ["week:1712505600_7", "day:1713110400", "day:1713110401_7", "nonsense"] {
            assert!(board_of(&d, &BoardRef::TypeId(bad.into())).is_err(), "{bad}");
        }
    }
}
