//! The abuse blocklist (issue 27 asks for at most 50 ns a redirect with 1,000,000 entries):
//! `Blocklist::blocks` on stored targets as the redirect path calls it, for a random mix of
//! targets on 4,096 hosts that are not listed (nearly all traffic) and for listed ones (a host,
//! a subdomain of one, a path prefix); and how long the million-line file takes to parse.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use ricochet::api::blocklist::{Blocklist, VerdictMemo};

/// Entries of the list.
const ENTRIES: usize = 1_000_000;
/// Distinct targets cycled through.
const TARGETS: usize = 4096;

fn host(rng: &mut StdRng) -> String {
    let label = |rng: &mut StdRng, n: usize| -> String {
        (0..n).map(|_| rng.gen_range(b'a'..=b'z') as char).collect()
    };
    let (a, b) = (rng.gen_range(4..14), rng.gen_range(2..4));
    format!("{}.{}", label(rng, a), label(rng, b))
}

/// A threat feed's shape: hosts-file lines, plain hosts and a tenth path prefixes.
fn list_text(rng: &mut StdRng) -> (String, Vec<String>) {
    let mut text = String::with_capacity(ENTRIES * 24);
    let mut hosts = Vec::with_capacity(ENTRIES);
    for i in 0..ENTRIES {
        let h = host(rng);
        match i % 10 {
            0 => text.push_str(&format!("{h}/login\n")),
            1..=4 => text.push_str(&format!("0.0.0.0 {h}\n")),
            _ => text.push_str(&format!("{h}\n")),
        }
        hosts.push(h);
    }
    (text, hosts)
}

fn blocklist(c: &mut Criterion) {
    let mut rng = StdRng::seed_from_u64(27);
    let (text, listed) = list_text(&mut rng);
    let list = Blocklist::parse(&text).expect("within the limit");
    assert_eq!(list.len(), ENTRIES);
    eprintln!(
        "{ENTRIES} entries: {} bytes, {:.1} bytes an entry",
        list.heap_bytes(),
        list.heap_bytes() as f64 / ENTRIES as f64
    );
    let clean: Vec<String> = (0..TARGETS)
        .map(|i| {
            let sub = if i % 3 == 0 { "www." } else { "" };
            format!("https://{sub}{}/p/{i}?utm_source=x", host(&mut rng))
        })
        .collect();
    let blocked: Vec<String> = (0..TARGETS)
        .map(|i| {
            let h = &listed[rng.gen_range(0..listed.len()) / 10 * 10];
            match i % 2 {
                0 => format!("https://{h}/login?next=1"),
                _ => format!(
                    "https://a.b.{}/x",
                    listed[rng.gen_range(0..listed.len()) | 1]
                ),
            }
        })
        .collect();
    let mut memo = VerdictMemo::default();
    for t in &blocked {
        assert!(list.blocks(t.as_bytes(), &mut memo), "{t}");
    }

    let mut g = c.benchmark_group("blocklist_1m");
    g.throughput(Throughput::Elements(1));
    for (name, targets) in [("not_listed", &clean), ("listed", &blocked)] {
        let mut i = 0;
        g.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % TARGETS;
                black_box(list.blocks(black_box(targets[i].as_bytes()), &mut memo))
            });
        });
    }
    g.finish();

    let mut g = c.benchmark_group("blocklist_load");
    g.sample_size(10);
    g.bench_function("parse_1m_lines", |b| {
        b.iter(|| black_box(Blocklist::parse(black_box(&text)).expect("parses").len()));
    });
    g.finish();
}

criterion_group!(benches, blocklist);
criterion_main!(benches);
