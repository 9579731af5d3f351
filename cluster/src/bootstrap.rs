//! How a cluster comes to exist, exactly once.
//!
//! - A node whose metadata group has a membership already belongs to a
//!   cluster: it rejoins, whatever `bootstrap_expect` says.
//! - `bootstrap_expect = 1` (no `join`): the node creates a one-node
//!   cluster at once (the metadata group with itself, a map placing every
//!   shard on it).
//! - `bootstrap_expect = N > 1`: the node waits until the control plane has
//!   found N nodes, none of which belongs to a cluster. The lowest id among
//!   the N lowest found then creates the cluster: it initializes the
//!   metadata group with (up to) three voters and proposes the map
//!   (`placement.rs`). Every other node waits to receive them through
//!   replication, so nothing is created twice, and no node that is meant to
//!   join ever forms a one-node cluster of its own (two clusters could not
//!   be merged).
//! - `bootstrap_expect = 0` (join only): the node waits to be made a member.
//!
//! Once the map exists, the metadata group's leader adds the nodes that are
//! not voters as learners, and each node starts the shards placed on it
//! (`Engine::place`).

use crate::engine::Engine;
use crate::group::Group;
use crate::placement;
use crate::types::NodeId;
use plaudit_actors::{CmdResult, Command};
use plaudit_proto::cluster::{ClusterMap, NodeInfo};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// Found nodes must stay the same this long before the lowest creates the
/// cluster: a lower id arriving a moment later then still counts.
const SETTLE: Duration = Duration::from_millis(750);

pub(crate) async fn begin(engine: Arc<Engine>, meta: Arc<Group>) -> anyhow::Result<()> {
    let expect = engine.cfg.cluster.bootstrap_expect;
    if meta.raft.is_initialized().await? {
        if engine.directory.cluster().is_none() && expect == 1 {
            // A one-node cluster written before cluster maps existed.
            let e = engine.clone();
            engine.spawn(async move { single_map(e, meta).await });
        }
        return Ok(());
    }
    let me = engine.cfg.cluster.me.clone();
    match expect {
        0 => info!("waiting to be made a member of a cluster"),
        1 => {
            meta.initialize(&[(me.id, me.peer.clone())]).await?;
            let e = engine.clone();
            engine.spawn(async move { single_map(e, meta).await });
        }
        n => {
            info!(expect = n, "looking for the other nodes of a new cluster");
            let e = engine.clone();
            engine.spawn(async move { create_when_found(e, meta, n as usize).await });
        }
    }
    Ok(())
}

/// Proposes the map of a one-node cluster once this node leads the
/// metadata group.
async fn single_map(engine: Arc<Engine>, meta: Arc<Group>) {
    let me = engine.cfg.cluster.me.clone();
    let map = new_map(&[me], engine.shard_count(), engine.cfg.cluster.replication_factor);
    propose_map(&meta, map).await;
}

fn new_map(nodes: &[NodeInfo], shards: u32, rf: u32) -> ClusterMap {
    let ids: Vec<NodeId> = nodes.iter().map(|n| n.id).collect();
    let mut nodes = nodes.to_vec();
    nodes.sort_by_key(|n| n.id);
    ClusterMap {
        epoch: 1,
        nodes,
        shards: placement::place(&ids, shards, rf),
        meta_voters: placement::meta_voters(&ids),
    }
}

async fn propose_map(meta: &Group, map: ClusterMap) {
    loop {
        if let Err(e) = meta.wait_leader(Duration::from_secs(30)).await {
            warn!(error = %e, "this node does not lead the metadata group yet");
            continue;
        }
        match meta.propose(Command::SetCluster(map.clone())).await {
            Ok(CmdResult::Done) => {
                info!(nodes = map.nodes.len(), shards = map.shards.len(), "cluster map created");
                return;
            }
            // A map exists already (a restart after proposing it).
            Ok(CmdResult::Failed(e)) => {
                info!(reason = %e, "cluster map not replaced");
                return;
            }
            Ok(other) => {
                warn!(?other, "unexpected result proposing the cluster map");
                return;
            }
            Err(e) => {
                warn!(error = %e, "proposing the cluster map failed; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Waits for `n` nodes (none a member yet); the lowest creates the cluster.
async fn create_when_found(engine: Arc<Engine>, meta: Arc<Group>, n: usize) {
    let Some(control) = engine.control.lock().ok().and_then(|c| c.clone()) else {
        warn!("no control plane: a cluster cannot be formed (is the cluster secret set?)");
        return;
    };
    let me = engine.node_id();
    let mut view = control.watch();
    let mut stable_since: Option<(Vec<NodeId>, Instant)> = None;
    loop {
        if engine.is_member() {
            info!("this node is a member of a cluster now");
            return;
        }
        let v = view.borrow().clone();
        if v.known.values().any(|(info, member)| *member && info.id != me) {
            // Someone else created it (or it existed): wait to be added.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let mut found: Vec<NodeId> =
            v.known.keys().copied().filter(|id| *id == me || v.up.contains(id)).collect();
        found.sort_unstable();
        found.truncate(n);
        let ready = found.len() == n && found.first() == Some(&me);
        if ready {
            match &stable_since {
                Some((ids, t)) if *ids == found && t.elapsed() >= SETTLE => {
                    let infos: Vec<NodeInfo> = found
                        .iter()
                        .filter_map(|id| v.known.get(id).map(|(i, _)| i.clone()))
                        .collect();
                    create(&engine, &meta, infos).await;
                    return;
                }
                Some((ids, _)) if *ids == found => {}
                _ => stable_since = Some((found, Instant::now())),
            }
        } else {
            stable_since = None;
        }
        let _ = tokio::time::timeout(Duration::from_millis(100), view.changed()).await;
    }
}

async fn create(engine: &Arc<Engine>, meta: &Arc<Group>, nodes: Vec<NodeInfo>) {
    let ids: Vec<NodeId> = nodes.iter().map(|n| n.id).collect();
    let voters: Vec<(NodeId, String)> = placement::meta_voters(&ids)
        .into_iter()
        .filter_map(|v| nodes.iter().find(|n| n.id == v).map(|n| (n.id, n.peer.clone())))
        .collect();
    info!(nodes = ?ids, voters = ?voters.iter().map(|v| v.0).collect::<Vec<_>>(), "creating the cluster");
    if let Err(e) = meta.initialize(&voters).await {
        warn!(error = %e, "initializing the metadata group failed");
        return;
    }
    let map = new_map(&nodes, engine.shard_count(), engine.cfg.cluster.replication_factor);
    propose_map(meta, map).await;
}

/// On the metadata group's leader: makes every member that is not a voter
/// a learner, so it receives the registry and the map.
pub(crate) async fn add_meta_learners(engine: &Arc<Engine>, map: &ClusterMap) {
    let Some(meta) = engine.router.group(engine.router.meta_id) else { return };
    if !meta.is_leader() {
        return;
    }
    let present: Vec<NodeId> = meta
        .raft
        .metrics()
        .borrow()
        .membership_config
        .membership()
        .nodes()
        .map(|(id, _)| *id)
        .collect();
    for n in &map.nodes {
        if present.contains(&n.id) {
            continue;
        }
        let node = openraft::BasicNode { addr: n.peer.clone() };
        match meta.raft.add_learner(n.id, node, false).await {
            Ok(_) => info!(node = n.id, "added to the metadata group as a learner"),
            Err(e) => warn!(node = n.id, error = %e, "adding a metadata learner failed"),
        }
    }
}
