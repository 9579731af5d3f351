//! openraft's network for one group, over the shared peer connections: each
//! RPC is a `PeerRequest` tagged with the group, on the one connection this
//! node keeps to the target node.

use crate::lease::Lease;
use crate::peer::wire::{Fence, GroupId, PeerRequest, PeerResponse};
use crate::peer::{CallError, Peers};
use crate::snapshot_send::SnapshotSends;
use crate::types::{NodeId, TypeConfig};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Timeout, Unreachable,
};
use openraft::network::{Backoff, RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, RPCTypes};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The incarnation each node is known by (the cluster state's members):
/// what every Raft message to it is fenced with (`wire::Fence`).
pub type Fences = Arc<dyn Fn(NodeId) -> Fence + Send + Sync>;

/// Makes a client per target node for one group.
#[derive(Clone)]
pub struct PeerNetwork {
    pub group: GroupId,
    pub peers: Arc<Peers>,
    pub fences: Fences,
    /// Paces and counts the snapshots this node sends (all groups share it).
    pub sends: Arc<SnapshotSends>,
    /// The group's read lease: which voter accepted which AppendEntries, when sent.
    pub lease: Arc<Lease>,
}

pub struct PeerClient {
    group: GroupId,
    target: NodeId,
    peers: Arc<Peers>,
    fences: Fences,
    sends: Arc<SnapshotSends>,
    lease: Arc<Lease>,
}

impl PeerClient {
    /// Read at every message, not once per client: a member replaced by a
    /// new incarnation keeps its node id (and openraft its clients).
    fn fence(&self) -> Fence {
        (self.fences)(self.target)
    }
}

impl RaftNetworkFactory<TypeConfig> for PeerNetwork {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerClient {
        // Memberships carry each node's peer address, for when the cluster
        // map is not known yet (a group's first replication); the map's
        // (and gossip's) is newer otherwise: a node's address can change.
        if !node.addr.is_empty() && self.peers.addr(target).is_none() {
            self.peers.set_addr(target, node.addr.clone());
        }
        PeerClient {
            group: self.group,
            target,
            peers: self.peers.clone(),
            fences: self.fences.clone(),
            sends: self.sends.clone(),
            lease: self.lease.clone(),
        }
    }
}

/// A transport failure, as openraft wants it: unreachable (nothing sent,
/// back off) or a network error (may have been delivered).
fn rpc_err<E: std::error::Error>(
    e: CallError,
    target: NodeId,
    action: RPCTypes,
    ttl: Duration,
) -> RPCError<NodeId, BasicNode, E> {
    match e {
        CallError::Unreachable { .. } => RPCError::Unreachable(Unreachable::new(&e)),
        CallError::NoAnswer { ref why, .. } if why.starts_with("timed out") => {
            RPCError::Timeout(Timeout { action, id: 0, target, timeout: ttl })
        }
        CallError::NoAnswer { .. } => RPCError::Network(NetworkError::new(&e)),
    }
}

fn unexpected<E: std::error::Error>(r: PeerResponse) -> RPCError<NodeId, BasicNode, E> {
    let why = match r {
        PeerResponse::Unavailable(why) | PeerResponse::Failed(why) => why,
        other => format!("unexpected answer {other:?}"),
    };
    RPCError::Unreachable(Unreachable::new(&std::io::Error::other(why)))
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let ttl = option.hard_ttl();
        // Stamped before it leaves: the follower's clock moves later.
        let (vote, sent) = (rpc.vote, Instant::now());
        let req = PeerRequest::AppendEntries { group: self.group, to: self.fence(), rpc };
        match self.peers.call(self.target, req, ttl).await {
            Ok(PeerResponse::AppendEntries(Ok(r))) => {
                if matches!(
                    r,
                    AppendEntriesResponse::Success | AppendEntriesResponse::PartialSuccess(_)
                ) {
                    self.lease.accepted(self.target, &vote, sent);
                }
                Ok(r)
            }
            Ok(PeerResponse::AppendEntries(Err(e))) => {
                Err(RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            Ok(other) => Err(unexpected(other)),
            Err(e) => Err(rpc_err(e, self.target, RPCTypes::AppendEntries, ttl)),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        // Its turn first: the wait is not part of the chunk's time to live.
        self.sends.pace(self.group, self.target, rpc.offset, rpc.data.len()).await;
        let ttl = option.hard_ttl();
        let req = PeerRequest::InstallSnapshot { group: self.group, to: self.fence(), rpc };
        match self.peers.call(self.target, req, ttl).await {
            Ok(PeerResponse::InstallSnapshot(Ok(r))) => Ok(r),
            Ok(PeerResponse::InstallSnapshot(Err(e))) => {
                Err(RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            Ok(other) => Err(unexpected(other)),
            Err(e) => Err(rpc_err(e, self.target, RPCTypes::InstallSnapshot, ttl)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let ttl = option.hard_ttl();
        let req = PeerRequest::Vote { group: self.group, to: self.fence(), rpc };
        match self.peers.call(self.target, req, ttl).await {
            Ok(PeerResponse::Vote(Ok(r))) => Ok(r),
            Ok(PeerResponse::Vote(Err(e))) => {
                Err(RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            Ok(other) => Err(unexpected(other)),
            Err(e) => Err(rpc_err(e, self.target, RPCTypes::Vote, ttl)),
        }
    }

    /// A peer that cannot be reached is retried every 200 ms: often enough
    /// that a restarted node catches up at once, rarely enough that a dead
    /// one costs little.
    fn backoff(&self) -> Backoff {
        Backoff::new(std::iter::repeat(Duration::from_millis(200)))
    }
}
