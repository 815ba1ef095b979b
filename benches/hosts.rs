//! `HostTable::lookup`: which of 10,000 declared domains a `Host` header names (issue 26 asks
//! for a few nanoseconds). Hosts arrive with a port and mixed case, as browsers and proxies
//! send them; a tenth name no declared domain.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use ricochet::base::hosts::HostTable;

/// Declared domains.
const DOMAINS: usize = 10_000;
/// Distinct `Host` values cycled through.
const HOSTS: usize = 4096;

fn name(rng: &mut StdRng) -> String {
    let label = |rng: &mut StdRng, n: usize| -> String {
        (0..n).map(|_| rng.gen_range(b'a'..=b'z') as char).collect()
    };
    let (a, b) = (rng.gen_range(3..12), rng.gen_range(2..4));
    format!("{}.{}.{}", label(rng, 2), label(rng, a), label(rng, b))
}

fn hosts(c: &mut Criterion) {
    let mut rng = StdRng::seed_from_u64(26);
    let mut names: Vec<String> = (0..DOMAINS).map(|_| name(&mut rng)).collect();
    names.sort();
    names.dedup();
    let table = HostTable::new(&names).expect("valid names");
    let hosts: Vec<String> = (0..HOSTS)
        .map(|i| {
            let n = match i % 10 {
                0 => name(&mut rng), // (almost surely) not declared
                _ => names[rng.gen_range(0..names.len())].clone(),
            };
            let n = if i % 2 == 0 {
                n.to_ascii_uppercase()
            } else {
                n
            };
            format!("{n}:443")
        })
        .collect();
    // Packed, as a connection's input buffer holds them: the bench measures the lookup, not
    // a pointer chase to each host.
    let packed: Vec<u8> = hosts.concat().into_bytes();
    let mut at = Vec::with_capacity(HOSTS);
    let mut start = 0;
    for h in &hosts {
        at.push(start..start + h.len());
        start += h.len();
    }
    let mut g = c.benchmark_group("hosts");
    g.throughput(Throughput::Elements(1));
    g.bench_function("lookup_10k_domains", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) & (HOSTS - 1);
            black_box(table.lookup(black_box(&packed[at[i].clone()])))
        })
    });
    // The same hosts against a table of a few domains (all of it in L1): the lookup's own
    // work, without the cache misses of a table larger than L2.
    let few = HostTable::new(&names[..16]).expect("valid names");
    g.bench_function("lookup_16_domains", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) & (HOSTS - 1);
            black_box(few.lookup(black_box(&packed[at[i].clone()])))
        })
    });
    // The server's way (`api::domains::HostMemo` before the table): most requests name the
    // host the previous one named; one in 16 names another.
    let mut book = ricochet::api::domains::DomainBook::default();
    for n in &names {
        book.add(&ricochet::api::domains::NewDomain {
            name: n.clone(),
            ..Default::default()
        })
        .expect("valid names");
    }
    let view = book.view(ricochet::api::domains::UnknownHost::Default);
    let mut memo = ricochet::api::domains::HostMemo::default();
    g.bench_function("memo_then_lookup_10k_domains_1_in_16_new", |b| {
        let mut i = 0usize;
        b.iter(|| {
            i = i.wrapping_add(1);
            let h = if i % 16 == 0 {
                (i / 16) & (HOSTS - 1)
            } else {
                1
            };
            black_box(memo.domain_of(&view, Some(black_box(&packed[at[h].clone()]))))
        })
    });
    g.finish();
}

criterion_group!(benches, hosts);
criterion_main!(benches);
