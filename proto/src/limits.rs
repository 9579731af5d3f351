//! Request bounds. Every request is checked against these before it reaches a
//! shard, so one client cannot make a node do unbounded work.

/// Request id 0 is reserved: the node uses it to answer a frame whose id it
/// could not recover. Clients number requests from 1.
///
/// Largest frame payload (version byte + envelope) a node or client accepts.
/// A 500-entity batch encodes to about 5 KiB; 1 MiB leaves room for future
/// commands without letting one frame pin much memory.
pub const MAX_FRAME_LEN: usize = 1 << 20;
/// Most entities in one `status` or `counts` request.
pub const MAX_BATCH: usize = 500;
/// Most items in one page of `user_likes` or `likers`.
pub const MAX_PAGE: u32 = 100;
/// Longest business name, in bytes.
pub const MAX_NAME_LEN: usize = 64;
/// Most recent items a business may keep in memory per user or liker list.
pub const MAX_LIST_MEMORY: u32 = 10_000;
/// The largest business id (`u32::MAX` is reserved). An id the node assigns
/// is one above the highest in use, or the lowest free one when nothing is
/// free above it (`plaudit_actors::directory::IdRule`): an explicit id at
/// the top never uses up assignment.
pub const MAX_BIZ_ID: u32 = u32::MAX - 1;
