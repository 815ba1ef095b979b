//! `--max`: the highest rate whose p99 stays within an SLO, found by short constant-rate runs:
//! double from a start rate until a run fails, then bisect between the last pass and the first
//! failure until they are within a relative precision.

use serde::Serialize;

use super::stats::RunReport;

/// Default relative gap between passing and failing rate at which the search stops (5%).
pub const DEFAULT_PRECISION: f64 = 0.05;

/// Lowest rate the search tries before declaring that no rate holds the SLO, in req/s.
pub const MIN_SEARCH_RPS: u64 = 100;

/// Highest rate the search tries, in req/s; far above what one pacing thread can send.
pub const MAX_SEARCH_RPS: u64 = 10_000_000;

/// A run must achieve at least this share of its target rate to pass: otherwise the server (or
/// the generator) fell behind, whatever the latency of what did complete.
pub const MIN_ACHIEVED_SHARE: f64 = 0.95;

/// Search settings.
#[derive(Clone, Copy, Debug)]
pub struct MaxSearch {
    /// First rate tried.
    pub start_rps: u64,
    /// p99 bound, µs.
    pub slo_p99_us: f64,
    /// Stop when (fail - pass) / pass <= precision.
    pub precision: f64,
}

/// One step of the search.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Step {
    /// Target rate of the step.
    pub rate: u64,
    /// p99 within the SLO, no errors, achieved rate close to target.
    pub passed: bool,
    /// The step's full report.
    pub report: RunReport,
}

/// Outcome of a search.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct MaxReport {
    /// The SLO searched for, µs.
    pub slo_p99_us: f64,
    /// Highest passing rate, if any rate passed.
    pub held_rps: Option<u64>,
    /// p99 at that rate, µs.
    pub held_p99_us: Option<f64>,
    /// Every run, in order.
    pub steps: Vec<Step>,
}

/// Whether a run met the SLO.
pub fn passes(report: &RunReport, slo_p99_us: f64) -> bool {
    report.error_total == 0
        && report.completed > 0
        && report.latency_us.p99 <= slo_p99_us
        && report.achieved_rps >= MIN_ACHIEVED_SHARE * report.target_rps as f64
}

/// Runs the search; `run_at(rate)` performs one constant-rate run.
pub fn find_max<E>(
    search: &MaxSearch,
    mut run_at: impl FnMut(u64) -> Result<RunReport, E>,
) -> Result<MaxReport, E> {
    let mut steps: Vec<Step> = Vec::new();
    let mut step = |rate: u64, steps: &mut Vec<Step>| -> Result<bool, E> {
        let report = run_at(rate)?;
        let passed = passes(&report, search.slo_p99_us);
        steps.push(Step {
            rate,
            passed,
            report,
        });
        Ok(passed)
    };
    let mut rate = search.start_rps.clamp(MIN_SEARCH_RPS, MAX_SEARCH_RPS);
    let mut pass: Option<u64> = None;
    let mut fail: Option<u64> = None;
    // Grow until a failure (or the ceiling).
    if step(rate, &mut steps)? {
        pass = Some(rate);
        while rate < MAX_SEARCH_RPS {
            rate = (rate * 2).min(MAX_SEARCH_RPS);
            if step(rate, &mut steps)? {
                pass = Some(rate);
            } else {
                fail = Some(rate);
                break;
            }
        }
    } else {
        // Shrink until a pass (or the floor).
        fail = Some(rate);
        while rate > MIN_SEARCH_RPS {
            rate = (rate / 2).max(MIN_SEARCH_RPS);
            if step(rate, &mut steps)? {
                pass = Some(rate);
                break;
            }
            fail = Some(rate);
        }
    }
    if let (Some(mut lo), Some(mut hi)) = (pass, fail) {
        while (hi - lo) as f64 > search.precision * lo as f64 && hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if step(mid, &mut steps)? {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        pass = Some(lo);
    }
    let held_p99_us = pass.and_then(|r| {
        steps
            .iter()
            .rev()
            .find(|s| s.rate == r && s.passed)
            .map(|s| s.report.latency_us.p99)
    });
    Ok(MaxReport {
        slo_p99_us: search.slo_p99_us,
        held_rps: pass,
        held_p99_us,
        steps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loadgen::stats::LatencySummary;

    /// A server model: p99 grows slowly up to its capacity, then explodes.
    fn model(capacity: u64) -> impl FnMut(u64) -> Result<RunReport, ()> {
        move |rate| {
            let p99 = if rate <= capacity {
                200.0 + 300.0 * rate as f64 / capacity as f64
            } else {
                50_000.0
            };
            Ok(RunReport {
                target_rps: rate,
                achieved_rps: rate as f64,
                completed: rate,
                latency_us: LatencySummary {
                    p99,
                    ..Default::default()
                },
                ..Default::default()
            })
        }
    }

    fn search(start: u64) -> MaxSearch {
        MaxSearch {
            start_rps: start,
            slo_p99_us: 1000.0,
            precision: DEFAULT_PRECISION,
        }
    }

    #[test]
    fn finds_capacity_from_below() {
        let r = find_max(&search(10_000), model(137_000)).unwrap();
        let held = r.held_rps.unwrap();
        assert!(held <= 137_000, "{held}");
        assert!(held as f64 >= 137_000.0 * 0.95, "{held}");
        assert_eq!(
            &r.steps[..4].iter().map(|s| s.rate).collect::<Vec<_>>(),
            &[10_000, 20_000, 40_000, 80_000]
        );
        assert!(!r.steps[4].passed);
        assert!(r.held_p99_us.unwrap() <= 1000.0);
        assert!(r.steps.len() < 12, "{}", r.steps.len());
    }

    #[test]
    fn finds_capacity_from_above() {
        let r = find_max(&search(10_000), model(3_000)).unwrap();
        let held = r.held_rps.unwrap();
        assert!((2_850..=3_000).contains(&held), "{held}");
        assert!(!r.steps[0].passed);
    }

    #[test]
    fn nothing_holds() {
        let r = find_max(&search(1_000), model(10)).unwrap();
        assert_eq!(r.held_rps, None);
        assert_eq!(r.held_p99_us, None);
        assert_eq!(r.steps.last().unwrap().rate, MIN_SEARCH_RPS);
    }

    #[test]
    fn errors_or_shortfall_fail_a_step() {
        let mut ok = RunReport {
            target_rps: 1000,
            achieved_rps: 1000.0,
            completed: 1000,
            ..Default::default()
        };
        assert!(passes(&ok, 1000.0));
        ok.error_total = 1;
        assert!(!passes(&ok, 1000.0));
        ok.error_total = 0;
        ok.achieved_rps = 900.0;
        assert!(!passes(&ok, 1000.0));
        ok.achieved_rps = 1000.0;
        ok.latency_us.p99 = 1000.1;
        assert!(!passes(&ok, 1000.0));
    }
}
