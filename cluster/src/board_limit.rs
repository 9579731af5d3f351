//! Reserving a scoring event's new sub-boards against their ranking's limit
//! of live ones, before anything is proposed on them. The metadata group
//! counts (`actors/src/directory/board_limits.rs`); this is the edge's half.
//!
//! ```text
//! score ─> every live board of the event in the memo? ─yes─> propose on the boards' shards
//!            no ─> ReserveBoards { rank, the others, default } on the metadata group
//!                    (shed first under load, at the ranking's priority)
//!                    Done ─> remembered ─> propose
//!                    Refused ─> the event fails whole: nothing is proposed
//! ```
//!
//! The memo is of what this node has seen reserved, so a board's events
//! pay the metadata round trip (a Raft write) once per node; the staged
//! fast path (`staged.rs`) takes only remembered boards. It holds 64-bit
//! fingerprints of (ranking, type key), hashed with a key of this process's
//! own (clients choose dimension values, so they must not be able to aim
//! two boards at one fingerprint), in two generations of at most
//! `MEMO_GENERATION` each: when the newer fills, the older is dropped, so a
//! full memo forgets half of what it knew, not all (each forgotten board
//! costs its next event a reservation that changes nothing but the log).
//!
//! A refusal is not remembered here: this node cannot tell a board new to
//! the ranking from one another node reserved, which must keep scoring. So
//! past its limit every event that would start a board costs a metadata
//! entry (the group looks for expired windows at most once a second, so it
//! is a lookup there); under load those are shed first, at the ranking's
//! priority, before the registry's own changes.
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

/// Fingerprints one generation of the memo holds at most (two: ~8-16 MiB).
pub const MEMO_GENERATION: usize = 1 << 18;

/// What this node has seen reserved.
#[derive(Default)]
pub struct Reserved {
    keys: RandomState,
    seen: RwLock<Generations>,
}

#[derive(Default)]
struct Generations {
    newer: HashSet<u64>,
    older: HashSet<u64>,
}

impl Reserved {
    fn fingerprint(&self, rank: RankId, type_key: &[u8]) -> u64 {
        self.keys.hash_one((rank, type_key))
    }

    pub fn contains(&self, rank: RankId, type_key: &[u8]) -> bool {
        let fp = self.fingerprint(rank, type_key);
        let seen = self.seen.read().unwrap_or_else(|e| e.into_inner());
        seen.newer.contains(&fp) || seen.older.contains(&fp)
    }

    pub fn remember<'a>(&self, rank: RankId, type_keys: impl IntoIterator<Item = &'a [u8]>) {
        let fps: Vec<u64> = type_keys.into_iter().map(|k| self.fingerprint(rank, k)).collect();
        let mut seen = self.seen.write().unwrap_or_else(|e| e.into_inner());
        if seen.newer.len() + fps.len() > MEMO_GENERATION {
            seen.older = std::mem::take(&mut seen.newer);
        }
        seen.newer.extend(fps);
    }

    pub fn len(&self) -> usize {
        let seen = self.seen.read().unwrap_or_else(|e| e.into_inner());
        seen.newer.len() + seen.older.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Engine {
    /// The limit in force for ranking `rank` as this node sees it: its
    /// own, else this node's default; 0: none.
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
    /// seen reserved: all of them, or an error (`Refused` past the limit,
    /// `Overloaded` if the metadata group shed it at `priority`) and none.
    pub(crate) async fn reserve_boards(
        &self,
        rank: RankId,
        type_keys: &[&[u8]],
        priority: u8,
    ) -> Result<(), WireError> {
        if self.board_limit(rank) == 0 {
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
        let default = self.cfg.max_boards_per_ranking;
        let cmd = Command::ReserveBoards { rank, type_keys: new.clone(), default };
        match self.propose_routed(self.router.meta_id, cmd, Some(priority)).await? {
            Some(CmdResult::Done) => {
                self.reserved.remember(rank, new.iter().map(Vec::as_slice));
                Ok(())
            }
            Some(CmdResult::Failed(e)) => Err(e),
            None => Err(WireError::overloaded(format!(
                "the metadata group shed the reservation of ranking {rank}'s new sub-boards"
            ))),
            Some(other) => {
                Err(internal(format!("unexpected result of a board reservation: {other:?}")))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memo_remembers_per_ranking_and_forgets_by_generation() {
        let r = Reserved::default();
        r.remember(1, [&b"a"[..], b"b"]);
        assert!(r.contains(1, b"a") && r.contains(1, b"b"));
        assert!(!r.contains(2, b"a"), "another ranking's board");
        assert!(!r.contains(1, b"c"));
        let keys = |from: u32| -> Vec<Vec<u8>> {
            (from..from + MEMO_GENERATION as u32).map(|i| i.to_be_bytes().to_vec()).collect()
        };
        let first = keys(0);
        r.remember(3, first.iter().map(Vec::as_slice));
        assert!(r.contains(1, b"a"), "the older generation is still asked");
        assert!(r.contains(3, &first[0]));
        r.remember(3, keys(1 << 30).iter().map(Vec::as_slice));
        assert!(!r.contains(1, b"a"), "two generations on, forgotten");
        assert!(r.contains(3, &first[0]), "the generation before is kept");
        assert!(r.len() <= 2 * MEMO_GENERATION);
    }
}
