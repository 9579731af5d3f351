//! Registry reads (businesses, rankings, and their paged listings) served
//! from this node's view of the registry. The caller decides how fresh that
//! view must be: the metadata leader passes its read barrier first, a stale
//! read takes the local replica as it is.
//!
//! The whole-list requests (`ListBiz`, `ListRanks`) predate paging: they
//! still answer while the list fits one frame, and past it say to page
//! instead of failing to encode the reply.

use crate::dispatch::{unknown_business, unknown_rank};
use crate::engine::{internal, Engine};
use plaudit_proto::limits::MAX_FRAME_LEN;
use plaudit_proto::listing::{self, BizPage, ListPage, RankPage, LIST_PAGE_BYTES};
use plaudit_proto::rankings::BoardUsage;
use plaudit_proto::{codec, Request, Response, WireError};

/// Bytes of a reply frame that are not the list itself (version, req_id,
/// variant tags, list length): generous.
const REPLY_OVERHEAD: usize = 64;

impl Engine {
    /// Answers a registry read from this node's directory; `None` for a
    /// request that is not one.
    pub(crate) fn read_registry(&self, req: &Request) -> Option<Result<Response, WireError>> {
        let d = &self.directory;
        Some(match req {
            Request::GetBiz(id) => {
                d.get(*id).map(Response::Biz).ok_or_else(|| unknown_business(*id))
            }
            Request::GetRank(id) => d
                .rank(*id)
                .map(|r| Response::Rank(Box::new((*r).clone())))
                .ok_or_else(|| unknown_rank(*id)),
            Request::GetRankInfo(id) => d
                .rank_info(*id)
                .map(|i| Response::RankInfo(Box::new(i)))
                .ok_or_else(|| unknown_rank(*id)),
            Request::ListBiz => whole(d.list(), "ListBizPage").map(Response::BizList),
            Request::ListRanks => whole(d.ranks(), "ListRanksPage").map(Response::RankList),
            Request::ListBizPage(p) => biz_page(self, p).map(Response::BizPage),
            Request::ListRanksPage(p) => rank_page(self, p).map(Response::RankPage),
            Request::ListTokens => Ok(Response::Tokens(d.list_tokens())),
            Request::BoardUsage(id) => self.board_usage(*id).map(Response::BoardUsage),
            _ => return None,
        })
    }
}

impl Engine {
    /// Ranking `rank`'s live sub-boards and limit as this node's registry
    /// has them, at this node's clock.
    pub(crate) fn board_usage(&self, rank: u32) -> Result<BoardUsage, WireError> {
        let now = crate::rankings::now_secs();
        let default = self.cfg.max_boards_per_ranking;
        self.directory.board_usage(rank, now, default).ok_or_else(|| unknown_rank(rank))
    }

    /// The answer to `SetBoardLimit`: the ranking's usage once it applied.
    pub(crate) fn limit_result(
        &self,
        r: plaudit_actors::CmdResult,
        rank: u32,
    ) -> Result<Response, WireError> {
        match r {
            plaudit_actors::CmdResult::Done => self.board_usage(rank).map(Response::BoardUsage),
            plaudit_actors::CmdResult::Failed(e) => Err(e),
            other => Err(internal(format!("unexpected result {other:?}"))),
        }
    }
}

fn biz_page(e: &Engine, p: &ListPage) -> Result<BizPage, WireError> {
    // One more than asked for, so the page knows whether another follows.
    let rows = e.directory.list_after(p.after, p.limit as usize + 1);
    let (items, next) = listing::cut(rows, p.limit, LIST_PAGE_BYTES)?;
    Ok(BizPage { items, next })
}

fn rank_page(e: &Engine, p: &ListPage) -> Result<RankPage, WireError> {
    let rows = e.directory.ranks_after(p.after, p.limit as usize + 1);
    // Cloned lazily: `cut` stops at its byte budget, and a definition may be
    // ~450 KB, so only what the page holds is copied.
    let rows = rows.into_iter().map(|(id, d)| (id, (*d).clone()));
    let (items, next) = listing::cut(rows, p.limit, LIST_PAGE_BYTES)?;
    Ok(RankPage { items, next })
}

/// A whole list for the pre-paging requests, if its reply fits a frame.
fn whole<T: serde::Serialize>(list: Vec<T>, paged: &str) -> Result<Vec<T>, WireError> {
    let bytes = codec::to_bytes(&list).map_err(internal)?.len();
    if bytes + REPLY_OVERHEAD > MAX_FRAME_LEN {
        return Err(WireError::bad_request(format!(
            "the list ({} items, {bytes} bytes) does not fit one reply of {MAX_FRAME_LEN} bytes: \
             ask for it in pages ({paged})",
            list.len()
        )));
    }
    Ok(list)
}
