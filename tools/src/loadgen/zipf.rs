//! Key popularity: uniform or Zipf(s) over the dataset.
//!
//! Zipf uses rejection-inversion sampling (Hörmann & Derflinger, 1996): O(1) per sample and no
//! O(n) table, so it works for 10M+ keys.

use crate::rng::Rng;

/// How request keys are drawn from the dataset.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KeyDist {
    /// Every key equally likely.
    Uniform,
    /// Key of popularity rank r drawn with probability proportional to 1/r^s.
    Zipf(f64),
}

impl std::str::FromStr for KeyDist {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "uniform" {
            return Ok(KeyDist::Uniform);
        }
        if let Some(e) = s.strip_prefix("zipf:") {
            let e: f64 = e
                .parse()
                .map_err(|_| format!("bad zipf exponent in {s:?}"))?;
            if !(e.is_finite() && e > 0.0) {
                return Err(format!("zipf exponent must be > 0, got {e}"));
            }
            return Ok(KeyDist::Zipf(e));
        }
        Err(format!(
            "unknown distribution {s:?}: expected uniform or zipf:S"
        ))
    }
}

/// Draws indices in `0..n` following a [`KeyDist`].
#[derive(Clone, Debug)]
pub struct KeySampler {
    n: u64,
    zipf: Option<Zipf>,
    /// Rank r (0-based) maps to index `r * scatter mod n`: a bijection (scatter is coprime to n)
    /// that spreads hot keys over the file instead of piling them at its start.
    scatter: u64,
}

impl KeySampler {
    /// A sampler over `n > 0` items.
    pub fn new(n: u64, dist: KeyDist) -> KeySampler {
        assert!(n > 0, "empty key set");
        let zipf = match dist {
            KeyDist::Uniform => None,
            KeyDist::Zipf(s) => Some(Zipf::new(n, s)),
        };
        KeySampler {
            n,
            zipf,
            scatter: coprime_near(n, 0x9E37_79B9_7F4A_7C15 % n.max(2)),
        }
    }

    /// Popularity rank (0 = hottest) of the next request; uniform ranks are indices directly.
    #[inline]
    pub fn sample_rank(&self, rng: &mut Rng) -> u64 {
        match &self.zipf {
            None => rng.below(self.n),
            Some(z) => z.sample(rng) - 1,
        }
    }

    /// Dataset index of popularity rank `rank`.
    #[inline]
    pub fn index_of_rank(&self, rank: u64) -> u64 {
        (rank as u128 * self.scatter as u128 % self.n as u128) as u64
    }

    /// Dataset index of the next request.
    #[inline]
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        self.index_of_rank(self.sample_rank(rng))
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The first value >= `start` (at least 1) that is coprime to `n`.
fn coprime_near(n: u64, start: u64) -> u64 {
    let mut m = start.max(1);
    while gcd(m, n) != 1 {
        m += 1;
    }
    m
}

/// Zipf over ranks 1..=n with exponent s > 0.
#[derive(Clone, Debug)]
struct Zipf {
    n: f64,
    exponent: f64,
    h_integral_x1: f64,
    h_integral_n: f64,
    s: f64,
}

impl Zipf {
    fn new(n: u64, exponent: f64) -> Zipf {
        assert!(exponent > 0.0);
        let mut z = Zipf {
            n: n as f64,
            exponent,
            h_integral_x1: 0.0,
            h_integral_n: 0.0,
            s: 0.0,
        };
        z.h_integral_x1 = z.h_integral(1.5) - 1.0;
        z.h_integral_n = z.h_integral(n as f64 + 0.5);
        z.s = 2.0 - z.h_integral_inverse(z.h_integral(2.5) - z.h(2.0));
        z
    }

    fn sample(&self, rng: &mut Rng) -> u64 {
        loop {
            let u = self.h_integral_n + rng.unit_f64() * (self.h_integral_x1 - self.h_integral_n);
            let x = self.h_integral_inverse(u);
            let k = (x + 0.5).floor().clamp(1.0, self.n);
            if k - x <= self.s || u >= self.h_integral(k + 0.5) - self.h(k) {
                return k as u64;
            }
        }
    }

    fn h(&self, x: f64) -> f64 {
        (-self.exponent * x.ln()).exp()
    }

    fn h_integral(&self, x: f64) -> f64 {
        let log_x = x.ln();
        helper2((1.0 - self.exponent) * log_x) * log_x
    }

    fn h_integral_inverse(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.exponent)).max(-1.0);
        (helper1(t) * x).exp()
    }
}

/// ln(1+x)/x, accurate near 0.
fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// (e^x - 1)/x, accurate near 0.
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

    fn rank_freqs(n: u64, s: f64, draws: usize) -> Vec<f64> {
        let sampler = KeySampler::new(n, KeyDist::Zipf(s));
        let mut rng = Rng::new(11);
        let mut counts = vec![0u64; n as usize];
        for _ in 0..draws {
            counts[sampler.sample_rank(&mut rng) as usize] += 1;
        }
        counts.iter().map(|&c| c as f64 / draws as f64).collect()
    }

    fn expected(n: u64, s: f64, rank1: u64) -> f64 {
        let norm: f64 = (1..=n).map(|k| (k as f64).powf(-s)).sum();
        (rank1 as f64).powf(-s) / norm
    }

    #[test]
    fn zipf_matches_theory() {
        for s in [0.99, 1.0, 1.2, 0.5] {
            let f = rank_freqs(1000, s, 400_000);
            for r in [1u64, 2, 3, 10, 100] {
                let e = expected(1000, s, r);
                let got = f[(r - 1) as usize];
                let tol = 0.1 * e + 0.0005;
                assert!((got - e).abs() < tol, "s={s} rank {r}: got {got}, want {e}");
            }
        }
    }

    #[test]
    fn zipf_large_n_in_range_and_skewed() {
        let n = 10_000_000;
        let sampler = KeySampler::new(n, KeyDist::Zipf(0.99));
        let mut rng = Rng::new(5);
        let mut top100 = 0;
        for _ in 0..100_000 {
            let r = sampler.sample_rank(&mut rng);
            assert!(r < n);
            if r < 100 {
                top100 += 1;
            }
        }
        // Theory: top 100 of 10M at s=0.99 carry ~30% of requests.
        assert!((20_000..40_000).contains(&top100), "{top100}");
    }

    #[test]
    fn uniform_is_flat_and_scatter_is_a_bijection() {
        let sampler = KeySampler::new(10, KeyDist::Uniform);
        let mut rng = Rng::new(2);
        let mut c = [0u32; 10];
        for _ in 0..100_000 {
            c[sampler.sample(&mut rng) as usize] += 1;
        }
        assert!(c.iter().all(|&x| (9_000..11_000).contains(&x)), "{c:?}");
        for n in [1u64, 2, 10, 12, 97, 1000, 1 << 20] {
            let s = KeySampler::new(n, KeyDist::Zipf(1.0));
            let mut seen = std::collections::HashSet::new();
            for r in 0..n.min(5000) {
                assert!(seen.insert(s.index_of_rank(r)));
            }
        }
    }

    #[test]
    fn parse_dist() {
        assert_eq!("uniform".parse::<KeyDist>().unwrap(), KeyDist::Uniform);
        assert_eq!("zipf:0.99".parse::<KeyDist>().unwrap(), KeyDist::Zipf(0.99));
        assert!("zipf:0".parse::<KeyDist>().is_err());
        assert!("zipf:x".parse::<KeyDist>().is_err());
        assert!("normal".parse::<KeyDist>().is_err());
    }
}
