//! The Raft log and hard state that builds before the write-ahead log kept
//! in sled, read once so that `FileLogStore::import` can move them into the
//! WAL; then the trees are dropped.
//!
//! ```text
//! raft/<group>/log   index (u64 big-endian) -> v1 | Entry
//! raft/<group>/meta  "vote" | "committed" | "last_purged" -> v1 | value
//! ```
//!
//! Values are the same `v1 | bincode` as the WAL's payloads. Only what a
//! move needs is read: the entries, the purge point and the vote (the
//! committed id is learned again).

use crate::file_log::decode;
use openraft::{Entry, LogId, RaftTypeConfig, Vote};
use std::io;

/// What an old log held.
pub struct OldLog<C: RaftTypeConfig> {
    pub entries: Vec<Entry<C>>,
    pub last_purged: Option<LogId<C::NodeId>>,
    pub vote: Option<Vote<C::NodeId>>,
}

fn tree_names(group: &str) -> [String; 2] {
    [format!("raft/{group}/log"), format!("raft/{group}/meta")]
}

/// The old log of `group` in `db`, or `None` if it has none.
pub fn read<C>(db: &sled::Db, group: &str) -> io::Result<Option<OldLog<C>>>
where
    C: RaftTypeConfig<Entry = Entry<C>>,
{
    let [log, meta] = tree_names(group);
    let names = db.tree_names();
    if ![&log, &meta].iter().any(|t| names.iter().any(|n| n.as_ref() == t.as_bytes())) {
        return Ok(None);
    }
    let (log, meta) = (
        db.open_tree(log).map_err(io::Error::other)?,
        db.open_tree(meta).map_err(io::Error::other)?,
    );
    let entries = log
        .iter()
        .values()
        .map(|v| decode(&v.map_err(io::Error::other)?))
        .collect::<io::Result<Vec<Entry<C>>>>()?;
    let get = |key: &[u8]| meta.get(key).map_err(io::Error::other);
    let last_purged = get(b"last_purged")?.map(|v| decode(&v)).transpose()?;
    let vote = get(b"vote")?.map(|v| decode(&v)).transpose()?;
    Ok(Some(OldLog { entries, last_purged, vote }))
}

/// Drops `group`'s old trees (after their contents are durable in the WAL).
pub fn drop_trees(db: &sled::Db, group: &str) -> io::Result<()> {
    for t in tree_names(group) {
        db.drop_tree(t.as_bytes()).map_err(io::Error::other)?;
    }
    Ok(())
}
