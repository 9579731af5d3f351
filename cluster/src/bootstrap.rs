//! How a cluster comes to exist, exactly once.
//!
//! - A node whose metadata group has a membership already belongs to a
//!   cluster: it rejoins, whatever `bootstrap_expect` says.
//! - `bootstrap_expect = 1` (no `join`): the node creates a one-node
//!   cluster at once (the metadata group with itself, a map placing every
//!   shard on it).
//! - `bootstrap_expect = N > 1`: the **founders** are the nodes at the
//!   first `N` seed addresses (`join`, sorted). A founder waits until it
//!   has found every founder (its gossip names the seed as its peer
//!   address, and a session to it is up) and none of them belongs to a
//!   cluster yet; then it initializes the metadata group with the founders
//!   as its voters. Every founder computes the same voters from the same
//!   seeds, and openraft takes the same initial membership on several
//!   nodes as one cluster, so exactly one cluster forms whatever the start
//!   order and however many other nodes start with the same seeds. A node
//!   that is not a founder never creates anything: it waits to be made a
//!   member.
//! - While there is no cluster map, whichever node leads the metadata group
//!   proposes one (`placement.rs`) for the founders (the group's initial
//!   voters): the creator may die before it could. The map's epoch check
//!   makes a second proposal harmless.
//! - `bootstrap_expect = 0` (join only): the node waits to be made a member.
//!
//! Why founders by address rather than "the lowest id among the first N
//! found": nodes that start together see each other in different orders,
//! so with more nodes than `N` two of them could each see a different
//! lowest set and create two clusters, which can never be merged. The seed
//! list is the one thing every node is given alike.
//!
//! Once the map exists, the membership manager on the metadata group's
//! leader takes over (`membership.rs`): it makes the other members
//! learners, admits nodes that join later, and moves replicas; each node
//! starts the shards placed on it (`replicas.rs`).

use crate::engine::Engine;
use crate::group::Group;
use crate::placement;
use crate::types::NodeId;
use plaudit_actors::{CmdResult, Command};
use plaudit_proto::cluster::{ClusterMap, NodeInfo};
use plaudit_proto::membership::{ClusterState, Member, MemberState};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// How often a founder still missing others says whom it waits for.
const WAITING_NOTE: Duration = Duration::from_secs(10);

pub(crate) async fn begin(engine: Arc<Engine>, meta: Arc<Group>) -> anyhow::Result<()> {
    let expect = engine.cfg.cluster.bootstrap_expect;
    let me = engine.cfg.cluster.me.clone();
    if !meta.raft.is_initialized().await? {
        match expect {
            0 => info!("waiting to be made a member of a cluster"),
            1 => meta.initialize(&[(me.id, me.peer.clone())]).await?,
            n => {
                let founders = founder_seeds(&engine.cfg.cluster.seeds, n as usize);
                info!(expect = n, founders = ?founders, "looking for the founders of a new cluster");
                let (e, m) = (engine.clone(), meta.clone());
                engine.spawn(async move { create_with_founders(e, m, founders).await });
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

/// The first cluster state: `nodes` with their identities, every shard
/// placed on them.
fn new_state(nodes: &[(NodeInfo, Member)], shards: u32, rf: u32) -> ClusterState {
    let ids: Vec<NodeId> = nodes.iter().map(|n| n.0.id).collect();
    let mut nodes = nodes.to_vec();
    nodes.sort_by_key(|n| n.0.id);
    let map = ClusterMap {
        epoch: 1,
        nodes: nodes.iter().map(|n| n.0.clone()).collect(),
        shards: placement::place(&ids, shards, rf),
        meta_voters: placement::meta_voters(&ids),
    };
    ClusterState { map, members: nodes.into_iter().map(|n| n.1).collect(), moves: Vec::new() }
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
        let mut state =
            new_state(&nodes, engine.shard_count(), engine.cfg.cluster.replication_factor);
        engine.layout.spread(&mut state.map.shards);
        match meta.propose(meta.gid, Command::SetClusterState(Box::new(state.clone()))).await {
            Ok(CmdResult::Done) => {
                let ids: Vec<NodeId> = state.map.nodes.iter().map(|n| n.id).collect();
                info!(nodes = ?ids, shards = state.map.shards.len(), "cluster map created");
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

/// The members of a new cluster as this node sees them: the metadata
/// group's initial voters (the founders) with their identities, or `None`
/// if it cannot tell yet (a voter it knows no address or incarnation of).
fn members_to_be(engine: &Engine, meta: &Group, me: &NodeInfo) -> Option<Vec<(NodeInfo, Member)>> {
    let voters: Vec<NodeId> =
        meta.raft.metrics().borrow().membership_config.membership().voter_ids().collect();
    let view = engine.control.lock().ok().and_then(|c| c.clone()).map(|c| c.view());
    let member =
        |id, incarnation, zone| Member { id, incarnation, zone, state: MemberState::Active };
    let info = |id: NodeId| -> Option<(NodeInfo, Member)> {
        if id == me.id {
            let zone = engine.cfg.cluster.zone.clone();
            return Some((me.clone(), member(id, engine.incarnation, zone)));
        }
        let view = view.as_ref()?;
        let (incarnation, zone) = view.identity.get(&id).cloned()?;
        view.known.get(&id).map(|(i, _)| (i.clone(), member(id, incarnation, zone)))
    };
    voters.iter().map(|&v| info(v)).collect()
}

/// The seed addresses whose nodes found a new cluster: the first `n` of
/// the seeds, sorted, so every node given the same seeds picks the same.
pub(crate) fn founder_seeds(seeds: &[String], n: usize) -> Vec<String> {
    let mut sorted = seeds.to_vec();
    sorted.sort();
    sorted.dedup();
    sorted.truncate(n);
    sorted
}

/// The founders as `view` shows them, in seed order: each found (this
/// node, or one with a session up) under its seed address; `Err` with the
/// seeds not found yet.
pub(crate) fn resolve_founders(
    founders: &[String],
    view: &crate::control::View,
    me: &NodeInfo,
) -> Result<Vec<NodeInfo>, Vec<String>> {
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for seed in founders {
        let node =
            view.known.values().map(|(info, _)| info).find(|info| {
                info.peer == *seed && (info.id == me.id || view.up.contains(&info.id))
            });
        match node {
            Some(n) => found.push(n.clone()),
            None if me.peer == *seed => found.push(me.clone()),
            None => missing.push(seed.clone()),
        }
    }
    if missing.is_empty() {
        Ok(found)
    } else {
        Err(missing)
    }
}

/// On a founder: waits until every founder is found and none belongs to
/// a cluster, then initializes the metadata group with the founders as
/// voters (the same call on every founder: one cluster).
async fn create_with_founders(engine: Arc<Engine>, meta: Arc<Group>, founders: Vec<String>) {
    let Some(control) = engine.control.lock().ok().and_then(|c| c.clone()) else {
        warn!("no control plane: a cluster cannot be formed (is the cluster secret set?)");
        return;
    };
    let me = engine.cfg.cluster.me.clone();
    let mut view = control.watch();
    let mut noted = Instant::now();
    loop {
        if engine.is_member() {
            info!("this node is a member of a cluster now");
            return;
        }
        let v = view.borrow().clone();
        if v.known.values().any(|(info, member)| *member && info.id != me.id) {
            // A cluster exists (made by another founder, or long ago): this
            // node is added to it, or it was a founder that lost its data.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        match resolve_founders(&founders, &v, &me) {
            Ok(nodes) => {
                let mut ids: Vec<NodeId> = nodes.iter().map(|n| n.id).collect();
                ids.sort_unstable();
                ids.dedup();
                if ids.len() != nodes.len() {
                    warn!(founders = ?founders, "two founder seeds are the same node; no cluster is formed");
                } else if !ids.contains(&me.id) {
                    info!("this node is not a founder: it waits to be made a member");
                    return;
                } else {
                    let voters: Vec<(NodeId, String)> =
                        nodes.iter().map(|n| (n.id, n.peer.clone())).collect();
                    info!(voters = ?ids, "creating the cluster");
                    if let Err(e) = meta.initialize(&voters).await {
                        warn!(error = %e, "initializing the metadata group failed");
                    }
                    // The map follows from `keep_map` on whichever node leads.
                    return;
                }
            }
            Err(missing) if noted.elapsed() >= WAITING_NOTE => {
                info!(missing = ?missing, "waiting for the founders at these seed addresses");
                noted = Instant::now();
            }
            Err(_) => {}
        }
        let _ = tokio::time::timeout(Duration::from_millis(100), view.changed()).await;
    }
}
