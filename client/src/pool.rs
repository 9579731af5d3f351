//! A fixed set of connections used round robin. A slot whose connection has
//! died is re-dialled by the next call that lands on it; concurrent callers on
//! the same slot wait for that one dial rather than each dialling.

use crate::connection::Connection;
use crate::error::ClientError;
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
        let mut slots = Vec::with_capacity(size.max(1));
        for _ in 0..size.max(1) {
            let c = Connection::dial(addr, dial_timeout).await?;
            slots.push(Slot {
                conn: Mutex::new(Some(Arc::new(c))),
                dial: tokio::sync::Mutex::new(()),
            });
        }
        Ok(Pool {
            addr: addr.to_string(),
            dial_timeout,
            slots: slots.into_boxed_slice(),
            next: AtomicUsize::new(0),
        })
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
        tracing::debug!(addr = %self.addr, "re-dialling a dead connection");
        let c = Arc::new(Connection::dial(&self.addr, self.dial_timeout).await?);
        slot.set(c.clone());
        Ok(c)
    }
}
