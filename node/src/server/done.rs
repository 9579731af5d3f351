//! What a connection's in-flight futures end with (`conn.rs`).

use super::admission::Seat;
use plaudit_cluster::staged::Answer;
use plaudit_proto::auth::Role;
use plaudit_proto::{ErrorCode, Response};
use std::time::Instant;

/// A request that finished.
pub(super) struct Done {
    pub req_id: u64,
    pub op: &'static str,
    pub started: Instant,
    pub resp: Answer,
    /// Whether this was an `Auth` (whose end lets later frames in).
    pub is_auth: bool,
    /// For an `Auth`: what it grants, or nothing. Boxed: every reply
    /// carries the field, and all but a connection's first have none.
    pub auth: Option<Box<Granted>>,
}

/// What an `Auth` that succeeded grants.
pub(super) struct Granted {
    pub role: Role,
    /// The registry's token revision before the token was checked.
    pub revision: u64,
    /// The connection's seat among authenticated ones, when it takes a new
    /// one (`admission.rs`).
    pub seat: Option<Seat>,
}

impl Done {
    pub(super) fn of(req_id: u64, op: &'static str, started: Instant, resp: Response) -> Done {
        Done::answered(req_id, op, started, Answer::Full(resp))
    }

    pub(super) fn answered(req_id: u64, op: &'static str, started: Instant, resp: Answer) -> Done {
        Done { req_id, op, started, resp, is_auth: false, auth: None }
    }
}

/// What one in-flight future ends with: a request, or a group's share of
/// a read pass's writes (`batch.rs`). Only ever moved out of a finished
/// future into `ended`, never stored: boxing the common case would cost
/// an allocation per request.
#[allow(clippy::large_enum_variant)]
pub(super) enum Ended {
    One(Done),
    /// A group's share of the writes of read pass `pass`.
    Many {
        pass: u64,
        done: Vec<Done>,
    },
}

/// The error code of a reply, if it is an error; logs an `Internal` one.
pub(super) fn error_code(op: &str, resp: &Response) -> Option<ErrorCode> {
    let Response::Error(e) = resp else { return None };
    if e.code == ErrorCode::Internal {
        // A broken node, not a rejected request: say what broke.
        tracing::warn!(op, error = %e.message, "request failed inside the node");
    }
    Some(e.code)
}
