//! Reserving a scoring event's new sub-boards against their ranking's limit
//! of live ones, before anything is proposed on them. The metadata group
//! counts (`actors/src/directory/board_limits.rs`); this is the edge's half.
//!
//! ```text
//! score ─> every live board of the event in the memo? ─yes─> propose on the boards' shards
//!            no ─> ReserveBoards { rank, the others, limit } on the metadata group
//!                    Done ─> remembered ─> propose
//!                    Refused ─> the event fails whole: nothing is proposed
//! ```
//!
//! The memo is of what this node has seen reserved, so a board's events
//! pay the metadata round trip once per node (the staged fast path in
//! `staged.rs` takes only remembered boards). It holds 64-bit fingerprints
//! of (ranking, type key), hashed with a key of this process's own
//! (clients choose dimension values, so they must not be able to aim two
//! boards at one fingerprint), at most `MEMO_MAX` of them: full, it starts
//! over, and the next events reserve again (a repeat costs the metadata
//! group a lookup, not a seat).
//!
//! A reservation outlives its board only where the event then fails on the
//! board (shed, refused, a node lost): it counts until its window expires,
//! and a retry of the event uses it.

use crate::engine::{internal, Engine};
use plaudit_actors::{CmdResult, Command};
use plaudit_proto::rankings::RankId;
use plaudit_proto::WireError;
use std::collections::hash_map::RandomState;
use std::collections::HashSet;
use std::hash::BuildHasher;
use std::sync::RwLock;

/// Fingerprints the memo holds at most (~4-8 MiB).
pub const MEMO_MAX: usize = 1 << 18;

/// What this node has seen reserved.
#[derive(Default)]
pub struct Reserved {
    keys: RandomState,
    seen: RwLock<HashSet<u64>>,
}

impl Reserved {
    fn fingerprint(&self, rank: RankId, type_key: &[u8]) -> u64 {
        self.keys.hash_one((rank, type_key))
    }

    pub fn contains(&self, rank: RankId, type_key: &[u8]) -> bool {
        let fp = self.fingerprint(rank, type_key);
        self.seen.read().unwrap_or_else(|e| e.into_inner()).contains(&fp)
    }

    pub fn remember<'a>(&self, rank: RankId, type_keys: impl IntoIterator<Item = &'a [u8]>) {
        let fps: Vec<u64> = type_keys.into_iter().map(|k| self.fingerprint(rank, k)).collect();
        let mut seen = self.seen.write().unwrap_or_else(|e| e.into_inner());
        if seen.len() + fps.len() > MEMO_MAX {
            seen.clear();
        }
        seen.extend(fps);
    }

    pub fn len(&self) -> usize {
        self.seen.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Engine {
    /// The limit in force for ranking `rank`: its own, else this node's
    /// default; 0: none.
    pub(crate) fn board_limit(&self, rank: RankId) -> u32 {
        self.directory.board_limit(rank).unwrap_or(self.cfg.max_boards_per_ranking)
    }

    /// Whether an event on sub-board `type_key` may be proposed without a
    /// reservation first: the ranking has no limit, or this node has seen
    /// the board reserved.
    pub(crate) fn board_reserved(&self, rank: RankId, type_key: &[u8]) -> bool {
        self.board_limit(rank) == 0 || self.reserved.contains(rank, type_key)
    }

    /// Reserves the sub-boards among `type_keys` that this node has not
    /// seen reserved: all of them, or an error (`Refused` past the limit)
    /// and none.
    pub(crate) async fn reserve_boards(
        &self,
        rank: RankId,
        type_keys: &[&[u8]],
    ) -> Result<(), WireError> {
        let limit = self.board_limit(rank);
        if limit == 0 {
            return Ok(());
        }
        let new: Vec<Vec<u8>> = type_keys
            .iter()
            .filter(|k| !self.reserved.contains(rank, k))
            .map(|k| k.to_vec())
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        let cmd = Command::ReserveBoards { rank, type_keys: new.clone(), limit };
        // Never shed: without its reservation the event cannot be proposed.
        match self.propose_routed(self.router.meta_id, cmd, None).await? {
            Some(CmdResult::Done) => {
                self.reserved.remember(rank, new.iter().map(Vec::as_slice));
                Ok(())
            }
            Some(CmdResult::Failed(e)) => Err(e),
            other => Err(internal(format!("unexpected result of a board reservation: {other:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memo_remembers_per_ranking_and_starts_over_when_full() {
        let r = Reserved::default();
        r.remember(1, [&b"a"[..], b"b"]);
        assert!(r.contains(1, b"a") && r.contains(1, b"b"));
        assert!(!r.contains(2, b"a"), "another ranking's board");
        assert!(!r.contains(1, b"c"));
        let many: Vec<Vec<u8>> = (0..MEMO_MAX as u32).map(|i| i.to_be_bytes().to_vec()).collect();
        r.remember(3, many.iter().map(Vec::as_slice));
        assert!(!r.contains(1, b"a"), "started over");
        assert_eq!(r.len(), MEMO_MAX);
    }
}
