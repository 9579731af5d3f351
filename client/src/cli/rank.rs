//! `plaudit rank create|get|list|update|limit|usage`: the clap definitions, how their
//! flags become a `RankDef` or new settings (pure, unit-tested), and how a
//! definition prints.

use super::json;
use clap::{ArgGroup, Subcommand};
use plaudit_proto::rankings::{
    Aggregation, BoardUsage, RankDef, RankId, RankSettings, TieMode, ValueFilter, MAX_CAP,
};
use plaudit_proto::window::{Granularity, UtcOffset};
use serde::Serialize;

#[derive(Debug, Subcommand)]
pub enum RankCommand {
    /// Define a ranking (a family of leaderboards).
    Create {
        /// Ranking id: immutable, named by every score and query.
        #[arg(long)]
        id: RankId,
        /// Display name (1 to 64 bytes).
        #[arg(long)]
        name: String,
        /// Dimension names, comma separated; their values select the sub-board.
        #[arg(long, value_name = "D,D", value_delimiter = ',')]
        dims: Vec<String>,
        /// Time windows, comma separated: total, hour, day, week (from Monday), month.
        #[arg(long, value_name = "G,G", value_delimiter = ',', required = true, value_parser = parse_gran)]
        granularity: Vec<Granularity>,
        /// The fixed UTC offset windows are cut in, e.g. +08:00 or -05:30.
        #[arg(long, value_name = "+HH:MM", default_value = "+00:00", value_parser = parse_offset, allow_hyphen_values = true)]
        utc_offset: UtcOffset,
        /// How an event's score combines with the member's: incr, best or set.
        #[arg(long, value_name = "incr|best|set", default_value = "incr", value_parser = parse_agg)]
        agg: Aggregation,
        /// How equal scores are ordered: earlier_first, later_first or custom (by sub-score).
        #[arg(long, value_name = "MODE", default_value = "earlier_first", value_parser = parse_ties)]
        ties: TieMode,
        /// Keep the top K members of each sub-board.
        #[arg(long, value_name = "K", default_value_t = MAX_CAP)]
        cap: u32,
        /// Past windows kept per granularity; older sub-boards are deleted.
        #[arg(long, value_name = "N", default_value_t = RankSettings::default().retention)]
        retention: u32,
        /// Shedding class 0..=9: under overload the lowest are refused first.
        #[arg(long, value_name = "P", default_value_t = RankSettings::default().priority)]
        priority: u8,
        /// The business the ranking belongs to: only its tokens may name it.
        /// Without it the ranking is shared (any business's token may be given it).
        #[arg(long, value_name = "BIZ")]
        biz: Option<plaudit_proto::BizId>,
    },
    /// Show one ranking.
    Get {
        /// Ranking id.
        id: RankId,
    },
    /// List all rankings (read page by page, however many there are).
    List,
    /// Set how many live sub-boards a ranking may hold (admin only); an
    /// event that would start one more is refused until an old window
    /// expires or the limit is raised.
    #[command(group(ArgGroup::new("limit").required(true).args(["max_boards", "default"])))]
    Limit {
        /// Ranking id.
        id: RankId,
        /// The ranking's own limit, 1..=10000000.
        #[arg(long, value_name = "N")]
        max_boards: Option<u32>,
        /// Drop the ranking's own limit: the nodes' `max_boards_per_ranking` holds.
        #[arg(long)]
        default: bool,
    },
    /// Show how many live sub-boards a ranking holds, and its limit.
    Usage {
        /// Ranking id.
        id: RankId,
    },
    /// Change a ranking's cap, retention, priority or filters; the rest keep their values.
    #[command(group(
        ArgGroup::new("change")
            .required(true)
            .multiple(true)
            .args(["cap", "retention", "priority", "allow", "deny", "allow_items", "deny_items", "score_range", "clear_filters"])
    ))]
    Update {
        /// Ranking id.
        id: RankId,
        #[arg(long, value_name = "K")]
        cap: Option<u32>,
        #[arg(long, value_name = "N")]
        retention: Option<u32>,
        #[arg(long, value_name = "P")]
        priority: Option<u8>,
        /// Admit only these values of a dimension: DIM=V,V (repeatable).
        #[arg(long, value_name = "DIM=V,V", value_parser = parse_dim_list)]
        allow: Vec<(String, Vec<u64>)>,
        /// Refuse these values of a dimension: DIM=V,V (repeatable).
        #[arg(long, value_name = "DIM=V,V", value_parser = parse_dim_list)]
        deny: Vec<(String, Vec<u64>)>,
        /// Admit only these item ids.
        #[arg(long, value_name = "I,I", value_delimiter = ',')]
        allow_items: Vec<u64>,
        /// Refuse these item ids.
        #[arg(long, value_name = "I,I", value_delimiter = ',')]
        deny_items: Vec<u64>,
        /// Admit only events whose score lies in MIN:MAX (inclusive).
        #[arg(long, value_name = "MIN:MAX", value_parser = parse_range, allow_hyphen_values = true)]
        score_range: Option<(i64, i64)>,
        /// Remove every filter first (then apply the ones given).
        #[arg(long)]
        clear_filters: bool,
    },
}

fn parse_gran(s: &str) -> Result<Granularity, String> {
    Granularity::parse(s)
        .ok_or_else(|| format!("{s:?} is not one of total, hour, day, week, month"))
}

fn parse_offset(s: &str) -> Result<UtcOffset, String> {
    UtcOffset::parse(s).ok_or_else(|| format!("{s:?} is not an offset like +08:00 or -05:30"))
}

fn parse_agg(s: &str) -> Result<Aggregation, String> {
    Aggregation::parse(s).ok_or_else(|| format!("{s:?} is not one of incr, best, set"))
}

fn parse_ties(s: &str) -> Result<TieMode, String> {
    TieMode::parse(s)
        .ok_or_else(|| format!("{s:?} is not one of earlier_first, later_first, custom"))
}

/// `DIM=V,V` -> `(DIM, [V, V])`.
pub fn parse_dim_list(s: &str) -> Result<(String, Vec<u64>), String> {
    let (dim, vals) = s.split_once('=').ok_or_else(|| format!("{s:?} is not DIM=V,V"))?;
    let vals = vals
        .split(',')
        .map(|v| v.trim().parse::<u64>().map_err(|_| format!("{v:?} is not an unsigned integer")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((dim.to_string(), vals))
}

/// `MIN:MAX` -> `(MIN, MAX)`.
pub fn parse_range(s: &str) -> Result<(i64, i64), String> {
    let (lo, hi) = s.split_once(':').ok_or_else(|| format!("{s:?} is not MIN:MAX"))?;
    let n = |x: &str| x.trim().parse::<i64>().map_err(|_| format!("{x:?} is not an integer"));
    Ok((n(lo)?, n(hi)?))
}

/// The definition `rank create` asks for.
pub fn definition(cmd: &RankCommand) -> Option<RankDef> {
    let RankCommand::Create {
        id,
        name,
        dims,
        granularity,
        utc_offset,
        agg,
        ties,
        cap,
        retention,
        priority,
        biz: _,
    } = cmd
    else {
        return None;
    };
    Some(RankDef {
        id: *id,
        name: name.clone(),
        dims: dims.clone(),
        granularities: granularity.clone(),
        utc_offset: *utc_offset,
        aggregation: *agg,
        ties: *ties,
        settings: RankSettings {
            cap: *cap,
            retention: *retention,
            priority: *priority,
            ..RankSettings::default()
        },
    })
}

/// Applies the flags `rank update` was given to the current settings.
pub fn updated_settings(current: RankSettings, cmd: &RankCommand) -> RankSettings {
    let RankCommand::Update {
        cap,
        retention,
        priority,
        allow,
        deny,
        allow_items,
        deny_items,
        score_range,
        clear_filters,
        ..
    } = cmd
    else {
        return current;
    };
    let mut s = current;
    if *clear_filters {
        s.filters = Default::default();
    }
    s.cap = cap.unwrap_or(s.cap);
    s.retention = retention.unwrap_or(s.retention);
    s.priority = priority.unwrap_or(s.priority);
    let lists = allow
        .iter()
        .map(|(d, v)| (d, ValueFilter::Allow(v.clone())))
        .chain(deny.iter().map(|(d, v)| (d, ValueFilter::Deny(v.clone()))));
    for (dim, f) in lists {
        // One filter per dimension: a new one replaces the old.
        s.filters.dims.retain(|(d, _)| d != dim);
        s.filters.dims.push((dim.clone(), f));
    }
    if !allow_items.is_empty() {
        s.filters.items = Some(ValueFilter::Allow(allow_items.clone()));
    }
    if !deny_items.is_empty() {
        s.filters.items = Some(ValueFilter::Deny(deny_items.clone()));
    }
    if score_range.is_some() {
        s.filters.score_range = *score_range;
    }
    s
}

#[derive(Serialize)]
pub struct RankJson<'a> {
    id: u32,
    name: &'a str,
    dims: &'a [String],
    granularities: Vec<&'static str>,
    utc_offset: String,
    agg: &'static str,
    ties: &'static str,
    cap: u32,
    retention: u32,
    priority: u8,
    filters: FiltersJson,
    /// Absent where not known (lists), `null` for a shared ranking.
    #[serde(skip_serializing_if = "Option::is_none")]
    owner: Option<Option<plaudit_proto::BizId>>,
}

#[derive(Serialize)]
struct FiltersJson {
    allow: Vec<(String, Vec<u64>)>,
    deny: Vec<(String, Vec<u64>)>,
    allow_items: Option<Vec<u64>>,
    deny_items: Option<Vec<u64>>,
    score_range: Option<(i64, i64)>,
}

/// One ranking with its owner, as `rank create` and `rank get` print it.
pub fn info_json(d: &RankDef, owner: Option<plaudit_proto::BizId>) -> RankJson<'_> {
    RankJson { owner: Some(owner), ..to_json(d) }
}

pub fn to_json(d: &RankDef) -> RankJson<'_> {
    let f = &d.settings.filters;
    let side = |allow: bool| -> Vec<(String, Vec<u64>)> {
        f.dims
            .iter()
            .filter_map(|(n, v)| match (v, allow) {
                (ValueFilter::Allow(vs), true) | (ValueFilter::Deny(vs), false) => {
                    Some((n.clone(), vs.clone()))
                }
                _ => None,
            })
            .collect()
    };
    let items = |allow: bool| match (&f.items, allow) {
        (Some(ValueFilter::Allow(v)), true) | (Some(ValueFilter::Deny(v)), false) => {
            Some(v.clone())
        }
        _ => None,
    };
    RankJson {
        id: d.id,
        name: &d.name,
        dims: &d.dims,
        granularities: d.granularities.iter().map(|g| g.as_str()).collect(),
        utc_offset: d.utc_offset.format(),
        agg: d.aggregation.as_str(),
        ties: d.ties.as_str(),
        cap: d.settings.cap,
        retention: d.settings.retention,
        priority: d.settings.priority,
        filters: FiltersJson {
            allow: side(true),
            deny: side(false),
            allow_items: items(true),
            deny_items: items(false),
            score_range: f.score_range,
        },
        owner: None,
    }
}

/// `{"usage":{"rank":R,"live":N,"max_boards":M|null,"effective":E}}`
/// (`effective` 0: no limit).
pub fn usage_json(u: &BoardUsage) -> String {
    #[derive(Serialize)]
    struct U<'a> {
        usage: &'a BoardUsage,
    }
    json::encode(&U { usage: u })
}

/// One line: the ranking's live sub-boards against its limit.
pub fn usage_human(u: &BoardUsage) -> String {
    let boards = if u.live == 1 { "sub-board" } else { "sub-boards" };
    let limit = match (u.effective, u.max_boards) {
        (0, _) => "no limit".to_string(),
        (n, Some(_)) => format!("a limit of {n} (its own)"),
        (n, None) => format!("a limit of {n} (the nodes' default)"),
    };
    format!("ranking {} holds {} live {boards}, {limit}\n", u.rank, u.live)
}

/// `{"rankings":[...]}`.
pub fn list_json(list: &[RankDef]) -> String {
    #[derive(Serialize)]
    struct L<'a> {
        rankings: Vec<RankJson<'a>>,
    }
    json::encode(&L { rankings: list.iter().map(to_json).collect() })
}

/// The people-facing table of rankings.
pub fn table(list: &[RankDef]) -> String {
    use super::human::{table, Align};
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|d| {
            let grans: Vec<&str> = d.granularities.iter().map(|g| g.as_str()).collect();
            vec![
                d.id.to_string(),
                d.name.clone(),
                if d.dims.is_empty() { "-".into() } else { d.dims.join(",") },
                grans.join(","),
                d.utc_offset.format(),
                d.aggregation.as_str().into(),
                d.ties.as_str().into(),
                d.settings.cap.to_string(),
                d.settings.retention.to_string(),
                d.settings.priority.to_string(),
            ]
        })
        .collect();
    let l = Align::Left;
    let r = Align::Right;
    table(
        &[
            ("ID", r),
            ("NAME", l),
            ("DIMS", l),
            ("WINDOWS", l),
            ("OFFSET", l),
            ("AGG", l),
            ("TIES", l),
            ("CAP", r),
            ("RETENTION", r),
            ("PRIORITY", r),
        ],
        &rows,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Cli;
    use clap::Parser;

    fn parse(args: &[&str]) -> RankCommand {
        let cli = Cli::try_parse_from(args).expect("parses");
        match cli.command {
            crate::cli::args::Command::Rank(r) => r,
            other => panic!("not a rank command: {other:?}"),
        }
    }

    #[test]
    fn create_flags_become_a_definition() {
        let cmd = parse(&[
            "plaudit",
            "rank",
            "create",
            "--id",
            "3",
            "--name",
            "gifts",
            "--dims",
            "ruid,room",
            "--granularity",
            "day,month",
            "--utc-offset",
            "+08:00",
            "--agg",
            "best",
            "--ties",
            "custom",
            "--cap",
            "100",
            "--retention",
            "7",
            "--priority",
            "2",
        ]);
        let d = definition(&cmd).expect("create");
        assert_eq!(d.id, 3);
        assert_eq!(d.dims, vec!["ruid".to_string(), "room".to_string()]);
        assert_eq!(d.granularities, vec![Granularity::Day, Granularity::Month]);
        assert_eq!(d.utc_offset.seconds(), 8 * 3600);
        assert_eq!((d.aggregation, d.ties), (Aggregation::Best, TieMode::Custom));
        assert_eq!((d.settings.cap, d.settings.retention, d.settings.priority), (100, 7, 2));
        assert_eq!(d.validate(), Ok(()));
    }

    #[test]
    fn a_negative_offset_parses_without_an_equals_sign() {
        let base = ["plaudit", "rank", "create", "--id", "1", "--name", "x", "--granularity"];
        let mut args = base.to_vec();
        args.extend(["day", "--utc-offset", "-05:30", "--cap", "7"]);
        let d = definition(&parse(&args)).expect("create");
        assert_eq!(d.utc_offset.seconds(), -(5 * 3600 + 30 * 60));
        assert_eq!(d.settings.cap, 7, "the flags after it still parse");
    }

    #[test]
    fn update_flags_change_only_what_they_name() {
        let cmd = parse(&[
            "plaudit",
            "rank",
            "update",
            "5",
            "--cap",
            "10",
            "--allow",
            "ruid=1,2",
            "--deny",
            "room=9",
            "--score-range",
            "-5:100",
        ]);
        let s = updated_settings(RankSettings::default(), &cmd);
        assert_eq!(s.cap, 10);
        assert_eq!(s.retention, RankSettings::default().retention);
        assert_eq!(
            s.filters.dims,
            vec![
                ("ruid".to_string(), ValueFilter::Allow(vec![1, 2])),
                ("room".to_string(), ValueFilter::Deny(vec![9]))
            ]
        );
        assert_eq!(s.filters.score_range, Some((-5, 100)));
        assert!(Cli::try_parse_from(["plaudit", "rank", "update", "5"]).is_err());
    }

    #[test]
    fn bad_values_are_usage_errors() {
        for bad in [
            vec!["plaudit", "rank", "create", "--id", "1", "--name", "x", "--granularity", "year"],
            vec![
                "plaudit",
                "rank",
                "create",
                "--id",
                "1",
                "--name",
                "x",
                "--granularity",
                "day",
                "--utc-offset",
                "8",
            ],
            vec!["plaudit", "rank", "update", "1", "--allow", "ruid"],
            vec!["plaudit", "rank", "update", "1", "--score-range", "5"],
            vec!["plaudit", "rank", "limit", "1"],
            vec!["plaudit", "rank", "limit", "1", "--max-boards", "5", "--default"],
        ] {
            assert!(Cli::try_parse_from(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn usage_prints_the_limit_in_force_and_whose_it_is() {
        let u = |max_boards, effective| BoardUsage { rank: 3, live: 1, max_boards, effective };
        assert_eq!(
            usage_human(&u(None, 100)),
            "ranking 3 holds 1 live sub-board, a limit of 100 (the nodes' default)\n"
        );
        assert!(usage_human(&u(Some(7), 7)).ends_with("a limit of 7 (its own)\n"));
        assert!(usage_human(&u(None, 0)).ends_with("no limit\n"));
        assert_eq!(
            usage_json(&u(Some(7), 7)),
            r#"{"usage":{"rank":3,"live":1,"max_boards":7,"effective":7}}"#
        );
        let cmd = parse(&["plaudit", "rank", "limit", "3", "--default"]);
        assert!(matches!(cmd, RankCommand::Limit { id: 3, max_boards: None, default: true }));
    }
}
