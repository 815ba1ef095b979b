//! A readiness verdict with hysteresis (`probes` says which checks feed it). Its own module
//! because `Shared` holds two and `probes` reads `Shared`: neither imports the other for it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// A readiness check must fail this long before the verdict falls (except draining, missing
/// cores and a regeneration, which fall at once).
pub const READY_FALL_MS: u64 = 2_000;

/// After a fall, the checks must pass this long before the verdict rises again.
pub const READY_RISE_MS: u64 = 1_000;

/// A verdict with hysteresis, updated by whichever core answers or sweeps (atomics; a race
/// between two cores only moves a transition by one evaluation).
#[derive(Default)]
pub struct Damped {
    ready: AtomicBool,
    ever_ready: AtomicBool,
    /// Since when (ms on the shared clock) the raw checks disagree with `ready`; 0: they agree.
    disagree_since_ms: AtomicU64,
}

impl Damped {
    /// Feeds the raw verdict at `now_ms`; returns the damped one. `urgent` failures (draining,
    /// a core not serving) fall at once.
    pub fn update(&self, raw: bool, urgent: bool, now_ms: u64) -> bool {
        let ready = self.ready.load(Ordering::Relaxed);
        if raw == ready {
            self.disagree_since_ms.store(0, Ordering::Relaxed);
            return ready;
        }
        let first_rise = raw && !self.ever_ready.load(Ordering::Relaxed);
        let since = match self.disagree_since_ms.load(Ordering::Relaxed) {
            0 => {
                let at = now_ms.max(1);
                self.disagree_since_ms.store(at, Ordering::Relaxed);
                at
            }
            t => t,
        };
        let held = now_ms.saturating_sub(since);
        let flip = if raw {
            first_rise || held >= READY_RISE_MS
        } else {
            urgent || held >= READY_FALL_MS
        };
        if flip {
            self.ready.store(raw, Ordering::Relaxed);
            self.disagree_since_ms.store(0, Ordering::Relaxed);
            if raw {
                self.ever_ready.store(true, Ordering::Relaxed);
            }
        }
        self.ready.load(Ordering::Relaxed)
    }
}
