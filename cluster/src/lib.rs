//! Plaudit's replication layer: one openraft group per shard (plus a
//! metadata group for the business registry), proposal batching, batched
//! linearizable reads, outbox delivery between shards, and request routing.
//!
//! ```text
//! Engine::handle(Request)
//!   ├─ write ─> Group (proposer: many commands -> one Raft entry) ─> openraft
//!   │             ─> ShardStateMachine::apply ─> ShardActor (actors crate) ─> sled
//!   └─ read  ─> Group (reader: many reads -> one read-index check) ─> stored state
//! Engine::answer_now(Request): a single node's reads, in place, no future (`inline.rs`)
//! Delivery (per shard): outbox ─> Deliver on the target shard ─> Ack on the source
//! ```
//!
//! Groups replicate over the peer transport (`raft_net`, `peer`); the
//! shard map and membership changes are in `placement` and `control`.

mod actor_budget;
pub mod actor_mover;
mod auth;
pub mod board_limit;
pub mod board_memo;
pub mod board_mover;
mod bootstrap;
pub mod control;
pub mod cpu_meter;
pub mod disk;
mod dispatch;
pub mod durable;
pub mod engine;
pub mod entity_mover;
mod failover;
mod fault;
pub mod follower_read;
pub mod group;
mod group_apply;
mod group_members;
mod group_watch;
pub mod hash_buckets;
pub mod hot_keys;
pub mod hot_move;
mod hot_relief;
mod hot_sketch;
pub mod identity;
mod inline;
pub mod layout;
mod leaders;
pub mod leadership_watch;
pub mod lease;
pub mod lifecycle;
pub mod liveness;
pub mod member_ops;
mod membership;
pub mod memory;
mod mover;
mod nearest_read;
pub mod outbox;
pub mod peer;
mod peer_service;
pub mod placement;
mod proposer;
pub mod raft_net;
mod rankings;
pub mod rebalance;
mod registry_read;
mod replicas;
pub mod retention;
pub mod router;
pub mod score_route;
pub mod shard_count;
pub mod snapshot_file;
pub mod snapshot_policy;
pub mod snapshot_send;
pub mod staged;
pub mod state_machine;
mod status;
pub mod transfer;
pub mod types;

pub use engine::{ClusterConfig, Engine, EngineConfig, ShardStats};
pub use group::GroupConfig;
