//! A shard's meta tree (`shard/{id}/meta`): what Raft and the cross-shard
//! delta flow record per shard, beside the shard's slice of the business and
//! ranking trees.
//!
//! | key | value |
//! | --- | --- |
//! | `a:applied` | the applied log id, as the cluster encoded it |
//! | `a:membership` | the membership, as the cluster encoded it |
//! | `a:snapshot` | the snapshot meta (written straight to sled, not staged) |
//! | `a:floor` | `v1, time of the last applied entry u64`: apply never stamps below it |
//! | `i:` + source shard | `v1, highest applied delta seq u64` |
//! | `o:` + target shard + seq | the encoded delta |
//! | `n:` + target shard | `v1, next outbox seq u64` |
//!
//! The inbox lets a shard skip a delta it has applied already; the outbox
//! holds the deltas this shard owes other shards until they acknowledge
//! them. Shard ids and seqs are big-endian, so the outbox scans grouped by
//! target, oldest first.

use crate::keys::{decode_u64_value, read_u64, u64_value};
use crate::pending::prefix_range;
use crate::state::{corrupt, Result, StateStore, Value, WriteSet};
use crate::trees::TreeRef;

/// Pending outbox entries towards one target shard: `(target, [(seq, encoded delta)])`.
pub type OutboxRun = (u32, Vec<(u64, Vec<u8>)>);

/// Meta keys of a shard tree.
pub(crate) mod meta {
    pub const APPLIED: &[u8] = b"a:applied";
    pub const MEMBERSHIP: &[u8] = b"a:membership";
    pub const SNAPSHOT: &[u8] = b"a:snapshot";
    pub const FLOOR: &[u8] = b"a:floor";
    /// `i:` + source shard -> highest applied delta seq from that source.
    pub const INBOX: u8 = b'i';
    /// `o:` + target shard + seq -> encoded delta.
    pub const OUTBOX: u8 = b'o';
    /// `n:` + target shard -> next outbox seq for that target.
    pub const NEXT: u8 = b'n';
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

    pub fn snapshot_meta(&self, shard: u32) -> Result<Option<sled::IVec>> {
        Ok(self.shard_tree(shard)?.get(meta::SNAPSHOT)?)
    }

    pub fn put_snapshot_meta(&self, shard: u32, value: &[u8]) -> Result<()> {
        self.shard_tree(shard)?.insert(meta::SNAPSHOT, value)?;
        Ok(())
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

    /// Pending outbox entries of `shard`, grouped by target, oldest first, at
    /// most `limit` per target.
    pub fn outbox_pending(&self, shard: u32, limit: usize) -> Result<Vec<OutboxRun>> {
        let mut out: Vec<OutboxRun> = Vec::new();
        // The outbox is drained continuously, so it is short; a plain scan is
        // cheaper than seeking per target.
        let range = prefix_range(&[meta::OUTBOX, b':']);
        self.scan(shard, TreeRef::Shard(shard), range, false, |k, v| {
            push_outbox(&mut out, k, v.to_vec(), limit)?;
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

fn push_outbox(out: &mut Vec<OutboxRun>, k: &[u8], v: Vec<u8>, limit: usize) -> Result<()> {
    let target = k.get(2..6).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let (Some(target), Some(seq)) = (target, read_u64(k, 6)) else {
        return Err(corrupt("outbox key", k));
    };
    match out.last_mut() {
        Some((t, items)) if *t == target => {
            if items.len() < limit {
                items.push((seq, v));
            }
        }
        _ => out.push((target, vec![(seq, v)])),
    }
    Ok(())
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

    fn store() -> (tempfile::TempDir, StateStore) {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::open(dir.path()).unwrap();
        let s = StateStore::open(&db).unwrap();
        (dir, s)
    }

    #[test]
    fn outbox_groups_by_target_and_acks() {
        let (_d, s) = store();
        let mut ws = WriteSet::new(0);
        ws.push_outbox(0, 3, 1, b"a");
        ws.push_outbox(0, 3, 2, b"b");
        ws.push_outbox(0, 1, 1, b"c");
        s.stage(ws);
        let p = s.outbox_pending(0, 10).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].0, 1);
        assert_eq!(p[1].1.iter().map(|(q, _)| *q).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(s.outbox_next(0, 3).unwrap(), 3);
        let limited = s.outbox_pending(0, 1).unwrap();
        assert_eq!(limited[1].1.len(), 1);
        let mut ws = WriteSet::new(0);
        ws.ack_outbox(0, 3, [1, 2]);
        s.stage(ws);
        assert_eq!(s.outbox_len(0).unwrap(), 1);
    }
}
