//! Stored sub-boards: one sled tree per ranking (`rank/{id}`), so a ranking's
//! data is isolated and can be dropped whole, with every key starting with
//! the shard id like the business trees (snapshots scan one shard's slice).
//!
//! | kind | key | value |
//! | --- | --- | --- |
//! | member | `shard, 1, type_key, item` | `v1, score i64, tie u64` |
//! | board | `shard, 2, type_key` | `v1, size u64, next_stamp u64, next_events u64[, cap u64]` |
//! | event ids | `shard, 3, type_key, seq` | `v2, second u64, [event id u64]...` (`v1, [event id u64]...` before ids had a time) |
//!
//! `type_key` is the sub-board's binary type id (granularity, window start,
//! dimension values), fixed-length within one ranking because a ranking's
//! dimension count never changes; that is what lets a member key end in the
//! item id and still be parsed. Event ids are stored in records of up to
//! 64, not one key per event, each record holding ids of one second (the
//! second they were applied in, `actors/src/rankings/dedup.rs`); a `v1`
//! record reads as second 0, the oldest there is.
//!
//! While a shard holds a board, these rows may be stale: the held board is
//! the truth, and its rows are written from its image
//! (`board_image.rs`) when it is new, when the shard lets it go, and into
//! snapshots.

use crate::keys::{read_u64, VALUE_V1};

/// An event-id record with the second its ids were applied in.
const EVENTS_V2: u8 = 2;

/// One stored event-id record: `(seq, second, ids)`.
pub type EventsRecord = (u64, u64, Vec<u64>);
use crate::pending::prefix_range;
use crate::state::{corrupt, Result, StateStore, WriteSet};
use crate::trees::TreeRef;
use std::ops::Bound;

pub const KIND_MEMBER: u8 = 1;
pub const KIND_BOARD: u8 = 2;
pub const KIND_EVENTS: u8 = 3;

/// A sub-board's stored header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BoardMeta {
    pub size: u64,
    /// The next tie stamp the board hands out.
    pub next_stamp: u64,
    /// The seq of the next event-id record.
    pub next_events: u64,
    /// The length cap the board last applied events under (0: not recorded,
    /// by headers written before it was). Activation keeps to it, so a
    /// replay sees the board as its events left it, not as the ranking's
    /// settings are now.
    pub cap: u64,
}

pub(crate) fn key(shard: u32, kind: u8, type_key: &[u8], tail: Option<u64>) -> Vec<u8> {
    let mut k = Vec::with_capacity(4 + 1 + type_key.len() + 8);
    k.extend_from_slice(&shard.to_be_bytes());
    k.push(kind);
    k.extend_from_slice(type_key);
    if let Some(t) = tail {
        k.extend_from_slice(&t.to_be_bytes());
    }
    k
}

fn i64_at(bytes: &[u8], at: usize) -> Option<i64> {
    read_u64(bytes, at).map(|u| u as i64)
}

impl StateStore {
    /// Every member of a sub-board: `(item, score, tie)`, in item order.
    pub fn board_members(
        &self,
        rank: u32,
        shard: u32,
        type_key: &[u8],
    ) -> Result<Vec<(u64, i64, u64)>> {
        let prefix = key(shard, KIND_MEMBER, type_key, None);
        let mut out = Vec::new();
        self.scan(shard, TreeRef::Rank(rank), prefix_range(&prefix), false, |k, v| {
            let item = read_u64(k, prefix.len()).filter(|_| k.len() == prefix.len() + 8);
            let value = match v {
                [VALUE_V1, rest @ ..] if rest.len() == 16 => i64_at(rest, 0).zip(read_u64(rest, 8)),
                _ => None,
            };
            match (item, value) {
                (Some(item), Some((score, tie))) => out.push((item, score, tie)),
                _ => return Err(corrupt("board member", k)),
            }
            Ok(true)
        })?;
        Ok(out)
    }

    /// A sub-board's header; `None` if the board does not exist.
    pub fn board_meta(&self, rank: u32, shard: u32, type_key: &[u8]) -> Result<Option<BoardMeta>> {
        match self.get(shard, TreeRef::Rank(rank), &key(shard, KIND_BOARD, type_key, None))? {
            None => Ok(None),
            Some(v) => decode_meta(&v).map(Some),
        }
    }

    /// The sub-boards of a ranking on one shard, in type-key order, strictly
    /// after `after`: `(type_key, header)`.
    pub fn boards_on_shard(
        &self,
        rank: u32,
        shard: u32,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, BoardMeta)>> {
        let prefix = key(shard, KIND_BOARD, &[], None);
        let start = match after {
            Some(a) => Bound::Excluded(key(shard, KIND_BOARD, a, None)),
            None => Bound::Included(prefix.clone()),
        };
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        let range = (start, prefix_range(&prefix).1);
        self.scan(shard, TreeRef::Rank(rank), range, false, |k, v| {
            out.push((k[prefix.len()..].to_vec(), decode_meta(v)?));
            Ok(out.len() < limit)
        })?;
        Ok(out)
    }

    /// The stored event-id records of a sub-board, oldest first.
    pub fn board_events(
        &self,
        rank: u32,
        shard: u32,
        type_key: &[u8],
    ) -> Result<Vec<EventsRecord>> {
        let prefix = key(shard, KIND_EVENTS, type_key, None);
        let mut out = Vec::new();
        self.scan(shard, TreeRef::Rank(rank), prefix_range(&prefix), false, |k, v| {
            let seq = read_u64(k, prefix.len()).ok_or_else(|| corrupt("board events", k))?;
            let ids =
                |rest: &[u8]| (0..rest.len() / 8).filter_map(|i| read_u64(rest, i * 8)).collect();
            let (second, ids) = match v.split_first() {
                Some((&EVENTS_V2, rest)) if rest.len() >= 8 && rest.len() % 8 == 0 => {
                    (read_u64(rest, 0).unwrap_or(0), ids(&rest[8..]))
                }
                Some((&VALUE_V1, rest)) if rest.len() % 8 == 0 => (0, ids(rest)),
                _ => return Err(corrupt("board events", v)),
            };
            out.push((seq, second, ids));
            Ok(true)
        })?;
        Ok(out)
    }
}

fn decode_meta(v: &[u8]) -> Result<BoardMeta> {
    match v {
        [VALUE_V1, rest @ ..] if rest.len() == 24 || rest.len() == 32 => Ok(BoardMeta {
            size: read_u64(rest, 0).unwrap_or(0),
            next_stamp: read_u64(rest, 8).unwrap_or(0),
            next_events: read_u64(rest, 16).unwrap_or(0),
            cap: read_u64(rest, 24).unwrap_or(0),
        }),
        _ => Err(corrupt("board meta", v)),
    }
}

pub(crate) fn member_value(score: i64, tie: u64) -> [u8; 17] {
    let mut v = [0u8; 17];
    v[0] = VALUE_V1;
    v[1..9].copy_from_slice(&score.to_be_bytes());
    v[9..17].copy_from_slice(&tie.to_be_bytes());
    v
}

pub(crate) fn meta_value(m: BoardMeta) -> [u8; 33] {
    let mut v = [0u8; 33];
    v[0] = VALUE_V1;
    v[1..9].copy_from_slice(&m.size.to_be_bytes());
    v[9..17].copy_from_slice(&m.next_stamp.to_be_bytes());
    v[17..25].copy_from_slice(&m.next_events.to_be_bytes());
    v[25..33].copy_from_slice(&m.cap.to_be_bytes());
    v
}

pub(crate) fn events_value(second: u64, ids: &[u64]) -> Vec<u8> {
    let mut v = Vec::with_capacity(9 + ids.len() * 8);
    v.push(EVENTS_V2);
    v.extend_from_slice(&second.to_be_bytes());
    for id in ids {
        v.extend_from_slice(&id.to_be_bytes());
    }
    v
}

impl WriteSet {
    pub fn put_board_member(
        &mut self,
        rank: u32,
        shard: u32,
        type_key: &[u8],
        item: u64,
        score: i64,
        tie: u64,
    ) {
        let v = member_value(score, tie);
        self.put(TreeRef::Rank(rank), key(shard, KIND_MEMBER, type_key, Some(item)), &v);
    }

    pub fn del_board_member(&mut self, rank: u32, shard: u32, type_key: &[u8], item: u64) {
        self.del(TreeRef::Rank(rank), key(shard, KIND_MEMBER, type_key, Some(item)));
    }

    pub fn put_board_meta(&mut self, rank: u32, shard: u32, type_key: &[u8], m: BoardMeta) {
        let v = meta_value(m);
        self.put(TreeRef::Rank(rank), key(shard, KIND_BOARD, type_key, None), &v);
    }

    /// Deletes every member and event-id record of a sub-board that this
    /// write set puts (a drop after writes of the same apply call).
    pub fn del_board_written(&mut self, rank: u32, shard: u32, type_key: &[u8]) {
        let member = key(shard, KIND_MEMBER, type_key, None);
        let events = key(shard, KIND_EVENTS, type_key, None);
        let written: Vec<Vec<u8>> = self
            .keys_put(TreeRef::Rank(rank))
            .filter(|k| {
                (k.starts_with(&member) && k.len() == member.len() + 8)
                    || (k.starts_with(&events) && k.len() == events.len() + 8)
            })
            .map(<[u8]>::to_vec)
            .collect();
        for k in written {
            self.del(TreeRef::Rank(rank), k);
        }
    }

    pub fn del_board_meta(&mut self, rank: u32, shard: u32, type_key: &[u8]) {
        self.del(TreeRef::Rank(rank), key(shard, KIND_BOARD, type_key, None));
    }

    pub fn put_board_events(
        &mut self,
        rank: u32,
        shard: u32,
        type_key: &[u8],
        seq: u64,
        second: u64,
        ids: &[u64],
    ) {
        let v = events_value(second, ids);
        self.put(TreeRef::Rank(rank), key(shard, KIND_EVENTS, type_key, Some(seq)), &v);
    }

    pub fn del_board_events(&mut self, rank: u32, shard: u32, type_key: &[u8], seq: u64) {
        self.del(TreeRef::Rank(rank), key(shard, KIND_EVENTS, type_key, Some(seq)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::state::test_store as store;

    const DAY: &[u8] = &[2, 0x80, 0, 0, 0, 0x66, 0x1c, 0x1d, 0x80, 0, 0, 0, 0, 6, 0x8e, 0x77, 0x44];
    const MONTH: &[u8] =
        &[4, 0x80, 0, 0, 0, 0x66, 0x0a, 0x0a, 0x00, 0, 0, 0, 0, 6, 0x8e, 0x77, 0x44];

    #[test]
    fn members_headers_and_events_round_trip_per_board() {
        let (_d, s) = store();
        let mut ws = WriteSet::new(3);
        ws.put_board_member(7, 3, DAY, 10, -5, 1);
        ws.put_board_member(7, 3, DAY, 11, i64::MAX, 2);
        ws.put_board_member(7, 3, MONTH, 10, 9, 1);
        ws.put_board_meta(7, 3, DAY, BoardMeta { size: 2, next_stamp: 3, next_events: 2, cap: 10 });
        ws.put_board_meta(
            7,
            3,
            MONTH,
            BoardMeta { size: 1, next_stamp: 2, next_events: 1, cap: 0 },
        );
        ws.put_board_events(7, 3, DAY, 1, 1_700_000_000, &[100, 101]);
        // A record written before ids had a time reads as second 0.
        let legacy = [&[VALUE_V1][..], &102u64.to_be_bytes()].concat();
        ws.put(TreeRef::Rank(7), key(3, KIND_EVENTS, DAY, Some(2)), &legacy);
        ws.put_board_member(8, 3, DAY, 10, 1, 1); // another ranking: isolated
        s.stage(ws);

        assert_eq!(s.board_members(7, 3, DAY).unwrap(), vec![(10, -5, 1), (11, i64::MAX, 2)]);
        assert_eq!(s.board_members(7, 3, MONTH).unwrap(), vec![(10, 9, 1)]);
        assert_eq!(s.board_members(7, 4, DAY).unwrap(), vec![], "another shard's slice");
        assert_eq!(s.board_members(8, 3, DAY).unwrap(), vec![(10, 1, 1)]);
        assert_eq!(s.board_meta(7, 3, DAY).unwrap().map(|m| (m.size, m.cap)), Some((2, 10)));
        assert_eq!(
            s.board_events(7, 3, DAY).unwrap(),
            vec![(1, 1_700_000_000, vec![100, 101]), (2, 0, vec![102])]
        );
        assert_eq!(s.board_events(7, 3, MONTH).unwrap(), vec![]);

        let all = s.boards_on_shard(7, 3, None, 10).unwrap();
        assert_eq!(all.iter().map(|(k, _)| k.as_slice()).collect::<Vec<_>>(), vec![DAY, MONTH]);
        let after = s.boards_on_shard(7, 3, Some(DAY), 10).unwrap();
        assert_eq!(after.len(), 1);
        assert_eq!(s.boards_on_shard(7, 3, None, 1).unwrap().len(), 1);

        let mut ws = WriteSet::new(3);
        ws.del_board_member(7, 3, DAY, 10);
        ws.del_board_events(7, 3, DAY, 1);
        ws.del_board_events(7, 3, DAY, 2);
        ws.del_board_meta(7, 3, MONTH);
        s.stage(ws);
        assert_eq!(s.board_members(7, 3, DAY).unwrap(), vec![(11, i64::MAX, 2)]);
        assert_eq!(s.board_events(7, 3, DAY).unwrap(), vec![]);
        assert_eq!(s.board_meta(7, 3, MONTH).unwrap(), None);
    }

    #[test]
    fn snapshots_carry_ranking_trees() {
        let (_d, s) = store();
        let mut ws = WriteSet::new(1);
        ws.put_board_member(7, 1, DAY, 10, 42, 1);
        s.stage(ws);
        let mut ws = WriteSet::new(2);
        ws.put_board_member(7, 2, DAY, 10, 43, 1);
        s.stage(ws);
        let file = s.snapshot_bytes(1);
        s.install_bytes(1, &crate::snapshot::empty_snapshot());
        assert_eq!(s.board_members(7, 1, DAY).unwrap(), vec![]);
        assert_eq!(s.board_members(7, 2, DAY).unwrap(), vec![(10, 43, 1)], "other shards stay");
        s.install_bytes(1, &file);
        assert_eq!(s.board_members(7, 1, DAY).unwrap(), vec![(10, 42, 1)]);
    }
}
