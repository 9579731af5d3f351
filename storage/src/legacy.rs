//! Reads applied state that data directories written before state moved to
//! memory kept in sled trees (`biz/{id}`, `rank/{id}`, `shard/{id}/meta`,
//! `registry`), into the store's trees, once, at open.
//!
//! That state was durable as of its stored applied id, and openraft never
//! purged a log past a snapshot, so either source is a valid start for a
//! shard: this one, or the shard's snapshot file (which the cluster's engine
//! installs over it when there is one). sled is not written again; the old
//! trees stay on disk (see docs/notes.md).
//!
//! The old store's crash repairs are finished first, as it did at open: a
//! checkpoint's redo record is re-applied (its ops are absolute), and a
//! shard whose snapshot install was interrupted (a marker in `installs`)
//! is left out: its keys are a mix of two states, and the install's file
//! (`installing.snap`) is what the engine loads for it.

use crate::keys::VALUE_V1;
use crate::state::{corrupt, Result, StateError, StateStore};
use crate::trees::TreeRef;
use plaudit_proto::codec;
use serde::{Deserialize, Serialize};

/// One op of an older version's redo record, as it encoded them.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Op {
    tree: TreeRef,
    key: Vec<u8>,
    value: Option<Vec<u8>>,
}

/// Entries moved per write lock.
const BATCH: usize = 4096;

pub(crate) fn load(store: &StateStore) -> Result<()> {
    let db = &store.db;
    finish_redo(db)?;
    let installs = db.open_tree("installs")?;
    let half_installed: Vec<u32> = installs
        .iter()
        .keys()
        .filter_map(|k| Some(u32::from_be_bytes(k.ok()?.as_ref().try_into().ok()?)))
        .collect();
    let mut moved = 0u64;
    for name in db.tree_names() {
        let Some(tree) = std::str::from_utf8(&name).ok().and_then(tree_of) else { continue };
        if let TreeRef::Shard(s) = tree {
            if half_installed.contains(&s) {
                continue;
            }
        }
        let from = db.open_tree(&name)?;
        let to = store.tree(tree);
        let mut batch: Vec<(sled::IVec, sled::IVec)> = Vec::with_capacity(BATCH);
        let flush = |batch: &mut Vec<(sled::IVec, sled::IVec)>| {
            to.apply(batch.iter().map(|(k, v)| (&k[..], Some(&v[..]))));
            batch.clear();
        };
        for kv in from.iter() {
            let (k, v) = kv?;
            let skip = matches!(tree, TreeRef::Biz(_) | TreeRef::Rank(_))
                && crate::keys::read_u32(&k).is_some_and(|s| half_installed.contains(&s));
            if skip {
                continue;
            }
            batch.push((k, v));
            moved += 1;
            if batch.len() == BATCH {
                flush(&mut batch);
            }
        }
        flush(&mut batch);
    }
    if moved > 0 {
        tracing::info!(keys = moved, "read applied state kept in sled by an older version");
    }
    for shard in half_installed {
        tracing::warn!(
            shard,
            "an older version's snapshot install was interrupted; its file decides"
        );
    }
    Ok(())
}

/// The tree a legacy sled tree name held.
fn tree_of(name: &str) -> Option<TreeRef> {
    if name == "registry" {
        return Some(TreeRef::Registry);
    }
    if let Some(id) = name.strip_prefix("biz/") {
        return id.parse().ok().map(TreeRef::Biz);
    }
    if let Some(id) = name.strip_prefix("rank/") {
        return id.parse().ok().map(TreeRef::Rank);
    }
    let id = name.strip_prefix("shard/")?.strip_suffix("/meta")?;
    id.parse().ok().map(TreeRef::Shard)
}

/// Re-applies the redo record of every checkpoint a crash interrupted.
fn finish_redo(db: &sled::Db) -> Result<()> {
    let redo = db.open_tree("redo")?;
    for kv in redo.iter() {
        let (k, v) = kv?;
        let ops: Vec<Op> = match v.split_first() {
            Some((&VALUE_V1, rest)) => codec::from_bytes(rest)
                .map_err(|e| StateError::Corrupt { what: "redo", detail: e.to_string() })?,
            _ => return Err(corrupt("redo", &v)),
        };
        tracing::info!(ops = ops.len(), "finishing an older version's interrupted checkpoint");
        for op in &ops {
            let tree = db.open_tree(legacy_name(op.tree))?;
            match &op.value {
                Some(v) => tree.insert(&op.key, v.as_slice())?,
                None => tree.remove(&op.key)?,
            };
        }
        redo.remove(k)?;
    }
    Ok(())
}

fn legacy_name(t: TreeRef) -> String {
    match t {
        TreeRef::Biz(b) => format!("biz/{b}"),
        TreeRef::Rank(r) => format!("rank/{r}"),
        TreeRef::Shard(s) => format!("shard/{s}/meta"),
        TreeRef::Registry => "registry".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys;

    #[test]
    fn state_an_older_version_left_in_sled_is_read_in() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::open(dir.path()).unwrap();
        // The old layout, written directly: a like state of shard 2, shard
        // 2's applied id, a registry entry, and an interrupted checkpoint
        // whose redo record puts a received total.
        let state = keys::state(2, 10, 20);
        db.open_tree("biz/7")
            .unwrap()
            .insert(&state, &[VALUE_V1, 1, 0, 0, 0, 0, 0, 0, 0, 5][..])
            .unwrap();
        db.open_tree("shard/2/meta")
            .unwrap()
            .insert(crate::shard_meta::meta::APPLIED, &b"at-9"[..])
            .unwrap();
        db.open_tree("registry").unwrap().insert(b"r", &b"v"[..]).unwrap();
        let received = keys::received(2, 10);
        let op = Op {
            tree: TreeRef::Biz(7),
            key: received.clone(),
            value: Some(vec![VALUE_V1, 0, 0, 0, 0, 0, 0, 0, 3]),
        };
        let mut record = vec![VALUE_V1];
        codec::encode_into(&vec![op], &mut record).unwrap();
        db.open_tree("redo").unwrap().insert(2u32.to_be_bytes(), record).unwrap();
        // A half-installed shard 3: left out.
        db.open_tree("biz/7").unwrap().insert(keys::state(3, 1, 1), &b"mixed"[..]).unwrap();
        db.open_tree("installs").unwrap().insert(3u32.to_be_bytes(), &b"file"[..]).unwrap();

        let s = StateStore::open(&db).unwrap();
        assert_eq!(s.get_state(7, 2, 10, 20).unwrap().map(|st| st.1), Some(5));
        assert_eq!(s.get_received(7, 2, 10).unwrap(), 3, "the redo record was finished");
        assert_eq!(s.applied(2).unwrap().as_deref(), Some(&b"at-9"[..]));
        assert_eq!(s.tree(TreeRef::Registry).get(b"r"), Some(b"v".to_vec()));
        assert_eq!(s.tree(TreeRef::Biz(7)).get(&keys::state(3, 1, 1)), None);
        assert!(db.open_tree("redo").unwrap().is_empty());
    }
}
