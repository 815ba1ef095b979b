//! `loadgen`: open-loop constant-rate HTTP/1.1 load generator for ricochet that measures
//! latency from each request's scheduled send time and checks every response.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Parser;
use ricochet_tools::loadgen::cli::{max_summary, parse_duration, parse_rate, summary};
use ricochet_tools::loadgen::engine::pin_to_cpu;
use ricochet_tools::loadgen::links::Dataset;
use ricochet_tools::loadgen::search::{find_max, MaxSearch, DEFAULT_PRECISION};
use ricochet_tools::loadgen::zipf::KeyDist;
use ricochet_tools::loadgen::{run, LoadConfig};

/// Constant-rate load against a ricochet (or any redirect) server.
#[derive(Parser, Debug)]
#[command(name = "loadgen", version)]
struct Args {
    /// Server address, host:port.
    #[arg(long)]
    target: String,
    /// Requests per second (20000, 20k, 1.5M). With --max: the first rate tried.
    #[arg(long, value_parser = parse_rate, default_value = "10000")]
    rate: u64,
    /// Measured duration (per step with --max).
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    duration: Duration,
    /// Warm-up at the same rate before measuring (per step with --max).
    #[arg(long, value_parser = parse_duration, default_value = "2s")]
    warmup: Duration,
    /// Keep-alive connections.
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Requests in flight per connection.
    #[arg(long, default_value_t = 1)]
    pipeline: usize,
    /// Links file: key<TAB>url[<TAB>status].
    #[arg(long)]
    links: PathBuf,
    /// Key popularity: uniform or zipf:S.
    #[arg(long, default_value = "uniform")]
    dist: KeyDist,
    /// Share of requests for keys not in the dataset (must get 404).
    #[arg(long, default_value_t = 0.0)]
    unknown_share: f64,
    /// Share of POST /api/v1/urls creates (must get 201).
    #[arg(long, default_value_t = 0.0)]
    create_share: f64,
    /// Bearer token for creates.
    #[arg(long)]
    api_key: Option<String>,
    /// Host header (default: the target).
    #[arg(long)]
    host: Option<String>,
    /// Seed of the request mix.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Wait this long after the last send for outstanding responses.
    #[arg(long, value_parser = parse_duration, default_value = "2s")]
    drain: Duration,
    /// Write the JSON summary here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Search for the highest rate whose p99 stays within --slo-p99.
    #[arg(long)]
    max: bool,
    /// p99 bound for --max.
    #[arg(long, value_parser = parse_duration, default_value = "1ms")]
    slo_p99: Duration,
    /// Send User-Agent, Referer and X-Forwarded-For with every GET (rotating browsers,
    /// referrers and 65,536 client addresses), as click analytics sees real traffic.
    #[arg(long)]
    click_headers: bool,
    /// Pin the generator thread to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
}

fn resolve(target: &str) -> anyhow::Result<SocketAddr> {
    target
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {target}"))?
        .next()
        .with_context(|| format!("{target} resolves to no address"))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let addr = resolve(&args.target)?;
    if let Some(cpu) = args.cpu {
        pin_to_cpu(cpu)?;
    }
    let data = Dataset::load(&args.links)?;
    eprintln!(
        "loadgen: {} links from {}",
        data.len(),
        args.links.display()
    );
    let mut cfg = LoadConfig::new(addr);
    cfg.host = args.host.clone().unwrap_or_else(|| args.target.clone());
    cfg.rate = args.rate;
    cfg.duration = args.duration;
    cfg.warmup = args.warmup;
    cfg.connections = args.connections;
    cfg.pipeline = args.pipeline;
    cfg.dist = args.dist;
    cfg.unknown_share = args.unknown_share;
    cfg.create_share = args.create_share;
    cfg.api_key = args.api_key.clone();
    cfg.seed = args.seed;
    cfg.click_headers = args.click_headers;
    cfg.drain = args.drain;

    let (json, failed) = if args.max {
        let search = MaxSearch {
            start_rps: args.rate,
            slo_p99_us: args.slo_p99.as_secs_f64() * 1e6,
            precision: DEFAULT_PRECISION,
        };
        let report = find_max(&search, |rate| {
            let mut step = cfg.clone();
            step.rate = rate;
            eprintln!("loadgen: step at {rate} req/s");
            let r = run(&step, &data)?;
            eprint!("{}", summary(&r));
            Ok::<_, anyhow::Error>(r)
        })?;
        print!("{}", max_summary(&report));
        (serde_json::to_string_pretty(&report)?, 0)
    } else {
        let report = run(&cfg, &data)?;
        print!("{}", summary(&report));
        (serde_json::to_string_pretty(&report)?, report.error_total)
    };
    if let Some(path) = &args.json {
        std::fs::write(path, json).with_context(|| format!("cannot write {}", path.display()))?;
    }
    // Wrong answers make the run fail, so scripts cannot mistake a broken server for a fast one.
    if failed > 0 {
        bail!("{failed} requests failed");
    }
    Ok(())
}
