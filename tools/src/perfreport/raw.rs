//! The raw results `perf/run.sh` writes, and reading them from a directory.
//!
//! Files (all optional except `meta.json`; a missing one leaves its section out):
//! `meta.json`, `commands.txt`, `wrk-<server>-p<depth>.json` (from the wrk Lua `done` hook),
//! `loadgen-<server>-<rate>.json` (a loadgen run report), `loadgen-<server>-max.json` (a loadgen
//! `--max` report), `size-<links>.json`, `memory-after-load-<server>.json`, `creates.json` (+
//! `loadgen-creates-max.json`), `criterion-<group>--<bench>.json` (criterion `estimates.json`,
//! `/` in the bench id written as `--`), `profile-<server>.txt` (`perf report --stdio` lines).
//!
//! The loadgen types mirror the subset of `loadgen::stats::RunReport` / `search::MaxReport` the
//! report uses; unknown fields are ignored so loadgen may add fields freely.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::ReportError;

/// The servers compared, in report order.
pub const SERVERS: [&str; 2] = ["ricochet", "nginx"];

/// `meta.json`: where and how the run happened.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Meta {
    pub date: String,
    pub commit: String,
    /// Free text, e.g. "smoke"; empty for a real run.
    #[serde(default)]
    pub label: String,
    pub machine: Machine,
    pub config: Config,
    /// Wall time of the whole run, s.
    #[serde(default)]
    pub wall_s: u64,
}

/// The machine the run was on.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Machine {
    pub cpu_model: String,
    pub cpus: u32,
    pub ram_bytes: u64,
    pub kernel: String,
    #[serde(default)]
    pub nginx_version: String,
    #[serde(default)]
    pub wrk_version: String,
}

/// The run's settings.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Config {
    pub links: u64,
    pub duration_s: f64,
    #[serde(default)]
    pub warmup_s: f64,
    pub rates: Vec<u64>,
    pub slo_p99: String,
    pub connections: u32,
    pub pipeline_depth: u32,
    /// wrk rounds per server and depth (servers alternate, each on a fresh start).
    #[serde(default = "one_round")]
    pub wrk_rounds: u32,
    pub server_cpus: String,
    pub load_cpu: String,
    /// Server cores (ricochet `--cores`, nginx `worker_processes`).
    pub cores: u32,
    #[serde(default)]
    pub ten_million: bool,
}

fn one_round() -> u32 {
    1
}

/// wrk's summary, written by the Lua `done` hook.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Wrk {
    pub requests: u64,
    pub duration_us: u64,
    pub rps: f64,
    pub errors: WrkErrors,
    pub latency_us: WrkLatency,
}

/// wrk's error counters (`status` counts responses >= 400).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
pub struct WrkErrors {
    pub connect: u64,
    pub read: u64,
    pub write: u64,
    pub status: u64,
    pub timeout: u64,
}

impl WrkErrors {
    /// All errors.
    pub fn total(&self) -> u64 {
        self.connect + self.read + self.write + self.status + self.timeout
    }
}

/// wrk's latency percentiles, µs (closed loop: these are service times, not tail latency under
/// a fixed load).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
pub struct WrkLatency {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

/// Latency summary of a loadgen run, µs.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq)]
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

/// One point of a latency-by-percentile series.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
pub struct PercentilePoint {
    pub percentile: f64,
    pub latency_us: f64,
}

/// One loadgen run at a fixed rate.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Run {
    pub target_rps: u64,
    pub achieved_rps: f64,
    #[serde(default)]
    pub completed: u64,
    pub error_total: u64,
    pub latency_us: Latency,
    #[serde(default)]
    pub percentiles: Vec<PercentilePoint>,
    #[serde(default)]
    pub max_send_lag_us: f64,
}

/// One step of a `--max` search.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Step {
    pub rate: u64,
    pub passed: bool,
    pub report: Run,
}

/// A loadgen `--max` search.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct MaxSearch {
    pub slo_p99_us: f64,
    pub held_rps: Option<u64>,
    pub held_p99_us: Option<f64>,
    pub steps: Vec<Step>,
}

/// One process's memory, kB (from /proc/PID/status).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
pub struct Rss {
    pub vm_rss_kb: u64,
    pub rss_anon_kb: u64,
    pub rss_file_kb: u64,
}

/// A server's processes' memory: ricochet is one `process`; nginx a `master` and `workers`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Memory {
    pub process: Option<Rss>,
    pub master: Option<Rss>,
    #[serde(default)]
    pub workers: Vec<Rss>,
}

impl Memory {
    /// Resident kB of what serving takes: ricochet's process, or nginx's largest worker (each
    /// worker holds the whole map; the master only forks them).
    pub fn serving_kb(&self) -> Option<u64> {
        self.process
            .map(|p| p.vm_rss_kb)
            .or_else(|| self.workers.iter().map(|w| w.vm_rss_kb).max())
    }

    /// Resident kB of every process together (nginx workers share copy-on-write pages with the
    /// master, so this over-counts nginx; it is what `ps` shows).
    pub fn total_kb(&self) -> u64 {
        self.process.map_or(0, |p| p.vm_rss_kb)
            + self.master.map_or(0, |p| p.vm_rss_kb)
            + self.workers.iter().map(|w| w.vm_rss_kb).sum::<u64>()
    }
}

/// One server at one dataset size.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct SizeServer {
    /// From spawn until `/readyz` answered 200, ms.
    pub ready_ms: u64,
    pub memory_at_ready: Memory,
}

/// `size-<links>.json`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Size {
    pub links: u64,
    pub import_ms: u64,
    pub ricochet_disk_bytes: u64,
    pub links_tsv_bytes: u64,
    pub servers: BTreeMap<String, SizeServer>,
}

/// `memory-after-load-<server>.json`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct MemoryAfterLoad {
    pub server: String,
    pub links: u64,
    pub memory: Memory,
}

/// `creates.json`: skipped with a reason, or the name of the loadgen `--max` file.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct CreatesFile {
    pub skipped: Option<String>,
    pub loadgen: Option<String>,
}

/// The create test's outcome.
#[derive(Clone, Debug, PartialEq)]
pub enum Creates {
    Skipped(String),
    Measured(MaxSearch),
}

/// A criterion estimate (`estimates.json`), ns.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
pub struct Estimates {
    pub mean: Estimate,
    pub median: Estimate,
}

/// One statistic of a criterion estimate.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
pub struct Estimate {
    pub point_estimate: f64,
}

/// Everything in a raw results directory.
#[derive(Clone, Debug, PartialEq)]
pub struct Raw {
    pub dir: PathBuf,
    pub meta: Meta,
    pub commands: Vec<String>,
    /// `(server, depth)` → wrk results, one per round, in round order.
    pub wrk: BTreeMap<(String, u32), Vec<Wrk>>,
    /// server → fixed-rate runs, by rate.
    pub fixed: BTreeMap<String, Vec<Run>>,
    /// server → `--max` search.
    pub max: BTreeMap<String, MaxSearch>,
    /// By links.
    pub sizes: Vec<Size>,
    pub after_load: BTreeMap<String, MemoryAfterLoad>,
    pub creates: Option<Creates>,
    /// `group/bench` → estimates.
    pub criterion: BTreeMap<String, Estimates>,
    /// server → `perf report` lines (hottest symbols first) from `profile-<server>.txt`.
    pub profiles: BTreeMap<String, Vec<String>>,
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, ReportError> {
    let text = std::fs::read_to_string(path).map_err(|source| ReportError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| ReportError::Json {
        path: path.to_path_buf(),
        source,
    })
}

/// What a raw file's name says it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileKind {
    Wrk {
        server: String,
        depth: u32,
        round: u32,
    },
    Fixed {
        server: String,
        rate: u64,
    },
    Max {
        server: String,
    },
    Size,
    AfterLoad,
    Creates,
    Criterion {
        bench: String,
    },
    Other,
}

/// Classifies a raw file by name.
pub fn classify(name: &str) -> FileKind {
    let Some(stem) = name.strip_suffix(".json") else {
        return FileKind::Other;
    };
    if let Some(rest) = stem.strip_prefix("wrk-") {
        // `wrk-<server>-p<depth>-r<round>`; reports from before rounds have no `-r<round>`.
        let (rest, round) = match rest.rsplit_once("-r").map(|(a, r)| (a, r.parse::<u32>())) {
            Some((a, Ok(round))) => (a, round),
            _ => (rest, 1),
        };
        if let Some((server, depth)) = rest.rsplit_once("-p") {
            if let Ok(depth) = depth.parse() {
                return FileKind::Wrk {
                    server: server.to_string(),
                    depth,
                    round,
                };
            }
        }
    } else if let Some(rest) = stem.strip_prefix("loadgen-") {
        if let Some((server, what)) = rest.rsplit_once('-') {
            if server == "creates" {
                return FileKind::Other; // read through creates.json
            }
            if what == "max" {
                return FileKind::Max {
                    server: server.to_string(),
                };
            }
            if let Ok(rate) = what.parse() {
                return FileKind::Fixed {
                    server: server.to_string(),
                    rate,
                };
            }
        }
    } else if stem.starts_with("size-") {
        return FileKind::Size;
    } else if stem.starts_with("memory-after-load-") {
        return FileKind::AfterLoad;
    } else if stem == "creates" {
        return FileKind::Creates;
    } else if let Some(bench) = stem.strip_prefix("criterion-") {
        return FileKind::Criterion {
            bench: bench.replace("--", "/"),
        };
    }
    FileKind::Other
}

/// Reads every raw file in `dir`.
#[expect(
    clippy::too_many_lines,
    reason = "one block per raw file kind of `perf/run.sh`'s output directory, read in the order the script writes them"
)]
pub fn load(dir: &Path) -> Result<Raw, ReportError> {
    let meta: Meta = read_json(&dir.join("meta.json"))?;
    let commands = match std::fs::read_to_string(dir.join("commands.txt")) {
        Ok(t) => t.lines().map(str::to_string).collect(),
        Err(_) => Vec::new(),
    };
    let mut raw = Raw {
        dir: dir.to_path_buf(),
        meta,
        commands,
        wrk: BTreeMap::new(),
        fixed: BTreeMap::new(),
        max: BTreeMap::new(),
        sizes: Vec::new(),
        after_load: BTreeMap::new(),
        creates: None,
        criterion: BTreeMap::new(),
        profiles: BTreeMap::new(),
    };
    let entries = std::fs::read_dir(dir).map_err(|source| ReportError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    let mut wrk_rounds: BTreeMap<(String, u32), Vec<(u32, Wrk)>> = BTreeMap::new();
    for name in names {
        let path = dir.join(&name);
        if let Some(server) = name
            .strip_prefix("profile-")
            .and_then(|n| n.strip_suffix(".txt"))
        {
            let text = std::fs::read_to_string(&path).map_err(|source| ReportError::Io {
                path: path.clone(),
                source,
            })?;
            let lines = text
                .lines()
                .map(str::trim_end)
                .filter(|l| !l.trim().is_empty())
                .map(str::to_string)
                .collect();
            raw.profiles.insert(server.to_string(), lines);
            continue;
        }
        match classify(&name) {
            FileKind::Wrk {
                server,
                depth,
                round,
            } => {
                wrk_rounds
                    .entry((server, depth))
                    .or_default()
                    .push((round, read_json(&path)?));
            }
            FileKind::Fixed { server, .. } => {
                raw.fixed.entry(server).or_default().push(read_json(&path)?);
            }
            FileKind::Max { server } => {
                raw.max.insert(server, read_json(&path)?);
            }
            FileKind::Size => raw.sizes.push(read_json(&path)?),
            FileKind::AfterLoad => {
                let m: MemoryAfterLoad = read_json(&path)?;
                raw.after_load.insert(m.server.clone(), m);
            }
            FileKind::Creates => {
                let f: CreatesFile = read_json(&path)?;
                raw.creates = Some(match (f.skipped, f.loadgen) {
                    (Some(reason), _) => Creates::Skipped(reason),
                    (None, Some(file)) => Creates::Measured(read_json(&dir.join(file))?),
                    (None, None) => Creates::Skipped("creates.json names no result".into()),
                });
            }
            FileKind::Criterion { bench } => {
                raw.criterion.insert(bench, read_json(&path)?);
            }
            FileKind::Other => {}
        }
    }
    for (key, mut rounds) in wrk_rounds {
        rounds.sort_by_key(|(round, _)| *round);
        raw.wrk
            .insert(key, rounds.into_iter().map(|(_, w)| w).collect());
    }
    for runs in raw.fixed.values_mut() {
        runs.sort_by_key(|r| r.target_rps);
    }
    raw.sizes.sort_by_key(|s| s.links);
    Ok(raw)
}
