//! Per-API-key rate limiting: a token bucket per key, kept as GCRA (one "theoretical arrival
//! time" per key instead of a token count and a refill timestamp).
//!
//! A key may make `burst` requests at once, then one every `1 / per_second` seconds; an idle
//! key refills at that rate up to `burst`. The clock is injected (`now: Instant`), so tests are
//! deterministic. One `RateLimiter` is one budget: a server that checks on several cores gives
//! each key the configured rate per core unless it divides the rate or checks on one core.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::keys::KeyId;
use super::problem::Problem;

/// Default sustained rate of link creations per API key: 20 per second, far above any
/// interactive use and enough for scripted imports, while a leaked key can add at most
/// ~1.7 M links a day per limiter before someone revokes it.
pub const DEFAULT_CREATES_PER_SECOND: u32 = 20;

/// Default burst per API key: 100 requests at once (5 s of the default rate), so a batch job
/// that fires a page of creates in parallel is not throttled.
pub const DEFAULT_BURST: u32 = 100;

/// Default number of keys a limiter tracks: 4096. Keys are operator-issued, so real
/// deployments have far fewer; the cap bounds memory (~100 KiB) whatever happens.
pub const DEFAULT_MAX_TRACKED_KEYS: usize = 4096;

/// Rate limit settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimitConfig {
    /// Sustained requests per second per key (>= 1).
    pub per_second: u32,
    /// Requests a rested key may make at once (>= 1).
    pub burst: u32,
    /// Most keys tracked at once (>= 1); see [`RateLimiter::check`] for what happens past it.
    pub max_tracked_keys: usize,
}

impl Default for RateLimitConfig {
    fn default() -> RateLimitConfig {
        RateLimitConfig {
            per_second: DEFAULT_CREATES_PER_SECOND,
            burst: DEFAULT_BURST,
            max_tracked_keys: DEFAULT_MAX_TRACKED_KEYS,
        }
    }
}

/// A rejected [`RateLimitConfig`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RateLimitConfigError {
    #[error("rate limit must be at least 1 request per second")]
    ZeroRate,
    #[error("burst must be at least 1")]
    ZeroBurst,
    #[error("max tracked keys must be at least 1")]
    ZeroKeys,
}

/// How long a throttled client must wait before its next request can pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryAfter {
    /// Exact wait (> 0).
    pub wait: Duration,
}

impl RetryAfter {
    /// The wait in whole seconds, rounded up, at least 1: the value for `Retry-After`.
    pub fn secs_ceil(&self) -> u64 {
        let whole = self.wait.as_secs() + u64::from(self.wait.subsec_nanos() > 0);
        whole.max(1)
    }
}

impl From<RetryAfter> for Problem {
    fn from(r: RetryAfter) -> Problem {
        Problem::rate_limited(r.secs_ceil())
    }
}

/// Token buckets keyed by API key id.
#[derive(Debug)]
pub struct RateLimiter {
    /// Time one request costs: 1 s / per_second.
    interval: Duration,
    /// How far ahead of now a key's arrival time may run: interval * burst.
    window: Duration,
    max_tracked_keys: usize,
    /// Per key, when its bucket is next full again ("theoretical arrival time").
    tat: HashMap<KeyId, Instant>,
}

impl RateLimiter {
    /// A limiter with `config`.
    pub fn new(config: RateLimitConfig) -> Result<RateLimiter, RateLimitConfigError> {
        if config.per_second == 0 {
            return Err(RateLimitConfigError::ZeroRate);
        }
        if config.burst == 0 {
            return Err(RateLimitConfigError::ZeroBurst);
        }
        if config.max_tracked_keys == 0 {
            return Err(RateLimitConfigError::ZeroKeys);
        }
        let interval = Duration::from_secs(1) / config.per_second;
        Ok(RateLimiter {
            interval,
            // <= 1 s * u32::MAX: cannot overflow a Duration.
            window: interval * config.burst,
            max_tracked_keys: config.max_tracked_keys,
            tat: HashMap::with_capacity(config.max_tracked_keys.min(DEFAULT_MAX_TRACKED_KEYS)),
        })
    }

    /// Takes one request from `key`'s bucket at `now`, or says how long to wait.
    ///
    /// When a new key arrives and `max_tracked_keys` are tracked, keys whose buckets are full
    /// are forgotten first (nothing is lost: an untracked key starts full); if every bucket is
    /// in use, the key closest to full is forgotten, which hands it back at most the small rest
    /// of its burst.
    pub fn check(&mut self, key: KeyId, now: Instant) -> Result<(), RetryAfter> {
        let tat = self.tat.get(&key).map_or(now, |&t| t.max(now));
        let next = tat + self.interval;
        let ahead = next - now;
        if ahead > self.window {
            return Err(RetryAfter {
                wait: ahead - self.window,
            });
        }
        if !self.tat.contains_key(&key) && self.tat.len() >= self.max_tracked_keys {
            self.make_room(now);
        }
        self.tat.insert(key, next);
        Ok(())
    }

    /// Number of keys currently tracked.
    pub fn tracked_keys(&self) -> usize {
        self.tat.len()
    }

    fn make_room(&mut self, now: Instant) {
        self.tat.retain(|_, tat| *tat > now);
        if self.tat.len() >= self.max_tracked_keys {
            if let Some(nearest_full) = self.tat.iter().min_by_key(|(_, t)| **t).map(|(k, _)| *k) {
                self.tat.remove(&nearest_full);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> KeyId {
        KeyId::parse(s).unwrap()
    }

    fn limiter(per_second: u32, burst: u32, max_tracked_keys: usize) -> RateLimiter {
        RateLimiter::new(RateLimitConfig {
            per_second,
            burst,
            max_tracked_keys,
        })
        .unwrap()
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn burst_then_steady_rate() {
        let mut rl = limiter(10, 3, 16);
        let t0 = Instant::now();
        let k = key("a");
        for _ in 0..3 {
            assert_eq!(rl.check(k, t0), Ok(()));
        }
        assert_eq!(rl.check(k, t0), Err(RetryAfter { wait: 100 * MS }));
        assert_eq!(rl.check(k, t0 + 99 * MS), Err(RetryAfter { wait: MS }));
        assert_eq!(rl.check(k, t0 + 100 * MS), Ok(()));
        assert!(rl.check(k, t0 + 100 * MS).is_err());
        // Steady: one every 100 ms passes indefinitely.
        for i in 2..50 {
            assert_eq!(rl.check(k, t0 + i * 100 * MS), Ok(()), "tick {i}");
            assert!(rl.check(k, t0 + i * 100 * MS).is_err(), "tick {i}");
        }
    }

    #[test]
    fn rejected_requests_cost_nothing() {
        let mut rl = limiter(10, 1, 16);
        let t0 = Instant::now();
        let k = key("a");
        assert!(rl.check(k, t0).is_ok());
        for i in 0..100 {
            assert!(rl.check(k, t0 + i * MS).is_err());
        }
        assert!(rl.check(k, t0 + 100 * MS).is_ok());
    }

    #[test]
    fn idle_key_refills_up_to_burst_only() {
        let mut rl = limiter(10, 4, 16);
        let t0 = Instant::now();
        let k = key("a");
        for _ in 0..4 {
            rl.check(k, t0).unwrap();
        }
        // An hour idle refills to 4, not more.
        let later = t0 + Duration::from_secs(3600);
        for _ in 0..4 {
            assert!(rl.check(k, later).is_ok());
        }
        assert!(rl.check(k, later).is_err());
        // Half refilled after 200 ms.
        let t2 = later + 200 * MS;
        assert!(rl.check(k, t2).is_ok());
        assert!(rl.check(k, t2).is_ok());
        assert!(rl.check(k, t2).is_err());
    }

    #[test]
    fn keys_are_independent() {
        let mut rl = limiter(1, 2, 16);
        let t0 = Instant::now();
        let (a, b) = (key("a"), key("b"));
        rl.check(a, t0).unwrap();
        rl.check(a, t0).unwrap();
        assert!(rl.check(a, t0).is_err());
        assert!(rl.check(b, t0).is_ok());
        assert!(rl.check(b, t0).is_ok());
        assert_eq!(rl.check(b, t0).unwrap_err().wait, Duration::from_secs(1));
    }

    #[test]
    fn uneven_intervals() {
        // 3 per second: 333_333_333 ns each.
        let mut rl = limiter(3, 1, 16);
        let t0 = Instant::now();
        let k = key("a");
        rl.check(k, t0).unwrap();
        let e = rl.check(k, t0).unwrap_err();
        assert_eq!(e.wait, Duration::from_nanos(333_333_333));
        assert_eq!(e.secs_ceil(), 1);
        assert!(rl.check(k, t0 + e.wait).is_ok());
    }

    #[test]
    fn eviction_prefers_full_buckets() {
        let mut rl = limiter(1, 2, 2);
        let t0 = Instant::now();
        let (a, b, c) = (key("a"), key("b"), key("c"));
        rl.check(a, t0).unwrap();
        rl.check(a, t0).unwrap(); // a: exhausted until t0 + 2 s.
        rl.check(b, t0).unwrap(); // b: one used, full again at t0 + 1 s.
                                  // At t0 + 1.5 s, b is full again and a is not: c evicts b.
        let t1 = t0 + 1500 * MS;
        rl.check(c, t1).unwrap();
        assert_eq!(rl.tracked_keys(), 2);
        // a still remembers its debt: one token back (refilled 1.5 of 2), not the full burst.
        assert!(rl.check(a, t1).is_ok());
        assert!(rl.check(a, t1).is_err());
    }

    #[test]
    fn eviction_when_all_busy_drops_nearest_full() {
        let mut rl = limiter(1, 3, 2);
        let t0 = Instant::now();
        let (a, b, c) = (key("a"), key("b"), key("c"));
        for _ in 0..3 {
            rl.check(a, t0).unwrap(); // full at t0 + 3 s
        }
        rl.check(b, t0).unwrap(); // full at t0 + 1 s
        rl.check(c, t0).unwrap(); // evicts b
        assert_eq!(rl.tracked_keys(), 2);
        assert!(rl.check(a, t0).is_err());
        // b comes back with a full bucket (it had used only one token).
        for _ in 0..3 {
            assert!(rl.check(b, t0 + MS).is_ok());
        }
    }

    #[test]
    fn config_validation_and_retry_after() {
        let bad = |per_second, burst, max_tracked_keys| {
            RateLimiter::new(RateLimitConfig {
                per_second,
                burst,
                max_tracked_keys,
            })
            .unwrap_err()
        };
        assert_eq!(bad(0, 1, 1), RateLimitConfigError::ZeroRate);
        assert_eq!(bad(1, 0, 1), RateLimitConfigError::ZeroBurst);
        assert_eq!(bad(1, 1, 0), RateLimitConfigError::ZeroKeys);
        assert!(RateLimiter::new(RateLimitConfig::default()).is_ok());
        let r = |ms| RetryAfter {
            wait: Duration::from_millis(ms),
        };
        assert_eq!(r(1).secs_ceil(), 1);
        assert_eq!(r(1000).secs_ceil(), 1);
        assert_eq!(r(1001).secs_ceil(), 2);
        assert_eq!(r(60_000).secs_ceil(), 60);
        let p = Problem::from(r(2500));
        assert_eq!((p.status, p.retry_after_s()), (429, Some(3)));
    }
}
