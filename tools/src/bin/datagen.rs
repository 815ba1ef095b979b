//! `datagen`: writes a synthetic, deterministic links dataset for tests and benchmarks.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Parser;
use ricochet_tools::datagen::{generate, DatagenConfig, OutputFormat, StatusMix};

/// Output buffer size: large writes keep 1M lines/s within reach.
const WRITE_BUFFER_BYTES: usize = 1 << 20;

/// Generate N unique links (key, URL, status).
#[derive(Parser, Debug)]
#[command(name = "datagen", version)]
struct Args {
    /// Number of links.
    #[arg(long)]
    count: u64,
    /// Output file ("-" for stdout).
    #[arg(long)]
    out: PathBuf,
    /// tsv (key<TAB>url<TAB>status, what `ricochet import` reads), csv or ndjson.
    #[arg(long, default_value = "tsv")]
    format: OutputFormat,
    /// Seed; the same seed and options give the same file.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Keys also unique ignoring ASCII case (for nginx `map`, whose keys are case-insensitive).
    #[arg(long)]
    unique_ignore_case: bool,
    /// Redirect status mix as CODE:WEIGHT,...
    #[arg(long, default_value = "302:100")]
    statuses: StatusMix,
    /// Also write the keys alone, one per line (for load tools).
    #[arg(long)]
    keys_out: Option<PathBuf>,
}

fn open(path: &PathBuf) -> anyhow::Result<Box<dyn Write>> {
    if path.as_os_str() == "-" {
        return Ok(Box::new(BufWriter::with_capacity(
            WRITE_BUFFER_BYTES,
            std::io::stdout().lock(),
        )));
    }
    let f = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    Ok(Box::new(BufWriter::with_capacity(WRITE_BUFFER_BYTES, f)))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let cfg = DatagenConfig {
        seed: args.seed,
        unique_ignore_case: args.unique_ignore_case,
        statuses: args.statuses,
    };
    let started = Instant::now();
    let mut out = open(&args.out)?;
    let mut keys = args.keys_out.as_ref().map(open).transpose()?;
    generate(
        &cfg,
        args.count,
        args.format,
        &mut out,
        keys.as_mut().map(|k| k as &mut dyn Write),
    )
    .context("generation failed")?;
    eprintln!(
        "datagen: {} links in {:.2}s",
        args.count,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
