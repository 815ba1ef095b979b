//! pgbench-style benchmark of the fleet's allocation transaction (`fleet::PgAuthority`):
//! N allocators, each with its own session and data dir, allocate back to back from one
//! namespace for a fixed time. Prints allocations per second and latency percentiles, then
//! checks the audit against what the allocators got (pairwise disjoint, same count).
//!
//! allocbench --pg postgres://postgres@127.0.0.1:5432/bench --allocators 4 --seconds 10

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use shards::alloc::{Authority, IdRange};

#[derive(Parser)]
struct Args {
    /// PostgreSQL URL of an empty database (fleet init and the namespace are done here).
    #[arg(long)]
    pg: String,
    /// Concurrent allocators (threads, one session each).
    #[arg(long, default_value_t = 1)]
    allocators: usize,
    /// How long to run.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// IDs per allocation.
    #[arg(long, default_value_t = 1)]
    len: u64,
    /// Namespace to create and allocate from.
    #[arg(long, default_value = "bench")]
    namespace: String,
}

#[expect(
    clippy::too_many_lines,
    reason = "the benchmark's run, its threads and the report of their ranges and latencies, in the order a reader checks them"
)]
fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let mut db = fleet::Db::new(&a.pg)?;
    fleet::init(&mut db)?;
    fleet::create_namespace(&mut db, &a.namespace, 1, shards::keygen::KEY_SPACE)?;
    let deadline = Instant::now() + Duration::from_secs(a.seconds);
    let started = Instant::now();
    let threads: Vec<_> = (0..a.allocators)
        .map(|i| {
            let (url, ns, len) = (a.pg.clone(), a.namespace.clone(), a.len);
            std::thread::spawn(
                move || -> anyhow::Result<(Vec<IdRange>, hdrhistogram::Histogram<u64>, u64)> {
                    let dir = tempfile_dir()?;
                    let setup = fleet::FleetSetup {
                        url: url.clone(),
                        namespace: ns,
                        node_id: format!("bench{i}"),
                        data_dir: dir.clone(),
                        faults: fleet::FleetFaults::default(),
                        ceiling_step: fleet::CEILING_STEP,
                    };
                    let mut auth =
                        fleet::PgAuthority::new(fleet::Db::new(&url)?, setup, Arc::default())?;
                    let mut hist = hdrhistogram::Histogram::<u64>::new(3)?;
                    let mut got = Vec::new();
                    let mut failed = 0;
                    while Instant::now() < deadline {
                        let t = Instant::now();
                        match auth.allocate(len) {
                            Ok(r) => {
                                hist.record(t.elapsed().as_micros() as u64)?;
                                got.push(r);
                            }
                            Err(_) => failed += 1,
                        }
                    }
                    let _ = std::fs::remove_dir_all(&dir);
                    Ok((got, hist, failed))
                },
            )
        })
        .collect();
    let mut all = Vec::new();
    let mut hist = hdrhistogram::Histogram::<u64>::new(3)?;
    let mut failed = 0;
    for t in threads {
        let (got, h, f) = t.join().expect("allocator thread")?;
        all.extend(got);
        hist.add(h)?;
        failed += f;
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.sort_by_key(|r| r.start);
    let disjoint = all.windows(2).all(|w| w[0].end <= w[1].start);
    let audited = fleet::show_namespace(&mut db, &a.namespace)?.map_or(0, |n| n.audited_intervals);
    println!(
        "allocators {} len {}: {:.0} allocations/s ({} in {:.1} s, {} failed), latency p50 {} us p99 {} us p99.9 {} us max {} us; ranges disjoint: {}, audit rows {} (= allocations: {})",
        a.allocators,
        a.len,
        all.len() as f64 / elapsed,
        all.len(),
        elapsed,
        failed,
        hist.value_at_quantile(0.5),
        hist.value_at_quantile(0.99),
        hist.value_at_quantile(0.999),
        hist.max(),
        disjoint,
        audited,
        audited == all.len() as u64
    );
    anyhow::ensure!(
        disjoint && audited == all.len() as u64,
        "allocation check failed"
    );
    Ok(())
}

/// A fresh directory for one allocator's evidence file.
fn tempfile_dir() -> std::io::Result<std::path::PathBuf> {
    let mut b = [0u8; 8];
    for x in &mut b {
        *x = rand::random();
    }
    let name: String = b.iter().map(|x| format!("{x:02x}")).collect();
    let dir = std::env::temp_dir().join(format!("allocbench-{name}"));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
