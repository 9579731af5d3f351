//! What travels on the control plane's sessions, and the actor that takes
//! it: gossip (who exists, who is a member, who leads what) and beats
//! (`liveness.rs`), with the session events ractor_cluster reports.

use crate::peer::wire::GroupId;
use crate::types::NodeId;
use plaudit_proto::cluster::NodeInfo;
use plaudit_proto::codec;
use ractor::{Actor, ActorProcessingErr, ActorRef, BytesConvertable};
use ractor_cluster::node::NodeServerSessionInformation;
use ractor_cluster::{NodeEventSubscription, RactorClusterMessage};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// The process group every node's control actor joins.
pub(super) const GROUP: &str = "plaudit.control";

/// What nodes tell each other.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gossip {
    pub from: Option<NodeInfo>,
    /// The sender belongs to a cluster already (its metadata group has a
    /// membership).
    pub member: bool,
    /// The sender is handing its leaderships away and takes none
    /// (`leaders.rs`).
    pub draining: bool,
    /// The sender's incarnation (`identity.rs`) and zone.
    pub incarnation: plaudit_proto::membership::Incarnation,
    pub zone: Option<String>,
    pub known: Vec<NodeInfo>,
    /// Leaders the sender knows first hand: `(group, leader, term)`.
    pub leaders: Vec<(GroupId, NodeId, u64)>,
}

/// `Gossip` as ractor_cluster carries it.
#[derive(Debug, Clone)]
pub struct GossipBytes(pub Gossip);

impl BytesConvertable for GossipBytes {
    fn into_bytes(self) -> Vec<u8> {
        codec::to_bytes(&self.0).unwrap_or_default()
    }
    fn from_bytes(bytes: Vec<u8>) -> Self {
        // A frame that does not decode is dropped as empty gossip rather
        // than a panic (which ractor_cluster would swallow silently anyway).
        GossipBytes(codec::from_bytes(&bytes).unwrap_or_default())
    }
}

/// A beat: "node N is alive" (`liveness.rs`).
#[derive(Debug, Clone, Copy)]
pub struct Beat(pub NodeId);

impl BytesConvertable for Beat {
    fn into_bytes(self) -> Vec<u8> {
        self.0.to_be_bytes().to_vec()
    }
    fn from_bytes(bytes: Vec<u8>) -> Self {
        // Not eight bytes: node 0, which no node is (ignored).
        Beat(bytes.try_into().map(u64::from_be_bytes).unwrap_or(0))
    }
}

#[derive(RactorClusterMessage)]
pub enum ControlMsg {
    Gossip(GossipBytes),
    Beat(Beat),
}

/// The actor other nodes send gossip to: it only hands it to the control loop.
pub(super) struct ControlActor {
    pub(super) inbox: mpsc::UnboundedSender<Event>,
}

impl Actor for ControlActor {
    type Msg = ControlMsg;
    type State = ();
    type Arguments = ();

    async fn pre_start(
        &self,
        myself: ActorRef<ControlMsg>,
        _: (),
    ) -> Result<(), ActorProcessingErr> {
        ractor::pg::join(GROUP.to_string(), vec![myself.get_cell()]);
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<ControlMsg>,
        msg: ControlMsg,
        _: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ControlMsg::Gossip(g) => {
                let _ = self.inbox.send(Event::Gossip(g.0));
            }
            ControlMsg::Beat(Beat(from)) => {
                let _ = self.inbox.send(Event::Beat(from));
            }
        }
        Ok(())
    }
}

pub(super) enum Event {
    Ready(NodeServerSessionInformation),
    Gone(NodeServerSessionInformation),
    Gossip(Gossip),
    Beat(NodeId),
}

/// Forwards NodeServer session events to the control loop.
pub(super) struct Subscription(pub(super) mpsc::UnboundedSender<Event>);

impl NodeEventSubscription for Subscription {
    fn node_session_opened(&self, _: NodeServerSessionInformation) {}
    fn node_session_authenticated(&self, _: NodeServerSessionInformation) {}
    fn node_session_ready(&self, ses: NodeServerSessionInformation) {
        let _ = self.0.send(Event::Ready(ses));
    }
    fn node_session_disconnected(&self, ses: NodeServerSessionInformation) {
        let _ = self.0.send(Event::Gone(ses));
    }
}
