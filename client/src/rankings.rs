//! Ranking calls of `Client`: definitions (create, get, list, update).

use crate::api::{unexpected, Client};
use crate::error::ClientError;
use plaudit_proto::rankings::{RankDef, RankId, RankSettings, UpdateRank};
use plaudit_proto::{Request, Response};

impl Client {
    /// Registers a ranking under the caller's `def.id` (immutable afterwards).
    pub async fn create_rank(&self, def: RankDef) -> Result<RankDef, ClientError> {
        self.expect_rank("rank_create", Request::CreateRank(def)).await
    }

    pub async fn get_rank(&self, id: RankId) -> Result<RankDef, ClientError> {
        self.expect_rank("rank_get", Request::GetRank(id)).await
    }

    pub async fn list_ranks(&self) -> Result<Vec<RankDef>, ClientError> {
        match self.request(Request::ListRanks).await? {
            Response::RankList(list) => Ok(list),
            other => Err(unexpected("rank_list", &other)),
        }
    }

    /// Replaces a ranking's mutable settings (cap, retention, filters,
    /// priority); read them with `get_rank` first to change one.
    pub async fn update_rank(
        &self,
        id: RankId,
        settings: RankSettings,
    ) -> Result<RankDef, ClientError> {
        self.expect_rank("rank_update", Request::UpdateRank(UpdateRank { id, settings })).await
    }

    async fn expect_rank(&self, op: &str, req: Request) -> Result<RankDef, ClientError> {
        match self.request(req).await? {
            Response::Rank(d) => Ok(d),
            other => Err(unexpected(op, &other)),
        }
    }
}
