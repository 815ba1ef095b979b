//! HTTP stages alone: parsing a wrk-style GET head and encoding a redirect into a reused `Vec`.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use ricochet::http::encode::{encode_not_found, encode_redirect, Conn, Framing};
use ricochet::http::{parse_request, DateCache};
use shards::link::RedirectStatus;
use std::time::SystemTime;

/// What wrk sends.
const WRK_GET: &[u8] = b"GET /aB3xZ9kq HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n";

/// What a browser sends: more and longer fields to scan.
const BROWSER_GET: &[u8] = b"GET /aB3xZ9kq HTTP/1.1\r\nHost: sho.rt\r\nUser-Agent: Mozilla/5.0 \
(X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0\r\nAccept: text/html,application/\
xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\nAccept-Language: en-US,en;q=0.5\r\nAccept-Encoding: \
gzip, deflate, br\r\nConnection: keep-alive\r\nUpgrade-Insecure-Requests: 1\r\n\r\n";

/// A typical link target (~90 bytes, the dataset median).
const TARGET: &[u8] = b"https://shop.example.com/collections/summer/sale-items?utm_source=newsletter&utm_medium=email";

fn parse(c: &mut Criterion) {
    let mut g = c.benchmark_group("http_parse");
    g.throughput(Throughput::Elements(1));
    for (name, req) in [("wrk_get", WRK_GET), ("browser_get", BROWSER_GET)] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let r = parse_request(black_box(req))
                    .expect("valid")
                    .expect("complete");
                black_box(r.path.len())
            })
        });
    }
    g.finish();
}

fn encode(c: &mut Criterion) {
    let date = DateCache::new(SystemTime::now());
    let mut out = Vec::with_capacity(512);
    let mut g = c.benchmark_group("http_encode");
    g.throughput(Throughput::Elements(1));
    for (name, status) in [
        ("redirect_302", RedirectStatus::Found),
        ("redirect_301", RedirectStatus::MovedPermanently),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                out.clear();
                encode_redirect(&mut out, status, black_box(TARGET), Conn::KeepAlive, &date);
                black_box(out.len())
            })
        });
    }
    g.bench_function("not_found_404", |b| {
        b.iter(|| {
            out.clear();
            let f = Framing::plain(false, Conn::KeepAlive, &date);
            encode_not_found(&mut out, f);
            black_box(out.len())
        })
    });
    g.finish();
}

criterion_group!(benches, parse, encode);
criterion_main!(benches);
