//! The markdown report.

use std::fmt::Write as _;

use super::capacity::{
    at_fractions, load_points, parse_slo_us, per_million, project, ratio, LoadPoint,
    PROJECTED_CORES,
};
use super::raw::{Creates, Latency, Raw, Run, SERVERS};

/// Criterion bench of the in-process local hit (`benches/e2e.rs`) at 1M links.
pub const E2E_HIT_BENCH: &str = "e2e_local/hit_uniform/1000000";

/// Criterion bench of the cross-core forward round trip (`benches/forward.rs`).
pub const FORWARD_BENCH: &str = "mesh_forward/round_trip_2cpu";

/// Goal: ricochet/nginx throughput without pipelining.
pub const GOAL_THROUGHPUT_RATIO: f64 = 1.3;
/// Goal: ricochet/nginx throughput at pipelining depth 16.
pub const GOAL_PIPELINED_RATIO: f64 = 8.0;
/// Goal: offered rates (req/s) at which ricochet's p99 must be below nginx's.
pub const GOAL_P99_RATES: [u64; 3] = [5_000, 20_000, 50_000];
/// Goal: ms for ricochet to answer `/readyz` with 10M links.
pub const GOAL_10M_READY_MS: u64 = 100;
/// Goal: ns for an in-process local hit.
pub const GOAL_E2E_HIT_NS: f64 = 500.0;
/// Goal: ricochet's RSS per million links at most this share of an nginx worker's ("far below").
pub const GOAL_RSS_SHARE: f64 = 0.25;

/// Lines of each server's profile the report shows (the hottest symbols).
pub const PROFILE_LINES_SHOWN: usize = 20;

/// Fractions of the held load the capacity section shows latency up to.
const MAX_FRACTION_SHOWN: f64 = 1.0;

/// Thousands-separated integer.
pub fn thousands(v: f64) -> String {
    let n = v.round() as i64;
    let s = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

/// A latency in µs for a table cell.
pub fn us(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.1} ms", v / 1000.0)
    } else if v >= 100.0 {
        format!("{v:.0} µs")
    } else {
        format!("{v:.1} µs")
    }
}

/// A ratio for a table cell (`n/a` when there is none).
pub fn times(r: Option<f64>) -> String {
    r.map_or_else(|| "n/a".to_string(), |r| format!("{r:.2}x"))
}

/// Bytes as MiB (or KiB when small).
pub fn bytes(b: f64) -> String {
    if b >= 1024.0 * 1024.0 {
        format!("{:.1} MiB", b / (1024.0 * 1024.0))
    } else {
        format!("{:.1} KiB", b / 1024.0)
    }
}

fn verdict(ok: Option<bool>) -> &'static str {
    match ok {
        Some(true) => "met",
        Some(false) => "**not met**",
        None => "not measured",
    }
}

fn fixed_at<'a>(raw: &'a Raw, server: &str, rate: u64) -> Option<&'a Run> {
    raw.fixed.get(server)?.iter().find(|r| r.target_rps == rate)
}

/// The round with the median req/s of `server` at `depth` (the upper one of an even count).
fn wrk_median<'a>(raw: &'a Raw, server: &str, depth: u32) -> Option<&'a super::raw::Wrk> {
    let mut rounds: Vec<&super::raw::Wrk> =
        raw.wrk.get(&(server.to_string(), depth))?.iter().collect();
    rounds.sort_by(|a, b| a.rps.total_cmp(&b.rps));
    rounds.get(rounds.len() / 2).copied()
}

fn wrk_rps(raw: &Raw, server: &str, depth: u32) -> Option<f64> {
    wrk_median(raw, server, depth).map(|w| w.rps)
}

/// ricochet/nginx per round (rounds run back to back, so each pair shares the machine's
/// state), as `min-max`; empty with fewer than two paired rounds.
fn round_ratio_range(raw: &Raw, depth: u32) -> String {
    let get = |s: &str| raw.wrk.get(&(s.to_string(), depth));
    let (Some(r), Some(n)) = (get("ricochet"), get("nginx")) else {
        return String::new();
    };
    let ratios: Vec<f64> = r
        .iter()
        .zip(n)
        .filter_map(|(r, n)| ratio(r.rps, n.rps))
        .collect();
    if ratios.len() < 2 {
        return String::new();
    }
    let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{:.2}-{:.2}x", lo, hi)
}

/// Name under which perf/run.sh files wrk's ceiling runs (wrk against `/healthz`).
const CEILING: &str = "ceiling";

/// wrk's ceiling without pipelining, as `(median req/s, / nginx's median, ricochet's share)`.
fn wrk_ceiling(raw: &Raw) -> Option<(f64, f64, f64)> {
    let c = wrk_rps(raw, CEILING, 1)?;
    Some((
        c,
        ratio(c, wrk_rps(raw, "nginx", 1)?)?,
        ratio(wrk_rps(raw, "ricochet", 1)?, c)?,
    ))
}

/// The goal cell of a wrk ratio: the ratio of medians and, with rounds, their spread; without
/// pipelining also the ratio no server could beat under this harness.
fn wrk_goal_cell(raw: &Raw, depth: u32, r: Option<f64>) -> String {
    let rounds = raw
        .wrk
        .get(&("ricochet".to_string(), depth))
        .map_or(0, Vec::len);
    let mut cell = match round_ratio_range(raw, depth) {
        range if range.is_empty() => times(r),
        range => format!(
            "{} (median of {rounds} rounds; per round {range})",
            times(r)
        ),
    };
    if let (1, Some((_, ceiling, _))) = (depth, wrk_ceiling(raw)) {
        let _ = write!(cell, "; wrk's own ceiling here is {ceiling:.2}x");
    }
    cell
}

fn criterion_ns(raw: &Raw, bench: &str) -> Option<f64> {
    raw.criterion.get(bench).map(|e| e.median.point_estimate)
}

/// Serving RSS kB of `server` at the main dataset size.
fn serving_kb_at(raw: &Raw, server: &str, links: u64) -> Option<u64> {
    let size = raw.sizes.iter().find(|s| s.links == links)?;
    size.servers.get(server)?.memory_at_ready.serving_kb()
}

/// The report, with plots referenced as `<plot_prefix><name>.svg`.
pub fn render(raw: &Raw, plots: &[(String, String)], plot_prefix: &str) -> String {
    let mut md = String::new();
    let m = &raw.meta;
    let c = &m.config;
    let _ = writeln!(
        md,
        "# ricochet vs nginx: capacity report, {} (commit `{}`)\n",
        m.date, m.commit
    );
    if !m.label.is_empty() {
        let _ = writeln!(md, "> **Labelled run: {}**\n", m.label);
    }
    let _ =
        writeln!(
        md,
        "Both servers serve the same {} links from the same CPUs ({}: {} core(s) for ricochet, \
         `worker_processes {}` for nginx); the load generators run on CPU {}. Generated by \
         `perf/run.sh` and `perf-report` from the raw JSON in `{}`.\n",
        thousands(c.links as f64),
        c.server_cpus,
        c.cores,
        c.cores,
        c.load_cpu,
        raw.dir.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned())
    );

    goals(&mut md, raw);
    machine(&mut md, raw);
    throughput(&mut md, raw);
    latency(&mut md, raw, plots, plot_prefix);
    held(&mut md, raw);
    memory(&mut md, raw);
    creates(&mut md, raw);
    capacity(&mut md, raw);
    benches(&mut md, raw);
    profiles(&mut md, raw);
    md
}

fn profiles(md: &mut String, raw: &Raw) {
    if raw.profiles.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "## Where the time goes (perf, server processes under wrk without pipelining)\n\n\
         Share of the server processes' samples (user and kernel) by shared object and symbol; \
         the hottest {PROFILE_LINES_SHOWN} of each (full lists in `profile-<server>.txt`).
"
    );
    for server in SERVERS {
        if let Some(lines) = raw.profiles.get(server) {
            let _ = writeln!(
                md,
                "{server}:

```"
            );
            for l in lines.iter().take(PROFILE_LINES_SHOWN) {
                let _ = writeln!(md, "{l}");
            }
            let _ = writeln!(
                md,
                "```
"
            );
        }
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "one row per goal of the project, in the order the report prints them: a table written row by row"
)]
fn goals(md: &mut String, raw: &Raw) {
    let _ = writeln!(
        md,
        "## Goals\n\n| goal | measured | verdict |\n|---|---|---|"
    );
    let r1 = ratio(
        wrk_rps(raw, "ricochet", 1).unwrap_or(f64::NAN),
        wrk_rps(raw, "nginx", 1).unwrap_or(f64::NAN),
    );
    let _ = writeln!(
        md,
        "| throughput ≥ {GOAL_THROUGHPUT_RATIO}x nginx, no pipelining (wrk) | {} | {} |",
        wrk_goal_cell(raw, 1, r1),
        verdict(r1.map(|r| r >= GOAL_THROUGHPUT_RATIO))
    );
    let depth = raw.meta.config.pipeline_depth;
    let rp = ratio(
        wrk_rps(raw, "ricochet", depth).unwrap_or(f64::NAN),
        wrk_rps(raw, "nginx", depth).unwrap_or(f64::NAN),
    );
    let _ = writeln!(
        md,
        "| throughput ≥ {GOAL_PIPELINED_RATIO}x nginx, pipelined depth {depth} (wrk) | {} | {} |",
        wrk_goal_cell(raw, depth, rp),
        verdict(rp.map(|r| r >= GOAL_PIPELINED_RATIO))
    );
    for rate in GOAL_P99_RATES {
        let (a, b) = (
            fixed_at(raw, "ricochet", rate),
            fixed_at(raw, "nginx", rate),
        );
        let (cell, ok) = match (a, b) {
            (Some(a), Some(b)) => (
                format!(
                    "{} vs {} ({})",
                    us(a.latency_us.p99),
                    us(b.latency_us.p99),
                    times(ratio(a.latency_us.p99, b.latency_us.p99))
                ),
                Some(a.latency_us.p99 < b.latency_us.p99 && a.error_total == 0),
            ),
            _ => ("-".to_string(), None),
        };
        let _ = writeln!(
            md,
            "| p99 below nginx's at {} req/s (loadgen) | {cell} | {} |",
            thousands(rate as f64),
            verdict(ok)
        );
    }
    let links = raw.meta.config.links;
    let (rk, nk) = (
        serving_kb_at(raw, "ricochet", links),
        serving_kb_at(raw, "nginx", links),
    );
    let (cell, ok) = match (rk, nk) {
        (Some(r), Some(n)) => (
            format!(
                "{} vs {} per worker per M links ({})",
                bytes(per_million(r as f64 * 1024.0, links).unwrap_or(f64::NAN)),
                bytes(per_million(n as f64 * 1024.0, links).unwrap_or(f64::NAN)),
                times(ratio(r as f64, n as f64))
            ),
            ratio(r as f64, n as f64).map(|x| x <= GOAL_RSS_SHARE),
        ),
        _ => ("-".to_string(), None),
    };
    let _ = writeln!(
        md,
        "| RSS per million links far below nginx's (≤ {GOAL_RSS_SHARE}x) | {cell} | {} |",
        verdict(ok)
    );
    let ten = raw
        .sizes
        .iter()
        .find(|s| s.links == 10_000_000)
        .and_then(|s| s.servers.get("ricochet"));
    let _ = writeln!(
        md,
        "| 10M links open in < {GOAL_10M_READY_MS} ms (until /readyz is 200) | {} | {} |",
        ten.map_or_else(
            || "- (run with PERF_10M=1)".into(),
            |s| format!("{} ms", s.ready_ms)
        ),
        verdict(ten.map(|s| s.ready_ms < GOAL_10M_READY_MS))
    );
    let hit = criterion_ns(raw, E2E_HIT_BENCH);
    let _ = writeln!(
        md,
        "| in-process local hit < {GOAL_E2E_HIT_NS} ns (`cargo bench --bench e2e`) | {} | {} |\n",
        hit.map_or_else(|| "-".into(), |ns| format!("{ns:.0} ns")),
        verdict(hit.map(|ns| ns < GOAL_E2E_HIT_NS))
    );
}

fn machine(md: &mut String, raw: &Raw) {
    let m = &raw.meta.machine;
    let c = &raw.meta.config;
    let _ = writeln!(md, "## Machine and configuration\n\n| | |\n|---|---|");
    let _ = writeln!(md, "| CPU | {} ({} CPUs) |", m.cpu_model, m.cpus);
    let _ = writeln!(
        md,
        "| RAM | {:.1} GiB |",
        m.ram_bytes as f64 / (1u64 << 30) as f64
    );
    let _ = writeln!(md, "| kernel | {} |", m.kernel);
    let _ = writeln!(md, "| nginx | {} |", m.nginx_version);
    let _ = writeln!(md, "| wrk | {} |", m.wrk_version);
    let _ = writeln!(md, "| links | {} |", thousands(c.links as f64));
    let _ = writeln!(
        md,
        "| run length | {} s measured (+ {} s warm-up for loadgen) |",
        c.duration_s, c.warmup_s
    );
    let _ = writeln!(md, "| connections | {} |", c.connections);
    let _ = writeln!(md, "| loadgen SLO for `--max` | p99 ≤ {} |", c.slo_p99);
    let _ = writeln!(md, "| whole run | {} s |\n", raw.meta.wall_s);
    if !raw.commands.is_empty() {
        let _ = writeln!(md, "Commands, in order:\n\n```sh");
        for cmd in &raw.commands {
            let _ = writeln!(md, "{cmd}");
        }
        let _ = writeln!(md, "```\n");
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "one section's table, written row by row in the order it prints"
)]
fn throughput(md: &mut String, raw: &Raw) {
    if raw.wrk.is_empty() {
        return;
    }
    let rounds = raw.wrk.values().map(Vec::len).max().unwrap_or(0);
    let _ = writeln!(
        md,
        "## Throughput (wrk, closed loop, random keys)\n\n\
         {rounds} round(s) per server and depth; servers alternate, each started afresh. \
         req/s and latencies are the median round's; the ratio is of the medians, and the \
         per-round column pairs each ricochet round with the nginx round right after it.\n\n\
         | pipelining | ricochet req/s | nginx req/s | ricochet/nginx | per round | ricochet p50 / p99 | nginx p50 / p99 | errors (ricochet / nginx) |\n\
         |---|---|---|---|---|---|---|---|"
    );
    let mut depths: Vec<u32> = raw.wrk.keys().map(|(_, d)| *d).collect();
    depths.sort_unstable();
    depths.dedup();
    for depth in depths {
        let (r, n) = (
            wrk_median(raw, "ricochet", depth),
            wrk_median(raw, "nginx", depth),
        );
        let errors = |s: &str| {
            raw.wrk.get(&(s.to_string(), depth)).map_or_else(
                || "-".into(),
                |w| w.iter().map(|w| w.errors.total()).sum::<u64>().to_string(),
            )
        };
        // wrk sometimes reports 0 for high percentiles of pipelined runs (its histogram
        // counts batches and responses differently); 0 is not a latency, so say so.
        let cell = |w: Option<&super::raw::Wrk>| match w {
            None => "-".to_string(),
            Some(w) if w.latency_us.p99 <= 0.0 => format!("{} / n/a", us(w.latency_us.p50)),
            Some(w) => format!("{} / {}", us(w.latency_us.p50), us(w.latency_us.p99)),
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} / {} |",
            if depth == 1 {
                "none".to_string()
            } else {
                format!("depth {depth}")
            },
            r.map_or_else(|| "-".into(), |w| thousands(w.rps)),
            n.map_or_else(|| "-".into(), |w| thousands(w.rps)),
            times(ratio(
                r.map_or(f64::NAN, |w| w.rps),
                n.map_or(f64::NAN, |w| w.rps)
            )),
            match round_ratio_range(raw, depth) {
                range if range.is_empty() => "-".to_string(),
                range => range,
            },
            cell(r),
            cell(n),
            errors("ricochet"),
            errors("nginx"),
        );
    }
    if let Some((c, vs_nginx, share)) = wrk_ceiling(raw) {
        let _ = writeln!(
            md,
            "\nwrk's own ceiling without pipelining: {} req/s (median round), the same script \
             asking ricochet for `/healthz` (no lookup, a shorter answer). wrk runs its Lua \
             `request()` for every request and runs out of CPU there, so under this harness no \
             server can show more than {vs_nginx:.2}x nginx; ricochet's redirects reach {:.0}% \
             of the ceiling.",
            thousands(c),
            share * 100.0
        );
    }
    let _ = writeln!(
        md,
        "\nwrk's latencies are closed-loop service times (each connection waits for its answer \
         before sending again), not tail latency under a fixed load: see loadgen below.\n"
    );
}

fn lat_cells(l: &Latency) -> String {
    format!(
        "{} | {} | {} | {}",
        us(l.p50),
        us(l.p99),
        us(l.p999),
        us(l.max)
    )
}

fn latency(md: &mut String, raw: &Raw, plots: &[(String, String)], prefix: &str) {
    if raw.fixed.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "## Latency at fixed offered load (loadgen, open loop)\n\n\
         Latency is measured from each request's scheduled send time (no coordinated omission); \
         every response is checked against the dataset.\n\n\
         | offered req/s | server | achieved req/s | p50 | p99 | p99.9 | max | errors |\n\
         |---|---|---|---|---|---|---|---|"
    );
    let mut rates: Vec<u64> = raw
        .fixed
        .values()
        .flat_map(|v| v.iter().map(|r| r.target_rps))
        .collect();
    rates.sort_unstable();
    rates.dedup();
    for &rate in &rates {
        for server in SERVERS {
            if let Some(r) = fixed_at(raw, server, rate) {
                let _ = writeln!(
                    md,
                    "| {} | {server} | {} | {} | {} |",
                    thousands(rate as f64),
                    thousands(r.achieved_rps),
                    lat_cells(&r.latency_us),
                    r.error_total
                );
            }
        }
    }
    let _ = writeln!(
        md,
        "\nRatios ricochet/nginx (below 1 is better for ricochet):\n\n\
         | offered req/s | p50 | p99 | p99.9 |\n|---|---|---|---|"
    );
    for &rate in &rates {
        if let (Some(a), Some(b)) = (
            fixed_at(raw, "ricochet", rate),
            fixed_at(raw, "nginx", rate),
        ) {
            let (a, b) = (&a.latency_us, &b.latency_us);
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} |",
                thousands(rate as f64),
                times(ratio(a.p50, b.p50)),
                times(ratio(a.p99, b.p99)),
                times(ratio(a.p999, b.p999))
            );
        }
    }
    md.push('\n');
    for (name, title) in plots {
        let _ = writeln!(md, "![{title}]({prefix}{name}.svg)\n");
    }
}

fn held(md: &mut String, raw: &Raw) {
    if raw.max.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "## Load held (loadgen `--max`: highest rate with p99 ≤ {}, no errors, ≥ 95% of the rate achieved)\n\n\
         | server | held req/s | p99 there | runs |\n|---|---|---|---|",
        raw.meta.config.slo_p99
    );
    for server in SERVERS {
        if let Some(m) = raw.max.get(server) {
            let _ = writeln!(
                md,
                "| {server} | {} | {} | {} |",
                m.held_rps
                    .map_or_else(|| "none".into(), |r| thousands(r as f64)),
                m.held_p99_us.map_or_else(|| "-".into(), us),
                m.steps.len()
            );
        }
    }
    let r = raw.max.get("ricochet").and_then(|m| m.held_rps);
    let n = raw.max.get("nginx").and_then(|m| m.held_rps);
    if let (Some(r), Some(n)) = (r, n) {
        let _ = writeln!(
            md,
            "| ricochet/nginx | {} | | |",
            times(ratio(r as f64, n as f64))
        );
    }
    md.push('\n');
}

fn memory(md: &mut String, raw: &Raw) {
    if raw.sizes.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "## Memory, startup and disk\n\n\
         RSS is read from `/proc/PID/status` once `/readyz` answers 200. ricochet maps its tables \
         (`RssFile` is table pages touched so far, shared with the page cache); an nginx worker \
         holds its own copy of the whole map.\n\n\
         | links | server | ready after | serving RSS | anon | file | all processes |\n\
         |---|---|---|---|---|---|---|"
    );
    for size in &raw.sizes {
        for server in SERVERS {
            let Some(s) = size.servers.get(server) else {
                continue;
            };
            let mem = &s.memory_at_ready;
            let (anon, file) = mem
                .process
                .or_else(|| mem.workers.iter().max_by_key(|w| w.vm_rss_kb).copied())
                .map_or((0, 0), |p| (p.rss_anon_kb, p.rss_file_kb));
            let _ = writeln!(
                md,
                "| {} | {server}{} | {} ms | {} | {} | {} | {} |",
                thousands(size.links as f64),
                if server == "nginx" {
                    format!(" ({} worker(s), largest)", mem.workers.len())
                } else {
                    String::new()
                },
                s.ready_ms,
                bytes(mem.serving_kb().unwrap_or(0) as f64 * 1024.0),
                bytes(anon as f64 * 1024.0),
                bytes(file as f64 * 1024.0),
                bytes(mem.total_kb() as f64 * 1024.0),
            );
        }
    }
    let _ = writeln!(
        md,
        "\n| links | ricochet data dir | links TSV (input) | import time |\n|---|---|---|---|"
    );
    for size in &raw.sizes {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {:.2} s |",
            thousands(size.links as f64),
            bytes(size.ricochet_disk_bytes as f64),
            bytes(size.links_tsv_bytes as f64),
            size.import_ms as f64 / 1000.0
        );
    }
    if !raw.after_load.is_empty() {
        let _ = writeln!(md, "\nServing RSS after the load runs:\n");
        for server in SERVERS {
            if let Some(m) = raw.after_load.get(server) {
                let _ = writeln!(
                    md,
                    "- {server}: {} ({} links)",
                    bytes(m.memory.serving_kb().unwrap_or(0) as f64 * 1024.0),
                    thousands(m.links as f64)
                );
            }
        }
    }
    md.push('\n');
}

fn creates(md: &mut String, raw: &Raw) {
    let Some(c) = &raw.creates else {
        return;
    };
    let _ = writeln!(md, "## Durable creates (ricochet `POST /api/v1/urls`)\n");
    match c {
        Creates::Skipped(reason) => {
            let _ = writeln!(md, "Not measured: {reason}.\n");
        }
        Creates::Measured(m) => {
            let _ = writeln!(
                md,
                "Highest create rate with p99 ≤ {}: **{}** creates/s (p99 {}); {} runs.\n",
                us(m.slo_p99_us),
                m.held_rps
                    .map_or_else(|| "none".into(), |r| thousands(r as f64)),
                m.held_p99_us.map_or_else(|| "-".into(), us),
                m.steps.len()
            );
        }
    }
}

fn capacity(md: &mut String, raw: &Raw) {
    let c = &raw.meta.config;
    let cores = c.cores.max(1);
    let _ = writeln!(md, "## Capacity for planners\n");
    let wrk1 = wrk_rps(raw, "ricochet", 1);
    let held = raw.max.get("ricochet").and_then(|m| m.held_rps);
    let _ = writeln!(md, "Per core (measured on {cores} core(s)):\n");
    if let Some(w) = wrk1 {
        let _ = writeln!(
            md,
            "- closed-loop throughput: **{}** redirects/s per core (wrk, no pipelining)",
            thousands(w / f64::from(cores))
        );
    }
    if let Some(h) = held {
        let _ = writeln!(
            md,
            "- load held at p99 ≤ {}: **{}** redirects/s per core (loadgen)",
            c.slo_p99,
            thousands(h as f64 / f64::from(cores))
        );
    }
    capacity_latency(md, raw);
    capacity_sizes(md, raw);
    capacity_projection(md, raw, held.map(|h| h as f64).or(wrk1), cores);
}

/// Each server's latency at fractions of the load it held.
fn capacity_latency(md: &mut String, raw: &Raw) {
    let c = &raw.meta.config;
    let slo_us = parse_slo_us(&c.slo_p99);
    for server in SERVERS {
        let Some(h) = raw.max.get(server).and_then(|m| m.held_rps) else {
            continue;
        };
        let pts: Vec<LoadPoint> = load_points(
            raw.fixed.get(server).map_or(&[][..], |v| v.as_slice()),
            raw.max.get(server),
        );
        let fr = at_fractions(&pts, h, MAX_FRACTION_SHOWN);
        if fr.is_empty() {
            continue;
        }
        let _ = writeln!(
            md,
            "\n{server}: latency at fractions of its held load ({} req/s)\n\n\
             | share of held | offered req/s | p50 | p99 | p99.9 |\n|---|---|---|---|---|",
            thousands(h as f64)
        );
        for (f, p) in fr {
            let _ = writeln!(
                md,
                "| {:.0}% | {} | {} | {} | {} |",
                f * 100.0,
                thousands(p.rate as f64),
                us(p.latency.p50),
                us(p.latency.p99),
                us(p.latency.p999)
            );
        }
    }
    if let Some(slo) = slo_us {
        let _ = writeln!(md, "\n(SLO {} = {} µs.)", c.slo_p99, slo);
    }
}

/// Memory, disk and import time per million links, and how they grow.
fn capacity_sizes(md: &mut String, raw: &Raw) {
    if !raw.sizes.is_empty() {
        let _ = writeln!(
            md,
            "\nPer million links (below about 1M links a process's fixed memory dominates these \
             figures):\n\n\
             | links | ricochet RSS | nginx worker RSS | ricochet disk | import time |\n\
             |---|---|---|---|---|"
        );
        for s in &raw.sizes {
            let rss = |server: &str| {
                s.servers
                    .get(server)
                    .and_then(|x| x.memory_at_ready.serving_kb())
                    .and_then(|kb| per_million(kb as f64 * 1024.0, s.links))
                    .map_or_else(|| "-".into(), bytes)
            };
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} |",
                thousands(s.links as f64),
                rss("ricochet"),
                rss("nginx"),
                per_million(s.ricochet_disk_bytes as f64, s.links)
                    .map_or_else(|| "-".into(), bytes),
                per_million(s.import_ms as f64 / 1000.0, s.links)
                    .map_or_else(|| "-".into(), |v| format!("{v:.2} s"))
            );
        }
        if raw.sizes.len() >= 2 {
            let (a, b) = (&raw.sizes[0], &raw.sizes[raw.sizes.len() - 1]);
            let _ = writeln!(
                md,
                "\nGrowth from {} to {} links ({:.0}x the links):\n\n| figure | growth |\n|---|---|",
                thousands(a.links as f64),
                thousands(b.links as f64),
                b.links as f64 / a.links as f64
            );
            for server in SERVERS {
                let (x, y) = (a.servers.get(server), b.servers.get(server));
                if let (Some(x), Some(y)) = (x, y) {
                    let _ = writeln!(
                        md,
                        "| {server} ready time | {} ({} → {} ms) |",
                        times(ratio(y.ready_ms as f64, x.ready_ms as f64)),
                        x.ready_ms,
                        y.ready_ms
                    );
                    let (xm, ym) = (
                        x.memory_at_ready.serving_kb().unwrap_or(0) as f64,
                        y.memory_at_ready.serving_kb().unwrap_or(0) as f64,
                    );
                    let _ = writeln!(md, "| {server} serving RSS | {} |", times(ratio(ym, xm)));
                }
            }
            let _ = writeln!(
                md,
                "| ricochet disk | {} |\n| import time | {} |",
                times(ratio(
                    b.ricochet_disk_bytes as f64,
                    a.ricochet_disk_bytes as f64
                )),
                times(ratio(b.import_ms as f64, a.import_ms as f64))
            );
        }
    }
}

/// Throughput projected to more cores from the per-core figure (`rate`: the held load, else
/// wrk's; over `cores`).
fn capacity_projection(md: &mut String, raw: &Raw, rate: Option<f64>, cores: u32) {
    let held = raw.max.get("ricochet").and_then(|m| m.held_rps);
    let per_core = rate.map(|r| r / f64::from(cores));
    if let Some(per_core) = per_core {
        let fwd = criterion_ns(raw, FORWARD_BENCH);
        let _ = writeln!(
            md,
            "\nProjection from {} redirects/s per core ({}):\n\n\
             | cores | foreign keys (cold LRU) | cold LRU req/s | warm LRU req/s |\n|---|---|---|---|",
            thousands(per_core),
            if held.is_some() { "held load at the SLO" } else { "wrk throughput" }
        );
        for cores in PROJECTED_CORES {
            let p = project(per_core, fwd, cores);
            let _ = writeln!(
                md,
                "| {cores} | {:.1}% | {} | {} |",
                p.foreign_share * 100.0,
                thousands(p.cold_rps),
                thousands(p.warm_rps)
            );
        }
        let _ = writeln!(
            md,
            "\nAssumptions: per-core throughput scales linearly (cores share nothing on the redirect \
             path); with a cold LRU, 1 - 1/cores of keys belong to another core and each such request \
             also pays one cross-core round trip ({}), charged whole as CPU time (an upper bound: part \
             of it is waiting); once the per-core LRU holds the hot keys, foreign requests are answered \
             locally and scaling is linear. Not modelled: NIC and kernel network-stack limits, \
             interrupt and softirq placement, memory bandwidth, and load balance between cores.\n",
            fwd.map_or_else(
                || "not measured in this run: projection is linear".to_string(),
                |ns| format!("{ns:.0} ns, `cargo bench --bench forward`")
            )
        );
    }
}

fn benches(md: &mut String, raw: &Raw) {
    if raw.criterion.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "## In-process benches (criterion, median)\n\n| bench | time |\n|---|---|"
    );
    for (name, e) in &raw.criterion {
        let _ = writeln!(md, "| `{name}` | {:.1} ns |", e.median.point_estimate);
    }
    md.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_formats() {
        assert_eq!(thousands(1234567.4), "1,234,567");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1000.0), "1,000");
        assert_eq!(us(85.25), "85.2 µs");
        assert_eq!(us(850.0), "850 µs");
        assert_eq!(us(12_500.0), "12.5 ms");
        assert_eq!(times(Some(1.3456)), "1.35x");
        assert_eq!(times(None), "n/a");
        assert_eq!(bytes(3.0 * 1024.0 * 1024.0), "3.0 MiB");
        assert_eq!(verdict(Some(false)), "**not met**");
    }
}
