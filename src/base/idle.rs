//! How idle a core has been lately, and so whether it may lend its idle moments to its click
//! aggregator.
//!
//! The aggregator shares the core's CPU in `SCHED_IDLE`: it runs only while the core sleeps.
//! A core with a click batch waiting for the aggregator therefore parks at its first idle
//! moment instead of spinning first (`core_loop::Core::run`), which costs the next request a
//! wake-up. At a moderate load that is what keeps every click (the core is idle most of the
//! time and the aggregator needs a few percent of it). On a saturated core the idle moments are
//! a few microseconds between requests, each park's wake-up is a request served later, and
//! throughput falls (perf/clicks.sh: to 0.79-0.88 of `--analytics off` at depth 1) while the
//! aggregator still gets too little CPU to keep up. So a core lends its idle moments only
//! while it was idle for at least [`LEND_IDLE_MIN_PERCENT`] of the last window; a saturated
//! core keeps spinning, its batches are not returned, and its clicks are dropped and counted
//! (what the analytics contract says overload does), not its redirects slowed.
//!
//! Pure: fed the loop's monotonic clock, tested with a fake one.

/// A core idle for less than this share of a window (percent) does not park early for its
/// aggregator in the next one.
pub const LEND_IDLE_MIN_PERCENT: u64 = 25;

/// Tracks the idle share of the loop over windows closed by [`IdleMeter::close_window`].
#[derive(Debug)]
pub struct IdleMeter {
    /// When the current window began (monotonic µs).
    window_start_us: u64,
    /// When the last turn began, and whether it found no work.
    turn_start_us: u64,
    turn_idle: bool,
    /// Idle µs in the current window so far.
    idle_us: u64,
    /// The verdict of the last closed window.
    lend: bool,
}

impl IdleMeter {
    /// A meter starting at `now_us`; it lends until a window says otherwise.
    pub fn new(now_us: u64) -> IdleMeter {
        IdleMeter {
            window_start_us: now_us,
            turn_start_us: now_us,
            turn_idle: false,
            idle_us: 0,
            lend: true,
        }
    }

    /// A loop turn begins at `now_us`: the previous one (spinning or parked, if it had no
    /// work) is accounted.
    pub fn turn(&mut self, now_us: u64) {
        if self.turn_idle {
            self.idle_us += now_us.saturating_sub(self.turn_start_us);
        }
        self.turn_start_us = now_us;
        self.turn_idle = false;
    }

    /// The current turn found no work.
    pub fn idle(&mut self) {
        self.turn_idle = true;
    }

    /// Closes the window at `now_us` (each sweep) and decides the next one.
    pub fn close_window(&mut self, now_us: u64) {
        let span = now_us.saturating_sub(self.window_start_us);
        if span > 0 {
            self.lend = self.idle_us * 100 >= LEND_IDLE_MIN_PERCENT * span;
        }
        self.window_start_us = now_us;
        self.idle_us = 0;
    }

    /// Whether the core may park early so that its aggregator runs.
    pub fn lends(&self) -> bool {
        self.lend
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a window of 100 ms of turns of `turn_us`, `idle_every`-th of them idle.
    fn window(m: &mut IdleMeter, t: &mut u64, turn_us: u64, idle_every: u64) {
        let end = *t + 100_000;
        let mut i = 0;
        while *t < end {
            m.turn(*t);
            if i % idle_every == 0 {
                m.idle();
            }
            i += 1;
            *t += turn_us;
        }
        m.turn(*t);
        m.close_window(*t);
    }

    #[test]
    fn a_mostly_idle_core_lends_and_a_saturated_one_does_not() {
        let mut t = 1_000;
        let mut m = IdleMeter::new(t);
        assert!(m.lends(), "lends until a window says otherwise");
        window(&mut m, &mut t, 10, 2); // half the turns idle
        assert!(m.lends());
        window(&mut m, &mut t, 10, 10); // 10% idle
        assert!(!m.lends());
        window(&mut m, &mut t, 10, 3); // a third
        assert!(m.lends());
        window(&mut m, &mut t, 10, 5); // 20%
        assert!(!m.lends());
    }

    #[test]
    fn a_long_park_counts_as_idle_and_a_busy_turn_does_not() {
        let mut m = IdleMeter::new(0);
        m.turn(0);
        m.idle();
        m.turn(90_000); // parked 90 ms
        m.turn(100_000); // 10 ms of work
        m.close_window(100_000);
        assert!(m.lends());
        m.turn(100_000);
        m.turn(190_000); // 90 ms of work
        m.idle();
        m.turn(200_000);
        m.close_window(200_000);
        assert!(!m.lends(), "10% idle");
    }
}
