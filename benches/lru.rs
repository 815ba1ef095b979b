//! The per-core LRU of answers from other cores: hit, miss, and insert with eviction, at the
//! default capacity.

mod common;

use common::{KeyCycle, HIT_KEY_BYTES, MISS_KEY_BYTES};
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use rand::rngs::StdRng;
use rand::SeedableRng;
use ricochet::base::cache::{Lru, DEFAULT_LRU_CAPACITY};

fn lru(c: &mut Criterion) {
    let mut rng = StdRng::seed_from_u64(5);
    let keys: Vec<String> = (0..DEFAULT_LRU_CAPACITY)
        .map(|_| common::random_key(&mut rng, HIT_KEY_BYTES))
        .collect();
    let hits = common::packed(&keys);
    let misses = common::packed_misses(DEFAULT_LRU_CAPACITY, 6);
    let mut cache: Lru<u32> = Lru::with_capacity(DEFAULT_LRU_CAPACITY);
    for (i, k) in keys.iter().enumerate() {
        cache.insert(k.as_bytes(), i as u32);
    }

    let mut g = c.benchmark_group("lru");
    g.throughput(Throughput::Elements(1));
    // A full cache, every key present, visited in random order (moves each to the front).
    g.bench_function("get_hit_full", |b| {
        let mut cycle = KeyCycle::new(&hits, HIT_KEY_BYTES);
        b.iter(|| black_box(cache.get(black_box(cycle.next_key())).copied()))
    });
    g.bench_function("get_miss_full", |b| {
        let mut cycle = KeyCycle::new(&misses, MISS_KEY_BYTES);
        b.iter(|| black_box(cache.get(black_box(cycle.next_key())).copied()))
    });
    // Each insert of a new key evicts the least recently used one.
    g.bench_function("insert_evict", |b| {
        let mut cycle = KeyCycle::new(&misses, MISS_KEY_BYTES);
        b.iter(|| cache.insert(black_box(cycle.next_key()), 7))
    });
    g.finish();
}

criterion_group!(benches, lru);
criterion_main!(benches);
