//! A fast keyed hash for maps whose integer keys clients choose (event
//! ids, entity and user ids): a folded multiply per word, keyed at random
//! per process, instead of SipHash. SipHash was a tenth
//! of a hot board's apply (three hashes per event) and shows in every
//! counts lookup; the seed keeps a client from aiming its ids at one
//! bucket without knowing it. Only memory layout depends on the seed,
//! never a result, so replicas need not agree on it.
//!
//! Each word costs one folded multiply by the process's key (the 128-bit
//! product's halves xored, as foldhash and ahash do) and `finish` one more; the murmur3
//! finalizer it used per word was three dependent multiply-shift steps,
//! and a scoring event's member (ranking, type key, item, rules: eight
//! words) was hashed through that chain to coalesce it (a fifth of the
//! proposer's time on a hot board).

use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

#[derive(Debug, Clone, Copy)]
pub struct KeyedHash {
    /// The state a hash starts from, and the (odd) multiplier of each word:
    /// both operands of the multiply are keyed, as in foldhash.
    seed: u64,
    key: u64,
}

impl Default for KeyedHash {
    fn default() -> Self {
        static KEYS: OnceLock<(u64, u64)> = OnceLock::new();
        let (seed, key) = *KEYS.get_or_init(|| {
            let random = std::collections::hash_map::RandomState::new();
            (random.hash_one(0u64), random.hash_one(1u64) | 1)
        });
        KeyedHash { seed, key }
    }
}

impl BuildHasher for KeyedHash {
    type Hasher = KeyedHasher;
    fn build_hasher(&self) -> KeyedHasher {
        KeyedHasher { state: self.seed, key: self.key }
    }
}

/// Mixes each word written into the state.
#[derive(Debug, Clone, Copy)]
pub struct KeyedHasher {
    state: u64,
    key: u64,
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
        self.state = folded_multiply(self.state ^ v, self.key);
    }

    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }

    fn finish(&self) -> u64 {
        folded_multiply(self.state, FINISH)
    }
}

/// An odd constant with well-spread bits (murmur3's first finalizer
/// multiplier): the last step mixes whatever the keyed steps left.
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
        let a = KeyedHash { seed: 1, key: 0x9e37_79b9_7f4a_7c15 };
        let b = KeyedHash { seed: 2, key: 0x9e37_79b9_7f4a_7c15 };
        let c = KeyedHash { seed: 1, key: 0x2545_f491_4f6c_dd1d };
        let differ = |x: &KeyedHash, y: &KeyedHash| {
            (0..1000u64).filter(|&v| x.hash_one(v) & 1023 == y.hash_one(v) & 1023).count()
        };
        let same = differ(&a, &b).max(differ(&a, &c));
        assert!(same < 20, "{same} of 1000 keys kept their bucket under another seed");
    }

    #[test]
    fn tuples_of_ids_differ_by_each_field() {
        let h = KeyedHash::default();
        assert_ne!(h.hash_one((1u32, 2u32, 3u64)), h.hash_one((2u32, 1u32, 3u64)));
        assert_ne!(h.hash_one((1u32, 2u32, 3u64)), h.hash_one((1u32, 2u32, 4u64)));
    }
}
