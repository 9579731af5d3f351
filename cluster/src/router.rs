//! Where a request for a group goes: this node's replica if it leads the
//! group, else the node that does.
//!
//! ```text
//! leader(g): local replica's view ─> a hint (a NotLeader reply, gossip) ─> a replica from the map
//! on_leader(g, here, there): Here ─> run locally; NotLeader ─> learn the hint, retry
//!                            There(n) ─> redirect clients say NotLeader; others run on n
//!                            Unknown ─> wait for an election, retry until the deadline
//! ```
//!
//! A replica always knows its group's leader (or that there is none right
//! now), so a guess that lands on a replica costs one redirect at most.

use crate::group::Group;
use crate::peer::wire::{GroupId, PeerRequest, PeerResponse};
use crate::peer::{CallError, Peers};
use crate::types::NodeId;
use plaudit_actors::Directory;
use plaudit_proto::error::LeaderHint;
use plaudit_proto::{ErrorCode, Request, Response, WireError};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// How long to wait between attempts while a group has no leader.
const ELECTION_POLL: Duration = Duration::from_millis(10);
/// A redirecting client asking for a group with no leader (an election
/// under way) is held this long for the election to end before being told
/// "no leader": it then learns the new leader at once, rather than after
/// its own backoff.
const REDIRECT_PATIENCE: Duration = Duration::from_millis(300);

/// Where a group's leader is, as far as this node knows.
pub enum Leader {
    Here(Arc<Group>),
    There(NodeId),
    Unknown,
}

pub struct Router {
    pub me: NodeId,
    /// The metadata group's id (one past the last data shard).
    pub meta_id: GroupId,
    groups: RwLock<BTreeMap<GroupId, Arc<Group>>>,
    /// Leaders heard of from others: `(leader, term)`.
    hints: RwLock<HashMap<GroupId, (NodeId, u64)>>,
    pub peers: Arc<Peers>,
    pub directory: Directory,
    /// How long a request may spend finding and waiting for a leader.
    pub deadline: Duration,
    /// Client requests passed to another node to serve (`forward`): a
    /// smart client's never are, a simple client's often are.
    forwarded: AtomicU64,
}

pub fn not_leader(group: GroupId, leader: Option<NodeId>, epoch: u64) -> WireError {
    let mut e = WireError::new(
        ErrorCode::NotLeader,
        match leader {
            Some(l) => format!("shard {group} is led by node {l}"),
            None => format!("shard {group} has no leader right now"),
        },
    );
    e.leader = Some(LeaderHint { shard: group, leader, epoch });
    e
}

/// A `NotLeader` answer about another group than `g`, as a `Moved` naming
/// that group: the node that answered placed the request's actor (an entity
/// or a board, moved) on another shard than this node did, because it has
/// applied newer placements. Waiting for `g`'s leader would get the same
/// answer until the deadline; `Moved` lets the caller place the request
/// again (`follow_moved`) once this node has applied them too. `None` for
/// an answer about `g` itself.
fn elsewhere(g: GroupId, e: &WireError) -> Option<WireError> {
    match &e.leader {
        Some(h) if e.code == ErrorCode::NotLeader && h.shard != g => Some(WireError::moved(
            h.shard,
            format!("shard {g} is not where it lives now: {}", e.message),
        )),
        _ => None,
    }
}

impl Router {
    pub fn new(
        me: NodeId,
        meta_id: GroupId,
        peers: Arc<Peers>,
        directory: Directory,
        deadline: Duration,
    ) -> Router {
        Router {
            me,
            meta_id,
            groups: RwLock::default(),
            hints: RwLock::default(),
            peers,
            directory,
            deadline,
            forwarded: AtomicU64::new(0),
        }
    }

    /// Client requests this node has passed to another node since it started.
    pub fn forwarded(&self) -> u64 {
        self.forwarded.load(Ordering::Relaxed)
    }

    /// This node's replica of the group that hosts shard `g` (a group's
    /// id is its first shard's, so a group id finds it too).
    pub fn group(&self, g: GroupId) -> Option<Arc<Group>> {
        self.groups.read().unwrap_or_else(|e| e.into_inner()).get(&g).cloned()
    }

    /// Adds this node's replica of `group`, under every shard it hosts.
    pub fn insert(&self, group: Arc<Group>) {
        let mut all = self.groups.write().unwrap_or_else(|e| e.into_inner());
        for shard in group.shard_ids() {
            all.insert(shard, group.clone());
        }
    }

    /// Forgets this node's replica of group `g` (moved to another node).
    pub fn remove(&self, g: GroupId) -> Option<Arc<Group>> {
        let gone = {
            let mut all = self.groups.write().unwrap_or_else(|e| e.into_inner());
            let gone = all.get(&g).filter(|group| group.gid == g).cloned();
            if let Some(group) = &gone {
                for shard in group.shard_ids() {
                    all.remove(&shard);
                }
            }
            gone
        };
        let mut hints = self.hints.write().unwrap_or_else(|e| e.into_inner());
        match &gone {
            Some(group) => hints.retain(|s, _| !group.shard_ids().any(|h| h == *s)),
            None => hints.retain(|s, _| *s != g),
        }
        gone
    }

    /// Every group with a replica on this node, once each, the metadata
    /// group last.
    pub fn local(&self) -> Vec<Arc<Group>> {
        let all = self.groups.read().unwrap_or_else(|e| e.into_inner());
        let own = |(id, g): (&GroupId, &Arc<Group>)| (*id == g.gid).then(|| g.clone());
        let mut v: Vec<_> =
            all.iter().filter(|(id, _)| **id != self.meta_id).filter_map(own).collect();
        v.extend(all.get(&self.meta_id).cloned());
        v
    }

    pub fn epoch(&self) -> u64 {
        self.directory.cluster().map_or(0, |m| m.epoch)
    }

    /// Remembers a leader someone reported (a newer term wins).
    pub fn note(&self, g: GroupId, leader: NodeId, term: u64) {
        let mut h = self.hints.write().unwrap_or_else(|e| e.into_inner());
        match h.get(&g) {
            Some((_, t)) if *t > term => {}
            _ => {
                h.insert(g, (leader, term));
            }
        }
    }

    fn forget(&self, g: GroupId, leader: NodeId) {
        let mut h = self.hints.write().unwrap_or_else(|e| e.into_inner());
        if h.get(&g).is_some_and(|(l, _)| *l == leader) {
            h.remove(&g);
        }
    }

    /// The leaders this node knows first hand, for gossip: `(shard,
    /// leader, term)` for every shard of the groups it holds.
    pub fn local_leaders(&self) -> Vec<(GroupId, NodeId, u64)> {
        self.local()
            .iter()
            .flat_map(|g| {
                let m = g.raft.metrics().borrow().clone();
                let leader = m.current_leader.map(|l| (l, m.current_term));
                g.shard_ids().filter_map(move |s| leader.map(|(l, t)| (s, l, t)))
            })
            .collect()
    }

    pub fn leader(&self, g: GroupId) -> Leader {
        if let Some(group) = self.group(g) {
            if group.is_sole_voter() {
                // A one-node group: nothing to look up (this was a tenth
                // of a single node's read CPU).
                return Leader::Here(group);
            }
            let (leader, term) = {
                let m = group.raft.metrics();
                let m = m.borrow();
                (m.current_leader, m.current_term)
            };
            match leader {
                Some(l) if l == self.me && group.is_leader() => return Leader::Here(group),
                Some(l) if l != self.me && !self.peers.is_down(l) => {
                    self.note(g, l, term);
                    return Leader::There(l);
                }
                _ => {}
            }
            // A replica without a leader (an election is under way), or
            // whose leader the control plane declared down: a hint from
            // elsewhere may be newer than what we saw.
        }
        if let Some((l, _)) = self.hints.read().unwrap_or_else(|e| e.into_inner()).get(&g) {
            // A node declared down is not chosen (`liveness.rs`): its group
            // elects another leader, which the hints learn.
            if *l != self.me && !self.peers.is_down(*l) {
                return Leader::There(*l);
            }
        }
        if self.group(g).is_none() {
            // Not a replica here: any replica that is not down knows the leader.
            if let Some(map) = self.directory.cluster() {
                let replicas = if g == self.meta_id {
                    map.meta_voters.clone()
                } else {
                    map.replicas(g).to_vec()
                };
                if let Some(r) =
                    replicas.into_iter().find(|r| *r != self.me && !self.peers.is_down(*r))
                {
                    return Leader::There(r);
                }
            }
        }
        Leader::Unknown
    }

    /// Runs `here` with this node's replica if it leads `g`, else `there`
    /// with the leader's id (or, for a redirecting client, answers
    /// `NotLeader`). A `NotLeader` answer teaches the leader and retries; a
    /// group without a leader is waited for, up to the deadline.
    pub async fn on_leader<T, H, HF, R, RF>(
        &self,
        g: GroupId,
        redirect: bool,
        here: H,
        there: R,
    ) -> Result<T, WireError>
    where
        H: Fn(Arc<Group>) -> HF,
        HF: Future<Output = Result<T, WireError>>,
        R: Fn(NodeId) -> RF,
        RF: Future<Output = Result<T, Hop>>,
    {
        let started = Instant::now();
        let deadline = started + self.deadline;
        let mut last = None;
        while Instant::now() < deadline {
            match self.leader(g) {
                Leader::Here(group) => match here(group).await {
                    Err(e) if e.code == ErrorCode::NotLeader => {
                        if let Some(moved) = elsewhere(g, &e) {
                            return Err(moved);
                        }
                        self.learn(g, &e);
                        last = Some(e);
                    }
                    other => return other,
                },
                Leader::There(n) if redirect => {
                    return Err(not_leader(g, Some(n), self.epoch()));
                }
                // Boxed: a forward's future (a peer call with its retries)
                // is the largest part of this one, and every request on
                // this path, forwarded or not, would carry its size.
                Leader::There(n) => match Box::pin(there(n)).await {
                    Ok(v) => return Ok(v),
                    Err(Hop::Answer(e)) if e.code == ErrorCode::NotLeader => {
                        if let Some(moved) = elsewhere(g, &e) {
                            return Err(moved);
                        }
                        self.forget(g, n);
                        self.learn(g, &e);
                        last = Some(e);
                    }
                    Err(Hop::Answer(e)) => return Err(e),
                    Err(Hop::Unreachable(why)) => {
                        self.forget(g, n);
                        last = Some(WireError::internal(why));
                        tokio::time::sleep(ELECTION_POLL).await;
                        continue;
                    }
                    Err(Hop::NoAnswer(why)) => {
                        return Err(WireError::timeout(format!(
                            "node {n} did not answer for shard {g} ({why}); the request may \
                             still apply"
                        )))
                    }
                },
                Leader::Unknown if redirect && started.elapsed() >= REDIRECT_PATIENCE => {
                    return Err(not_leader(g, None, self.epoch()))
                }
                Leader::Unknown => {}
            }
            tokio::time::sleep(ELECTION_POLL).await;
        }
        let why = last.map(|e| e.message).unwrap_or_else(|| "no leader".into());
        Err(WireError::timeout(format!(
            "shard {g} had no reachable leader within {:?}: {why}",
            self.deadline
        )))
    }

    fn learn(&self, g: GroupId, e: &WireError) {
        if let Some(LeaderHint { shard, leader: Some(l), .. }) = &e.leader {
            if *shard != g {
                // News of another group's leader.
                return;
            }
            // A NotLeader answer carries no term: it is the freshest news,
            // so it replaces the leader and keeps the term gossip last gave.
            let mut h = self.hints.write().unwrap_or_else(|e| e.into_inner());
            let term = h.get(&g).map_or(0, |(_, t)| *t);
            h.insert(g, (*l, term));
        }
    }

    /// Serves a client request on node `n` (which does not forward it again).
    pub async fn forward(&self, n: NodeId, req: Request) -> Result<Response, Hop> {
        self.forwarded.fetch_add(1, Ordering::Relaxed);
        match self.peers.call(n, PeerRequest::Client(req), self.deadline).await {
            Ok(PeerResponse::Client(Response::Error(e))) => Err(Hop::Answer(e)),
            Ok(PeerResponse::Client(r)) => Ok(r),
            Ok(other) => Err(Hop::unexpected(other)),
            Err(e) => Err(e.into()),
        }
    }

    /// Calls node `n` and unwraps its answer with `pick`.
    pub async fn call<T>(
        &self,
        n: NodeId,
        req: PeerRequest,
        pick: impl FnOnce(PeerResponse) -> Result<T, Hop>,
    ) -> Result<T, Hop> {
        match self.peers.call(n, req, self.deadline).await {
            Ok(r) => pick(r),
            Err(e) => Err(e.into()),
        }
    }
}

/// What went wrong on the way to another node.
#[derive(Debug)]
pub enum Hop {
    /// The node answered with an error.
    Answer(WireError),
    /// Nothing was sent: try elsewhere.
    Unreachable(String),
    /// Sent, no answer: it may have applied.
    NoAnswer(String),
}

impl Hop {
    pub fn unexpected(r: PeerResponse) -> Hop {
        match r {
            PeerResponse::Unavailable(why) => Hop::Unreachable(why),
            PeerResponse::Failed(why) => Hop::NoAnswer(why),
            other => Hop::Answer(WireError::internal(format!("unexpected peer answer {other:?}"))),
        }
    }
}

impl From<CallError> for Hop {
    fn from(e: CallError) -> Hop {
        match e {
            CallError::Unreachable { .. } => Hop::Unreachable(e.to_string()),
            CallError::NoAnswer { .. } => Hop::NoAnswer(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peer::auth::Credentials;
    use crate::peer::links::Links;

    fn router(deadline: Duration) -> Router {
        let creds = Credentials { secret: Arc::from(&b"s"[..]), shards: 6, tls: None };
        let peers = Arc::new(Peers::new(1, creds, Arc::new(Links::default())));
        Router::new(1, 6, peers, Directory::default(), deadline)
    }

    #[tokio::test]
    async fn an_answer_about_another_shard_ends_the_wait_as_moved() {
        // This node places the request on shard 2 (led by node 3); node 3
        // has newer placements and places it on shard 0, led by node 1.
        let r = router(Duration::from_secs(2));
        r.note(2, 3, 1);
        let tries = AtomicU64::new(0);
        let out: Result<(), WireError> = r
            .on_leader(
                2,
                false,
                |_| async { unreachable!("node 1 does not lead shard 2") },
                |n| {
                    assert_eq!(n, 3);
                    tries.fetch_add(1, Ordering::Relaxed);
                    async { Err(Hop::Answer(not_leader(0, Some(1), 0))) }
                },
            )
            .await;
        let e = out.unwrap_err();
        assert_eq!((e.code, e.moved_to()), (ErrorCode::Moved, Some(0)), "{e:?}");
        assert_eq!(tries.load(Ordering::Relaxed), 1);
        // Shard 0's leader is not taken for shard 2's.
        assert!(matches!(r.leader(2), Leader::There(3)));
    }

    #[tokio::test]
    async fn an_answer_about_the_same_shard_is_learned_and_followed() {
        let r = router(Duration::from_secs(2));
        r.note(2, 3, 1);
        let out: Result<NodeId, WireError> = r
            .on_leader(
                2,
                false,
                |_| async { unreachable!() },
                |n| async move {
                    match n {
                        3 => Err(Hop::Answer(not_leader(2, Some(2), 0))),
                        n => Ok(n),
                    }
                },
            )
            .await;
        assert_eq!(out.unwrap(), 2);
    }
}
