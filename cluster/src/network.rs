//! The Raft transport of a one-member group: it has no peers, so openraft
//! never calls these. The multiplexed TCP transport arrives with the cluster
//! step; until then every RPC reports the target unreachable rather than
//! pretending to succeed.

use crate::types::{NodeId, TypeConfig};
use openraft::error::{InstallSnapshotError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;

#[derive(Clone, Default)]
pub struct LocalOnly;

fn unreachable<E: std::error::Error>(target: NodeId) -> RPCError<NodeId, BasicNode, E> {
    let err = std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        format!("node {target}: this build has no Raft transport between nodes"),
    );
    RPCError::Unreachable(Unreachable::new(&err))
}

pub struct NoPeer(NodeId);

impl RaftNetworkFactory<TypeConfig> for LocalOnly {
    type Network = NoPeer;
    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> NoPeer {
        NoPeer(target)
    }
}

impl RaftNetwork<TypeConfig> for NoPeer {
    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        Err(unreachable(self.0))
    }

    async fn install_snapshot(
        &mut self,
        _rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        Err(unreachable(self.0))
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        Err(unreachable(self.0))
    }
}
