//! openraft's state machine for one group: hands committed entries to the
//! shard actor and serves snapshots from the shard's stored state.
//!
//! The applied log id is staged by the shard actor in the same write set as
//! the state it describes, and a checkpoint writes both to sled together, so
//! `applied_state` after a crash names exactly what storage holds and
//! openraft replays the rest from the durable log.

use crate::types::{LogId, StorageError, StoredMembership, TypeConfig};
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    EntryPayload, ErrorSubject, ErrorVerb, RaftSnapshotBuilder, SnapshotMeta, StorageIOError,
};
use plaudit_actors::{ApplyEntry, CmdResult, ShardHandle};
use plaudit_proto::codec;
use plaudit_storage::group_commit::GroupCommit;
use plaudit_storage::StateStore;
use serde::{Deserialize, Serialize};
use std::io::Cursor;

type Item = (String, Vec<u8>, Vec<u8>);

#[derive(Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta<u64, openraft::BasicNode>,
    items: Vec<Item>,
}

pub struct ShardStateMachine {
    pub shard: u32,
    pub handle: ShardHandle,
    pub store: StateStore,
    pub commit: GroupCommit,
}

fn sm_err(verb: ErrorVerb, e: impl ToString) -> StorageError {
    let io = std::io::Error::other(e.to_string());
    StorageIOError::new(ErrorSubject::StateMachine, verb, openraft::AnyError::new(&io)).into()
}

// openraft's own trait methods return `StorageError` by value; helpers that
// feed them do the same rather than boxing and unboxing on every call.
#[allow(clippy::result_large_err)]
impl ShardStateMachine {
    fn applied(&self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let applied =
            match self.store.applied(self.shard).map_err(|e| sm_err(ErrorVerb::Read, e))? {
                Some(v) => Some(codec::from_bytes(&v).map_err(|e| sm_err(ErrorVerb::Read, e))?),
                None => None,
            };
        let membership =
            match self.store.membership(self.shard).map_err(|e| sm_err(ErrorVerb::Read, e))? {
                Some(v) => codec::from_bytes(&v).map_err(|e| sm_err(ErrorVerb::Read, e))?,
                None => StoredMembership::default(),
            };
        Ok((applied, membership))
    }

    /// Exports the shard at its current applied position. Runs inside the
    /// state machine task, between applies, so the export is consistent.
    async fn export(&self) -> Result<StoredSnapshot, StorageError> {
        // The log is purged up to the snapshot: write the staged state to
        // sled and make it durable first.
        self.store.checkpoint(self.shard).map_err(|e| sm_err(ErrorVerb::Write, e))?;
        self.commit.flush().await.map_err(|e| sm_err(ErrorVerb::Write, e))?;
        let (last_log_id, last_membership) = self.applied()?;
        let items = self.store.export_shard(self.shard).map_err(|e| sm_err(ErrorVerb::Read, e))?;
        let snapshot_id = format!(
            "{}-{}",
            last_log_id.map(|l| l.index).unwrap_or(0),
            last_log_id.map(|l| l.leader_id.term).unwrap_or(0)
        );
        let meta = SnapshotMeta { last_log_id, last_membership, snapshot_id };
        Ok(StoredSnapshot { meta, items })
    }
}

/// Holds an export taken in the state machine task; building only encodes it.
pub struct Builder {
    shard: u32,
    store: StateStore,
    snapshot: Option<StoredSnapshot>,
    error: Option<String>,
}

impl RaftSnapshotBuilder<TypeConfig> for Builder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let snap = match (self.snapshot.take(), self.error.take()) {
            (Some(s), _) => s,
            (None, e) => return Err(sm_err(ErrorVerb::Read, e.unwrap_or_default())),
        };
        let bytes = codec::to_bytes(&snap).map_err(|e| sm_err(ErrorVerb::Write, e))?;
        self.store
            .put_snapshot_meta(self.shard, &bytes)
            .map_err(|e| sm_err(ErrorVerb::Write, e))?;
        Ok(Snapshot { meta: snap.meta, snapshot: Box::new(Cursor::new(bytes)) })
    }
}

impl RaftStateMachine<TypeConfig> for ShardStateMachine {
    type SnapshotBuilder = Builder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        self.applied()
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Vec<CmdResult>>, StorageError>
    where
        I: IntoIterator<Item = openraft::Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let mut batch = Vec::new();
        for entry in entries {
            let log_id = codec::to_bytes(&entry.log_id).map_err(|e| sm_err(ErrorVerb::Write, e))?;
            let (membership, payload) = match entry.payload {
                EntryPayload::Blank => (None, None),
                EntryPayload::Normal(b) => (None, Some(b)),
                EntryPayload::Membership(m) => {
                    let stored = StoredMembership::new(Some(entry.log_id), m);
                    (Some(codec::to_bytes(&stored).map_err(|e| sm_err(ErrorVerb::Write, e))?), None)
                }
            };
            batch.push(ApplyEntry { log_id, membership, batch: payload });
        }
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        self.handle.apply(batch).await.map_err(|e| sm_err(ErrorVerb::Write, e))
    }

    async fn get_snapshot_builder(&mut self) -> Builder {
        let (snapshot, error) = match self.export().await {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(e.to_string())),
        };
        Builder { shard: self.shard, store: self.store.clone(), snapshot, error }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, openraft::BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let bytes = snapshot.into_inner();
        let snap: StoredSnapshot =
            codec::from_bytes(&bytes).map_err(|e| sm_err(ErrorVerb::Read, e))?;
        self.store.import_shard(self.shard, snap.items).map_err(|e| sm_err(ErrorVerb::Write, e))?;
        let mut ws = plaudit_storage::WriteSet::new(self.shard);
        if let Some(l) = meta.last_log_id {
            ws.put_applied(
                self.shard,
                &codec::to_bytes(&l).map_err(|e| sm_err(ErrorVerb::Write, e))?,
            );
        }
        ws.put_membership(
            self.shard,
            &codec::to_bytes(&meta.last_membership).map_err(|e| sm_err(ErrorVerb::Write, e))?,
        );
        self.store.stage(ws);
        // The imported keys are in sled already; their applied id must be
        // too, or a crash would replay the log over the snapshot's state.
        self.store.checkpoint(self.shard).map_err(|e| sm_err(ErrorVerb::Write, e))?;
        self.store
            .put_snapshot_meta(self.shard, &bytes)
            .map_err(|e| sm_err(ErrorVerb::Write, e))?;
        self.handle.reset().await.map_err(|e| sm_err(ErrorVerb::Write, e))
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let Some(bytes) =
            self.store.snapshot_meta(self.shard).map_err(|e| sm_err(ErrorVerb::Read, e))?
        else {
            return Ok(None);
        };
        let snap: StoredSnapshot =
            codec::from_bytes(&bytes).map_err(|e| sm_err(ErrorVerb::Read, e))?;
        Ok(Some(Snapshot { meta: snap.meta, snapshot: Box::new(Cursor::new(bytes.to_vec())) }))
    }
}
