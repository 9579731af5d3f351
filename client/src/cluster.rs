//! The SDK's side of a cluster: a pool of connections per node, the cached
//! view of who leads what, and the background refresher that keeps that
//! view current. `call.rs` takes one call through it.
//!
//! ```text
//! connect(seeds) ─► first seed that answers: its pool (dialled) + `Routing` ─► View::accept
//!
//! pool(addr)     ─► one `Pool` per node address, created lazily (dialled on first use),
//!                   dropped when a newer table no longer has the node
//!
//! refresher task: every REFRESH_EVERY, or when a call wakes it ─► refresh():
//!     ask `Routing` of live members, then seeds, then failed members ─► View::accept
//! ```
//!
//! Locks: the view and the pool map sit behind std mutexes, held only to
//! read or change them, never across an `.await`. A refresh holds a tokio
//! mutex across its requests, so that however many calls notice a stale
//! view at once, one refresh answers them all.
//!
//! The refresher holds only a `Weak` reference: dropping the last `Client`
//! drops the cluster, which stops the refresher and closes every connection.

mod cached;
mod call;
mod pipeline;

use crate::api::{unexpected, ClientOptions};
use crate::error::ClientError;
use crate::hot_cache::HotCache;
use crate::pool::{Dialer, Pool};
use crate::retry;
use crate::route::View;
use plaudit_proto::auth::TokenSecret;
use plaudit_proto::cluster::RoutingTable;
use plaudit_proto::entity_routes::{RoutesPage, MAX_ROUTES_PAGE};
use plaudit_proto::placement::EntityKey;
use plaudit_proto::rankings::RankId;
use plaudit_proto::{ErrorCode, Request, Response, ShardId, WireError};
use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The routing table is fetched again at least this often.
pub(crate) const REFRESH_EVERY: Duration = Duration::from_secs(3);
/// However often calls ask, the refresher refreshes at most once per gap.
pub(crate) const MIN_REFRESH_GAP: Duration = Duration::from_millis(100);
/// How long one node may take to answer `Routing` before the next is asked.
pub(crate) const FETCH_PATIENCE: Duration = Duration::from_secs(1);
/// Dials (connect, hello and auth) take at most this long, or the call's timeout
/// if shorter: a dead host must not eat a whole call's budget.
pub(crate) const MAX_DIAL: Duration = Duration::from_secs(2);
/// Rounds over the seeds when one answered `Overloaded` (at its connection
/// limit), backing off between them (20, 40, 80... ms, jittered), within
/// the connect's timeout.
const CONNECT_BUSY_ROUNDS: u32 = 8;

/// Splits `a:1, b:2` into seed addresses, dropping blanks and repeats.
pub(crate) fn seeds<S: AsRef<str>>(list: &[S]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for a in list.iter().flat_map(|s| s.as_ref().split(',')).map(str::trim) {
        if !a.is_empty() && !out.iter().any(|o| o == a) {
            out.push(a.to_string());
        }
    }
    out
}

pub(crate) struct Cluster {
    /// The seeds as given, comma separated (`Client::addr`).
    label: String,
    seeds: Vec<String>,
    pool_size: usize,
    timeout: Duration,
    /// `ClientOptions::split_reads`.
    split_reads: bool,
    /// `ClientOptions::spread_reads`.
    spread_reads: bool,
    /// `ClientOptions::raw_score_outcomes`.
    pub(crate) raw_score_outcomes: bool,
    dialer: Dialer,
    view: Mutex<View>,
    pools: Mutex<HashMap<String, Arc<Pool>>>,
    /// Single flight for refreshes; holds when the last good table was asked for.
    refreshed: tokio::sync::Mutex<Option<Instant>>,
    /// Wakes the refresher early.
    wake: Arc<Notify>,
    /// Spreads "any node" calls over the members.
    spin: AtomicUsize,
    refresher: Mutex<Option<JoinHandle<()>>>,
    /// The cache of hot keys (`ClientOptions::cache_ttl` above zero), and
    /// the task that polls the nodes for them.
    hot: Option<Mutex<HotCache>>,
    poller: Mutex<Option<JoinHandle<()>>>,
    /// This cluster, for the tasks it starts (they must not keep it alive).
    me: Weak<Cluster>,
}

impl Cluster {
    /// Dials the seeds in order until one gives a routing table (or, an
    /// older node, answers without one), then starts the refresher. A seed
    /// that refuses the token (or wants one) ends the search: every node
    /// shares one token registry, so the next would say the same. When no
    /// seed answered and one was at its connection limit, the seeds are
    /// tried again, backing off, for up to `CONNECT_BUSY_ROUNDS` rounds.
    pub(crate) async fn connect(
        seeds: Vec<String>,
        opts: ClientOptions,
        token: Option<TokenSecret>,
    ) -> Result<Arc<Cluster>, ClientError> {
        let ClientOptions {
            pool_size,
            timeout,
            tls,
            split_reads,
            cache_ttl,
            spread_hot_reads,
            spread_reads,
            raw_score_outcomes,
            ..
        } = opts;
        if seeds.is_empty() {
            let e = io::Error::new(io::ErrorKind::InvalidInput, "no node address given");
            return Err(ClientError::Io(e));
        }
        let cluster = Arc::new_cyclic(|me| Cluster {
            me: me.clone(),
            label: seeds.join(","),
            seeds: seeds.clone(),
            pool_size,
            timeout,
            split_reads,
            spread_reads,
            raw_score_outcomes,
            dialer: Dialer { timeout: timeout.min(MAX_DIAL), token, tls },
            view: Mutex::new(View::new(seeds.clone())),
            pools: Mutex::new(HashMap::new()),
            refreshed: tokio::sync::Mutex::new(None),
            wake: Arc::new(Notify::new()),
            spin: AtomicUsize::new(0),
            refresher: Mutex::new(None),
            hot: (!cache_ttl.is_zero())
                .then(|| Mutex::new(HotCache::new(cache_ttl).spreading(spread_hot_reads))),
            poller: Mutex::new(None),
        });
        let deadline = Instant::now() + timeout;
        let mut round = 0;
        loop {
            let mut failed = Vec::new();
            for seed in &seeds {
                // The first round's dials have their own timeout; a later
                // round's must also end by the connect's deadline.
                let tried = if round == 0 {
                    cluster.bootstrap(seed).await
                } else {
                    tokio::time::timeout_at(deadline, cluster.bootstrap(seed)).await.unwrap_or_else(
                        |_| {
                            let why =
                                format!("cannot connect to {seed}: no seat within {timeout:?}");
                            Err(ClientError::Io(io::Error::new(io::ErrorKind::TimedOut, why)))
                        },
                    )
                };
                match tried {
                    Ok(()) => {
                        let task =
                            tokio::spawn(refresher(Arc::downgrade(&cluster), cluster.wake.clone()));
                        *lock(&cluster.refresher) = Some(task);
                        if cluster.hot.is_some() {
                            let task = tokio::spawn(cached::poller(Arc::downgrade(&cluster)));
                            *lock(&cluster.poller) = Some(task);
                        }
                        return Ok(cluster);
                    }
                    Err(e) if e.code() == Some(ErrorCode::Unauthorized) => return Err(e),
                    Err(e) => {
                        tracing::debug!(seed, error = %e, "seed did not answer");
                        failed.push((seed.clone(), e));
                    }
                }
            }
            // A seed at its connection limit frees seats as its clients come
            // and go (the unauthenticated ones churn under a flood), so a
            // client that waits a little gets one; an unreachable seed does
            // not come back within a connect.
            let busy = failed.iter().any(|(_, e)| e.code() == Some(ErrorCode::Overloaded));
            let pause = retry::jittered(retry::backoff(round));
            round += 1;
            if !busy || round >= CONNECT_BUSY_ROUNDS || Instant::now() + pause >= deadline {
                return Err(none_answered(failed));
            }
            tokio::time::sleep(pause).await;
        }
    }

    /// Opens the seed's pool (every connection up front, so a bad address
    /// fails here) and takes its routing table.
    async fn bootstrap(&self, seed: &str) -> Result<(), ClientError> {
        let pool = Arc::new(Pool::open(seed, self.pool_size, &self.dialer).await?);
        lock(&self.pools).insert(seed.to_string(), pool.clone());
        let asked = Instant::now();
        match self.fetch(&pool).await {
            Ok(table) => {
                self.adopt(table);
                self.refresh_entity_routes(&pool).await;
                *self.refreshed.lock().await = Some(asked);
                Ok(())
            }
            // A node that wants a token before it tells its table (we have
            // none, or it was revoked since `Auth`): every call would be
            // refused too.
            Err(ClientError::Server(e)) if e.code == ErrorCode::Unauthorized => {
                lock(&self.pools).remove(seed);
                if self.dialer.token.is_some() {
                    return Err(ClientError::Server(e));
                }
                let msg = format!("the node wants a token: {}", e.message);
                Err(ClientError::Server(WireError::unauthorized(msg)))
            }
            // No table from a node that answers: an older single node, which
            // serves everything itself. Calls go to the seeds.
            Err(ClientError::Server(e)) => {
                tracing::debug!(seed, error = %e, "no routing table; calls go to the seeds");
                Ok(())
            }
            Err(e) => {
                lock(&self.pools).remove(seed);
                Err(e)
            }
        }
    }

    /// The seeds as given, comma separated.
    pub(crate) fn label(&self) -> &str {
        &self.label
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The cache's TTL, if this client has a cache.
    pub(crate) fn cache_ttl(&self) -> Option<Duration> {
        self.hot.as_ref().map(|c| lock(c).ttl())
    }

    pub(crate) fn table(&self) -> RoutingTable {
        lock(&self.view).table().clone()
    }

    /// The pool for `addr`, created (without dialling) on first use.
    fn pool(&self, addr: &str) -> Arc<Pool> {
        lock(&self.pools)
            .entry(addr.to_string())
            .or_insert_with(|| Arc::new(Pool::lazy(addr, self.pool_size, &self.dialer)))
            .clone()
    }

    /// Takes a fetched table unless its map is older than ours, and drops
    /// the pools of nodes no longer in it. Returns whether it was taken.
    fn adopt(&self, table: RoutingTable) -> bool {
        let keep = {
            let mut view = lock(&self.view);
            if !view.accept(table) {
                return false;
            }
            view.addrs()
        };
        lock(&self.pools).retain(|addr, _| keep.contains(addr));
        true
    }

    /// Asks for `Routing`, giving the node `FETCH_PATIENCE` to answer.
    async fn fetch(&self, pool: &Pool) -> Result<RoutingTable, ClientError> {
        let ask = async {
            let conn = pool.get().await?;
            conn.call(&Request::Routing).await
        };
        match tokio::time::timeout(FETCH_PATIENCE, ask).await {
            Ok(Ok(Response::Routing(t))) => Ok(*t),
            Ok(Ok(Response::Error(e))) => Err(ClientError::Server(e)),
            Ok(Ok(other)) => Err(unexpected("routing", &other)),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(ClientError::Io(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no routing table from {} within {FETCH_PATIENCE:?}", pool.addr()),
            ))),
        }
    }

    /// Asks the node that gave the table where moved entities live, page
    /// by page, unless the version this client holds is still current. A
    /// node that cannot say (a timeout) leaves what was known: a placement
    /// not known costs only a forward on the node.
    async fn refresh_entity_routes(&self, pool: &Pool) {
        let known = lock(&self.view).entities.version();
        match tokio::time::timeout(FETCH_PATIENCE, fetch_entity_routes(pool, known)).await {
            Ok(Ok(Some((placed, version)))) => lock(&self.view).entities.accept(placed, version),
            Ok(Ok(None)) => {}
            other => tracing::debug!(addr = pool.addr(), ?other, "no entity routes"),
        }
    }

    /// Fetches a fresh routing table from the first node that gives one.
    /// Calls that ask while a refresh runs share its result.
    pub(crate) async fn refresh(&self) -> Result<(), ClientError> {
        let asked = Instant::now();
        let mut refreshed = self.refreshed.lock().await;
        if refreshed.is_some_and(|at| at >= asked) {
            return Ok(());
        }
        let order = {
            let spin = self.spin.fetch_add(1, Ordering::Relaxed);
            lock(&self.view).refresh_order(Instant::now().into_std(), spin)
        };
        let mut last = None;
        for addr in order {
            let started = Instant::now();
            match self.fetch(&self.pool(&addr)).await {
                Ok(table) => {
                    lock(&self.view).mark_up(&addr);
                    let epoch = table.map.epoch;
                    if self.adopt(table) {
                        tracing::debug!(addr, epoch, "routing table refreshed");
                        self.refresh_entity_routes(&self.pool(&addr)).await;
                        *refreshed = Some(started);
                        return Ok(());
                    }
                    // A node behind on the map: ask the next.
                    tracing::debug!(addr, epoch, "refused an older routing table");
                }
                Err(e) => {
                    if e.is_connection() {
                        lock(&self.view).mark_down(&addr, Instant::now().into_std());
                    }
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or(ClientError::Closed))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for task in [&mut self.refresher, &mut self.poller] {
            if let Some(task) = task.get_mut().unwrap_or_else(|p| p.into_inner()).take() {
                task.abort();
            }
        }
    }
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let view = lock(&self.view);
        f.debug_struct("Cluster")
            .field("seeds", &self.seeds)
            .field("epoch", &view.table().map.epoch)
            .field("nodes", &view.addrs())
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// The background refresher: refreshes every `REFRESH_EVERY`, or sooner
/// when a call wakes it, at most once per `MIN_REFRESH_GAP`; stops when the
/// cluster is dropped.
impl Cluster {
    /// Asks, in the background, for the definitions of these rankings, to
    /// route their scoring events by board (`rank_shapes.rs`); their events
    /// go to any node meanwhile. Each was marked asked by `should_ask`.
    pub(crate) fn learn_shapes(&self, ranks: Vec<RankId>) {
        for rank in ranks {
            let me = self.me.clone();
            tokio::spawn(async move {
                let Some(cluster) = me.upgrade() else { return };
                let def = match cluster.call(Request::GetRank(rank)).await {
                    Ok(Response::Rank(d)) => Some(d),
                    Ok(_) | Err(_) => None,
                };
                let now = std::time::Instant::now();
                lock(&cluster.view).shapes.learned(rank, def.as_deref(), now);
            });
        }
    }
}

/// Pages of routes one refresh reads at most (a million moved entities): past
/// them the rest are not learned, and their reads are forwarded by the node
/// they reach.
const MAX_ROUTE_PAGES: usize = 32;

/// Where moved entities live, from the node behind `pool`: `None` if the
/// version `known` is still current, else every route and its version (no
/// version from a node older than `EntityRoutesPage`, asked the one-reply
/// `EntityRoutes` instead).
async fn fetch_entity_routes(
    pool: &Pool,
    known: Option<u64>,
) -> Result<Option<(Vec<(EntityKey, ShardId)>, Option<u64>)>, ClientError> {
    let conn = pool.get().await?;
    let mut req = RoutesPage { known, after: None, limit: MAX_ROUTES_PAGE };
    let mut routes = Vec::new();
    for _ in 0..MAX_ROUTE_PAGES {
        match conn.call(&Request::EntityRoutesPage(req.clone())).await? {
            Response::EntityRoutesPage(page) if page.unchanged => return Ok(None),
            Response::EntityRoutesPage(page) => {
                routes.extend(page.routes);
                match page.next {
                    Some(after) => req = RoutesPage { known: None, after: Some(after), ..req },
                    None => return Ok(Some((routes, Some(page.version)))),
                }
            }
            Response::Error(e) if e.code == ErrorCode::BadRequest && req.after.is_none() => {
                // A node from before pages: its one reply (the first 32,768).
                return match conn.call(&Request::EntityRoutes).await? {
                    Response::EntityRoutes(all) => Ok(Some((all, None))),
                    other => Err(unexpected("entity_routes", &other)),
                };
            }
            other => return Err(unexpected("entity_routes_page", &other)),
        }
    }
    // More pages than a refresh reads: what was read, and no version, so
    // that the next refresh reads them again rather than hear "unchanged".
    Ok(Some((routes, None)))
}

async fn refresher(cluster: Weak<Cluster>, wake: Arc<Notify>) {
    loop {
        let _ = tokio::time::timeout(REFRESH_EVERY, wake.notified()).await;
        let Some(c) = cluster.upgrade() else { return };
        if let Err(e) = c.refresh().await {
            tracing::debug!(error = %e, "routing table refresh failed");
        }
        drop(c);
        tokio::time::sleep(MIN_REFRESH_GAP).await;
    }
}

/// The error when no seed answered: the seed's own for one seed, else one
/// naming them all.
pub(crate) fn none_answered(mut failed: Vec<(String, ClientError)>) -> ClientError {
    if failed.len() == 1 {
        return failed.remove(0).1;
    }
    let kind = match failed.last() {
        Some((_, ClientError::Io(e))) => e.kind(),
        _ => io::ErrorKind::NotConnected,
    };
    // Dial errors already name their address; drop `ClientError`'s "io: ".
    let each: Vec<String> = failed
        .iter()
        .map(|(_, e)| match e {
            ClientError::Io(io) => io.to_string(),
            other => other.to_string(),
        })
        .collect();
    let all: Vec<&str> = failed.iter().map(|(s, _)| s.as_str()).collect();
    ClientError::Io(io::Error::new(
        kind,
        format!("cannot connect to any of {}: {}", all.join(", "), each.join("; ")),
    ))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section is a map or view update that cannot panic
    // midway, so a poisoned lock still holds consistent state.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_lists_split_on_commas_and_drop_blanks_and_repeats() {
        assert_eq!(seeds(&["a:1"]), vec!["a:1"]);
        assert_eq!(seeds(&["a:1, b:2,,a:1 ", "c:3"]), vec!["a:1", "b:2", "c:3"]);
        assert!(seeds(&[" , "]).is_empty());
    }

    #[test]
    fn one_dead_seed_keeps_its_error_and_several_are_named_together() {
        let refused = |addr: &str| {
            ClientError::Io(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                format!("cannot connect to {addr}: refused"),
            ))
        };
        let one = none_answered(vec![("a:1".into(), refused("a:1"))]);
        assert_eq!(one.to_string(), "io: cannot connect to a:1: refused");
        let two =
            none_answered(vec![("a:1".into(), refused("a:1")), ("b:2".into(), refused("b:2"))]);
        let msg = two.to_string();
        assert_eq!(
            msg,
            "io: cannot connect to any of a:1, b:2: \
             cannot connect to a:1: refused; cannot connect to b:2: refused"
        );
        assert!(two.is_connection());
    }
}
