//! The openraft type configuration shared by every group on a node.

use crate::snapshot_file::SnapshotFile;
use plaudit_actors::{Batch, CmdResult};

openraft::declare_raft_types!(
    /// One Raft entry carries a `Batch` of commands; its response is one
    /// result per command.
    pub TypeConfig:
        D = Batch,
        R = Vec<CmdResult>,
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = SnapshotFile,
        AsyncRuntime = openraft::TokioRuntime,
);

pub type Raft = openraft::Raft<TypeConfig>;
pub type NodeId = u64;
pub type LogId = openraft::LogId<NodeId>;
pub type StoredMembership = openraft::StoredMembership<NodeId, openraft::BasicNode>;
pub type StorageError = openraft::StorageError<NodeId>;
