//! Natural time windows and the names of the sub-boards they create.
//!
//! A ranking keeps one sub-board per granularity (hour, day, ISO week, month)
//! and window, e.g. "today's board" or "April's board", plus an all-time
//! `total`. An event lands in the window that contains its timestamp in the
//! ranking's local time. That local time is a fixed UTC offset, not a named
//! time zone: a fixed offset has no DST, so hours, days and weeks always have
//! their exact length, months are the only uneven windows, and every node
//! computes the same boundaries without a time-zone database. The calendar
//! math is Howard Hinnant's integer `days_from_civil` / `civil_from_days`
//! (proleptic Gregorian), so this module is pure: no IO, no clock, no chrono.
//!
//! Arithmetic is done in `i128`, so every `i64` timestamp is accepted; a
//! bound that would fall outside `i64` (only within a month of its limits)
//! saturates.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;

const HOUR: i128 = 3600;
const DAY: i128 = 86_400;
/// Offsets in use span -12:00..=+14:00 (Kiribati); the accepted range is symmetric.
const MAX_OFFSET: i32 = 14 * 3600;

/// Time granularity of a ranking's sub-boards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
// Text encodings (JSON) use the same names as `as_str` and type ids.
#[serde(rename_all = "lowercase")]
pub enum Granularity {
    Total,
    Hour,
    Day,
    Week,
    Month,
}

impl Granularity {
    /// Declaration order; the index of a granularity here is its storage key byte.
    pub const ALL: [Granularity; 5] = [Self::Total, Self::Hour, Self::Day, Self::Week, Self::Month];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Total => "total",
            Self::Hour => "hour",
            Self::Day => "day",
            Self::Week => "week",
            Self::Month => "month",
        }
    }

    /// Inverse of [`Granularity::as_str`].
    pub fn parse(s: &str) -> Option<Granularity> {
        Self::ALL.into_iter().find(|g| g.as_str() == s)
    }
}

impl fmt::Display for Granularity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A fixed UTC offset in seconds east of UTC, in -14:00..=+14:00 (minute resolution).
///
/// Deserialization goes through [`UtcOffset::from_seconds`], so a corrupt or
/// hostile value cannot smuggle in an offset the calendar math never expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "i32", into = "i32")]
pub struct UtcOffset(i32);

/// An offset outside -14:00..=+14:00 or not a whole number of minutes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("UTC offset of {0} s is not whole minutes within -14:00..=+14:00")]
pub struct InvalidUtcOffset(pub i32);

impl UtcOffset {
    pub const UTC: UtcOffset = UtcOffset(0);

    /// `None` if out of range or not whole minutes.
    pub fn from_seconds(secs: i32) -> Option<UtcOffset> {
        ((-MAX_OFFSET..=MAX_OFFSET).contains(&secs) && secs.rem_euclid(60) == 0)
            .then_some(UtcOffset(secs))
    }

    pub fn seconds(self) -> i32 {
        self.0
    }

    /// Accepts `Z`, `±HH:MM` and `±HHMM` (`-00:00` means UTC).
    pub fn parse(s: &str) -> Option<UtcOffset> {
        if s == "Z" {
            return Some(Self::UTC);
        }
        // Bytes, not str slices: a multi-byte char must be rejected, not split.
        let (sign, rest) = match s.as_bytes().split_first()? {
            (b'+', rest) => (1, rest),
            (b'-', rest) => (-1, rest),
            _ => return None,
        };
        let (h, m) = match *rest {
            [h1, h2, b':', m1, m2] | [h1, h2, m1, m2] => (two_digits(h1, h2)?, two_digits(m1, m2)?),
            _ => return None,
        };
        if m >= 60 {
            return None;
        }
        Self::from_seconds(sign * (h * 3600 + m * 60))
    }

    /// `+08:00`, `-05:30`, `+00:00`.
    pub fn format(self) -> String {
        let sign = if self.0 < 0 { '-' } else { '+' };
        let mins = self.0.unsigned_abs() / 60;
        format!("{sign}{:02}:{:02}", mins / 60, mins % 60)
    }
}

fn two_digits(a: u8, b: u8) -> Option<i32> {
    (a.is_ascii_digit() && b.is_ascii_digit())
        .then(|| i32::from(a - b'0') * 10 + i32::from(b - b'0'))
}

impl TryFrom<i32> for UtcOffset {
    type Error = InvalidUtcOffset;
    fn try_from(secs: i32) -> Result<Self, Self::Error> {
        Self::from_seconds(secs).ok_or(InvalidUtcOffset(secs))
    }
}

impl From<UtcOffset> for i32 {
    fn from(offset: UtcOffset) -> i32 {
        offset.0
    }
}

/// Days since 1970-01-01 of the proleptic Gregorian date `y-m-d` (Hinnant).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Months since 0000-01 (`year * 12 + month - 1`) of the day `z` days after
/// 1970-01-01: the year/month half of Hinnant's `civil_from_days`.
fn month_of_day(z: i64) -> i64 {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let (y, m) = if mp < 10 { (yoe + era * 400, mp + 3) } else { (yoe + era * 400 + 1, mp - 9) };
    y * 12 + m - 1
}

/// Index of the window containing the local instant `local` (seconds): hours,
/// days, weeks or months counted from the epoch. Windows are then consecutive
/// integers, which makes "next" and "n back" plain addition for every granularity.
fn index_of(gran: Granularity, local: i128) -> i128 {
    let days = local.div_euclid(DAY);
    match gran {
        Granularity::Total => 0,
        Granularity::Hour => local.div_euclid(HOUR),
        Granularity::Day => days,
        // 1970-01-01 was a Thursday: week 0 starts Monday 1969-12-29 (day -3).
        Granularity::Week => (days + 3).div_euclid(7),
        // Local days of any i64 instant are below 2^47 in magnitude: `as i64` is exact.
        Granularity::Month => i128::from(month_of_day(days as i64)),
    }
}

/// Local start (seconds) of the window with index `idx`.
fn index_start(gran: Granularity, idx: i128) -> i128 {
    match gran {
        Granularity::Total => 0,
        Granularity::Hour => idx * HOUR,
        Granularity::Day => idx * DAY,
        Granularity::Week => (idx * 7 - 3) * DAY,
        // Month indexes stay below 2^44 even after stepping back u32::MAX months.
        Granularity::Month => {
            let idx = idx as i64;
            let first = days_from_civil(idx.div_euclid(12), idx.rem_euclid(12) + 1, 1);
            i128::from(first) * DAY
        }
    }
}

/// Converts a local instant back to a UTC epoch second, saturating at the `i64` limits.
fn to_utc(offset: UtcOffset, local: i128) -> i64 {
    let utc = local - i128::from(offset.0);
    utc.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

fn local_index(gran: Granularity, offset: UtcOffset, ts: i64) -> i128 {
    index_of(gran, i128::from(ts) + i128::from(offset.0))
}

/// `[start, end)` of the window containing `ts`, in one calendar computation.
fn bounds(gran: Granularity, offset: UtcOffset, ts: i64) -> (i64, i64) {
    if gran == Granularity::Total {
        return (0, i64::MAX);
    }
    let idx = local_index(gran, offset, ts);
    (to_utc(offset, index_start(gran, idx)), to_utc(offset, index_start(gran, idx + 1)))
}

/// Start (epoch seconds, UTC instant) of the natural window of `gran`
/// containing `ts`, in local time `offset`: the local hour start, local
/// midnight, local Monday 00:00 or local 1st of the month 00:00. `Total` is 0
/// for every `ts` (the all-time board has one window, even before 1970).
pub fn window_start(gran: Granularity, offset: UtcOffset, ts: i64) -> i64 {
    bounds(gran, offset, ts).0
}

/// Start of the window `n` windows before the one containing `start`
/// (`start` is normally a window start; `n = 0` gives that window). Months
/// step by calendar month in local time. `Total` is 0 always.
pub fn window_back(gran: Granularity, offset: UtcOffset, start: i64, n: u32) -> i64 {
    if gran == Granularity::Total {
        return 0;
    }
    let idx = local_index(gran, offset, start) - i128::from(n);
    to_utc(offset, index_start(gran, idx))
}

/// End (exclusive) of the window containing `start`: the start of the next
/// window. `Total` never ends: `i64::MAX`.
pub fn window_end(gran: Granularity, offset: UtcOffset, start: i64) -> i64 {
    bounds(gran, offset, start).1
}

/// Window bounds computed once and cached: events arrive roughly in time
/// order, so consecutive events almost always fall into the window of the
/// previous one and skip the calendar math.
#[derive(Debug, Clone, Default)]
pub struct WindowCache {
    /// Last `[start, end)` per `(gran, offset)`. Bounded by the number of
    /// distinct pairs (at most 4 * 1681), in practice a handful.
    last: HashMap<(Granularity, UtcOffset), (i64, i64)>,
}

impl WindowCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// Same result as [`window_start`].
    pub fn start(&mut self, gran: Granularity, offset: UtcOffset, ts: i64) -> i64 {
        // Total needs no math, and its single window would not contain ts < 0.
        if gran == Granularity::Total {
            return 0;
        }
        match self.last.get(&(gran, offset)) {
            Some(&(start, end)) if start <= ts && ts < end => start,
            _ => {
                let (start, end) = bounds(gran, offset, ts);
                self.last.insert((gran, offset), (start, end));
                start
            }
        }
    }
}

/// Names one sub-board of a ranking.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TypeId {
    pub gran: Granularity,
    pub start: i64,
    pub dims: Vec<u64>,
}

/// Digits in canonical form: non-empty, ASCII digits, no leading zero (but "0").
/// Canonical only, so one sub-board has exactly one name.
fn canonical_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
}

impl TypeId {
    /// `{gran}:{start}` then `_{dim}` per dimension value: `day:1713110400_110000260`.
    pub fn format(&self) -> String {
        self.to_string()
    }

    /// Strict inverse of [`TypeId::format`]: only the canonical spelling is
    /// accepted, and `total` must have start 0.
    pub fn parse(s: &str) -> Option<TypeId> {
        let (gran, rest) = s.split_once(':')?;
        let gran = Granularity::parse(gran)?;
        let mut parts = rest.split('_');
        let start = parts.next()?;
        let magnitude = start.strip_prefix('-').unwrap_or(start);
        if !canonical_digits(magnitude) || start == "-0" {
            return None;
        }
        let start = start.parse::<i64>().ok()?;
        if gran == Granularity::Total && start != 0 {
            return None;
        }
        let dims = parts
            .map(|p| if canonical_digits(p) { p.parse::<u64>().ok() } else { None })
            .collect::<Option<Vec<u64>>>()?;
        Some(TypeId { gran, start, dims })
    }

    /// Stable binary key whose byte order is the `(gran, start, dims)` order:
    /// the granularity's index in [`Granularity::ALL`], the start as big-endian
    /// with the sign bit flipped (negative starts sort first), each dim big-endian.
    pub fn to_key(&self) -> Vec<u8> {
        let mut key = Vec::with_capacity(9 + 8 * self.dims.len());
        key.push(self.gran as u8);
        key.extend_from_slice(&((self.start as u64) ^ (1 << 63)).to_be_bytes());
        for d in &self.dims {
            key.extend_from_slice(&d.to_be_bytes());
        }
        key
    }

    /// Inverse of [`TypeId::to_key`]; `None` for anything it cannot produce.
    pub fn from_key(k: &[u8]) -> Option<TypeId> {
        let (&g, rest) = k.split_first()?;
        let gran = *Granularity::ALL.get(usize::from(g))?;
        let (start, dims) = rest.split_first_chunk::<8>()?;
        let start = (u64::from_be_bytes(*start) ^ (1 << 63)) as i64;
        if gran == Granularity::Total && start != 0 {
            return None;
        }
        let chunks = dims.chunks_exact(8);
        if !chunks.remainder().is_empty() {
            return None;
        }
        let dims =
            chunks.map(|c| c.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b))).collect();
        Some(TypeId { gran, start, dims })
    }
}

impl fmt::Display for TypeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.gran, self.start)?;
        for d in &self.dims {
            write!(f, "_{d}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Datelike, FixedOffset, NaiveTime, TimeDelta, Timelike};
    use proptest::prelude::*;
    use Granularity::*;

    fn off(s: &str) -> UtcOffset {
        UtcOffset::parse(s).expect("valid offset")
    }

    fn tid(gran: Granularity, o: &str, ts: i64, dims: &[u64]) -> String {
        TypeId { gran, start: window_start(gran, off(o), ts), dims: dims.to_vec() }.format()
    }

    #[test]
    fn worked_examples() {
        assert_eq!(tid(Month, "+08:00", 1713165315, &[110000260]), "month:1711900800_110000260");
        assert_eq!(tid(Day, "+08:00", 1713165315, &[110000260]), "day:1713110400_110000260");
        assert_eq!(tid(Total, "+08:00", 1713165315, &[]), "total:0");
        assert_eq!(tid(Total, "+08:00", 1713165315, &[7, 9]), "total:0_7_9");
    }

    /// `(gran, offset, ts, expected start)`, hand-checked against `date`/Python.
    const CASES: &[(Granularity, &str, i64, i64)] = &[
        // Sunday 2023-12-31 12:00Z: its week began Monday 2023-12-25.
        (Week, "Z", 1704024000, 1703462400),
        (Week, "Z", 1704067200, 1704067200), // Monday 2024-01-01 00:00 starts a week
        (Month, "+08:00", 1704038399, 1701360000), // Dec 31 23:59:59 local: December
        (Month, "+08:00", 1704038400, 1704038400), // Jan 1 00:00 local: January
        (Week, "+08:00", 1704038399, 1703433600), // week of Mon 2023-12-25 +08:00
        // Leap day 2024-02-29 18:30 at -05:00 (UTC is already March 1).
        (Day, "-05:00", 1709249400, 1709182800),
        (Month, "-05:00", 1709249400, 1706763600),
        (Week, "-05:00", 1709249400, 1708923600),
        // 2024-12-31 22:00 at -09:30 is 2025-01-01 in UTC; its week straddles the year.
        (Day, "-09:30", 1735716600, 1735637400),
        (Week, "-09:30", 1735716600, 1735551000),
        (Month, "-09:30", 1735716600, 1733045400),
        // 2024-03-01 02:00 at +14:00 is still Feb 29 in UTC.
        (Day, "+14:00", 1709208000, 1709200800),
        (Month, "+14:00", 1709208000, 1709200800),
        (Week, "+14:00", 1709208000, 1708855200),
        // 2024-06-30 20:00Z is 2024-07-01 01:45 at +05:45; hours start at :15 UTC.
        (Hour, "+05:45", 1719777600, 1719774900),
        (Day, "+05:45", 1719777600, 1719771300),
        (Month, "+05:45", 1719777600, 1719771300),
        // Before 1970: floor, not truncation.
        (Day, "Z", -1, -86400),
        (Week, "Z", -1, -259200),
        (Month, "Z", -1, -2678400),
    ];

    #[test]
    fn hand_checked_starts() {
        for &(gran, o, ts, want) in CASES {
            assert_eq!(window_start(gran, off(o), ts), want, "{gran} {o} {ts}");
        }
        // Leap February is 29 days long; next month's start follows it.
        let feb = window_start(Month, off("-05:00"), 1709249400);
        assert_eq!(window_end(Month, off("-05:00"), feb), 1709269200);
        assert_eq!(window_back(Month, off("+08:00"), 1704038400, 1), 1701360000);
        assert_eq!(window_back(Month, off("+08:00"), 1704038400, 13), 1669824000);
    }

    #[test]
    fn extremes_saturate_without_panicking() {
        for gran in Granularity::ALL {
            for o in ["-12:00", "+14:00"] {
                for ts in [i64::MIN, i64::MIN + 1, -1, 0, i64::MAX - 1, i64::MAX] {
                    let s = window_start(gran, off(o), ts);
                    assert!(s <= window_end(gran, off(o), s));
                    window_back(gran, off(o), s, u32::MAX);
                }
            }
        }
        assert_eq!(window_end(Total, UtcOffset::UTC, 0), i64::MAX);
    }

    #[test]
    fn offsets_parse_and_format() {
        assert_eq!(off("+08:00").seconds(), 28800);
        assert_eq!(off("-0530").seconds(), -19800);
        assert_eq!(off("Z"), UtcOffset::UTC);
        assert_eq!(off("-00:00").format(), "+00:00");
        assert_eq!(off("-09:30").format(), "-09:30");
        for bad in ["", "+8:00", "+14:01", "-15:00", "+08:60", "08:00", "+08:00 ", "+0+:00", "z"] {
            assert_eq!(UtcOffset::parse(bad), None, "{bad:?}");
        }
        assert_eq!(UtcOffset::from_seconds(30), None);
        assert_eq!(UtcOffset::from_seconds(-50400), Some(off("-14:00")));
        let r: Result<UtcOffset, _> = UtcOffset::try_from(50460);
        assert_eq!(r, Err(InvalidUtcOffset(50460)));
        for g in Granularity::ALL {
            assert_eq!(Granularity::parse(g.as_str()), Some(g));
        }
    }

    #[test]
    fn type_ids_parse_strictly() {
        let t = TypeId { gran: Day, start: -86400, dims: vec![0, u64::MAX] };
        assert_eq!(TypeId::parse("day:-86400_0_18446744073709551615"), Some(t));
        let bad = "day:|day:1_|day:1__2|day:+1|day:01|day:-0|day:1_07|day:1_+7|day:1_x|day:1 ";
        let more = ["Day:1", "total:5", "day:1:2", "day:1_18446744073709551616"];
        for bad in bad.split('|').chain(more) {
            assert_eq!(TypeId::parse(bad), None, "{bad:?}");
        }
        assert_eq!(TypeId::from_key(&[5, 0, 0, 0, 0, 0, 0, 0, 0]), None);
        assert_eq!(TypeId::from_key(&[2, 0, 0, 0, 0, 0, 0, 0, 0, 1]), None);
    }

    /// The independent model: chrono's view of the same truncation.
    fn chrono_start(gran: Granularity, o: UtcOffset, ts: i64) -> i64 {
        let fixed = FixedOffset::east_opt(o.seconds()).expect("offset in range");
        let utc = DateTime::from_timestamp(ts, 0).expect("ts in chrono's range");
        let local = utc.with_timezone(&fixed).naive_local();
        let date = local.date();
        let (date, hour) = match gran {
            Total => return 0,
            Hour => (date, local.hour()),
            Day => (date, 0),
            Week => (date - TimeDelta::days(date.weekday().num_days_from_monday().into()), 0),
            Month => (date.with_day(1).expect("day 1 exists"), 0),
        };
        let t = NaiveTime::from_hms_opt(hour, 0, 0).expect("valid time");
        date.and_time(t).and_local_timezone(fixed).single().expect("fixed offset").timestamp()
    }

    fn any_gran() -> impl Strategy<Value = Granularity> {
        prop::sample::select(Granularity::ALL.to_vec())
    }

    fn any_offset() -> impl Strategy<Value = UtcOffset> {
        let set = ["+08:00", "-05:00", "+05:45", "-09:30", "+14:00", "-12:00", "+00:00"];
        prop_oneof![
            prop::sample::select(set.map(off).to_vec()),
            (-840i32..=840).prop_map(|m| UtcOffset::from_seconds(m * 60).expect("in range")),
        ]
    }

    /// Years 1971..2200, plus far past and future (chrono reaches about ±262,000 years).
    fn any_ts() -> impl Strategy<Value = i64> {
        prop_oneof![3 => 31_536_000i64..7_258_118_400, 1 => -8_000_000_000_000i64..8_000_000_000_000]
    }

    proptest! {
        #[test]
        fn start_matches_chrono_and_contains_ts(
            gran in any_gran(), o in any_offset(), ts in any_ts(),
        ) {
            let start = window_start(gran, o, ts);
            prop_assert_eq!(start, chrono_start(gran, o, ts));
            let end = window_end(gran, o, start);
            prop_assert!(gran == Total || (start <= ts && ts < end));
            prop_assert_eq!(window_start(gran, o, end - 1), start);
            prop_assert_eq!(window_start(gran, o, start), start);
        }

        #[test]
        fn back_steps_one_window_at_a_time(
            gran in any_gran(), o in any_offset(), ts in any_ts(), n in 0u32..40,
        ) {
            let start = window_start(gran, o, ts);
            let mut want = start;
            for _ in 0..n {
                want = window_start(gran, o, want - 1);
            }
            prop_assert_eq!(window_back(gran, o, start, n), want);
        }

        #[test]
        fn cache_agrees(o in any_offset(), evs in prop::collection::vec((any_gran(), any_ts()), 1..60)) {
            let mut cache = WindowCache::new();
            for (gran, ts) in evs {
                // Hit inside the window, then probe just past its end and go back in time.
                let end = window_end(gran, o, window_start(gran, o, ts));
                for t in [ts, end - 1, end, ts - 3600, ts] {
                    prop_assert_eq!(cache.start(gran, o, t), window_start(gran, o, t));
                }
            }
        }

        #[test]
        fn type_ids_round_trip(
            a in (any_gran(), any::<i64>(), prop::collection::vec(any::<u64>(), 0..4)),
            b in (any_gran(), any::<i64>(), prop::collection::vec(any::<u64>(), 0..4)),
        ) {
            let mk = |(gran, start, dims): (Granularity, i64, Vec<u64>)| {
                TypeId { gran, start: if gran == Total { 0 } else { start }, dims }
            };
            let (a, b) = (mk(a), mk(b));
            prop_assert_eq!(TypeId::parse(&a.format()), Some(a.clone()));
            prop_assert_eq!(TypeId::from_key(&a.to_key()), Some(a.clone()));
            // Fixed-width fields make byte order the field order, for any lengths.
            prop_assert_eq!(a.to_key().cmp(&b.to_key()), a.cmp(&b));
            let b = TypeId { dims: b.dims, ..a.clone() }; // same board family: dims decide
            prop_assert_eq!(a.to_key().cmp(&b.to_key()), a.cmp(&b));
        }
    }
}
