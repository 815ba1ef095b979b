//! One request end to end, in process, on the core that owns the key: parse a wrk-style GET
//! from bytes, `Router::owner`, `Store::get` on the shard tables, encode the response into a
//! reused `Vec`. No socket: this is the CPU cost per request that the io_uring loop adds its
//! syscalls to. A local hit (target < 500 ns) with every key in random order (each lookup
//! misses the CPU caches) and over 10,000 hot keys, and a miss (404), at 1M links (10M with
//! RICOCHET_BENCH_10M=1).

mod common;

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ricochet::base::target::TableView;
use ricochet::http::encode::{encode_not_found, encode_redirect, Conn, Framing};
use ricochet::http::{parse_request, DateCache, Method};
use ricochet::mesh::router::Router;
use ricochet::owner::store::Store;
use shards::placement::DEFAULT_SHARD_COUNT;
use std::time::{SystemTime, UNIX_EPOCH};

/// Distinct miss requests cycled through.
const MISSES: usize = 100_000;

/// Distinct keys of the hot-key case.
const HOT_KEYS: usize = 10_000;

/// Requests as wrk sends them (`wrk -t1 -c64 http://127.0.0.1:8080/KEY`), back to back in one
/// buffer, as pipelined requests sit in a read buffer.
fn wrk_requests(keys: impl Iterator<Item = String>) -> Vec<u8> {
    let mut buf = Vec::new();
    for key in keys {
        buf.extend_from_slice(b"GET /");
        buf.extend_from_slice(key.as_bytes());
        buf.extend_from_slice(b" HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n");
    }
    buf
}

/// What the server does for one request at the front of `buf`; returns the head's length.
#[inline]
fn serve_one(
    buf: &[u8],
    router: &Router,
    store: &Store,
    view: &TableView,
    now_s: u64,
    date: &DateCache,
    out: &mut Vec<u8>,
) -> usize {
    let req = parse_request(buf)
        .expect("valid request")
        .expect("complete request");
    debug_assert_eq!(req.method, Method::Get);
    let key = &req.path[1..];
    let owner = router.owner(key);
    let conn = Conn::for_request(&req);
    out.clear();
    match store.get(owner.shard, key, now_s) {
        Some(answer) => {
            let target = answer.target.resolve(view).expect("a current table");
            encode_redirect(out, answer.status, target, conn, date)
        }
        None => encode_not_found(out, Framing::plain(false, conn, date)),
    }
    req.head_len
}

fn bench_size(c: &mut Criterion, links: usize) {
    let mut data = common::dataset(links, DEFAULT_SHARD_COUNT, 11);
    // One core owns every shard: every key is local (the forward bench prices the other case).
    let router = Router::new(data.shard_count, 1);
    let store = Store::new(std::mem::take(&mut data.tables));
    let view = TableView::new(data.shard_count);
    let hits = wrk_requests(data.keys.iter().cloned());
    // 10,000 hot keys: the cache-resident case skewed (Zipf-like) real traffic mostly is.
    let hot = wrk_requests(data.keys[..HOT_KEYS].iter().cloned());
    drop(data.keys);
    let misses = wrk_requests(
        common::packed_misses(MISSES, 12)
            .chunks(common::MISS_KEY_BYTES)
            .map(|k| String::from_utf8(k.to_vec()).expect("ascii")),
    );
    let now = SystemTime::now();
    let now_s = now
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let date = DateCache::new(now);
    let mut out = Vec::with_capacity(512);

    let mut g = c.benchmark_group("e2e_local");
    g.throughput(Throughput::Elements(1));
    for (name, reqs) in [
        ("hit_uniform", &hits),
        ("hit_hot10k", &hot),
        ("miss_404", &misses),
    ] {
        g.bench_with_input(BenchmarkId::new(name, links), reqs, |b, reqs| {
            let mut at = 0usize;
            b.iter(|| {
                at += serve_one(&reqs[at..], &router, &store, &view, now_s, &date, &mut out);
                if at == reqs.len() {
                    at = 0;
                }
                black_box(out.len())
            })
        });
    }
    // Sanity: the last response is a well-formed 404, and a hit encodes a redirect.
    assert!(out.starts_with(b"HTTP/1.1 404"));
    serve_one(&hits, &router, &store, &view, now_s, &date, &mut out);
    assert!(
        out.starts_with(b"HTTP/1.1 302"),
        "{}",
        String::from_utf8_lossy(&out)
    );
    g.finish();
}

fn e2e(c: &mut Criterion) {
    for links in common::sizes() {
        bench_size(c, links);
    }
}

criterion_group!(benches, e2e);
criterion_main!(benches);
