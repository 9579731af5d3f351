//! Stable routing: which shard owns a key. Shared by the node and smart
//! clients, so it must never change for a given shard count.

use crate::ids::{BizId, ShardId};

/// splitmix64's finaliser: cheap, well mixed, and fixed forever.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The shard of routing key `(biz, id)`: users route by `(biz, mid)`,
/// entities by `(biz, entity)`.
pub fn shard_of(biz: BizId, id: u64, shards: u32) -> ShardId {
    let h = mix(id ^ mix(u64::from(biz).wrapping_add(0x9e37_79b9_7f4a_7c15)));
    // Lemire's multiply-shift maps the hash onto 0..shards without modulo bias.
    ((u128::from(h) * u128::from(shards.max(1))) >> 64) as ShardId
}

/// The shard of a ranking sub-board, by its binary type id: the boards of
/// one ranking spread over the shards like entities do.
pub fn board_shard(rank: u32, type_key: &[u8], shards: u32) -> ShardId {
    let h = type_key.iter().fold(0u64, |h, &b| mix(h ^ u64::from(b)));
    shard_of(rank, h, shards)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_is_stable_and_in_range() {
        assert_eq!(shard_of(1, 42, 16), shard_of(1, 42, 16));
        let mut seen = [0u32; 16];
        for id in 0..16_000 {
            let s = shard_of(7, id, 16);
            seen[s as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 700 && n < 1300), "{seen:?}");
        assert_eq!(shard_of(1, 1, 1), 0);
    }
}
