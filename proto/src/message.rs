//! The request and response enums and the envelope that pairs them;
//! what a request says about itself (its op name, validation, the business
//! it names) is in `message/facts.rs`.
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

/// The top bit of a request's `req_id`: the request is one of a pipeline
/// whose caller waits for every reply (`Client::pipeline`). A node may then
/// hold the replies of the requests it read together until their writes
/// are answered, and send them in one write (`node/src/server/hold.rs`);
/// without the bit each reply leaves as soon as it is ready. The reply
/// carries the id as sent, bit included, and a node that does not know the
/// bit answers as always. The top bit, not a low one, so that no client
/// counting its ids from 1 sets it by chance.
pub const PIPELINED: u64 = 1 << 63;

impl<T> Envelope<T> {
    /// Whether the request came in a pipeline (`PIPELINED`).
    pub fn pipelined(&self) -> bool {
        self.req_id & PIPELINED != 0
    }
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

mod facts;
pub use facts::OPS;

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

    /// Every request and reply is moved several times on its way through
    /// a node (decoded, staged, answered, queued to be written): its size
    /// is paid on each move. A ranking definition inline made both 184
    /// bytes; large, rare payloads are boxed.
    #[test]
    fn requests_and_replies_stay_small() {
        assert!(std::mem::size_of::<Request>() <= 80, "{}", std::mem::size_of::<Request>());
        assert!(std::mem::size_of::<Response>() <= 72, "{}", std::mem::size_of::<Response>());
    }
}
