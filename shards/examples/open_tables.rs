//! Measures how long opening every table of a data dir takes, the way the server does it: the
//! shards are split over `--threads` threads (default 2), each opening its share in turn.
//!
//! `cargo run --release -p ricochet-shards --example open_tables -- <data dir> [--threads N]
//! [--cold] [--rounds N] [--lookups N]`
//!
//! `--cold` drops the table files from the page cache first (`posix_fadvise(DONTNEED)` on just
//! those files, so other users of the machine keep their cache), to measure a first boot.
//! Without it the page cache is warm, which is what a restart sees. Besides wall time it prints
//! the busiest opener thread's CPU time, which stays meaningful on a machine shared with others.
//! `--lookups N` then times N hits on random keys (uniform over all links, reading each
//! target as a response would) and N misses.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use shards::placement::shard_of;
use shards::table::Table;
use shards::DataDir;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(dir_arg) = args.first() else {
        eprintln!("usage: open_tables <data dir> [--threads N] [--cold] [--rounds N]");
        std::process::exit(2);
    };
    let flag_value = |name: &str, default: usize| -> usize {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map_or(default, |v| v.parse().expect("a number"))
    };
    let threads = flag_value("--threads", 2).max(1);
    let rounds = flag_value("--rounds", 3).max(1);
    let cold = args.iter().any(|a| a == "--cold");
    let lookups = flag_value("--lookups", 0);
    let dir = DataDir::open(Path::new(dir_arg)).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(1);
    });
    let shard_count = dir.shard_count();
    for round in 0..rounds {
        if cold {
            for shard in 0..shard_count {
                evict(&dir.table_path(shard));
            }
        }
        let started = Instant::now();
        let per_thread: Vec<(Vec<Table>, f64)> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads)
                .map(|t| {
                    let dir = &dir;
                    s.spawn(move || {
                        // Kept open until timing ends: the server keeps its tables, and
                        // dropping them here would time munmap too.
                        let mut tables = Vec::new();
                        for shard in (t as u32..shard_count).step_by(threads) {
                            match dir.open_table(shard) {
                                Ok(Some(table)) => tables.push(table),
                                Ok(None) => {}
                                Err(e) => {
                                    eprintln!("{e}");
                                    std::process::exit(1);
                                }
                            }
                        }
                        (tables, thread_cpu_s())
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().expect("opener panicked"))
                .collect()
        });
        let elapsed = started.elapsed();
        let tables = per_thread.iter().flat_map(|p| &p.0);
        let links: u64 = tables.clone().map(Table::len).sum();
        let bytes: u64 = tables.map(Table::file_bytes).sum();
        let max_cpu_s = per_thread.iter().map(|p| p.1).fold(0.0, f64::max);
        if round + 1 == rounds && lookups > 0 {
            let all: Vec<&Table> = per_thread.iter().flat_map(|p| &p.0).collect();
            time_lookups(&all, shard_count, lookups);
        }
        println!(
            "round {round}: opened {links} links, {:.1} MiB in {:.1} ms on {threads} threads \
             (busiest thread {:.1} ms CPU; {})",
            bytes as f64 / (1024.0 * 1024.0),
            elapsed.as_secs_f64() * 1e3,
            max_cpu_s * 1e3,
            if cold { "cold cache" } else { "warm cache" },
        );
    }
}

/// Times `n` hits on keys drawn uniformly from all of `tables`, then `n` misses.
fn time_lookups(tables: &[&Table], shard_count: u32, n: usize) {
    let mut by_shard: Vec<Option<&Table>> = vec![None; shard_count as usize];
    for t in tables {
        by_shard[t.shard() as usize] = Some(t);
    }
    // Keys packed back to back (as a request buffer holds them), in a random order.
    let mut keys: Vec<String> = tables
        .iter()
        .flat_map(|t| t.iter().map(|(k, _)| k.to_owned()))
        .collect();
    let mut rng = StdRng::seed_from_u64(7);
    keys.shuffle(&mut rng);
    keys.truncate(n);
    let misses: Vec<String> = keys.iter().map(|k| format!("{k}~")).collect();
    // Twice: the first pass also pays for whatever open left cold (caches, TLB).
    let passes = [("hit", &keys, true), ("miss", &misses, false)];
    for (pass, (what, probes, want_hit)) in passes.iter().chain(passes.iter()).enumerate() {
        let pass = pass / 2 + 1;
        for chained in [false, true] {
            let started = Instant::now();
            let mut found = 0usize;
            let mut i = 0usize;
            while i < probes.len() {
                let k = &probes[i];
                let shard = shard_of(k.as_bytes(), shard_count) as usize;
                let got = by_shard[shard].and_then(|t| t.get(std::hint::black_box(k.as_bytes())));
                // Read the target's last byte, as answering copies the whole target anyway.
                let last = got.and_then(|l| l.target.as_bytes().last().copied());
                found += usize::from(got.is_some() && last != Some(0));
                // Chained: the next key depends on this answer (always +1 in effect), so the
                // CPU cannot overlap lookups, as in a server where each lookup is separated by
                // request handling. Unchained: back to back, overlapping as far as it can.
                i += 1 + if chained {
                    usize::from(last.unwrap_or(1) == 0)
                } else {
                    0
                };
            }
            let ns = started.elapsed().as_secs_f64() * 1e9 / probes.len().max(1) as f64;
            assert_eq!(found, if *want_hit { probes.len() } else { 0 }, "{what}");
            println!(
                "  pass {pass} {what}{}: {ns:.0} ns per lookup over {} random keys",
                if chained { " (dependent)" } else { "" },
                probes.len()
            );
        }
    }
}

/// Drops `path`'s pages from the page cache (clean pages only; tables are never dirty here).
fn evict(path: &Path) {
    let Ok(f) = std::fs::File::open(path) else {
        return;
    };
    // SAFETY: fadvise on a descriptor owned by `f`, alive for the call; it only affects caching.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
}

/// CPU time used by the calling thread, in seconds: unlike wall time, not inflated when other
/// processes compete for the cores.
fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}
