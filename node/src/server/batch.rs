//! The writes of one read pass, grouped by the group that applies them
//! (`plaudit_cluster::staged`): each group's share is proposed as one
//! proposal and awaited by one future with one timer, instead of one
//! future, timer and reply channel per request.
//!
//! Bounds are the same as for requests run one by one: each staged request
//! counts against the connection's in-flight cap and holds one permit of
//! the node-wide request cap until its reply is taken.

use super::done::Done;
use plaudit_cluster::group::Group;
use plaudit_cluster::staged::{Finish, Staged};
use plaudit_proto::WireError;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::OwnedSemaphorePermit;

/// A staged request: who asked, and how its result becomes its reply.
struct Asked {
    req_id: u64,
    op: &'static str,
    started: Instant,
    finish: Finish,
}

/// One group's share of a read pass.
struct Share {
    group: Arc<Group>,
    /// The shard of `group` the commands are for.
    shard: u32,
    cmds: Vec<plaudit_actors::Command>,
    asked: Vec<Asked>,
    slots: Option<OwnedSemaphorePermit>,
}

/// A share proposed: the future of its answers, and whether this node is
/// its group's only voter (its writes then hold the pass's replies,
/// `hold.rs`).
pub(super) struct Proposed<F> {
    pub(super) answers: F,
    pub(super) local: bool,
}

/// The staged writes of the read pass under way.
#[derive(Default)]
pub(super) struct WriteBatch {
    shares: Vec<Share>,
}

impl WriteBatch {
    pub(super) fn is_empty(&self) -> bool {
        self.shares.is_empty()
    }

    pub(super) fn add(
        &mut self,
        req_id: u64,
        op: &'static str,
        started: Instant,
        staged: Staged,
        slot: OwnedSemaphorePermit,
    ) {
        let Staged { group, shard, cmd, finish } = staged;
        let asked = Asked { req_id, op, started, finish };
        // A pass touches a few shards at most: a linear search is cheapest.
        let share = match self
            .shares
            .iter()
            .position(|s| s.shard == shard && Arc::ptr_eq(&s.group, &group))
        {
            Some(i) => &mut self.shares[i],
            None => {
                let share =
                    Share { group, shard, cmds: Vec::new(), asked: Vec::new(), slots: None };
                self.shares.push(share);
                let last = self.shares.len() - 1;
                &mut self.shares[last]
            }
        };
        share.cmds.push(cmd);
        share.asked.push(asked);
        match &mut share.slots {
            Some(held) => held.merge(slot),
            None => share.slots = Some(slot),
        }
    }

    /// Proposes every share; returns for each the future that answers it,
    /// or its answers now if it could not be proposed.
    pub(super) fn submit(
        &mut self,
        timeout: Duration,
    ) -> Vec<Result<Proposed<impl Future<Output = Vec<Done>> + Send + 'static>, Vec<Done>>> {
        self.shares
            .drain(..)
            .map(|share| {
                let Share { group, shard, cmds, asked, slots } = share;
                let pending = match group.submit_many(shard, cmds) {
                    Ok(pending) => pending,
                    Err(e) => return Err(answer_all(asked, Err(e))),
                };
                let local = group.is_sole_voter();
                Ok(Proposed {
                    answers: async move {
                        let res = match tokio::time::timeout(timeout, pending).await {
                            Ok(res) => res,
                            Err(_) => Err(WireError::timeout(format!(
                                "no result within {} ms; the request may still apply",
                                timeout.as_millis()
                            ))),
                        };
                        drop(slots);
                        answer_all(asked, res)
                    },
                    local,
                })
            })
            .collect()
    }
}

/// Each request's reply from the share's results (or its one error).
fn answer_all(
    asked: Vec<Asked>,
    res: Result<Vec<plaudit_actors::CmdResult>, WireError>,
) -> Vec<Done> {
    let reply = |a: Asked, r| Done::answered(a.req_id, a.op, a.started, a.finish.answer(r));
    match res {
        Ok(results) => asked.into_iter().zip(results).map(|(a, r)| reply(a, Ok(r))).collect(),
        Err(e) => asked.into_iter().map(|a| reply(a, Err(e.clone()))).collect(),
    }
}
