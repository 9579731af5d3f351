//! Linearizable reads on any replica (`Request::Replica`): a follower
//! learns the leader's read index (the leader confirms with a quorum that
//! it still leads, as for its own reads, and names its commit index), waits
//! until its own state machine has applied that far, and reads its own
//! state. TiKV's follower read.
//!
//! ```text
//! follower: reads of group g arriving together ─► one round (Rounds) ─► PeerRequest::ReadIndex
//!           leader: rounds of its own (Rounds) ─► openraft get_read_log_id (a heartbeat round)
//!           ◄── the commit index ─ wait until applied ≥ it (READ_WAIT) ─► read here
//! leader:   its own read barrier (lease or read-index)
//! ```
//!
//! A follower may so apply an entry before the leader does (the leader
//! sends the commit index out before it applies), so once followers read,
//! the leader's lease reads first wait until it has applied what it has
//! committed (`Group::read_barrier`): otherwise a lease read could show
//! less than a follower read before it. The hot-key bench found this (a
//! count read at the leader below one read at a follower just before).
//!
//! Why it is linearizable: the index comes from a round that began after
//! the read arrived, and is at least every index committed before the
//! leader's quorum confirmed it still led; every write acknowledged before
//! the read arrived was committed before that round began, and every read
//! answered before had seen at most what was committed. Applying up to the
//! index makes this replica's state at least as new as both.

use crate::engine::Engine;
use crate::group::{not_leader, Group};
use crate::peer::wire::{GroupId, PeerRequest, PeerResponse};
use plaudit_proto::WireError;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long a follower waits for the leader's read index.
const ASK_FOR: Duration = Duration::from_secs(2);
/// How long a follower waits to apply up to the read index.
const READ_WAIT: Duration = Duration::from_secs(2);

/// One round at a time for many readers: a reader is answered by the
/// first round that began after it arrived (a round that began earlier
/// may have missed a write acknowledged before the reader came), so every
/// reader that waits while a round runs shares the next one.
#[derive(Default)]
pub struct Rounds {
    /// Readers that have arrived, counted.
    arrived: AtomicU64,
    /// The last round's result, with how many readers had arrived when it
    /// began. Held across a round: one round at a time.
    last: tokio::sync::Mutex<(u64, u64)>,
}

impl Rounds {
    /// The index a round that began after this call answers; runs `round`
    /// unless another such round answered already.
    pub async fn index<F, Fut>(&self, round: F) -> Result<u64, WireError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<u64, WireError>>,
    {
        let me = self.arrived.fetch_add(1, Ordering::SeqCst) + 1;
        let mut last = self.last.lock().await;
        if last.0 >= me {
            return Ok(last.1);
        }
        // Everyone who has arrived by now is covered by this round.
        let covers = self.arrived.load(Ordering::SeqCst);
        let index = round().await?;
        *last = (covers, index);
        Ok(index)
    }
}

impl Engine {
    /// Makes `g`'s state on this node reflect every write acknowledged and
    /// every read answered before the call: the read barrier on a leader,
    /// the leader's read index applied on a follower. For a read of
    /// `shard` (one `g` hosts: a `NotLeader` names it).
    pub(crate) async fn replica_barrier(
        &self,
        g: &Arc<Group>,
        shard: u32,
    ) -> Result<(), WireError> {
        self.group_barrier(g).await.map_err(|e| g.as_shard(shard, e))
    }

    async fn group_barrier(&self, g: &Arc<Group>) -> Result<(), WireError> {
        if g.is_leader() {
            return g.read_barrier(g.gid).await;
        }
        let leader = g.raft.metrics().borrow().current_leader;
        let Some(leader) = leader.filter(|&l| l != self.node_id()) else {
            return Err(not_leader(g.gid, None));
        };
        let index = g
            .follower_rounds
            .index(|| async move {
                let ask = PeerRequest::ReadIndex { group: g.gid };
                match self.peers.call(leader, ask, ASK_FOR).await {
                    Ok(PeerResponse::ReadIndex(r)) => r,
                    Ok(other) => Err(WireError::internal(format!("unexpected answer {other:?}"))),
                    Err(e) => Err(WireError::timeout(format!(
                        "shard {}: no read index from leader {leader}: {e}",
                        g.gid
                    ))),
                }
            })
            .await?;
        self.follower_reads.fetch_add(1, Ordering::Relaxed);
        let wait = g.raft.wait(Some(READ_WAIT));
        wait.applied_index_at_least(Some(index), "replica read").await.map(|_| ()).map_err(|e| {
            WireError::timeout(format!("shard {}: not applied up to {index} in time: {e}", g.gid))
        })
    }

    /// The leader's side: its commit index, once a quorum has confirmed
    /// that it still leads (one round for every follower that asks at
    /// once).
    pub(crate) async fn read_index(&self, group: GroupId) -> Result<u64, WireError> {
        let Some(g) = self.router.group(group) else { return Err(not_leader(group, None)) };
        if !g.is_leader() {
            let leader = g.raft.metrics().borrow().current_leader;
            return Err(not_leader(group, leader.filter(|&l| l != self.node_id())));
        }
        // Before the index leaves: from now on this leader's lease reads
        // first catch up with what it has committed.
        g.note_follower_read();
        g.leader_rounds
            .index(|| async {
                match g.raft.get_read_log_id().await {
                    Ok((read, _applied)) => Ok(read.map_or(0, |l| l.index)),
                    Err(e) => Err(not_leader(group, forward_to(&e))),
                }
            })
            .await
    }
}

/// The leader an openraft refusal names, if any.
fn forward_to(
    e: &openraft::error::RaftError<
        crate::types::NodeId,
        openraft::error::CheckIsLeaderError<crate::types::NodeId, openraft::BasicNode>,
    >,
) -> Option<crate::types::NodeId> {
    use openraft::error::{CheckIsLeaderError, RaftError};
    match e {
        RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f)) => f.leader_id,
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[tokio::test]
    async fn readers_waiting_on_a_round_share_the_next_one() {
        let rounds = Arc::new(Rounds::default());
        let ran = Arc::new(AtomicU32::new(0));
        let gate = Arc::new(tokio::sync::Notify::new());
        // The first round is held open while four more readers arrive.
        let first = {
            let (rounds, ran, gate) = (rounds.clone(), ran.clone(), gate.clone());
            tokio::spawn(async move {
                rounds
                    .index(|| async move {
                        ran.fetch_add(1, Ordering::SeqCst);
                        gate.notified().await;
                        Ok(10)
                    })
                    .await
            })
        };
        while ran.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        let later: Vec<_> = (0..4)
            .map(|_| {
                let (rounds, ran) = (rounds.clone(), ran.clone());
                tokio::spawn(async move {
                    rounds
                        .index(|| async move {
                            ran.fetch_add(1, Ordering::SeqCst);
                            Ok(20)
                        })
                        .await
                })
            })
            .collect();
        while rounds.arrived.load(Ordering::SeqCst) < 5 {
            tokio::task::yield_now().await;
        }
        gate.notify_one();
        assert_eq!(first.await.unwrap().unwrap(), 10);
        for l in later {
            // Not the round they arrived during: the one after it.
            assert_eq!(l.await.unwrap().unwrap(), 20);
        }
        assert_eq!(ran.load(Ordering::SeqCst), 2, "one round for the four that waited");
    }
}
