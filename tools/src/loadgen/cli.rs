//! Command-line helpers: duration parsing and the human-readable summary.

use std::fmt::Write as _;
use std::time::Duration;

use super::search::MaxReport;
use super::stats::RunReport;

/// Parses `10s`, `500ms`, `250us`, `2m`, `1.5s` (a bare number means seconds).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("bad duration {s:?}: expected e.g. 10s, 500ms, 250us"))?;
    let scale = match unit {
        "" | "s" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "ns" => 1e-9,
        "m" | "min" => 60.0,
        _ => return Err(format!("bad duration unit {unit:?} in {s:?}")),
    };
    let secs = v * scale;
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("bad duration {s:?}"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses a rate: `20000`, `20k`, `1.5M`.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.as_bytes().last() {
        Some(b'k' | b'K') => (&s[..s.len() - 1], 1e3),
        Some(b'm' | b'M') => (&s[..s.len() - 1], 1e6),
        _ => (s, 1.0),
    };
    let v: f64 = num.parse().map_err(|_| format!("bad rate {s:?}"))?;
    let r = (v * mult).round();
    if !(r >= 1.0 && r < u64::MAX as f64) {
        return Err(format!("rate must be >= 1, got {s:?}"));
    }
    Ok(r as u64)
}

/// Formats a latency in µs with a fitting unit.
pub fn fmt_us(us: f64) -> String {
    if us >= 1_000_000.0 {
        format!("{:.2}s", us / 1e6)
    } else if us >= 1000.0 {
        format!("{:.2}ms", us / 1e3)
    } else {
        format!("{us:.0}us")
    }
}

/// Human summary of one run.
pub fn summary(r: &RunReport) -> String {
    let mut s = String::new();
    let l = &r.latency_us;
    let _ = writeln!(
        s,
        "target {} | rate {} req/s, achieved {:.0} req/s ({:.1}%) | {} conns x pipeline {} | {:.1}s (+{:.1}s warmup)",
        r.target,
        r.target_rps,
        r.achieved_rps,
        100.0 * r.achieved_rps / r.target_rps.max(1) as f64,
        r.connections,
        r.pipeline,
        r.duration_s,
        r.warmup_s
    );
    let _ = writeln!(
        s,
        "requests: {} scheduled, {} answered, {} ok (link {}, unknown {}, create {})",
        r.scheduled, r.completed, r.ok, r.by_kind.link, r.by_kind.unknown, r.by_kind.create
    );
    let _ = writeln!(
        s,
        "latency (from scheduled send): p50 {}  p90 {}  p99 {}  p99.9 {}  p99.99 {}  max {}  mean {}",
        fmt_us(l.p50),
        fmt_us(l.p90),
        fmt_us(l.p99),
        fmt_us(l.p999),
        fmt_us(l.p9999),
        fmt_us(l.max),
        fmt_us(l.mean)
    );
    let e = &r.errors;
    if r.error_total == 0 {
        let _ = writeln!(s, "errors: none");
    } else {
        let _ = writeln!(s, "errors: {} total", r.error_total);
        let kinds = [
            ("link wrong status", e.link_wrong_status),
            ("link wrong Location", e.link_wrong_location),
            ("link missing Location", e.link_missing_location),
            ("unknown key not 404", e.unknown_wrong_status),
            ("create not 201", e.create_wrong_status),
            ("protocol", e.protocol),
            ("connection closed", e.connection_closed),
            ("connect", e.connect),
            ("unanswered", e.unanswered),
        ];
        for (name, n) in kinds.iter().filter(|(_, n)| *n > 0) {
            let _ = writeln!(s, "  {name}: {n}");
        }
        for sample in &r.error_samples {
            let _ = writeln!(s, "  e.g. {sample}");
        }
    }
    if r.warmup_errors > 0 {
        let _ = writeln!(s, "warm-up errors (not counted above): {}", r.warmup_errors);
    }
    let _ = writeln!(s, "generator max send lag: {}", fmt_us(r.max_send_lag_us));
    s
}

/// Human summary of a `--max` search.
pub fn max_summary(m: &MaxReport) -> String {
    let mut s = String::new();
    for st in &m.steps {
        let _ = writeln!(
            s,
            "  step {:>9} req/s: {} p99 {} achieved {:.0} errors {}",
            st.rate,
            if st.passed { "pass" } else { "FAIL" },
            fmt_us(st.report.latency_us.p99),
            st.report.achieved_rps,
            st.report.error_total
        );
    }
    match (m.held_rps, m.held_p99_us) {
        (Some(r), Some(p)) => {
            let _ = writeln!(s, "load held: {r} req/s at p99 {}", fmt_us(p));
        }
        _ => {
            let _ = writeln!(
                s,
                "load held: none (no rate kept p99 under {})",
                fmt_us(m.slo_p99_us)
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("10x").is_err());
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("20000").unwrap(), 20_000);
        assert_eq!(parse_rate("20k").unwrap(), 20_000);
        assert_eq!(parse_rate("1.5M").unwrap(), 1_500_000);
        assert!(parse_rate("0").is_err());
        assert!(parse_rate("x").is_err());
    }

    #[test]
    fn summaries_mention_numbers() {
        let mut r = RunReport {
            target_rps: 100,
            achieved_rps: 99.0,
            ..Default::default()
        };
        r.latency_us.p99 = 1500.0;
        r.errors.link_wrong_location = 2;
        r.error_total = 2;
        let s = summary(&r);
        assert!(s.contains("p99 1.50ms"), "{s}");
        assert!(s.contains("link wrong Location: 2"), "{s}");
        let m = MaxReport {
            slo_p99_us: 1000.0,
            held_rps: Some(42_000),
            held_p99_us: Some(870.0),
            steps: vec![],
        };
        assert!(max_summary(&m).contains("load held: 42000 req/s at p99 870us"));
    }
}
