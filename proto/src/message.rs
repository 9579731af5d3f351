//! The request and response enums and the envelope that pairs them.
//!
//! Variants are only ever appended: bincode encodes the variant index, so
//! reordering would break mixed-version clusters and clients.

use crate::auth::{AuthRequest, CreateToken, Role, TokenId, TokenInfo};
use crate::business::{Business, CreateBiz, UpdateBiz};
use crate::cluster::{ClientHello, ClusterStatus, RoutingTable};
use crate::error::WireError;
use crate::ids::BizId;
use crate::likes::{
    CountsRequest, EntityCounts, EntityState, LikeReply, LikeRequest, LikersRequest, Page,
    ReceivedReply, ReceivedRequest, StatusRequest, UserLikesRequest,
};
use crate::listing::{BizPage, ListPage, RankPage};
use crate::rankings::{BoardLimit, BoardUsage, RankDef, RankId, RankInfo, UpdateRank};
use crate::scoring::{
    BoardsPage, BoardsRequest, QueryReply, QueryRequest, ScoreReply, ScoreRequest,
};
use serde::{Deserialize, Serialize};

/// A request body with the id the reply will carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope<T> {
    pub req_id: u64,
    pub body: T,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    Ping,
    CreateBiz(CreateBiz),
    GetBiz(BizId),
    ListBiz,
    UpdateBiz(UpdateBiz),
    Like(LikeRequest),
    Status(StatusRequest),
    Counts(CountsRequest),
    UserLikes(UserLikesRequest),
    Likers(LikersRequest),
    Received(ReceivedRequest),
    CreateRank(Box<RankDef>),
    GetRank(RankId),
    ListRanks,
    UpdateRank(Box<UpdateRank>),
    Score(ScoreRequest),
    Query(QueryRequest),
    Boards(BoardsRequest),
    /// How this connection wants requests for other nodes' shards handled.
    Hello(ClientHello),
    /// The cluster map and this node's view of the leaders.
    Routing,
    /// Every node and group, for operators.
    ClusterStatus,
    /// A registry change (create or update a business or ranking) that the
    /// cluster applies at most once per `id`: a retry after a lost answer
    /// gets the first attempt's result. `id` should be random (64 bits).
    Once {
        id: u64,
        #[serde(deserialize_with = "crate::nesting::nested")]
        req: Box<Request>,
    },
    /// A read served by whichever replica of its shard is nearest (this
    /// node's, if it has one), without the leader's read barrier: it may
    /// miss the newest writes, and says by how many entries at most.
    /// Status, counts, lists, received totals, board queries and registry
    /// reads may be stale; a status read should not be, if the caller must
    /// see its own likes.
    Stale(#[serde(deserialize_with = "crate::nesting::nested")] Box<Request>),
    /// One page of businesses in id order (`listing.rs`); replaces
    /// `ListBiz`, whose single reply stops fitting a frame past ~14k
    /// businesses.
    ListBizPage(ListPage),
    /// One page of ranking definitions in id order; replaces `ListRanks`.
    ListRanksPage(ListPage),
    /// Authenticates the connection (`auth.rs`).
    Auth(AuthRequest),
    /// Creates a business token (admin only).
    CreateToken(CreateToken),
    /// Every token, without secrets (admin only).
    ListTokens,
    /// Revokes a token at once, on every node and connection (admin only).
    RevokeToken(TokenId),
    /// Makes a node hand every leadership it holds to another replica and
    /// take none until it restarts (admin only); answered `Done` once the
    /// node has begun. `plaudit admin drain` then watches the status.
    DrainNode(crate::cluster::NodeId),
    /// Every member: identity, state, replicas and leaderships (admin only).
    Nodes,
    /// Decommissions or recommissions a member, or rebalances now (admin
    /// only); answered `Done` once the cluster state records it, or
    /// `Refused`. The moves that follow are watched in the status.
    Members(crate::membership::MemberOp),
    /// Creates a ranking owned by a business (or shared: `owner` None), admin
    /// only; answered `RankInfo`.
    CreateRankInfo(Box<RankInfo>),
    /// A ranking with its owner; answered `RankInfo`.
    GetRankInfo(RankId),
    /// Sets a ranking's limit of live sub-boards (admin only); answered
    /// `BoardUsage`.
    SetBoardLimit(BoardLimit),
    /// A ranking's live sub-boards and limit; answered `BoardUsage`.
    BoardUsage(RankId),
    /// The `top` keys taking the most requests on every node (admin);
    /// answered `HotKeys`, heaviest first.
    HotKeys(u32),
    /// The keys of some businesses and rankings hot enough on this node for
    /// a client to cache (`hotkeys.rs`); answered `HotSet`. Not forwarded:
    /// each node tells what it sees.
    HotSet(crate::hotkeys::HotSetRequest),
    /// A linearizable read of one shard that any of its replicas may serve
    /// (status, counts, lists, received totals, a board query): a follower
    /// asks the leader for its read index and reads once it has applied
    /// that far. Answered as the read it wraps.
    Replica(Box<Request>),
    /// Moves a sub-board to another shard (admin only); answered `Done`
    /// once the move is recorded. `Placements` shows its steps.
    MoveBoard(crate::placement::MoveBoard),
    /// Moved sub-boards and the moves under way (admin only); answered
    /// `Placements`.
    Placements,
    /// Moves an entity's counts and likers to another shard (admin only);
    /// answered `Done` once the move is recorded. `EntityPlacements` shows
    /// its steps.
    MoveEntity(crate::placement::MoveEntity),
    /// Moved entities and the moves under way (admin only); answered
    /// `EntityPlacements`.
    EntityPlacements,
    /// Where moved entities live (any client: the SDK asks with each
    /// routing table, to send an entity's reads to where it lives; a
    /// business's token is told its own entities only, at most 32,768);
    /// answered `EntityRoutes`. Superseded by `EntityRoutesPage`; still
    /// answered, for older SDKs.
    EntityRoutes,
    /// One page of where moved entities live, or word that the asker's
    /// version is current (any client, as `EntityRoutes`);
    /// answered `EntityRoutesPage`.
    EntityRoutesPage(crate::entity_routes::RoutesPage),
}

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
            Request::Replica(req) => match **req {
                Request::Status(_)
                | Request::Counts(_)
                | Request::UserLikes(_)
                | Request::Likers(_)
                | Request::Received(_)
                | Request::Query(_) => req.validate(),
                _ => Err(WireError::bad_request(format!(
                    "{} cannot be read from any replica",
                    req.op()
                ))),
            },
            Request::Once { req, .. } => match **req {
                Request::CreateBiz(_)
                | Request::UpdateBiz(_)
                | Request::CreateRank(_)
                | Request::CreateRankInfo(_)
                | Request::UpdateRank(_)
                | Request::CreateToken(_)
                | Request::RevokeToken(_)
                | Request::SetBoardLimit(_) => req.validate(),
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
            Request::Stale(req) => match **req {
                Request::Status(_)
                | Request::Counts(_)
                | Request::UserLikes(_)
                | Request::Likers(_)
                | Request::Received(_)
                | Request::Query(_) => req.validate(),
                ref r if r.is_registry_read() => req.validate(),
                _ => Err(WireError::bad_request(format!("{} cannot be read stale", req.op()))),
            },
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

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    Pong,
    Biz(Business),
    BizList(Vec<Business>),
    Like(LikeReply),
    Status(Vec<EntityState>),
    Counts(Vec<EntityCounts>),
    /// The reply to `UserLikes` (items are entities) and `Likers` (items are users).
    Page(Page),
    Received(ReceivedReply),
    Error(WireError),
    Rank(Box<RankDef>),
    RankList(Vec<RankDef>),
    Score(ScoreReply),
    Query(QueryReply),
    Boards(BoardsPage),
    Hello,
    Routing(Box<RoutingTable>),
    ClusterStatus(Box<ClusterStatus>),
    /// The answer to a `Stale` read, and how far behind it may be: the
    /// most log entries the answering replicas knew committed but had not
    /// applied.
    Stale {
        lag: u64,
        #[serde(deserialize_with = "crate::nesting::nested")]
        reply: Box<Response>,
    },
    /// The reply to `ListBizPage`.
    BizPage(BizPage),
    /// The reply to `ListRanksPage`.
    RankPage(RankPage),
    /// The reply to `Auth`: what the connection may now do.
    Auth(Role),
    /// The reply to `CreateToken` and `RevokeToken`.
    Token(TokenInfo),
    /// The reply to `ListTokens`.
    Tokens(Vec<TokenInfo>),
    /// Taken, with nothing to say (`DrainNode`).
    Done,
    /// The reply to `Nodes`.
    Nodes(Vec<crate::membership::NodeRow>),
    /// The reply to `CreateRankInfo` and `GetRankInfo`.
    RankInfo(Box<RankInfo>),
    /// The reply to `SetBoardLimit` and `BoardUsage`.
    BoardUsage(BoardUsage),
    /// The reply to `HotKeys`.
    HotKeys(Vec<crate::hotkeys::HotKeyRow>),
    /// The reply to `HotSet`.
    HotSet(Vec<crate::hotkeys::HotKey>),
    /// The reply to `Placements`.
    Placements(Box<crate::placement::Placements>),
    /// The reply to `EntityPlacements`.
    EntityPlacements(Box<crate::placement::EntityPlacements>),
    /// The reply to `EntityRoutes`: each moved entity and its shard.
    EntityRoutes(Vec<(crate::placement::EntityKey, crate::ids::ShardId)>),
    /// The reply to `EntityRoutesPage`.
    EntityRoutesPage(crate::entity_routes::RoutesReply),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scoring::{BoardQuery, BoardRef};

    /// Every request and reply is moved several times on its way through
    /// a node (decoded, staged, answered, queued to be written): its size
    /// is paid on each move. A ranking definition inline made both 184
    /// bytes; large, rare payloads are boxed.
    #[test]
    fn requests_and_replies_stay_small() {
        assert!(std::mem::size_of::<Request>() <= 80, "{}", std::mem::size_of::<Request>());
        assert!(std::mem::size_of::<Response>() <= 72, "{}", std::mem::size_of::<Response>());
    }

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
