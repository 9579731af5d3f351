//! Where leaderships go once elections have put them somewhere: a draining
//! node hands every one away, and a balancer hands each back to the node
//! the placement meant to lead it (`placement.rs` spreads those evenly), so
//! that after failovers and restarts one node does not end up leading
//! every shard and stay so. Both move leaderships with `transfer.rs`.
//!
//! ```text
//! drain (SIGTERM, admin drain): draining = true (gossiped: nobody hands it a group)
//!     every group led here ─> choose_target (the map's preferred, else the most caught up)
//!                          ─> transfer_leader, all at once; until none is led here or the deadline
//! balancer, every 5 s: a data group led here for 10 s whose preferred leader is up,
//!     not draining, and not this node ─> transfer_leader to it (one per round)
//! ```

use crate::engine::Engine;
use crate::peer::wire::GroupId;
use crate::transfer::choose_target;
use crate::types::NodeId;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// How long a drain asked for by an operator keeps trying.
pub(crate) const DRAIN_FOR: Duration = Duration::from_secs(60);
/// How often the balancer looks.
const BALANCE_EVERY: Duration = Duration::from_secs(5);
/// A group led here for less than this is left alone: a leadership just won
/// is not handed away at once (an election may still be settling).
const SETTLED: Duration = Duration::from_secs(10);

impl Engine {
    /// Whether this node is draining: it hands its leaderships away and
    /// takes none.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Peers that may be handed a leadership: up, and not draining.
    fn usable_peer(&self, n: NodeId) -> bool {
        let view = self.control.lock().ok().and_then(|c| c.clone()).map(|c| c.view());
        view.is_some_and(|v| v.up.contains(&n) && !v.draining.contains(&n))
    }

    /// Groups this node leads now.
    fn groups_led_here(&self) -> Vec<GroupId> {
        self.router
            .local()
            .iter()
            .filter(|g| g.is_leader() && !g.is_sole_voter())
            .map(|g| g.gid)
            .collect()
    }

    /// Hands every leadership away and takes no new one (until the node
    /// restarts), within `within`. Returns the groups still led here.
    pub async fn drain(self: &Arc<Self>, within: Duration) -> Vec<GroupId> {
        if !self.draining.swap(true, Ordering::AcqRel) {
            info!("draining: handing every leadership away");
        }
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let led = self.groups_led_here();
            if led.is_empty() || tokio::time::Instant::now() >= deadline {
                return led;
            }
            let map = self.directory.cluster();
            let moves = led.into_iter().filter_map(|g| {
                let group = self.router.group(g)?;
                let m = group.raft.metrics().borrow().clone();
                let voters: Vec<NodeId> = m.membership_config.membership().voter_ids().collect();
                let matched: Vec<(NodeId, u64)> = m
                    .replication
                    .as_ref()
                    .map(|r| r.iter().map(|(n, l)| (*n, l.map_or(0, |l| l.index))).collect())
                    .unwrap_or_default();
                let preferred = map.as_ref().and_then(|m| m.replicas(g).first().copied());
                let to = choose_target(
                    self.node_id(),
                    &voters,
                    &matched,
                    |n| self.usable_peer(n),
                    preferred,
                )?;
                let me = self.clone();
                Some(async move { (g, to, me.transfer_leader(g, to).await) })
            });
            let results = futures::future::join_all(moves).await;
            if results.is_empty() {
                // Nobody to hand to (the others are down or draining): wait.
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            for (g, to, r) in results {
                if let Err(e) = r {
                    warn!(group = g, to, error = %e, "drain: a hand-off failed; trying again");
                }
            }
        }
    }

    /// `DrainNode(node)`: starts draining this node, or asks `node` to.
    pub(crate) async fn drain_node(
        &self,
        node: NodeId,
    ) -> Result<plaudit_proto::Response, plaudit_proto::WireError> {
        use crate::peer::wire::{PeerRequest, PeerResponse};
        use plaudit_proto::{Response, WireError};
        if node == self.node_id() {
            let me = self
                .this
                .get()
                .and_then(|w| w.upgrade())
                .ok_or_else(|| WireError::overloaded("the node is shutting down"))?;
            tokio::spawn(async move { me.drain(DRAIN_FOR).await });
            return Ok(Response::Done);
        }
        let map = self.directory.cluster();
        if map.is_none_or(|m| m.node(node).is_none()) {
            return Err(WireError::not_found(format!("node {node} is not a member")));
        }
        match self.peers.call(node, PeerRequest::Drain, Duration::from_secs(2)).await {
            Ok(PeerResponse::Done) => Ok(Response::Done),
            Ok(other) => Err(WireError::internal(format!("node {node} answered {other:?}"))),
            Err(e) => Err(WireError::timeout(format!("node {node} did not take the drain: {e}"))),
        }
    }

    /// Hands each data group back to the node the placement meant to lead
    /// it, one per round, until the engine stops.
    pub(crate) async fn balance_leaders(self: Arc<Self>) {
        let mut led_since: HashMap<GroupId, Instant> = HashMap::new();
        loop {
            tokio::time::sleep(BALANCE_EVERY).await;
            let led = self.groups_led_here();
            led_since.retain(|g, _| led.contains(g));
            let now = Instant::now();
            for &g in &led {
                led_since.entry(g).or_insert(now);
            }
            if self.is_draining() {
                continue;
            }
            let Some(map) = self.directory.cluster() else { continue };
            let me = self.node_id();
            let due = led.iter().copied().find(|g| {
                let preferred = map.replicas(*g).first().copied();
                *g != self.router.meta_id
                    && led_since.get(g).is_some_and(|t| t.elapsed() >= SETTLED)
                    && preferred.is_some_and(|p| p != me && self.usable_peer(p))
            });
            if let Some(g) = due {
                let to = map.replicas(g)[0];
                info!(group = g, to, "balancing: handing the group to the node placed to lead it");
                if let Err(e) = self.transfer_leader(g, to).await {
                    warn!(group = g, to, error = %e, "balancing: hand-off failed");
                }
            }
        }
    }
}
