//! A fixed set of connections to one node, used round robin. A slot with no
//! connection (a lazy pool's, or one whose connection died) is dialled by
//! the next call that lands on it; concurrent callers on the same slot wait
//! for that one dial rather than each dialling.
//!
//! Every connection says `Hello { routing: Redirect }` before anything else,
//! so a node answers a request for a shard it does not lead with a
//! `NotLeader` hint instead of forwarding it: the SDK routes itself
//! (`route.rs`), and a hop through the wrong node is the exception.

use crate::connection::Connection;
use crate::error::ClientError;
use plaudit_proto::cluster::{ClientHello, Routing};
use plaudit_proto::{Request, Response};
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub(crate) struct Pool {
    addr: String,
    dial_timeout: Duration,
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
        dial_timeout: Duration,
    ) -> Result<Pool, ClientError> {
        let pool = Pool::lazy(addr, size, dial_timeout);
        for slot in pool.slots.iter() {
            slot.set(Arc::new(dial(addr, dial_timeout).await?));
        }
        Ok(pool)
    }

    /// A pool that dials each connection on its first use.
    pub(crate) fn lazy(addr: &str, size: usize, dial_timeout: Duration) -> Pool {
        let slots = (0..size.max(1))
            .map(|_| Slot { conn: Mutex::new(None), dial: tokio::sync::Mutex::new(()) })
            .collect();
        Pool { addr: addr.to_string(), dial_timeout, slots, next: AtomicUsize::new(0) }
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
        let c = Arc::new(dial(&self.addr, self.dial_timeout).await?);
        slot.set(c.clone());
        Ok(c)
    }
}

/// Dials `addr` and says `Hello`, both within `timeout`. Every failure is
/// `Io` naming the address, except the node's own refusal (`Server`, e.g.
/// `Overloaded` at its connection limit). A node that does not know `Hello` (an older
/// one) answers it with an error; it forwards everything anyway, so the
/// connection is used as it is.
async fn dial(addr: &str, timeout: Duration) -> Result<Connection, ClientError> {
    let hello = Request::Hello(ClientHello { routing: Routing::Redirect });
    let open = async {
        let c = Connection::dial(addr, timeout).await?;
        match c.call(&hello).await {
            Ok(Response::Hello) => {}
            Ok(other) => tracing::debug!(addr, ?other, "the node did not take the hello"),
            // The node answered and refused (over its connection limit):
            // its own error says more than "dropped the connection".
            Err(e @ ClientError::Server(_)) => return Err(e),
            Err(e) => {
                let kind = match &e {
                    ClientError::Io(io) => io.kind(),
                    _ => io::ErrorKind::ConnectionAborted,
                };
                let msg = format!("cannot connect to {addr}: the node dropped the connection: {e}");
                return Err(ClientError::Io(io::Error::new(kind, msg)));
            }
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
