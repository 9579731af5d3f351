//! Which business a ranking belongs to. A ranking created with an owner
//! (`rank create --biz B`) may be named only by tokens of that business; one
//! created without is shared, and the admin gives it to whichever
//! businesses' tokens it chooses. Owners are fixed at creation.
//!
//! Registry key: `b"ro"` + the ranking's 4-byte big-endian id (6 bytes; no
//! other registry key has that length). The owner is kept beside the
//! ranking's definition rather than in it: `RankDef`'s encoding is fixed,
//! since Raft logs, registries and older clients hold it.

use super::{decode, encode, Directory};
use plaudit_proto::rankings::{RankDef, RankId, RankInfo};
use plaudit_proto::{BizId, WireError};
use plaudit_storage::{StateError, WriteSet};

const OWNER_TAG: &[u8; 2] = b"ro";
const OWNER_KEY_LEN: usize = 6;

fn owner_key(rank: RankId) -> [u8; OWNER_KEY_LEN] {
    let mut k = [0u8; OWNER_KEY_LEN];
    k[..2].copy_from_slice(OWNER_TAG);
    k[2..].copy_from_slice(&rank.to_be_bytes());
    k
}

pub(super) fn is_owner_key(k: &[u8]) -> bool {
    k.len() == OWNER_KEY_LEN && k.starts_with(OWNER_TAG)
}

/// A stored owner record: the ranking (from the key) and its business.
pub(super) fn decode_owner(k: &[u8], v: &[u8]) -> Result<(RankId, BizId), StateError> {
    let mut id = [0u8; 4];
    id.copy_from_slice(&k[2..]);
    Ok((RankId::from_be_bytes(id), decode(v)?))
}

impl Directory {
    /// The business ranking `rank` belongs to; `None` if it is shared (or
    /// unknown).
    pub fn rank_owner(&self, rank: RankId) -> Option<BizId> {
        self.owners.read().unwrap_or_else(|e| e.into_inner()).get(&rank).copied()
    }

    /// A ranking with its owner.
    pub fn rank_info(&self, rank: RankId) -> Option<RankInfo> {
        let def = self.rank(rank)?;
        Some(RankInfo { def: (*def).clone(), owner: self.rank_owner(rank) })
    }

    /// Applies a ranking create with an owner: the business must exist.
    pub fn apply_create_rank_info(
        &self,
        info: &RankInfo,
        ws: &mut WriteSet,
    ) -> Result<RankDef, WireError> {
        if let Some(biz) = info.owner {
            if self.get(biz).is_none() {
                return Err(WireError::not_found(format!("business {biz} does not exist")));
            }
        }
        self.create_rank(&info.def, info.owner, ws)
    }

    /// Stores and publishes that ranking `rank` (about to be created)
    /// belongs to `biz`.
    pub(super) fn record_owner(
        &self,
        rank: RankId,
        biz: BizId,
        ws: &mut WriteSet,
    ) -> Result<(), WireError> {
        ws.put_registry(&owner_key(rank), &encode(&biz)?);
        self.owners.write().unwrap_or_else(|e| e.into_inner()).insert(rank, biz);
        Ok(())
    }

    /// Refuses a token of `biz` that names ranking `rank` of another
    /// business.
    pub(super) fn check_rank_for(&self, rank: RankId, biz: BizId) -> Result<(), WireError> {
        match self.rank_owner(rank) {
            Some(owner) if owner != biz => Err(WireError::refused(format!(
                "ranking {rank} belongs to business {owner}: a token of business {biz} may not \
                 name it"
            ))),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_keys_round_trip_and_have_a_length_of_their_own() {
        let k = owner_key(0x0102_0304);
        assert!(is_owner_key(&k));
        let (rank, biz) = decode_owner(&k, &encode(&7u32).unwrap()).unwrap();
        assert_eq!((rank, biz), (0x0102_0304, 7));
        // Businesses 4, rankings 5, at-most-once records 8 or 9 bytes.
        let others = [
            4,
            super::super::rank_key(1).len(),
            8,
            9,
            super::super::CLUSTER_KEY.len(),
            super::super::STATE_KEY.len(),
            super::super::tokens::TOKEN_KEY_LEN,
        ];
        assert!(!others.contains(&OWNER_KEY_LEN), "{others:?}");
    }
}
