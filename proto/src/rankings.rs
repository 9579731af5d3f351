//! Ranking definitions: what a leaderboard is made of (dimensions, natural
//! windows, aggregation, tie-break), which parts may change after creation,
//! and their validation. Shared by the node (registry) and the SDK and CLI.
//!
//! Structural fields decide where every stored score lives and how it is
//! ordered, so they are fixed at creation: changing a ranking's windows or
//! sort mode would silently reinterpret every sub-board already written.
//! Cap, retention, filters and priority only decide what happens next.

use crate::error::WireError;
use crate::limits::MAX_NAME_LEN;
use crate::window::{Granularity, UtcOffset};
use serde::{Deserialize, Serialize};

/// A ranking's immutable id, chosen by its creator.
pub type RankId = u32;
/// A member of a leaderboard (a streamer, a fan, an item).
pub type ItemId = u64;

/// Most dimensions one ranking may have (each adds a `_value` to type ids).
pub const MAX_DIMS: usize = 4;
/// Longest dimension name, in bytes.
pub const MAX_DIM_NAME: usize = 32;
/// Most values in one allow- or deny-list.
pub const MAX_FILTER_VALUES: usize = 10_000;
/// Largest length cap; also the cap of a ranking created without one.
pub const MAX_CAP: u32 = 10_000_000;
/// Most past windows a ranking may keep per granularity.
pub const MAX_RETENTION: u32 = 10_000;
/// Priority classes are `0..=MAX_PRIORITY`; higher is more important and shed last.
pub const MAX_PRIORITY: u8 = 9;

/// How an event's score combines with the member's current score.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Aggregation {
    /// Add the event's score (overflow is an error, not a wrap).
    Incr,
    /// Keep the highest score seen.
    Best,
    /// Replace the score.
    Set,
}

impl Aggregation {
    pub const ALL: [Aggregation; 3] = [Aggregation::Incr, Aggregation::Best, Aggregation::Set];

    pub fn as_str(self) -> &'static str {
        match self {
            Aggregation::Incr => "incr",
            Aggregation::Best => "best",
            Aggregation::Set => "set",
        }
    }

    pub fn parse(s: &str) -> Option<Aggregation> {
        Aggregation::ALL.into_iter().find(|a| a.as_str() == s)
    }
}

/// How members with equal scores are ordered; member id ascending breaks
/// whatever ties remain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TieMode {
    /// The member that reached the score first ranks higher.
    EarlierFirst,
    /// The member that reached the score last ranks higher.
    LaterFirst,
    /// The sub-score carried by the events, higher first.
    Custom,
}

impl TieMode {
    pub const ALL: [TieMode; 3] = [TieMode::EarlierFirst, TieMode::LaterFirst, TieMode::Custom];

    pub fn as_str(self) -> &'static str {
        match self {
            TieMode::EarlierFirst => "earlier_first",
            TieMode::LaterFirst => "later_first",
            TieMode::Custom => "custom",
        }
    }

    pub fn parse(s: &str) -> Option<TieMode> {
        TieMode::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

/// An allow- or deny-list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ValueFilter {
    Allow(Vec<u64>),
    Deny(Vec<u64>),
}

impl ValueFilter {
    pub fn admits(&self, v: u64) -> bool {
        match self {
            ValueFilter::Allow(vs) => vs.contains(&v),
            ValueFilter::Deny(vs) => !vs.contains(&v),
        }
    }

    fn values(&self) -> &[u64] {
        match self {
            ValueFilter::Allow(vs) | ValueFilter::Deny(vs) => vs,
        }
    }
}

/// Which events a ranking accepts. An event that fails any filter is
/// reported as `filtered` and changes nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filters {
    /// Per dimension (by name): the values admitted or refused.
    pub dims: Vec<(String, ValueFilter)>,
    /// On item ids.
    pub items: Option<ValueFilter>,
    /// The per-event score must lie in `min..=max`.
    pub score_range: Option<(i64, i64)>,
}

/// What may change after creation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankSettings {
    /// Keep the top `cap` members of each sub-board; members pushed out are dropped.
    pub cap: u32,
    /// Past windows kept per granularity, besides the current one; older
    /// sub-boards are deleted by a background job. `total` is never expired.
    pub retention: u32,
    pub filters: Filters,
    /// Shedding class: under overload, the lowest classes are refused first.
    pub priority: u8,
}

impl Default for RankSettings {
    fn default() -> Self {
        RankSettings { cap: MAX_CAP, retention: 30, filters: Filters::default(), priority: 5 }
    }
}

/// A ranking as stored in the registry and returned by `rank get`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankDef {
    pub id: RankId,
    pub name: String,
    /// Ordered dimension names; an event carries one value for each.
    pub dims: Vec<String>,
    /// One sub-board per granularity for every event, in this order.
    pub granularities: Vec<Granularity>,
    pub utc_offset: UtcOffset,
    pub aggregation: Aggregation,
    pub ties: TieMode,
    pub settings: RankSettings,
}

/// A ranking with its owner: what `rank create --biz` sends and `rank get`
/// answers. The owner rides beside the definition, not in it: `RankDef`'s
/// encoding is fixed (Raft logs, registries and older clients hold it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankInfo {
    pub def: RankDef,
    /// The business whose tokens alone may name the ranking; `None`: shared,
    /// given to any business's token at the admin's choice.
    pub owner: Option<crate::ids::BizId>,
}

/// The most live sub-boards a ranking may be given (`rank limit`).
pub const MAX_BOARD_LIMIT: u32 = 10_000_000;

/// Sets a ranking's limit of live sub-boards (admin only): past it, an
/// event that would start a new sub-board is refused (`Refused`) until an
/// old one's window expires or the limit is raised. `None`: the nodes'
/// default (`max_boards_per_ranking`). Kept beside the definition, like
/// the owner: `RankDef`'s encoding is fixed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoardLimit {
    pub rank: RankId,
    pub max_boards: Option<u32>,
}

impl BoardLimit {
    pub fn validate(&self) -> Result<(), WireError> {
        match self.max_boards {
            Some(n) if n == 0 || n > MAX_BOARD_LIMIT => Err(WireError::bad_request(format!(
                "a ranking's limit of live sub-boards is 1..={MAX_BOARD_LIMIT}, got {n}"
            ))),
            _ => Ok(()),
        }
    }
}

/// A ranking's live sub-boards and its limit, as the metadata group counts
/// them (`rank usage`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoardUsage {
    pub rank: RankId,
    /// Sub-boards whose window the ranking still keeps.
    pub live: u64,
    /// The ranking's own limit, if it has one.
    pub max_boards: Option<u32>,
    /// The limit in force: its own, else the answering node's default (0:
    /// none).
    pub effective: u32,
}

impl RankDef {
    pub fn validate(&self) -> Result<(), WireError> {
        if self.id == 0 {
            return Err(WireError::bad_request("rank id 0 is reserved"));
        }
        validate_name(&self.name)?;
        if self.dims.len() > MAX_DIMS {
            return Err(WireError::bad_request(format!("at most {MAX_DIMS} dimensions")));
        }
        for (i, d) in self.dims.iter().enumerate() {
            let ok = !d.is_empty()
                && d.len() <= MAX_DIM_NAME
                && d.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !ok {
                return Err(WireError::bad_request(format!(
                    "dimension names are 1..={MAX_DIM_NAME} of [A-Za-z0-9_], got {d:?}"
                )));
            }
            if self.dims[..i].contains(d) {
                return Err(WireError::bad_request(format!("dimension {d:?} is repeated")));
            }
        }
        if self.granularities.is_empty() {
            return Err(WireError::bad_request("a ranking needs at least one granularity"));
        }
        for (i, g) in self.granularities.iter().enumerate() {
            if self.granularities[..i].contains(g) {
                return Err(WireError::bad_request(format!(
                    "granularity {} is repeated",
                    g.as_str()
                )));
            }
        }
        self.settings.validate(&self.dims)
    }

    /// The position of a dimension by name.
    pub fn dim_index(&self, name: &str) -> Option<usize> {
        self.dims.iter().position(|d| d == name)
    }
}

/// Why an event's dimension values do not fit a ranking's dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DimsMismatch<'a> {
    /// A value for a dimension the ranking does not have.
    Unknown(&'a str),
    /// Two values for one dimension.
    Twice(&'a str),
    /// No value for one of the ranking's dimensions.
    Missing(&'a str),
}

/// An event's dimension values, given by name in any order, in the order
/// of `names` (a ranking's dimensions): what names its sub-board. The node
/// admits events by it, and the SDK routes them by it (one rule, so both
/// name the same board).
pub fn dims_in_order<'a>(
    names: &'a [String],
    given: &'a [(String, u64)],
) -> Result<Vec<u64>, DimsMismatch<'a>> {
    let mut out: Vec<Option<u64>> = vec![None; names.len()];
    for (name, v) in given {
        let Some(i) = names.iter().position(|d| d == name) else {
            return Err(DimsMismatch::Unknown(name));
        };
        if out[i].replace(*v).is_some() {
            return Err(DimsMismatch::Twice(name));
        }
    }
    out.iter().zip(names).map(|(v, name)| v.ok_or(DimsMismatch::Missing(name))).collect()
}

impl RankSettings {
    pub fn validate(&self, dims: &[String]) -> Result<(), WireError> {
        if self.cap == 0 || self.cap > MAX_CAP {
            return Err(WireError::bad_request(format!("cap must be in 1..={MAX_CAP}")));
        }
        if self.retention > MAX_RETENTION {
            return Err(WireError::bad_request(format!(
                "retention must be at most {MAX_RETENTION}"
            )));
        }
        if self.priority > MAX_PRIORITY {
            return Err(WireError::bad_request(format!("priority must be in 0..={MAX_PRIORITY}")));
        }
        for (name, f) in &self.filters.dims {
            if !dims.contains(name) {
                return Err(WireError::bad_request(format!(
                    "filter on unknown dimension {name:?}"
                )));
            }
            check_list(f)?;
        }
        if let Some(f) = &self.filters.items {
            check_list(f)?;
        }
        if let Some((lo, hi)) = self.filters.score_range {
            if lo > hi {
                return Err(WireError::bad_request(format!("score range {lo}:{hi} is empty")));
            }
        }
        Ok(())
    }
}

fn check_list(f: &ValueFilter) -> Result<(), WireError> {
    if f.values().len() > MAX_FILTER_VALUES {
        return Err(WireError::bad_request(format!(
            "a filter list holds at most {MAX_FILTER_VALUES} values"
        )));
    }
    Ok(())
}

fn validate_name(name: &str) -> Result<(), WireError> {
    if name.is_empty() || name.len() > MAX_NAME_LEN || name.chars().any(|c| c.is_control()) {
        return Err(WireError::bad_request(format!(
            "ranking name must be 1..={MAX_NAME_LEN} bytes without control characters"
        )));
    }
    Ok(())
}

/// Change a ranking's mutable settings (the whole set: read, modify, write).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdateRank {
    pub id: RankId,
    pub settings: RankSettings,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dimension_values_come_in_the_rankings_order() {
        let names: Vec<String> = vec!["anchor".into(), "room".into()];
        let given = |d: &[(&str, u64)]| -> Vec<(String, u64)> {
            d.iter().map(|(n, v)| (n.to_string(), *v)).collect()
        };
        let ok = given(&[("room", 7), ("anchor", 3)]);
        assert_eq!(dims_in_order(&names, &ok), Ok(vec![3, 7]));
        let foreign = given(&[("room", 7), ("city", 3)]);
        assert_eq!(dims_in_order(&names, &foreign), Err(DimsMismatch::Unknown("city")));
        let twice = given(&[("room", 7), ("room", 8), ("anchor", 1)]);
        assert_eq!(dims_in_order(&names, &twice), Err(DimsMismatch::Twice("room")));
        let short = given(&[("room", 7)]);
        assert_eq!(dims_in_order(&names, &short), Err(DimsMismatch::Missing("anchor")));
        assert_eq!(dims_in_order(&[], &[]), Ok(vec![]));
    }

    fn def() -> RankDef {
        RankDef {
            id: 7,
            name: "gifts".into(),
            dims: vec!["ruid".into()],
            granularities: vec![Granularity::Day, Granularity::Month],
            utc_offset: UtcOffset::from_seconds(8 * 3600).expect("+08:00 is valid"),
            aggregation: Aggregation::Incr,
            ties: TieMode::EarlierFirst,
            settings: RankSettings::default(),
        }
    }

    #[test]
    fn a_plain_definition_is_valid() {
        assert_eq!(def().validate(), Ok(()));
    }

    #[test]
    fn structural_mistakes_are_bad_requests() {
        let cases: Vec<fn(&mut RankDef)> = vec![
            |d| d.id = 0,
            |d| d.name.clear(),
            |d| d.dims = vec!["a".into(); 2],
            |d| d.dims = vec!["no spaces".into()],
            |d| d.dims = (0..=MAX_DIMS).map(|i| format!("d{i}")).collect(),
            |d| d.granularities.clear(),
            |d| d.granularities = vec![Granularity::Day, Granularity::Day],
            |d| d.settings.cap = 0,
            |d| d.settings.priority = MAX_PRIORITY + 1,
            |d| d.settings.retention = MAX_RETENTION + 1,
            |d| d.settings.filters.score_range = Some((5, 4)),
            |d| d.settings.filters.dims = vec![("room".into(), ValueFilter::Allow(vec![1]))],
        ];
        for (i, break_it) in cases.into_iter().enumerate() {
            let mut d = def();
            break_it(&mut d);
            let err = d.validate().expect_err(&format!("case {i} must fail"));
            assert_eq!(err.code, crate::ErrorCode::BadRequest, "case {i}");
        }
    }

    #[test]
    fn names_round_trip() {
        for a in Aggregation::ALL {
            assert_eq!(Aggregation::parse(a.as_str()), Some(a));
        }
        for t in TieMode::ALL {
            assert_eq!(TieMode::parse(t.as_str()), Some(t));
        }
        assert_eq!(TieMode::parse("earlier"), None);
    }

    #[test]
    fn filters_admit_and_refuse() {
        assert!(ValueFilter::Allow(vec![1, 2]).admits(2));
        assert!(!ValueFilter::Allow(vec![1, 2]).admits(3));
        assert!(!ValueFilter::Deny(vec![1]).admits(1));
        assert!(ValueFilter::Deny(vec![1]).admits(9));
    }
}
