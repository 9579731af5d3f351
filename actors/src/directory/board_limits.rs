//! A ranking's limit of live sub-boards: every new dimension value (and
//! every new window) of a ranking starts a sub-board, so without a limit a
//! scoring token could fill the cluster's memory with boards.
//!
//! ```text
//! an event on a sub-board the proposing node has not seen reserved
//!   ─> ReserveBoards { rank, type_keys, limit } on the metadata group:
//!        every key reserved already ────────────────────────> Done
//!        reserved + new ≤ limit ────────────────────────────> recorded, Done
//!        else forget the reservations whose window the ranking
//!        no longer keeps, and count again ───> recorded, Done | Refused
//!   ─> (Done) the events are proposed on the boards' shards
//! ```
//!
//! Why the metadata group counts: a ranking's sub-boards hash over every
//! shard, so no board shard sees them all; a per-shard share of the limit
//! would refuse early wherever boards hash unevenly. The metadata group
//! keeps the set of reserved type keys per ranking, so a repeated
//! reservation (a retry, two nodes, a new leader) is counted once and the
//! count is exact.
//!
//! A sub-board is live while its ranking keeps its window
//! (`route::is_kept`, at the entry's time): the metadata group forgets a
//! reservation by the rule the board shards' retention sweeps drop boards
//! by, so it needs no message from them. A sweep runs after the window
//! ends, so between the two a ranking may hold the limit plus the boards
//! of windows that have just expired. `total` boards never expire.
//!
//! A full ranking refuses every event that would start a board; looking
//! through its reservations for expired windows is done at most once a
//! second (`PURGE_GAP_MS`, entry time, recorded so that every replica
//! decides alike), so such a refusal costs a lookup, not a scan.
//!
//! Registry keys: a ranking's own limit is `b"rlimit"` + its 4-byte id (10
//! bytes); when it was last looked through, `b"rlpurged"` + the id (12); a
//! reservation is `b"rb"` + the ranking's id + the board's type key (at
//! least 15 bytes). No other registry key has those lengths but
//! `b"entity-placements"`, which the directory matches whole first.
//! Memory: a reservation is its type key (9 bytes + 8 per dimension) in a
//! `BTreeSet`, about 60-90 bytes with the set's overhead, on every replica
//! of the metadata group; the limits bound it.
//!
//! The limit applied is the ranking's own as this group holds it (so a
//! `rank limit` takes effect at once everywhere), else the default the
//! proposing node carries (`max_boards_per_ranking`, each node's setting).

use super::{encode, Directory};
use crate::rankings::route;
use plaudit_proto::rankings::{BoardLimit, BoardUsage, RankDef, RankId};
use plaudit_proto::window::TypeId;
use plaudit_proto::WireError;
use plaudit_storage::{StateError, WriteSet};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::RwLock;

const LIMIT_TAG: &[u8; 6] = b"rlimit";
pub(super) const LIMIT_KEY_LEN: usize = 10;
const PURGED_TAG: &[u8; 8] = b"rlpurged";
pub(super) const PURGED_KEY_LEN: usize = 12;
/// A full ranking's reservations are looked through for expired windows at
/// most this often (entry time).
pub const PURGE_GAP_MS: u64 = 1000;
const RESERVED_TAG: &[u8; 2] = b"rb";
/// The tag, a ranking id and the shortest type key (a granularity and a
/// window start).
pub(super) const MIN_RESERVED_KEY_LEN: usize = 2 + 4 + 9;

fn limit_key(rank: RankId) -> [u8; LIMIT_KEY_LEN] {
    let mut k = [0u8; LIMIT_KEY_LEN];
    k[..6].copy_from_slice(LIMIT_TAG);
    k[6..].copy_from_slice(&rank.to_be_bytes());
    k
}

fn purged_key(rank: RankId) -> [u8; PURGED_KEY_LEN] {
    let mut k = [0u8; PURGED_KEY_LEN];
    k[..8].copy_from_slice(PURGED_TAG);
    k[8..].copy_from_slice(&rank.to_be_bytes());
    k
}

fn reserved_key(rank: RankId, type_key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(6 + type_key.len());
    k.extend_from_slice(RESERVED_TAG);
    k.extend_from_slice(&rank.to_be_bytes());
    k.extend_from_slice(type_key);
    k
}

fn rank_at(k: &[u8], at: usize) -> RankId {
    let mut id = [0u8; 4];
    id.copy_from_slice(&k[at..at + 4]);
    RankId::from_be_bytes(id)
}

/// Whether the ranking keeps the window of the sub-board `type_key` at
/// `now` (epoch seconds). A key that is not a type key is not live.
fn is_live(def: &RankDef, type_key: &[u8], now: i64) -> bool {
    TypeId::from_key(type_key).is_some_and(|t| route::is_kept(def, t.gran, t.start, now))
}

/// The limits and reservations of every ranking.
#[derive(Default)]
pub(super) struct BoardLimits {
    own: RwLock<BTreeMap<RankId, u32>>,
    reserved: RwLock<BTreeMap<RankId, BTreeSet<Vec<u8>>>>,
    /// When each full ranking was last looked through for expired windows
    /// (entry time, ms).
    purged: RwLock<BTreeMap<RankId, u64>>,
}

impl BoardLimits {
    /// Takes a registry record if it is one of ours; false if it is not.
    pub(super) fn load_record(&mut self, k: &[u8], v: &[u8]) -> Result<bool, StateError> {
        if k.len() == LIMIT_KEY_LEN && k.starts_with(LIMIT_TAG) {
            let n: u32 = super::decode(v)?;
            self.own.get_mut().unwrap_or_else(|e| e.into_inner()).insert(rank_at(k, 6), n);
            Ok(true)
        } else if k.len() == PURGED_KEY_LEN && k.starts_with(PURGED_TAG) {
            let at: u64 = super::decode(v)?;
            self.purged.get_mut().unwrap_or_else(|e| e.into_inner()).insert(rank_at(k, 8), at);
            Ok(true)
        } else if k.len() >= MIN_RESERVED_KEY_LEN && k.starts_with(RESERVED_TAG) {
            let reserved = self.reserved.get_mut().unwrap_or_else(|e| e.into_inner());
            reserved.entry(rank_at(k, 2)).or_default().insert(k[6..].to_vec());
            Ok(true)
        } else {
            Ok(false)
        }
    }

    /// Takes `fresh`'s records in place of these (a snapshot was installed).
    pub(super) fn replace(&self, fresh: BoardLimits) {
        let BoardLimits { own, reserved, purged } = fresh;
        *self.own.write().unwrap_or_else(|e| e.into_inner()) =
            own.into_inner().unwrap_or_else(|e| e.into_inner());
        *self.reserved.write().unwrap_or_else(|e| e.into_inner()) =
            reserved.into_inner().unwrap_or_else(|e| e.into_inner());
        *self.purged.write().unwrap_or_else(|e| e.into_inner()) =
            purged.into_inner().unwrap_or_else(|e| e.into_inner());
    }
}

impl Directory {
    /// Ranking `rank`'s own limit of live sub-boards, if it has one.
    pub fn board_limit(&self, rank: RankId) -> Option<u32> {
        self.board_limits.own.read().unwrap_or_else(|e| e.into_inner()).get(&rank).copied()
    }

    /// Ranking `rank`'s live sub-boards at `now` (epoch seconds) and its
    /// limit, `default` standing for the nodes' setting; `None` if the
    /// ranking does not exist.
    pub fn board_usage(&self, rank: RankId, now: i64, default: u32) -> Option<BoardUsage> {
        let def = self.rank(rank)?;
        let reserved = self.board_limits.reserved.read().unwrap_or_else(|e| e.into_inner());
        let live = reserved
            .get(&rank)
            .map_or(0, |set| set.iter().filter(|k| is_live(&def, k, now)).count() as u64);
        let max_boards = self.board_limit(rank);
        Some(BoardUsage { rank, live, max_boards, effective: max_boards.unwrap_or(default) })
    }

    /// Applies `SetBoardLimit`: the ranking must exist.
    pub fn apply_set_board_limit(
        &self,
        l: &BoardLimit,
        ws: &mut WriteSet,
    ) -> Result<(), WireError> {
        l.validate()?;
        if self.rank(l.rank).is_none() {
            return Err(WireError::not_found(format!("ranking {} does not exist", l.rank)));
        }
        let mut own = self.board_limits.own.write().unwrap_or_else(|e| e.into_inner());
        match l.max_boards {
            Some(n) => {
                ws.put_registry(&limit_key(l.rank), &encode(&n)?);
                own.insert(l.rank, n);
            }
            None => {
                ws.del_registry(&limit_key(l.rank));
                own.remove(&l.rank);
            }
        }
        Ok(())
    }

    /// Applies `ReserveBoards` at `now_ms` (the entry's time): every key is
    /// reserved, or none and the answer is `Refused`. The limit is the
    /// ranking's own, as this group holds it, else `default` (what the
    /// proposing node was configured with; 0: none).
    pub fn apply_reserve_boards(
        &self,
        rank: RankId,
        type_keys: &[Vec<u8>],
        default: u32,
        now_ms: u64,
        ws: &mut WriteSet,
    ) -> Result<(), WireError> {
        let Some(def) = self.rank(rank) else {
            return Err(WireError::not_found(format!("ranking {rank} does not exist")));
        };
        if let Some(bad) = type_keys.iter().find(|k| TypeId::from_key(k).is_none()) {
            return Err(WireError::bad_request(format!("{bad:?} is not a sub-board's type key")));
        }
        let limit = self.board_limit(rank).unwrap_or(default) as usize;
        if limit == 0 {
            return Ok(());
        }
        let mut reserved = self.board_limits.reserved.write().unwrap_or_else(|e| e.into_inner());
        let set = reserved.entry(rank).or_default();
        let mut new: Vec<&Vec<u8>> = type_keys.iter().filter(|k| !set.contains(*k)).collect();
        new.sort();
        new.dedup();
        if new.is_empty() {
            return Ok(());
        }
        if set.len() + new.len() > limit && self.purge_due(rank, now_ms, ws)? {
            let now = i64::try_from(now_ms / 1000).unwrap_or(i64::MAX);
            let dead: Vec<Vec<u8>> =
                set.iter().filter(|k| !is_live(&def, k, now)).cloned().collect();
            for k in dead {
                ws.del_registry(&reserved_key(rank, &k));
                set.remove(&k);
            }
        }
        if set.len() + new.len() > limit {
            return Err(WireError::refused(format!(
                "ranking {rank} has {} live sub-boards and a limit of {limit}: no new \
                 sub-board until an old window expires or the limit is raised (rank limit)",
                set.len()
            )));
        }
        for k in new {
            ws.put_registry(&reserved_key(rank, k), &encode(&())?);
            set.insert(k.clone());
        }
        Ok(())
    }

    /// Whether a full ranking's reservations may be looked through for
    /// expired windows at `now_ms`: at most once per `PURGE_GAP_MS` of
    /// entry time. Recorded in the registry, so every replica, restarted or
    /// not, decides alike. Why: a full ranking refuses every new board,
    /// and each refusal would otherwise decode every reservation it holds.
    fn purge_due(&self, rank: RankId, now_ms: u64, ws: &mut WriteSet) -> Result<bool, WireError> {
        let mut purged = self.board_limits.purged.write().unwrap_or_else(|e| e.into_inner());
        if purged.get(&rank).is_some_and(|&at| now_ms < at.saturating_add(PURGE_GAP_MS)) {
            return Ok(false);
        }
        ws.put_registry(&purged_key(rank), &encode(&now_ms)?);
        purged.insert(rank, now_ms);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaudit_proto::rankings::{Aggregation, RankSettings, TieMode};
    use plaudit_proto::window::{Granularity, UtcOffset};

    const HOUR: i64 = 3600;
    /// An hour boundary, in seconds.
    const T0: i64 = 1_700_000_000 / HOUR * HOUR;

    fn ranking(retention: u32) -> RankDef {
        RankDef {
            id: 3,
            name: "gifts".into(),
            dims: vec!["room".into()],
            granularities: vec![Granularity::Total, Granularity::Hour],
            utc_offset: UtcOffset::UTC,
            aggregation: Aggregation::Incr,
            ties: TieMode::EarlierFirst,
            settings: RankSettings { retention, ..RankSettings::default() },
        }
    }

    fn key(gran: Granularity, start: i64, room: u64) -> Vec<u8> {
        TypeId { gran, start, dims: vec![room] }.to_key()
    }

    struct Fixture {
        _dir: tempfile::TempDir,
        _db: sled::Db,
        store: plaudit_storage::StateStore,
    }

    fn directory(retention: u32) -> (Directory, WriteSet, Fixture) {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::open(dir.path()).unwrap();
        let store = plaudit_storage::StateStore::open(&db).unwrap();
        let d = Directory::load(&store).unwrap();
        let mut ws = WriteSet::new(16);
        d.create_rank(&ranking(retention), None, &mut ws).unwrap();
        (d, ws, Fixture { _dir: dir, _db: db, store })
    }

    fn ms(secs: i64) -> u64 {
        secs as u64 * 1000
    }

    #[test]
    fn keys_have_lengths_of_their_own() {
        assert_eq!(limit_key(7).len(), LIMIT_KEY_LEN);
        assert_eq!(purged_key(7).len(), PURGED_KEY_LEN);
        assert!(reserved_key(7, &key(Granularity::Total, 0, 1)).len() >= MIN_RESERVED_KEY_LEN);
        // Businesses 4, rankings 5, owners 6, the map 7, at-most-once
        // records 8 or 9, tokens 11, the cluster state 13.
        for other in [4, 5, 6, 7, 8, 9, 11, 13] {
            assert_ne!(other, LIMIT_KEY_LEN);
            assert_ne!(other, PURGED_KEY_LEN);
            assert!(other < MIN_RESERVED_KEY_LEN);
        }
        const { assert!(LIMIT_KEY_LEN != PURGED_KEY_LEN && PURGED_KEY_LEN < MIN_RESERVED_KEY_LEN) };
    }

    #[test]
    fn the_limit_is_exact_and_a_repeat_costs_nothing() {
        let (d, mut ws, _f) = directory(30);
        let total = |room| key(Granularity::Total, 0, room);
        for room in 0..4 {
            d.apply_reserve_boards(3, &[total(room)], 5, ms(T0), &mut ws).unwrap();
        }
        // Two new boards when one seat is left: neither is taken.
        let two = [total(10), total(11)];
        let e = d.apply_reserve_boards(3, &two, 5, ms(T0), &mut ws).unwrap_err();
        assert_eq!(e.code, plaudit_proto::ErrorCode::Refused);
        assert!(e.message.contains("4 live sub-boards and a limit of 5"), "{}", e.message);
        // Repeats, and one new board twice in one command, fit.
        d.apply_reserve_boards(3, &[total(0), total(3)], 5, ms(T0), &mut ws).unwrap();
        d.apply_reserve_boards(3, &[total(10), total(10)], 5, ms(T0), &mut ws).unwrap();
        assert_eq!(d.board_usage(3, T0, 99).unwrap().live, 5);
        let e = d.apply_reserve_boards(3, &[total(11)], 5, ms(T0), &mut ws).unwrap_err();
        assert_eq!(e.code, plaudit_proto::ErrorCode::Refused);
        // No limit (0) takes anything; an unknown ranking is NotFound.
        d.apply_reserve_boards(3, &[total(11)], 0, ms(T0), &mut ws).unwrap();
        let e = d.apply_reserve_boards(4, &[total(1)], 5, ms(T0), &mut ws).unwrap_err();
        assert_eq!(e.code, plaudit_proto::ErrorCode::NotFound);
    }

    #[test]
    fn boards_of_expired_windows_give_their_seats_back() {
        // Retention 1: the current hour and the one before are kept.
        let (d, mut ws, _f) = directory(1);
        let hour = |start, room| key(Granularity::Hour, start, room);
        d.apply_reserve_boards(3, &[hour(T0, 1), hour(T0, 2)], 3, ms(T0), &mut ws).unwrap();
        d.apply_reserve_boards(3, &[hour(T0 + HOUR, 1)], 3, ms(T0 + HOUR), &mut ws).unwrap();
        // An hour later T0's boards are still kept: the limit holds.
        let next = hour(T0 + HOUR, 2);
        let at = ms(T0 + HOUR + 60);
        assert!(d.apply_reserve_boards(3, std::slice::from_ref(&next), 3, at, &mut ws).is_err());
        // Two hours later they have expired, and their seats are free.
        let at = ms(T0 + 2 * HOUR);
        let later = [hour(T0 + 2 * HOUR, 1), next];
        d.apply_reserve_boards(3, &later, 3, at, &mut ws).unwrap();
        assert_eq!(d.board_usage(3, T0 + 2 * HOUR, 0).unwrap().live, 3);
        assert!(d.apply_reserve_boards(3, &[hour(T0 + 2 * HOUR, 3)], 3, at, &mut ws).is_err());
    }

    #[test]
    fn the_rankings_own_limit_wins_and_bad_keys_are_refused() {
        let (d, mut ws, _f) = directory(30);
        let total = |room| key(Granularity::Total, 0, room);
        d.apply_set_board_limit(&BoardLimit { rank: 3, max_boards: Some(2) }, &mut ws).unwrap();
        // A node whose registry lags, or whose default is larger, carries
        // another default: the group applies the ranking's own limit.
        d.apply_reserve_boards(3, &[total(1), total(2)], 100, ms(T0), &mut ws).unwrap();
        assert!(d.apply_reserve_boards(3, &[total(3)], 100, ms(T0), &mut ws).is_err());
        let e = d.apply_reserve_boards(3, &[vec![1, 2, 3]], 100, ms(T0), &mut ws).unwrap_err();
        assert_eq!(e.code, plaudit_proto::ErrorCode::BadRequest);
    }

    #[test]
    fn a_full_ranking_is_looked_through_at_most_once_a_second_on_every_replica() {
        let (d, mut ws, f) = directory(1);
        let hour = |start, room| key(Granularity::Hour, start, room);
        d.apply_reserve_boards(3, &[hour(T0, 1), hour(T0, 2)], 2, ms(T0), &mut ws).unwrap();
        // Just before T0's windows expire: refused, and looked through.
        let new = [hour(T0 + 2 * HOUR, 3)];
        let before = ms(T0 + 2 * HOUR) - 500;
        assert!(d.apply_reserve_boards(3, &new, 2, before, &mut ws).is_err());
        // Expired now, but looked through 500 ms ago: still refused, here
        // and on a replica that restarted in between.
        f.store.stage(ws);
        let replica = Directory::load(&f.store).unwrap();
        let mut ws = WriteSet::new(16);
        let at = ms(T0 + 2 * HOUR);
        assert!(d.apply_reserve_boards(3, &new, 2, at, &mut ws).is_err());
        assert!(replica.apply_reserve_boards(3, &new, 2, at, &mut ws).is_err());
        // A second later both look again and take it.
        let later = before + PURGE_GAP_MS;
        d.apply_reserve_boards(3, &new, 2, later, &mut ws).unwrap();
        replica.apply_reserve_boards(3, &new, 2, later, &mut ws).unwrap();
    }

    #[test]
    fn limits_and_reservations_survive_a_reload() {
        let (d, mut ws, f) = directory(30);
        let set = |max_boards| BoardLimit { rank: 3, max_boards };
        d.apply_set_board_limit(&set(Some(2)), &mut ws).unwrap();
        let total = |room| key(Granularity::Total, 0, room);
        d.apply_reserve_boards(3, &[total(1), total(2)], 2, ms(T0), &mut ws).unwrap();
        let missing = BoardLimit { rank: 9, max_boards: Some(2) };
        assert!(d.apply_set_board_limit(&missing, &mut ws).is_err());
        assert!(d.apply_set_board_limit(&set(Some(0)), &mut ws).is_err(), "0 is not a limit");

        f.store.stage(ws);
        let again = Directory::load(&f.store).unwrap();
        assert_eq!(again.board_limit(3), Some(2));
        let usage = again.board_usage(3, T0, 100).unwrap();
        assert_eq!((usage.live, usage.max_boards, usage.effective), (2, Some(2), 2));
        let mut ws = WriteSet::new(16);
        assert!(again.apply_reserve_boards(3, &[total(3)], 2, ms(T0), &mut ws).is_err());
        // Cleared: the default stands for it again.
        again.apply_set_board_limit(&set(None), &mut ws).unwrap();
        assert_eq!(again.board_usage(3, T0, 100).unwrap().effective, 100);
        // A reload (a snapshot installed) takes what is stored.
        f.store.stage(ws);
        d.reload(&f.store).unwrap();
        assert_eq!(d.board_limit(3), None);
        assert_eq!(d.board_usage(3, T0, 100).unwrap().live, 2);
    }
}
