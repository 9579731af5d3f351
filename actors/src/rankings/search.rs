//! Binary search over one chunk of a board's order (`order.rs`) that
//! prefetches the probes it may make next, so the cache misses of a cold
//! chunk overlap instead of coming one after another.
//!
//! Why: on the rankings mix (1,000 boards growing to ~1,000 members each)
//! `OrderList::insert` was 10.8% of the node, and 81% of its samples sat on
//! one instruction, the key compare of the chunk's binary search: each of
//! its ~8 probes into a chunk of up to 256 keys of 24 bytes (6 KiB) is a
//! miss whose address depends on the compare before. Here each step
//! prefetches the probe two steps ahead (four candidate places), so by the
//! time a probe is made its line is on its way.
//!
//! The result is `slice::binary_search`'s, index for index: this is the
//! same algorithm (the standard library's branchless loop), with hints.

use plaudit_proto::prefetch::prefetch;
use std::cmp::Ordering;

/// `s.binary_search(k)`: `Ok` with an index of `k` in sorted `s`, or `Err`
/// with where it would go to keep `s` sorted.
pub fn search<K: Ord>(s: &[K], k: &K) -> Result<usize, usize> {
    let mut size = s.len();
    if size == 0 {
        return Err(0);
    }
    let mut base = 0usize;
    let at = |i: usize| s.as_ptr().wrapping_add(i);
    // The two places the second probe may be; each step below asks for
    // the probe after its next one.
    let first = size / 2;
    let second = (size - first) / 2;
    prefetch(at(second));
    prefetch(at(first + second));
    while size > 1 {
        let half = size / 2;
        let mid = base + half;
        // After this step `base` is `base` or `mid` and the size `rest`;
        // the probe after the next one is at one of four places (the next
        // one's two were asked for a step ago). Prefetching them now
        // overlaps their misses with this step's and the next one's.
        let rest = size - half;
        let next = rest / 2;
        let later = (rest - next) / 2;
        for b in [base, mid] {
            prefetch(at(b + later));
            prefetch(at(b + next + later));
        }
        // Same as `core::slice::binary_search_by`: the compare decides
        // with a conditional move rather than a branch.
        let greater = s[mid].cmp(k) == Ordering::Greater;
        base = if greater { base } else { mid };
        size = rest;
    }
    match s[base].cmp(k) {
        Ordering::Equal => Ok(base),
        Ordering::Less => Err(base + 1),
        Ordering::Greater => Err(base),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn small_slices_and_every_position() {
        assert_eq!(search::<u32>(&[], &5), Err(0));
        assert_eq!(search(&[5], &5), Ok(0));
        assert_eq!(search(&[5], &4), Err(0));
        assert_eq!(search(&[5], &6), Err(1));
        let s: Vec<u32> = (0..300).map(|i| i * 2).collect();
        for n in 0..s.len() {
            let part = &s[..n];
            for k in 0..(2 * n as u32 + 2) {
                assert_eq!(search(part, &k), part.binary_search(&k), "n {n} k {k}");
            }
        }
    }

    proptest! {
        #[test]
        fn finds_what_binary_search_finds(
            mut s in prop::collection::vec((0u64..50, 0u64..4), 0..600),
            k in (0u64..52, 0u64..5),
        ) {
            s.sort_unstable();
            s.dedup();
            prop_assert_eq!(search(&s, &k), s.binary_search(&k));
        }

        /// With repeated keys (which a board's order never has) the index
        /// of an equal key may differ from std's, but the contract holds.
        #[test]
        fn keeps_the_contract_with_repeated_keys(
            mut s in prop::collection::vec(0u8..20, 0..300),
            k in 0u8..21,
        ) {
            s.sort_unstable();
            match search(&s, &k) {
                Ok(i) => prop_assert_eq!(s[i], k),
                Err(i) => {
                    prop_assert!(s[..i].iter().all(|&x| x < k));
                    prop_assert!(s[i..].iter().all(|&x| x > k));
                }
            }
        }
    }
}
