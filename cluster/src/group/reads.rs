//! A group's linearizable reads on this replica as leader: the read
//! barrier (nothing to do for the only voter; a lease read, catching up
//! with the commit index while followers read through this leader; else a
//! read-index round shared by every waiter, `group_watch::read_loop`),
//! and the renaming of a `NotLeader` about the group into one about the
//! shard asked about.

use super::{stopped, Group};
use plaudit_proto::WireError;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

impl Group {
    /// Whether a read may skip the read-index round on the lease: this
    /// node leads, is not handing the group over, has applied an entry of
    /// its term (so everything acknowledged before it is applied), and a
    /// quorum accepted its AppendEntries within the read lease
    /// (`lease.rs`). A joint configuration has two quorums: no lease.
    fn lease_holds(&self) -> bool {
        if self.handing_to.load(Ordering::Acquire) != 0 {
            return false;
        }
        let m = self.raft.metrics();
        let m = m.borrow();
        // The whole leader id, not only the term: ours, applied.
        let applied_this_term = m
            .last_applied
            .is_some_and(|l| l.leader_id == *m.vote.leader_id() && l.index >= self.logged);
        let configs = m.membership_config.membership().get_joint_config();
        m.running_state.is_ok()
            && m.state == openraft::ServerState::Leader
            && m.current_leader == Some(m.id)
            && m.vote.is_committed()
            && applied_this_term
            && configs.len() == 1
            && self.lease.holds(&m.vote, m.id, &configs[0], self.read_lease)
    }

    /// Whether a read of this replica's state served right now, without
    /// waiting for anything, is linearizable: this node is the group's only
    /// voter, or a leader on its lease that no follower has read through
    /// lately, where `read_barrier` would return at once and do nothing.
    pub fn reads_now(&self) -> bool {
        self.is_sole_voter() || (self.lease_holds() && !self.followers_reading())
    }

    /// This leader gave a follower its read index (`follower_read.rs`).
    pub(crate) fn note_follower_read(&self) {
        let ms = self.opened.elapsed().as_millis() as u64;
        self.follower_read_ms.store(ms.max(1), Ordering::Relaxed);
    }

    /// Whether a follower read this group through this leader lately.
    fn followers_reading(&self) -> bool {
        let last = self.follower_read_ms.load(Ordering::Relaxed);
        last != 0 && (self.opened.elapsed().as_millis() as u64) < last + FOLLOWER_READS_FOR_MS
    }

    /// Waits until this node has applied everything it knows committed.
    ///
    /// Why a lease read needs this once followers read: a follower learns
    /// the commit index with the next AppendEntries, before this leader has
    /// applied up to it (openraft sends the commit out first), so a
    /// follower read may show an entry this leader's own state does not
    /// hold yet; a lease read must not then show less. Without follower
    /// reads, every read is the leader's and its applied state only grows.
    async fn apply_committed(&self) -> Result<(), WireError> {
        let committed = self
            .raft
            .with_raft_state(|s| s.committed.map(|l| l.index))
            .await
            .map_err(|e| WireError::internal(format!("raft stopped: {e}")))?;
        let applied = self.raft.metrics().borrow().last_applied.map(|l| l.index);
        if committed <= applied {
            return Ok(());
        }
        let wait = self.raft.wait(Some(APPLY_WAIT));
        wait.applied_index_at_least(committed, "lease read").await.map(|_| ()).map_err(|e| {
            WireError::timeout(format!(
                "shard {}: not applied up to its commit in time: {e}",
                self.gid
            ))
        })
    }

    /// Returns once this node's state machine reflects every write committed
    /// before the call (a read-index check), for a read of `shard` (one it
    /// hosts: a `NotLeader` names it).
    pub async fn read_barrier(&self, shard: u32) -> Result<(), WireError> {
        self.barrier().await.map_err(|e| self.as_shard(shard, e))
    }

    /// A `NotLeader` about this group as one about `shard`, which it
    /// hosts: a client asked about the shard, and an answer naming another
    /// would read as the shard having moved (`router::elsewhere`).
    pub(crate) fn as_shard(&self, shard: u32, mut e: WireError) -> WireError {
        if let Some(h) = e.leader.as_mut().filter(|h| h.shard == self.gid) {
            h.shard = shard;
            e.message =
                e.message.replace(&format!("shard {} ", self.gid), &format!("shard {shard} "));
        }
        e
    }

    async fn barrier(&self) -> Result<(), WireError> {
        if self.is_sole_voter() {
            return Ok(());
        }
        if self.lease_holds() {
            if self.followers_reading() {
                self.apply_committed().await?;
            }
            return Ok(());
        }
        let (tx, rx) = oneshot::channel();
        self.reads.try_send(tx).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => {
                WireError::overloaded(format!("shard {} has too many pending reads", self.gid))
            }
            mpsc::error::TrySendError::Closed(_) => stopped(self.gid),
        })?;
        rx.await.map_err(|_| stopped(self.gid))?
    }
}

/// How long after a follower last read through this leader its lease reads
/// keep catching up with the commit index first.
const FOLLOWER_READS_FOR_MS: u64 = 10_000;
/// How long a lease read waits for this leader to apply what it committed.
const APPLY_WAIT: Duration = Duration::from_secs(2);
