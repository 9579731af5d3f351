//! A fast keyed hash for maps whose integer keys clients choose (event
//! ids, entity and user ids): murmur3's 64-bit finalizer over each word,
//! seeded at random per process, instead of SipHash. SipHash was a tenth
//! of a hot board's apply (three hashes per event) and shows in every
//! counts lookup; the seed keeps a client from aiming its ids at one
//! bucket without knowing it. Only memory layout depends on the seed,
//! never a result, so replicas need not agree on it.
//!
//! Each word costs one folded multiply (the 128-bit product's halves
//! xored, as foldhash and ahash do) and `finish` one more; the murmur3
//! finalizer it used per word was three dependent multiply-shift steps,
//! and a scoring event's member (ranking, type key, item, rules: eight
//! words) was hashed through that chain to coalesce it (a fifth of the
//! proposer's time on a hot board).

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
        self.state = folded_multiply(self.state ^ v, WORD);
    }

    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }

    fn finish(&self) -> u64 {
        folded_multiply(self.state, FINISH)
    }
}

/// Odd constants with well-spread bits (2^64 over the golden ratio, and
/// murmur3's first finalizer multiplier).
const WORD: u64 = 0x9e37_79b9_7f4a_7c15;
const FINISH: u64 = 0xff51_afd7_ed55_8ccd;

/// The 128-bit product's halves xored: every input bit reaches the
/// middle of the result, in one multiply.
#[inline]
fn folded_multiply(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
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
    fn the_seed_moves_every_key() {
        let (a, b) = (KeyedHasher { state: 1 }, KeyedHasher { state: 2 });
        let hash = |mut h: KeyedHasher, v: u64| {
            h.write_u64(v);
            h.finish()
        };
        let same = (0..1000u64).filter(|&v| hash(a, v) & 1023 == hash(b, v) & 1023).count();
        assert!(same < 20, "{same} of 1000 keys kept their bucket under another seed");
    }

    #[test]
    fn tuples_of_ids_differ_by_each_field() {
        let h = KeyedHash::default();
        assert_ne!(h.hash_one((1u32, 2u32, 3u64)), h.hash_one((2u32, 1u32, 3u64)));
        assert_ne!(h.hash_one((1u32, 2u32, 3u64)), h.hash_one((1u32, 2u32, 4u64)));
    }
}
