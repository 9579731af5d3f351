//! Ranking cores: the natural time windows an event lands in, the ordered
//! board of one sub-board, and its bounded memory of recent event ids.
//!
//! - `window` (from proto): granularities in a fixed UTC offset, window starts, `type_id`s;
//! - `order`: an order-statistic list (rank and position in O(log n));
//! - `board`: a sub-board: aggregation, tie-break modes, length cap;
//! - `dedup`: the event ids a sub-board applied within its window, bounded;
//! - `id_set`: the open-addressing set of ids it looks them up in;
//! - `route`: an event's admission (dimensions, filters) and its sub-boards;
//! - `all_or_nothing`: when and how an event is checked on all its boards first;
//! - `residence`: a shard's side of moving a sub-board to another shard.

pub mod all_or_nothing;
pub mod board;
pub mod dedup;
mod fenwick;
pub mod id_set;
pub mod order;
pub mod residence;
pub mod route;
pub mod search;

/// Windows and type ids are part of the wire contract; they live in proto.
pub use plaudit_proto::window;
