//! A Zipf sampler over ranks `1..=n` with exponent `s` (P(k) ∝ k^-s), by
//! rejection-inversion (Hörmann & Derflinger 1996, as in Apache Commons RNG):
//! O(1) memory and expected O(1) time for any `n`. `s == 0` is uniform.

use crate::rng::FastRng;

#[derive(Debug, Clone)]
pub struct Zipf {
    n: u64,
    s: f64,
    h_integral_x1: f64,
    h_integral_n: f64,
    threshold: f64,
}

impl Zipf {
    pub fn new(n: u64, s: f64) -> Result<Zipf, String> {
        if n == 0 {
            return Err("zipf: n must be at least 1".into());
        }
        if !s.is_finite() || s < 0.0 {
            return Err(format!("zipf: exponent must be >= 0, got {s}"));
        }
        let mut z = Zipf { n, s, h_integral_x1: 0.0, h_integral_n: 0.0, threshold: 0.0 };
        if s > 0.0 {
            z.h_integral_x1 = z.h_integral(1.5) - 1.0;
            z.h_integral_n = z.h_integral(n as f64 + 0.5);
            z.threshold = 2.0 - z.h_integral_inverse(z.h_integral(2.5) - z.h(2.0));
        }
        Ok(z)
    }

    pub fn n(&self) -> u64 {
        self.n
    }

    /// A rank in `1..=n`; rank 1 is the most frequent.
    pub fn sample(&self, rng: &mut FastRng) -> u64 {
        if self.s == 0.0 {
            return 1 + rng.below(self.n);
        }
        loop {
            let u = self.h_integral_n + rng.unit_f64() * (self.h_integral_x1 - self.h_integral_n);
            let x = self.h_integral_inverse(u);
            let k = (x + 0.5).floor().clamp(1.0, self.n as f64);
            if k - x <= self.threshold || u >= self.h_integral(k + 0.5) - self.h(k) {
                return k as u64;
            }
        }
    }

    fn h(&self, x: f64) -> f64 {
        (-self.s * x.ln()).exp()
    }

    /// ∫ h = (x^(1-s) - 1) / (1-s), stable near s = 1.
    fn h_integral(&self, x: f64) -> f64 {
        let log_x = x.ln();
        helper2((1.0 - self.s) * log_x) * log_x
    }

    fn h_integral_inverse(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.s)).max(-1.0);
        (helper1(t) * x).exp()
    }
}

/// ln(1+x)/x, stable near 0.
fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// (e^x - 1)/x, stable near 0.
fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn histogram(z: &Zipf, samples: usize, seed: u64) -> Vec<u64> {
        let mut rng = FastRng::seed(seed);
        let mut h = vec![0u64; z.n() as usize + 1];
        for _ in 0..samples {
            let k = z.sample(&mut rng);
            assert!((1..=z.n()).contains(&k), "rank {k} out of range");
            h[k as usize] += 1;
        }
        h
    }

    fn expected(n: u64, s: f64) -> Vec<f64> {
        let w: Vec<f64> = (1..=n).map(|k| (k as f64).powf(-s)).collect();
        let sum: f64 = w.iter().sum();
        w.into_iter().map(|x| x / sum).collect()
    }

    /// Pearson's chi-square over all ranks must stay well below the critical
    /// value for n-1 degrees of freedom (a loose ~mean + 6 sigma bound).
    fn assert_fits(n: u64, s: f64) {
        let samples = 400_000;
        let h = histogram(&Zipf::new(n, s).unwrap(), samples, 42 + n);
        let p = expected(n, s);
        let chi: f64 = (0..n as usize)
            .map(|i| {
                let e = p[i] * samples as f64;
                let d = h[i + 1] as f64 - e;
                d * d / e
            })
            .sum();
        let df = (n - 1) as f64;
        assert!(chi < df + 6.0 * (2.0 * df).sqrt(), "n={n} s={s}: chi2 {chi} for df {df}");
    }

    #[test]
    fn matches_the_zipf_law() {
        for s in [0.5, 0.99, 1.0, 1.2, 2.0] {
            assert_fits(50, s);
        }
        assert_fits(1000, 0.99);
    }

    #[test]
    fn zero_exponent_is_uniform() {
        assert_fits(100, 0.0);
    }

    #[test]
    fn large_n_is_skewed_and_in_range() {
        let n = 100_000;
        let z = Zipf::new(n, 0.99).unwrap();
        let mut rng = FastRng::seed(1);
        let samples = 200_000;
        let mut top = 0;
        let mut top100 = 0;
        for _ in 0..samples {
            let k = z.sample(&mut rng);
            assert!((1..=n).contains(&k));
            top += (k == 1) as u32;
            top100 += (k <= 100) as u32;
        }
        let p = expected(n, 0.99);
        let p_top = p[0];
        let p_top100: f64 = p[..100].iter().sum();
        let got_top = top as f64 / samples as f64;
        let got_top100 = top100 as f64 / samples as f64;
        assert!((got_top - p_top).abs() < 0.1 * p_top, "top {got_top} vs {p_top}");
        assert!((got_top100 - p_top100).abs() < 0.03 * p_top100, "{got_top100} vs {p_top100}");
    }

    #[test]
    fn single_rank_and_bad_params() {
        let z = Zipf::new(1, 0.99).unwrap();
        let mut rng = FastRng::seed(3);
        assert!((0..100).all(|_| z.sample(&mut rng) == 1));
        assert!(Zipf::new(0, 1.0).is_err());
        assert!(Zipf::new(10, -1.0).is_err());
        assert!(Zipf::new(10, f64::NAN).is_err());
    }
}
