//! One call's way through the cluster, top to bottom: wrap it so it is safe
//! to repeat, route it, send it, read what the answer means, and either
//! return or go again, all before the call's deadline.
//!
//! ```text
//! call(req) ─ retry::once ─► route::target ─► View::pick (or the hinted node)
//!    ▲                                            │
//!    │                           pool(addr).get ─► answer_or_silence
//!    │                                            │
//!    └─ Step ◄── retry::outcome ◄─────────────────┘
//!        NotLeader: View::learn ─► the hinted node now │ back off │ refresh first
//!        node down: mark it down, wake the refresher ─► another node now │ back off
//!        Overloaded / Timeout: back off (twice at most)
//!        Moved (a board between shards): back off, as for an election
//!        anything else: returned as it is
//! ```
//!
//! The deadline bounds every await of the loop: an attempt in flight when
//! it passes makes the call `Timeout` (its outcome is unknown); a backoff
//! that would pass it ends the call with the last error at once.

use super::{lock, Cluster};
use crate::connection::Connection;
use crate::error::ClientError;
use crate::retry::{self, Attempts, Outcome, Step};
use crate::route::{Dest, Learned, Target};
use crate::{split, spread};
use plaudit_proto::error::LeaderHint;
use plaudit_proto::{ErrorCode, Request, Response};
use std::io;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;

/// A call silent this long makes the SDK ping the node on the same
/// connection...
pub(crate) const PROBE_AFTER: Duration = Duration::from_secs(1);
/// ...and a node that does not answer the ping within this is left as
/// stopped (a paused or wedged process keeps its sockets open).
pub(crate) const PROBE_PATIENCE: Duration = Duration::from_millis(500);

/// What one call has been through so far.
struct Call {
    deadline: Instant,
    attempts: Attempts,
    /// The error to return if the call gives up.
    last: Option<ClientError>,
    /// Whether some attempt may have been applied (a node's `Timeout`, or a
    /// connection lost after sending), so that a later refusal is not
    /// reported as if nothing happened (`retry::final_error`).
    maybe_applied: bool,
    /// The node a `NotLeader` hint named, for the next attempt only.
    hinted: Option<Dest>,
}

impl Cluster {
    /// Sends one request to the node that should serve it, following
    /// redirects, around dead nodes and through short overloads, until it
    /// has an answer or the timeout passes. A node's error reply comes back
    /// as `Err(ClientError::Server)`.
    pub(crate) async fn call(&self, req: Request) -> Result<Response, ClientError> {
        if matches!(req, Request::Counts(_)) && self.split_reads {
            // A read that spans leader nodes goes as one part per node, as
            // in a pipeline; one that does not is a call like any other.
            let (mut parts, plan) = {
                let view = lock(&self.view);
                split::plan(vec![req], view.shards(), &view.table().leaders, &view.entities)
            };
            if parts.len() > 1 {
                let answers = self.send_all(self.reads_to(parts)).await;
                return plan.merge(answers).pop().unwrap_or(Err(ClientError::Closed));
            }
            let Some(req) = parts.pop() else { return Err(ClientError::Closed) };
            let deadline = Instant::now() + self.timeout;
            let answer = self.call_until(self.read_to(req), deadline, false).await;
            // One part still needs the plan: it asks each entity once.
            return plan.merge(vec![answer]).pop().unwrap_or(Err(ClientError::Closed));
        }
        self.call_until(self.read_to(req), Instant::now() + self.timeout, false).await
    }

    /// `req`, as a read of any replica if this client spreads its reads
    /// (`ClientOptions::spread_reads`).
    fn read_to(&self, req: Request) -> Request {
        if self.spread_reads {
            spread::to_any_replica(req)
        } else {
            req
        }
    }

    /// `read_to` of each request.
    pub(super) fn reads_to(&self, reqs: Vec<Request>) -> Vec<Request> {
        if self.spread_reads {
            reqs.into_iter().map(spread::to_any_replica).collect()
        } else {
            reqs
        }
    }

    /// `call`, with the deadline given, and whether an earlier attempt
    /// (a pipeline's) may already have applied it.
    pub(crate) async fn call_until(
        &self,
        req: Request,
        deadline: Instant,
        maybe_applied: bool,
    ) -> Result<Response, ClientError> {
        let req = retry::once(req, retry::random_u64);
        if let Request::Score(e) = &req {
            let now = std::time::Instant::now();
            if lock(&self.view).shapes.should_ask(e.rank, now) {
                self.learn_shapes(vec![e.rank]);
            }
        }
        let mut call = Call {
            deadline,
            attempts: Attempts::default(),
            last: None,
            maybe_applied,
            hinted: None,
        };
        loop {
            let target = lock(&self.view).target(&req);
            let Some(dest) = call.hinted.take().or_else(|| self.pick(target)) else {
                break;
            };
            let (reply, sent) = match tokio::time::timeout_at(
                call.deadline,
                self.attempt(&dest, &req),
            )
            .await
            {
                Ok(r) => r,
                // In flight at the deadline: the outcome is unknown.
                Err(_) => {
                    tracing::debug!(op = req.op(), addr = %dest.addr, "no answer by the deadline");
                    return Err(ClientError::Timeout);
                }
            };
            let step = match retry::outcome(reply) {
                Outcome::Done(r) => {
                    if !matches!(r, Err(ClientError::Protocol(_))) {
                        lock(&self.view).mark_up(&dest.addr);
                    }
                    return retry::settle(r, call.maybe_applied && !self.raw_score_outcomes);
                }
                Outcome::NotLeader(hint, e) => {
                    tracing::debug!(op = req.op(), addr = %dest.addr, ?hint, "not the leader");
                    call.last = Some(e);
                    self.not_leader(&mut call, &dest, &req, hint).await
                }
                Outcome::Moving(e) => {
                    lock(&self.view).mark_up(&dest.addr);
                    call.last = Some(e);
                    call.attempts.waited()
                }
                Outcome::NodeDown(e) => {
                    tracing::debug!(op = req.op(), addr = %dest.addr, error = %e, "node down");
                    call.maybe_applied |= sent;
                    call.last = Some(e);
                    self.node_down(&mut call, &dest, target)
                }
                Outcome::Busy(e) => {
                    lock(&self.view).mark_up(&dest.addr);
                    if !retry::safe_to_repeat(&req) {
                        return Err(e);
                    }
                    call.maybe_applied |= e.code() == Some(ErrorCode::Timeout);
                    call.last = Some(e);
                    call.attempts.busy()
                }
            };
            if !call.pause(step).await {
                break;
            }
        }
        let error = retry::final_error(call.last, call.maybe_applied);
        tracing::debug!(op = req.op(), attempts = ?call.attempts, %error, "gave up");
        Err(error)
    }

    /// After `NotLeader`: learn the hint, then go to the node it names, wait
    /// for an election, or fetch a table that knows the named node.
    async fn not_leader(
        &self,
        call: &mut Call,
        dest: &Dest,
        req: &Request,
        hint: Option<LeaderHint>,
    ) -> Step {
        if matches!(hint, Some(LeaderHint { leader: None, .. })) {
            // This node knows no leader for the group: try the others first.
            lock(&self.view).mark_doubtful(&dest.addr, Instant::now().into_std());
        }
        let learned = match hint {
            Some(h) => {
                let mut view = lock(&self.view);
                view.mark_up(&dest.addr);
                // A board query redirected to another shard than its hash
                // shard: the board moved there (`placed.rs`).
                let shards = view.shards();
                view.placed.learn(req, h.shard, shards);
                let learned = view.learn(&h, Instant::now().into_std());
                if view.is_stale() {
                    self.wake.notify_one();
                }
                learned
            }
            // No hint at all: ask for a fresh table while waiting.
            None => {
                lock(&self.view).mark_doubtful(&dest.addr, Instant::now().into_std());
                self.wake.notify_one();
                Learned::Wait
            }
        };
        match learned {
            Learned::Retry(d) => {
                call.hinted = Some(d);
                call.attempts.redirected()
            }
            Learned::Wait => call.attempts.waited(),
            Learned::Refresh => {
                let _ = tokio::time::timeout_at(call.deadline, self.refresh()).await;
                call.attempts.redirected()
            }
        }
    }

    /// After a connection failure: skip the node for a while, have the
    /// table refreshed, and go elsewhere at once if any other node is up.
    fn node_down(&self, call: &mut Call, dest: &Dest, target: Target) -> Step {
        let now = Instant::now().into_std();
        let elsewhere = {
            let mut view = lock(&self.view);
            view.mark_down(&dest.addr, now);
            view.has_other(target, &dest.addr, now)
        };
        self.wake.notify_one();
        call.attempts.node_down(elsewhere)
    }

    pub(super) fn pick(&self, target: Target) -> Option<Dest> {
        let spin = self.spin.fetch_add(1, Ordering::Relaxed);
        lock(&self.view).pick(target, Instant::now().into_std(), spin)
    }

    /// One try at one node, and whether the request was sent (a failed
    /// dial sends nothing).
    async fn attempt(&self, dest: &Dest, req: &Request) -> (Result<Response, ClientError>, bool) {
        match self.pool(&dest.addr).get().await {
            Ok(conn) => (answer_or_silence(&conn, req, &dest.addr).await, true),
            // The node refused the connection with an answer (`Overloaded`
            // at its connection limit): sorted like any answer of the node,
            // so a busy node is backed off from, not marked down.
            Err(ClientError::Server(e)) => (Ok(Response::Error(e)), false),
            Err(e) => (Err(e), false),
        }
    }
}

impl Call {
    /// Waits as `step` says. False when the call should stop: it gave up,
    /// or the wait would end past the deadline.
    async fn pause(&self, step: Step) -> bool {
        match step {
            Step::Now => {}
            Step::After(pause) => {
                let until = Instant::now() + retry::jittered(pause);
                if until >= self.deadline {
                    return false;
                }
                tokio::time::sleep_until(until).await;
            }
            Step::GiveUp => return false,
        }
        Instant::now() < self.deadline
    }
}

/// Waits for `req`'s answer; while it is silent, checks every `PROBE_AFTER`
/// that the node still answers a ping on the same connection. A slow node
/// answers the ping and is waited for; a stopped one is a connection failure.
async fn answer_or_silence(
    conn: &Connection,
    req: &Request,
    addr: &str,
) -> Result<Response, ClientError> {
    probing(conn, conn.call(req), addr).await
}

/// Waits for `call` on `conn`; while it is silent, checks every
/// `PROBE_AFTER` that the node still answers a ping on the same connection.
pub(super) async fn probing<T>(
    conn: &Connection,
    call: impl std::future::Future<Output = Result<T, ClientError>>,
    addr: &str,
) -> Result<T, ClientError> {
    tokio::pin!(call);
    loop {
        tokio::select! {
            r = &mut call => return r,
            _ = tokio::time::sleep(PROBE_AFTER) => {}
        }
        let probe = tokio::time::timeout(PROBE_PATIENCE, conn.call(&Request::Ping));
        // Biased: when both are ready (a connection that died fails the
        // call and the ping at once), the call's own answer wins.
        tokio::select! {
            biased;
            r = &mut call => return r,
            p = probe => {
                if !matches!(p, Ok(Ok(_))) {
                    return Err(ClientError::Io(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("{addr} stopped answering (no reply to a ping within {PROBE_PATIENCE:?})"),
                    )));
                }
            }
        }
    }
}
