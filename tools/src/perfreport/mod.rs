//! `perf-report`: turns the raw JSON of a `perf/run.sh` run into the dated markdown report,
//! with SVG plots of latency against load written beside the raw files.
//!
//! - [`raw`]: the raw files and reading them.
//! - [`capacity`]: ratios, per-million figures, projection to more cores.
//! - [`plot`]: SVG line charts (plotters).
//! - [`render`]: the markdown.

pub mod capacity;
pub mod plot;
pub mod raw;
pub mod render;

use std::path::{Path, PathBuf};

use capacity::load_points;
use plot::{format_rate, line_chart, nines, nines_label, Line};
use raw::{Raw, SERVERS};

/// Why a report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("cannot read or write {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not the expected JSON: {source}")]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("plotting failed: {0}")]
    Plot(String),
}

/// File name (without `.svg`) and title of the latency-against-load plot.
pub const PLOT_LATENCY_VS_LOAD: (&str, &str) = (
    "latency-vs-load",
    "Latency percentiles against offered load",
);

/// File name (without `.svg`) and title of the latency-by-percentile plot.
pub const PLOT_SPECTRUM: (&str, &str) = ("latency-spectrum", "Latency by percentile");

/// The plots of `raw` as `(file name without .svg, title, svg)`. Plots without data are left out.
pub fn plots(raw: &Raw) -> Result<Vec<(String, String, String)>, ReportError> {
    let mut out = Vec::new();
    // Latency percentiles against offered load: fixed-rate runs and the --max steps from the
    // lowest fixed rate up (the search's bisection far below it only crowds the plot).
    let lowest_fixed = raw
        .fixed
        .values()
        .flatten()
        .map(|r| r.target_rps)
        .min()
        .unwrap_or(0);
    let mut lines = Vec::new();
    for (si, server) in SERVERS.iter().enumerate() {
        let mut pts = load_points(
            raw.fixed.get(*server).map_or(&[][..], |v| v.as_slice()),
            raw.max.get(*server),
        );
        pts.retain(|p| p.rate >= lowest_fixed);
        if pts.is_empty() {
            continue;
        }
        type Pick = fn(&raw::Latency) -> f64;
        let picks: [(&str, Pick); 3] = [
            ("p50", |l| l.p50),
            ("p99", |l| l.p99),
            ("p99.9", |l| l.p999),
        ];
        for (pi, (name, pick)) in picks.iter().enumerate() {
            lines.push(Line {
                label: format!("{server} {name}"),
                colour: si * 3 + pi,
                points: pts
                    .iter()
                    .map(|p| (p.rate as f64, pick(&p.latency)))
                    .collect(),
            });
        }
    }
    if !lines.is_empty() {
        let (name, title) = PLOT_LATENCY_VS_LOAD;
        let svg = line_chart(
            title,
            "offered load (req/s)",
            "latency from scheduled send",
            &lines,
            &|x| format_rate(*x),
        )?;
        out.push((name.to_string(), title.to_string(), svg));
    }

    // Latency by percentile at the lowest and highest fixed rates both servers ran.
    let common: Vec<u64> = raw
        .fixed
        .get("ricochet")
        .into_iter()
        .flatten()
        .map(|r| r.target_rps)
        .filter(|rate| {
            raw.fixed
                .get("nginx")
                .is_some_and(|v| v.iter().any(|r| r.target_rps == *rate))
        })
        .collect();
    let mut chosen: Vec<u64> = common
        .first()
        .into_iter()
        .chain(common.last())
        .copied()
        .collect();
    chosen.dedup();
    let mut lines = Vec::new();
    for (si, server) in SERVERS.iter().enumerate() {
        for (ri, rate) in chosen.iter().enumerate() {
            let Some(run) = raw
                .fixed
                .get(*server)
                .and_then(|v| v.iter().find(|r| r.target_rps == *rate))
            else {
                continue;
            };
            lines.push(Line {
                label: format!("{server} at {} req/s", format_rate(*rate as f64)),
                colour: si * 3 + ri,
                points: run
                    .percentiles
                    .iter()
                    .filter(|p| p.percentile >= 1.0 && p.percentile < 100.0)
                    .map(|p| (nines(p.percentile), p.latency_us))
                    .collect(),
            });
        }
    }
    if lines.iter().any(|l| !l.points.is_empty()) {
        let (name, title) = PLOT_SPECTRUM;
        let svg = line_chart(
            title,
            "percentile",
            "latency from scheduled send",
            &lines,
            &nines_label,
        )?;
        out.push((name.to_string(), title.to_string(), svg));
    }
    Ok(out)
}

/// How the report at `out` refers to files in `raw_dir`: `<dir name>/` when they sit side by
/// side (the layout `perf/run.sh` uses), else the directory's path.
pub fn plot_prefix(raw_dir: &Path, out: &Path) -> String {
    let same_parent = match (raw_dir.parent(), out.parent()) {
        (Some(a), Some(b)) => a == b || (a.as_os_str().is_empty() && b.as_os_str().is_empty()),
        _ => false,
    };
    match (same_parent, raw_dir.file_name()) {
        (true, Some(name)) => format!("{}/", name.to_string_lossy()),
        _ => format!("{}/", raw_dir.display()),
    }
}

/// Reads `raw_dir`, writes the plots into it and the report to `out`.
pub fn generate(raw_dir: &Path, out: &Path) -> Result<(), ReportError> {
    let raw = raw::load(raw_dir)?;
    let plots = plots(&raw)?;
    let mut refs = Vec::new();
    for (name, title, svg) in plots {
        let path = raw_dir.join(format!("{name}.svg"));
        std::fs::write(&path, svg).map_err(|source| ReportError::Io { path, source })?;
        refs.push((name, title));
    }
    let md = render::render(&raw, &refs, &plot_prefix(raw_dir, out));
    std::fs::write(out, md).map_err(|source| ReportError::Io {
        path: out.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests;
