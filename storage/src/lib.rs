//! Plaudit storage on sled: the Raft log of every shard group, made durable by
//! one group-commit flusher per node, and the key layouts of the state the
//! shards apply.
//!
//! ```text
//! openraft ──append──> SledLogStore ──insert (readable now)──> sled tree raft/<group>/log
//!                          └──submit(callback)──> GroupCommit thread: drain, flush, fdatasync, complete
//! ```
//!
//! Modules:
//! - `group_commit`: the flusher thread that turns many `append`s into one fsync;
//! - `log_store`: openraft `RaftLogStorage` over sled, generic over the type config;
//! - `keys`: the big-endian key layouts of applied state;
//! - `state`: `StateStore` (reads, staging, checkpoints) and `WriteSet`
//!   (one applied batch's writes across trees);
//! - `pending`: the per-shard overlay of staged writes not yet in sled;
//! - `boards`: the key layout of ranking sub-boards.

pub mod boards;
pub mod group_commit;
pub mod keys;
pub mod log_store;
mod pending;
pub mod state;

pub use boards::BoardMeta;
pub use state::{CheckpointPolicy, CountsRec, StateError, StateStore, WriteSet};
