//! A fast keyed hash for maps whose integer keys clients choose (event
//! ids, entity and user ids): murmur3's 64-bit finalizer over each word,
//! seeded at random per process, instead of SipHash. SipHash was a tenth
//! of a hot board's apply (three hashes per event) and shows in every
//! counts lookup; the seed keeps a client from aiming its ids at one
//! bucket without knowing it. Only memory layout depends on the seed,
//! never a result, so replicas need not agree on it.

use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

#[derive(Debug, Clone, Copy)]
pub struct KeyedHash {
    seed: u64,
}

impl Default for KeyedHash {
    fn default() -> Self {
        static SEED: OnceLock<u64> = OnceLock::new();
        let seed =
            *SEED.get_or_init(|| std::collections::hash_map::RandomState::new().hash_one(0u64));
        KeyedHash { seed }
    }
}

impl BuildHasher for KeyedHash {
    type Hasher = KeyedHasher;
    fn build_hasher(&self) -> KeyedHasher {
        KeyedHasher { state: self.seed }
    }
}

/// Mixes each word written into the state.
#[derive(Debug, Clone, Copy)]
pub struct KeyedHasher {
    state: u64,
}

impl Hasher for KeyedHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
        // Lengths matter: "ab" then "c" must differ from "a" then "bc".
        self.write_u64(bytes.len() as u64);
    }

    fn write_u8(&mut self, v: u8) {
        self.write_u64(u64::from(v));
    }

    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }

    fn write_u64(&mut self, v: u64) {
        let mut h = self.state ^ v;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^= h >> 33;
        self.state = h;
    }

    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }

    fn finish(&self) -> u64 {
        self.state
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn spreads_sequential_and_strided_ids_over_buckets() {
        let h = KeyedHash::default();
        for stride in [1u64, 8, 1 << 20, 1 << 40] {
            // The low 10 bits pick one of 1,024 buckets: 10,000 ids should
            // reach nearly all of them.
            let buckets: HashSet<u64> =
                (0..10_000u64).map(|i| h.hash_one(i * stride) & 1023).collect();
            assert!(buckets.len() > 1000, "stride {stride}: {} buckets", buckets.len());
        }
    }

    #[test]
    fn tuples_of_ids_differ_by_each_field() {
        let h = KeyedHash::default();
        assert_ne!(h.hash_one((1u32, 2u32, 3u64)), h.hash_one((2u32, 1u32, 3u64)));
        assert_ne!(h.hash_one((1u32, 2u32, 3u64)), h.hash_one((1u32, 2u32, 4u64)));
    }
}
