//! Latency histogram, counters and the run report.
//!
//! Latency is always `completion time - scheduled send time`: a request that waited behind a
//! stall (in the generator, the network or the server) is charged the whole wait.

use hdrhistogram::Histogram;
use serde::Serialize;

use super::check::Verdict;
use super::request::RequestKind;
use super::response::ProtoError;

/// Longest latency the histogram tracks, in ns (60 s); longer ones are clamped to it.
pub const MAX_TRACKED_LATENCY_NS: u64 = 60_000_000_000;

/// Significant decimal digits the histogram keeps (0.1% relative error).
pub const HISTOGRAM_SIGFIGS: u8 = 3;

/// Mismatch descriptions kept verbatim in the report, to diagnose without flooding it.
pub const MAX_ERROR_SAMPLES: usize = 10;

/// Requests by kind.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct KindCounts {
    /// GETs of dataset keys.
    pub link: u64,
    /// GETs of keys not in the dataset.
    pub unknown: u64,
    /// POST creates.
    pub create: u64,
}

impl KindCounts {
    fn bump(&mut self, kind: RequestKind) {
        match kind {
            RequestKind::Link => self.link += 1,
            RequestKind::Unknown => self.unknown += 1,
            RequestKind::Create => self.create += 1,
        }
    }
}

/// Failures by kind.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct ErrorCounts {
    /// Dataset key answered with a status other than the link's.
    pub link_wrong_status: u64,
    /// Dataset key redirected to a URL other than the link's.
    pub link_wrong_location: u64,
    /// Dataset key redirect without a Location header.
    pub link_missing_location: u64,
    /// Unknown key not answered with 404.
    pub unknown_wrong_status: u64,
    /// Create not answered with 201.
    pub create_wrong_status: u64,
    /// Response could not be parsed or framed.
    pub protocol: u64,
    /// Request sent but the connection closed before its response.
    pub connection_closed: u64,
    /// Request could not be sent: no connection could be established.
    pub connect: u64,
    /// No response by the end of the drain period.
    pub unanswered: u64,
}

impl ErrorCounts {
    /// Sum of all errors.
    pub fn total(&self) -> u64 {
        self.link_wrong_status
            + self.link_wrong_location
            + self.link_missing_location
            + self.unknown_wrong_status
            + self.create_wrong_status
            + self.protocol
            + self.connection_closed
            + self.connect
            + self.unanswered
    }
}

/// Why a request failed without a checkable response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Unparseable response.
    Protocol(ProtoError),
    /// Connection closed with the request in flight.
    Closed,
    /// No connection available.
    Connect,
    /// Never answered.
    Unanswered,
}

/// Latency percentiles in microseconds.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct LatencySummary {
    /// Fastest response.
    pub min: f64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// 99.99th percentile.
    pub p9999: f64,
    /// Slowest response.
    pub max: f64,
}

/// One point of the latency-by-percentile series.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct PercentilePoint {
    /// Percentile, 0..=100.
    pub percentile: f64,
    /// Latency at that percentile, µs.
    pub latency_us: f64,
}

/// Everything one run measured.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct RunReport {
    /// Server address.
    pub target: String,
    /// Scheduled rate, req/s.
    pub target_rps: u64,
    /// Answered requests of the measured window / time from window start to the later of window
    /// end and last answer.
    pub achieved_rps: f64,
    /// Measured window, s.
    pub duration_s: f64,
    /// Warm-up before the window, s.
    pub warmup_s: f64,
    /// Keep-alive connections used.
    pub connections: usize,
    /// Pipelining depth per connection.
    pub pipeline: usize,
    /// Requests scheduled in the measured window.
    pub scheduled: u64,
    /// Of those, answered (right or wrong).
    pub completed: u64,
    /// Of those, answered correctly.
    pub ok: u64,
    /// Scheduled requests by kind.
    pub by_kind: KindCounts,
    /// Latency summary, µs, measured from scheduled send time.
    pub latency_us: LatencySummary,
    /// Every 1% from 1 to 99, then 99.9, 99.99, 99.999 and 100.
    pub percentiles: Vec<PercentilePoint>,
    /// Failures by kind.
    pub errors: ErrorCounts,
    /// Sum of `errors`.
    pub error_total: u64,
    /// Errors of requests scheduled during warm-up (not in `errors`).
    pub warmup_errors: u64,
    /// First few mismatches, described.
    pub error_samples: Vec<String>,
    /// Largest delay between a request's scheduled time and its hand-off to a connection, µs:
    /// large values mean the generator itself could not keep up.
    pub max_send_lag_us: f64,
}

/// Collects results of one run; only requests scheduled at or after `window_start_ns` count.
pub struct Recorder {
    hist: Histogram<u64>,
    window_start_ns: u64,
    scheduled: u64,
    completed: u64,
    ok: u64,
    by_kind: KindCounts,
    errors: ErrorCounts,
    warmup_errors: u64,
    samples: Vec<String>,
    last_completion_ns: u64,
    max_send_lag_ns: u64,
}

impl Recorder {
    /// A recorder whose measured window starts at `window_start_ns`.
    pub fn new(window_start_ns: u64) -> Recorder {
        Recorder {
            hist: Histogram::new_with_bounds(1, MAX_TRACKED_LATENCY_NS, HISTOGRAM_SIGFIGS)
                .expect("valid histogram bounds"),
            window_start_ns,
            scheduled: 0,
            completed: 0,
            ok: 0,
            by_kind: KindCounts::default(),
            errors: ErrorCounts::default(),
            warmup_errors: 0,
            samples: Vec::new(),
            last_completion_ns: 0,
            max_send_lag_ns: 0,
        }
    }

    fn in_window(&self, scheduled_ns: u64) -> bool {
        scheduled_ns >= self.window_start_ns
    }

    /// A request scheduled at `scheduled_ns` was handed to a connection at `now_ns`.
    pub fn on_dispatch(&mut self, scheduled_ns: u64, now_ns: u64, kind: RequestKind) {
        if self.in_window(scheduled_ns) {
            self.scheduled += 1;
            self.by_kind.bump(kind);
            self.max_send_lag_ns = self
                .max_send_lag_ns
                .max(now_ns.saturating_sub(scheduled_ns));
        }
    }

    /// A response for a request scheduled at `scheduled_ns` completed at `now_ns`.
    /// `describe` is called only if a mismatch sample is wanted.
    pub fn on_response(
        &mut self,
        scheduled_ns: u64,
        now_ns: u64,
        kind: RequestKind,
        verdict: Verdict,
        describe: impl FnOnce() -> String,
    ) {
        if !self.in_window(scheduled_ns) {
            if verdict != Verdict::Ok {
                self.warmup_errors += 1;
            }
            return;
        }
        let latency = now_ns
            .saturating_sub(scheduled_ns)
            .clamp(1, MAX_TRACKED_LATENCY_NS);
        self.hist.saturating_record(latency);
        self.completed += 1;
        self.last_completion_ns = self.last_completion_ns.max(now_ns);
        let e = &mut self.errors;
        let slot = match (verdict, kind) {
            (Verdict::Ok, _) => {
                self.ok += 1;
                return;
            }
            (Verdict::WrongStatus, RequestKind::Link) => &mut e.link_wrong_status,
            (Verdict::WrongStatus, RequestKind::Unknown) => &mut e.unknown_wrong_status,
            (Verdict::WrongStatus, RequestKind::Create) => &mut e.create_wrong_status,
            (Verdict::WrongLocation, _) => &mut e.link_wrong_location,
            (Verdict::MissingLocation, _) => &mut e.link_missing_location,
        };
        *slot += 1;
        if self.samples.len() < MAX_ERROR_SAMPLES {
            self.samples.push(describe());
        }
    }

    /// A request scheduled at `scheduled_ns` failed without a checkable response.
    pub fn on_failure(&mut self, scheduled_ns: u64, failure: Failure) {
        if !self.in_window(scheduled_ns) {
            self.warmup_errors += 1;
            return;
        }
        let e = &mut self.errors;
        match failure {
            Failure::Protocol(p) => {
                e.protocol += 1;
                if self.samples.len() < MAX_ERROR_SAMPLES {
                    self.samples.push(format!("unparseable response: {p:?}"));
                }
            }
            Failure::Closed => e.connection_closed += 1,
            Failure::Connect => e.connect += 1,
            Failure::Unanswered => e.unanswered += 1,
        }
    }

    /// Number of latencies recorded.
    pub fn recorded(&self) -> u64 {
        self.hist.len()
    }

    /// Latency (ns) at percentile `p` (0..=100).
    pub fn latency_at_ns(&self, p: f64) -> u64 {
        self.hist.value_at_percentile(p)
    }

    /// The report; `window_end_ns` is the scheduled end of the measured window.
    pub fn report(&self, window_end_ns: u64) -> RunReport {
        let us = |ns: u64| ns as f64 / 1000.0;
        let h = &self.hist;
        let latency_us = if h.is_empty() {
            LatencySummary::default()
        } else {
            LatencySummary {
                min: us(h.min()),
                mean: h.mean() / 1000.0,
                p50: us(h.value_at_percentile(50.0)),
                p90: us(h.value_at_percentile(90.0)),
                p99: us(h.value_at_percentile(99.0)),
                p999: us(h.value_at_percentile(99.9)),
                p9999: us(h.value_at_percentile(99.99)),
                max: us(h.max()),
            }
        };
        let mut percentiles = Vec::new();
        if !h.is_empty() {
            let points = (1..=99).map(f64::from).chain([99.9, 99.99, 99.999, 100.0]);
            for p in points {
                percentiles.push(PercentilePoint {
                    percentile: p,
                    latency_us: us(h.value_at_percentile(p)),
                });
            }
        }
        let elapsed_ns = window_end_ns
            .max(self.last_completion_ns)
            .saturating_sub(self.window_start_ns);
        let achieved_rps = if elapsed_ns == 0 {
            0.0
        } else {
            self.completed as f64 * 1e9 / elapsed_ns as f64
        };
        RunReport {
            achieved_rps,
            scheduled: self.scheduled,
            completed: self.completed,
            ok: self.ok,
            by_kind: self.by_kind,
            latency_us,
            percentiles,
            errors: self.errors,
            error_total: self.errors.total(),
            warmup_errors: self.warmup_errors,
            error_samples: self.samples.clone(),
            max_send_lag_us: us(self.max_send_lag_ns),
            ..RunReport::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loadgen::clock::{Clock, FakeClock};
    use crate::loadgen::pacing::Schedule;

    /// A server that answers in 100 µs but stalls for 200 ms once; the generator sends on
    /// schedule throughout. Requests scheduled during the stall must be charged from their
    /// scheduled time (up to ~200 ms), not from when the stalled server finally read them.
    #[test]
    fn stall_is_charged_from_scheduled_time() {
        let clock = FakeClock::new(0);
        let rate = 1000;
        let mut sched = Schedule::new(0, rate, 1000);
        let mut rec = Recorder::new(0);
        let stall_start = 300_000_000u64;
        let stall_end = 500_000_000u64;
        let service_ns = 100_000u64;
        // Server model: one request at a time, FIFO.
        let mut server_free_at = 0u64;
        while !sched.is_done() {
            clock.set(sched.next_send_ns().unwrap());
            while let Some(t) = sched.next_due(clock.now_ns()) {
                rec.on_dispatch(t, clock.now_ns(), RequestKind::Link);
                let mut begin = t.max(server_free_at);
                if (stall_start..stall_end).contains(&begin) {
                    begin = stall_end;
                }
                let done = begin + service_ns;
                server_free_at = done;
                rec.on_response(t, done, RequestKind::Link, Verdict::Ok, String::new);
            }
        }
        let r = rec.report(sched.end_ns());
        assert_eq!(r.completed, 1000);
        assert_eq!(r.error_total, 0);
        // The request scheduled right at the stall start waited the full 200 ms.
        assert!(r.latency_us.max >= 199_000.0, "max {}", r.latency_us.max);
        // 200 requests were scheduled inside the stall: ~20% of samples are delayed, linearly
        // from ~200 ms down to ~0, so p90 sits near 100 ms, not at the 100 µs service time.
        assert!(r.latency_us.p90 > 90_000.0, "p90 {}", r.latency_us.p90);
        assert!(r.latency_us.p50 < 200.0, "p50 {}", r.latency_us.p50);
        let over_100ms = r
            .percentiles
            .iter()
            .filter(|p| p.percentile <= 99.0 && p.latency_us > 100_000.0)
            .count();
        assert!((8..=12).contains(&over_100ms), "{over_100ms}");
    }

    /// The measurement that omits the stall (latency from actual send) would look healthy;
    /// check our recorder reports the difference when given actual-send times instead.
    #[test]
    fn latency_from_actual_send_would_hide_the_stall() {
        let mut rec = Recorder::new(0);
        // Scheduled at 0, only sent at 50 ms because the connection's pipeline was full,
        // answered 100 µs after that.
        rec.on_response(0, 50_100_000, RequestKind::Link, Verdict::Ok, String::new);
        assert!(rec.latency_at_ns(100.0) >= 50_000_000);
    }

    #[test]
    fn window_counts_and_errors() {
        let mut rec = Recorder::new(1_000);
        rec.on_dispatch(500, 500, RequestKind::Link);
        rec.on_response(500, 900, RequestKind::Link, Verdict::WrongStatus, || {
            "w".into()
        });
        rec.on_dispatch(1_000, 1_000, RequestKind::Unknown);
        rec.on_response(
            1_000,
            3_000,
            RequestKind::Unknown,
            Verdict::WrongStatus,
            || "unknown got 302".into(),
        );
        rec.on_dispatch(2_000, 2_500, RequestKind::Create);
        rec.on_response(
            2_000,
            4_000,
            RequestKind::Create,
            Verdict::Ok,
            || unreachable!(),
        );
        rec.on_dispatch(2_500, 2_500, RequestKind::Link);
        rec.on_failure(2_500, Failure::Closed);
        rec.on_failure(2_600, Failure::Protocol(ProtoError::Syntax));
        let r = rec.report(11_000);
        assert_eq!(r.scheduled, 3);
        assert_eq!(r.completed, 2);
        assert_eq!(r.ok, 1);
        assert_eq!(r.warmup_errors, 1);
        assert_eq!(r.errors.unknown_wrong_status, 1);
        assert_eq!(r.errors.connection_closed, 1);
        assert_eq!(r.errors.protocol, 1);
        assert_eq!(r.error_total, 3);
        assert_eq!(
            r.by_kind,
            KindCounts {
                link: 1,
                unknown: 1,
                create: 1
            }
        );
        assert_eq!(r.error_samples[0], "unknown got 302");
        assert_eq!(r.max_send_lag_us, 0.5);
        assert_eq!(r.percentiles.len(), 103);
        assert!((r.achieved_rps - 2.0 * 1e9 / 10_000.0).abs() < 1e-6);
    }
}
