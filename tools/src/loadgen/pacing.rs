//! Open-loop send schedule: request `i` is due at `start + i / rate`, whatever the responses do.
//!
//! Send times are computed from the index (not by adding an interval to the previous time), so
//! rounding never accumulates and a stall is followed by an immediate catch-up burst whose
//! requests keep their original scheduled times (the latency they are charged starts there).

const NS_PER_S: u128 = 1_000_000_000;

/// The send schedule of one run.
#[derive(Clone, Debug)]
pub struct Schedule {
    start_ns: u64,
    rate_per_s: u64,
    total: u64,
    issued: u64,
}

impl Schedule {
    /// `total` requests at `rate_per_s` starting at `start_ns`. `rate_per_s` must be > 0.
    pub fn new(start_ns: u64, rate_per_s: u64, total: u64) -> Schedule {
        assert!(rate_per_s > 0, "rate must be positive");
        Schedule {
            start_ns,
            rate_per_s,
            total,
            issued: 0,
        }
    }

    /// Number of requests a run of `duration_ns` at `rate_per_s` sends.
    pub fn count_for(rate_per_s: u64, duration_ns: u64) -> u64 {
        (duration_ns as u128 * rate_per_s as u128 / NS_PER_S) as u64
    }

    /// Scheduled send time of request `i`.
    #[inline]
    pub fn send_time_ns(&self, i: u64) -> u64 {
        self.start_ns + (i as u128 * NS_PER_S / self.rate_per_s as u128) as u64
    }

    /// If the next request is due at `now_ns`, takes it and returns its scheduled time.
    #[inline]
    pub fn next_due(&mut self, now_ns: u64) -> Option<u64> {
        if self.issued >= self.total {
            return None;
        }
        let t = self.send_time_ns(self.issued);
        if t > now_ns {
            return None;
        }
        self.issued += 1;
        Some(t)
    }

    /// Scheduled time of the next request not yet taken, if any remain.
    pub fn next_send_ns(&self) -> Option<u64> {
        (self.issued < self.total).then(|| self.send_time_ns(self.issued))
    }

    /// Requests taken so far.
    pub fn issued(&self) -> u64 {
        self.issued
    }

    /// All requests have been taken.
    pub fn is_done(&self) -> bool {
        self.issued >= self.total
    }

    /// Scheduled time just after the last request (start + total / rate).
    pub fn end_ns(&self) -> u64 {
        self.send_time_ns(self.total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loadgen::clock::{Clock, FakeClock};

    #[test]
    fn send_times_match_rate() {
        let s = Schedule::new(1_000, 1000, 5000);
        assert_eq!(s.send_time_ns(0), 1_000);
        assert_eq!(s.send_time_ns(1), 1_000 + 1_000_000);
        assert_eq!(s.send_time_ns(1000), 1_000 + 1_000_000_000);
        assert_eq!(s.end_ns(), 1_000 + 5_000_000_000);
        // A rate that does not divide 1e9 evenly: no accumulated rounding.
        let s = Schedule::new(0, 3, 100);
        assert_eq!(s.send_time_ns(3), 1_000_000_000);
        assert_eq!(s.send_time_ns(1), 333_333_333);
        assert_eq!(s.send_time_ns(2), 666_666_666);
        assert_eq!(Schedule::count_for(20_000, 10_000_000_000), 200_000);
    }

    #[test]
    fn due_only_when_time_has_come() {
        let clock = FakeClock::new(0);
        let mut s = Schedule::new(0, 1000, 10);
        assert_eq!(s.next_due(clock.now_ns()), Some(0));
        assert_eq!(s.next_due(clock.now_ns()), None);
        clock.advance(999_999);
        assert_eq!(s.next_due(clock.now_ns()), None);
        clock.advance(1);
        assert_eq!(s.next_due(clock.now_ns()), Some(1_000_000));
        assert_eq!(s.next_send_ns(), Some(2_000_000));
    }

    #[test]
    fn catch_up_after_stall_keeps_schedule() {
        let clock = FakeClock::new(0);
        let mut s = Schedule::new(0, 1000, 1000);
        // Stall for 100.5 ms: the next call releases all 101 overdue requests at once, each with
        // its own scheduled time, not the time it finally went out.
        clock.set(100_500_000);
        let burst: Vec<u64> = std::iter::from_fn(|| s.next_due(clock.now_ns())).collect();
        assert_eq!(burst.len(), 101);
        for (i, &t) in burst.iter().enumerate() {
            assert_eq!(t, i as u64 * 1_000_000);
        }
        // After the burst, pacing continues on the original grid: no drift.
        clock.set(101_000_000);
        assert_eq!(s.next_due(clock.now_ns()), Some(101_000_000));
        clock.set(999_000_000);
        let rest = std::iter::from_fn(|| s.next_due(clock.now_ns())).count();
        assert_eq!(rest, 999 - 101);
        clock.set(10_000_000_000);
        assert_eq!(s.next_due(clock.now_ns()), None);
        assert!(s.is_done());
        assert_eq!(s.issued(), 1000);
    }
}
