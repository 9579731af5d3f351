//! The like service's pure cores. No IO, no clocks, no async: the actors feed
//! them state loaded from storage and persist what they return.
//!
//! - `transition`: the state table of one `(user, entity)` pair;
//! - `recent`: the bounded newest-first window of a list kept in memory;
//! - `user`: a user's likes (the truth) and received total;
//! - `entity`: an entity's counts, owner and likers (derived);
//! - `residence`: what a moving or moved entity's shard does with its deltas.

pub mod entity;
pub mod recent;
pub mod residence;
pub mod transition;
pub mod user;
