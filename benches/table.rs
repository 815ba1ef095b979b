//! `Table::get` hit and miss latency on a 1M-link table (and 10M with RICOCHET_BENCH_10M=1).

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use shards::link::RedirectStatus;
use shards::table::{write_table, OwnedLink, Table};

const KEY_ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// Random 8-character keys: hits are drawn from these, misses are 9-character keys (never present).
fn random_key(rng: &mut StdRng, len: usize) -> String {
    (0..len)
        .map(|_| KEY_ALPHABET[rng.gen_range(0..KEY_ALPHABET.len())] as char)
        .collect()
}

fn bench_size(c: &mut Criterion, links: usize) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("00000.tbl");
    let mut rng = StdRng::seed_from_u64(7);
    let mut keys: Vec<String> = (0..links).map(|_| random_key(&mut rng, 8)).collect();
    keys.sort_unstable();
    keys.dedup();
    let entries = keys.iter().enumerate().map(|(i, k)| OwnedLink {
        key: k.clone(),
        target: format!("https://example.com/some/long/path/{i}?utm_source=bench"),
        status: RedirectStatus::Found,
        expires_at_s: 0,
        created_at_s: 1_700_000_000,
        flags: 0,
    });
    // One shard holding every link: the worst case for one table.
    write_table(&path, 0, 1, 0, entries).expect("write table");
    let table = Table::open(&path).expect("open table");
    keys.shuffle(&mut rng);
    // Keys packed contiguously, as a server holds them in its request buffer: the probe key
    // itself is never a cache miss, only the table is.
    let hits: Vec<u8> = keys.iter().flat_map(|k| k.bytes()).collect();
    drop(keys);
    let misses: Vec<u8> = (0..100_000)
        .flat_map(|_| random_key(&mut rng, 9).into_bytes())
        .collect();

    let mut g = c.benchmark_group("table_get");
    g.throughput(Throughput::Elements(1));
    // Every key in random order: each lookup reaches main memory (the table is ~100x L2).
    g.bench_with_input(BenchmarkId::new("hit_uniform", links), &hits, |b, hits| {
        bench_keys(b, &table, hits, 8)
    });
    // 10,000 hot keys: the cache-resident case that skewed (Zipf-like) real traffic mostly is.
    g.bench_with_input(
        BenchmarkId::new("hit_hot10k", links),
        &hits[..8 * 10_000],
        |b, hits| bench_keys(b, &table, hits, 8),
    );
    g.bench_with_input(BenchmarkId::new("miss", links), &misses, |b, misses| {
        bench_keys(b, &table, misses, 9)
    });
    g.finish();
}

/// Looks up consecutive `key_len`-byte keys from `keys`, wrapping around.
fn bench_keys(b: &mut criterion::Bencher<'_>, table: &Table, keys: &[u8], key_len: usize) {
    let mut at = 0usize;
    b.iter(|| {
        let key = &keys[at..at + key_len];
        at += key_len;
        if at == keys.len() {
            at = 0;
        }
        black_box(table.get(black_box(key)).map(|l| l.target.len()))
    })
}

fn table_get(c: &mut Criterion) {
    bench_size(c, 1_000_000);
    if std::env::var_os("RICOCHET_BENCH_10M").is_some_and(|v| v == "1") {
        bench_size(c, 10_000_000);
    }
}

criterion_group!(benches, table_get);
criterion_main!(benches);
