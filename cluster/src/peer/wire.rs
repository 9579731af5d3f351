//! What travels between nodes on the peer listener.
//!
//! A connection opens with a preamble naming its kind and the dialing node:
//!
//! ```text
//! "PLDT" | kind u8 (1 data, 2 control) | from node id u64 BE
//! ```
//!
//! A *control* connection is then handed to ractor_cluster (its own cookie
//! handshake and framing follow). A *data* connection authenticates
//! (`auth.rs`) and then carries multiplexed frames, `len u32 BE |
//! bincode(Frame)`: the dialer sends requests, each with an id, and the
//! acceptor answers them in any order. All Raft groups share one data
//! connection per ordered pair of nodes.

use crate::types::{NodeId, TypeConfig};
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use plaudit_actors::command::{EventResult, ScoreCmd};
use plaudit_actors::{CmdResult, Command};
use plaudit_proto::cluster::NodeId as ProtoNodeId;
use plaudit_proto::{codec, Request, Response, WireError};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

pub const PREAMBLE: &[u8; 4] = b"PLDT";
pub const KIND_DATA: u8 = 1;
pub const KIND_CONTROL: u8 = 2;
/// The version of the peer protocol (data and control connections); a
/// peer on another one is refused. 2: `Hello` declares the shard count
/// (also under both proofs), and the acceptor answers it with a
/// `Greeting`. 3: control beats (`liveness.rs`), gossip says whether a
/// node drains, leadership hand-offs (`TakeLead`, `Drain`), scoring
/// commands carry their dedup rules. 4: Raft messages name the
/// incarnation they are for (`Fence`), and group membership changes
/// (`Membership`). 5: `TakeLead` names the vote it ends, and nodes ask
/// each other for their hot keys (`HotKeys`). 6: a follower asks its
/// leader for the read index (`ReadIndex`). 7: the board mover asks a
/// shard's leader for a frozen board (`ExportBoard`), and shards answer
/// `Moved` for boards they do not hold. 8: a hot key's row carries the CPU
/// its requests cost. 9: the entity mover asks for a frozen entity
/// (`ExportEntity`). Nodes of different versions
/// do not talk: a cluster moves to a new one all at once.
pub const VERSION: u8 = 9;
/// The largest handshake message either side reads: they are a few dozen
/// bytes (a refusal a sentence), and neither side has proved anything
/// yet, so neither may make the other hold more.
pub const MAX_HANDSHAKE_MSG: usize = 1024;
/// The largest frame either side accepts: an AppendEntries is capped at a
/// few MiB of log (`MAX_REPLICATION_READ_BYTES`), a snapshot chunk at
/// `snapshot_max_chunk_size`.
pub const MAX_FRAME: usize = 32 << 20;

/// A Raft group on the wire: a data shard's id, or the metadata group's.
pub type GroupId = u32;

const _: () = assert!(std::mem::size_of::<NodeId>() == std::mem::size_of::<ProtoNodeId>());

#[derive(Debug, Serialize, Deserialize)]
pub struct Hello {
    /// First, and one byte as encoded (a `u8` is), so that the acceptor
    /// can read it before it decodes the rest: a `Hello` of another
    /// version may have another layout.
    pub version: u8,
    pub from: NodeId,
    pub to: NodeId,
    pub nonce: [u8; 32],
    /// The dialer's shard count: the acceptor refuses another.
    pub shards: u32,
}

/// The acceptor's answer to a `Hello`: its half of the proof, or why it
/// will not go on (told before any proof, so the dialer can say why).
#[derive(Debug, Serialize, Deserialize)]
pub enum Greeting {
    Challenge(Challenge),
    Refused(String),
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Challenge {
    pub nonce: [u8; 32],
    pub proof: [u8; 32],
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ProofMsg {
    pub proof: [u8; 32],
}

#[derive(Debug, Serialize, Deserialize)]
pub enum Verdict {
    Accepted,
    Refused(String),
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Frame<T> {
    pub id: u64,
    pub body: T,
}

/// What one node asks another.
#[derive(Debug, Serialize, Deserialize)]
pub enum PeerRequest {
    AppendEntries {
        group: GroupId,
        to: Fence,
        rpc: AppendEntriesRequest<TypeConfig>,
    },
    Vote {
        group: GroupId,
        to: Fence,
        rpc: VoteRequest<NodeId>,
    },
    InstallSnapshot {
        group: GroupId,
        to: Fence,
        rpc: InstallSnapshotRequest<TypeConfig>,
    },
    /// A client request, served by the receiver as if a client had sent it
    /// there (it does not forward it again).
    Client(Request),
    /// A command for the receiver's replica of `group`, which it proposes if
    /// it leads (outbox delivery, scoring events of boards led elsewhere);
    /// `shed` is the priority class to shed by under overload.
    Propose {
        group: GroupId,
        cmd: Command,
        shed: Option<u8>,
    },
    /// The metadata group's applied index, after a read barrier (the
    /// receiver leads it): how far another node must catch up.
    MetaApplied,
    /// The sub-boards of a ranking on one shard the receiver leads.
    Boards {
        shard: GroupId,
        rank: u32,
        after: Option<Vec<u8>>,
        limit: u32,
    },
    /// The receiver's own view of its groups (for cluster status).
    Report,
    /// Whether a scoring event (`cmd`, one event on one sub-board of
    /// `group`, which the receiver leads) would apply, after the group's
    /// read barrier, changing nothing: the all-or-nothing check an edge
    /// makes on every board of an event before proposing it to any.
    CheckScore {
        group: GroupId,
        cmd: ScoreCmd,
    },
    /// The receiver's voter of `group` takes part in handing its leadership
    /// to `to` (`transfer.rs`): `to` campaigns once its lease of the old
    /// leader has run out, the others hold their election timers.
    TakeLead {
        group: GroupId,
        to: NodeId,
        /// The leader's last log index: the target campaigns once it has
        /// that much (a candidate behind would lose, and depose the leader).
        last: u64,
        /// The leader's vote: the target campaigns only while it follows it.
        vote: openraft::Vote<NodeId>,
    },
    /// The receiver hands away every leadership it holds and takes no new
    /// one until it restarts (`admin drain`).
    Drain,
    /// A change to the membership of `group`, which the receiver leads
    /// (`group_members.rs`); answered with where the group stands after it.
    Membership {
        group: GroupId,
        change: MembershipChange,
    },
    /// The receiver's `top` heaviest keys (`hot_keys.rs`).
    HotKeys {
        top: u32,
    },
    /// The commit index of `group`, which the receiver leads, once a
    /// quorum has confirmed it still leads (`follower_read.rs`).
    ReadIndex {
        group: GroupId,
    },
    /// The copy of a board frozen for a move on `group`, which the
    /// receiver leads (`board_mover.rs`).
    ExportBoard {
        group: GroupId,
        board: plaudit_proto::placement::BoardKey,
    },
    /// The copy of an entity frozen for a move on `group`, which the
    /// receiver leads (`entity_mover.rs`).
    ExportEntity {
        group: GroupId,
        key: plaudit_proto::placement::EntityKey,
    },
}

/// The incarnation a Raft message is meant for (`membership.rs`): a node
/// of another incarnation (its data directory made again since) refuses
/// it, so that it never votes or acknowledges entries as the member it
/// replaced, whose log it no longer has. 0: any (the sender does not know
/// the receiver's, as before members were recorded).
pub type Fence = plaudit_proto::membership::Incarnation;

/// What a `Membership` request asks of a group's leader.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MembershipChange {
    /// Nothing: only where the group stands.
    Look,
    /// Adds `node` (peer address `addr`) as a learner, if it is not in the
    /// group already.
    AddLearner { node: NodeId, addr: String },
    /// Makes `voters` the voters; the voters not among them leave the
    /// group (or stay as learners, with `retain`: the metadata group, which
    /// every member follows). The leader hands its leadership to one of
    /// them first if it is leaving. A change left half done (a joint
    /// configuration) is finished first.
    SetVoters { voters: Vec<NodeId>, retain: bool },
    /// Removes learner `node` (a move given up).
    RemoveLearner { node: NodeId },
}

/// Where a group's membership stands, as its leader sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct GroupMembers {
    pub leader: NodeId,
    pub voters: Vec<NodeId>,
    pub learners: Vec<NodeId>,
    /// A configuration change is half done.
    pub joint: bool,
    pub last_log: u64,
    /// `(node, matched index)` per follower and learner.
    pub matched: Vec<(NodeId, Option<u64>)>,
}

impl GroupMembers {
    /// How far `node` is behind the leader's log (`None`: not replicated to yet).
    pub fn behind(&self, node: NodeId) -> Option<u64> {
        let m = self.matched.iter().find(|(n, _)| *n == node)?.1?;
        Some(self.last_log.saturating_sub(m))
    }
}

/// The receiver's view of its replicas, for status.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GroupReport {
    pub group: GroupId,
    pub role: String,
    pub term: u64,
    pub leader: Option<NodeId>,
    pub applied: Option<u64>,
    pub last_log: Option<u64>,
    /// As the leader sees each follower: `(node, matched index)`.
    pub matched: Vec<(NodeId, Option<u64>)>,
    /// On the leader: `(node, bytes sent)` of each snapshot transfer begun,
    /// and the size of the group's newest snapshot.
    pub sending: Vec<(NodeId, u64)>,
    pub snapshot_bytes: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub enum PeerResponse {
    AppendEntries(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    InstallSnapshot(
        Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>,
    ),
    Client(Response),
    /// `None`: shed.
    Propose(Result<Option<CmdResult>, WireError>),
    MetaApplied(Result<u64, WireError>),
    Boards(Result<Vec<(Vec<u8>, u64)>, WireError>),
    Report(Vec<GroupReport>),
    /// The answer to `CheckScore`: the outer error is the request's
    /// (`NotLeader`, ...), the inner one the event's (it would overflow).
    CheckScore(Result<EventResult, WireError>),
    /// The receiver could not take the request at all (no such group here).
    Unavailable(String),
    /// The request was taken and may have run, but no answer can be given
    /// (it timed out, or the answer could not be encoded).
    Failed(String),
    /// Done, with nothing to say.
    Done,
    Membership(Result<GroupMembers, WireError>),
    HotKeys(Vec<plaudit_proto::hotkeys::HotKeyRow>),
    ReadIndex(Result<u64, WireError>),
    ExportBoard(Result<Box<plaudit_actors::rankings::residence::BoardCopy>, WireError>),
    ExportEntity(Result<Box<plaudit_actors::likes::residence::EntityCopy>, WireError>),
}

impl PeerRequest {
    /// Raft traffic (and status), served from its own budget on a connection.
    pub fn is_raft(&self) -> bool {
        matches!(
            self,
            PeerRequest::AppendEntries { .. }
                | PeerRequest::Vote { .. }
                | PeerRequest::InstallSnapshot { .. }
                | PeerRequest::Report
                | PeerRequest::TakeLead { .. }
        )
    }

    /// The answer to this request when the receiver is too busy to take it
    /// (nothing ran).
    pub fn overloaded(&self, why: String) -> PeerResponse {
        let e = WireError::overloaded(why);
        match self {
            PeerRequest::Client(_) => PeerResponse::Client(Response::Error(e)),
            PeerRequest::Propose { .. } => PeerResponse::Propose(Err(e)),
            PeerRequest::MetaApplied => PeerResponse::MetaApplied(Err(e)),
            PeerRequest::Boards { .. } => PeerResponse::Boards(Err(e)),
            PeerRequest::CheckScore { .. } => PeerResponse::CheckScore(Err(e)),
            PeerRequest::Membership { .. } => PeerResponse::Membership(Err(e)),
            _ => PeerResponse::Unavailable(e.message),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WireFault {
    #[error("connection closed")]
    Closed,
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("a frame of {0} bytes is over the limit")]
    TooLarge(usize),
    #[error("{0}")]
    Codec(#[from] codec::CodecError),
}

/// Writes one length-prefixed bincode message.
pub async fn write_msg<W: AsyncWrite + Unpin, T: Serialize>(
    w: &mut W,
    msg: &T,
) -> Result<(), WireFault> {
    let bytes = codec::to_bytes(msg)?;
    if bytes.len() > MAX_FRAME {
        return Err(WireFault::TooLarge(bytes.len()));
    }
    let mut out = Vec::with_capacity(4 + bytes.len());
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(&bytes);
    w.write_all(&out).await?;
    // Handshake messages are answered before anything else is written:
    // under TLS they must leave the session now.
    w.flush().await?;
    Ok(())
}

/// Encodes one message into `out` (for a writer that batches frames).
pub fn encode_msg<T: Serialize>(msg: &T, out: &mut Vec<u8>) -> Result<(), WireFault> {
    let bytes = codec::to_bytes(msg)?;
    if bytes.len() > MAX_FRAME {
        return Err(WireFault::TooLarge(bytes.len()));
    }
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(&bytes);
    Ok(())
}

/// Reads one length-prefixed message. The payload is read as it arrives
/// (the buffer grows with the bytes, not with the announced length).
pub async fn read_msg<R: AsyncRead + Unpin, T: serde::de::DeserializeOwned>(
    r: &mut R,
    buf: &mut Vec<u8>,
) -> Result<T, WireFault> {
    read_msg_max(r, buf, MAX_FRAME).await
}

/// `read_msg` with a smaller limit (handshake messages).
pub async fn read_msg_max<R: AsyncRead + Unpin, T: serde::de::DeserializeOwned>(
    r: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> Result<T, WireFault> {
    read_frame_max(r, buf, max).await?;
    decode_frame(buf)
}

/// Decodes a payload read by `read_frame_max`.
pub fn decode_frame<T: serde::de::DeserializeOwned>(buf: &[u8]) -> Result<T, WireFault> {
    // Strings bounded by the largest frame: a peer that has not yet
    // proved the secret must not make the node allocate what it announces.
    Ok(codec::from_bytes_within::<MAX_FRAME, _>(buf)?)
}

/// Reads one length-prefixed payload of at most `max` bytes into `buf`,
/// undecoded (the handshake looks at its version byte first).
pub async fn read_frame_max<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> Result<(), WireFault> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(WireFault::Closed),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > max {
        return Err(WireFault::TooLarge(len));
    }
    buf.clear();
    let got = (&mut *r).take(len as u64).read_to_end(buf).await?;
    if got != len {
        return Err(WireFault::Closed);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn messages_round_trip_and_oversized_ones_are_refused() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        let req = Frame { id: 7, body: PeerRequest::Client(Request::Ping) };
        write_msg(&mut a, &req).await.unwrap();
        let mut buf = Vec::new();
        let got: Frame<PeerRequest> = read_msg(&mut b, &mut buf).await.unwrap();
        assert_eq!(got.id, 7);
        assert!(matches!(got.body, PeerRequest::Client(Request::Ping)));

        // A length over the limit is refused before any payload is read.
        a.write_all(&((MAX_FRAME as u32) + 1).to_be_bytes()).await.unwrap();
        let err = read_msg::<_, Frame<PeerRequest>>(&mut b, &mut buf).await.unwrap_err();
        assert!(matches!(err, WireFault::TooLarge(_)), "{err}");
        drop(a);
        let err = read_msg::<_, Frame<PeerRequest>>(&mut b, &mut buf).await.unwrap_err();
        assert!(matches!(err, WireFault::Closed), "{err}");
    }

    #[tokio::test]
    async fn a_string_announcing_a_terabyte_is_refused_not_allocated() {
        // Eleven bytes that announce a `String` of 2^40 bytes: without the
        // bound, decoding aborts the process on the failed allocation.
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        let mut msg = vec![253];
        msg.extend_from_slice(&(1u64 << 40).to_le_bytes());
        msg.extend_from_slice(b"ab");
        a.write_all(&(msg.len() as u32).to_be_bytes()).await.unwrap();
        a.write_all(&msg).await.unwrap();
        let mut buf = Vec::new();
        let err = read_msg_max::<_, String>(&mut b, &mut buf, 256).await.unwrap_err();
        assert!(matches!(err, WireFault::Codec(_)), "{err}");
    }
}
