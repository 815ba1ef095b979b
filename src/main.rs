//! The `ricochet` command: `serve` and `import`.

mod cli_config;

use anyhow::Context;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use ricochet::node::core_loop::{Parking, Timeouts, DEFAULT_SPIN_BEFORE_PARK_US};
use ricochet::node::server::{serve, ServeOptions, DEFAULT_LRU_CAPACITY};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

#[global_allocator]
static ALLOC: ricochet::metrics::CountingAlloc = ricochet::metrics::CountingAlloc;

#[derive(Parser)]
#[command(
    name = "ricochet",
    version,
    about = "Thread-per-core URL shortener and redirect server"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve redirects (the default when no subcommand is given).
    Serve(Box<ServeArgs>),
    /// Build shard tables offline from a TSV, CSV or NDJSON file of links.
    Import(ImportArgs),
    /// Manage API keys (stored hashed in the data dir).
    Keys(KeysArgs),
    /// Manage the domains the server answers for, each its own keyspace chosen by `Host`.
    Domains(DomainsArgs),
    /// Fleet mode: the PostgreSQL schema, namespaces and the failover runbook's commands.
    Fleet {
        #[command(subcommand)]
        cmd: ricochet::fleet_mode::cli::FleetCommand,
    },
    /// Write every live link of a data dir (a consistent snapshot, safe while a server runs)
    /// in a format `ricochet import` reads back: the backup and migration path.
    Export(ExportArgs),
    /// `serve` settings files: check one, or print a commented default.
    Config {
        #[command(subcommand)]
        cmd: ConfigCommand,
    },
}

#[derive(clap::Args)]
struct ExportArgs {
    /// Data directory.
    #[arg(long, default_value = "./data")]
    data_dir: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = FormatArg::Ndjson)]
    format: FormatArg,
    /// Write here instead of standard output (replaced atomically when complete).
    #[arg(long)]
    output: Option<PathBuf>,
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Validate FILE as `serve --config FILE [FLAGS]` would read it (with the environment),
    /// print every effective setting and where it came from, and exit; nothing is started.
    Check {
        file: PathBuf,
        /// Serve flags to apply on top, after `--`.
        #[arg(last = true)]
        flags: Vec<String>,
    },
    /// Print a default settings file: every key commented out, with its help and default.
    Default,
}

#[derive(clap::Args)]
struct KeysArgs {
    /// Data directory.
    #[arg(long, default_value = "./data")]
    data_dir: PathBuf,
    #[command(subcommand)]
    cmd: ricochet::api::keys::KeysCommand,
}

#[derive(clap::Args)]
struct DomainsArgs {
    /// Data directory.
    #[arg(long, default_value = "./data")]
    data_dir: PathBuf,
    #[command(subcommand)]
    cmd: ricochet::api::domains::DomainsCommand,
}

/// A flag given twice takes its last value (`serve --cores 2 ... --cores 1`), so wrappers can
/// append overrides to a base command line.
#[derive(clap::Args, Clone)]
#[command(args_override_self = true)]
struct ServeArgs {
    /// TOML file of serve settings (keys: the flags in snake_case). Flags and RICOCHET_<KEY>
    /// environment variables override it; see `ricochet config default`.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Data directory (created if missing).
    #[arg(long, default_value = "./data")]
    data_dir: PathBuf,
    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0:8080")]
    listen: SocketAddr,
    /// Cores to run on (default: every CPU this process may use).
    #[arg(long)]
    cores: Option<usize>,
    /// CPUs of the click aggregators' own (a list like `taskset -c` takes: `6,7` or `6-7`):
    /// the cores run on the other CPUs this process may use, and never share theirs. Without
    /// it, aggregators share the cores' CPUs at the lowest priority and step aside for them.
    #[arg(long, value_name = "LIST", env = "RICOCHET_SERVICE_CPUS")]
    service_cpus: Option<ricochet::base::cpus::CpuList>,
    /// Each core aggregates its own clicks between requests, in slices of at most 20 µs (the
    /// slow chores on a service thread). Far fewer clicks dropped near saturation, a higher
    /// p99 at moderate rates (docs/analytics.md); ignored with --service-cpus.
    #[arg(long)]
    clicks_on_cores: bool,
    /// Base of `short_url` in API responses, e.g. https://sho.rt
    #[arg(long, value_parser = parse_public_url)]
    public_url: Option<String>,
    /// What a request whose `Host` names no declared domain (`ricochet domains`) gets: the
    /// default domain's links, or 404.
    #[arg(long, value_enum, default_value_t = ricochet::api::domains::UnknownHost::Default)]
    unknown_host: ricochet::api::domains::UnknownHost,
    /// Which origins' pages may call the APIs from a browser (CORS): `*` any (the default, as
    /// Shlink's), `none`, or a comma-separated list such as
    /// `https://app.shlink.io,http://localhost:3000`. Redirects never carry CORS fields.
    #[arg(long, value_name = "ORIGINS", default_value = "*", value_parser = ricochet::api::cors::CorsOrigins::parse)]
    cors_origins: ricochet::api::cors::CorsOrigins,
    /// An abuse blocklist: one host, host/path prefix or URL per line (hosts-file and Adblock
    /// host lines too); links to what it names answer 451 and cannot be created. Read again
    /// within about a second of a change.
    #[arg(long, value_name = "FILE")]
    blocklist: Option<std::path::PathBuf>,
    /// What a path after a link's key does: `/{key}/more` is 404 (`not-found`), goes to the
    /// target's path with `/more` appended (`append`), or where `/{key}` goes (`ignore`).
    #[arg(long, value_enum, default_value_t = ricochet::route::ExtraPath::NotFound)]
    extra_path: ricochet::route::ExtraPath,
    /// Forward the visitor's query string into the target's: its parameters appended, a name
    /// the visitor sends replacing the target's of that name.
    #[arg(long)]
    forward_query: bool,
    /// `/{key}/` redirects as `/{key}` does, whatever --extra-path says.
    #[arg(long)]
    trailing_slash: bool,
    /// How an idle core waits: `adaptive` spins, then sleeps until an event; `busy` never sleeps.
    #[arg(long, value_enum, default_value_t = ParkArg::Adaptive)]
    park: ParkArg,
    /// Adaptive mode: microseconds to spin after the last event before sleeping.
    #[arg(long, default_value_t = DEFAULT_SPIN_BEFORE_PARK_US,
          value_parser = clap::value_parser!(u64).range(0..=MAX_SPIN_US))]
    spin_us: u64,
    /// Entries in each core's LRU of answers from other cores.
    #[arg(long, default_value_t = DEFAULT_LRU_CAPACITY, value_parser = parse_lru_capacity)]
    lru_capacity: usize,
    /// Close a connection whose request head is not complete this long after its first byte.
    #[arg(long, default_value_t = ricochet::http::limits::HEADER_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(MIN_TIMEOUT_MS..=MAX_TIMEOUT_MS))]
    header_timeout_ms: u64,
    /// Close a keep-alive connection idle this long between requests.
    #[arg(long, default_value_t = ricochet::http::limits::IDLE_KEEPALIVE_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(MIN_TIMEOUT_MS..=MAX_TIMEOUT_MS))]
    idle_timeout_ms: u64,
    /// Start even if an append log is corrupt in the middle, skipping (and reporting) the bad
    /// bytes. Without it such a log refuses to start.
    #[arg(long)]
    salvage: bool,
    /// IDs per range taken from the allocation authority by each core.
    #[arg(long, default_value_t = shards::alloc::DEFAULT_SEGMENT_LEN)]
    segment_len: u64,
    /// Creates per second per API key (whole server).
    #[arg(long, default_value_t = ricochet::node::server::DEFAULT_CREATE_RATE_PER_S,
          value_parser = clap::value_parser!(u32).range(1..))]
    create_rate: u32,
    /// Burst of creates per API key (whole server).
    #[arg(long, default_value_t = ricochet::node::server::DEFAULT_CREATE_BURST,
          value_parser = clap::value_parser!(u32).range(1..))]
    create_burst: u32,
    /// Memtable entries per core (links written through the API) that trigger a background
    /// compaction into new table generations.
    #[arg(long, default_value_t = ricochet::owner::fold::DEFAULT_COMPACT_ENTRIES,
          value_parser = parse_compact_entries)]
    compact_entries: usize,
    /// Test only: fail each core's log fsync after this many successful ones.
    #[arg(long, hide = true)]
    fault_fail_fsync_after: Option<u64>,
    /// Test only: every click log write fails (redirects must not notice).
    #[arg(long, hide = true)]
    fault_fail_click_sync: bool,
    /// Test only: the click log's size past which it is replaced by a snapshot (so a test
    /// sees snapshots within seconds).
    #[arg(long, hide = true, default_value_t = ricochet::analytics::CLICK_LOG_SNAPSHOT_BYTES)]
    test_click_snapshot_bytes: u64,
    /// Test only: abort the start-up fold of a core-count change right after the carried
    /// idempotency logs are renamed into place, before the old logs are removed.
    #[arg(long, hide = true)]
    fault_abort_after_carry: bool,
    /// Start even if tables or logs the data dir recorded are missing, serving without the
    /// links they held (each missing file is reported). Without it such a dir is refused.
    #[arg(long)]
    accept_data_loss: bool,
    /// Test only: allow `--cores` above the CPU count (executors share CPUs), so tests on a
    /// small machine reach the paths of 3+ cores.
    #[arg(long, hide = true)]
    test_oversubscribe: bool,
    /// Fleet mode: allocate IDs from this PostgreSQL primary (set up with `ricochet fleet
    /// init`), shared by every node of the fleet. Needs --namespace and --node-id.
    #[arg(long, requires_all = ["namespace", "node_id"])]
    fleet_pg: Option<String>,
    /// Test only: the change feed polls nothing while this file exists.
    #[arg(long, hide = true, requires = "fleet_pg")]
    test_fleet_pause_feed: Option<PathBuf>,
    /// Fleet mode: how often this node flushes its changed click stats to the fleet database
    /// (milliseconds). Shorter: fresher fleet-wide stats; longer: fewer rows written (each
    /// flush writes every link-day clicked since the last one).
    #[arg(long, requires = "fleet_pg",
          default_value_t = ricochet::analytics::fleet::CLICK_FLUSH_INTERVAL_MS,
          value_parser = clap::value_parser!(u64).range(
              ricochet::analytics::fleet::MIN_CLICK_FLUSH_INTERVAL_MS
              ..=ricochet::analytics::fleet::MAX_CLICK_FLUSH_INTERVAL_MS))]
    fleet_click_flush_ms: u64,
    /// Fleet mode: the namespace (ID range) this node allocates from.
    #[arg(long, requires = "fleet_pg", value_parser = parse_fleet_name)]
    namespace: Option<String>,
    /// Fleet mode: this node's name in the allocation audit.
    #[arg(long, requires = "fleet_pg", value_parser = parse_fleet_name)]
    node_id: Option<String>,
    /// Click analytics: `full` (clicks, bots, unique visitors, referrers, browsers, OS,
    /// devices), `counts` (clicks per link and day only) or `off`.
    #[arg(long, value_enum, default_value_t = ricochet::analytics::Mode::Full)]
    analytics: ricochet::analytics::Mode,
    /// Where a click's client address comes from: the TCP `peer`, or the rightmost
    /// `x-forwarded-for` address (behind the fleet's own load balancer only).
    #[arg(long, value_enum, default_value_t = ricochet::analytics::ClientIp::Peer)]
    client_ip: ricochet::analytics::ClientIp,
    /// Days of per-link click stats kept.
    #[arg(long, default_value_t = ricochet::analytics::DEFAULT_RETENTION_DAYS,
          value_parser = clap::value_parser!(u32).range(1..=ricochet::analytics::MAX_RETENTION_DAYS as i64))]
    click_retention_days: u32,
    /// Keep a log of individual visits for this many days (Shlink's visit pages): time,
    /// referrer host, user agent, bot flag, country and the address's network. Off without
    /// it. Needs `--analytics full`; not in fleet mode (the log is a node's own).
    #[arg(long, conflicts_with = "fleet_pg",
          value_parser = clap::value_parser!(u32).range(1..=ricochet::analytics::MAX_RETENTION_DAYS as i64))]
    visit_log_days: Option<u32>,
    /// What the visit log keeps of a visitor's address: its `network` (IPv4 /24, IPv6 /48,
    /// as Shlink anonymizes) or `none`.
    #[arg(long, value_enum, requires = "visit_log_days",
          default_value_t = ricochet::analytics::VisitLogIp::Network)]
    visit_log_ip: ricochet::analytics::VisitLogIp,
    /// File of extra bot user-agent patterns (one regular expression per line, `#` comments),
    /// added to the built-in list.
    #[arg(long)]
    bot_patterns: Option<PathBuf>,
    /// Write every change of the click stats as NDJSON lines (schema v1, docs/analytics.md)
    /// into this directory, for log shippers.
    #[arg(long)]
    click_export: Option<PathBuf>,
    /// MaxMind-format database (.mmdb with country.iso_code, e.g. GeoLite2-Country) for the
    /// countries of clicks; without it every click's country is ZZ.
    #[arg(long)]
    geoip: Option<PathBuf>,
    /// Test only: this core blocks its loop once (see --test-stall-after-ms), standing in for
    /// a deadlocked core.
    #[arg(long, hide = true)]
    test_stall_core: Option<usize>,
    /// Test only: when --test-stall-core stalls, in ms after start.
    #[arg(long, hide = true, default_value_t = 1000)]
    test_stall_after_ms: u64,
    /// Test only: from the Nth allocation on, every other COMMIT reply is dropped.
    #[arg(long, hide = true)]
    test_fleet_lose_commit_reply_from: Option<u64>,
    /// Test only: from the Nth allocation on, every other COMMIT becomes a ROLLBACK whose
    /// reply is dropped.
    #[arg(long, hide = true)]
    test_fleet_rollback_as_uncertain_from: Option<u64>,
}

/// `--namespace` / `--node-id`: `[A-Za-z0-9_-]{1,64}`, like keys (they appear in the audit).
fn parse_fleet_name(s: &str) -> Result<String, String> {
    shards::link::validate_key(s.as_bytes())
        .map(|()| s.to_owned())
        .map_err(|e| format!("{e} (1 to 64 of A-Z, a-z, 0-9, '_', '-')"))
}

/// Shortest `--header-timeout-ms` / `--idle-timeout-ms`: below this a connection could be
/// closed before a client on a normal network sends its first request.
const MIN_TIMEOUT_MS: u64 = 100;

/// Longest `--header-timeout-ms` / `--idle-timeout-ms`: one hour.
const MAX_TIMEOUT_MS: u64 = 3_600_000;

/// Longest `--spin-us`: one second (spinning longer only burns the core).
const MAX_SPIN_US: u64 = 1_000_000;

fn parse_lru_capacity(s: &str) -> Result<usize, String> {
    let max = ricochet::base::cache::MAX_LRU_CAPACITY;
    match s.parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!("must be an entry count from 1 to {max}")),
    }
}

fn parse_compact_entries(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("must be at least 1 (memtable entries per core)".into()),
    }
}

/// `--public-url`: an `http(s)://` base with a host, nothing a `short_url` could not extend.
fn parse_public_url(s: &str) -> Result<String, String> {
    shards::link::validate_url(s).map_err(|e| format!("not a usable base URL: {e}"))?;
    if s.contains(['?', '#']) {
        return Err("a base URL takes no query or fragment".into());
    }
    Ok(s.to_string())
}

#[derive(Clone, Copy, ValueEnum)]
enum ParkArg {
    Adaptive,
    Busy,
}

#[derive(clap::Args)]
struct ImportArgs {
    /// Data directory (created if missing).
    #[arg(long, default_value = "./data")]
    data_dir: PathBuf,
    /// Input file: key<TAB>long_url[<TAB>status] (.tsv), key,long_url[,status] (.csv) or
    /// {"key","long_url","status"?} per line (.ndjson/.jsonl).
    input: PathBuf,
    /// Input format when the extension does not say.
    #[arg(long, value_enum)]
    format: Option<FormatArg>,
    /// Stop at the first bad line.
    #[arg(long)]
    strict: bool,
    /// With --format shlink-csv, yourls-csv or bitly-csv: import rows whose columns ricochet
    /// has no place for (titles, tags, clicks, IPs) hold values, leaving those values out
    /// (counted in the summary). Without it such rows are errors naming the column.
    #[arg(long)]
    drop_unsupported: bool,
    /// Virtual shards for a new data dir (fixed for its life).
    #[arg(long, default_value_t = shards::placement::DEFAULT_SHARD_COUNT)]
    shards: u32,
    /// The abuse blocklist the server runs with (`serve --blocklist`): a link whose target it
    /// names is a bad line naming the entry.
    #[arg(long, value_name = "FILE")]
    blocklist: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
enum FormatArg {
    Tsv,
    Csv,
    Ndjson,
    /// Import only: Shlink's CSV format (Long URL, Short code, Domain, Title, Tags).
    ShlinkCsv,
    /// Import only: YOURLS' link table (keyword, url, title, timestamp, ip, clicks).
    YourlsCsv,
    /// Import only: Bitly's link fields (id/link, long_url, created_at, custom_bitlinks, ...).
    BitlyCsv,
}

fn main() -> ExitCode {
    let command = cli_config::with_env(Cli::command());
    let mut raw: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if raw.len() == 1 {
        raw.push("serve".into()); // No subcommand means `serve`.
    }
    let argv = match cli_config::expand(raw, &command) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let matches = command.clone().get_matches_from(argv);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Some(("serve", serve)) = matches.subcommand() {
        for w in cli_config::test_flag_warnings(serve, &command) {
            eprintln!("{w}");
        }
    }
    let result = match cli.cmd.expect("a subcommand (serve by default)") {
        Cmd::Serve(a) => serve(serve_options(*a)),
        Cmd::Keys(k) => ricochet::api::keys::run_keys_command(&k.data_dir, k.cmd),
        Cmd::Domains(d) => ricochet::api::domains::run_domains_command(&d.data_dir, d.cmd),
        Cmd::Import(a) => import(a),
        Cmd::Fleet { cmd } => ricochet::fleet_mode::cli::run_command(cmd),
        Cmd::Export(a) => export(a),
        Cmd::Config {
            cmd: ConfigCommand::Check { file, flags },
        } => match cli_config::check(&file, &flags, &command) {
            Ok(text) => {
                print!("{text}");
                Ok(())
            }
            Err(e) => Err(anyhow::anyhow!(e)),
        },
        Cmd::Config {
            cmd: ConfigCommand::Default,
        } => {
            print!("{}", cli_config::default_file(&command));
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// What `ricochet serve`'s flags ask of the server.
/// `--visit-log-days` and `--visit-log-ip`.
fn visit_log_config(
    days: Option<u32>,
    ip: ricochet::analytics::VisitLogIp,
) -> Option<ricochet::analytics::VisitLogConfig> {
    days.map(|days| ricochet::analytics::VisitLogConfig {
        days,
        ip,
        max_records_per_core: shards::clicks::visits::MAX_LOGGED_VISITS_PER_CORE,
    })
}

fn serve_options(a: ServeArgs) -> ServeOptions {
    ServeOptions {
        data_dir: a.data_dir,
        listen: a.listen,
        cores: a.cores,
        public_url: a.public_url,
        unknown_host: a.unknown_host,
        cors_origins: a.cors_origins,
        blocklist: a.blocklist,
        visit_rules: ricochet::route::VisitRules {
            extra_path: a.extra_path,
            forward_query: a.forward_query,
            trailing_slash: a.trailing_slash,
        },
        parking: match a.park {
            ParkArg::Busy => Parking::Busy,
            ParkArg::Adaptive => Parking::Adaptive { spin_us: a.spin_us },
        },
        lru_capacity: a.lru_capacity,
        timeouts: Timeouts {
            header_ms: a.header_timeout_ms,
            idle_ms: a.idle_timeout_ms,
        },
        salvage: a.salvage,
        segment_len: a.segment_len,
        create_rate_per_s: a.create_rate,
        create_burst: a.create_burst,
        faults: ricochet::owner::writes::Faults {
            fail_fsync_after: a.fault_fail_fsync_after,
            abort_after_carry: a.fault_abort_after_carry,
        },
        compact_entries: a.compact_entries,
        oversubscribe: a.test_oversubscribe,
        accept_data_loss: a.accept_data_loss,
        test_stall: a.test_stall_core.map(|c| (c, a.test_stall_after_ms)),
        analytics: ricochet::analytics::AnalyticsConfig {
            mode: a.analytics,
            client_ip: a.client_ip,
            retention_days: a.click_retention_days,
            bot_patterns: a.bot_patterns,
            export_dir: a.click_export,
            geoip: a.geoip,
            fail_sync: a.fault_fail_click_sync,
            snapshot_bytes: a.test_click_snapshot_bytes,
            service_cpus: a.service_cpus.map(|l| l.0),
            clicks_on_cores: a.clicks_on_cores,
            visit_log: visit_log_config(a.visit_log_days, a.visit_log_ip),
        },
        mode: match a.fleet_pg {
            None => ricochet::node::mode::Mode::Single,
            Some(url) => {
                ricochet::node::mode::Mode::Fleet(ricochet::fleet_mode::node::FleetOptions {
                    url,
                    namespace: a.namespace.expect("clap requires --namespace"),
                    node_id: a.node_id.expect("clap requires --node-id"),
                    click_flush_ms: a.fleet_click_flush_ms,
                    faults: fleet::FleetFaults {
                        lose_commit_reply_from: a.test_fleet_lose_commit_reply_from,
                        rollback_as_uncertain_from: a.test_fleet_rollback_as_uncertain_from,
                        freeze_at_commit_from: None,
                    },
                    pause_feed_file: a.test_fleet_pause_feed,
                })
            }
        },
    }
}

fn export(a: ExportArgs) -> anyhow::Result<()> {
    use shards::export::{export, ExportFormat};
    let format = match a.format {
        FormatArg::Tsv => ExportFormat::Tsv,
        FormatArg::Csv => ExportFormat::Csv,
        FormatArg::Ndjson => ExportFormat::Ndjson,
        _ => anyhow::bail!("--format: export writes ndjson, tsv or csv"),
    };
    let now_s = ricochet::api::timefmt::now_s();
    let book = ricochet::fleet_mode::domains::book_of_data_dir(&a.data_dir)?;
    let names: std::collections::BTreeMap<u32, String> = book
        .all()
        .iter()
        .map(|d| (d.number, d.name.clone()))
        .collect();
    let summary = match &a.output {
        None => export(
            &a.data_dir,
            format,
            now_s,
            &names,
            &mut std::io::stdout().lock(),
        )?,
        Some(path) => {
            let mut buf = Vec::new();
            let s = export(&a.data_dir, format, now_s, &names, &mut buf)?;
            let dir = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(std::path::Path::new("."));
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .ok_or_else(|| anyhow::anyhow!("--output {}: not a file name", path.display()))?;
            shards::durable::write_atomic(dir, name, &buf, 0o600)
                .with_context(|| format!("--output {}", path.display()))?;
            s
        }
    };
    eprintln!(
        "exported {} links ({} expired left out{})",
        summary.links,
        summary.expired,
        if summary.retries > 0 {
            format!(
                ", read again {} times because a compaction replaced files",
                summary.retries
            )
        } else {
            String::new()
        }
    );
    Ok(())
}

/// The import's check of targets against the blocklist at `path` (its bad lines reported).
fn blocklist_check(path: &std::path::Path) -> anyhow::Result<shards::import::TargetCheck> {
    use ricochet::api::blocklist::{report_loaded, Blocklist};
    let list =
        Blocklist::load(path, 1).with_context(|| format!("--blocklist {}", path.display()))?;
    report_loaded(&list);
    Ok(shards::import::TargetCheck(std::sync::Arc::new(
        move |url| {
            list.blocking_url(url)
                .map(|e| format!("the target is on the blocklist (entry {e})"))
        },
    )))
}

fn import(a: ImportArgs) -> anyhow::Result<()> {
    use shards::import::vendor::Vendor;
    use shards::import::{run, Format, ImportOptions};
    let drop_unsupported = a.drop_unsupported;
    let vendor = |vendor| Format::Vendor {
        vendor,
        drop_unsupported,
    };
    // Removed domains too: their links are kept, and come back with the domain.
    let domains = ricochet::api::domains::DomainBook::load(&a.data_dir)?
        .all()
        .iter()
        .map(|d| (d.name.clone(), d.number))
        .collect();
    let opts = ImportOptions {
        data_dir: a.data_dir,
        input: a.input,
        format: a.format.map(|f| match f {
            FormatArg::Tsv => Format::Tsv,
            FormatArg::Csv => Format::Csv,
            FormatArg::Ndjson => Format::Ndjson,
            FormatArg::ShlinkCsv => vendor(Vendor::Shlink),
            FormatArg::YourlsCsv => vendor(Vendor::Yourls),
            FormatArg::BitlyCsv => vendor(Vendor::Bitly),
        }),
        strict: a.strict,
        shard_count_for_new_dir: a.shards,
        domains,
        refuse_target: match &a.blocklist {
            Some(path) => Some(blocklist_check(path)?),
            None => None,
        },
    };
    let summary = run(&opts)?;
    println!("{summary}");
    Ok(())
}
