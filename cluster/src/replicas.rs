//! Which groups this node holds a replica of, kept in line with the
//! cluster state: the shards the map places here and the ones moving here
//! are started; the ones that left are stopped and their data deleted.
//!
//! ```text
//! cluster state changes (and every 3 s) ─> place
//!   ├─ peer addresses from the map
//!   ├─ start: shards placed here, and targets of moves to here (a learner's replica,
//!   │         empty until the leader sends the log or a snapshot)
//!   ├─ create: a placed shard this node is meant to create (first replica, new cluster)
//!   ├─ the metadata group's learners (on its leader)
//!   └─ drop: a replica neither placed nor moving here, once this node's registry has
//!            caught up with the metadata leader's: raft stopped, state forgotten, log
//!            records dropped, snapshots deleted
//! ```
//!
//! Why the catch-up before a drop: the map only stops naming a node after
//! the group removed it (`mover.rs`), and a move to a node is recorded
//! before the node is added; but this node's copy of the map may lag. A
//! node that restarts replays its registry from its own log, which can be
//! older than a replica it holds: dropping on that view would throw away a
//! voter's log. After the catch-up the map is at least as new as any change
//! that gave this node the replica.

use crate::engine::Engine;
use crate::layout::Layout;
use crate::peer::wire::GroupId;
use crate::types::NodeId;
use plaudit_proto::cluster::ClusterMap;
use plaudit_proto::membership::ClusterState;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tracing::{error, info, warn};

/// The groups of `state` this node should hold: placed here or moving
/// here (by the groups that host the shards the state names).
pub(crate) fn wanted(state: &ClusterState, me: NodeId, layout: Layout) -> BTreeSet<GroupId> {
    let mut out: BTreeSet<GroupId> = state.map.shards_of(me).collect();
    out.extend(state.moves.iter().filter(|m| m.to == me).map(|m| m.shard));
    out.into_iter().map(|s| layout.group_of(s)).collect()
}

impl Engine {
    /// Places this node whenever the cluster state changes, and again every
    /// few seconds (placing is idempotent): a metadata leader elected after
    /// a change still adds the learners the map names, and a drop that
    /// could not catch up is tried again.
    pub(crate) async fn watch_placement(self: Arc<Self>) {
        const AGAIN: Duration = Duration::from_secs(3);
        let mut states = self.directory.watch_state();
        loop {
            let state = states.borrow_and_update().clone();
            if let Some(state) = state {
                self.place(&state).await;
            }
            if let Ok(Err(_)) = tokio::time::timeout(AGAIN, states.changed()).await {
                return; // the registry view is gone: shutting down
            }
        }
    }

    /// Brings this node in line with `state` (see the module doc).
    async fn place(self: &Arc<Self>, state: &ClusterState) {
        let _one = self.starting.lock().await;
        let map = &state.map;
        for n in &map.nodes {
            if n.id != self.node_id() {
                self.peers.set_addr(n.id, n.peer.clone());
            }
        }
        let me = self.node_id();
        // One shard that cannot start (a half-installed one refuses to)
        // must not keep the others down: each is tried, failures are logged
        // and retried at the next pass.
        for shard in wanted(state, me, self.layout) {
            let g = match self.start_group(shard).await {
                Ok(g) => g,
                Err(e) => {
                    error!(shard, error = %e, "this replica of the shard cannot start");
                    continue;
                }
            };
            let replicas = map.replicas(shard);
            if replicas.first() == Some(&me) {
                let members: Vec<_> = replicas.iter().map(|&r| (r, addr(map, r))).collect();
                if let Err(e) = g.initialize(&members).await {
                    warn!(shard, error = %e, "creating the shard's group failed");
                }
            }
        }
        self.drop_leftovers().await;
    }

    /// Groups this node has (running, or on disk) that are not the
    /// metadata group and that the state does not want here.
    fn leftovers(&self, state: &ClusterState) -> BTreeSet<GroupId> {
        let meta = self.router.meta_id;
        let mut have: BTreeSet<GroupId> = self.router.local().iter().map(|g| g.gid).collect();
        have.extend(self.wal.group_ids());
        have.extend(crate::durable::snapshot_groups(&self.cfg.data_dir, meta));
        have.remove(&meta);
        let wanted = wanted(state, self.node_id(), self.layout);
        have.retain(|g| !wanted.contains(g));
        have
    }

    /// Drops every leftover group, after catching up with the metadata
    /// group's leader (see the module doc).
    async fn drop_leftovers(self: &Arc<Self>) {
        let Some(state) = self.directory.cluster_state() else { return };
        if self.leftovers(&state).is_empty() {
            return;
        }
        if let Err(e) = self.sync_registry().await {
            info!(error = %e, "replicas to drop wait until the registry can catch up");
            return;
        }
        let Some(state) = self.directory.cluster_state() else { return };
        for g in self.leftovers(&state) {
            if let Err(e) = self.drop_group(g).await {
                warn!(shard = g, error = %e, "dropping a replica this node no longer holds failed");
            }
        }
    }

    /// Stops this node's replica of `g` and deletes what it stored: the
    /// group left this node.
    pub(crate) async fn drop_group(self: &Arc<Self>, g: GroupId) -> anyhow::Result<()> {
        if let Some(group) = self.router.remove(g) {
            if let Err(e) = group.raft.shutdown().await {
                warn!(shard = g, error = %e, "raft shutdown");
            }
            crate::engine::stop_all(
                &group.handles().map(|(s, h)| (s, h.clone())).collect::<Vec<_>>(),
            )
            .await;
            self.share_budget();
        }
        // The log's records first: a crash after it leaves only snapshot
        // files, which the next pass deletes (a crash before it, the whole
        // group, which the next pass drops again).
        let wal = self.wal.clone();
        tokio::task::spawn_blocking(move || wal.drop_group(g)).await??;
        for shard in self.layout.shards_of(g) {
            self.store.forget(shard)?;
        }
        self.sends.forget(g);
        let dir = self.cfg.data_dir.join("snapshots").join(format!("shard{g}"));
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        info!(shard = g, "replica dropped: the shard lives on other nodes");
        Ok(())
    }
}

fn addr(map: &ClusterMap, id: NodeId) -> String {
    map.node(id).map(|n| n.peer.clone()).unwrap_or_default()
}
