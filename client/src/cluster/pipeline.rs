//! Many calls sent together: each node's share of them in one write on one
//! connection, with one wake-up when that node's replies are all in, and
//! any call whose answer is not final (a redirect, a lost connection, an
//! overload) taken on alone by `call`'s retry loop.
//!
//! ```text
//! pipeline(reqs) ─ retry::once each ─► route::target ─► View::pick ─► grouped by node
//!     each node's group, CHUNK at a time: pool(addr).get ─► Connection::send_many (one write)
//!     each reply ─► retry::outcome ─┬─ Done: the answer
//!                                   └─ otherwise: call_until(req, same deadline, maybe applied?)
//! ```
//!
//! Every call keeps the guarantees of `call`: it is wrapped to be safe to
//! repeat, routed to its shard's leader, bounded by one deadline for the
//! whole pipeline (a call of a batch unanswered at the deadline answers
//! `Timeout`: its outcome is unknown; the batch's answered calls keep their
//! answers), watched for
//! a silent node with pings, and a retry that follows an attempt that may
//! have applied (sent, then the connection failed; or the node's
//! `Timeout`) is not reported as if nothing happened.

use super::call::probing;
use super::{lock, Cluster};
use crate::error::ClientError;
use crate::retry::{self, Outcome};
use crate::route::{self, Dest, Target};
use crate::split;
use plaudit_proto::scoring::BoardRef;
use plaudit_proto::{ErrorCode, Request, Response};
use std::sync::atomic::Ordering;
use tokio::time::Instant;

type Answer = Result<Response, ClientError>;

/// Requests per write at most. A node answers `Overloaded` past its
/// `max_in_flight_per_connection` (256 by default), so a long pipeline goes
/// to each node in chunks that stay well under it, one chunk at a time.
pub(crate) const CHUNK: usize = 128;

impl Cluster {
    /// Sends every request and returns their answers in the same order,
    /// each as `call` would return it. The counts reads go as one part per
    /// business and node that serves their entities, whichever reads asked
    /// for them (`split`).
    pub(crate) async fn pipeline(&self, reqs: Vec<Request>) -> Vec<Answer> {
        let (parts, plan) = {
            let view = lock(&self.view);
            let shards = if self.split_reads { view.shards() } else { 0 };
            split::plan(reqs, shards, &view.table().leaders, &view.entities)
        };
        plan.merge(self.send_all(self.reads_to(parts)).await)
    }

    /// `pipeline` of requests that each go to one node.
    pub(super) async fn send_all(&self, reqs: Vec<Request>) -> Vec<Answer> {
        let deadline = Instant::now() + self.timeout;
        let reqs: Vec<Request> =
            reqs.into_iter().map(|r| retry::once(r, retry::random_u64)).collect();
        let groups = self.route_all(&reqs);
        let sent = futures::future::join_all(groups.iter().map(|(dest, of_dest)| {
            let batch: Vec<&Request> = of_dest.iter().map(|&i| &reqs[i]).collect();
            self.send_batch(dest, batch, deadline)
        }))
        .await;
        let mut answers: Vec<Option<Answer>> = (0..reqs.len()).map(|_| None).collect();
        // Whether a request's first attempt may have applied it, so that a
        // retry that is then refused does not read as "not applied".
        let mut maybe_applied = vec![false; reqs.len()];
        for ((dest, of_dest), replies) in groups.iter().zip(sent) {
            let mut answered = false;
            for (&i, (reply, was_sent)) in of_dest.iter().zip(replies) {
                answers[i] = match reply {
                    // Sent, and the deadline passed before the answer.
                    None => {
                        let op = reqs[i].op();
                        tracing::debug!(op, addr = %dest.addr, "no answer by the deadline");
                        Some(Err(ClientError::Timeout))
                    }
                    Some(r) => match retry::outcome(r) {
                        Outcome::Done(r) => {
                            answered |= !matches!(r, Err(ClientError::Protocol(_)));
                            Some(r)
                        }
                        Outcome::NotLeader(Some(hint), _) => {
                            // Learned now, so the retry goes where it says
                            // (and a moved board's next query at once).
                            let mut view = lock(&self.view);
                            view.learn(&hint, Instant::now().into_std());
                            let shards = view.shards();
                            view.placed.learn(&reqs[i], hint.shard, shards);
                            None
                        }
                        Outcome::NotLeader(None, _) | Outcome::Moving(_) => None,
                        Outcome::NodeDown(_) => {
                            maybe_applied[i] = was_sent;
                            None
                        }
                        Outcome::Busy(e) => {
                            maybe_applied[i] = e.code() == Some(ErrorCode::Timeout);
                            None
                        }
                    },
                };
            }
            if answered {
                lock(&self.view).mark_up(&dest.addr);
            }
        }
        let retried: Vec<usize> =
            answers.iter().enumerate().filter(|(_, a)| a.is_none()).map(|(i, _)| i).collect();
        let again = futures::future::join_all(
            retried.iter().map(|&i| self.call_until(reqs[i].clone(), deadline, maybe_applied[i])),
        )
        .await;
        for (i, a) in retried.into_iter().zip(again) {
            answers[i] = Some(a);
        }
        answers.into_iter().map(|a| a.unwrap_or(Err(ClientError::Timeout))).collect()
    }

    /// Each request's node, as index lists per node: the requests `call`
    /// would send to each (none for a request with no node to pick).
    fn route_all(&self, reqs: &[Request]) -> Vec<(Dest, Vec<usize>)> {
        let mut groups: Vec<(Dest, Vec<usize>)> = Vec::new();
        // Each target is routed once per pipeline (and a board's type id
        // hashed once): requests for one board or shard repeat, and routing
        // each was a seventh of the client's CPU on rank-of. The view is
        // locked and the clock read once for the whole pipeline.
        let mut view = lock(&self.view);
        let now = Instant::now().into_std();
        let shards = view.shards();
        let mut targets = TargetMemo::default();
        let mut routed: Vec<(Target, Option<usize>)> = Vec::new();
        let mut ask = Vec::new();
        for (i, req) in reqs.iter().enumerate() {
            if let Request::Score(e) = req {
                if view.shapes.should_ask(e.rank, now) {
                    ask.push(e.rank);
                }
            }
            let target = match view.score_target(req) {
                Some(t) => t,
                None => {
                    let routed = view.placed.target(req, targets.target(req, shards));
                    view.entities.target(req, routed, shards)
                }
            };
            // A leader is one node; `Any` and `Replica` rotate over their
            // candidates per request (`View::pick`'s spin), which spreads a
            // pipeline's fan-outs and stale reads: those are picked each.
            let once = matches!(target, Target::Leader(_) | Target::Meta);
            let group = match routed.iter().find(|(t, _)| once && *t == target) {
                Some(&(_, g)) => g,
                None => {
                    let spin = self.spin.fetch_add(1, Ordering::Relaxed);
                    let g = view.pick(target, now, spin).map(|dest| {
                        match groups.iter().position(|(d, _)| d.addr == dest.addr) {
                            Some(g) => g,
                            None => {
                                groups.push((dest, Vec::new()));
                                groups.len() - 1
                            }
                        }
                    });
                    if once {
                        routed.push((target, g));
                    }
                    g
                }
            };
            // No node to pick: `call_until` waits for one, or says why not.
            if let Some(g) = group {
                groups[g].1.push(i);
            }
        }
        drop(view);
        if !ask.is_empty() {
            self.learn_shapes(ask);
        }
        groups
    }

    /// One node's share, in writes of at most [`CHUNK`] requests, one after
    /// another, each watched for silence as a single call is (`probing`).
    /// Per request: its answer (`None` if the deadline passed before it)
    /// and whether it was sent. A node that refuses the
    /// connection with an answer (`Overloaded` at its connection limit)
    /// answers each request so, as `attempt` sorts it: a busy node is
    /// backed off from and retried, not marked down.
    async fn send_batch(
        &self,
        dest: &Dest,
        batch: Vec<&Request>,
        deadline: Instant,
    ) -> Vec<(Option<Answer>, bool)> {
        let mut out = Vec::with_capacity(batch.len());
        for chunk in batch.chunks(CHUNK) {
            let unsent = |a: Answer| chunk.iter().map(move |_| (Some(dup(&a)), false));
            let conn = match tokio::time::timeout_at(deadline, self.pool(&dest.addr).get()).await {
                Ok(Ok(conn)) => conn,
                Ok(Err(ClientError::Server(e))) => {
                    out.extend(unsent(Ok(Response::Error(e))));
                    continue;
                }
                Ok(Err(e)) => {
                    out.extend(unsent(Err(e)));
                    continue;
                }
                Err(_) => {
                    out.extend(unsent(Err(ClientError::Closed)));
                    continue;
                }
            };
            // Queuing the write waits for room behind the connection's
            // earlier writes (a node that stopped reading): within the deadline.
            let mut pending = match tokio::time::timeout_at(deadline, conn.send_many(chunk)).await {
                Ok(Ok(pending)) => pending,
                // Nothing to wait for: unencodable, or the connection is dead.
                Ok(Err(replies)) => {
                    out.extend(replies.into_iter().map(|r| (Some(r), false)));
                    continue;
                }
                Err(_) => {
                    out.extend(chunk.iter().map(|_| (None, false)));
                    continue;
                }
            };
            let sending = async { Ok(pending.all().await) };
            let waited =
                tokio::time::timeout_at(deadline, probing(&conn, sending, &dest.addr)).await;
            match waited {
                Ok(Ok(replies)) => out.extend(replies.into_iter().map(|r| (Some(r), true))),
                // Replies that came are answers, whatever became of the rest:
                // one slow write must not time out the reads beside it.
                // The node stopped answering pings: each unanswered
                // request's connection failed.
                Ok(Err(e)) => out.extend(
                    pending
                        .so_far()
                        .into_iter()
                        .map(|r| (Some(r.unwrap_or(Err(e.duplicate()))), true)),
                ),
                Err(_) => out.extend(pending.so_far().into_iter().map(|r| (r, true))),
            }
        }
        out
    }
}

fn dup(a: &Answer) -> Answer {
    match a {
        Ok(r) => Ok(r.clone()),
        Err(e) => Err(e.duplicate()),
    }
}

/// Targets of the board queries of one pipeline, by ranking and type id:
/// parsing, encoding and hashing a type id costs more than the query's
/// share of the write.
#[derive(Default)]
struct TargetMemo<'a> {
    boards: Vec<(u32, &'a str, Target)>,
}

/// Distinct boards a pipeline remembers (a linear search: past a few,
/// routing afresh costs no more).
const MEMO_BOARDS: usize = 8;

impl<'a> TargetMemo<'a> {
    fn target(&mut self, req: &'a Request, shards: u32) -> Target {
        let Request::Query(q) = req else { return route::target(req, shards) };
        let BoardRef::TypeId(t) = &q.board else { return route::target(req, shards) };
        if let Some(&(_, _, target)) = self.boards.iter().find(|b| b.0 == q.rank && b.1 == t) {
            return target;
        }
        let target = route::target(req, shards);
        if self.boards.len() < MEMO_BOARDS {
            self.boards.push((q.rank, t, target));
        }
        target
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaudit_proto::scoring::{BoardQuery, QueryRequest};

    fn query(rank: u32, type_id: &str) -> Request {
        let board = BoardRef::TypeId(type_id.into());
        Request::Query(QueryRequest { rank, board, query: BoardQuery::Size })
    }

    #[test]
    fn remembered_targets_are_the_routed_ones() {
        let ids = ["total:0_1", "total:0_2", "total:0_3", "day:1713110400_9", "nonsense"];
        let mut reqs = Vec::new();
        for round in 0..3 {
            for (i, t) in ids.iter().enumerate() {
                reqs.push(query(1 + (i as u32 + round) % 2, t));
            }
            reqs.push(Request::Ping);
        }
        for shards in [0, 1, 3, 16] {
            let mut memo = TargetMemo::default();
            for r in &reqs {
                assert_eq!(memo.target(r, shards), route::target(r, shards), "{r:?}");
            }
            assert!(memo.boards.len() <= MEMO_BOARDS);
        }
    }
}
