//! Identifier types. Plain integers: they are hashed, ordered big-endian in
//! storage keys and printed by the CLI, so a newtype would only add noise.

/// A business (tenant): one product surface that has likes.
pub type BizId = u32;
/// A thing that can be liked, unique within its business.
pub type EntityId = u64;
/// A user account id (`mid`).
pub type UserId = u64;
/// Milliseconds since the Unix epoch, stamped by the shard leader.
pub type Millis = u64;
/// A shard index in `0..shard_count`.
pub type ShardId = u32;
