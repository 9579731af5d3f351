//! An unauthenticated connection chosen to be closed for a newcomer
//! (`admission.rs`: the one open longest goes) whose `Auth` has already
//! arrived (unread, or being checked) answers it instead of closing.
//!
//! Why: a flood that reconnects faster than a client's first round trip
//! makes a just-accepted client the oldest unauthenticated connection
//! before its `Auth` is read, and it was closed with its `Auth` unread
//! (t77 failed so once in CI, its ten tries all evicted on a loaded host).
//! Sparing it costs the newcomer nothing: an accepted `Auth` moves the
//! connection to an authenticated seat and its unauthenticated one goes
//! to the newcomer as it would have on closing (`Seat`'s drop hands the
//! slot to its heir). An `Auth` that gets no seat leaves it
//! unauthenticated, and it closes then (`spared_in_vain`). A flood gains
//! nothing from it either: only a request that is an `Auth` spares, and a
//! wrong token counts towards `auth_refused`.

use super::{Conn, Socket};
use crate::server::access::Access;
use plaudit_proto::{frame, Request};

impl<S: Socket> Conn<S> {
    /// Whether an `Auth` is being checked, or reads what the socket has
    /// (without waiting) and says whether the next whole request is one.
    pub(super) fn auth_arrived(&mut self) -> bool {
        if matches!(self.access, Access::Granted { .. }) {
            return false;
        }
        if self.authing {
            return true;
        }
        if self.read().is_err() {
            return false;
        }
        let Some(payload) = self.inbuf.peek_frame() else { return false };
        matches!(frame::decode_request(payload), Ok(env) if matches!(env.body, Request::Auth(_)))
    }

    /// Spared for its `Auth`, which has been answered without a seat: it
    /// closes as it would have.
    pub(super) fn spared_in_vain(&self) -> bool {
        self.spared && !self.authing && !matches!(self.access, Access::Granted { .. })
    }
}
