//! The applied state of every shard, in sled: one tree per business (so a
//! business's data is isolated and can be dropped whole), one meta tree per
//! shard (applied log id, membership, inbox and outbox), and the registry.
//!
//! Writes of one applied Raft batch are collected in a `WriteSet` and
//! committed as one multi-tree sled transaction that also records the applied
//! log id, so the stored state always corresponds to exactly one applied index.
//! Those writes need no fsync of their own: the Raft log is durable, and
//! everything after the stored applied id is replayed on restart.

use crate::keys::{self, read_u64, VALUE_V1};
use plaudit_proto::likes::{ListItem, PageCursor};
use plaudit_proto::{BizId, EntityId, LikeState, Millis, UserId};
use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::{Batch, Tree};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("sled: {0}")]
    Sled(#[from] sled::Error),
    #[error("corrupt value under {what}: {detail}")]
    Corrupt { what: &'static str, detail: String },
}

pub type Result<T> = std::result::Result<T, StateError>;

/// An entity's stored counters and owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CountsRec {
    pub likes: u64,
    pub dislikes: u64,
    pub owner: Option<UserId>,
}

/// Pending outbox entries towards one target shard: `(target, [(seq, encoded delta)])`.
pub type OutboxRun = (u32, Vec<(u64, Vec<u8>)>);

/// One key of an exported shard: `(tree name, key, value)`.
pub type ExportItem = (String, Vec<u8>, Vec<u8>);

/// Meta keys of a shard tree.
mod meta {
    pub const APPLIED: &[u8] = b"a:applied";
    pub const MEMBERSHIP: &[u8] = b"a:membership";
    pub const SNAPSHOT: &[u8] = b"a:snapshot";
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

/// Handle to all applied state of a node. Cheap to clone.
#[derive(Clone)]
pub struct StateStore {
    db: sled::Db,
    bizs: Arc<RwLock<HashMap<BizId, Tree>>>,
    registry: Tree,
}

impl StateStore {
    pub fn open(db: &sled::Db) -> Result<StateStore> {
        Ok(StateStore { db: db.clone(), bizs: Arc::default(), registry: db.open_tree("registry")? })
    }

    /// The registry tree (businesses), applied by the metadata group.
    pub fn registry(&self) -> &Tree {
        &self.registry
    }

    /// The tree of one business, opened on first use.
    pub fn biz_tree(&self, biz: BizId) -> Result<Tree> {
        // The lock guards a map of handles only; poisoning would need a panic
        // while inserting, which sled's open_tree does not do under the lock.
        if let Some(t) = self.bizs.read().unwrap_or_else(|e| e.into_inner()).get(&biz) {
            return Ok(t.clone());
        }
        let tree = self.db.open_tree(format!("biz/{biz}"))?;
        self.bizs.write().unwrap_or_else(|e| e.into_inner()).insert(biz, tree.clone());
        Ok(tree)
    }

    /// Every business tree that exists on disk, by id.
    pub fn biz_ids_on_disk(&self) -> Vec<BizId> {
        self.db
            .tree_names()
            .iter()
            .filter_map(|n| std::str::from_utf8(n).ok()?.strip_prefix("biz/")?.parse().ok())
            .collect()
    }

    pub fn shard_tree(&self, shard: u32) -> Result<Tree> {
        Ok(self.db.open_tree(format!("shard/{shard}/meta"))?)
    }

    pub fn get_state(
        &self,
        biz: BizId,
        shard: u32,
        mid: UserId,
        entity: EntityId,
    ) -> Result<Option<(LikeState, Millis)>> {
        let tree = self.biz_tree(biz)?;
        match tree.get(keys::state(shard, mid, entity))? {
            None => Ok(None),
            Some(v) => decode_state(&v).map(Some),
        }
    }

    pub fn get_counts(&self, biz: BizId, shard: u32, entity: EntityId) -> Result<CountsRec> {
        let tree = self.biz_tree(biz)?;
        match tree.get(keys::counts(shard, entity))? {
            None => Ok(CountsRec::default()),
            Some(v) => decode_counts(&v),
        }
    }

    pub fn get_received(&self, biz: BizId, shard: u32, owner: UserId) -> Result<u64> {
        let tree = self.biz_tree(biz)?;
        match tree.get(keys::received(shard, owner))? {
            None => Ok(0),
            Some(v) => decode_u64_value(&v, "received"),
        }
    }

    /// A user's liked entities, newest first, strictly after `after`.
    pub fn user_list(
        &self,
        biz: BizId,
        shard: u32,
        mid: UserId,
        after: Option<PageCursor>,
        limit: usize,
    ) -> Result<Vec<ListItem>> {
        self.list_page(biz, keys::user_list_prefix(shard, mid), after, limit)
    }

    /// An entity's likers, newest first, strictly after `after`.
    pub fn likers(
        &self,
        biz: BizId,
        shard: u32,
        entity: EntityId,
        after: Option<PageCursor>,
        limit: usize,
    ) -> Result<Vec<ListItem>> {
        self.list_page(biz, keys::likers_prefix(shard, entity), after, limit)
    }

    /// Both list layouts are `prefix, mtime, id`: walk backwards from the
    /// cursor (exclusive) or from the end of the prefix.
    fn list_page(
        &self,
        biz: BizId,
        prefix: Vec<u8>,
        after: Option<PageCursor>,
        limit: usize,
    ) -> Result<Vec<ListItem>> {
        let tree = self.biz_tree(biz)?;
        let start = prefix.clone();
        let end = match after {
            Some(c) => {
                let mut k = prefix.clone();
                k.extend_from_slice(&c.mtime.to_be_bytes());
                k.extend_from_slice(&c.id.to_be_bytes());
                k
            }
            None => {
                let mut k = prefix.clone();
                k.extend_from_slice(&[0xff; 17]);
                k
            }
        };
        let mut out = Vec::with_capacity(limit);
        for kv in tree.range(start..end).rev().take(limit) {
            let (k, _) = kv?;
            let at = prefix.len();
            match (read_u64(&k, at), read_u64(&k, at + 8)) {
                (Some(mtime), Some(id)) => out.push(ListItem { id, mtime }),
                _ => return Err(corrupt("list key", &k)),
            }
        }
        Ok(out)
    }

    /// The applied log id of a shard, as the encoding the cluster stored.
    pub fn applied(&self, shard: u32) -> Result<Option<sled::IVec>> {
        Ok(self.shard_tree(shard)?.get(meta::APPLIED)?)
    }

    pub fn membership(&self, shard: u32) -> Result<Option<sled::IVec>> {
        Ok(self.shard_tree(shard)?.get(meta::MEMBERSHIP)?)
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
        match self.shard_tree(shard)?.get(tagged(meta::INBOX, source))? {
            None => Ok(0),
            Some(v) => decode_u64_value(&v, "inbox seq"),
        }
    }

    /// Next outbox seq of `shard` towards `target` (seqs start at 1).
    pub fn outbox_next(&self, shard: u32, target: u32) -> Result<u64> {
        match self.shard_tree(shard)?.get(tagged(meta::NEXT, target))? {
            None => Ok(1),
            Some(v) => decode_u64_value(&v, "outbox next"),
        }
    }

    /// Pending outbox entries of `shard`, grouped by target, oldest first, at
    /// most `limit` per target.
    pub fn outbox_pending(&self, shard: u32, limit: usize) -> Result<Vec<OutboxRun>> {
        let tree = self.shard_tree(shard)?;
        let mut out: Vec<OutboxRun> = Vec::new();
        // The outbox is drained continuously, so it is short; a plain scan is
        // cheaper than seeking per target.
        for kv in tree.scan_prefix([meta::OUTBOX, b':']) {
            let (k, v) = kv?;
            push_outbox(&mut out, &k, v.to_vec(), limit)?;
        }
        Ok(out)
    }

    /// Number of outbox entries waiting in `shard` (for metrics).
    pub fn outbox_len(&self, shard: u32) -> Result<usize> {
        Ok(self.shard_tree(shard)?.scan_prefix([meta::OUTBOX, b':']).count())
    }

    /// Commits a write set atomically across its trees.
    pub fn commit(&self, ws: WriteSet) -> Result<()> {
        if ws.batches.is_empty() {
            return Ok(());
        }
        let mut trees = Vec::with_capacity(ws.batches.len());
        let mut batches = Vec::with_capacity(ws.batches.len());
        for (target, batch) in ws.batches {
            trees.push(match target {
                TreeRef::Biz(b) => self.biz_tree(b)?,
                TreeRef::Shard(s) => self.shard_tree(s)?,
                TreeRef::Registry => self.registry.clone(),
            });
            batches.push(batch);
        }
        if trees.len() == 1 {
            trees[0].apply_batch(batches.pop().unwrap_or_default())?;
            return Ok(());
        }
        use sled::Transactional;
        trees
            .as_slice()
            .transaction(|txs| {
                for (tx, batch) in txs.iter().zip(&batches) {
                    tx.apply_batch(batch)?;
                }
                Ok::<(), ConflictableTransactionError<StateError>>(())
            })
            .map_err(|e| match e {
                TransactionError::Abort(e) => e,
                TransactionError::Storage(e) => StateError::Sled(e),
            })
    }

    /// Every key of `shard` in every business tree and its meta tree, for a
    /// snapshot: `(tree name, key, value)`.
    pub fn export_shard(&self, shard: u32) -> Result<Vec<ExportItem>> {
        let mut out = Vec::new();
        for biz in self.biz_ids_on_disk() {
            let tree = self.biz_tree(biz)?;
            for kv in tree.scan_prefix(keys::shard_prefix(shard)) {
                let (k, v) = kv?;
                out.push((format!("biz/{biz}"), k.to_vec(), v.to_vec()));
            }
        }
        for kv in self.shard_tree(shard)?.iter() {
            let (k, v) = kv?;
            if k.as_ref() != meta::SNAPSHOT {
                out.push((format!("shard/{shard}/meta"), k.to_vec(), v.to_vec()));
            }
        }
        Ok(out)
    }

    /// Replaces every key of `shard` with `items` (from `export_shard`).
    pub fn import_shard(&self, shard: u32, items: Vec<ExportItem>) -> Result<()> {
        for biz in self.biz_ids_on_disk() {
            let tree = self.biz_tree(biz)?;
            let mut batch = Batch::default();
            for kv in tree.scan_prefix(keys::shard_prefix(shard)) {
                batch.remove(kv?.0);
            }
            tree.apply_batch(batch)?;
        }
        self.shard_tree(shard)?.clear()?;
        let meta_name = format!("shard/{shard}/meta");
        for (name, k, v) in items {
            if name == meta_name {
                self.shard_tree(shard)?.insert(k, v)?;
            } else if let Some(biz) = name.strip_prefix("biz/").and_then(|b| b.parse().ok()) {
                self.biz_tree(biz)?.insert(k, v)?;
            }
        }
        Ok(())
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

fn corrupt(what: &'static str, bytes: &[u8]) -> StateError {
    StateError::Corrupt { what, detail: format!("{bytes:?}") }
}

fn decode_state(v: &[u8]) -> Result<(LikeState, Millis)> {
    match v {
        [VALUE_V1, s, rest @ ..] if rest.len() == 8 => {
            let state = match s {
                0 => LikeState::None,
                1 => LikeState::Like,
                2 => LikeState::Dislike,
                _ => return Err(corrupt("state", v)),
            };
            Ok((state, read_u64(rest, 0).unwrap_or(0)))
        }
        _ => Err(corrupt("state", v)),
    }
}

fn decode_counts(v: &[u8]) -> Result<CountsRec> {
    match v {
        [VALUE_V1, rest @ ..] if rest.len() == 24 => {
            let owner = read_u64(rest, 16).unwrap_or(0);
            Ok(CountsRec {
                likes: read_u64(rest, 0).unwrap_or(0),
                dislikes: read_u64(rest, 8).unwrap_or(0),
                owner: (owner != 0).then_some(owner),
            })
        }
        _ => Err(corrupt("counts", v)),
    }
}

fn decode_u64_value(v: &[u8], what: &'static str) -> Result<u64> {
    match v {
        [VALUE_V1, rest @ ..] if rest.len() == 8 => Ok(read_u64(rest, 0).unwrap_or(0)),
        _ => Err(corrupt(what, v)),
    }
}

fn u64_value(x: u64) -> [u8; 9] {
    let mut v = [0u8; 9];
    v[0] = VALUE_V1;
    v[1..].copy_from_slice(&x.to_be_bytes());
    v
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum TreeRef {
    Biz(BizId),
    Shard(u32),
    Registry,
}

/// The writes of one applied batch, across trees, committed atomically.
#[derive(Default)]
pub struct WriteSet {
    batches: Vec<(TreeRef, Batch)>,
}

impl WriteSet {
    fn batch(&mut self, t: TreeRef) -> &mut Batch {
        let i = match self.batches.iter().position(|(r, _)| *r == t) {
            Some(i) => i,
            None => {
                self.batches.push((t, Batch::default()));
                self.batches.len() - 1
            }
        };
        &mut self.batches[i].1
    }

    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    pub fn put_state(
        &mut self,
        biz: BizId,
        shard: u32,
        mid: UserId,
        entity: EntityId,
        state: LikeState,
        mtime: Millis,
    ) {
        let key = keys::state(shard, mid, entity);
        let b = self.batch(TreeRef::Biz(biz));
        if state == LikeState::None {
            b.remove(key);
        } else {
            let mut v = [0u8; 10];
            v[0] = VALUE_V1;
            v[1] = match state {
                LikeState::None => 0,
                LikeState::Like => 1,
                LikeState::Dislike => 2,
            };
            v[2..].copy_from_slice(&mtime.to_be_bytes());
            b.insert(key, &v[..]);
        }
    }

    pub fn add_user_item(
        &mut self,
        biz: BizId,
        shard: u32,
        mid: UserId,
        mtime: Millis,
        entity: EntityId,
    ) {
        self.batch(TreeRef::Biz(biz)).insert(keys::user_item(shard, mid, mtime, entity), &[][..]);
    }

    pub fn del_user_item(
        &mut self,
        biz: BizId,
        shard: u32,
        mid: UserId,
        mtime: Millis,
        entity: EntityId,
    ) {
        self.batch(TreeRef::Biz(biz)).remove(keys::user_item(shard, mid, mtime, entity));
    }

    pub fn add_liker(
        &mut self,
        biz: BizId,
        shard: u32,
        entity: EntityId,
        mtime: Millis,
        mid: UserId,
    ) {
        self.batch(TreeRef::Biz(biz)).insert(keys::liker(shard, entity, mtime, mid), &[][..]);
    }

    pub fn del_liker(
        &mut self,
        biz: BizId,
        shard: u32,
        entity: EntityId,
        mtime: Millis,
        mid: UserId,
    ) {
        self.batch(TreeRef::Biz(biz)).remove(keys::liker(shard, entity, mtime, mid));
    }

    pub fn put_counts(&mut self, biz: BizId, shard: u32, entity: EntityId, c: CountsRec) {
        let mut v = [0u8; 25];
        v[0] = VALUE_V1;
        v[1..9].copy_from_slice(&c.likes.to_be_bytes());
        v[9..17].copy_from_slice(&c.dislikes.to_be_bytes());
        v[17..25].copy_from_slice(&c.owner.unwrap_or(0).to_be_bytes());
        self.batch(TreeRef::Biz(biz)).insert(keys::counts(shard, entity), &v[..]);
    }

    pub fn put_received(&mut self, biz: BizId, shard: u32, owner: UserId, total: u64) {
        self.batch(TreeRef::Biz(biz)).insert(keys::received(shard, owner), &u64_value(total)[..]);
    }

    pub fn put_applied(&mut self, shard: u32, encoded_log_id: &[u8]) {
        self.batch(TreeRef::Shard(shard)).insert(meta::APPLIED, encoded_log_id);
    }

    pub fn put_membership(&mut self, shard: u32, encoded: &[u8]) {
        self.batch(TreeRef::Shard(shard)).insert(meta::MEMBERSHIP, encoded);
    }

    pub fn put_inbox_seq(&mut self, shard: u32, source: u32, seq: u64) {
        self.batch(TreeRef::Shard(shard)).insert(tagged(meta::INBOX, source), &u64_value(seq)[..]);
    }

    pub fn push_outbox(&mut self, shard: u32, target: u32, seq: u64, encoded: &[u8]) {
        let mut k = tagged(meta::OUTBOX, target);
        k.extend_from_slice(&seq.to_be_bytes());
        let b = self.batch(TreeRef::Shard(shard));
        b.insert(k, encoded);
        b.insert(tagged(meta::NEXT, target), &u64_value(seq + 1)[..]);
    }

    pub fn ack_outbox(&mut self, shard: u32, target: u32, seqs: impl IntoIterator<Item = u64>) {
        let b = self.batch(TreeRef::Shard(shard));
        for seq in seqs {
            let mut k = tagged(meta::OUTBOX, target);
            k.extend_from_slice(&seq.to_be_bytes());
            b.remove(k);
        }
    }

    pub fn put_registry(&mut self, key: &[u8], value: &[u8]) {
        self.batch(TreeRef::Registry).insert(key, value);
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
    fn state_counts_and_received_round_trip() {
        let (_d, s) = store();
        let mut ws = WriteSet::default();
        ws.put_state(1, 0, 10, 20, LikeState::Dislike, 99);
        ws.put_counts(1, 0, 20, CountsRec { likes: 3, dislikes: 4, owner: Some(7) });
        ws.put_received(1, 0, 7, 12);
        ws.put_applied(0, b"x");
        s.commit(ws).unwrap();
        assert_eq!(s.get_state(1, 0, 10, 20).unwrap(), Some((LikeState::Dislike, 99)));
        assert_eq!(
            s.get_counts(1, 0, 20).unwrap(),
            CountsRec { likes: 3, dislikes: 4, owner: Some(7) }
        );
        assert_eq!(s.get_received(1, 0, 7).unwrap(), 12);
        assert_eq!(s.applied(0).unwrap().as_deref(), Some(&b"x"[..]));
        // Another business sees nothing: data is isolated per tree.
        assert_eq!(s.get_state(2, 0, 10, 20).unwrap(), None);
    }

    #[test]
    fn lists_page_newest_first() {
        let (_d, s) = store();
        let mut ws = WriteSet::default();
        for i in 0..10u64 {
            ws.add_user_item(1, 2, 5, 100 + i / 2, i);
        }
        ws.add_user_item(1, 2, 6, 500, 1); // another user
        s.commit(ws).unwrap();
        let p1 = s.user_list(1, 2, 5, None, 4).unwrap();
        assert_eq!(p1.iter().map(|i| i.id).collect::<Vec<_>>(), vec![9, 8, 7, 6]);
        let c = PageCursor { mtime: p1[3].mtime, id: p1[3].id };
        let p2 = s.user_list(1, 2, 5, Some(c), 100).unwrap();
        assert_eq!(p2.iter().map(|i| i.id).collect::<Vec<_>>(), vec![5, 4, 3, 2, 1, 0]);
    }

    #[test]
    fn outbox_groups_by_target_and_acks() {
        let (_d, s) = store();
        let mut ws = WriteSet::default();
        ws.push_outbox(0, 3, 1, b"a");
        ws.push_outbox(0, 3, 2, b"b");
        ws.push_outbox(0, 1, 1, b"c");
        s.commit(ws).unwrap();
        let p = s.outbox_pending(0, 10).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].0, 1);
        assert_eq!(p[1].1.iter().map(|(q, _)| *q).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(s.outbox_next(0, 3).unwrap(), 3);
        let limited = s.outbox_pending(0, 1).unwrap();
        assert_eq!(limited[1].1.len(), 1);
        let mut ws = WriteSet::default();
        ws.ack_outbox(0, 3, [1, 2]);
        s.commit(ws).unwrap();
        assert_eq!(s.outbox_len(0).unwrap(), 1);
    }
}
