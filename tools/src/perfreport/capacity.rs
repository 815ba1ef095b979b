//! The arithmetic of the report: ratios, per-million figures, latency at fractions of the
//! held load, and the projection to more cores.

use super::raw::{Latency, MaxSearch, Run};

/// Core counts the capacity section projects to.
pub const PROJECTED_CORES: [u32; 3] = [8, 16, 64];

/// Links in a "million" of the per-million figures.
pub const LINKS_PER_MILLION: f64 = 1_000_000.0;

/// `a / b`, or `None` when `b` is zero or either is not finite (no ratio to show).
pub fn ratio(a: f64, b: f64) -> Option<f64> {
    (a.is_finite() && b.is_finite() && b != 0.0).then(|| a / b)
}

/// `value` per million links.
pub fn per_million(value: f64, links: u64) -> Option<f64> {
    ratio(value, links as f64 / LINKS_PER_MILLION)
}

/// One measured load point: an offered rate and the latency there.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoadPoint {
    pub rate: u64,
    pub achieved_rps: f64,
    pub errors: u64,
    pub latency: Latency,
}

impl From<&Run> for LoadPoint {
    fn from(r: &Run) -> Self {
        LoadPoint {
            rate: r.target_rps,
            achieved_rps: r.achieved_rps,
            errors: r.error_total,
            latency: r.latency_us,
        }
    }
}

/// Every load point of a server: its fixed-rate runs and its `--max` search steps, by rate (a
/// fixed run wins over a search step at the same rate: it ran longer or equally long).
pub fn load_points(fixed: &[Run], max: Option<&MaxSearch>) -> Vec<LoadPoint> {
    let mut points: Vec<LoadPoint> = fixed.iter().map(LoadPoint::from).collect();
    if let Some(max) = max {
        for step in &max.steps {
            if !points.iter().any(|p| p.rate == step.rate) {
                points.push(LoadPoint::from(&step.report));
            }
        }
    }
    points.sort_by_key(|p| p.rate);
    points
}

/// Load points as fractions of `held_rps`, up to `max_fraction`.
pub fn at_fractions(
    points: &[LoadPoint],
    held_rps: u64,
    max_fraction: f64,
) -> Vec<(f64, LoadPoint)> {
    if held_rps == 0 {
        return Vec::new();
    }
    points
        .iter()
        .map(|p| (p.rate as f64 / held_rps as f64, *p))
        .filter(|(f, _)| *f <= max_fraction)
        .collect()
}

/// A projection of throughput to `cores` cores.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Projection {
    pub cores: u32,
    /// Share of requests for keys another core owns while the LRU is cold: 1 - 1/cores.
    pub foreign_share: f64,
    /// Throughput with a cold LRU (every foreign request forwarded), req/s.
    pub cold_rps: f64,
    /// Throughput once the LRU answers every foreign key (linear scaling), req/s.
    pub warm_rps: f64,
}

/// Projects `per_core_rps` (measured on one core, so every key local) to `cores` cores.
///
/// One request costs `1e9 / per_core_rps` ns of a core. A forwarded request adds
/// `forward_ns` (the measured cross-core round trip, charged whole as CPU: an upper bound, since
/// part of it is waiting), for the `1 - 1/cores` of keys another core owns. Warm, the LRU
/// answers foreign keys locally and scaling is linear. NIC, kernel and memory-bandwidth limits
/// are not modelled.
pub fn project(per_core_rps: f64, forward_ns: Option<f64>, cores: u32) -> Projection {
    assert!(cores > 0, "at least one core");
    let foreign_share = 1.0 - 1.0 / f64::from(cores);
    let warm_rps = per_core_rps * f64::from(cores);
    let cold_rps = match forward_ns {
        Some(fwd) if per_core_rps > 0.0 => {
            let request_ns = 1e9 / per_core_rps;
            f64::from(cores) * 1e9 / (request_ns + foreign_share * fwd)
        }
        _ => warm_rps,
    };
    Projection {
        cores,
        foreign_share,
        cold_rps,
        warm_rps,
    }
}

/// Parses an SLO like `1ms`, `500us`, `2.5ms` or `1s` into µs.
pub fn parse_slo_us(s: &str) -> Option<f64> {
    let s = s.trim();
    let (num, scale) = if let Some(n) = s.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix("µs") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1e3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1e6)
    } else {
        return None;
    };
    num.trim().parse::<f64>().ok().map(|v| v * scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(rate: u64, p99: f64) -> Run {
        Run {
            target_rps: rate,
            achieved_rps: rate as f64,
            completed: rate,
            error_total: 0,
            latency_us: Latency {
                p50: p99 / 2.0,
                p90: p99 * 0.8,
                p99,
                p999: p99 * 2.0,
                max: p99 * 3.0,
            },
            percentiles: Vec::new(),
            max_send_lag_us: 0.0,
        }
    }

    #[test]
    fn ratios_and_per_million() {
        assert_eq!(ratio(130.0, 100.0), Some(1.3));
        assert_eq!(ratio(1.0, 0.0), None);
        assert_eq!(ratio(f64::NAN, 1.0), None);
        assert_eq!(per_million(300.0, 10_000_000), Some(30.0));
        assert_eq!(per_million(300.0, 100_000), Some(3000.0));
        assert_eq!(per_million(1.0, 0), None);
    }

    #[test]
    fn projection_is_linear_warm_and_pays_forwarding_cold() {
        // 1 µs per request, 1 µs per forward: at 2 cores half the keys are foreign.
        let p = project(1_000_000.0, Some(1000.0), 2);
        assert_eq!(p.foreign_share, 0.5);
        assert_eq!(p.warm_rps, 2_000_000.0);
        assert!((p.cold_rps - 2.0 * 1e9 / 1500.0).abs() < 1e-6);
        let p64 = project(1_000_000.0, Some(1000.0), 64);
        assert!((p64.foreign_share - 63.0 / 64.0).abs() < 1e-12);
        assert!(p64.cold_rps < p64.warm_rps && p64.cold_rps > p64.warm_rps / 2.0);
        // One core: nothing is foreign.
        let p1 = project(1_000_000.0, Some(1000.0), 1);
        assert_eq!(p1.cold_rps, p1.warm_rps);
        // Unmeasured forwarding: the projection is the linear one.
        assert_eq!(project(5.0, None, 8).cold_rps, 40.0);
    }

    #[test]
    fn load_points_merge_fixed_runs_and_search_steps() {
        let fixed = vec![run(20_000, 300.0), run(5_000, 100.0)];
        let max = MaxSearch {
            slo_p99_us: 1000.0,
            held_rps: Some(40_000),
            held_p99_us: Some(900.0),
            steps: vec![
                super::super::raw::Step {
                    rate: 20_000,
                    passed: true,
                    report: run(20_000, 999.0),
                },
                super::super::raw::Step {
                    rate: 40_000,
                    passed: true,
                    report: run(40_000, 900.0),
                },
                super::super::raw::Step {
                    rate: 80_000,
                    passed: false,
                    report: run(80_000, 5000.0),
                },
            ],
        };
        let pts = load_points(&fixed, Some(&max));
        let rates: Vec<u64> = pts.iter().map(|p| p.rate).collect();
        assert_eq!(rates, [5_000, 20_000, 40_000, 80_000]);
        // The fixed run at 20k wins over the search step.
        assert_eq!(pts[1].latency.p99, 300.0);
        let fr = at_fractions(&pts, 40_000, 1.0);
        let fractions: Vec<f64> = fr.iter().map(|(f, _)| *f).collect();
        assert_eq!(fractions, [0.125, 0.5, 1.0]);
        assert!(at_fractions(&pts, 0, 1.0).is_empty());
    }

    #[test]
    fn slo_parsing() {
        assert_eq!(parse_slo_us("1ms"), Some(1000.0));
        assert_eq!(parse_slo_us("500us"), Some(500.0));
        assert_eq!(parse_slo_us("2.5ms"), Some(2500.0));
        assert_eq!(parse_slo_us("1s"), Some(1e6));
        assert_eq!(parse_slo_us("fast"), None);
    }
}
