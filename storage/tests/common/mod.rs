//! What both log store suites share: the test type config, entry helpers
//! and a minimal state machine the openraft suite drives beside the log.

#![allow(dead_code)]

use std::io::Cursor;
use std::sync::{Arc, Mutex};

use openraft::storage::RaftStateMachine;
use openraft::{
    BasicNode, CommittedLeaderId, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder,
    Snapshot, SnapshotMeta, StorageError, StorageIOError, StoredMembership,
};

openraft::declare_raft_types!(
    /// Application data is opaque bytes: enough to exercise the codec and
    /// large (out-of-segment) entries.
    pub TestConfig:
        D = Vec<u8>,
        R = (),
        SnapshotData = Cursor<Vec<u8>>,
);

pub fn log_id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 0), index)
}

pub fn normal(term: u64, index: u64, data: Vec<u8>) -> Entry<TestConfig> {
    Entry { log_id: log_id(term, index), payload: EntryPayload::Normal(data) }
}

pub fn payload(index: u64) -> Vec<u8> {
    format!("command {index}").into_bytes()
}

// ---- state machine scaffolding for the suite --------------------------------

/// Just enough of a state machine for the suite: applied id, membership, a
/// count of normal entries, and the last snapshot. Clones share state, which is
/// how the snapshot builder sees it.
#[derive(Clone, Default)]
pub struct MemStateMachine {
    state: Arc<Mutex<SmState>>,
}

#[derive(Default)]
struct SmState {
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, BasicNode>,
    applied_commands: u64,
    snapshot: Option<(SnapshotMeta<u64, BasicNode>, Vec<u8>)>,
    snapshots_built: u64,
}

impl MemStateMachine {
    fn lock(&self) -> std::sync::MutexGuard<'_, SmState> {
        self.state.lock().expect("state machine mutex poisoned by a failed test")
    }
}

impl RaftSnapshotBuilder<TestConfig> for MemStateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TestConfig>, StorageError<u64>> {
        let mut s = self.lock();
        s.snapshots_built += 1;
        let meta = SnapshotMeta {
            last_log_id: s.last_applied,
            last_membership: s.membership.clone(),
            snapshot_id: format!("snap-{}", s.snapshots_built),
        };
        let data = s.applied_commands.to_be_bytes().to_vec();
        s.snapshot = Some((meta.clone(), data.clone()));
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(data)) })
    }
}

impl RaftStateMachine<TestConfig> for MemStateMachine {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<u64>>, StoredMembership<u64, BasicNode>), StorageError<u64>> {
        let s = self.lock();
        Ok((s.last_applied, s.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<()>, StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<TestConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut s = self.lock();
        let mut replies = Vec::new();
        for entry in entries {
            s.last_applied = Some(entry.log_id);
            match entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(_) => s.applied_commands += 1,
                EntryPayload::Membership(m) => {
                    s.membership = StoredMembership::new(Some(entry.log_id), m)
                }
            }
            replies.push(());
        }
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<u64>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<u64>> {
        let data = snapshot.into_inner();
        let count = <[u8; 8]>::try_from(data.as_slice())
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        let mut s = self.lock();
        s.applied_commands = u64::from_be_bytes(count);
        s.last_applied = meta.last_log_id;
        s.membership = meta.last_membership.clone();
        s.snapshot = Some((meta.clone(), data));
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TestConfig>>, StorageError<u64>> {
        let s = self.lock();
        Ok(s.snapshot.as_ref().map(|(meta, data)| Snapshot {
            meta: meta.clone(),
            snapshot: Box::new(Cursor::new(data.clone())),
        }))
    }
}
