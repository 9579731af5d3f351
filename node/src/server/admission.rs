//! Who gets one of the node's `max_connections` slots, so that no kind of
//! client can lock another out.
//!
//! On a node with an admin token the slots are split three ways:
//!
//! ```text
//! max_connections = unauthenticated (max_unauthenticated_connections, and
//!                                    max_unauthenticated_per_address per source)
//!                 + authenticated  (business tokens and the admin)
//!                 + admin reserve  (admin_reserved_connections: the admin only)
//!
//! accept ──> an unauthenticated seat: free, or that of the unauthenticated
//!            connection open longest (it must authenticate; a ping does not
//!            keep it), or refused (per address: refused, never evicting)
//! Auth ok ─> an authenticated seat (the admin: also the reserve), free or that
//!            of the authenticated connection idle longest (never an admin's);
//!            else the Auth is answered Overloaded; the unauthenticated seat
//!            is given back either way
//! ```
//!
//! Why: before, every connection competed for one pool, and a connection
//! that pinged more than once a second was never idle enough to be closed
//! for a newcomer, so a few thousand unauthenticated connections (each a
//! ping a second) locked out every client and the admin until they chose
//! to leave. Now unauthenticated connections can only take their own
//! share, from which the oldest goes first; authenticated clients can fill
//! theirs, and the admin always finds the reserve.
//!
//! An open node (no admin token) grants everything from the start: one
//! pool of `max_connections`, idle connections evicted as before.

use super::table::{Entry, Table, MIN_IDLE_TO_EVICT};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

/// How long a newcomer waits for the connection it evicted to close (it
/// closes at once; this only bounds a wait that cannot hang).
pub const EVICT_WAIT: Duration = Duration::from_secs(1);

/// How `max_connections` is shared on a node with an admin token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shares {
    pub total: usize,
    pub unauthenticated: usize,
    pub per_address: usize,
    pub admin_reserved: usize,
}

impl Shares {
    /// The authenticated share (business tokens and the admin).
    pub fn authenticated(&self) -> usize {
        self.total.saturating_sub(self.unauthenticated + self.admin_reserved)
    }
}

/// Which share a seat is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Unauthenticated,
    /// A business token, or any connection of an open node.
    Client,
    Admin,
}

/// Why a newcomer got no seat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The connection cap, with nothing that may be evicted.
    Full,
    /// Too many unauthenticated connections from its address.
    PerAddress,
}

impl Refusal {
    pub fn message(self) -> &'static str {
        match self {
            Refusal::Full => "the node is at its connection limit",
            Refusal::PerAddress => {
                "too many unauthenticated connections from this address; authenticate the open ones"
            }
        }
    }
}

/// A slot a connection holds, in its share's table: when it drops, the
/// connection leaves the table and its slot goes to the newcomer that
/// evicted it, if one did.
pub struct Seat {
    pub kind: Kind,
    pub entry: Arc<Entry>,
    id: u64,
    table: Arc<Table>,
    permit: Option<OwnedSemaphorePermit>,
    _address: Option<AddressHold>,
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.table.remove(self.id);
        if let Some(permit) = self.permit.take() {
            self.entry.pass_on(permit);
        }
    }
}

/// One unauthenticated connection counted against its source address.
struct AddressHold {
    addr: IpAddr,
    counts: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Drop for AddressHold {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = counts.get_mut(&self.addr) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.addr);
            }
        }
    }
}

/// A seat now, or once an evicted connection has closed.
pub enum Offer {
    Now(Seat),
    After(Pending),
}

/// A seat that waits for an evicted connection's slot.
pub struct Pending {
    slot: oneshot::Receiver<OwnedSemaphorePermit>,
    kind: Kind,
    table: Arc<Table>,
    address: Option<AddressHold>,
    protected: bool,
}

impl Pending {
    /// The seat, or `None` if the slot did not come within `EVICT_WAIT`.
    pub async fn seat(self) -> Option<Seat> {
        let permit = tokio::time::timeout(EVICT_WAIT, self.slot).await.ok()?.ok()?;
        Some(seat(self.kind, &self.table, permit, self.address, self.protected))
    }
}

fn seat(
    kind: Kind,
    table: &Arc<Table>,
    permit: OwnedSemaphorePermit,
    address: Option<AddressHold>,
    protected: bool,
) -> Seat {
    let (id, entry) = table.insert();
    if protected {
        entry.protect();
    }
    Seat { kind, entry, id, table: table.clone(), permit: Some(permit), _address: address }
}

pub struct Admission {
    /// `None`: an open node, one pool.
    shares: Option<Shares>,
    /// The sizes of the unauthenticated, client and admin pools.
    sizes: (usize, usize, usize),
    unauthenticated: Arc<Semaphore>,
    clients: Arc<Semaphore>,
    admin: Arc<Semaphore>,
    /// Unauthenticated connections: no minimum idle time, and they never
    /// count as active, so the one open longest goes first.
    waiting_room: Arc<Table>,
    /// Authenticated connections (every connection, on an open node).
    table: Arc<Table>,
    per_address: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Admission {
    /// An open node: one pool of `total`.
    pub fn open(total: usize) -> Admission {
        Admission {
            shares: None,
            sizes: (0, total, 0),
            unauthenticated: Arc::new(Semaphore::new(0)),
            clients: Arc::new(Semaphore::new(total)),
            admin: Arc::new(Semaphore::new(0)),
            waiting_room: Arc::new(Table::with_min_idle(Duration::ZERO)),
            table: Arc::new(Table::with_min_idle(MIN_IDLE_TO_EVICT)),
            per_address: Arc::default(),
        }
    }

    /// A node with an admin token: `shares` (checked by the config).
    pub fn secured(shares: Shares) -> Admission {
        Admission {
            shares: Some(shares),
            sizes: (shares.unauthenticated, shares.authenticated(), shares.admin_reserved),
            unauthenticated: Arc::new(Semaphore::new(shares.unauthenticated)),
            clients: Arc::new(Semaphore::new(shares.authenticated())),
            admin: Arc::new(Semaphore::new(shares.admin_reserved)),
            ..Admission::open(0)
        }
    }

    /// Waits until every connection has given its slot back (at shutdown).
    pub async fn drained(&self) {
        let (u, c, a) = self.sizes;
        let all = [(&self.unauthenticated, u), (&self.clients, c), (&self.admin, a)];
        for (pool, n) in all {
            if let Ok(held) = pool.acquire_many(n as u32).await {
                // Held until every share is drained: no newcomer can sneak in.
                held.forget();
            }
        }
    }

    /// A seat for a connection just accepted from `addr`.
    pub fn newcomer(&self, addr: IpAddr) -> Result<Offer, Refusal> {
        let Some(shares) = self.shares else {
            return self.take(Kind::Client, &self.clients, &self.table, None);
        };
        let hold = {
            let mut counts = self.per_address.lock().unwrap_or_else(|e| e.into_inner());
            let n = counts.entry(addr).or_insert(0);
            if *n >= shares.per_address {
                return Err(Refusal::PerAddress);
            }
            *n += 1;
            AddressHold { addr, counts: self.per_address.clone() }
        };
        self.take(Kind::Unauthenticated, &self.unauthenticated, &self.waiting_room, Some(hold))
    }

    /// A seat of `kind` for a connection that has just authenticated (an
    /// open node's connections never change seats).
    pub fn authenticated(&self, kind: Kind) -> Result<Offer, Refusal> {
        match kind {
            Kind::Unauthenticated => Err(Refusal::Full),
            Kind::Client => self.take(Kind::Client, &self.clients, &self.table, None),
            Kind::Admin => {
                if let Ok(p) = self.clients.clone().try_acquire_owned() {
                    return Ok(Offer::Now(seat(Kind::Admin, &self.table, p, None, true)));
                }
                if let Ok(p) = self.admin.clone().try_acquire_owned() {
                    return Ok(Offer::Now(seat(Kind::Admin, &self.table, p, None, true)));
                }
                self.evict_for(Kind::Admin, &self.table, None, true)
            }
        }
    }

    /// Whether connections must move seats when they authenticate.
    pub fn is_secured(&self) -> bool {
        self.shares.is_some()
    }

    fn take(
        &self,
        kind: Kind,
        pool: &Arc<Semaphore>,
        table: &Arc<Table>,
        address: Option<AddressHold>,
    ) -> Result<Offer, Refusal> {
        match pool.clone().try_acquire_owned() {
            Ok(p) => Ok(Offer::Now(seat(kind, table, p, address, false))),
            Err(_) => self.evict_for(kind, table, address, false),
        }
    }

    /// Evicts a connection of `table` (never a protected one: an admin's)
    /// and offers its slot once it has closed.
    fn evict_for(
        &self,
        kind: Kind,
        table: &Arc<Table>,
        address: Option<AddressHold>,
        protected: bool,
    ) -> Result<Offer, Refusal> {
        let slot = table.evict_one().ok_or(Refusal::Full)?;
        Ok(Offer::After(Pending { slot, kind, table: table.clone(), address, protected }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shares() -> Shares {
        Shares { total: 10, unauthenticated: 4, per_address: 3, admin_reserved: 2 }
    }

    fn now(offer: Result<Offer, Refusal>) -> Seat {
        match offer {
            Ok(Offer::Now(s)) => s,
            Ok(Offer::After(_)) => panic!("a seat after an eviction"),
            Err(r) => panic!("refused: {r:?}"),
        }
    }

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));

    #[test]
    fn one_address_gets_its_share_and_is_refused_past_it_without_evicting() {
        let adm = Admission::secured(shares());
        let seats: Vec<Seat> = (0..3).map(|_| now(adm.newcomer(A))).collect();
        assert!(matches!(adm.newcomer(A), Err(Refusal::PerAddress)));
        assert!(seats.iter().all(|s| !s.entry.is_doomed()), "nobody was evicted");
        // Another address still gets in; one seat of A leaving lets A in.
        let _b = now(adm.newcomer(B));
        drop(seats);
        let _a = now(adm.newcomer(A));
    }

    #[tokio::test]
    async fn past_the_unauthenticated_share_the_one_open_longest_goes() {
        let adm = Admission::secured(Shares { per_address: 10, ..shares() });
        let first = now(adm.newcomer(A));
        let rest: Vec<Seat> = (0..3).map(|_| now(adm.newcomer(B))).collect();
        let offer = adm.newcomer(B);
        let Ok(Offer::After(pending)) = offer else { panic!("an eviction") };
        assert!(first.entry.is_doomed(), "the oldest");
        assert!(rest.iter().all(|s| !s.entry.is_doomed()));
        drop(first);
        let seat = pending.seat().await.expect("its slot");
        assert_eq!(seat.kind, Kind::Unauthenticated);
    }

    #[tokio::test]
    async fn authenticated_clients_fill_their_share_and_the_admin_still_gets_in() {
        let adm = Admission::secured(shares());
        // 10 - 4 - 2 = 4 client seats.
        let clients: Vec<Seat> = (0..4).map(|_| now(adm.authenticated(Kind::Client))).collect();
        // All busy (not idle): a fifth client is refused.
        for c in &clients {
            c.entry.set_busy(true);
        }
        assert!(matches!(adm.authenticated(Kind::Client), Err(Refusal::Full)));
        let admins: Vec<Seat> = (0..2).map(|_| now(adm.authenticated(Kind::Admin))).collect();
        assert!(admins.iter().all(|a| a.kind == Kind::Admin));
        // Unauthenticated newcomers have their own share, untouched.
        let _u = now(adm.newcomer(A));
        // With the reserve used up, an admin evicts an idle client, never
        // an admin.
        for a in &admins {
            a.entry.set_busy(false);
        }
        clients[0].entry.set_busy(false);
        tokio::time::sleep(MIN_IDLE_TO_EVICT + Duration::from_millis(100)).await;
        let Ok(Offer::After(_)) = adm.authenticated(Kind::Admin) else { panic!("an eviction") };
        assert!(clients[0].entry.is_doomed());
        assert!(admins.iter().all(|a| !a.entry.is_doomed()));
    }

    #[test]
    fn an_open_node_has_one_pool() {
        let adm = Admission::open(3);
        let seats: Vec<Seat> = (0..3).map(|_| now(adm.newcomer(A))).collect();
        assert!(seats.iter().all(|s| s.kind == Kind::Client));
        for s in &seats {
            s.entry.set_busy(true);
        }
        assert!(matches!(adm.newcomer(A), Err(Refusal::Full)));
    }
}
