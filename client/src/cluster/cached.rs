//! Calls through the client's cache of hot keys (`hot_cache.rs`), and the
//! task that asks every node which keys are hot.
//!
//! ```text
//! calls ─► lock: plan reads (Hit / Part / Send), take the epoch
//!       ─► pipeline (or call) of what is left to send
//!       ─► lock: stamp the writes, fill from the reads' answers ─► merge
//! poll task, every POLL_EVERY: HotSet(the businesses and rankings read) to every
//!       member, POLL_PATIENCE each ─► listed(keys), tick()
//! ```
//!
//! A cache lock is held only to plan or fill, never across an `.await`.

use super::{lock, Cluster};
use crate::error::ClientError;
use crate::hot_cache::{merge_part, HotCache, Plan};
use plaudit_proto::{Request, Response};
use std::sync::{Mutex, Weak};
use std::time::{Duration, Instant};

/// How often the nodes are asked which keys are hot.
pub(crate) const POLL_EVERY: Duration = Duration::from_secs(1);
/// How long one node may take to answer `HotSet`.
const POLL_PATIENCE: Duration = Duration::from_millis(500);

/// One answer, with its age when it came from the cache.
pub(crate) type Aged = Result<(Response, Option<Duration>), ClientError>;

/// How each call of a batch is answered.
enum Slot {
    /// By the sent request at this index.
    Sent(usize),
    Hit(Response, Duration),
    /// By the sent request at this index and what the cache had.
    Part(usize, Vec<Option<plaudit_proto::likes::EntityCounts>>, Duration),
}

/// What `plan` decided for a batch: what to send, and what is kept of it
/// to stamp or fill once answered.
struct Planned {
    send: Vec<Request>,
    /// A copy of each sent write and cacheable read (else `None`).
    kept: Vec<Option<Request>>,
    slots: Vec<Slot>,
    epoch: u64,
    at: Instant,
}

fn plan(cache: &Mutex<HotCache>, reqs: Vec<Request>, use_cache: bool) -> Planned {
    let at = Instant::now();
    let mut c = lock(cache);
    let mut p = Planned {
        send: Vec::with_capacity(reqs.len()),
        kept: Vec::with_capacity(reqs.len()),
        slots: Vec::with_capacity(reqs.len()),
        epoch: 0,
        at,
    };
    for req in reqs {
        let planned = if use_cache { c.plan(req, at) } else { Plan::Send(req) };
        let mut push = |req: Request| {
            let keep = matches!(
                req,
                Request::Like(_)
                    | Request::Score(_)
                    | Request::Counts(_)
                    | Request::Query(_)
                    | Request::Replica(_)
            );
            p.kept.push(keep.then(|| req.clone()));
            p.send.push(req);
            p.send.len() - 1
        };
        let slot = match planned {
            Plan::Send(req) => Slot::Sent(push(req)),
            Plan::Hit(r, age) => Slot::Hit(r, age),
            Plan::Part { send, have, age } => Slot::Part(push(send), have, age),
        };
        p.slots.push(slot);
    }
    // The writes of this batch stamp their keys when answered, which
    // rejects the answers of this batch's reads that are filled after.
    p.epoch = c.epoch();
    p
}

fn finish(
    cache: &Mutex<HotCache>,
    p: Planned,
    answers: Vec<Result<Response, ClientError>>,
) -> Vec<Aged> {
    let mut answers: Vec<Option<Result<Response, ClientError>>> =
        answers.into_iter().map(Some).collect();
    {
        let mut c = lock(cache);
        for (kept, answer) in p.kept.iter().zip(&answers) {
            let Some(req) = kept else { continue };
            let answer = match answer {
                Some(Ok(r)) => Some(r),
                _ => None,
            };
            c.wrote(req, answer);
            if let Some(r) = answer {
                c.filled(req, p.epoch, p.at, r);
            }
        }
    }
    let mut take =
        |i: usize| answers.get_mut(i).and_then(Option::take).unwrap_or(Err(ClientError::Closed));
    p.slots
        .into_iter()
        .map(|slot| match slot {
            Slot::Sent(i) => take(i).map(|r| (r, None)),
            Slot::Hit(r, age) => Ok((r, Some(age))),
            Slot::Part(i, have, age) => {
                let r = take(i)?;
                let merged = merge_part(have, r).ok_or_else(|| {
                    ClientError::Protocol("a counts answer is shorter than its request".into())
                })?;
                Ok((merged, Some(age)))
            }
        })
        .collect()
}

impl Cluster {
    /// `pipeline`, through the cache of hot keys when this client has one
    /// (reads served from it only when `use_cache`).
    pub(crate) async fn pipeline_cached(&self, reqs: Vec<Request>, use_cache: bool) -> Vec<Aged> {
        let Some(cache) = &self.hot else {
            return self.pipeline(reqs).await.into_iter().map(|a| a.map(|r| (r, None))).collect();
        };
        let mut p = plan(cache, reqs, use_cache);
        let send = std::mem::take(&mut p.send);
        let answers = if send.is_empty() { Vec::new() } else { self.pipeline(send).await };
        finish(cache, p, answers)
    }

    /// `call`, through the cache as `pipeline_cached`.
    pub(crate) async fn call_cached(&self, req: Request, use_cache: bool) -> Aged {
        let Some(cache) = &self.hot else { return self.call(req).await.map(|r| (r, None)) };
        let mut p = plan(cache, vec![req], use_cache);
        let mut answers = Vec::new();
        if let Some(req) = p.send.pop() {
            answers.push(self.call(req).await);
        }
        finish(cache, p, answers).pop().unwrap_or(Err(ClientError::Closed))
    }

    /// Asks every member which keys of the businesses and rankings this
    /// client reads are hot, and updates the cache's marks.
    async fn poll_hot(&self, cache: &Mutex<HotCache>) {
        let Some(scope) = lock(cache).scope() else { return };
        let addrs = lock(&self.view).addrs();
        let req = Request::HotSet(scope);
        let asks = addrs.iter().map(|addr| {
            let pool = self.pool(addr);
            let req = &req;
            async move {
                let ask = async { pool.get().await?.call(req).await };
                match tokio::time::timeout(POLL_PATIENCE, ask).await {
                    Ok(Ok(Response::HotSet(keys))) => keys,
                    // A node that does not answer, or an older one that
                    // does not know `HotSet`, names no key.
                    _ => Vec::new(),
                }
            }
        });
        let listed = futures::future::join_all(asks).await;
        let now = Instant::now();
        let mut c = lock(cache);
        c.listed(listed.into_iter().flatten(), now);
        c.tick(now);
    }
}

/// The poll task: every `POLL_EVERY` until the cluster is dropped.
pub(crate) async fn poller(cluster: Weak<Cluster>) {
    loop {
        tokio::time::sleep(POLL_EVERY).await;
        let Some(c) = cluster.upgrade() else { return };
        if let Some(cache) = &c.hot {
            c.poll_hot(cache).await;
        }
    }
}
