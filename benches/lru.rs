//! Per-core LRU: hits on a full default-size cache and inserts that evict.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ricochet::cache::{Lru, DEFAULT_LRU_CAPACITY};

/// Keys shaped like generated link keys (8 bytes of [A-Za-z0-9]).
fn key(i: u64) -> [u8; 8] {
    const ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut k = [0u8; 8];
    let mut n = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for b in &mut k {
        *b = ALPHABET[(n % 62) as usize];
        n /= 62;
    }
    k
}

fn full_cache() -> Lru<u64> {
    let mut lru = Lru::with_capacity(DEFAULT_LRU_CAPACITY);
    for i in 0..DEFAULT_LRU_CAPACITY as u64 {
        lru.insert(&key(i), i);
    }
    assert_eq!(lru.len(), DEFAULT_LRU_CAPACITY);
    lru
}

fn bench(c: &mut Criterion) {
    let n = DEFAULT_LRU_CAPACITY as u64;
    let keys: Vec<[u8; 8]> = (0..n).map(key).collect();
    let mut g = c.benchmark_group("lru");
    g.throughput(Throughput::Elements(1));

    let mut lru = full_cache();
    let mut i = 0usize;
    g.bench_function("get_hit_full_64k", |b| {
        b.iter(|| {
            // Stride through keys so successive gets touch different entries, as real traffic does.
            i = (i + 40_503) % keys.len();
            *lru.get(black_box(&keys[i])).unwrap()
        })
    });

    let mut lru = full_cache();
    let mut next = n;
    g.bench_function("insert_evict_full_64k", |b| {
        b.iter(|| {
            next += 1;
            lru.insert(black_box(&key(next)), next);
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
