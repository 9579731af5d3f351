//! The open client connections, so that a node at its connection cap can
//! make room for a newcomer by closing the connection idle the longest
//! instead of locking every new client out.
//!
//! Without this, 10,000 idle connections (the default cap) held by anyone
//! would refuse every other client until their idle timeout (minutes). A
//! connection is a candidate only if it has nothing in flight and nothing
//! left to write, and has been idle at least [`MIN_IDLE_TO_EVICT`]; ones that
//! never sent a request go first. The choice is a pure function
//! ([`pick_victim`]) over snapshots of the entries, tested below.
//!
//! The evicted connection hands its slot (its permit of the cap) straight
//! to the newcomer that evicted it, so a slot freed for one newcomer is
//! never taken by another that was waiting, and the cap holds exactly.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, Notify, OwnedSemaphorePermit};

/// A client connection idle for less than this is never closed to make
/// room: a client between two requests is not idle. (The admin endpoint,
/// whose clients send their one request at once, uses none: `with_min_idle`.)
pub const MIN_IDLE_TO_EVICT: Duration = Duration::from_secs(1);

/// What one connection publishes about itself (relaxed atomics: the choice
/// is a heuristic, and a stale value only picks a slightly worse victim).
#[derive(Debug)]
pub struct Entry {
    /// The table's epoch, which `last_active_ms` counts from.
    epoch: Instant,
    /// When it last received a whole frame or wrote a reply, in ms since the
    /// table's epoch.
    last_active_ms: AtomicU64,
    /// Requests in flight or replies not yet written.
    busy: AtomicBool,
    /// It has sent at least one request (with authentication, it has
    /// authenticated).
    greeted: AtomicBool,
    /// Chosen to be closed; never chosen twice.
    doomed: AtomicBool,
    /// Never closed for a newcomer (the admin's connections).
    protected: AtomicBool,
    /// Wakes the connection to close itself.
    pub kill: Notify,
    /// The newcomer the connection's slot goes to when it closes.
    heir: Mutex<Option<oneshot::Sender<OwnedSemaphorePermit>>>,
}

impl Entry {
    /// The connection was active at `now` (a time its caller has read
    /// already: a clock read per request was 1.4% of the node on hot
    /// scoring).
    pub fn touch(&self, now: Instant) {
        let ms = now.saturating_duration_since(self.epoch).as_millis() as u64;
        self.last_active_ms.store(ms, Ordering::Relaxed);
    }

    pub fn set_busy(&self, busy: bool) {
        self.busy.store(busy, Ordering::Relaxed);
    }

    pub fn set_greeted(&self) {
        self.greeted.store(true, Ordering::Relaxed);
    }

    /// Keeps the connection from ever being closed for a newcomer.
    pub fn protect(&self) {
        self.protected.store(true, Ordering::Relaxed);
    }

    /// Whether it was chosen to be closed for a newcomer.
    #[cfg(test)]
    pub fn is_doomed(&self) -> bool {
        self.doomed.load(Ordering::Relaxed)
    }

    /// Gives the connection's slot to the newcomer that evicted it, if one
    /// did; else frees it. Call after `Table::remove`.
    pub fn pass_on(&self, permit: OwnedSemaphorePermit) {
        let heir = self.heir.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(heir) = heir {
            // A newcomer that stopped waiting drops the permit (frees it).
            let _ = heir.send(permit);
        }
    }
}

/// A point-in-time view of one entry, for [`pick_victim`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    pub idle: Duration,
    pub busy: bool,
    pub greeted: bool,
    /// Already chosen, or never to be (`Entry::protect`).
    pub doomed: bool,
}

#[derive(Debug)]
pub struct Table {
    epoch: Instant,
    next_id: AtomicU64,
    entries: Mutex<HashMap<u64, Arc<Entry>>>,
    /// How long a connection must have been idle to be closed for a newcomer.
    min_idle: Duration,
}

impl Default for Table {
    fn default() -> Self {
        Table::new()
    }
}

impl Table {
    pub fn new() -> Self {
        Table::with_min_idle(MIN_IDLE_TO_EVICT)
    }

    /// A table whose connections may be closed for a newcomer once idle
    /// for `min_idle`.
    pub fn with_min_idle(min_idle: Duration) -> Self {
        Table {
            epoch: Instant::now(),
            next_id: AtomicU64::new(1),
            entries: Mutex::default(),
            min_idle,
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Registers a new connection; `remove` it when it closes.
    pub fn insert(&self) -> (u64, Arc<Entry>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let entry = Arc::new(Entry {
            epoch: self.epoch,
            last_active_ms: AtomicU64::new(self.now_ms()),
            busy: AtomicBool::new(false),
            greeted: AtomicBool::new(false),
            doomed: AtomicBool::new(false),
            protected: AtomicBool::new(false),
            kill: Notify::new(),
            heir: Mutex::new(None),
        });
        self.lock().insert(id, entry.clone());
        (id, entry)
    }

    pub fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// Chooses the connection to close for a newcomer and tells it to close;
    /// the receiver gets its slot once it has. `None` if none may be closed
    /// (all busy or recently active).
    pub fn evict_one(&self) -> Option<oneshot::Receiver<OwnedSemaphorePermit>> {
        let now = self.now_ms();
        let entries = self.lock();
        let snapshots = entries.iter().map(|(&id, e)| {
            let last = e.last_active_ms.load(Ordering::Relaxed);
            let snap = Snapshot {
                idle: Duration::from_millis(now.saturating_sub(last)),
                busy: e.busy.load(Ordering::Relaxed),
                greeted: e.greeted.load(Ordering::Relaxed),
                doomed: e.doomed.load(Ordering::Relaxed) || e.protected.load(Ordering::Relaxed),
            };
            (id, snap)
        });
        let victim = pick_victim(snapshots, self.min_idle)?;
        let e = &entries[&victim];
        e.doomed.store(true, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        // Set under the table lock: the victim is still in the table, so it
        // has not yet passed its slot on, and will find the heir when it does.
        *e.heir.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
        // `notify_one` stores a permit, so the kill is not lost if the
        // connection is not waiting at this instant.
        e.kill.notify_one();
        Some(rx)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Entry>>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The connection to close for a newcomer: never a busy or already doomed
/// one, nor one active within `min_idle`; among the rest, one that never
/// sent a request before one that did, then the longest idle.
pub fn pick_victim(
    entries: impl Iterator<Item = (u64, Snapshot)>,
    min_idle: Duration,
) -> Option<u64> {
    entries
        .filter(|(_, s)| !s.busy && !s.doomed && s.idle >= min_idle)
        .max_by_key(|(id, s)| (!s.greeted, s.idle, std::cmp::Reverse(*id)))
        .map(|(id, _)| id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(idle_ms: u64, busy: bool, greeted: bool) -> Snapshot {
        Snapshot { idle: Duration::from_millis(idle_ms), busy, greeted, doomed: false }
    }

    #[test]
    fn the_longest_idle_silent_connection_goes_first() {
        let entries = vec![
            (1, snap(60_000, false, true)),
            (2, snap(2_000, false, false)),
            (3, snap(5_000, false, false)),
            (4, snap(90_000, true, false)),
        ];
        assert_eq!(pick_victim(entries.into_iter(), MIN_IDLE_TO_EVICT), Some(3));
    }

    #[test]
    fn greeted_ones_go_when_no_silent_one_is_left() {
        let entries = vec![(1, snap(3_000, false, true)), (2, snap(8_000, false, true))];
        assert_eq!(pick_victim(entries.into_iter(), MIN_IDLE_TO_EVICT), Some(2));
    }

    #[test]
    fn busy_recent_and_doomed_connections_are_never_chosen() {
        let mut doomed = snap(50_000, false, false);
        doomed.doomed = true;
        let entries: Vec<(u64, Snapshot)> =
            vec![(1, snap(999, false, false)), (2, snap(50_000, true, true)), (3, doomed)];
        assert_eq!(pick_victim(entries.clone().into_iter(), MIN_IDLE_TO_EVICT), None);
        // Without a minimum, only the recent one may go.
        assert_eq!(pick_victim(entries.into_iter(), Duration::ZERO), Some(1));
    }

    #[test]
    fn evict_one_dooms_each_entry_at_most_once() {
        let mut table = Table::new();
        // A table started a minute ago, whose two connections did nothing since.
        let Some(past) = Instant::now().checked_sub(Duration::from_secs(60)) else { return };
        table.epoch = past;
        let (_, a) = table.insert();
        let (_, b) = table.insert();
        a.last_active_ms.store(0, Ordering::Relaxed);
        b.last_active_ms.store(0, Ordering::Relaxed);
        assert!(table.evict_one().is_some());
        assert!(table.evict_one().is_some());
        assert!(table.evict_one().is_none(), "both are already doomed");
        assert!(a.doomed.load(Ordering::Relaxed) && b.doomed.load(Ordering::Relaxed));
    }

    #[tokio::test]
    async fn an_evicted_connection_hands_its_slot_to_the_newcomer() {
        let mut table = Table::new();
        let Some(past) = Instant::now().checked_sub(Duration::from_secs(60)) else { return };
        table.epoch = past;
        let cap = std::sync::Arc::new(tokio::sync::Semaphore::new(1));
        let slot = cap.clone().try_acquire_owned().unwrap();
        let (id, old) = table.insert();
        old.last_active_ms.store(0, Ordering::Relaxed);
        let heir = table.evict_one().expect("the idle one is evicted");
        // Another newcomer waiting on the cap must not get the slot.
        let waiter = cap.clone().acquire_owned();
        table.remove(id);
        old.pass_on(slot);
        let got = heir.await.expect("the slot is handed over");
        assert_eq!(cap.available_permits(), 0);
        tokio::select! {
            biased;
            _ = waiter => panic!("the waiter took the evicted slot"),
            () = std::future::ready(()) => {}
        }
        drop(got);
        assert_eq!(cap.available_permits(), 1);
    }
}
