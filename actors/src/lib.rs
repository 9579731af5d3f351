//! Plaudit's domain cores and the virtual actors that host them.
//!
//! ```text
//! ShardActor (one per shard replica; hosts the Raft state machine's apply)
//!  ├── UserActor   (biz, mid)       like state (the truth), user list, received total
//!  ├── EntityActor (biz, entity)    counts, owner, likers (derived from deltas)
//!  └── BoardHost   (rank, type_key) one sub-board: rank order, scores, event-id memory
//!                                   (not an actor: held and applied by the shard itself)
//! ```
//!
//! The cores in `likes` and `rankings` are plain structs (no IO, no async)
//! and carry the logic; actors activate them from storage, feed them
//! commands and hand the resulting changes back to the shard, which stages a
//! whole batch at once.
//! Actors are virtual: activated on first use, passivated when idle or when a
//! shard is over its active-actor budget.
//!
//! Modules: `command` (what the Raft log carries), `coalesce` (a leader's
//! batch, merged per board member before proposing), `likes` and `rankings`
//! (cores), `residence` (a shard's side of moving an actor), `directory` (business and ranking registry), `active` (LRU
//! active set), `user_actor`, `entity_actor`, `board_host`, `shard` (the
//! scheduler, with one apply module per command family), `error` (a
//! rejected request vs a broken replica).

pub mod active;
pub mod active_boards;
pub mod board_host;
pub mod coalesce;
pub mod command;
pub mod directory;
pub mod entity_actor;
pub mod error;
pub mod likes;
pub mod rankings;
pub mod residence;
pub mod shard;
pub mod user_actor;

pub use command::{Batch, CmdResult, Command, Delta, EntityDelta};
pub use directory::Directory;
pub use error::{Fatal, ShardError};
pub use shard::{ApplyEntry, OutboxSignal, ShardActor, ShardConfig, ShardGauges, ShardHandle};
