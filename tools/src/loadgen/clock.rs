//! Time sources. The engine reads a monotonic clock; tests drive a fake one.

use std::cell::Cell;
use std::time::Instant;

/// Nanoseconds since an arbitrary, fixed origin; never goes backwards.
pub trait Clock {
    /// Current time in nanoseconds since the clock's origin.
    fn now_ns(&self) -> u64;
}

/// The OS monotonic clock (`Instant`, i.e. CLOCK_MONOTONIC), relative to its creation.
#[derive(Clone, Copy, Debug)]
pub struct MonotonicClock {
    origin: Instant,
}

impl MonotonicClock {
    /// A clock whose zero is now.
    pub fn new() -> MonotonicClock {
        MonotonicClock {
            origin: Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }
}

/// A clock that moves only when told to; for deterministic tests of pacing and latency.
#[derive(Debug, Default)]
pub struct FakeClock {
    now: Cell<u64>,
}

impl FakeClock {
    /// A fake clock at `start_ns`.
    pub fn new(start_ns: u64) -> FakeClock {
        FakeClock {
            now: Cell::new(start_ns),
        }
    }

    /// Moves the clock forward by `ns`.
    pub fn advance(&self, ns: u64) {
        self.now.set(self.now.get() + ns);
    }

    /// Sets the clock; it must not go backwards.
    pub fn set(&self, ns: u64) {
        assert!(ns >= self.now.get(), "a monotonic clock cannot go back");
        self.now.set(ns);
    }
}

impl Clock for FakeClock {
    fn now_ns(&self) -> u64 {
        self.now.get()
    }
}
