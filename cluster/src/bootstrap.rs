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
//!   metadata group with (up to) three voters. Every other node waits to
//!   receive it through replication, so nothing is created twice, and no
//!   node that is meant to join ever forms a one-node cluster of its own
//!   (two clusters could not be merged).
//! - While there is no cluster map, whichever node leads the metadata group
//!   proposes one (`placement.rs`) for the voters and, up to N, the other
//!   nodes found: the creator may die before it could. The map's epoch check
//!   makes a second proposal harmless.
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
    let me = engine.cfg.cluster.me.clone();
    if !meta.raft.is_initialized().await? {
        match expect {
            0 => info!("waiting to be made a member of a cluster"),
            1 => meta.initialize(&[(me.id, me.peer.clone())]).await?,
            n => {
                info!(expect = n, "looking for the other nodes of a new cluster");
                let (e, m) = (engine.clone(), meta.clone());
                engine.spawn(async move { create_when_found(e, m, n as usize).await });
            }
        }
    }
    // Whichever node leads the metadata group proposes the map if there is
    // none: the node that created the group may have died (or lost its
    // leadership) before it could.
    let e = engine.clone();
    engine.spawn(async move { keep_map(e, meta).await });
    Ok(())
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

/// Until a map exists: on the metadata group's leader, propose one for the
/// nodes of the cluster being formed (the metadata voters, and, up to
/// `bootstrap_expect`, the other nodes found that belong to no cluster).
async fn keep_map(engine: Arc<Engine>, meta: Arc<Group>) {
    let me = engine.cfg.cluster.me.clone();
    loop {
        if engine.directory.cluster().is_some() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        if !meta.is_leader() {
            continue;
        }
        let Some(nodes) = members_to_be(&engine, &meta, &me) else { continue };
        let map = new_map(&nodes, engine.shard_count(), engine.cfg.cluster.replication_factor);
        match meta.propose(Command::SetCluster(map.clone())).await {
            Ok(CmdResult::Done) => {
                let ids: Vec<NodeId> = map.nodes.iter().map(|n| n.id).collect();
                info!(nodes = ?ids, shards = map.shards.len(), "cluster map created");
                return;
            }
            // A map exists already (proposed before a restart, or elsewhere).
            Ok(CmdResult::Failed(e)) => {
                info!(reason = %e, "cluster map not replaced");
                return;
            }
            Ok(other) => warn!(?other, "unexpected result proposing the cluster map"),
            Err(e) => warn!(error = %e, "proposing the cluster map failed; retrying"),
        }
    }
}

/// The members of a new cluster as this node sees them, or `None` if it
/// cannot tell yet (a voter it knows no address of).
fn members_to_be(engine: &Engine, meta: &Group, me: &NodeInfo) -> Option<Vec<NodeInfo>> {
    let voters: Vec<NodeId> =
        meta.raft.metrics().borrow().membership_config.membership().voter_ids().collect();
    let view = engine.control.lock().ok().and_then(|c| c.clone()).map(|c| c.view());
    let info = |id: NodeId| -> Option<NodeInfo> {
        if id == me.id {
            return Some(me.clone());
        }
        view.as_ref()?.known.get(&id).map(|(i, _)| i.clone())
    };
    let mut nodes: Vec<NodeInfo> = voters.iter().map(|&v| info(v)).collect::<Option<_>>()?;
    let want = (engine.cfg.cluster.bootstrap_expect as usize).max(nodes.len());
    if let Some(view) = &view {
        let mut others: Vec<&NodeInfo> = view
            .known
            .values()
            .filter(|(i, member)| !*member && view.up.contains(&i.id) && !voters.contains(&i.id))
            .map(|(i, _)| i)
            .collect();
        others.sort_by_key(|i| i.id);
        for o in others {
            if nodes.len() >= want {
                break;
            }
            nodes.push(o.clone());
        }
    }
    Some(nodes)
}

/// Waits for `n` nodes (none a member yet); the lowest creates the
/// metadata group with the (up to three) lowest as voters.
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
                    let voters: Vec<(NodeId, String)> = placement::meta_voters(&found)
                        .into_iter()
                        .filter_map(|v| infos.iter().find(|n| n.id == v))
                        .map(|n| (n.id, n.peer.clone()))
                        .collect();
                    info!(nodes = ?found, voters = ?voters.iter().map(|v| v.0).collect::<Vec<_>>(), "creating the cluster");
                    if let Err(e) = meta.initialize(&voters).await {
                        warn!(error = %e, "initializing the metadata group failed");
                    }
                    // The map follows from `keep_map` on whichever node leads.
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
        let adding = meta.raft.add_learner(n.id, node, false);
        // Bounded: placement waits for it, and a leader that has just lost
        // its quorum would never commit the change.
        match tokio::time::timeout(Duration::from_secs(5), adding).await {
            Ok(Ok(_)) => info!(node = n.id, "added to the metadata group as a learner"),
            Ok(Err(e)) => warn!(node = n.id, error = %e, "adding a metadata learner failed"),
            Err(_) => warn!(node = n.id, "adding a metadata learner timed out"),
        }
    }
}
