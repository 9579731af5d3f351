//! A fixed set of connections to one node, used round robin. A slot with no
//! connection (a lazy pool's, or one whose connection died) is dialled by
//! the next call that lands on it; concurrent callers on the same slot wait
//! for that one dial rather than each dialling.
//!
//! Every connection says `Hello { routing: Redirect }` before anything else,
//! so a node answers a request for a shard it does not lead with a
//! `NotLeader` hint instead of forwarding it: the SDK routes itself
//! (`route.rs`), and a hop through the wrong node is the exception.
//!
//! With a token (`ClientOptions::token`) it then says `Auth`, within the
//! same dial timeout, so that every connection of the client has the same
//! role. A node checks the role per connection, not per call: were `Auth`
//! a call of its own, one pooled connection could carry it and the next
//! not.
//!
//! ```text
//! connect ─► Hello ─► (token?) ─► Auth ─┬─ Auth(role) ──► ready for calls
//!                                       └─ Unauthorized ─► the dial fails, not retried
//! ```

use crate::api::unexpected;
use crate::connection::Connection;
use crate::error::ClientError;
use plaudit_proto::auth::{AuthRequest, TokenSecret};
use plaudit_proto::cluster::{ClientHello, Routing};
use plaudit_proto::{ErrorCode, Request, Response, WireError};
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How every connection to every node is opened.
#[derive(Clone)]
pub(crate) struct Dialer {
    /// Bounds the TCP connect, the hello and the `Auth` together.
    pub timeout: Duration,
    /// Sent as `Auth` on each new connection; `None` for an open node.
    pub token: Option<TokenSecret>,
    /// TLS to every node; `None`: plaintext.
    pub tls: Option<crate::Tls>,
}

pub(crate) struct Pool {
    addr: String,
    dialer: Dialer,
    slots: Box<[Slot]>,
    next: AtomicUsize,
}

struct Slot {
    // A std mutex guards the fast path (clone the live handle); it is never
    // held across an `.await`. `dial` serialises re-dialling of this slot.
    conn: Mutex<Option<Arc<Connection>>>,
    dial: tokio::sync::Mutex<()>,
}

impl Slot {
    fn live(&self) -> Option<Arc<Connection>> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        conn.as_ref().filter(|c| c.is_alive()).cloned()
    }

    fn set(&self, c: Arc<Connection>) {
        *self.conn.lock().unwrap_or_else(|p| p.into_inner()) = Some(c);
    }
}

impl Pool {
    /// Dials all `size` connections (at least one) up front, so a bad
    /// address fails here rather than on the first call.
    pub(crate) async fn open(
        addr: &str,
        size: usize,
        dialer: &Dialer,
    ) -> Result<Pool, ClientError> {
        let pool = Pool::lazy(addr, size, dialer);
        for slot in pool.slots.iter() {
            slot.set(Arc::new(dial(addr, dialer).await?));
        }
        Ok(pool)
    }

    /// A pool that dials each connection on its first use.
    pub(crate) fn lazy(addr: &str, size: usize, dialer: &Dialer) -> Pool {
        let slots = (0..size.max(1))
            .map(|_| Slot { conn: Mutex::new(None), dial: tokio::sync::Mutex::new(()) })
            .collect();
        Pool { addr: addr.to_string(), dialer: dialer.clone(), slots, next: AtomicUsize::new(0) }
    }

    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    /// The next connection in turn, re-dialled if it has died.
    pub(crate) async fn get(&self) -> Result<Arc<Connection>, ClientError> {
        let slot = &self.slots[self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len()];
        if let Some(c) = slot.live() {
            return Ok(c);
        }
        let _dialling = slot.dial.lock().await;
        // Another caller may have re-dialled while we waited.
        if let Some(c) = slot.live() {
            return Ok(c);
        }
        tracing::debug!(addr = %self.addr, "dialling");
        let c = Arc::new(dial(&self.addr, &self.dialer).await?);
        slot.set(c.clone());
        Ok(c)
    }
}

/// Dials `addr`, says `Hello` and, with a token, `Auth`, all within the
/// dialer's timeout. Every failure is `Io` naming the address, except the
/// node's own answers (`Server`): a refusal at its connection limit
/// (`Overloaded`), or of the token (`Unauthorized`, which no retry can
/// change). A node that does not know `Hello` (an older one) answers it with
/// an error; it forwards everything anyway, so the connection is used as it
/// is.
async fn dial(addr: &str, dialer: &Dialer) -> Result<Connection, ClientError> {
    let timeout = dialer.timeout;
    let hello = Request::Hello(ClientHello { routing: Routing::Redirect });
    let open = async {
        let c = Connection::dial(addr, timeout, dialer.tls.as_ref()).await?;
        match c.call(&hello).await {
            Ok(Response::Hello) => {}
            Ok(other) => tracing::debug!(addr, ?other, "the node did not take the hello"),
            Err(e) => return Err(dropped(addr, e)),
        }
        if let Some(token) = &dialer.token {
            authenticate(&c, addr, token).await?;
        }
        Ok(c)
    };
    match tokio::time::timeout(timeout, open).await {
        Ok(r) => r,
        Err(_) => Err(ClientError::Io(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("cannot connect to {addr}: no answer within {timeout:?}"),
        ))),
    }
}

/// Says `Auth` on a fresh connection. The node's error answer is returned
/// as `Server`, so the call loop sorts it like any answer: `Unauthorized`
/// ends the call, `Overloaded` is backed off from.
async fn authenticate(c: &Connection, addr: &str, token: &TokenSecret) -> Result<(), ClientError> {
    match c.call(&Request::Auth(AuthRequest { token: token.clone() })).await {
        Ok(Response::Auth(role)) => {
            // `Role` holds ids, never the secret: fine to log.
            tracing::debug!(addr, ?role, "authenticated");
            Ok(())
        }
        Ok(Response::Error(e)) => Err(ClientError::Server(auth_refused(e))),
        Ok(other) => Err(unexpected("auth", &other)),
        Err(e) => Err(dropped(addr, e)),
    }
}

/// The error for a refused `Auth`: an `Unauthorized` answer keeps its code
/// and says that it was the token (the node's message alone, "invalid
/// token", does not say that no retry will help). Other answers (a node at
/// its limit) are kept as they are.
fn auth_refused(e: WireError) -> WireError {
    if e.code != ErrorCode::Unauthorized {
        return e;
    }
    WireError::unauthorized(format!("the node refused the token: {}", e.message))
}

/// A failure while saying hello or `Auth` on a fresh connection. The node's
/// own refusal (over its connection limit) says more than "dropped the
/// connection", so it is kept; anything else is `Io` naming the address.
fn dropped(addr: &str, e: ClientError) -> ClientError {
    let kind = match &e {
        ClientError::Server(_) => return e,
        ClientError::Io(io) => io.kind(),
        _ => io::ErrorKind::ConnectionAborted,
    };
    let msg = format!("cannot connect to {addr}: the node dropped the connection: {e}");
    ClientError::Io(io::Error::new(kind, msg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_token_stays_unauthorized_and_says_so() {
        let e = auth_refused(WireError::unauthorized("invalid token"));
        assert_eq!(e.code, ErrorCode::Unauthorized);
        assert_eq!(e.message, "the node refused the token: invalid token");
        let busy = WireError::overloaded("at the connection limit");
        assert_eq!(auth_refused(busy.clone()), busy);
    }
}
