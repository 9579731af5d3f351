//! A watch on a group's leadership ([`Group::leadership_watch`]): taken
//! before a look at `is_leader`, it wakes on any change after the look.
//!
//! openraft's `server_metrics()` hands out a clone of the core's own
//! receiver, and a clone starts at the version its original has seen. The
//! core's receiver never reads, so a fresh clone counted every change since
//! the group started as unseen, and its `changed` returned at once: a
//! follower's outbox delivery worker, which takes a watch on every turn of
//! its loop, spun on it, a third of a node's CPU at the seeds' load
//! (docs/benchmarks.md). Taking the watch marks what it holds as seen.
//!
//! [`Group::leadership_watch`]: crate::group::Group::leadership_watch

use crate::types::NodeId;
use openraft::metrics::RaftServerMetrics;
use openraft::BasicNode;
use tokio::sync::watch::Receiver;

/// See the module doc.
pub struct LeadershipWatch<T = RaftServerMetrics<NodeId, BasicNode>>(Receiver<T>);

impl<T> LeadershipWatch<T> {
    /// Watches for changes after now, whatever `rx` had seen before.
    pub fn taking(mut rx: Receiver<T>) -> Self {
        rx.borrow_and_update();
        LeadershipWatch(rx)
    }

    /// Returns once the group's state, vote, leader or membership changed
    /// since the watch was taken; never, if the group has stopped (callers
    /// bound the wait).
    pub async fn changed(&mut self) {
        if self.0.changed().await.is_err() {
            std::future::pending::<()>().await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::sync::watch;

    async fn fires(w: &mut LeadershipWatch<u32>) -> bool {
        tokio::time::timeout(Duration::from_millis(50), w.changed()).await.is_ok()
    }

    #[tokio::test]
    async fn a_watch_taken_from_a_receiver_that_never_read_waits_for_the_next_change() {
        // As openraft's: the original receiver never reads what is sent.
        let (tx, core) = watch::channel(0u32);
        tx.send(1).unwrap();
        tx.send(2).unwrap();
        let mut w = LeadershipWatch::taking(core.clone());
        assert!(!fires(&mut w).await, "changes before the watch was taken woke it");
        tx.send(3).unwrap();
        assert!(fires(&mut w).await, "a change after the watch was taken did not wake it");
        assert!(!fires(&mut w).await, "one change woke it twice");
    }

    #[tokio::test]
    async fn a_change_between_taking_and_waiting_is_not_missed() {
        let (tx, core) = watch::channel(0u32);
        let mut w = LeadershipWatch::taking(core.clone());
        // Sent after the watch was taken and before anyone waits on it.
        tx.send(1).unwrap();
        assert!(fires(&mut w).await);
    }

    #[tokio::test]
    async fn a_stopped_group_never_wakes_the_watch() {
        let (tx, core) = watch::channel(0u32);
        let mut w = LeadershipWatch::taking(core);
        drop(tx);
        assert!(!fires(&mut w).await);
    }
}
