//! A shard's meta tree (`shard/{id}/meta`): what Raft and the cross-shard
//! delta flow record per shard, beside the shard's slice of the business and
//! ranking trees.
//!
//! | key | value |
//! | --- | --- |
//! | `a:applied` | the applied log id, as the cluster encoded it |
//! | `a:membership` | the membership, as the cluster encoded it |
//! | `a:floor` | `v1, time of the last applied entry u64`: apply never stamps below it |
//! | `i:` + source shard | `v1, highest applied delta seq u64` |
//! | `o:` + target shard + seq | the encoded delta |
//! | `n:` + target shard | `v1, next outbox seq u64` |
//! | `r:` + ranking + type key | a sub-board's residence, encoded by the shard (`rankings/residence.rs`) |
//! | `e:` + business + entity | an entity's residence, encoded by the shard (`likes/residence.rs`) |
//! | `h:` + business + entity + seq | a delta held for a moving entity, encoded by the shard |
//!
//! The inbox lets a shard skip a delta it has applied already; the outbox
//! holds the deltas this shard owes other shards until they acknowledge
//! them. Shard ids and seqs are big-endian, so the outbox scans grouped by
//! target, oldest first.

use crate::keys::{decode_u64_value, read_u32, read_u64, u64_value};
use crate::pending::prefix_range;
use crate::state::{corrupt, Result, StateStore, Value, WriteSet};
use crate::trees::TreeRef;
use std::ops::Bound;

/// Meta keys of a shard tree.
pub(crate) mod meta {
    pub const APPLIED: &[u8] = b"a:applied";
    pub const MEMBERSHIP: &[u8] = b"a:membership";
    pub const FLOOR: &[u8] = b"a:floor";
    /// `i:` + source shard -> highest applied delta seq from that source.
    pub const INBOX: u8 = b'i';
    /// `o:` + target shard + seq -> encoded delta.
    pub const OUTBOX: u8 = b'o';
    /// `n:` + target shard -> next outbox seq for that target.
    pub const NEXT: u8 = b'n';
    /// `r:` + ranking + type key -> a moved sub-board's residence.
    pub const RESIDENCE: u8 = b'r';
    /// `e:` + business + entity -> a moved entity's residence.
    pub const ENTITY_RESIDENCE: u8 = b'e';
    /// `h:` + business + entity + seq -> a delta held for a moving entity.
    pub const HELD: u8 = b'h';
}

/// A stored residence entry: `(ranking, type key, value)`.
pub type ResidenceRow = (u32, Vec<u8>, Vec<u8>);

fn residence_key(rank: u32, type_key: &[u8]) -> Vec<u8> {
    let mut k = tagged(meta::RESIDENCE, rank);
    k.extend_from_slice(type_key);
    k
}

/// A stored entity residence entry: `(business, entity, value)`.
pub type EntityResidenceRow = (u32, u64, Vec<u8>);

fn entity_tagged(tag: u8, biz: u32, entity: u64) -> Vec<u8> {
    let mut k = tagged(tag, biz);
    k.extend_from_slice(&entity.to_be_bytes());
    k
}

fn tagged(tag: u8, shard: u32) -> Vec<u8> {
    let mut k = vec![tag, b':'];
    k.extend_from_slice(&shard.to_be_bytes());
    k
}

impl StateStore {
    /// The applied log id of a shard, as the encoding the cluster stored.
    pub fn applied(&self, shard: u32) -> Result<Option<Value>> {
        self.get(shard, TreeRef::Shard(shard), meta::APPLIED)
    }

    /// The time floor of a shard: the time of its last applied entry (0
    /// before any).
    pub fn time_floor(&self, shard: u32) -> Result<u64> {
        match self.get(shard, TreeRef::Shard(shard), meta::FLOOR)? {
            None => Ok(0),
            Some(v) => decode_u64_value(&v, "time floor"),
        }
    }

    pub fn membership(&self, shard: u32) -> Result<Option<Value>> {
        self.get(shard, TreeRef::Shard(shard), meta::MEMBERSHIP)
    }

    /// Highest delta seq applied from `source` into `shard`.
    pub fn inbox_seq(&self, shard: u32, source: u32) -> Result<u64> {
        match self.get(shard, TreeRef::Shard(shard), &tagged(meta::INBOX, source))? {
            None => Ok(0),
            Some(v) => decode_u64_value(&v, "inbox seq"),
        }
    }

    /// Next outbox seq of `shard` towards `target` (seqs start at 1).
    pub fn outbox_next(&self, shard: u32, target: u32) -> Result<u64> {
        match self.get(shard, TreeRef::Shard(shard), &tagged(meta::NEXT, target))? {
            None => Ok(1),
            Some(v) => decode_u64_value(&v, "outbox next"),
        }
    }

    /// Pending outbox entries of `shard` towards `target` with a seq above
    /// `after`, oldest first, at most `limit` of them and no more once
    /// `max_bytes` are read (at least one): a delivery round reads from
    /// where the previous one stopped, and never past what it can send.
    pub fn outbox_after(
        &self,
        shard: u32,
        target: u32,
        after: u64,
        (limit, max_bytes): (usize, usize),
    ) -> Result<Vec<(u64, Vec<u8>)>> {
        let prefix = tagged(meta::OUTBOX, target);
        let mut from = prefix.clone();
        from.extend_from_slice(&after.saturating_add(1).to_be_bytes());
        let range = (Bound::Included(from), prefix_range(&prefix).1);
        let mut out = Vec::new();
        if limit == 0 || after == u64::MAX {
            return Ok(out);
        }
        let mut bytes = 0;
        self.scan(shard, TreeRef::Shard(shard), range, false, |k, v| {
            let seq = read_u64(k, prefix.len()).ok_or_else(|| corrupt("outbox key", k))?;
            out.push((seq, v.to_vec()));
            bytes += v.len();
            Ok(out.len() < limit && bytes < max_bytes)
        })?;
        Ok(out)
    }

    /// The targets `shard` has pending outbox entries for, ascending. One
    /// seek per target, however long each target's backlog is.
    pub fn outbox_targets(&self, shard: u32) -> Result<Vec<u32>> {
        let mut targets = Vec::new();
        let mut from = tagged(meta::OUTBOX, 0);
        let end = prefix_range(&[meta::OUTBOX, b':']).1;
        loop {
            let mut found = None;
            let range = (Bound::Included(from.clone()), end.clone());
            self.scan(shard, TreeRef::Shard(shard), range, false, |k, _| {
                found = Some(read_u32(&k[2..]).ok_or_else(|| corrupt("outbox key", k))?);
                Ok(false)
            })?;
            match found {
                Some(t) => {
                    targets.push(t);
                    match t.checked_add(1) {
                        Some(next) => from = tagged(meta::OUTBOX, next),
                        None => return Ok(targets),
                    }
                }
                None => return Ok(targets),
            }
        }
    }

    /// The residence entries of `shard`: `(ranking, type key, value)`. Few
    /// (one per board moved to or from the shard), read once per start.
    pub fn residences(&self, shard: u32) -> Result<Vec<ResidenceRow>> {
        let mut out = Vec::new();
        let range = prefix_range(&[meta::RESIDENCE, b':']);
        self.scan(shard, TreeRef::Shard(shard), range, false, |k, v| {
            let rank = read_u32(&k[2..]).ok_or_else(|| corrupt("residence key", k))?;
            out.push((rank, k[6..].to_vec(), v.to_vec()));
            Ok(true)
        })?;
        Ok(out)
    }

    /// The entity residence entries of `shard`. Few (one per entity moved
    /// to or from the shard), read once per start.
    pub fn entity_residences(&self, shard: u32) -> Result<Vec<EntityResidenceRow>> {
        let mut out = Vec::new();
        let range = prefix_range(&[meta::ENTITY_RESIDENCE, b':']);
        self.scan(shard, TreeRef::Shard(shard), range, false, |k, v| {
            let biz = read_u32(&k[2..]).ok_or_else(|| corrupt("entity residence key", k))?;
            let entity = read_u64(k, 6).ok_or_else(|| corrupt("entity residence key", k))?;
            out.push((biz, entity, v.to_vec()));
            Ok(true)
        })?;
        Ok(out)
    }

    /// The deltas `shard` holds for a moving entity, oldest first.
    pub fn held_deltas(&self, shard: u32, biz: u32, entity: u64) -> Result<Vec<(u64, Vec<u8>)>> {
        let prefix = entity_tagged(meta::HELD, biz, entity);
        let mut out = Vec::new();
        self.scan(shard, TreeRef::Shard(shard), prefix_range(&prefix), false, |k, v| {
            let seq = read_u64(k, prefix.len()).ok_or_else(|| corrupt("held delta key", k))?;
            out.push((seq, v.to_vec()));
            Ok(true)
        })?;
        Ok(out)
    }

    /// Number of outbox entries waiting in `shard` (for metrics).
    pub fn outbox_len(&self, shard: u32) -> Result<usize> {
        let mut n = 0;
        let range = prefix_range(&[meta::OUTBOX, b':']);
        self.scan(shard, TreeRef::Shard(shard), range, false, |_, _| {
            n += 1;
            Ok(true)
        })?;
        Ok(n)
    }
}

impl WriteSet {
    pub fn put_applied(&mut self, shard: u32, encoded_log_id: &[u8]) {
        self.put(TreeRef::Shard(shard), meta::APPLIED, encoded_log_id);
    }

    pub fn put_time_floor(&mut self, shard: u32, ms: u64) {
        self.put(TreeRef::Shard(shard), meta::FLOOR, &u64_value(ms));
    }

    pub fn put_membership(&mut self, shard: u32, encoded: &[u8]) {
        self.put(TreeRef::Shard(shard), meta::MEMBERSHIP, encoded);
    }

    pub fn put_inbox_seq(&mut self, shard: u32, source: u32, seq: u64) {
        self.put(TreeRef::Shard(shard), tagged(meta::INBOX, source), &u64_value(seq));
    }

    pub fn push_outbox(&mut self, shard: u32, target: u32, seq: u64, encoded: &[u8]) {
        let mut k = tagged(meta::OUTBOX, target);
        k.extend_from_slice(&seq.to_be_bytes());
        self.put(TreeRef::Shard(shard), k, encoded);
        self.put(TreeRef::Shard(shard), tagged(meta::NEXT, target), &u64_value(seq + 1));
    }

    /// Sets (`Some`) or removes a sub-board's residence entry.
    pub fn put_residence(&mut self, shard: u32, rank: u32, type_key: &[u8], value: Option<&[u8]>) {
        let k = residence_key(rank, type_key);
        match value {
            Some(v) => self.put(TreeRef::Shard(shard), k, v),
            None => self.del(TreeRef::Shard(shard), k),
        }
    }

    /// Sets (`Some`) or removes an entity's residence entry.
    pub fn put_entity_residence(
        &mut self,
        shard: u32,
        biz: u32,
        entity: u64,
        value: Option<&[u8]>,
    ) {
        let k = entity_tagged(meta::ENTITY_RESIDENCE, biz, entity);
        match value {
            Some(v) => self.put(TreeRef::Shard(shard), k, v),
            None => self.del(TreeRef::Shard(shard), k),
        }
    }

    /// Holds (`Some`) or forgets a delta for a moving entity.
    pub fn put_held_delta(
        &mut self,
        shard: u32,
        biz: u32,
        entity: u64,
        seq: u64,
        v: Option<&[u8]>,
    ) {
        let mut k = entity_tagged(meta::HELD, biz, entity);
        k.extend_from_slice(&seq.to_be_bytes());
        match v {
            Some(v) => self.put(TreeRef::Shard(shard), k, v),
            None => self.del(TreeRef::Shard(shard), k),
        }
    }

    pub fn ack_outbox(&mut self, shard: u32, target: u32, seqs: impl IntoIterator<Item = u64>) {
        for seq in seqs {
            let mut k = tagged(meta::OUTBOX, target);
            k.extend_from_slice(&seq.to_be_bytes());
            self.del(TreeRef::Shard(shard), k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::state::test_store as store;

    #[test]
    fn outbox_reads_from_a_cursor_per_target_and_acks() {
        let (_d, s) = store();
        let mut ws = WriteSet::new(0);
        ws.push_outbox(0, 3, 1, b"a");
        ws.push_outbox(0, 3, 2, b"b");
        ws.push_outbox(0, 1, 1, b"c");
        s.stage(ws);
        assert_eq!(s.outbox_targets(0).unwrap(), vec![1, 3]);
        let seqs = |v: Vec<(u64, Vec<u8>)>| v.into_iter().map(|(q, _)| q).collect::<Vec<_>>();
        let any = usize::MAX;
        assert_eq!(seqs(s.outbox_after(0, 3, 0, (10, any)).unwrap()), vec![1, 2]);
        assert_eq!(seqs(s.outbox_after(0, 3, 0, (1, any)).unwrap()), vec![1], "at most the limit");
        assert_eq!(seqs(s.outbox_after(0, 3, 0, (10, 1)).unwrap()), vec![1], "the bytes too");
        assert_eq!(seqs(s.outbox_after(0, 3, 0, (10, 0)).unwrap()), vec![1], "one at least");
        assert_eq!(seqs(s.outbox_after(0, 3, 1, (10, any)).unwrap()), vec![2], "from a cursor");
        assert_eq!(s.outbox_after(0, 3, u64::MAX, (10, any)).unwrap(), vec![]);
        assert_eq!(s.outbox_after(0, 1, 0, (10, any)).unwrap(), vec![(1, b"c".to_vec())]);
        assert_eq!(s.outbox_next(0, 3).unwrap(), 3);
        let mut ws = WriteSet::new(0);
        ws.ack_outbox(0, 3, [1, 2]);
        s.stage(ws);
        assert_eq!(s.outbox_len(0).unwrap(), 1);
        assert_eq!(s.outbox_targets(0).unwrap(), vec![1], "acknowledged targets drop out");
    }

    #[test]
    fn residences_are_set_listed_and_removed() {
        let (_d, s) = store();
        let mut ws = WriteSet::new(2);
        ws.put_residence(2, 7, b"total:0", Some(b"x"));
        ws.put_residence(2, 1, b"day:20261206", Some(b"y"));
        ws.push_outbox(2, 3, 1, b"a");
        s.stage(ws);
        let listed = s.residences(2).unwrap();
        assert_eq!(
            listed,
            vec![
                (1, b"day:20261206".to_vec(), b"y".to_vec()),
                (7, b"total:0".to_vec(), b"x".to_vec())
            ]
        );
        assert!(s.residences(3).unwrap().is_empty(), "another shard's are not listed");
        let mut ws = WriteSet::new(2);
        ws.put_residence(2, 7, b"total:0", None);
        s.stage(ws);
        assert_eq!(s.residences(2).unwrap().len(), 1);
        assert_eq!(s.outbox_len(2).unwrap(), 1, "other meta keys untouched");
    }

    #[test]
    fn entity_residences_and_held_deltas_are_kept_apart() {
        let (_d, s) = store();
        let mut ws = WriteSet::new(2);
        ws.put_entity_residence(2, 1, 300, Some(b"x"));
        ws.put_held_delta(2, 1, 300, 2, Some(b"b"));
        ws.put_held_delta(2, 1, 300, 1, Some(b"a"));
        ws.put_held_delta(2, 1, 301, 1, Some(b"c"));
        ws.put_residence(2, 1, b"total:0", Some(b"y"));
        s.stage(ws);
        assert_eq!(s.entity_residences(2).unwrap(), vec![(1, 300, b"x".to_vec())]);
        assert_eq!(s.residences(2).unwrap().len(), 1, "boards' entries apart");
        let held = s.held_deltas(2, 1, 300).unwrap();
        assert_eq!(held, vec![(1, b"a".to_vec()), (2, b"b".to_vec())], "oldest first");
        let mut ws = WriteSet::new(2);
        ws.put_held_delta(2, 1, 300, 1, None);
        ws.put_entity_residence(2, 1, 300, None);
        s.stage(ws);
        assert_eq!(s.held_deltas(2, 1, 300).unwrap().len(), 1);
        assert_eq!(s.held_deltas(2, 1, 301).unwrap().len(), 1, "another entity's untouched");
        assert!(s.entity_residences(2).unwrap().is_empty());
    }
}
