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
#[expect(
    clippy::too_many_lines,
    reason = "one block per plot, in the report's order; each block's data is read from the same raw runs"
)]
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
mod tests {
    //! A whole report from a synthetic raw directory, with loadgen files made by loadgen's own
    //! serializer (so a change to its JSON that breaks the report fails here).

    use super::*;
    use crate::loadgen::search::{MaxReport, Step};
    use crate::loadgen::stats::{LatencySummary, PercentilePoint, RunReport};

    fn run_report(rate: u64, p99: f64) -> RunReport {
        RunReport {
            target: "127.0.0.1:1".into(),
            target_rps: rate,
            achieved_rps: rate as f64 * 0.99,
            duration_s: 5.0,
            completed: rate * 5,
            ok: rate * 5,
            latency_us: LatencySummary {
                min: 10.0,
                mean: p99 / 3.0,
                p50: p99 / 4.0,
                p90: p99 / 2.0,
                p99,
                p999: p99 * 2.0,
                p9999: p99 * 3.0,
                max: p99 * 4.0,
            },
            percentiles: [1.0, 50.0, 90.0, 99.0, 99.9, 100.0]
                .iter()
                .map(|&p| PercentilePoint {
                    percentile: p,
                    latency_us: p99 * p / 99.0,
                })
                .collect(),
            ..RunReport::default()
        }
    }

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::write(dir.join(name), text).unwrap();
    }

    fn wrk_json(rps: f64) -> String {
        format!(
            r#"{{"requests":{},"duration_us":5000000,"bytes":1,"rps":{rps},"errors":{{"connect":0,"read":0,"write":0,"status":0,"timeout":0}},"latency_us":{{"p50":100,"p90":150,"p99":300,"p999":500,"max":900,"mean":110.0}}}}"#,
            (rps * 5.0) as u64
        )
    }

    fn size_json(links: u64, ready_r: u64, rss_r: u64, rss_n: u64) -> String {
        format!(
            r#"{{"links":{links},"import_ms":2000,"ricochet_disk_bytes":{},"links_tsv_bytes":1,"servers":{{
        "ricochet":{{"ready_ms":{ready_r},"memory_at_ready":{{"process":{{"pid":1,"vm_rss_kb":{rss_r},"rss_anon_kb":1000,"rss_file_kb":{}}}}}}},
        "nginx":{{"ready_ms":900,"memory_at_ready":{{"master":{{"pid":2,"vm_rss_kb":{rss_n},"rss_anon_kb":1,"rss_file_kb":1}},"workers":[{{"pid":3,"vm_rss_kb":{rss_n},"rss_anon_kb":1,"rss_file_kb":1}}]}}}}}}}}"#,
            links * 100,
            rss_r - 1000
        )
    }

    #[expect(
        clippy::too_many_lines,
        reason = "a fixture: the raw files of one small run, written out literally"
    )]
    fn raw_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write(
            d,
            "meta.json",
            r#"{"date":"2026-11-30","commit":"abc1234","label":"smoke: not meaningful",
        "machine":{"cpu_model":"Test CPU","cpus":2,"ram_bytes":25769803776,"kernel":"Linux 6.1","nginx_version":"nginx/1.22.1","wrk_version":"wrk 4.1.0"},
        "config":{"links":1000000,"duration_s":5,"warmup_s":1,"rates":[5000,20000],"slo_p99":"1ms","connections":64,"pipeline_depth":16,"server_cpus":"0","load_cpu":"1","cores":1,"ten_million":true},
        "wall_s":321}"#,
        );
        write(
            d,
            "commands.txt",
            "cargo build --release\nwrk -t1 -c64 -d5s\n",
        );
        write(d, "wrk-ricochet-p1.json", &wrk_json(130_000.0));
        write(d, "wrk-nginx-p1.json", &wrk_json(100_000.0));
        // wrk's ceiling (the script against /healthz): 1.50x nginx; ricochet at 87% of it.
        write(d, "wrk-ceiling-p1-r1.json", &wrk_json(150_000.0));
        // Pipelined: three rounds (depth 1 above uses the names from before rounds). wrk reports
        // 0 for high percentiles of some pipelined runs. Medians 900k and 150k; per round 6.0,
        // 8.0 and 5.0.
        write(
            d,
            "wrk-ricochet-p16-r1.json",
            &wrk_json(900_000.0).replace(r#""p99":300"#, r#""p99":0"#),
        );
        write(d, "wrk-ricochet-p16-r2.json", &wrk_json(1_000_000.0));
        write(d, "wrk-ricochet-p16-r3.json", &wrk_json(800_000.0));
        write(d, "wrk-nginx-p16-r1.json", &wrk_json(150_000.0));
        write(d, "wrk-nginx-p16-r2.json", &wrk_json(125_000.0));
        write(d, "wrk-nginx-p16-r3.json", &wrk_json(160_000.0));
        for (server, p99_5k, p99_20k) in [("ricochet", 80.0, 120.0), ("nginx", 100.0, 100.0)] {
            for (rate, p99) in [(5000, p99_5k), (20000, p99_20k)] {
                let json = serde_json::to_string(&run_report(rate, p99)).unwrap();
                write(d, &format!("loadgen-{server}-{rate}.json"), &json);
            }
            let max = MaxReport {
                slo_p99_us: 1000.0,
                held_rps: Some(if server == "ricochet" { 80_000 } else { 40_000 }),
                held_p99_us: Some(800.0),
                steps: vec![
                    Step {
                        rate: 10_000,
                        passed: true,
                        report: run_report(10_000, 100.0),
                    },
                    Step {
                        rate: 40_000,
                        passed: true,
                        report: run_report(40_000, 800.0),
                    },
                ],
            };
            write(
                d,
                &format!("loadgen-{server}-max.json"),
                &serde_json::to_string(&max).unwrap(),
            );
        }
        write(
            d,
            "size-1000000.json",
            &size_json(1_000_000, 12, 60_000, 460_000),
        );
        write(
            d,
            "size-10000000.json",
            &size_json(10_000_000, 40, 500_000, 4_600_000),
        );
        write(
            d,
            "creates.json",
            r#"{"skipped":"POST /api/v1/urls answered HTTP 404 (expected 201)"}"#,
        );
        write(
            d,
            "criterion-e2e_local--hit_uniform--1000000.json",
            r#"{"mean":{"point_estimate":420.0},"median":{"point_estimate":410.0}}"#,
        );
        write(
            d,
            "criterion-mesh_forward--round_trip_2cpu.json",
            r#"{"mean":{"point_estimate":300.0},"median":{"point_estimate":250.0}}"#,
        );
        let mut profile = String::from("    41.00%  [kernel.kallsyms]  [k] tcp_sendmsg\n\n");
        for i in 0..30 {
            profile.push_str(&format!("     1.00%  ricochet  [.] sym{i}\n"));
        }
        write(d, "profile-ricochet.txt", &profile);
        dir
    }

    #[test]
    fn classifies_file_names() {
        use raw::{classify, FileKind};
        assert_eq!(
            classify("wrk-nginx-p16.json"),
            FileKind::Wrk {
                server: "nginx".into(),
                depth: 16,
                round: 1
            }
        );
        assert_eq!(
            classify("wrk-ricochet-p1-r12.json"),
            FileKind::Wrk {
                server: "ricochet".into(),
                depth: 1,
                round: 12
            }
        );
        assert_eq!(
            classify("loadgen-ricochet-20000.json"),
            FileKind::Fixed {
                server: "ricochet".into(),
                rate: 20000
            }
        );
        assert_eq!(
            classify("loadgen-nginx-max.json"),
            FileKind::Max {
                server: "nginx".into()
            }
        );
        assert_eq!(classify("loadgen-creates-max.json"), FileKind::Other);
        assert_eq!(
            classify("criterion-a--b--1.json"),
            FileKind::Criterion {
                bench: "a/b/1".into()
            }
        );
        assert_eq!(classify("wrk-nginx-p16.txt"), FileKind::Other);
        assert_eq!(classify("latency-vs-load.svg"), FileKind::Other);
    }

    #[test]
    fn loads_every_file_kind() {
        let dir = raw_dir();
        let raw = raw::load(dir.path()).unwrap();
        assert_eq!(raw.commands.len(), 2);
        assert_eq!(raw.wrk.len(), 5);
        let rps: Vec<f64> = raw.wrk[&("nginx".to_string(), 16)]
            .iter()
            .map(|w| w.rps)
            .collect();
        assert_eq!(rps, [150_000.0, 125_000.0, 160_000.0], "in round order");
        let rates: Vec<u64> = raw.fixed["nginx"].iter().map(|r| r.target_rps).collect();
        assert_eq!(rates, [5000, 20000]);
        assert_eq!(raw.max["ricochet"].held_rps, Some(80_000));
        assert_eq!(
            raw.sizes.iter().map(|s| s.links).collect::<Vec<_>>(),
            [1_000_000, 10_000_000]
        );
        assert_eq!(
            raw.sizes[0].servers["nginx"].memory_at_ready.serving_kb(),
            Some(460_000)
        );
        assert_eq!(
            raw.sizes[0].servers["nginx"].memory_at_ready.total_kb(),
            920_000
        );
        assert!(matches!(raw.creates, Some(raw::Creates::Skipped(_))));
        assert_eq!(raw.criterion.len(), 2);
        assert_eq!(raw.profiles["ricochet"].len(), 31);
    }

    #[test]
    #[expect(
        clippy::too_many_lines,
        reason = "one report rendered from the fixture and each of its sections checked in the order it prints"
    )]
    fn report_has_ratios_goals_capacity_and_plots() {
        let dir = raw_dir();
        let raw_path = dir.path().join("raw");
        std::fs::create_dir(&raw_path).unwrap();
        for e in std::fs::read_dir(dir.path()).unwrap() {
            let e = e.unwrap();
            if e.path().is_file() {
                std::fs::rename(e.path(), raw_path.join(e.file_name())).unwrap();
            }
        }
        let out = dir.path().join("raw.md");
        generate(&raw_path, &out).unwrap();
        let md = std::fs::read_to_string(&out).unwrap();
        assert!(md.contains("> **Labelled run: smoke: not meaningful**"));
        // 130k / 100k and 900k / 150k.
        assert_eq!(
            md.matches("| none | 130,000 | 100,000 | 1.30x | - |")
                .count(),
            1,
            "{md}"
        );
        assert!(
        md.contains(
            "| depth 16 | 900,000 | 150,000 | 6.00x | 5.00-8.00x | 100 µs / n/a | 100 µs / 300 µs |"
        ),
        "{md}"
    );
        assert!(
        md.contains("| throughput ≥ 8x nginx, pipelined depth 16 (wrk) | 6.00x (median of 3 rounds; per round 5.00-8.00x) | **not met** |"),
        "{md}"
    );
        assert!(
        md.contains("| throughput ≥ 1.3x nginx, no pipelining (wrk) | 1.30x; wrk's own ceiling here is 1.50x | met |"),
        "{md}"
    );
        assert!(md.contains(
        "no server can show more than 1.50x nginx; ricochet's redirects reach 87% of the ceiling"
    ));
        // p99 at 5k: 80 vs 100 → 0.80x, met; at 20k 120 vs 100 → not met; 50k not run.
        assert!(md.contains(
            "| p99 below nginx's at 5,000 req/s (loadgen) | 80.0 µs vs 100 µs (0.80x) | met |"
        ));
        assert!(md.contains(
        "| p99 below nginx's at 20,000 req/s (loadgen) | 120 µs vs 100 µs (1.20x) | **not met** |"
    ));
        assert!(md.contains("| p99 below nginx's at 50,000 req/s (loadgen) | - | not measured |"));
        assert!(md.contains("| 10M links open in < 100 ms (until /readyz is 200) | 40 ms | met |"));
        assert!(md.contains("410 ns | met |"));
        assert!(md.contains("| ricochet/nginx | 2.00x | | |"));
        assert!(md.contains("Not measured: POST /api/v1/urls answered HTTP 404"));
        // Capacity: 80k held on 1 core; 8 cores warm = 640k; cold pays 7/8 of a 250 ns forward
        // on 12.5 µs per request.
        assert!(md.contains("**80,000** redirects/s per core (loadgen)"));
        let cold8 = 8.0 * 1e9 / (12_500.0 + 0.875 * 250.0);
        assert!(
            md.contains(&format!(
                "| 8 | 87.5% | {} | 640,000 |",
                render::thousands(cold8)
            )),
            "{md}"
        );
        // Per million links: 60,000 kB over 1M links.
        assert!(
            md.contains("| 1,000,000 | 58.6 MiB | 449.2 MiB | 95.4 MiB | 2.00 s |"),
            "{md}"
        );
        assert!(md.contains("| ricochet ready time | 3.33x (12 → 40 ms) |"));
        assert!(md.contains("![Latency percentiles against offered load](raw/latency-vs-load.svg)"));
        for plot in ["latency-vs-load.svg", "latency-spectrum.svg"] {
            let svg = std::fs::read_to_string(raw_path.join(plot)).unwrap();
            assert!(
                svg.starts_with("<svg") && svg.contains("ricochet"),
                "{plot}"
            );
        }
        assert!(md.contains("```sh\ncargo build --release\nwrk -t1 -c64 -d5s\n```"));
        // The profile: its hottest lines, blank lines dropped, cut at PROFILE_LINES_SHOWN.
        assert!(md.contains("ricochet:\n\n```\n    41.00%  [kernel.kallsyms]  [k] tcp_sendmsg\n     1.00%  ricochet  [.] sym0\n"));
        assert!(md.contains("[.] sym18\n```"), "{md}");
        assert!(!md.contains("[.] sym19\n"));
        assert!(!md.contains("nginx:\n\n```"));
    }

    #[test]
    fn bad_json_names_the_file() {
        let dir = raw_dir();
        write(dir.path(), "wrk-nginx-p1.json", "{not json");
        let err = raw::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("wrk-nginx-p1.json"), "{err}");
        let empty = tempfile::tempdir().unwrap();
        assert!(matches!(
            raw::load(empty.path()),
            Err(ReportError::Io { .. })
        ));
    }

    #[test]
    fn plot_prefix_is_relative_when_side_by_side() {
        assert_eq!(
            plot_prefix(
                Path::new("perf/reports/d-c"),
                Path::new("perf/reports/d-c.md")
            ),
            "d-c/"
        );
        assert_eq!(
            plot_prefix(Path::new("/x/raw"), Path::new("/y/r.md")),
            "/x/raw/"
        );
    }
}
