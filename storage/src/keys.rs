//! Key layouts of applied state. Ids are big-endian so that sled's byte order
//! is numeric order and range scans walk a user's or an entity's list by time.
//!
//! Every key of a business tree starts with the shard id, so one shard's
//! slice of a business can be scanned (snapshots) or dropped (moves) alone.
//!
//! | kind | key | value |
//! | --- | --- | --- |
//! | state | `shard, 1, mid, entity` | `v1, state u8, mtime u64` |
//! | user list | `shard, 2, mid, mtime, entity` | empty |
//! | likers | `shard, 3, entity, mtime, mid` | empty |
//! | counts | `shard, 4, entity` | `v1, likes u64, dislikes u64, owner u64 (0 = none)` |
//! | received | `shard, 5, owner` | `v1, total u64` |
//!
//! The values are encoded and read in `likes.rs`; the builders here are the
//! only place the keys are spelled out.

use crate::state::{corrupt, Result};
use plaudit_proto::{EntityId, Millis, UserId};

pub const KIND_STATE: u8 = 1;
pub const KIND_USER_LIST: u8 = 2;
pub const KIND_LIKERS: u8 = 3;
pub const KIND_COUNTS: u8 = 4;
pub const KIND_RECEIVED: u8 = 5;

/// The format version byte every stored value starts with.
pub const VALUE_V1: u8 = 1;

pub(crate) struct Key(Vec<u8>);

impl Key {
    pub(crate) fn new(shard: u32, kind: u8) -> Key {
        let mut v = Vec::with_capacity(29);
        v.extend_from_slice(&shard.to_be_bytes());
        v.push(kind);
        Key(v)
    }
    pub(crate) fn u64(mut self, x: u64) -> Key {
        self.0.extend_from_slice(&x.to_be_bytes());
        self
    }
    pub(crate) fn into_vec(self) -> Vec<u8> {
        self.0
    }
}

pub fn state(shard: u32, mid: UserId, entity: EntityId) -> Vec<u8> {
    Key::new(shard, KIND_STATE).u64(mid).u64(entity).into_vec()
}

/// The prefix of every state of one user (then the entity, big-endian).
pub fn state_prefix(shard: u32, mid: UserId) -> Vec<u8> {
    Key::new(shard, KIND_STATE).u64(mid).into_vec()
}

pub fn user_item(shard: u32, mid: UserId, mtime: Millis, entity: EntityId) -> Vec<u8> {
    Key::new(shard, KIND_USER_LIST).u64(mid).u64(mtime).u64(entity).into_vec()
}

pub fn user_list_prefix(shard: u32, mid: UserId) -> Vec<u8> {
    Key::new(shard, KIND_USER_LIST).u64(mid).into_vec()
}

pub fn liker(shard: u32, entity: EntityId, mtime: Millis, mid: UserId) -> Vec<u8> {
    Key::new(shard, KIND_LIKERS).u64(entity).u64(mtime).u64(mid).into_vec()
}

pub fn likers_prefix(shard: u32, entity: EntityId) -> Vec<u8> {
    Key::new(shard, KIND_LIKERS).u64(entity).into_vec()
}

pub fn counts(shard: u32, entity: EntityId) -> Vec<u8> {
    Key::new(shard, KIND_COUNTS).u64(entity).into_vec()
}

pub fn received(shard: u32, owner: UserId) -> Vec<u8> {
    Key::new(shard, KIND_RECEIVED).u64(owner).into_vec()
}

pub fn shard_prefix(shard: u32) -> [u8; 4] {
    shard.to_be_bytes()
}

/// Reads the big-endian u64 at `at`; callers pass keys of a known layout.
pub(crate) fn read_u64(bytes: &[u8], at: usize) -> Option<u64> {
    bytes.get(at..at + 8).map(|b| {
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        u64::from_be_bytes(a)
    })
}

/// The shard id a state key starts with.
pub(crate) fn read_u32(bytes: &[u8]) -> Option<u32> {
    bytes.get(..4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// The `v1, u64` value of received totals, inbox seqs and outbox next seqs.
pub(crate) fn u64_value(x: u64) -> [u8; 9] {
    let mut v = [0u8; 9];
    v[0] = VALUE_V1;
    v[1..].copy_from_slice(&x.to_be_bytes());
    v
}

pub(crate) fn decode_u64_value(v: &[u8], what: &'static str) -> Result<u64> {
    match v {
        [VALUE_V1, rest @ ..] if rest.len() == 8 => Ok(read_u64(rest, 0).unwrap_or(0)),
        _ => Err(corrupt(what, v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_keys_sort_by_time_then_id() {
        let a = user_item(3, 9, 100, 5);
        let b = user_item(3, 9, 100, 6);
        let c = user_item(3, 9, 101, 1);
        assert!(a < b && b < c);
        assert!(a.starts_with(&user_list_prefix(3, 9)));
        assert!(!a.starts_with(&user_list_prefix(3, 10)));
    }

    #[test]
    fn kinds_do_not_overlap() {
        assert_ne!(state(1, 2, 3)[..5], counts(1, 2)[..5]);
        assert_eq!(read_u64(&counts(1, 77), 5), Some(77));
    }
}
