//! `--json` output: exactly one object per command. Shapes are serde structs
//! (fields print in declaration order, so output is stable to the byte) and
//! ids and times are plain integers; states print as `none|like|dislike`.

use super::{Failure, Output};
use plaudit_proto::likes::{EntityCounts, Page};
use plaudit_proto::Business;
use serde::Serialize;

#[derive(Serialize)]
struct Act {
    prev: &'static str,
    now: &'static str,
    changed: bool,
}

#[derive(Serialize)]
struct Biz<'a> {
    id: u32,
    name: &'a str,
    dislike_enabled: bool,
    user_list_memory: u32,
    liker_list_memory: u32,
}

#[derive(Serialize)]
struct BizList<'a> {
    businesses: Vec<Biz<'a>>,
}

#[derive(Serialize)]
struct States {
    states: Vec<State>,
}

#[derive(Serialize)]
struct State {
    entity: u64,
    state: &'static str,
    mtime: u64,
}

#[derive(Serialize)]
struct Counts {
    counts: Vec<Count>,
}

#[derive(Serialize)]
struct Count {
    entity: u64,
    likes: u64,
    dislikes: u64,
}

#[derive(Serialize)]
struct PageOf<'a, T> {
    items: Vec<T>,
    next: Option<&'a str>,
}

#[derive(Serialize)]
struct EntityItem {
    entity: u64,
    mtime: u64,
}

#[derive(Serialize)]
struct UserItem {
    user: u64,
    mtime: u64,
}

#[derive(Serialize)]
struct Received {
    user: u64,
    likes: u64,
}

#[derive(Serialize)]
struct Pong {
    ok: bool,
}

#[derive(Serialize)]
struct Error<'a> {
    error: ErrorBody<'a>,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    code: &'a str,
    message: &'a str,
}

/// The JSON object for a command's result.
pub fn output(o: &Output) -> String {
    match o {
        Output::Biz { biz, .. } => to_string(&biz_json(biz)),
        Output::BizList(list) => {
            to_string(&BizList { businesses: list.iter().map(biz_json).collect() })
        }
        Output::Act { reply, .. } => to_string(&Act {
            prev: reply.prev.as_str(),
            now: reply.now.as_str(),
            changed: reply.changed,
        }),
        Output::Status(states) => to_string(&States {
            states: states
                .iter()
                .map(|s| State { entity: s.entity, state: s.state.as_str(), mtime: s.mtime })
                .collect(),
        }),
        Output::Counts(counts) => to_string(&Counts { counts: counts.iter().map(count).collect() }),
        Output::UserLikes(page) => {
            to_string(&page_of(page, |i| EntityItem { entity: i.id, mtime: i.mtime }))
        }
        Output::Likers(page) => {
            to_string(&page_of(page, |i| UserItem { user: i.id, mtime: i.mtime }))
        }
        Output::Received(r) => to_string(&Received { user: r.user, likes: r.likes }),
        Output::Pong { .. } => to_string(&Pong { ok: true }),
        Output::Rank { def, owner, .. } => to_string(&super::rank::info_json(def, *owner)),
        Output::RankList(list) => super::rank::list_json(list),
        Output::BoardUsage(u) => super::rank::usage_json(u),
        Output::Score(r) => super::board::score_json(r),
        Output::Items { type_id, items } => super::board::items_json(type_id, items),
        Output::RankOf { item, row } => super::board::rank_of_json(*item, row),
        Output::Size(n) => super::board::size_json(*n),
        Output::Boards(p) => super::board::boards_json(p),
        Output::ClusterStatus(s) => super::admin::status_json(s),
        Output::Nodes(rows) => super::admin::nodes_json(rows),
        Output::HotKeys(rows) => super::hotkeys::hotkeys_json(rows),
        Output::Drained { node, done } => {
            format!("{{\"drain\":{{\"node\":{node},\"done\":{done}}}}}")
        }
        Output::Members { op, done } => super::members::result_json(*op, *done),
        Output::Moved { rank, board, to_shard, took } => {
            super::placement::moved_json(*rank, board, *to_shard, *took)
        }
        Output::MovedEntity { biz, entity, to_shard, took } => {
            super::entity_placement::moved_json(*biz, *entity, *to_shard, *took)
        }
        Output::Placements { boards, entities } => {
            super::placement::placements_json(boards, entities)
        }
        Output::TokenCreated { token, info } => super::token::created_json(token, info),
        Output::TokenRevoked(t) => super::token::info_json(t),
        Output::TokenList(list) => super::token::list_json(list),
    }
}

/// The JSON object for a failure.
pub fn failure(f: &Failure) -> String {
    to_string(&Error { error: ErrorBody { code: f.code, message: &f.message } })
}

fn biz_json(b: &Business) -> Biz<'_> {
    Biz {
        id: b.id,
        name: &b.name,
        dislike_enabled: b.config.dislike_enabled,
        user_list_memory: b.config.user_list_memory,
        liker_list_memory: b.config.liker_list_memory,
    }
}

fn count(c: &EntityCounts) -> Count {
    Count { entity: c.entity, likes: c.likes, dislikes: c.dislikes }
}

fn page_of<T>(page: &Page, item: impl Fn(&plaudit_proto::likes::ListItem) -> T) -> PageOf<'_, T> {
    PageOf { items: page.items.iter().map(item).collect(), next: page.next.as_deref() }
}

pub(crate) fn encode<T: Serialize>(v: &T) -> String {
    to_string(v)
}

fn to_string<T: Serialize>(v: &T) -> String {
    // These shapes are structs of strings, integers and bools: serde_json
    // cannot fail on them (no maps with non-string keys, no floats).
    serde_json::to_string(v).expect("JSON shapes always serialize")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::BizVerb;
    use plaudit_proto::likes::{EntityState, LikeReply, ListItem, ReceivedReply};
    use plaudit_proto::{BizConfig, LikeAction, LikeState};
    use std::time::Duration;

    fn biz(id: u32, name: &str) -> Business {
        Business { id, name: name.into(), config: BizConfig::default() }
    }

    #[test]
    fn like_prints_prev_now_changed() {
        let reply =
            LikeReply { prev: LikeState::None, now: LikeState::Like, changed: true, mtime: 5 };
        let o = Output::Act { action: LikeAction::Like, entity: 7, reply };
        assert_eq!(output(&o), r#"{"prev":"none","now":"like","changed":true}"#);
        let reply = LikeReply {
            prev: LikeState::Dislike,
            now: LikeState::Dislike,
            changed: false,
            mtime: 5,
        };
        let o = Output::Act { action: LikeAction::Dislike, entity: 7, reply };
        assert_eq!(output(&o), r#"{"prev":"dislike","now":"dislike","changed":false}"#);
    }

    #[test]
    fn status_prints_states_with_names() {
        let o = Output::Status(vec![
            EntityState { entity: 7, state: LikeState::Like, mtime: 1000 },
            EntityState { entity: 8, state: LikeState::None, mtime: 0 },
        ]);
        assert_eq!(
            output(&o),
            r#"{"states":[{"entity":7,"state":"like","mtime":1000},{"entity":8,"state":"none","mtime":0}]}"#
        );
    }

    #[test]
    fn counts_prints_likes_and_dislikes() {
        let o = Output::Counts(vec![EntityCounts { entity: 7, likes: 3, dislikes: 1 }]);
        assert_eq!(output(&o), r#"{"counts":[{"entity":7,"likes":3,"dislikes":1}]}"#);
    }

    #[test]
    fn user_likes_items_are_entities_and_next_is_a_cursor() {
        let page = Page { items: vec![ListItem { id: 7, mtime: 9 }], next: Some("9.7".into()) };
        assert_eq!(
            output(&Output::UserLikes(page)),
            r#"{"items":[{"entity":7,"mtime":9}],"next":"9.7"}"#
        );
    }

    #[test]
    fn likers_items_are_users_and_the_last_page_has_null_next() {
        let page = Page { items: vec![ListItem { id: 3, mtime: 9 }], next: None };
        assert_eq!(
            output(&Output::Likers(page)),
            r#"{"items":[{"user":3,"mtime":9}],"next":null}"#
        );
        let empty = Page { items: vec![], next: None };
        assert_eq!(output(&Output::Likers(empty)), r#"{"items":[],"next":null}"#);
    }

    #[test]
    fn received_prints_user_and_likes() {
        let o = Output::Received(ReceivedReply { user: 5, likes: 42 });
        assert_eq!(output(&o), r#"{"user":5,"likes":42}"#);
    }

    #[test]
    fn business_is_flat_whatever_the_verb() {
        let want = r#"{"id":3,"name":"video","dislike_enabled":true,"user_list_memory":100,"liker_list_memory":100}"#;
        for verb in [BizVerb::Created, BizVerb::Shown, BizVerb::Updated] {
            assert_eq!(output(&Output::Biz { verb, biz: biz(3, "video") }), want);
        }
    }

    #[test]
    fn biz_list_wraps_the_same_objects() {
        let o = Output::BizList(vec![biz(1, "a"), biz(2, "b \"quoted\"")]);
        let v: serde_json::Value = serde_json::from_str(&output(&o)).unwrap();
        let list = v["businesses"].as_array().unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(list[1]["name"], "b \"quoted\"");
        assert_eq!(list[0]["liker_list_memory"], 100);
        assert_eq!(output(&Output::BizList(vec![])), r#"{"businesses":[]}"#);
    }

    #[test]
    fn ping_prints_ok() {
        let o = Output::Pong { addr: "x".into(), rtt: Duration::from_millis(1) };
        assert_eq!(output(&o), r#"{"ok":true}"#);
    }

    #[test]
    fn errors_carry_code_and_message() {
        let f = Failure { code: "Unavailable", message: "cannot connect to x".into(), exit: 3 };
        assert_eq!(
            failure(&f),
            r#"{"error":{"code":"Unavailable","message":"cannot connect to x"}}"#
        );
    }
}
