//! The fault-injection seam of the peer transport: a set of peers this node
//! pretends it cannot reach. Calls to them fail as unreachable, connections
//! from them are dropped, and the control plane disconnects and refuses
//! their sessions, so a test can cut and heal chosen links between real
//! node processes (`POST /fault/links`, only with `fault_injection` on).

use crate::types::NodeId;
use std::collections::BTreeSet;
use std::sync::RwLock;

#[derive(Default)]
pub struct Links {
    blocked: RwLock<BTreeSet<NodeId>>,
}

impl Links {
    pub fn is_blocked(&self, node: NodeId) -> bool {
        self.blocked.read().unwrap_or_else(|e| e.into_inner()).contains(&node)
    }

    /// Replaces the set of cut links; returns the peers newly cut.
    pub fn set(&self, nodes: BTreeSet<NodeId>) -> BTreeSet<NodeId> {
        let mut b = self.blocked.write().unwrap_or_else(|e| e.into_inner());
        let newly: BTreeSet<NodeId> = nodes.difference(&b).copied().collect();
        *b = nodes;
        newly
    }

    pub fn blocked(&self) -> BTreeSet<NodeId> {
        self.blocked.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
