//! A worker thread's memory of where recent scoring events went: the next
//! event on the same sub-board skips the work that names the board (its
//! dimension values in the ranking's order, the filters on them, its
//! windows, the binary key, the shard's hash and the formatted type id).
//!
//! ```text
//! event ─> same definition (pointer), dimensions, windows, clock second as an entry? ─> its route
//!              no ─> route::dim_values, dims_filtered, targets ─> remembered (up to ROUTES)
//! ```
//!
//! Why a hit is the answer the full check gives: what is remembered is a
//! pure function of the ranking's definition, the event's dimensions as
//! given, the windows its timestamp falls in, and the clock's second (a
//! window's expiry depends on it). An entry is used only when all four
//! match: the memo holds one second's entries and starts over at the
//! next. The definition is compared by pointer: the directory puts a new
//! `Arc` for every change, and the entry holds its `Arc`, so an old one's
//! address cannot be reused while it is remembered. What depends on the
//! event itself (the future horizon, the item and score filters) is checked
//! by the caller on every event (`staged.rs`).
//!
//! Measured on a hot board (`docs/benchmarks.md`): naming the board was a
//! fifth of the connection's CPU per event, most of it formatting the type
//! id and hashing the key. A thread, not a connection, remembers: with
//! the rankings mix's 1,000 boards, a connection's eight routes missed
//! four events in five, and naming was 4.5% of the node.
//!
//! Memory: at most `ROUTES` entries per worker thread; an event whose
//! dimension names exceed `MAX_NAME_BYTES` or that has more than
//! `MAX_DIMS` dimensions is routed without being remembered.

use crate::hash_buckets::HashBuckets;
use plaudit_actors::rankings::route;
use plaudit_proto::rankings::RankDef;
use plaudit_proto::routing::board_shard;
use plaudit_proto::scoring::ScoreRequest;
use plaudit_proto::window::{window_end, window_start, Granularity};
use plaudit_proto::ShardId;
use std::cell::{Cell, RefCell};
use std::sync::Arc;

/// Routes one thread remembers; past that it starts over. A full memo
/// holds about 6–7 MiB per worker thread (hashbrown's table of ~136-byte
/// slots, doubled to 32,768 slots past 14,336 entries and kept when it
/// starts over, plus each entry's dimensions and key on the heap). 4,096
/// was below cold scoring's 10,000 boards: the memo started over every
/// 4,096 new routes, and most events missed.
pub const ROUTES: usize = 16_384;
/// Dimension names (bytes, all of an event's together) beyond which an
/// event's route is not remembered.
pub const MAX_NAME_BYTES: usize = 128;
/// Dimensions beyond which an event's route is not remembered.
pub const MAX_DIMS: usize = 4;

/// Where an event that lands on exactly one live sub-board goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoardRoute {
    /// `TypeId::to_key` of the sub-board.
    pub type_key: Vec<u8>,
    /// `TypeId::format` of the sub-board, for the reply.
    pub type_id: Arc<str>,
    pub shard: ShardId,
}

struct Entry {
    def: Arc<RankDef>,
    shards: u32,
    dims: Vec<(String, u64)>,
    /// The timestamps whose windows are the entry's: `[from, to)`.
    window: (i64, i64),
    /// `None`: not one live board (several, an expired one, or refused by
    /// a dimension filter).
    route: Option<BoardRoute>,
    /// Whether the board passed `route_checked`'s check (it is reserved
    /// against its ranking's limit): once it has, it does for the rest of
    /// the entry's second, and the check is not asked again.
    passed: Cell<bool>,
}

impl Entry {
    /// Whether `ev` under `def` is this entry's (in the memo's second).
    fn matches(&self, def: &Arc<RankDef>, ev: &ScoreRequest, shards: u32) -> bool {
        Arc::ptr_eq(&self.def, def)
            && self.shards == shards
            && (self.window.0..self.window.1).contains(&ev.ts)
            && self.dims == ev.dims
    }
}

/// Remembered routes, by a hash of (definition address, dimensions)
/// (`hash_buckets.rs`): a lookup borrows the event's dimensions (no copy
/// unless a route is new). Entries hold only the clock second `now`; a
/// later second starts over.
#[derive(Default)]
pub struct ScoreRoutes {
    routes: HashBuckets<Entry, ROUTES>,
    /// The clock second of every entry.
    now: i64,
    /// Where the last route was found: tried first, without hashing the
    /// event's dimensions (a hot board's events come one after another).
    last: Option<(u64, usize)>,
}

impl ScoreRoutes {
    /// The route of `ev` under `def` at `now` (epoch seconds) if it lands
    /// on exactly one live sub-board its dimension filters admit; `None`
    /// otherwise (including dimensions that do not fit the ranking).
    pub fn route(
        &mut self,
        def: &Arc<RankDef>,
        ev: &ScoreRequest,
        now: i64,
        shards: u32,
    ) -> Option<BoardRoute> {
        self.route_checked(def, ev, now, shards, |_| false).map(|(r, _)| r)
    }

    /// `route`, and whether its board passes `check` (`staged.rs`: is it
    /// reserved against its ranking's limit). A pass is remembered with
    /// the route for the rest of the second (a board once reserved stays
    /// so while its window is kept); a failure is asked again next time.
    /// Measured on a hot board: asking the node-wide reservation memo on
    /// every event was ~3% of an event's CPU.
    pub fn route_checked(
        &mut self,
        def: &Arc<RankDef>,
        ev: &ScoreRequest,
        now: i64,
        shards: u32,
        check: impl Fn(&BoardRoute) -> bool,
    ) -> Option<(BoardRoute, bool)> {
        let checked = |e: &Entry| {
            let route = e.route.clone()?;
            if !e.passed.get() && check(&route) {
                e.passed.set(true);
            }
            Some((route, e.passed.get()))
        };
        if now < self.now {
            // A pass that began before the second the memo holds.
            let route = board_route(def, ev, now, shards).ok()??;
            let passed = check(&route);
            return Some((route, passed));
        }
        if now > self.now {
            self.routes.clear();
            self.last = None;
            self.now = now;
        }
        let is = |e: &Entry| e.matches(def, ev, shards);
        if let Some(e) = self.last.and_then(|(h, i)| self.routes.at(h, i)).filter(|e| is(e)) {
            return checked(e);
        }
        let h = self.routes.hash((Arc::as_ptr(def) as usize, shards, &ev.dims));
        if let Some((i, e)) = self.routes.find(h, is) {
            let found = checked(e);
            self.last = Some((h, i));
            return found;
        }
        let route = board_route(def, ev, now, shards).ok()?;
        let passed = route.as_ref().is_some_and(&check);
        let names: usize = ev.dims.iter().map(|(n, _)| n.len()).sum();
        if ev.dims.len() <= MAX_DIMS && names <= MAX_NAME_BYTES {
            let entry = Entry {
                def: def.clone(),
                shards,
                dims: ev.dims.clone(),
                window: windows_of(def, ev.ts),
                route: route.clone(),
                passed: Cell::new(passed),
            };
            if self.routes.insert(h, entry) {
                self.last = None;
            }
        }
        Some((route?, passed))
    }

    /// Routes remembered now.
    pub fn len(&self) -> usize {
        self.routes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }
}

thread_local! {
    static ROUTES_HERE: RefCell<ScoreRoutes> = RefCell::new(ScoreRoutes::default());
}

/// Calls `f` with this thread's routes (a connection's writes are staged
/// on the thread that reads it).
pub fn with_routes<R>(f: impl FnOnce(&mut ScoreRoutes) -> R) -> R {
    ROUTES_HERE.with(|r| f(&mut r.borrow_mut()))
}

/// The full check, remembering nothing: `Err` for dimensions that do not
/// fit the ranking, `Ok(None)` for anything but one live, admitted board.
pub fn board_route(
    def: &RankDef,
    ev: &ScoreRequest,
    now: i64,
    shards: u32,
) -> Result<Option<BoardRoute>, plaudit_proto::WireError> {
    let dims = route::dim_values(def, &ev.dims)?;
    if route::dims_filtered(def, &dims).is_some() {
        return Ok(None);
    }
    let targets = route::targets(def, dims, ev.ts, now);
    let [t] = targets.as_slice() else { return Ok(None) };
    if t.expired {
        return Ok(None);
    }
    let type_key = t.type_id.to_key();
    let shard = board_shard(ev.rank, &type_key, shards);
    Ok(Some(BoardRoute { type_key, type_id: t.type_id.format().into(), shard }))
}

/// The timestamps that fall in the same window as `ts` for every
/// granularity of the ranking: `[from, to)`.
fn windows_of(def: &RankDef, ts: i64) -> (i64, i64) {
    def.granularities.iter().fold((i64::MIN, i64::MAX), |(from, to), &g| {
        if g == Granularity::Total {
            return (from, to);
        }
        let start = window_start(g, def.utc_offset, ts);
        (from.max(start), to.min(window_end(g, def.utc_offset, ts)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaudit_proto::rankings::{Aggregation, RankSettings, TieMode, ValueFilter};
    use plaudit_proto::window::UtcOffset;
    use proptest::prelude::*;

    const TS: i64 = 1713165315; // 2024-04-15 15:15:15 at +08:00

    fn def(grans: Vec<Granularity>) -> Arc<RankDef> {
        Arc::new(RankDef {
            id: 1,
            name: "gifts".into(),
            dims: vec!["ruid".into()],
            granularities: grans,
            utc_offset: UtcOffset::parse("+08:00").unwrap(),
            aggregation: Aggregation::Incr,
            ties: TieMode::EarlierFirst,
            settings: RankSettings { retention: 2, ..RankSettings::default() },
        })
    }

    fn event(ruid: u64, ts: i64) -> ScoreRequest {
        ScoreRequest {
            rank: 1,
            item: 5,
            score: 10,
            sub: None,
            dims: vec![("ruid".into(), ruid)],
            ts,
            event_id: 1,
        }
    }

    #[test]
    fn a_remembered_route_is_the_full_checks() {
        let d = def(vec![Granularity::Day]);
        let mut routes = ScoreRoutes::default();
        let first = routes.route(&d, &event(7, TS), TS, 16).expect("one live board");
        assert_eq!(first.type_id.as_ref(), "day:1713110400_7");
        assert_eq!(Some(first.clone()), board_route(&d, &event(7, TS), TS, 16).unwrap());
        // The same day later on: remembered, not added again.
        assert_eq!(routes.route(&d, &event(7, TS + 60), TS, 16), Some(first));
        assert_eq!(routes.len(), 1);
    }

    #[test]
    fn a_passed_check_is_remembered_for_the_second_and_a_failed_one_asked_again() {
        let d = def(vec![Granularity::Day]);
        let mut routes = ScoreRoutes::default();
        let asked = Cell::new(0);
        let answer = Cell::new(false);
        let check = |_: &BoardRoute| {
            asked.set(asked.get() + 1);
            answer.get()
        };
        assert!(!routes.route_checked(&d, &event(7, TS), TS, 16, check).unwrap().1);
        assert!(!routes.route_checked(&d, &event(7, TS), TS, 16, check).unwrap().1);
        assert_eq!(asked.get(), 2, "a failure is asked again");
        answer.set(true);
        assert!(routes.route_checked(&d, &event(7, TS), TS, 16, check).unwrap().1);
        answer.set(false);
        assert!(routes.route_checked(&d, &event(7, TS + 1), TS, 16, check).unwrap().1);
        assert_eq!(asked.get(), 3, "a pass is remembered");
        // The next second starts over.
        assert!(!routes.route_checked(&d, &event(7, TS), TS + 1, 16, check).unwrap().1);
    }

    #[test]
    fn another_window_definition_dimension_or_second_is_routed_afresh() {
        let d = def(vec![Granularity::Day]);
        let mut routes = ScoreRoutes::default();
        routes.route(&d, &event(7, TS), TS, 16);
        let next_day = routes.route(&d, &event(7, TS + 86_400), TS + 86_400, 16).unwrap();
        assert_eq!(next_day.type_id.as_ref(), "day:1713196800_7");
        assert_eq!(
            routes.route(&d, &event(8, TS), TS, 16).unwrap().type_id.as_ref(),
            "day:1713110400_8"
        );
        // A changed ranking (a new `Arc`): a dimension filter now refuses 7.
        let mut changed = (*d).clone();
        changed.settings.filters.dims = vec![("ruid".into(), ValueFilter::Allow(vec![8]))];
        let changed = Arc::new(changed);
        assert_eq!(routes.route(&changed, &event(7, TS), TS, 16), None);
        assert!(routes.route(&d, &event(7, TS), TS, 16).is_some(), "the old one still routes");
        assert!(routes.len() <= ROUTES);
    }

    #[test]
    fn an_expired_window_several_boards_or_bad_dimensions_are_not_one_route() {
        let mut routes = ScoreRoutes::default();
        let d = def(vec![Granularity::Day]);
        assert_eq!(routes.route(&d, &event(7, TS - 3 * 86_400), TS, 16), None);
        let two = def(vec![Granularity::Day, Granularity::Total]);
        assert_eq!(routes.route(&two, &event(7, TS), TS, 16), None);
        let mut bad = event(7, TS);
        bad.dims = vec![("nope".into(), 1)];
        assert_eq!(routes.route(&d, &bad, TS, 16), None);
        assert!(board_route(&d, &bad, TS, 16).is_err());
    }

    #[test]
    fn no_more_than_routes_entries_are_kept() {
        let d = def(vec![Granularity::Total]);
        let mut routes = ScoreRoutes::default();
        for ruid in 0..ROUTES as u64 + 10 {
            assert!(routes.route(&d, &event(ruid, TS), TS, 16).is_some());
            assert!(routes.len() <= ROUTES);
        }
        assert_eq!(routes.len(), 10, "it starts over once full");
        // A later second starts over too; an earlier one leaves the memo be.
        routes.route(&d, &event(1, TS), TS + 1, 16);
        assert_eq!(routes.len(), 1);
        assert!(routes.route(&d, &event(2, TS), TS, 16).is_some());
        assert_eq!(routes.len(), 1);
    }

    proptest! {
        /// Whatever sequence of events, rankings and clocks a connection
        /// sees, every route it is given is the one the full check gives.
        #[test]
        fn routes_are_always_the_full_checks(
            steps in prop::collection::vec((0u64..4, -4_000_000i64..200_000, 0i64..3, 0usize..6), 1..200)
        ) {
            let defs = [
                def(vec![Granularity::Day]),
                def(vec![Granularity::Hour, Granularity::Month]),
                def(vec![Granularity::Total]),
                def(vec![Granularity::Hour]),
                def(vec![Granularity::Week]),
                def(vec![Granularity::Month]),
            ];
            let mut routes = ScoreRoutes::default();
            for (ruid, dt, dnow, which) in steps {
                let d = &defs[which];
                let ev = event(ruid, TS + dt);
                let now = TS + dnow * 100_000;
                let want = board_route(d, &ev, now, 16).unwrap();
                prop_assert_eq!(routes.route(d, &ev, now, 16), want);
            }
        }
    }
}
