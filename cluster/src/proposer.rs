//! The proposer in front of one group's Raft: it coalesces the commands
//! that queued while the previous entry was handed over into one `Batch`
//! per Raft entry (up to `batch_max` commands), merges the scoring events
//! of each board member into one command (`plaudit_actors::coalesce`),
//! stamps the entry with the leader's clock, and keeps a bounded number of
//! entries in flight.
//!
//! A proposal is one command with its own reply, or several with one reply
//! for all: a connection proposes the writes of one read pass that go to
//! the same group together (`cluster/src/staged.rs`), so a pipelined burst
//! costs one channel send, one reply channel and one timer, not one each.

use crate::types::Raft;
use openraft::error::ClientWriteError;
use plaudit_actors::{coalesce, Batch, CmdResult, Command};
use plaudit_proto::{ShardId, WireError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

pub(crate) type OneReply = oneshot::Sender<Result<CmdResult, WireError>>;
pub(crate) type ManyReply = oneshot::Sender<Result<Vec<CmdResult>, WireError>>;

/// What waits in the group's proposal queue, with the shard that applies
/// it (one of the group's).
pub(crate) enum Proposal {
    One(ShardId, Command, OneReply),
    /// Commands applied in this order, answered together.
    Many(ShardId, Vec<Command>, ManyReply),
}

/// A proposal in the queue, with its room in its shard's share of the
/// queue's bound (one permit per command, given back once its entry is in
/// the log; `group/queue.rs`).
pub(crate) type Queued = (Proposal, OwnedSemaphorePermit);

impl Proposal {
    pub(crate) fn len(&self) -> usize {
        match self {
            Proposal::One(..) => 1,
            Proposal::Many(_, cmds, _) => cmds.len(),
        }
    }

    pub(crate) fn shard(&self) -> ShardId {
        match self {
            Proposal::One(s, ..) | Proposal::Many(s, ..) => *s,
        }
    }
}

/// Who gets which results of an entry: each proposal's reply and how many
/// of the entry's commands (in order) are its, with its shard.
enum Reply {
    One(ShardId, OneReply),
    Many(ShardId, ManyReply, usize),
}

/// Splits proposals into the entry's commands, each command's shard and
/// the replies.
fn flatten(batch: Vec<Proposal>) -> (Vec<Command>, Vec<ShardId>, Vec<Reply>) {
    let n = batch.iter().map(Proposal::len).sum();
    let mut cmds = Vec::with_capacity(n);
    let mut tags = Vec::with_capacity(n);
    let mut replies = Vec::with_capacity(batch.len());
    for p in batch {
        match p {
            Proposal::One(shard, cmd, r) => {
                cmds.push(cmd);
                tags.push(shard);
                replies.push(Reply::One(shard, r));
            }
            Proposal::Many(shard, many, r) => {
                replies.push(Reply::Many(shard, r, many.len()));
                tags.extend(std::iter::repeat_n(shard, many.len()));
                cmds.extend(many);
            }
        }
    }
    (cmds, tags, replies)
}

/// Hands each proposal its results, in order.
fn answer(replies: Vec<Reply>, results: Vec<CmdResult>) {
    let mut results = results.into_iter();
    for r in replies {
        match r {
            Reply::One(_, tx) => {
                let res = results.next().ok_or_else(missing);
                let _ = tx.send(res);
            }
            Reply::Many(_, tx, n) => {
                let mine: Vec<CmdResult> = results.by_ref().take(n).collect();
                let res = if mine.len() == n { Ok(mine) } else { Err(missing()) };
                let _ = tx.send(res);
            }
        }
    }
}

fn missing() -> WireError {
    WireError::internal("an entry applied with fewer results than commands")
}

fn fail(replies: Vec<Reply>, err: &WireError) {
    fail_each(replies, |_| err.clone())
}

/// Fails each proposal with the error made for its shard.
fn fail_each(replies: Vec<Reply>, err: impl Fn(ShardId) -> WireError) {
    for r in replies {
        match r {
            Reply::One(shard, tx) => {
                let _ = tx.send(Err(err(shard)));
            }
            Reply::Many(shard, tx, _) => {
                let _ = tx.send(Err(err(shard)));
            }
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// Runs one group's proposals into its Raft log. `tagged`: the group hosts
/// several shards, and each command is logged with its own
/// (`Batch::tagged`).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn propose_loop(
    shard: u32,
    tagged: bool,
    raft: Raft,
    mut rx: mpsc::Receiver<Queued>,
    batch_max: usize,
    in_flight: usize,
    coalesced: Arc<AtomicU64>,
    cut_off: Arc<tokio::sync::Notify>,
) {
    let slots = Arc::new(Semaphore::new(in_flight));
    // Entry times never go backwards within a shard, even if the wall clock
    // does, so list order (by mtime) matches log order.
    let mut last_now = 0u64;
    while let Some((first, queued)) = rx.recv().await {
        // A proposal's permits of the queue's bound go back once it is in
        // the log (below): until then it counts as pending, so that a group
        // whose queue is empty has handed Raft everything proposed to it
        // (`Group::queue_empty`, which a leadership hand-off waits for).
        // Permits of several shards' shares: one per proposal.
        let mut permits = vec![queued];
        let Ok(permit) = slots.clone().acquire_owned().await else { return };
        // Everything that queued while we waited for a slot joins this
        // entry while it has fewer than `batch_max` commands (a proposal
        // is not split, so an entry may pass that by one connection's
        // share of a read pass, at most its in-flight cap).
        let mut size = first.len();
        let mut batch = vec![first];
        while size < batch_max {
            match rx.try_recv() {
                Ok((p, queued)) => {
                    permits.push(queued);
                    size += p.len();
                    batch.push(p);
                }
                Err(_) => break,
            }
        }
        last_now = last_now.max(now_ms());
        if tagged {
            // Each shard's commands together, in arrival order (a stable
            // sort), so that each run coalesces on its own.
            batch.sort_by_key(Proposal::shard);
        }
        let (cmds, tags, replies) = flatten(batch);
        // One command per board member for its scoring events in this batch.
        let (entry, routes) = if tagged {
            let (cmds, tags, routes) = coalesce::coalesce_tagged(cmds, &tags);
            (Batch::tagged(last_now, cmds, tags), routes)
        } else {
            let (cmds, routes) = coalesce::coalesce(cmds);
            (Batch::new(last_now, cmds), routes)
        };
        let merged = routes
            .iter()
            .filter(|r| matches!(r, coalesce::Route::Events { first, .. } if *first > 0))
            .count();
        coalesced.fetch_add(merged as u64, Ordering::Relaxed);
        // Handing the entry to Raft here, in the loop, keeps entries in
        // arrival order; only waiting for the commit runs concurrently.
        let appended = raft.client_write_ff(entry).await;
        drop(permits);
        let rx = match appended {
            Ok(rx) => rx,
            Err(e) => {
                fail(replies, &WireError::internal(format!("raft stopped: {e}")));
                continue;
            }
        };
        let cut_off = cut_off.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let done = tokio::select! {
                biased;
                done = rx => done,
                // The leader lost touch with a quorum (`group::watch_quorum`).
                () = cut_off.notified() => {
                    let why = "this node lost touch with a quorum of the shard's replicas \
                               before the write was committed; it may still apply";
                    return fail(replies, &WireError::timeout(format!("shard {shard}: {why}")));
                }
            };
            match done {
                Ok(Ok(resp)) => answer(replies, coalesce::split(resp.data, &routes)),
                Ok(Err(ClientWriteError::ForwardToLeader(f))) => {
                    fail_each(replies, |s| crate::router::not_leader(s, f.leader_id, 0));
                }
                Ok(Err(e)) => fail(replies, &WireError::internal(e.to_string())),
                // Raft shut down with the entry appended: it may commit.
                Err(_) => fail(
                    replies,
                    &WireError::timeout(
                        "raft stopped before the write was applied; it may still apply",
                    ),
                ),
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaudit_actors::command::EventResult;

    fn cmd(n: u64) -> Command {
        Command::Ack { target: 0, seqs: vec![n] }
    }

    fn scored(n: u64) -> CmdResult {
        let r: EventResult = Ok((plaudit_proto::scoring::Outcome::Applied, Some(n as i64)));
        CmdResult::Scored(vec![r])
    }

    #[test]
    fn results_reach_their_proposals_in_order() {
        let (t1, mut r1) = oneshot::channel();
        let (t2, mut r2) = oneshot::channel();
        let (t3, mut r3) = oneshot::channel();
        let batch = vec![
            Proposal::One(0, cmd(0), t1),
            Proposal::Many(0, vec![cmd(1), cmd(2), cmd(3)], t2),
            Proposal::One(0, cmd(4), t3),
        ];
        let (cmds, _, replies) = flatten(batch);
        assert_eq!(cmds.len(), 5);
        answer(replies, (0..5).map(scored).collect());
        assert_eq!(r1.try_recv().unwrap().unwrap(), scored(0));
        assert_eq!(r2.try_recv().unwrap().unwrap(), vec![scored(1), scored(2), scored(3)]);
        assert_eq!(r3.try_recv().unwrap().unwrap(), scored(4));
    }

    #[test]
    fn too_few_results_fail_rather_than_shift() {
        let (t1, mut r1) = oneshot::channel();
        let (t2, mut r2) = oneshot::channel();
        let (cmds, _, replies) = flatten(vec![
            Proposal::Many(0, vec![cmd(0), cmd(1)], t1),
            Proposal::One(0, cmd(2), t2),
        ]);
        assert_eq!(cmds.len(), 3);
        answer(replies, vec![scored(0)]);
        assert!(r1.try_recv().unwrap().is_err());
        assert!(r2.try_recv().unwrap().is_err());
    }
}
