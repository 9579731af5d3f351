//! What can go wrong inside a shard, typed so that callers can tell a
//! request that was refused from a replica that is broken.
//!
//! openraft draws the same line between `RaftError::APIError` (retry,
//! forward, or tell the client) and `Fatal` (this node must stop serving the
//! group). Here:
//!
//! - a **rejected** command is not an error of the shard at all: it is a
//!   result, `CmdResult::Failed(WireError)`, computed identically on every
//!   replica, and the log entry still applies (its other commands keep their
//!   effects);
//! - a [`Fatal`] error means this replica could not apply an entry the way
//!   every other replica will (storage failed, a hosted actor died mid-batch,
//!   a stored value does not decode). The state machine hands it to openraft
//!   as a `StorageError`, which stops the group on this node rather than let
//!   it diverge;
//! - a [`ShardError`] is what a read or query through the shard can return:
//!   the request itself is at fault (`Rejected`), or the shard cannot answer
//!   (`Fatal`, `Stopped`).

use plaudit_proto::{codec::CodecError, WireError};
use plaudit_storage::StateError;

/// This replica cannot apply its log faithfully any more.
#[derive(Debug, thiserror::Error)]
pub enum Fatal {
    #[error("storage failed: {0}")]
    Storage(#[from] StateError),
    #[error("a value could not be encoded or decoded: {0}")]
    Codec(#[from] CodecError),
    /// A hosted actor could not be started or stopped while it held part of
    /// a batch.
    #[error("{0}")]
    Actor(String),
    /// Something the shard relies on did not hold (a bug, not bad input).
    #[error("invariant broken: {0}")]
    Invariant(String),
}

/// Why a read or query through a shard failed.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    /// The request cannot be served as asked (unknown ranking, bad cursor).
    #[error(transparent)]
    Rejected(WireError),
    /// The shard is broken on this node.
    #[error(transparent)]
    Fatal(#[from] Fatal),
    /// The shard actor has stopped (shutdown, or after a fatal error).
    #[error("the shard has stopped")]
    Stopped,
}

impl From<StateError> for ShardError {
    fn from(e: StateError) -> Self {
        ShardError::Fatal(Fatal::Storage(e))
    }
}

impl ShardError {
    /// The stable wire error for a client: a rejection keeps its code,
    /// anything else is `Internal` (the request may be retried elsewhere).
    pub fn into_wire(self) -> WireError {
        match self {
            ShardError::Rejected(e) => e,
            other => WireError::internal(other.to_string()),
        }
    }
}
