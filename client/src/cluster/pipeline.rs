//! Many calls sent together: each node's share of them in one write on one
//! connection, with one wake-up when that node's replies are all in, and
//! any call whose answer is not final (a redirect, a lost connection, an
//! overload) taken on alone by `call`'s retry loop.
//!
//! ```text
//! pipeline(reqs) ─ retry::once each ─► route::target ─► View::pick ─► grouped by node
//!     each node's group, CHUNK at a time: pool(addr).get ─► Connection::call_many (one write)
//!     each reply ─► retry::outcome ─┬─ Done: the answer
//!                                   └─ otherwise: call_until(req, same deadline)
//! ```
//!
//! Every call keeps the guarantees of `call`: it is wrapped to be safe to
//! repeat, routed to its shard's leader, and bounded by one deadline for
//! the whole pipeline (a batch still in flight at the deadline answers
//! `Timeout` for each of its calls: their outcome is unknown).

use super::{lock, Cluster};
use crate::error::ClientError;
use crate::retry::{self, Outcome};
use crate::route::{self, Dest};
use plaudit_proto::{Request, Response};
use tokio::time::Instant;

type Answer = Result<Response, ClientError>;

/// Requests per write at most. A node answers `Overloaded` past its
/// `max_in_flight_per_connection` (256 by default), so a long pipeline goes
/// to each node in chunks that stay well under it, one chunk at a time.
pub(crate) const CHUNK: usize = 128;

impl Cluster {
    /// Sends every request and returns their answers in the same order,
    /// each as `call` would return it.
    pub(crate) async fn pipeline(&self, reqs: Vec<Request>) -> Vec<Answer> {
        let deadline = Instant::now() + self.timeout;
        let reqs: Vec<Request> =
            reqs.into_iter().map(|r| retry::once(r, retry::random_u64())).collect();
        let mut groups: Vec<(Dest, Vec<usize>)> = Vec::new();
        for (i, req) in reqs.iter().enumerate() {
            let target = route::target(req, lock(&self.view).shards());
            // No node to pick: `call_until` waits for one, or says why not.
            let Some(dest) = self.pick(target) else { continue };
            match groups.iter_mut().find(|(d, _)| d.addr == dest.addr) {
                Some((_, of_dest)) => of_dest.push(i),
                None => groups.push((dest, vec![i])),
            }
        }
        let sent = futures::future::join_all(groups.iter().map(|(dest, of_dest)| {
            let batch: Vec<&Request> = of_dest.iter().map(|&i| &reqs[i]).collect();
            self.send_batch(dest, batch, deadline)
        }))
        .await;
        let mut answers: Vec<Option<Answer>> = (0..reqs.len()).map(|_| None).collect();
        for ((dest, of_dest), replies) in groups.iter().zip(sent) {
            let mut answered = false;
            for (&i, reply) in of_dest.iter().zip(replies) {
                answers[i] = match reply {
                    // Sent, and the deadline passed before the answer.
                    None => Some(Err(ClientError::Timeout)),
                    Some(r) => match retry::outcome(r) {
                        Outcome::Done(r) => {
                            answered |= !matches!(r, Err(ClientError::Protocol(_)));
                            Some(r)
                        }
                        Outcome::NotLeader(Some(hint), _) => {
                            // Learned now, so the retry goes where it says.
                            lock(&self.view).learn(&hint, Instant::now().into_std());
                            None
                        }
                        // The retry loop knows what each of these needs.
                        _ => None,
                    },
                };
            }
            if answered {
                lock(&self.view).mark_up(&dest.addr);
            }
        }
        let retried = answers.iter().enumerate().filter(|(_, a)| a.is_none()).map(|(i, _)| i);
        let retried: Vec<usize> = retried.collect();
        let again = futures::future::join_all(
            retried.iter().map(|&i| self.call_until(reqs[i].clone(), deadline)),
        )
        .await;
        for (i, a) in retried.into_iter().zip(again) {
            answers[i] = Some(a);
        }
        answers.into_iter().map(|a| a.unwrap_or(Err(ClientError::Timeout))).collect()
    }

    /// One node's share, in writes of at most [`CHUNK`] requests, one after
    /// another. Per request: `None` if the deadline passed while it was in
    /// flight; a failed dial is each request's connection error (retried by
    /// `call_until`, which marks the node).
    async fn send_batch(
        &self,
        dest: &Dest,
        batch: Vec<&Request>,
        deadline: Instant,
    ) -> Vec<Option<Answer>> {
        let mut out = Vec::with_capacity(batch.len());
        for chunk in batch.chunks(CHUNK) {
            let conn = match tokio::time::timeout_at(deadline, self.pool(&dest.addr).get()).await {
                Ok(Ok(conn)) => conn,
                Ok(Err(e)) => {
                    out.extend(chunk.iter().map(|_| Some(Err(e.duplicate()))));
                    continue;
                }
                Err(_) => {
                    out.extend(chunk.iter().map(|_| Some(Err(ClientError::Closed))));
                    continue;
                }
            };
            match tokio::time::timeout_at(deadline, conn.call_many(chunk)).await {
                Ok(replies) => out.extend(replies.into_iter().map(Some)),
                Err(_) => out.extend(chunk.iter().map(|_| None)),
            }
        }
        out
    }
}
