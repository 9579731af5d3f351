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
//! The server metrics are not all `is_leader` reads: the full metrics
//! (sent after the server metrics), the sole-voter flag (set by its own
//! task), a quorum's recent acknowledgement and the end of a hand-over all
//! change without a new server report. So while the server metrics say this
//! node leads and `is_leader` does not yet, [`LeadershipWatch::wait`] looks
//! again after [`SETTLING`] instead of waiting for a report that may not
//! come: a single node's worker that looked between its election's two
//! reports slept out its whole second (`t72` read counts of likes not yet
//! delivered).
//!
//! [`Group::leadership_watch`]: crate::group::Group::leadership_watch

use crate::types::NodeId;
use openraft::metrics::RaftServerMetrics;
use openraft::{BasicNode, ServerState};
use std::time::Duration;
use tokio::sync::watch::Receiver;

/// How soon a waiter looks again while openraft reports this node leading
/// but `is_leader` does not agree yet (see the module doc).
pub const SETTLING: Duration = Duration::from_millis(10);

/// What a leadership report says about this node.
pub trait Leads {
    /// Whether the report says this node leads its group.
    fn leads(&self) -> bool;
}

impl Leads for RaftServerMetrics<NodeId, BasicNode> {
    fn leads(&self) -> bool {
        self.state == ServerState::Leader && self.current_leader == Some(self.id)
    }
}

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

impl<T: Leads> LeadershipWatch<T> {
    /// Waits, at most `max`, for the next change of leadership, for a
    /// caller that saw `is_leader` false; at most [`SETTLING`] while the
    /// last report says this node leads (the rest of what `is_leader`
    /// reads may still catch up without a report).
    pub async fn wait(&mut self, max: Duration) {
        let max = if self.0.borrow().leads() { max.min(SETTLING) } else { max };
        let _ = tokio::time::timeout(max, self.changed()).await;
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

    /// A report for the tests: whether this node leads.
    #[derive(Clone, Copy)]
    struct Says(bool);

    impl Leads for Says {
        fn leads(&self) -> bool {
            self.0
        }
    }

    #[tokio::test]
    async fn a_waiter_told_this_node_leads_looks_again_soon_without_a_new_report() {
        let (_tx, core) = watch::channel(Says(true));
        let mut w = LeadershipWatch::taking(core);
        let start = std::time::Instant::now();
        w.wait(Duration::from_secs(30)).await;
        // Far below the 30 s it would wait for a report that never comes.
        assert!(start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
    }

    #[tokio::test]
    async fn a_follower_waits_for_a_report_or_its_limit() {
        let (tx, core) = watch::channel(Says(false));
        let mut w = LeadershipWatch::taking(core);
        let waited =
            tokio::time::timeout(Duration::from_millis(100), w.wait(Duration::from_secs(30)));
        assert!(waited.await.is_err(), "a follower stopped waiting with no report");
        let waiter = tokio::spawn(async move { w.wait(Duration::from_secs(30)).await });
        tx.send(Says(true)).unwrap();
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("a report woke the waiter")
            .unwrap();
    }

    #[tokio::test]
    async fn a_stopped_group_never_wakes_the_watch() {
        let (tx, core) = watch::channel(0u32);
        let mut w = LeadershipWatch::taking(core);
        drop(tx);
        assert!(!fires(&mut w).await);
    }
}
