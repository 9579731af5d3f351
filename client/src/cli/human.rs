//! Output for people: aligned tables with headers, sentences for single
//! results, times as UTC timestamps. Errors go to stderr as
//! `error: CODE: message`.

use super::{BizVerb, Failure, Output};
use plaudit_proto::likes::{LikeReply, Page};
use plaudit_proto::{Business, EntityId, LikeAction, LikeState};
use std::fmt::Write;

/// How a column's cells line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// Formats rows under headers, columns two spaces apart, each as wide as its
/// widest cell. Lines carry no trailing spaces.
pub fn table(columns: &[(&str, Align)], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = columns.iter().map(|(h, _)| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = columns.iter().map(|(h, _)| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, ((_, align), width)) in columns.iter().zip(widths.iter().copied()).enumerate() {
            let cell = row.get(i).map(String::as_str).unwrap_or("");
            if i > 0 {
                line.push_str("  ");
            }
            // Writing to a String cannot fail; `{:<w$}` pads by chars, as widths were measured.
            let _ = match align {
                Align::Left => write!(line, "{cell:<width$}"),
                Align::Right => write!(line, "{cell:>width$}"),
            };
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A millisecond Unix time as `YYYY-MM-DD HH:MM:SS.mmm` UTC; `-` for 0
/// (a state that was never set).
pub fn time(ms: u64) -> String {
    if ms == 0 {
        return "-".to_string();
    }
    let (secs, millis) = (ms / 1000, ms % 1000);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{millis:03}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The text for a command's result, ending in a newline.
pub fn output(o: &Output) -> String {
    match o {
        Output::Biz { verb, biz } => {
            let head = match verb {
                BizVerb::Created => format!("created business {}\n", biz.id),
                BizVerb::Updated => format!("updated business {}\n", biz.id),
                BizVerb::Shown => String::new(),
            };
            head + &businesses(std::slice::from_ref(biz))
        }
        Output::BizList(list) if list.is_empty() => "no businesses\n".to_string(),
        Output::BizList(list) => businesses(list),
        Output::Act { action, entity, reply } => act(*action, *entity, reply) + "\n",
        Output::Status(states) => table(
            &[("ENTITY", Align::Right), ("STATE", Align::Left), ("MTIME", Align::Left)],
            &states
                .iter()
                .map(|s| vec![s.entity.to_string(), s.state.as_str().to_string(), time(s.mtime)])
                .collect::<Vec<_>>(),
        ),
        Output::Counts(counts) => table(
            &[("ENTITY", Align::Right), ("LIKES", Align::Right), ("DISLIKES", Align::Right)],
            &counts
                .iter()
                .map(|c| vec![c.entity.to_string(), c.likes.to_string(), c.dislikes.to_string()])
                .collect::<Vec<_>>(),
        ),
        Output::UserLikes(page) => page_table("ENTITY", "no likes", page),
        Output::Likers(page) => page_table("USER", "no likers", page),
        Output::Received(r) => {
            let noun = if r.likes == 1 { "like" } else { "likes" };
            format!("user {} has received {} {noun}\n", r.user, r.likes)
        }
        Output::Pong { addr, rtt } => {
            format!("pong from {addr} in {:.1} ms\n", rtt.as_secs_f64() * 1000.0)
        }
        Output::Rank { verb, def, owner } => {
            let head = match verb {
                BizVerb::Created => format!("created ranking {}\n", def.id),
                BizVerb::Updated => format!("updated ranking {}\n", def.id),
                BizVerb::Shown => String::new(),
            };
            let whose = match owner {
                Some(biz) => format!("belongs to business {biz}\n"),
                None => "shared (any business's token may be given it)\n".to_string(),
            };
            head + &super::rank::table(std::slice::from_ref(def)) + &whose
        }
        Output::RankList(list) if list.is_empty() => "no rankings\n".to_string(),
        Output::RankList(list) => super::rank::table(list),
        Output::BoardUsage(u) => super::rank::usage_human(u),
        Output::Score(r) => super::board::score_human(r),
        Output::Items { type_id, items } => super::board::items_human(type_id, items),
        Output::RankOf { item, row } => super::board::rank_of_human(*item, row),
        Output::Size(n) => format!("{n} members\n"),
        Output::Boards(p) => super::board::boards_human(p),
        Output::ClusterStatus(s) => super::admin::status_human(s),
        Output::Nodes(rows) => super::admin::nodes_human(rows),
        Output::HotKeys(rows) => super::hotkeys::hotkeys_human(rows),
        Output::Drained { node, done: true } => format!("node {node} leads no group\n"),
        Output::Drained { node, done: false } => {
            format!("node {node} is handing its leaderships away (admin status shows them move)\n")
        }
        Output::Members { op, done } => super::members::result_human(*op, *done),
        Output::Moved { rank, board, to_shard, took } => {
            super::placement::moved_human(*rank, board, *to_shard, *took)
        }
        Output::MovedEntity { biz, entity, to_shard, took } => {
            super::entity_placement::moved_human(*biz, *entity, *to_shard, *took)
        }
        Output::Placements { boards, entities } => {
            super::placement::placements_human(boards, entities)
        }
        Output::TokenCreated { token, info } => super::token::created_human(token, info),
        Output::TokenRevoked(t) => {
            format!("revoked token {}\n", t.id)
                + &super::token::table_human(std::slice::from_ref(t))
        }
        Output::TokenList(list) if list.is_empty() => "no tokens\n".to_string(),
        Output::TokenList(list) => super::token::table_human(list),
    }
}

/// The stderr line for a failure.
pub fn failure(f: &Failure) -> String {
    format!("error: {}: {}\n", f.code, f.message)
}

/// The sentence for a like action: what changed, or why nothing did.
pub fn act(action: LikeAction, entity: EntityId, reply: &LikeReply) -> String {
    if reply.changed {
        let done = match action {
            LikeAction::Like => "liked",
            LikeAction::Unlike => "unliked",
            LikeAction::Dislike => "disliked",
            LikeAction::Undislike => "undisliked",
        };
        return format!("{done} entity {entity} (was: {})", reply.prev.as_str());
    }
    let why = match (action, reply.now) {
        (LikeAction::Like, LikeState::Like) => "already liked".to_string(),
        (LikeAction::Dislike, LikeState::Dislike) => "already disliked".to_string(),
        (LikeAction::Unlike, LikeState::Dislike) => "not liked (currently disliked)".to_string(),
        (LikeAction::Unlike, _) => "not liked".to_string(),
        (LikeAction::Undislike, LikeState::Like) => "not disliked (currently liked)".to_string(),
        (LikeAction::Undislike, _) => "not disliked".to_string(),
        (_, now) => format!("entity {entity} is {}", now.as_str()),
    };
    format!("no change: {why}")
}

fn businesses(list: &[Business]) -> String {
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|b| {
            vec![
                b.id.to_string(),
                b.name.clone(),
                if b.config.dislike_enabled { "yes" } else { "no" }.to_string(),
                b.config.user_list_memory.to_string(),
                b.config.liker_list_memory.to_string(),
            ]
        })
        .collect();
    table(
        &[
            ("ID", Align::Right),
            ("NAME", Align::Left),
            ("DISLIKE", Align::Left),
            ("USER_LIST_MEMORY", Align::Right),
            ("LIKER_LIST_MEMORY", Align::Right),
        ],
        &rows,
    )
}

fn page_table(id_header: &str, empty: &str, page: &Page) -> String {
    let mut out = if page.items.is_empty() {
        format!("{empty}\n")
    } else {
        let rows: Vec<Vec<String>> =
            page.items.iter().map(|i| vec![i.id.to_string(), time(i.mtime)]).collect();
        table(&[(id_header, Align::Right), ("MTIME", Align::Left)], &rows)
    };
    if let Some(next) = &page.next {
        // Infallible: writing to a String.
        let _ = writeln!(out, "more: pass --cursor {next}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaudit_proto::likes::{EntityCounts, EntityState, ListItem, ReceivedReply};
    use plaudit_proto::BizConfig;
    use std::time::Duration;

    fn reply(prev: LikeState, now: LikeState, changed: bool) -> LikeReply {
        LikeReply { prev, now, changed, mtime: 1 }
    }

    #[test]
    fn tables_align_columns_under_their_headers() {
        let t = table(
            &[("ENTITY", Align::Right), ("STATE", Align::Left), ("MTIME", Align::Left)],
            &[
                vec!["7".into(), "like".into(), "x".into()],
                vec!["1234567".into(), "dislike".into(), "-".into()],
            ],
        );
        let want =
            concat!(" ENTITY  STATE    MTIME\n", "      7  like     x\n", "1234567  dislike  -\n",);
        assert_eq!(t, want);
    }

    #[test]
    fn tables_have_no_trailing_spaces_and_keep_headers_when_empty() {
        let t = table(&[("A", Align::Left), ("LONG", Align::Left)], &[vec!["x".into(), "".into()]]);
        assert_eq!(t, "A  LONG\nx\n");
        assert_eq!(table(&[("ENTITY", Align::Left)], &[]), "ENTITY\n");
    }

    #[test]
    fn times_print_as_utc_and_zero_as_a_dash() {
        assert_eq!(time(0), "-");
        assert_eq!(time(1), "1970-01-01 00:00:00.001");
        // 2024-02-29T23:59:59.999Z, a leap day.
        assert_eq!(time(1_709_251_199_999), "2024-02-29 23:59:59.999");
        assert_eq!(time(951_782_400_000), "2000-02-29 00:00:00.000");
    }

    #[test]
    fn actions_say_what_changed() {
        let r = reply(LikeState::None, LikeState::Like, true);
        assert_eq!(act(LikeAction::Like, 7, &r), "liked entity 7 (was: none)");
        let r = reply(LikeState::Like, LikeState::Dislike, true);
        assert_eq!(act(LikeAction::Dislike, 7, &r), "disliked entity 7 (was: like)");
        let r = reply(LikeState::Like, LikeState::None, true);
        assert_eq!(act(LikeAction::Unlike, 7, &r), "unliked entity 7 (was: like)");
    }

    #[test]
    fn repeated_actions_say_why_nothing_changed() {
        let r = reply(LikeState::Like, LikeState::Like, false);
        assert_eq!(act(LikeAction::Like, 7, &r), "no change: already liked");
        let r = reply(LikeState::Dislike, LikeState::Dislike, false);
        assert_eq!(act(LikeAction::Unlike, 7, &r), "no change: not liked (currently disliked)");
        let r = reply(LikeState::None, LikeState::None, false);
        assert_eq!(act(LikeAction::Undislike, 7, &r), "no change: not disliked");
    }

    #[test]
    fn status_and_counts_are_tables() {
        let o = Output::Status(vec![
            EntityState { entity: 7, state: LikeState::Like, mtime: 1 },
            EntityState { entity: 10, state: LikeState::None, mtime: 0 },
        ]);
        assert_eq!(
            output(&o),
            "ENTITY  STATE  MTIME\n     7  like   1970-01-01 00:00:00.001\n    10  none   -\n"
        );
        let o = Output::Counts(vec![EntityCounts { entity: 7, likes: 12, dislikes: 0 }]);
        assert_eq!(output(&o), "ENTITY  LIKES  DISLIKES\n     7     12         0\n");
    }

    #[test]
    fn pages_show_items_and_how_to_continue() {
        let page = Page { items: vec![ListItem { id: 3, mtime: 1 }], next: Some("1.3".into()) };
        assert_eq!(
            output(&Output::Likers(page)),
            "USER  MTIME\n   3  1970-01-01 00:00:00.001\nmore: pass --cursor 1.3\n"
        );
        let empty = Page { items: vec![], next: None };
        assert_eq!(output(&Output::UserLikes(empty)), "no likes\n");
    }

    #[test]
    fn businesses_are_a_table_with_a_verb_line() {
        let b = Business {
            id: 3,
            name: "video".into(),
            config: BizConfig { dislike_enabled: false, ..BizConfig::default() },
        };
        let o = Output::Biz { verb: BizVerb::Created, biz: b.clone() };
        assert_eq!(
            output(&o),
            "created business 3\n\
             ID  NAME   DISLIKE  USER_LIST_MEMORY  LIKER_LIST_MEMORY\n \
             3  video  no                    100                100\n"
        );
        assert!(output(&Output::Biz { verb: BizVerb::Shown, biz: b }).starts_with("ID  NAME"));
        assert_eq!(output(&Output::BizList(vec![])), "no businesses\n");
    }

    #[test]
    fn received_ping_and_errors_are_sentences() {
        assert_eq!(
            output(&Output::Received(ReceivedReply { user: 5, likes: 1 })),
            "user 5 has received 1 like\n"
        );
        let o = Output::Pong { addr: "h:1".into(), rtt: Duration::from_micros(1500) };
        assert_eq!(output(&o), "pong from h:1 in 1.5 ms\n");
        let f = Failure { code: "NotFound", message: "no business 9".into(), exit: 1 };
        assert_eq!(failure(&f), "error: NotFound: no business 9\n");
    }
}
