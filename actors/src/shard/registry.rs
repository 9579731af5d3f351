//! Applying the registry family (create and update businesses and
//! rankings, replace the cluster map): on the metadata group only. The directory computes each
//! result deterministically (an assigned id is a function of the replicated
//! registry and the command's `IdRule`), so every replica answers alike; a rejected command
//! (a duplicate id, an unknown ranking) is a result, not an error.

use crate::command::{CmdResult, Command};
use crate::directory::{Directory, IdRule};
use plaudit_proto::WireError;
use plaudit_storage::WriteSet;

/// The result of one registry command; `is_meta` says whether this shard is
/// the metadata group (a data shard refuses registry commands).
pub(super) fn apply(
    directory: &Directory,
    is_meta: bool,
    cmd: &Command,
    now: u64,
    ws: &mut WriteSet,
) -> CmdResult {
    if !is_meta {
        return CmdResult::Failed(WireError::internal("registry command sent to a data shard"));
    }
    let res = match cmd {
        Command::CreateBiz(c) => {
            directory.apply_create(c, IdRule::AfterHighest, ws).map(CmdResult::Biz)
        }
        Command::CreateBizV2(c) => {
            directory.apply_create(c, IdRule::AfterHighestOrLowestFree, ws).map(CmdResult::Biz)
        }
        Command::UpdateBiz(u) => directory.apply_update(u, ws).map(CmdResult::Biz),
        Command::CreateRank(d) => {
            directory.apply_create_rank(d, ws).map(|d| CmdResult::Rank(Box::new(d)))
        }
        Command::CreateRankInfo(i) => {
            directory.apply_create_rank_info(i, ws).map(|d| CmdResult::Rank(Box::new(d)))
        }
        Command::UpdateRank(u) => {
            directory.apply_update_rank(u, ws).map(|d| CmdResult::Rank(Box::new(d)))
        }
        Command::SetCluster(m) => directory.apply_set_cluster(m, ws).map(|()| CmdResult::Done),
        Command::SetClusterState(s) => {
            directory.apply_set_cluster_state(s, ws).map(|()| CmdResult::Done)
        }
        Command::CreateToken(t) => directory.apply_create_token(t, now, ws).map(CmdResult::Token),
        Command::RevokeToken { id } => {
            directory.apply_revoke_token(*id, now, ws).map(CmdResult::Token)
        }
        Command::SetEntityPlacements(p) => {
            directory.apply_set_entity_placements(p, ws).map(|()| CmdResult::Done)
        }
        Command::SetPlacements(p) => {
            let p = plaudit_proto::placement::Placements::from((**p).clone());
            directory.apply_set_placements(&p, ws).map(|()| CmdResult::Done)
        }
        Command::SetPlacementsV2(p) => {
            directory.apply_set_placements(p, ws).map(|()| CmdResult::Done)
        }
        Command::SetBoardLimit(l) => {
            directory.apply_set_board_limit(l, ws).map(|()| CmdResult::Done)
        }
        Command::ReserveBoards { rank, type_keys, default } => directory
            .apply_reserve_boards(*rank, type_keys, *default, now, ws)
            .map(|()| CmdResult::Done),
        other => Err(WireError::internal(format!("not a registry command: {other:?}"))),
    };
    res.unwrap_or_else(CmdResult::Failed)
}
