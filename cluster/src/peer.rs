//! The data plane between nodes: one multiplexed, authenticated TCP
//! connection from this node to each peer it talks to, shared by every Raft
//! group and by forwarded requests.
//!
//! ```text
//! Peers::call(node, req) ─ address book ─ pooled PeerConn (dialed on first use,
//!                          redialed after a failure, at most every 100 ms) ─ PeerServer on the peer
//! ```
//!
//! Modules: `wire` (frames and messages), `auth` (the secret handshake),
//! `conn` (one dialed connection), `server` (the listener side), `stream`
//! and `tls` (plain TCP or mutual TLS beneath), `links` (the
//! fault-injection seam).

pub mod auth;
pub mod conn;
pub mod links;
pub(crate) mod quiet;
pub mod server;
pub mod stream;
pub mod tls;
pub mod wire;

use auth::Credentials;
pub use conn::CallError;
use conn::{DialFault, PeerConn};
use links::Links;
use wire::{PeerRequest, PeerResponse};

use crate::types::NodeId;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// How long dialing and authenticating a peer may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(1);
/// After a failed dial, calls fail at once for this long instead of each
/// dialing again.
const REDIAL_AFTER: Duration = Duration::from_millis(100);

/// Per-peer transport counters, for `/metrics`.
#[derive(Default)]
pub struct PeerCounters {
    pub dial_failures: AtomicU64,
    pub call_failures: AtomicU64,
}

struct Slot {
    conn: Mutex<Option<Arc<PeerConn>>>,
    /// Serialises dialing; holds when the last dial failed.
    dial: tokio::sync::Mutex<Option<Instant>>,
    counters: PeerCounters,
}

pub struct Peers {
    me: NodeId,
    creds: Credentials,
    pub links: Arc<Links>,
    addrs: RwLock<HashMap<NodeId, String>>,
    slots: RwLock<HashMap<NodeId, Arc<Slot>>>,
    /// Peers the control plane declared down (`liveness.rs`): routing does
    /// not choose them. Raft keeps calling them: a false alarm must not cut
    /// replication.
    down: RwLock<std::collections::BTreeSet<NodeId>>,
}

impl Peers {
    pub fn new(me: NodeId, creds: Credentials, links: Arc<Links>) -> Peers {
        Peers {
            me,
            creds,
            links,
            addrs: RwLock::default(),
            slots: RwLock::default(),
            down: RwLock::default(),
        }
    }

    /// The control plane's verdict on `node`.
    pub fn set_down(&self, node: NodeId, down: bool) {
        let mut d = self.down.write().unwrap_or_else(|e| e.into_inner());
        if down {
            d.insert(node);
        } else {
            d.remove(&node);
        }
    }

    /// Whether the control plane declared `node` down.
    pub fn is_down(&self, node: NodeId) -> bool {
        self.down.read().unwrap_or_else(|e| e.into_inner()).contains(&node)
    }

    pub fn me(&self) -> NodeId {
        self.me
    }

    /// Records (or changes) where a peer listens.
    pub fn set_addr(&self, node: NodeId, addr: String) {
        let mut a = self.addrs.write().unwrap_or_else(|e| e.into_inner());
        if a.get(&node) != Some(&addr) {
            a.insert(node, addr);
            // A new address: the old connection goes to the old one.
            if let Some(s) = self.slots.read().unwrap_or_else(|e| e.into_inner()).get(&node) {
                *s.conn.lock().unwrap_or_else(|e| e.into_inner()) = None;
            }
        }
    }

    pub fn addr(&self, node: NodeId) -> Option<String> {
        self.addrs.read().unwrap_or_else(|e| e.into_inner()).get(&node).cloned()
    }

    fn slot(&self, node: NodeId) -> Arc<Slot> {
        if let Some(s) = self.slots.read().unwrap_or_else(|e| e.into_inner()).get(&node) {
            return s.clone();
        }
        let mut all = self.slots.write().unwrap_or_else(|e| e.into_inner());
        all.entry(node)
            .or_insert_with(|| {
                Arc::new(Slot {
                    conn: Mutex::new(None),
                    dial: tokio::sync::Mutex::new(None),
                    counters: PeerCounters::default(),
                })
            })
            .clone()
    }

    /// Drops the connection to `node` (a cut link, a peer declared dead).
    pub fn disconnect(&self, node: NodeId) {
        if let Some(s) = self.slots.read().unwrap_or_else(|e| e.into_inner()).get(&node) {
            *s.conn.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }

    /// `(node, dial failures, call failures)` for every peer called so far.
    pub fn counters(&self) -> Vec<(NodeId, u64, u64)> {
        let slots = self.slots.read().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<_> = slots
            .iter()
            .map(|(n, s)| {
                (
                    *n,
                    s.counters.dial_failures.load(Ordering::Relaxed),
                    s.counters.call_failures.load(Ordering::Relaxed),
                )
            })
            .collect();
        out.sort();
        out
    }

    async fn conn(&self, node: NodeId, slot: &Slot) -> Result<Arc<PeerConn>, CallError> {
        let unreachable = |why: String| CallError::Unreachable { node, why };
        if self.links.is_blocked(node) {
            return Err(unreachable("the link is cut (fault injection)".into()));
        }
        let live = |slot: &Slot| {
            let c = slot.conn.lock().unwrap_or_else(|e| e.into_inner());
            c.as_ref().filter(|c| c.is_alive()).cloned()
        };
        if let Some(c) = live(slot) {
            return Ok(c);
        }
        let mut last_failure = slot.dial.lock().await;
        if let Some(c) = live(slot) {
            return Ok(c);
        }
        if last_failure.is_some_and(|t| t.elapsed() < REDIAL_AFTER) {
            return Err(unreachable("a recent dial failed".into()));
        }
        let addr = self.addr(node).ok_or_else(|| unreachable("its address is unknown".into()))?;
        match PeerConn::dial(self.me, node, &addr, &self.creds, DIAL_TIMEOUT).await {
            Ok(c) => {
                let c = Arc::new(c);
                *slot.conn.lock().unwrap_or_else(|e| e.into_inner()) = Some(c.clone());
                *last_failure = None;
                Ok(c)
            }
            Err(why) => {
                slot.counters.dial_failures.fetch_add(1, Ordering::Relaxed);
                *last_failure = Some(Instant::now());
                match &why {
                    // Configuration to fix: said, but not every 100 ms.
                    DialFault::Mismatch(w) if quiet::due(w) => {
                        tracing::warn!(node, "dialing a peer: {w}")
                    }
                    _ => tracing::debug!(node, %addr, %why, "dialing a peer failed"),
                }
                Err(unreachable(why.to_string()))
            }
        }
    }

    /// Sends `req` to `node` and waits up to `timeout` for the answer.
    pub async fn call(
        &self,
        node: NodeId,
        req: PeerRequest,
        timeout: Duration,
    ) -> Result<PeerResponse, CallError> {
        let slot = self.slot(node);
        let res = tokio::time::timeout(timeout, async {
            let c = self.conn(node, &slot).await?;
            c.call(req).await
        })
        .await
        .unwrap_or_else(|_| {
            Err(CallError::NoAnswer { node, why: format!("timed out after {timeout:?}") })
        });
        if res.is_err() {
            slot.counters.call_failures.fetch_add(1, Ordering::Relaxed);
        }
        res
    }
}
