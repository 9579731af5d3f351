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
//! - `state`: `StateStore` (reads) and `WriteSet` (atomic multi-tree commits).

pub mod boards;
pub mod group_commit;
pub mod keys;
pub mod log_store;
pub mod state;

pub use boards::BoardMeta;
pub use state::{CountsRec, StateError, StateStore, WriteSet};
