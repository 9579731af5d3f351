//! What a request says about itself: its operation's name (metrics
//! labels), whether it is well formed, whether it may be read stale, and
//! the business it names. The shapes themselves are in `message.rs`.

use super::Request;
use crate::error::WireError;
use crate::ids::BizId;

/// Every name `Request::op` returns, in a fixed order (metrics labels).
pub const OPS: [&str; 44] = [
    "ping",
    "biz_create",
    "biz_get",
    "biz_list",
    "biz_update",
    "like",
    "status",
    "counts",
    "user_likes",
    "likers",
    "received",
    "rank_create",
    "rank_get",
    "rank_list",
    "rank_update",
    "score",
    "top",
    "rank_of",
    "around",
    "scores",
    "board_size",
    "boards",
    "hello",
    "routing",
    "cluster_status",
    "stale",
    "auth",
    "token_create",
    "token_list",
    "token_revoke",
    "drain",
    "nodes",
    "members",
    "rank_limit",
    "rank_usage",
    "hotkeys",
    "hotset",
    "replica",
    "move_board",
    "placements",
    "move_entity",
    "entity_placements",
    "entity_routes",
    "entity_routes_page",
];

impl Request {
    /// A read of one shard's data (a user's states or list, an entity's
    /// counts or likers, an owner's received total, a board): what a
    /// replica serves, linearizable (`Replica`) or not (`Stale`).
    pub fn is_data_read(&self) -> bool {
        matches!(
            self,
            Request::Status(_)
                | Request::Counts(_)
                | Request::UserLikes(_)
                | Request::Likers(_)
                | Request::Received(_)
                | Request::Query(_)
        )
    }

    /// A change of the registry (a business, ranking, token or board limit
    /// made or changed): what a `Once` may carry, applied at most once.
    pub fn is_registry_change(&self) -> bool {
        matches!(
            self,
            Request::CreateBiz(_)
                | Request::UpdateBiz(_)
                | Request::CreateRank(_)
                | Request::CreateRankInfo(_)
                | Request::UpdateRank(_)
                | Request::CreateToken(_)
                | Request::RevokeToken(_)
                | Request::SetBoardLimit(_)
        )
    }

    /// A read of the registry (businesses, rankings, their boards' usage)
    /// that any node answers from its replica of the metadata group, and
    /// so may be read `Stale`.
    pub fn is_registry_read(&self) -> bool {
        matches!(
            self,
            Request::GetBiz(_)
                | Request::ListBiz
                | Request::GetRank(_)
                | Request::GetRankInfo(_)
                | Request::BoardUsage(_)
                | Request::ListRanks
                | Request::ListBizPage(_)
                | Request::ListRanksPage(_)
        )
    }

    /// The operation's name, used as a metrics label and in logs; one of [`OPS`].
    ///
    /// `Once` is how the SDK and CLI send every registry change, so it is
    /// named for what it wraps (`rank_create`, not "once": otherwise every
    /// create and update would share one label). A `Stale` read keeps its
    /// own name: it skips the read barrier, so its latency is another story.
    pub fn op(&self) -> &'static str {
        match self {
            Request::Ping => "ping",
            Request::CreateBiz(_) => "biz_create",
            Request::GetBiz(_) => "biz_get",
            Request::ListBiz | Request::ListBizPage(_) => "biz_list",
            Request::UpdateBiz(_) => "biz_update",
            Request::Like(_) => "like",
            Request::Status(_) => "status",
            Request::Counts(_) => "counts",
            Request::UserLikes(_) => "user_likes",
            Request::Likers(_) => "likers",
            Request::Received(_) => "received",
            Request::CreateRank(_) | Request::CreateRankInfo(_) => "rank_create",
            Request::GetRank(_) | Request::GetRankInfo(_) => "rank_get",
            Request::ListRanks | Request::ListRanksPage(_) => "rank_list",
            Request::UpdateRank(_) => "rank_update",
            Request::Score(_) => "score",
            Request::Query(q) => match q.query {
                crate::scoring::BoardQuery::Top { .. } => "top",
                crate::scoring::BoardQuery::RankOf { .. } => "rank_of",
                crate::scoring::BoardQuery::Around { .. } => "around",
                crate::scoring::BoardQuery::Scores { .. } => "scores",
                crate::scoring::BoardQuery::Size => "board_size",
            },
            Request::Boards(_) => "boards",
            Request::Hello(_) => "hello",
            Request::Routing => "routing",
            Request::ClusterStatus => "cluster_status",
            Request::Once { req, .. } => req.op(),
            Request::Stale(_) => "stale",
            Request::Auth(_) => "auth",
            Request::CreateToken(_) => "token_create",
            Request::ListTokens => "token_list",
            Request::RevokeToken(_) => "token_revoke",
            Request::DrainNode(_) => "drain",
            Request::Nodes => "nodes",
            Request::Members(_) => "members",
            Request::SetBoardLimit(_) => "rank_limit",
            Request::BoardUsage(_) => "rank_usage",
            Request::HotKeys(_) => "hotkeys",
            Request::HotSet(_) => "hotset",
            // Like `Stale`: served off the leader, so its latency is
            // another story.
            Request::Replica(_) => "replica",
            Request::MoveBoard(_) => "move_board",
            Request::Placements => "placements",
            Request::MoveEntity(_) => "move_entity",
            Request::EntityPlacements => "entity_placements",
            Request::EntityRoutes => "entity_routes",
            Request::EntityRoutesPage(_) => "entity_routes_page",
        }
    }

    /// Checks every bound that does not need server state.
    pub fn validate(&self) -> Result<(), WireError> {
        match self {
            Request::Ping | Request::GetBiz(_) | Request::ListBiz => Ok(()),
            Request::Hello(_) | Request::Routing | Request::ClusterStatus => Ok(()),
            Request::DrainNode(_) | Request::Nodes | Request::Members(_) => Ok(()),
            Request::HotKeys(top) => {
                if (1..=crate::hotkeys::MAX_HOT_KEYS).contains(top) {
                    Ok(())
                } else {
                    Err(WireError::bad_request(format!(
                        "hotkeys takes 1 to {} keys, not {top}",
                        crate::hotkeys::MAX_HOT_KEYS
                    )))
                }
            }
            Request::HotSet(r) => r.validate(),
            Request::EntityRoutesPage(r) => r.validate(),
            Request::MoveBoard(m) => m.validate(),
            Request::Placements | Request::EntityPlacements | Request::EntityRoutes => Ok(()),
            Request::MoveEntity(_) => Ok(()),
            Request::Replica(req) if req.is_data_read() => req.validate(),
            Request::Replica(req) => {
                Err(WireError::bad_request(format!("{} cannot be read from any replica", req.op())))
            }
            Request::Once { req, .. } => match **req {
                ref r if r.is_registry_change() => req.validate(),
                _ => Err(WireError::bad_request(
                    "only registry changes (create or update a business, ranking or token) \
                     take a Once",
                )),
            },
            Request::Auth(a) if a.token.0.len() > crate::auth::MAX_TOKEN_LEN => {
                Err(WireError::unauthorized("invalid token"))
            }
            Request::Auth(_) | Request::ListTokens | Request::RevokeToken(_) => Ok(()),
            Request::CreateToken(c) => c.validate(),
            Request::Stale(req) if req.is_data_read() || req.is_registry_read() => req.validate(),
            Request::Stale(req) => {
                Err(WireError::bad_request(format!("{} cannot be read stale", req.op())))
            }
            Request::CreateRank(d) => d.validate(),
            Request::CreateRankInfo(i) => i.def.validate(),
            Request::GetRank(_) | Request::ListRanks | Request::UpdateRank(_) => Ok(()),
            Request::GetRankInfo(_) | Request::BoardUsage(_) => Ok(()),
            Request::SetBoardLimit(l) => l.validate(),
            Request::ListBizPage(p) | Request::ListRanksPage(p) => p.validate(),
            Request::Score(r) => r.validate(),
            Request::Query(r) => r.validate(),
            Request::Boards(r) => r.validate(),
            Request::CreateBiz(r) => r.validate(),
            Request::UpdateBiz(r) => r.validate(),
            Request::Like(_) | Request::Received(_) => Ok(()),
            Request::Status(r) => r.validate(),
            Request::Counts(r) => r.validate(),
            Request::UserLikes(r) => r.validate(),
            Request::Likers(r) => r.validate(),
        }
    }

    /// The business a request addresses, if any.
    pub fn biz(&self) -> Option<BizId> {
        match self {
            Request::Ping | Request::ListBiz | Request::CreateBiz(_) => None,
            Request::ListBizPage(_) | Request::ListRanksPage(_) => None,
            Request::Hello(_) | Request::Routing | Request::ClusterStatus => None,
            Request::Auth(_) | Request::ListTokens | Request::RevokeToken(_) => None,
            Request::DrainNode(_) | Request::Nodes | Request::Members(_) => None,
            Request::HotKeys(_) | Request::HotSet(_) => None,
            Request::MoveBoard(_) | Request::Placements => None,
            Request::MoveEntity(_) | Request::EntityPlacements | Request::EntityRoutes => None,
            Request::EntityRoutesPage(_) => None,
            Request::CreateToken(c) => Some(c.biz),
            Request::CreateRankInfo(i) => i.owner,
            Request::Once { req, .. } | Request::Stale(req) | Request::Replica(req) => req.biz(),
            Request::CreateRank(_)
            | Request::GetRank(_)
            | Request::GetRankInfo(_)
            | Request::SetBoardLimit(_)
            | Request::BoardUsage(_)
            | Request::ListRanks
            | Request::UpdateRank(_)
            | Request::Score(_)
            | Request::Query(_)
            | Request::Boards(_) => None,
            Request::GetBiz(id) => Some(*id),
            Request::UpdateBiz(r) => Some(r.id),
            Request::Like(r) => Some(r.biz),
            Request::Status(r) => Some(r.biz),
            Request::Counts(r) => Some(r.biz),
            Request::UserLikes(r) => Some(r.biz),
            Request::Likers(r) => Some(r.biz),
            Request::Received(r) => Some(r.biz),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::*;
    use crate::scoring::{BoardQuery, BoardRef, QueryRequest};

    /// One request of every variant (and every query kind).
    fn every_request() -> Vec<Request> {
        let query = |query| {
            Request::Query(QueryRequest { rank: 1, board: BoardRef::TypeId("total".into()), query })
        };
        vec![
            Request::Ping,
            Request::CreateBiz(CreateBiz {
                id: None,
                name: "x".into(),
                config: Default::default(),
            }),
            Request::GetBiz(1),
            Request::ListBiz,
            Request::UpdateBiz(UpdateBiz { id: 1, config: Default::default() }),
            Request::Like(LikeRequest {
                biz: 1,
                entity: 1,
                user: 1,
                owner: None,
                action: crate::likes::LikeAction::Like,
            }),
            Request::Status(StatusRequest { biz: 1, user: 1, entities: vec![] }),
            Request::Counts(CountsRequest { biz: 1, entities: vec![] }),
            Request::UserLikes(UserLikesRequest { biz: 1, user: 1, limit: 1, cursor: None }),
            Request::Likers(LikersRequest { biz: 1, entity: 1, limit: 1, cursor: None }),
            Request::Received(ReceivedRequest { biz: 1, user: 1 }),
            Request::GetRank(1),
            Request::ListRanks,
            Request::UpdateRank(Box::new(UpdateRank { id: 1, settings: Default::default() })),
            query(BoardQuery::Top { offset: 0, limit: 1 }),
            query(BoardQuery::RankOf { item: 1 }),
            query(BoardQuery::Around { item: 1, k: 1 }),
            query(BoardQuery::Scores { items: vec![] }),
            query(BoardQuery::Size),
            Request::Boards(BoardsRequest { rank: 1, limit: 1, cursor: None }),
            Request::Hello(Default::default()),
            Request::Routing,
            Request::ClusterStatus,
            Request::Once { id: 1, req: Box::new(Request::GetBiz(1)) },
            Request::Stale(Box::new(Request::ListBiz)),
            Request::ListBizPage(ListPage::first()),
            Request::HotSet(crate::hotkeys::HotSetRequest { bizs: vec![1], ranks: vec![] }),
            Request::Replica(Box::new(Request::Received(ReceivedRequest { biz: 1, user: 1 }))),
            Request::ListRanksPage(ListPage { after: Some(3), limit: 10 }),
            Request::Auth(AuthRequest { token: crate::auth::TokenSecret("t".into()) }),
            Request::CreateToken(CreateToken {
                secret: crate::auth::TokenSecret("s".into()),
                biz: 1,
                ranks: vec![],
                read_only: false,
            }),
            Request::ListTokens,
            Request::RevokeToken(1),
            Request::GetRankInfo(1),
            Request::BoardUsage(1),
            Request::MoveBoard(crate::placement::MoveBoard {
                rank: 1,
                board: "total".into(),
                to_shard: 2,
            }),
            Request::Placements,
            Request::MoveEntity(crate::placement::MoveEntity { biz: 1, entity: 2, to_shard: 3 }),
            Request::EntityPlacements,
            Request::EntityRoutes,
            Request::EntityRoutesPage(crate::entity_routes::RoutesPage {
                known: Some(3),
                after: None,
                limit: 100,
            }),
        ]
    }

    #[test]
    fn a_registry_change_sent_once_is_named_for_what_it_changes() {
        let once = |req| Request::Once { id: 9, req: Box::new(req) };
        let create = Request::CreateRank(Box::new(RankDef {
            id: 1,
            name: "x".into(),
            dims: vec![],
            granularities: vec![crate::window::Granularity::Day],
            utc_offset: crate::window::UtcOffset::UTC,
            aggregation: crate::rankings::Aggregation::Incr,
            ties: crate::rankings::TieMode::EarlierFirst,
            settings: Default::default(),
        }));
        assert_eq!(once(create).op(), "rank_create");
        let update =
            Request::UpdateRank(Box::new(UpdateRank { id: 1, settings: Default::default() }));
        assert_eq!(once(update).op(), "rank_update");
        let biz = Request::CreateBiz(CreateBiz {
            id: None,
            name: "x".into(),
            config: Default::default(),
        });
        assert_eq!(once(biz).op(), "biz_create");
        let biz = Request::UpdateBiz(UpdateBiz { id: 1, config: Default::default() });
        assert_eq!(once(biz).op(), "biz_update");
    }

    #[test]
    fn only_reads_may_be_read_stale() {
        let mut stale: Vec<&str> = every_request()
            .into_iter()
            .filter(|req| match Request::Stale(Box::new(req.clone())).validate() {
                Err(e) => !e.message.contains("cannot be read stale"),
                Ok(()) => true,
            })
            .map(|req| req.op())
            .collect();
        stale.sort_unstable();
        stale.dedup();
        // Reads of likes and boards (each query kind is named for itself),
        // and of the registry.
        let want = [
            "around",
            "biz_get",
            "biz_list",
            "board_size",
            "counts",
            "likers",
            "rank_get",
            "rank_list",
            "rank_of",
            "rank_usage",
            "received",
            "scores",
            "status",
            "top",
            "user_likes",
        ];
        assert_eq!(stale, want);
    }

    #[test]
    fn every_op_name_is_in_the_table() {
        for r in every_request() {
            assert!(OPS.contains(&r.op()), "{} is missing from OPS", r.op());
        }
        let mut names = OPS.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), OPS.len(), "no name twice");
    }
}
