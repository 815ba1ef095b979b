//! The append-log stage of a write: encoding a CRC-framed `Put` into the core's pending batch
//! (`LogWriter::append_ref`), and handing a group-commit batch out and back (`take_batch` /
//! `complete`). The write and fdatasync themselves are the ring's and the disk's; their cost
//! is in the durable-creates figures of `perf/`.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use shards::link::RedirectStatus;
use shards::log::{LinkFields, LogOpRef, LogWriter};

fn put(i: u64, key: &str, target: &str) -> LogOpRef<'static> {
    // Leaked once per bench setup, so the op can be reused by value.
    let key: &'static str = Box::leak(key.to_string().into_boxed_str());
    let target: &'static str = Box::leak(target.to_string().into_boxed_str());
    LogOpRef::Put(LinkFields {
        key,
        target,
        status: RedirectStatus::Found,
        expires_at_s: 0,
        created_at_s: 1_700_000_000 + i,
        flags: 0,
        id: i,
        // As an API create logs it: with its API key's id.
        author: shards::link::Author::from_id("k3Xb9q2A").expect("an id"),
        behaviour: shards::behaviour::Behaviour::NONE,
        rules: shards::rules::Rules::NONE,
        labels: shards::labels::Labels::NONE,
    })
}

fn bench(c: &mut Criterion) {
    let op = put(
        1,
        "aB3xZ9q",
        "https://example.com/some/path/of/typical/length?utm_source=newsletter&id=12345",
    );
    let mut g = c.benchmark_group("log");
    // 64 appends into a fresh writer (its buffer grows from empty).
    g.throughput(Throughput::Elements(64));
    g.bench_function("append_put_cold_64", |b| {
        b.iter_batched_ref(
            || LogWriter::new(0, 0, 1),
            |w| {
                for _ in 0..64 {
                    w.append_ref(7, op.clone()).expect("append");
                }
            },
            BatchSize::SmallInput,
        )
    });
    // 64 appends, then the batch handed out and reported durable (buffers reused).
    g.bench_function("group_commit_64", |b| {
        let mut w = LogWriter::new(0, 0, 1);
        b.iter(|| {
            for _ in 0..64 {
                w.append_ref(7, op.clone()).expect("append");
            }
            let batch = w.take_batch().expect("not poisoned").expect("a batch");
            w.complete(batch, Ok(())).expect("durable");
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
