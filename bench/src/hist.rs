//! A log-linear latency histogram: exact below 256, then 128 linear
//! sub-buckets per power of two (relative error under 0.8%). Fixed size
//! (~59 KiB), allocation-free recording, mergeable across workers.

const SUB_BITS: u32 = 7;
const SUB: u64 = 1 << SUB_BITS; // 128 sub-buckets per power of two
const BUCKETS: usize = ((64 - SUB_BITS) as usize + 1) * SUB as usize;

#[derive(Clone)]
pub struct Histogram {
    counts: Box<[u64]>,
    total: u64,
    min: u64,
    max: u64,
    sum: u128,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram")
            .field("total", &self.total)
            .field("min", &self.min)
            .field("max", &self.max)
            .finish()
    }
}

fn index_of(v: u64) -> usize {
    if v < 2 * SUB {
        return v as usize;
    }
    let msb = 63 - v.leading_zeros();
    let shift = msb - SUB_BITS;
    ((shift as u64 + 1) * SUB + ((v >> shift) - SUB)) as usize
}

/// The inclusive value range a bucket covers.
fn bounds_of(i: usize) -> (u64, u64) {
    let i = i as u64;
    if i < 2 * SUB {
        return (i, i);
    }
    let shift = i / SUB - 1;
    let low = (SUB + i % SUB) << shift;
    (low, low + ((1u64 << shift) - 1))
}

impl Histogram {
    pub fn new() -> Histogram {
        Histogram {
            counts: vec![0; BUCKETS].into_boxed_slice(),
            total: 0,
            min: u64::MAX,
            max: 0,
            sum: 0,
        }
    }

    pub fn record(&mut self, v: u64) {
        self.counts[index_of(v)] += 1;
        self.total += 1;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.sum += v as u128;
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.total += other.total;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.sum += other.sum;
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    pub fn max(&self) -> u64 {
        if self.total == 0 {
            0
        } else {
            self.max
        }
    }

    pub fn mean(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.sum as f64 / self.total as f64
        }
    }

    /// The value at quantile `q` in [0, 1]: the smallest recorded value with
    /// at least `ceil(q * count)` values at or below it, to within a bucket
    /// (reported as the bucket's midpoint, clamped to the observed min/max).
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (lo, hi) = bounds_of(i);
                return (lo + (hi - lo) / 2).clamp(self.min, self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::FastRng;

    fn reference(sorted: &[u64], q: f64) -> u64 {
        let rank = ((q * sorted.len() as f64).ceil() as usize).max(1);
        sorted[rank - 1]
    }

    #[test]
    fn buckets_are_contiguous_and_tight() {
        let mut prev_hi = None::<u64>;
        for i in 0..BUCKETS {
            let (lo, hi) = bounds_of(i);
            if let Some(p) = prev_hi {
                assert_eq!(lo, p + 1, "gap before bucket {i}");
            }
            assert_eq!(index_of(lo), i);
            assert_eq!(index_of(hi), i);
            assert!((hi - lo) as f64 <= lo as f64 / 127.0, "bucket {i} too wide");
            prev_hi = Some(hi);
        }
        assert_eq!(prev_hi, Some(u64::MAX));
    }

    #[test]
    fn quantiles_match_a_sorted_vector() {
        let mut rng = FastRng::seed(9);
        for dist in 0..3 {
            let mut h = Histogram::new();
            let mut v = Vec::new();
            for _ in 0..50_000 {
                let x = match dist {
                    0 => rng.below(1000),
                    1 => 50_000 + rng.below(2_000_000),
                    // long-tailed: exponential-ish spread over many magnitudes
                    _ => (1000.0 * (-rng.unit_f64().max(1e-12).ln()).powi(3)) as u64,
                };
                h.record(x);
                v.push(x);
            }
            v.sort_unstable();
            for q in [0.0, 0.01, 0.25, 0.5, 0.9, 0.99, 0.999, 0.9999, 1.0] {
                let want = reference(&v, q) as f64;
                let got = h.quantile(q) as f64;
                assert!(
                    (got - want).abs() <= want * 0.01 + 1.0,
                    "dist {dist} q {q}: got {got}, want {want}"
                );
            }
            assert_eq!(h.count(), v.len() as u64);
            assert_eq!(h.max(), *v.last().unwrap());
        }
    }

    #[test]
    fn merging_equals_recording_everything_once() {
        let mut rng = FastRng::seed(11);
        let mut parts = vec![Histogram::new(), Histogram::new(), Histogram::new()];
        let mut all = Histogram::new();
        let mut v = Vec::new();
        for i in 0..30_000 {
            let x = rng.below(10_000_000);
            parts[i % 3].record(x);
            all.record(x);
            v.push(x);
        }
        let mut merged = Histogram::new();
        for p in &parts {
            merged.merge(p);
        }
        v.sort_unstable();
        for q in [0.5, 0.99, 0.999] {
            assert_eq!(merged.quantile(q), all.quantile(q));
            let want = reference(&v, q) as f64;
            assert!((merged.quantile(q) as f64 - want).abs() <= want * 0.01);
        }
        assert_eq!(merged.count(), 30_000);
        assert!((merged.mean() - all.mean()).abs() < 1e-6);
    }

    #[test]
    fn empty_and_small_values() {
        let h = Histogram::new();
        assert_eq!(h.quantile(0.99), 0);
        assert_eq!(h.max(), 0);
        let mut h = Histogram::new();
        for x in [3, 3, 7, 200] {
            h.record(x);
        }
        assert_eq!(h.quantile(0.5), 3);
        assert_eq!(h.quantile(0.75), 7);
        assert_eq!(h.quantile(1.0), 200);
    }
}
