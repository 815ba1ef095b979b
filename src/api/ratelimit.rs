//! Per-API-key rate limiting of creates: a token bucket per key, kept as GCRA (one
//! "theoretical arrival time" per key instead of a token count and a refill timestamp), shared
//! by every core of the node.
//!
//! A key may make `burst` requests at once, then one every `1 / per_second` seconds; an idle
//! key refills at that rate up to `burst`. The budget is the node's (issue 26: "per API key
//! across all cores"): each key has one slot of two atomic words in a fixed table, and a core
//! takes from it with a compare-and-swap, so no lock is taken and connections on every core
//! draw from the same bucket. Limits are a key's own when it was created with some
//! (`ricochet keys create --create-rate --create-burst`), else the server's. The clock is
//! injected (`now: Instant`), so tests are deterministic.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::problem::Problem;

/// Default sustained rate of link creations per API key: 20 per second, far above any
/// interactive use and enough for scripted imports, while a leaked key can add at most
/// ~1.7 M links a day before someone revokes it.
pub const DEFAULT_CREATES_PER_SECOND: u32 = 20;

/// Default burst per API key: 100 requests at once (5 s of the default rate), so a batch job
/// that fires a page of creates in parallel is not throttled.
pub const DEFAULT_BURST: u32 = 100;

/// Keys the node's budget table tracks: 16,384 slots of 16 bytes (256 KiB). Keys are
/// operator-issued, so real deployments have far fewer; a key that finds the table full (more
/// keys than this have created links since start) draws from one shared overflow bucket with
/// the server's limits, so it is limited, never unlimited.
pub const MAX_TRACKED_KEYS: usize = 16_384;

/// A rate: sustained creates per second and the burst a rested key may make at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RateLimitConfig {
    /// Sustained requests per second per key (>= 1).
    pub per_second: u32,
    /// Requests a rested key may make at once (>= 1).
    pub burst: u32,
}

impl Default for RateLimitConfig {
    fn default() -> RateLimitConfig {
        RateLimitConfig {
            per_second: DEFAULT_CREATES_PER_SECOND,
            burst: DEFAULT_BURST,
        }
    }
}

impl RateLimitConfig {
    /// Checks both figures are at least 1.
    pub fn validate(self) -> Result<RateLimitConfig, RateLimitConfigError> {
        if self.per_second == 0 {
            return Err(RateLimitConfigError::ZeroRate);
        }
        if self.burst == 0 {
            return Err(RateLimitConfigError::ZeroBurst);
        }
        Ok(self)
    }

    /// Nanoseconds one request costs, and how far ahead of now a key's arrival time may run.
    fn interval_window_ns(self) -> (u64, u64) {
        let interval = 1_000_000_000 / u64::from(self.per_second.max(1));
        (interval, interval * u64::from(self.burst.max(1)))
    }
}

/// A rejected [`RateLimitConfig`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RateLimitConfigError {
    #[error("rate limit must be at least 1 request per second")]
    ZeroRate,
    #[error("burst must be at least 1")]
    ZeroBurst,
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

/// One key's bucket: the key (its id as 8 bytes; 0 = free) and its theoretical arrival time in
/// nanoseconds since the limiter's epoch.
#[derive(Debug, Default)]
struct Slot {
    key: AtomicU64,
    tat_ns: AtomicU64,
}

/// The node's token buckets, one per API key, shared by every core (`Arc`).
#[derive(Debug)]
pub struct RateLimiter {
    /// The server's limits, for keys created without their own.
    default: RateLimitConfig,
    epoch: Instant,
    /// [`MAX_TRACKED_KEYS`] slots (open addressing, linear probing), then the overflow slot.
    slots: Box<[Slot]>,
}

impl RateLimiter {
    /// A limiter whose keys without limits of their own get `default`.
    pub fn new(default: RateLimitConfig) -> Result<RateLimiter, RateLimitConfigError> {
        RateLimiter::with_capacity(default, MAX_TRACKED_KEYS)
    }

    fn with_capacity(
        default: RateLimitConfig,
        capacity: usize,
    ) -> Result<RateLimiter, RateLimitConfigError> {
        Ok(RateLimiter {
            default: default.validate()?,
            epoch: Instant::now(),
            slots: (0..=capacity).map(|_| Slot::default()).collect(),
        })
    }

    /// Takes one request from `key`'s bucket at `now` (with the key's own limits, if it has
    /// some), or says how long to wait. Lock-free: a compare-and-swap on the key's slot.
    /// `key` is the API key's id as one word (`keys::KeyId::to_u64`, never 0).
    pub fn check(
        &self,
        key: u64,
        own: Option<RateLimitConfig>,
        now: Instant,
    ) -> Result<(), RetryAfter> {
        let (slot, limits) = match self.slot_of(key) {
            Some(s) => (s, own.unwrap_or(self.default)),
            None => (self.slots.last().expect("an overflow slot"), self.default),
        };
        let (interval, window) = limits.interval_window_ns();
        let now_ns = u64::try_from(now.saturating_duration_since(self.epoch).as_nanos())
            .unwrap_or(u64::MAX / 2);
        let mut old = slot.tat_ns.load(Ordering::Acquire);
        loop {
            let next = old.max(now_ns) + interval;
            let ahead = next - now_ns;
            if ahead > window {
                let wait = Duration::from_nanos(ahead - window);
                return Err(RetryAfter { wait });
            }
            match slot
                .tat_ns
                .compare_exchange_weak(old, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(()),
                Err(seen) => old = seen,
            }
        }
    }

    /// `key`'s slot, claimed on first use; `None` when the table is full.
    fn slot_of(&self, key: u64) -> Option<&Slot> {
        debug_assert_ne!(key, 0, "a key id is never empty");
        let n = self.slots.len() - 1;
        // Fibonacci hashing of the id's bytes.
        let home = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % n;
        for i in 0..n {
            let slot = &self.slots[(home + i) % n];
            match slot.key.load(Ordering::Acquire) {
                k if k == key => return Some(slot),
                0 => match slot
                    .key
                    .compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => return Some(slot),
                    Err(k) if k == key => return Some(slot),
                    Err(_) => {}
                },
                _ => {}
            }
        }
        None
    }

    /// Number of keys with a slot.
    pub fn tracked_keys(&self) -> usize {
        let n = self.slots.len() - 1;
        self.slots[..n]
            .iter()
            .filter(|s| s.key.load(Ordering::Relaxed) != 0)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> u64 {
        crate::api::keys::KeyId::parse(s).unwrap().to_u64()
    }

    fn limiter(per_second: u32, burst: u32) -> RateLimiter {
        RateLimiter::new(RateLimitConfig { per_second, burst }).unwrap()
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn burst_then_steady_rate() {
        let rl = limiter(10, 3);
        let t0 = Instant::now();
        let k = key("a");
        for _ in 0..3 {
            assert_eq!(rl.check(k, None, t0), Ok(()));
        }
        assert_eq!(rl.check(k, None, t0), Err(RetryAfter { wait: 100 * MS }));
        assert_eq!(
            rl.check(k, None, t0 + 99 * MS),
            Err(RetryAfter { wait: MS })
        );
        assert_eq!(rl.check(k, None, t0 + 100 * MS), Ok(()));
        assert!(rl.check(k, None, t0 + 100 * MS).is_err());
        // Steady: one every 100 ms passes indefinitely.
        for i in 2..50 {
            assert_eq!(rl.check(k, None, t0 + i * 100 * MS), Ok(()), "tick {i}");
            assert!(rl.check(k, None, t0 + i * 100 * MS).is_err(), "tick {i}");
        }
    }

    #[test]
    fn rejected_requests_cost_nothing() {
        let rl = limiter(10, 1);
        let t0 = Instant::now();
        let k = key("a");
        assert!(rl.check(k, None, t0).is_ok());
        for i in 0..100 {
            assert!(rl.check(k, None, t0 + i * MS).is_err());
        }
        assert!(rl.check(k, None, t0 + 100 * MS).is_ok());
    }

    #[test]
    fn idle_key_refills_up_to_burst_only() {
        let rl = limiter(10, 4);
        let t0 = Instant::now();
        let k = key("a");
        for _ in 0..4 {
            rl.check(k, None, t0).unwrap();
        }
        // An hour idle refills to 4, not more.
        let later = t0 + Duration::from_secs(3600);
        for _ in 0..4 {
            assert!(rl.check(k, None, later).is_ok());
        }
        assert!(rl.check(k, None, later).is_err());
        // Half refilled after 200 ms.
        let t2 = later + 200 * MS;
        assert!(rl.check(k, None, t2).is_ok());
        assert!(rl.check(k, None, t2).is_ok());
        assert!(rl.check(k, None, t2).is_err());
    }

    #[test]
    fn keys_are_independent_and_a_key_may_have_its_own_limits() {
        let rl = limiter(1, 2);
        let t0 = Instant::now();
        let (a, b, c) = (key("a"), key("b"), key("c"));
        rl.check(a, None, t0).unwrap();
        rl.check(a, None, t0).unwrap();
        assert!(rl.check(a, None, t0).is_err());
        assert!(rl.check(b, None, t0).is_ok());
        assert!(rl.check(b, None, t0).is_ok());
        assert_eq!(
            rl.check(b, None, t0).unwrap_err().wait,
            Duration::from_secs(1)
        );
        let own = Some(RateLimitConfig {
            per_second: 100,
            burst: 5,
        });
        for _ in 0..5 {
            assert!(rl.check(c, own, t0).is_ok());
        }
        assert_eq!(rl.check(c, own, t0).unwrap_err().wait, 10 * MS);
    }

    #[test]
    fn uneven_intervals() {
        // 3 per second: 333_333_333 ns each.
        let rl = limiter(3, 1);
        let t0 = Instant::now();
        let k = key("a");
        rl.check(k, None, t0).unwrap();
        let e = rl.check(k, None, t0).unwrap_err();
        assert_eq!(e.wait, Duration::from_nanos(333_333_333));
        assert_eq!(e.secs_ceil(), 1);
        assert!(rl.check(k, None, t0 + e.wait).is_ok());
    }

    #[test]
    fn a_full_table_sends_new_keys_to_one_shared_bucket() {
        let rl = RateLimiter::with_capacity(
            RateLimitConfig {
                per_second: 1,
                burst: 2,
            },
            2,
        )
        .unwrap();
        let t0 = Instant::now();
        rl.check(key("a"), None, t0).unwrap();
        rl.check(key("b"), None, t0).unwrap();
        assert_eq!(rl.tracked_keys(), 2);
        // c and d share the overflow bucket (with the server's limits): limited, together.
        let big = Some(RateLimitConfig {
            per_second: 1000,
            burst: 1000,
        });
        assert!(rl.check(key("c"), big, t0).is_ok());
        assert!(rl.check(key("d"), big, t0).is_ok());
        assert!(rl.check(key("c"), big, t0).is_err());
        assert!(
            rl.check(key("a"), None, t0).is_ok(),
            "a keeps its own bucket"
        );
    }

    /// Cores take from one bucket concurrently: exactly `burst` of many simultaneous creates
    /// pass, however the threads interleave.
    #[test]
    fn concurrent_takers_share_one_budget_exactly() {
        let rl = std::sync::Arc::new(limiter(1, 250));
        let t0 = Instant::now();
        let passed: usize = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    let rl = rl.clone();
                    s.spawn(move || {
                        (0..1000)
                            .filter(|_| rl.check(key("k"), None, t0).is_ok())
                            .count()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(passed, 250);
    }

    #[test]
    fn config_validation_and_retry_after() {
        let bad = |per_second, burst| {
            RateLimiter::new(RateLimitConfig { per_second, burst }).unwrap_err()
        };
        assert_eq!(bad(0, 1), RateLimitConfigError::ZeroRate);
        assert_eq!(bad(1, 0), RateLimitConfigError::ZeroBurst);
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
