//! The request and response enums and the envelope that pairs them.
//!
//! Variants are only ever appended: bincode encodes the variant index, so
//! reordering would break mixed-version clusters and clients.

use crate::business::{Business, CreateBiz, UpdateBiz};
use crate::error::WireError;
use crate::ids::BizId;
use crate::likes::{
    CountsRequest, EntityCounts, EntityState, LikeReply, LikeRequest, LikersRequest, Page,
    ReceivedReply, ReceivedRequest, StatusRequest, UserLikesRequest,
};
use crate::rankings::{RankDef, RankId, UpdateRank};
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
    CreateRank(RankDef),
    GetRank(RankId),
    ListRanks,
    UpdateRank(UpdateRank),
    Score(ScoreRequest),
    Query(QueryRequest),
    Boards(BoardsRequest),
}

impl Request {
    /// The operation's name, used as a metrics label and in logs.
    pub fn op(&self) -> &'static str {
        match self {
            Request::Ping => "ping",
            Request::CreateBiz(_) => "biz_create",
            Request::GetBiz(_) => "biz_get",
            Request::ListBiz => "biz_list",
            Request::UpdateBiz(_) => "biz_update",
            Request::Like(_) => "like",
            Request::Status(_) => "status",
            Request::Counts(_) => "counts",
            Request::UserLikes(_) => "user_likes",
            Request::Likers(_) => "likers",
            Request::Received(_) => "received",
            Request::CreateRank(_) => "rank_create",
            Request::GetRank(_) => "rank_get",
            Request::ListRanks => "rank_list",
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
        }
    }

    /// Checks every bound that does not need server state.
    pub fn validate(&self) -> Result<(), WireError> {
        match self {
            Request::Ping | Request::GetBiz(_) | Request::ListBiz => Ok(()),
            Request::CreateRank(d) => d.validate(),
            Request::GetRank(_) | Request::ListRanks | Request::UpdateRank(_) => Ok(()),
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
            Request::CreateRank(_)
            | Request::GetRank(_)
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
    Rank(RankDef),
    RankList(Vec<RankDef>),
    Score(ScoreReply),
    Query(QueryReply),
    Boards(BoardsPage),
}
