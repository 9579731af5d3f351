//! Plaudit storage: the Raft log of every shard group in files of its own,
//! made durable by one group-commit flusher per node, and the state the
//! shards apply, in memory (durable as snapshot files plus the log).
//!
//! ```text
//! openraft ──append──> FileLogStore (one per group) ──buffer (readable now)──> Wal: raft/wal-*.log (all groups)
//!                          └──submit_wal(callback)──> GroupCommit thread: drain, pwrite, fdatasync, complete
//! ```
//!
//! Modules:
//! - `group_commit`: the flusher thread that turns many `append`s into one fsync;
//! - `wal`: the node's write-ahead log: every group's records in shared segments;
//! - `file_log`: openraft `RaftLogStorage` for one group over the `Wal`;
//! - `sled_log`: reads the Raft logs that data directories written before
//!   the WAL kept in sled trees, for `file_log` to move in;
//! - `state`: `StateStore` (reads, staging, checkpoints) and `WriteSet` (one
//!   applied batch's writes across trees);
//! - `pending`: the per-shard overlay of staged writes not yet in the trees;
//! - `merge`: the walk over tree and staged entries that every scan takes;
//! - `mem_tree`: one ordered in-memory tree of applied state;
//! - `trees`: the trees of applied state and the maps of their handles;
//! - `legacy`: reads the state older data directories kept in sled trees;
//! - `counts_cache`: the in-memory read cache of entity counts;
//! - `states_cache`: the in-memory read cache of users' states (for status);
//! - `keys`: the big-endian key layouts of like state;
//! - `likes`: like states, lists, counts and received totals: encoders and reads;
//! - `boards`: the key layout of ranking sub-boards, its encoders and reads;
//! - `shard_meta`: a shard's meta tree: applied log id, membership, inbox, outbox;
//! - `registry`: the registry tree of businesses and rankings;
//! - `snapshot`: a shard's state streamed to a snapshot file from a consistent
//!   point (`freeze`), and installed from one.

pub mod board_image;
pub mod boards;
mod commit_epoch;
mod compact;
mod counts_cache;
pub mod disk_space;
pub mod file_log;
pub mod group_commit;
pub mod keys;
mod legacy;
mod likes;
mod mem_tree;
mod merge;
mod pending;
mod recent;
mod registry;
pub mod runtime_idle;
mod shard_meta;
pub mod sled_log;
pub mod snapshot;
pub mod state;
mod states_cache;
mod trees;
pub mod wal;
mod wal_spare;

pub use board_image::BoardImage;
pub use boards::BoardMeta;
pub use state::{CheckpointPolicy, CountsRec, StateError, StateStore, WriteSet};
