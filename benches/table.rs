//! `Table::get` hit and miss latency on a 1M-link table (and 10M with RICOCHET_BENCH_10M=1),
//! and a pipelined batch of 16 hits with and without the prefetch hints (`prefetch_slot`,
//! `prefetch_record`) the server issues for a batch: the hinted batch must stay clearly
//! cheaper, or the hints load the wrong lines.

mod common;

use common::{KeyCycle, HIT_KEY_BYTES, MISS_KEY_BYTES};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use shards::table::Table;

fn bench_size(c: &mut Criterion, links: usize) {
    // One shard holding every link: the worst case for one table.
    let data = common::dataset(links, 1, 7);
    let table = data.tables[0].as_ref().expect("one shard holds every key");
    let hits = common::packed(&data.keys);
    drop(data.keys);
    let misses = common::packed_misses(100_000, 8);

    let mut g = c.benchmark_group("table_get");
    g.throughput(Throughput::Elements(1));
    // Every key in random order: each lookup reaches main memory (the table is ~100x L2).
    g.bench_with_input(BenchmarkId::new("hit_uniform", links), &hits, |b, hits| {
        bench_keys(b, table, hits, HIT_KEY_BYTES)
    });
    // 10,000 hot keys: the cache-resident case that skewed (Zipf-like) real traffic mostly is.
    g.bench_with_input(
        BenchmarkId::new("hit_hot10k", links),
        &hits[..HIT_KEY_BYTES * 10_000],
        |b, hits| bench_keys(b, table, hits, HIT_KEY_BYTES),
    );
    g.bench_with_input(BenchmarkId::new("miss", links), &misses, |b, misses| {
        bench_keys(b, table, misses, MISS_KEY_BYTES)
    });
    g.finish();

    let mut g = c.benchmark_group("table_batch16");
    g.throughput(Throughput::Elements(BATCH as u64));
    for hinted in [false, true] {
        let name = if hinted { "hinted" } else { "plain" };
        g.bench_with_input(BenchmarkId::new(name, links), &hits, |b, hits| {
            bench_batch(b, table, hits, hinted)
        });
    }
    g.finish();
}

/// Looks up consecutive `key_len`-byte keys from `keys`, wrapping around.
fn bench_keys(b: &mut criterion::Bencher<'_>, table: &Table, keys: &[u8], key_len: usize) {
    let mut cycle = KeyCycle::new(keys, key_len);
    b.iter(|| {
        black_box(
            table
                .get(black_box(cycle.next_key()))
                .map(|l| l.target.len()),
        )
    })
}

/// Requests in one pipelined batch (wrk's depth in perf/run.sh).
const BATCH: usize = 16;

/// Looks up `BATCH` uniform-random hits per iteration, as `core::State::process` does for a
/// pipelined read: with `hinted`, every slot is prefetched, then every record, then the gets.
fn bench_batch(b: &mut criterion::Bencher<'_>, table: &Table, keys: &[u8], hinted: bool) {
    let mut cycle = KeyCycle::new(keys, HIT_KEY_BYTES);
    b.iter(|| {
        let batch: [&[u8]; BATCH] = std::array::from_fn(|_| cycle.next_key());
        if hinted {
            let hints = batch.map(|k| table.prefetch_slot(k));
            for h in hints {
                table.prefetch_record(h);
            }
        }
        let mut bytes = 0;
        for k in batch {
            bytes += table.get(black_box(k)).map_or(0, |l| l.target.len());
        }
        black_box(bytes)
    })
}

fn table_get(c: &mut Criterion) {
    for links in common::sizes() {
        bench_size(c, links);
    }
}

criterion_group!(benches, table_get);
criterion_main!(benches);
