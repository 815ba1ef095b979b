//! `perf-report`: writes the markdown capacity report (and its SVG plots) from the raw JSON of
//! a `perf/run.sh` run. See `ricochet_tools::perfreport`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Write the ricochet-vs-nginx report from a raw results directory.
#[derive(Parser)]
#[command(name = "perf-report", version)]
struct Args {
    /// Directory of raw JSON written by perf/run.sh (plots are written into it).
    #[arg(long)]
    raw: PathBuf,
    /// Markdown report to write.
    #[arg(long)]
    out: PathBuf,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match ricochet_tools::perfreport::generate(&args.raw, &args.out) {
        Ok(()) => {
            println!("wrote {}", args.out.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("perf-report: {e}");
            ExitCode::FAILURE
        }
    }
}
