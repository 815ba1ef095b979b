//! Runs an import from the command line: `cargo run --release -p ricochet-shards --example
//! import -- <data dir> <input file> [--strict]`. The operator-facing CLI lives in the server
//! binary; this is for measuring the library.

use shards::import::{run, ImportOptions};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        eprintln!("usage: import <data dir> <input file> [--strict]");
        std::process::exit(2);
    }
    let mut opts = ImportOptions::new(&args[0], &args[1]);
    opts.strict = args.iter().any(|a| a == "--strict");
    match run(&opts) {
        Ok(summary) => println!("{summary}"),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
