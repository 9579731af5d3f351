//! Stable error codes. Every internal error is mapped to one of these once, at
//! the edge of the node; clients match on the code, never on the message.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The stable wire error codes. The numeric order is part of the protocol:
/// append new codes at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ErrorCode {
    /// The request is malformed or violates a limit; retrying it will not help.
    BadRequest,
    /// The addressed business (or other named object) does not exist.
    NotFound,
    /// This node does not lead the shard; see `WireError::leader`.
    NotLeader,
    /// The node sheds load; retry later with backoff.
    Overloaded,
    /// The caller is not allowed to do this.
    Unauthorized,
    /// The request did not complete in time; it may or may not have applied.
    Timeout,
    /// The node failed (e.g. storage); the request may be retried elsewhere.
    Internal,
    /// The cluster refuses the change in its present state (decommissioning
    /// a node would leave too few for the replication factor); retrying
    /// will not help until that state changes.
    Refused,
    /// The sub-board lives on another shard (it moved, or is moving):
    /// `WireError::leader` names the shard to ask. A write the shard refused
    /// this way was not applied anywhere; retrying it there (or after a
    /// moment, while the board is between shards) is safe.
    Moved,
}

impl ErrorCode {
    /// The name printed by the CLI and used in JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "BadRequest",
            ErrorCode::NotFound => "NotFound",
            ErrorCode::NotLeader => "NotLeader",
            ErrorCode::Overloaded => "Overloaded",
            ErrorCode::Unauthorized => "Unauthorized",
            ErrorCode::Timeout => "Timeout",
            ErrorCode::Internal => "Internal",
            ErrorCode::Refused => "Refused",
            ErrorCode::Moved => "Moved",
        }
    }

    /// Every code, for exhaustive tests and documentation.
    pub const ALL: [ErrorCode; 9] = [
        ErrorCode::BadRequest,
        ErrorCode::NotFound,
        ErrorCode::NotLeader,
        ErrorCode::Overloaded,
        ErrorCode::Unauthorized,
        ErrorCode::Timeout,
        ErrorCode::Internal,
        ErrorCode::Refused,
        ErrorCode::Moved,
    ];
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a `NotLeader` error says the shard's leader is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderHint {
    pub shard: u32,
    /// The leader's node id, when known.
    pub leader: Option<u64>,
    /// The shard map epoch the hint comes from.
    pub epoch: u64,
}

/// An error as it travels on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct WireError {
    pub code: ErrorCode,
    pub message: String,
    /// Set with `NotLeader`, and with `Moved` (the shard to ask).
    pub leader: Option<LeaderHint>,
}

impl WireError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        WireError { code, message: message.into(), leader: None }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadRequest, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }
    pub fn overloaded(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Overloaded, message)
    }
    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Timeout, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }

    pub fn refused(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Refused, message)
    }
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unauthorized, message)
    }

    /// The sub-board lives on shard `to` (or is on its way there).
    pub fn moved(to: u32, message: impl Into<String>) -> Self {
        let mut e = Self::new(ErrorCode::Moved, message);
        e.leader = Some(LeaderHint { shard: to, leader: None, epoch: 0 });
        e
    }

    /// The shard a `Moved` error names.
    pub fn moved_to(&self) -> Option<u32> {
        match (self.code, &self.leader) {
            (ErrorCode::Moved, Some(h)) => Some(h.shard),
            _ => None,
        }
    }
}
