//! `Router::owner`: which shard and core own a key (one xxh3 of the key and a multiply).

mod common;

use common::{KeyCycle, HIT_KEY_BYTES};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rand::rngs::StdRng;
use rand::SeedableRng;
use ricochet::mesh::router::Router;
use shards::placement::DEFAULT_SHARD_COUNT;

/// Distinct keys cycled through (fits in L2: this measures the hash, not memory).
const KEYS: usize = 4096;

fn route(c: &mut Criterion) {
    let mut rng = StdRng::seed_from_u64(3);
    let keys: Vec<String> = (0..KEYS)
        .map(|_| common::random_key(&mut rng, HIT_KEY_BYTES))
        .collect();
    let keys = common::packed(&keys);
    let long: Vec<String> = (0..KEYS)
        .map(|_| common::random_key(&mut rng, 20))
        .collect();
    let long = common::packed(&long);

    let mut g = c.benchmark_group("router_owner");
    g.throughput(Throughput::Elements(1));
    for cores in [1usize, 8, 64] {
        let router = Router::new(DEFAULT_SHARD_COUNT, cores);
        g.bench_with_input(BenchmarkId::new("key8", cores), &keys, |b, keys| {
            let mut cycle = KeyCycle::new(keys, HIT_KEY_BYTES);
            b.iter(|| black_box(router.owner(black_box(cycle.next_key()))))
        });
    }
    // Custom aliases are longer; the hash is the only length-dependent part.
    let router = Router::new(DEFAULT_SHARD_COUNT, 8);
    g.bench_with_input(BenchmarkId::new("key20", 8), &long, |b, keys| {
        let mut cycle = KeyCycle::new(keys, 20);
        b.iter(|| black_box(router.owner(black_box(cycle.next_key()))))
    });
    g.finish();
}

criterion_group!(benches, route);
criterion_main!(benches);
