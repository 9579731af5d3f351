//! What this node does for other nodes: the Raft RPCs of its replicas,
//! requests forwarded to it because it leads their shard, proposals for
//! groups it leads, and reports for cluster status.

use crate::engine::Engine;
use crate::peer::wire::{GroupReport, PeerRequest, PeerResponse};
use crate::rankings::propose_here;
use crate::router::not_leader;
use crate::types::NodeId;
use plaudit_proto::cluster::Routing;
use std::sync::Arc;

/// A forwarded request or proposal that ran out of time: it may still apply.
fn timed_out(after: std::time::Duration) -> plaudit_proto::WireError {
    plaudit_proto::WireError::timeout(format!(
        "no result within {} ms; the request may still apply",
        after.as_millis()
    ))
}

impl Engine {
    pub(crate) async fn serve_peer(
        self: Arc<Self>,
        from: NodeId,
        req: PeerRequest,
    ) -> PeerResponse {
        let no_group = |g| {
            PeerResponse::Unavailable(format!(
                "node {} holds no replica of group {g}",
                self.node_id()
            ))
        };
        match req {
            PeerRequest::AppendEntries { to, .. }
            | PeerRequest::Vote { to, .. }
            | PeerRequest::InstallSnapshot { to, .. }
                if to != 0 && to != self.incarnation =>
            {
                // Meant for an earlier life of this node id, whose log
                // this one does not have: answering would vote twice in a
                // term or take entries back (`wire::Fence`).
                PeerResponse::Unavailable(format!(
                    "node {} is incarnation {:016x}, not {to:016x}: that member's replicas are gone",
                    self.node_id(),
                    self.incarnation
                ))
            }
            PeerRequest::AppendEntries { group, rpc, .. } => match self.router.group(group) {
                Some(g) => {
                    if rpc.vote.is_committed() && rpc.vote.leader_id().voted_for() == Some(from) {
                        g.heard_leader();
                    }
                    // Heard first, checked second: `failover.rs` sets the
                    // flag, then checks that the leader was not heard.
                    if g.is_electing() {
                        return PeerResponse::Unavailable(format!(
                            "node {} is starting an election for group {group}",
                            self.node_id()
                        ));
                    }
                    PeerResponse::AppendEntries(g.raft.append_entries(rpc).await)
                }
                None => no_group(group),
            },
            PeerRequest::Vote { group, rpc, .. } => match self.router.group(group) {
                Some(g) => {
                    let answer = g.raft.vote(rpc).await;
                    // Before the answer leaves: a vote granted here must not
                    // stand beside this node's read lease (`lease.rs`). An
                    // error says nothing of what Raft did: retire too.
                    if !matches!(answer, Ok(ref r) if !r.vote_granted) {
                        g.retire_lease();
                    }
                    PeerResponse::Vote(answer)
                }
                None => no_group(group),
            },
            PeerRequest::InstallSnapshot { group, rpc, .. } => match self.router.group(group) {
                Some(g) => {
                    g.heard_leader();
                    PeerResponse::InstallSnapshot(g.raft.install_snapshot(rpc).await)
                }
                None => no_group(group),
            },
            PeerRequest::Client(req) => {
                let served = self.handle_as(req, Routing::Redirect);
                match tokio::time::timeout(self.cfg.request_timeout, served).await {
                    Ok(resp) => PeerResponse::Client(resp),
                    Err(_) => PeerResponse::Client(plaudit_proto::Response::Error(timed_out(
                        self.cfg.request_timeout,
                    ))),
                }
            }
            PeerRequest::Propose { group, cmd, shed } => match self.router.group(group) {
                Some(g) if g.is_leader() => {
                    let proposed = propose_here(&g, group, cmd, shed);
                    match tokio::time::timeout(self.cfg.request_timeout, proposed).await {
                        Ok(r) => PeerResponse::Propose(r),
                        Err(_) => PeerResponse::Propose(Err(timed_out(self.cfg.request_timeout))),
                    }
                }
                Some(g) => {
                    let leader = g.raft.metrics().borrow().current_leader;
                    PeerResponse::Propose(Err(not_leader(group, leader, self.router.epoch())))
                }
                None => PeerResponse::Propose(Err(not_leader(group, None, self.router.epoch()))),
            },
            PeerRequest::MetaApplied => {
                let meta = self.router.meta_id;
                let res = match self.router.group(meta) {
                    Some(g) => match g.read_barrier(g.gid).await {
                        Ok(()) => Ok(g.raft.metrics().borrow().last_applied.map_or(0, |l| l.index)),
                        Err(e) => Err(e),
                    },
                    None => Err(not_leader(meta, None, self.router.epoch())),
                };
                PeerResponse::MetaApplied(res)
            }
            PeerRequest::Boards { shard, rank, after, limit } => match self.router.group(shard) {
                Some(g) if g.is_leader() => PeerResponse::Boards(
                    self.boards_here(&g, shard, rank, after.as_deref(), limit as usize).await,
                ),
                Some(g) => {
                    let leader = g.raft.metrics().borrow().current_leader;
                    PeerResponse::Boards(Err(not_leader(shard, leader, self.router.epoch())))
                }
                None => PeerResponse::Boards(Err(not_leader(shard, None, self.router.epoch()))),
            },
            PeerRequest::CheckScore { group, cmd } => match self.router.group(group) {
                Some(g) if g.is_leader() => {
                    let checked = self.check_score_here(&g, group, &cmd);
                    match tokio::time::timeout(self.cfg.request_timeout, checked).await {
                        Ok(r) => PeerResponse::CheckScore(r),
                        Err(_) => {
                            PeerResponse::CheckScore(Err(timed_out(self.cfg.request_timeout)))
                        }
                    }
                }
                Some(g) => {
                    let leader = g.raft.metrics().borrow().current_leader;
                    PeerResponse::CheckScore(Err(not_leader(group, leader, self.router.epoch())))
                }
                None => PeerResponse::CheckScore(Err(not_leader(group, None, self.router.epoch()))),
            },
            PeerRequest::Report => PeerResponse::Report(self.report()),
            PeerRequest::HotKeys { top } => PeerResponse::HotKeys(self.hot_keys_here(top)),
            PeerRequest::ExportBoard { group, board } => match self.router.group(group) {
                Some(g) if g.is_leader() => {
                    let export = self.export_board_here(&g, group, board);
                    match tokio::time::timeout(self.cfg.request_timeout, export).await {
                        Ok(r) => PeerResponse::ExportBoard(r.map(Box::new)),
                        Err(_) => {
                            PeerResponse::ExportBoard(Err(timed_out(self.cfg.request_timeout)))
                        }
                    }
                }
                Some(g) => {
                    let leader = g.raft.metrics().borrow().current_leader;
                    PeerResponse::ExportBoard(Err(not_leader(group, leader, self.router.epoch())))
                }
                None => {
                    PeerResponse::ExportBoard(Err(not_leader(group, None, self.router.epoch())))
                }
            },
            PeerRequest::ExportEntity { group, key } => match self.router.group(group) {
                Some(g) if g.is_leader() => {
                    let export = self.export_entity_here(&g, group, key);
                    match tokio::time::timeout(self.cfg.request_timeout, export).await {
                        Ok(r) => PeerResponse::ExportEntity(r.map(Box::new)),
                        Err(_) => {
                            PeerResponse::ExportEntity(Err(timed_out(self.cfg.request_timeout)))
                        }
                    }
                }
                Some(g) => {
                    let leader = g.raft.metrics().borrow().current_leader;
                    PeerResponse::ExportEntity(Err(not_leader(group, leader, self.router.epoch())))
                }
                None => {
                    PeerResponse::ExportEntity(Err(not_leader(group, None, self.router.epoch())))
                }
            },
            PeerRequest::ReadIndex { group } => {
                let asked = self.read_index(group);
                match tokio::time::timeout(self.cfg.request_timeout, asked).await {
                    Ok(r) => PeerResponse::ReadIndex(r),
                    Err(_) => PeerResponse::ReadIndex(Err(timed_out(self.cfg.request_timeout))),
                }
            }
            PeerRequest::TakeLead { group, to, last, vote } => {
                match self.take_lead(group, to, last, vote) {
                    true => PeerResponse::Done,
                    false => no_group(group),
                }
            }
            PeerRequest::Membership { group, change } => {
                PeerResponse::Membership(self.change_members(group, change).await)
            }
            PeerRequest::Drain => {
                let me = self.clone();
                // Answered at once; the hand-offs take about a lease each.
                tokio::spawn(async move { me.drain(crate::leaders::DRAIN_FOR).await });
                PeerResponse::Done
            }
        }
    }

    /// The size of data shard `g`'s newest snapshot here (0: none).
    fn snapshot_bytes(&self, g: u32) -> u64 {
        let dir = self.cfg.data_dir.join("snapshots").join(format!("shard{g}"));
        crate::snapshot_file::newest_complete(&dir)
            .ok()
            .flatten()
            .and_then(|p| std::fs::metadata(p).ok())
            .map_or(0, |m| m.len())
    }

    /// This node's view of each group it holds, one row per shard the
    /// group hosts (a group's snapshot on its own shard's row).
    pub(crate) fn report(&self) -> Vec<GroupReport> {
        self.router
            .local()
            .iter()
            .flat_map(|g| g.shard_ids().map(move |s| (g, s)).collect::<Vec<_>>())
            .map(|(g, shard)| {
                let m = g.raft.metrics().borrow().clone();
                let role = crate::group::role_name(m.state);
                let matched = m
                    .replication
                    .as_ref()
                    .map(|r| r.iter().map(|(n, l)| (*n, l.map(|l| l.index))).collect())
                    .unwrap_or_default();
                let leads = m.current_leader == Some(m.id);
                let own = shard == g.gid && g.gid != self.router.meta_id;
                let (sending, snapshot_bytes) = if leads && own {
                    (self.sends.of_group(g.gid), self.snapshot_bytes(g.gid))
                } else {
                    (Vec::new(), 0)
                };
                GroupReport {
                    group: shard,
                    role: role.to_string(),
                    term: m.current_term,
                    leader: m.current_leader,
                    applied: m.last_applied.map(|l| l.index),
                    last_log: m.last_log_index,
                    matched,
                    sending,
                    snapshot_bytes,
                }
            })
            .collect()
    }
}
