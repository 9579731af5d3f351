//! Plaudit's replication layer: one openraft group per shard (plus a
//! metadata group for the business registry), proposal batching, batched
//! linearizable reads, outbox delivery between shards, and request routing.
//!
//! ```text
//! Engine::handle(Request)
//!   ├─ write ─> Group (proposer: many commands -> one Raft entry) ─> openraft
//!   │             ─> ShardStateMachine::apply ─> ShardActor (actors crate) ─> sled
//!   └─ read  ─> Group (reader: many reads -> one read-index check) ─> stored state
//! Delivery (per shard): outbox ─> Deliver on the target shard ─> Ack on the source
//! ```
//!
//! This step runs every group with this node as its only member; the Raft
//! transport between nodes, the shard map and membership changes come with
//! the cluster step and slot in behind `network` and `engine`.

mod auth;
mod bootstrap;
pub mod control;
pub mod disk;
mod dispatch;
pub mod engine;
mod failover;
pub mod group;
mod inline;
pub mod outbox;
pub mod peer;
mod peer_service;
pub mod placement;
pub mod raft_net;
mod rankings;
mod registry_read;
pub mod retention;
pub mod router;
pub mod snapshot_file;
pub mod state_machine;
mod status;
pub mod types;

pub use engine::{ClusterConfig, Engine, EngineConfig, ShardStats};
pub use group::GroupConfig;
