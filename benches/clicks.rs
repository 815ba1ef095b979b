//! A click recorded on the core (`analytics::combiner`): what each redirect answered to a GET
//! pays for analytics, from the request's header fields on: `counts` records a key; `full`
//! also takes the click's context (the client address parsed from `X-Forwarded-For`, the
//! referrer's host cut from its URL, the hashes of both strings) and then records it. Keys are uniform
//! over 100,000 links or one hot link (every click lands in the same slot). Every 1,024 clicks
//! the bench itself plays the aggregator: it takes the handed-off batches, clears them and
//! gives them back (a thread would fall behind at this rate, 100 times a real core's, and
//! clicks would be dropped, which is cheaper than counting them). Hand-offs and the clearing
//! are in the measurement, so it overstates the core's cost a little. Budget: 30 ns a click.

mod common;

use common::{KeyCycle, HIT_KEY_BYTES};
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use crossbeam::channel::{bounded, Receiver, Sender};
use rand::rngs::StdRng;
use rand::SeedableRng;
use ricochet::analytics::combiner::{
    Batch, ClickFields, ClickRule, Combiner, CoreMsg, BATCHES_PER_CORE,
};
use ricochet::analytics::ClientIp;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

const REFERER: &[u8] = b"https://news.example.com/item?id=12345";
const UA: &[u8] = b"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36";

/// A combiner and its stand-in aggregator.
struct Rig {
    k: Combiner,
    handed: Receiver<CoreMsg>,
    clean: Sender<Box<Batch>>,
}

impl Rig {
    fn new(full: bool) -> Rig {
        let (clean, clean_rx) = bounded(BATCHES_PER_CORE);
        for _ in 0..BATCHES_PER_CORE {
            clean.send(Batch::new()).unwrap();
        }
        let (tx, handed) = bounded::<CoreMsg>(2 * BATCHES_PER_CORE);
        let k = Combiner::new(full, clean_rx, tx, Arc::new(AtomicU64::new(0)));
        Rig { k, handed, clean }
    }

    fn aggregate(&mut self) {
        while let Ok(m) = self.handed.try_recv() {
            if let CoreMsg::Batch(mut b) = m {
                b.clear();
                self.clean.send(b).unwrap();
            }
        }
    }
}

fn clicks(c: &mut Criterion) {
    let mut rng = StdRng::seed_from_u64(9);
    let keys: Vec<String> = (0..100_000)
        .map(|_| common::random_key(&mut rng, HIT_KEY_BYTES))
        .collect();
    let packed = common::packed(&keys);
    let now_s = 1_764_547_200;
    // 5,000 visitors, each behind the fleet's balancer.
    let forwarded: Vec<Vec<u8>> = (0..5000u32)
        .map(|n| format!("198.51.100.7, 10.0.{}.{}", n / 256, n % 256).into_bytes())
        .collect();

    let mut g = c.benchmark_group("click");
    g.throughput(Throughput::Elements(1));
    for (name, full) in [("counts", false), ("full", true)] {
        g.bench_function(format!("{name}_uniform"), |b| {
            let mut r = Rig::new(full);
            let mut cycle = KeyCycle::new(&packed, HIT_KEY_BYTES);
            let mut n = 0u64;
            b.iter(|| {
                n += 1;
                let f = fields(&forwarded[(n % 5000) as usize]);
                let click = r.k.take(ClientIp::XForwardedFor, black_box(&f), now_s);
                r.k.record(black_box(cycle.next_key()), &click, ClickRule::NONE, now_s);
                if n % 1024 == 0 {
                    r.aggregate();
                }
            });
            assert_eq!(r.k.tally.dropped, 0, "every click was counted");
        });
        g.bench_function(format!("{name}_hot"), |b| {
            let mut r = Rig::new(full);
            let key = keys[0].as_bytes();
            let f = fields(&forwarded[1]);
            b.iter(|| {
                let click = r.k.take(ClientIp::XForwardedFor, black_box(&f), now_s);
                r.k.record(black_box(key), &click, ClickRule::NONE, now_s)
            });
            assert_eq!(r.k.tally.dropped, 0);
        });
    }
    g.finish();
}

/// A browser's GET from behind the fleet's balancer.
fn fields(xff: &[u8]) -> ClickFields<'_> {
    ClickFields {
        peer: [0; 16],
        forwarded_for: Some(xff),
        user_agent: Some(UA),
        referer: Some(REFERER),
    }
}

criterion_group!(benches, clicks);
criterion_main!(benches);
