//! A core's clocks, read once per loop turn: monotonic time since the core started, and the
//! wall clock (for `Date` and expiry) re-read once per second.

use crate::http::date::DateCache;
use std::time::{Instant, SystemTime};

/// One core's view of the time during a loop turn.
pub struct Clock {
    started: Instant,
    /// Monotonic microseconds since the core started.
    pub now_us: u64,
    /// Monotonic milliseconds since the core started.
    pub now_ms: u64,
    /// Unix seconds (wall clock).
    pub now_s: u64,
    /// The `Date` header value.
    pub date: DateCache,
    /// When to read the wall clock again.
    next_wall_ms: u64,
}

impl Clock {
    /// A fresh reading of the monotonic clock, in µs on `now_us`'s scale (one vDSO call; for
    /// the few places that need better than the turn's time, such as a batch being sent).
    #[inline]
    pub fn precise_us(&self) -> u64 {
        self.started.elapsed().as_micros() as u64
    }

    pub fn new() -> Clock {
        let mut c = Clock {
            started: Instant::now(),
            now_us: 0,
            now_ms: 0,
            now_s: 0,
            date: DateCache::new(SystemTime::now()),
            next_wall_ms: 0,
        };
        c.tick();
        c
    }

    /// One monotonic clock read per turn (`Instant` and `SystemTime` are vDSO reads, not
    /// syscalls); the wall clock is read again only when a wall-clock second has passed, so
    /// NTP steps are picked up within 1 s.
    #[inline]
    pub fn tick(&mut self) {
        let now_us = self.started.elapsed().as_micros() as u64;
        self.now_us = now_us;
        self.now_ms = now_us / 1000;
        if self.now_ms >= self.next_wall_ms {
            let now = SystemTime::now();
            let since_epoch = now
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default();
            self.now_s = since_epoch.as_secs();
            self.date.refresh(now);
            let sub_ms = u64::from(since_epoch.subsec_millis());
            self.next_wall_ms = self.now_ms + (1000 - sub_ms).max(1);
        }
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}
