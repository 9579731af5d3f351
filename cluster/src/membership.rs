//! The membership manager: on the metadata group's leader, every second,
//! it compares the cluster state with what the control plane sees and
//! proposes the next state (`lifecycle.rs`: joins, new incarnations, dead
//! members, finished decommissions, moves), keeps the metadata group's own
//! membership in line with the state, and drives each move (`mover.rs`).
//!
//! ```text
//! every 1 s (or when nudged), while this node leads the metadata group:
//!   seen = nodes up (gossip: address, incarnation, zone), how long members were down,
//!          the metadata group's membership
//!   lifecycle::next(state, seen, policy) ─> SetClusterState (epoch + 1)
//!   metadata group: members that are not gone are learners, map.meta_voters the voters
//!                   (kept as learners when they stop voting), gone ones removed
//!   one mover task per move recorded
//! ```
//!
//! Every change to the state goes through `change_state`: read the newest
//! state, change it, propose it at the next epoch (the metadata group
//! refuses an epoch that is not above its own, so two proposals made from
//! one state never both apply). "Down for" is measured by this leader from
//! when it saw the member down or began leading, whichever is later: a new
//! leader waits the full timeout before it calls anyone dead.

use crate::engine::Engine;
use crate::group_members::members_of;
use crate::lifecycle::{Policy, Seen, UpNode};
use crate::peer::wire::MembershipChange;
use crate::types::NodeId;
use plaudit_actors::{CmdResult, Command};
use plaudit_proto::membership::{ClusterState, MemberState};
use plaudit_proto::WireError;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// How often the manager looks.
const MANAGE_EVERY: Duration = Duration::from_secs(1);

impl Engine {
    pub(crate) fn leads_meta(&self) -> bool {
        self.router.group(self.router.meta_id).is_some_and(|g| g.is_leader())
    }

    /// The metadata group, if this node leads it (else `NotLeader`).
    pub(crate) fn led_meta(&self) -> Result<Arc<crate::group::Group>, WireError> {
        let meta = self.router.meta_id;
        self.router
            .group(meta)
            .filter(|g| g.is_leader())
            .ok_or_else(|| crate::router::not_leader(meta, None, 0))
    }

    /// Applies `change` to the newest cluster state and proposes the result
    /// at the next epoch; `change` returning `None` means nothing to do.
    /// Returns whether a new state was applied. Retried when another
    /// change got in first.
    pub(crate) async fn change_state(
        &self,
        mut change: impl FnMut(&mut ClusterState) -> Option<()>,
    ) -> Result<bool, WireError> {
        let _one = self.state_changes.lock().await;
        let meta = self.led_meta()?;
        for _ in 0..3 {
            let Some(now) = self.directory.cluster_state() else {
                return Err(crate::engine::internal("the cluster has no map yet"));
            };
            let mut next = (*now).clone();
            if change(&mut next).is_none() || next == *now {
                return Ok(false);
            }
            // Every shard placed as the group that hosts it.
            self.layout.spread(&mut next.map.shards);
            next.map.epoch = now.map.epoch + 1;
            match meta.propose(meta.gid, Command::SetClusterState(Box::new(next))).await? {
                CmdResult::Done => return Ok(true),
                // Another change applied first: read it and try again.
                CmdResult::Failed(e) => warn!(reason = %e, "cluster state changed meanwhile"),
                other => {
                    return Err(crate::engine::internal(format!(
                        "unexpected result {other:?} changing the cluster state"
                    )))
                }
            }
        }
        Err(WireError::timeout("the cluster state kept changing; try again"))
    }

    /// The manager loop (see the module doc); runs on every node, acts on
    /// the metadata group's leader.
    pub(crate) async fn manage_members(self: Arc<Self>) {
        let mut down_since: HashMap<NodeId, Instant> = HashMap::new();
        let mut movers: HashMap<u32, tokio::task::JoinHandle<()>> = HashMap::new();
        // Boards' and entities' moves (`actor_mover.rs`).
        let mut actor_movers = crate::actor_mover::ActorMovers::default();
        let mut leading = false;
        loop {
            let _ = tokio::time::timeout(MANAGE_EVERY, self.nudge.notified()).await;
            if !self.leads_meta() {
                if leading {
                    leading = false;
                    down_since.clear();
                    for (_, m) in movers.drain() {
                        m.abort();
                    }
                    actor_movers.abort();
                }
                continue;
            }
            leading = true;
            let Some(state) = self.directory.cluster_state() else { continue };
            let seen = self.seen(&state, &mut down_since);
            let policy = Policy {
                rf: self.cfg.cluster.replication_factor as usize,
                dead_after: self.cfg.cluster.dead_node_timeout,
                per_node: self.cfg.cluster.moves_per_node,
                layout: self.layout,
            };
            match self
                .change_state(|s| {
                    *s = crate::lifecycle::next(s, &seen, &policy)?;
                    Some(())
                })
                .await
            {
                Ok(true) => note_changes(&state, self.directory.cluster_state().as_deref()),
                Ok(false) => {}
                Err(e) => warn!(error = %e, "proposing the next cluster state failed"),
            }
            let Some(state) = self.directory.cluster_state() else { continue };
            if let Err(e) = self.sync_meta_group(&state).await {
                warn!(error = %e, "changing the metadata group's members failed");
            }
            actor_movers.tend(&self);
            movers.retain(|_, m| !m.is_finished());
            for m in &state.moves {
                movers.entry(m.shard).or_insert_with(|| {
                    let e = self.clone();
                    let shard = m.shard;
                    tokio::spawn(async move { e.drive_move(shard).await })
                });
            }
        }
    }

    /// What this leader sees of the nodes now.
    fn seen(&self, state: &ClusterState, down_since: &mut HashMap<NodeId, Instant>) -> Seen {
        let mut seen = Seen::default();
        let me = &self.cfg.cluster;
        seen.up.insert(
            me.me.id,
            UpNode { info: me.me.clone(), incarnation: self.incarnation, zone: me.zone.clone() },
        );
        let view = self.control.lock().ok().and_then(|c| c.clone()).map(|c| c.view());
        if let Some(v) = view {
            for id in &v.up {
                let (Some((info, _)), Some((incarnation, zone))) =
                    (v.known.get(id), v.identity.get(id))
                else {
                    continue; // not described itself yet
                };
                let up =
                    UpNode { info: info.clone(), incarnation: *incarnation, zone: zone.clone() };
                seen.up.insert(*id, up);
            }
        }
        let now = Instant::now();
        down_since.retain(|id, _| !seen.up.contains_key(id));
        for m in &state.members {
            if !seen.up.contains_key(&m.id) {
                let since = *down_since.entry(m.id).or_insert(now);
                seen.down_for.insert(m.id, now - since);
            }
        }
        if let Some(meta) = self.router.group(self.router.meta_id) {
            let m = members_of(&meta);
            seen.meta_nodes = m.voters.iter().chain(&m.learners).copied().collect();
        }
        seen
    }

    /// Makes the metadata group's membership what the state says: every
    /// member that is not gone follows it, the map's metadata voters vote.
    async fn sync_meta_group(self: &Arc<Self>, state: &ClusterState) -> Result<(), WireError> {
        let meta_id = self.router.meta_id;
        let Some(meta) = self.router.group(meta_id) else { return Ok(()) };
        let now = members_of(&meta);
        let present: BTreeSet<NodeId> = now.voters.iter().chain(&now.learners).copied().collect();
        let following: Vec<NodeId> = state
            .members
            .iter()
            .filter(|m| matches!(m.state, MemberState::Active | MemberState::Decommissioning))
            .map(|m| m.id)
            .collect();
        for id in following.iter().filter(|id| !present.contains(id)) {
            let addr = state.map.node(*id).map(|n| n.peer.clone()).unwrap_or_default();
            self.change_members(meta_id, MembershipChange::AddLearner { node: *id, addr }).await?;
            info!(node = id, "added to the metadata group as a learner");
        }
        let want: BTreeSet<NodeId> = state.map.meta_voters.iter().copied().collect();
        let voters: BTreeSet<NodeId> = now.voters.iter().copied().collect();
        if !want.is_empty() && (now.joint || want != voters) {
            let change = MembershipChange::SetVoters {
                voters: want.iter().copied().collect(),
                retain: true,
            };
            self.change_members(meta_id, change).await?;
            info!(voters = ?want, "metadata group voters changed");
            return Ok(()); // the learners are looked at again next round
        }
        for id in now.learners.iter().filter(|id| !following.contains(id)) {
            self.change_members(meta_id, MembershipChange::RemoveLearner { node: *id }).await?;
            info!(node = id, "removed from the metadata group");
        }
        Ok(())
    }
}

/// Logs what a new state changed in the members and moves.
fn note_changes(before: &ClusterState, after: Option<&ClusterState>) {
    let Some(after) = after else { return };
    for m in &after.members {
        let was = before.member(m.id);
        if was.map(|w| (w.incarnation, w.state)) != Some((m.incarnation, m.state)) {
            info!(
                node = m.id,
                incarnation = format!("{:016x}", m.incarnation),
                state = m.state.as_str(),
                "member changed"
            );
        }
    }
    for m in after.moves.iter().filter(|m| !before.moves.contains(m)) {
        info!(shard = m.shard, from = ?m.from, to = m.to, phase = m.phase.as_str(), "replica move");
    }
}
