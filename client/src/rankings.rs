//! Ranking calls of `Client`: definitions (create, get, list, update),
//! scoring events, queries on one sub-board, and the list of sub-boards.

use crate::api::{next_cursor, unexpected, Client};
use crate::error::ClientError;
use plaudit_proto::listing::{ListPage, RankPage, MAX_LIST_PAGE};
use plaudit_proto::rankings::{
    BoardLimit, BoardUsage, ItemId, RankDef, RankId, RankInfo, RankSettings, UpdateRank,
};
use plaudit_proto::scoring::{
    BoardQuery, BoardRef, BoardsPage, BoardsRequest, QueryReply, QueryRequest, RankedItem,
    ScoreReply, ScoreRequest,
};
use plaudit_proto::BizId;
use plaudit_proto::{Request, Response};

impl Client {
    /// Registers a ranking under the caller's `def.id` (immutable afterwards).
    /// Applied at most once, however often the SDK has to send it.
    pub async fn create_rank(&self, def: RankDef) -> Result<RankDef, ClientError> {
        self.expect_rank("rank_create", Request::CreateRank(Box::new(def))).await
    }

    /// Registers a ranking that belongs to business `owner`: only that
    /// business's tokens may name it (`None`: shared, as `create_rank`).
    /// Applied at most once, however often the SDK has to send it.
    pub async fn create_rank_for(
        &self,
        def: RankDef,
        owner: Option<BizId>,
    ) -> Result<RankInfo, ClientError> {
        let req = Request::CreateRankInfo(Box::new(RankInfo { def, owner }));
        self.expect_rank_info("rank_create", req).await
    }

    /// A ranking's definition and owner.
    pub async fn get_rank_info(&self, id: RankId) -> Result<RankInfo, ClientError> {
        self.expect_rank_info("rank_get", Request::GetRankInfo(id)).await
    }

    /// Sets ranking `id`'s limit of live sub-boards (`None`: the nodes'
    /// default) and answers its usage. Admin only; applied at most once.
    pub async fn set_board_limit(
        &self,
        id: RankId,
        max_boards: Option<u32>,
    ) -> Result<BoardUsage, ClientError> {
        let req = Request::SetBoardLimit(BoardLimit { rank: id, max_boards });
        self.expect_usage("rank_limit", req).await
    }

    /// Ranking `id`'s live sub-boards and the limit in force.
    pub async fn board_usage(&self, id: RankId) -> Result<BoardUsage, ClientError> {
        self.expect_usage("rank_usage", Request::BoardUsage(id)).await
    }

    async fn expect_usage(&self, op: &str, req: Request) -> Result<BoardUsage, ClientError> {
        match self.request(req).await? {
            Response::BoardUsage(u) => Ok(u),
            other => Err(unexpected(op, &other)),
        }
    }

    async fn expect_rank_info(&self, op: &str, req: Request) -> Result<RankInfo, ClientError> {
        match self.request(req).await? {
            Response::RankInfo(info) => Ok(*info),
            other => Err(unexpected(op, &other)),
        }
    }

    pub async fn get_rank(&self, id: RankId) -> Result<RankDef, ClientError> {
        self.expect_rank("rank_get", Request::GetRank(id)).await
    }

    /// Every ranking definition, in id order, read page by page (pages are
    /// cut by size too: a definition with long filter lists is ~450 KB).
    pub async fn list_ranks(&self) -> Result<Vec<RankDef>, ClientError> {
        let mut all = Vec::new();
        let mut after = None;
        loop {
            let page = self.list_ranks_page(after, MAX_LIST_PAGE).await?;
            all.extend(page.items);
            match next_cursor(after, page.next)? {
                Some(n) => after = Some(n),
                None => return Ok(all),
            }
        }
    }

    /// One page of ranking definitions: up to `limit` (at most
    /// `MAX_LIST_PAGE`, fewer if they are large) with ids above `after`.
    pub async fn list_ranks_page(
        &self,
        after: Option<RankId>,
        limit: u32,
    ) -> Result<RankPage, ClientError> {
        match self.request(Request::ListRanksPage(ListPage { after, limit })).await? {
            Response::RankPage(page) => Ok(page),
            other => Err(unexpected("rank_list", &other)),
        }
    }

    /// Replaces a ranking's mutable settings (cap, retention, filters,
    /// priority); read them with `get_rank` first to change one. Applied at
    /// most once, however often it is sent.
    pub async fn update_rank(
        &self,
        id: RankId,
        settings: RankSettings,
    ) -> Result<RankDef, ClientError> {
        self.expect_rank("rank_update", Request::UpdateRank(Box::new(UpdateRank { id, settings })))
            .await
    }

    /// Scores one event on every sub-board it lands on; repeating the same
    /// `event_id` reports `duplicate` and changes nothing. The SDK's own
    /// retry of this call (after a lost answer or a timeout) that finds the
    /// event applied by its earlier attempt reports `applied`, unless
    /// `ClientOptions::raw_score_outcomes`.
    pub async fn score(&self, event: ScoreRequest) -> Result<ScoreReply, ClientError> {
        match self.request(Request::Score(event)).await? {
            Response::Score(r) => Ok(r),
            other => Err(unexpected("score", &other)),
        }
    }

    /// Any query on one sub-board.
    pub async fn query(
        &self,
        rank: RankId,
        board: BoardRef,
        query: BoardQuery,
    ) -> Result<QueryReply, ClientError> {
        match self.request(Request::Query(QueryRequest { rank, board, query })).await? {
            Response::Query(r) => Ok(r),
            other => Err(unexpected("query", &other)),
        }
    }

    /// `limit` rows from 0-based `offset`, best first.
    pub async fn top(
        &self,
        rank: RankId,
        board: BoardRef,
        offset: u32,
        limit: u32,
    ) -> Result<Vec<RankedItem>, ClientError> {
        match self.query(rank, board, BoardQuery::Top { offset, limit }).await? {
            QueryReply::Items { items, .. } => Ok(items),
            _ => Err(ClientError::Protocol("unexpected reply to top".into())),
        }
    }

    /// The member's row, or `None` if it is not on the board.
    pub async fn rank_of(
        &self,
        rank: RankId,
        board: BoardRef,
        item: ItemId,
    ) -> Result<Option<RankedItem>, ClientError> {
        match self.query(rank, board, BoardQuery::RankOf { item }).await? {
            QueryReply::RankOf { row, .. } => Ok(row),
            _ => Err(ClientError::Protocol("unexpected reply to rank_of".into())),
        }
    }

    /// Up to `k` rows above the member, its own, and up to `k` below.
    pub async fn around(
        &self,
        rank: RankId,
        board: BoardRef,
        item: ItemId,
        k: u32,
    ) -> Result<Vec<RankedItem>, ClientError> {
        match self.query(rank, board, BoardQuery::Around { item, k }).await? {
            QueryReply::Items { items, .. } => Ok(items),
            _ => Err(ClientError::Protocol("unexpected reply to around".into())),
        }
    }

    /// Scores of up to 500 members, in request order (`None`: not on the board).
    pub async fn scores(
        &self,
        rank: RankId,
        board: BoardRef,
        items: &[ItemId],
    ) -> Result<Vec<(ItemId, Option<i64>)>, ClientError> {
        let q = BoardQuery::Scores { items: items.to_vec() };
        match self.query(rank, board, q).await? {
            QueryReply::Scores(s) => Ok(s),
            _ => Err(ClientError::Protocol("unexpected reply to scores".into())),
        }
    }

    pub async fn board_size(&self, rank: RankId, board: BoardRef) -> Result<u64, ClientError> {
        match self.query(rank, board, BoardQuery::Size).await? {
            QueryReply::Size(n) => Ok(n),
            _ => Err(ClientError::Protocol("unexpected reply to board_size".into())),
        }
    }

    /// One page of a ranking's sub-boards; pass `next` back as `cursor`.
    pub async fn boards(
        &self,
        rank: RankId,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<BoardsPage, ClientError> {
        let req = BoardsRequest { rank, cursor: cursor.map(str::to_string), limit };
        match self.request(Request::Boards(req)).await? {
            Response::Boards(p) => Ok(p),
            other => Err(unexpected("boards", &other)),
        }
    }

    async fn expect_rank(&self, op: &str, req: Request) -> Result<RankDef, ClientError> {
        match self.request(req).await? {
            Response::Rank(d) => Ok(*d),
            other => Err(unexpected(op, &other)),
        }
    }
}
