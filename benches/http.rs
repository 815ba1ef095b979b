//! HTTP layer hot path: parsing wrk-style GETs and encoding redirects.

use std::hint::black_box;
use std::time::SystemTime;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ricochet::http::{encode_redirect, parse_request, Conn, DateCache};
use shards::link::RedirectStatus;

const WRK_GET: &[u8] = b"GET /abc123 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n";

fn parse(c: &mut Criterion) {
    let mut g = c.benchmark_group("http_parse");
    g.throughput(Throughput::Elements(1));
    g.bench_function("wrk_get", |b| {
        b.iter(|| parse_request(black_box(WRK_GET)).unwrap().unwrap().head_len)
    });

    let pipeline: Vec<u8> = WRK_GET.repeat(16);
    g.throughput(Throughput::Elements(16));
    g.bench_function("pipeline_16", |b| {
        b.iter(|| {
            let buf = black_box(&pipeline[..]);
            let mut at = 0;
            while let Some(req) = parse_request(&buf[at..]).unwrap() {
                at += req.head_len + req.content_length;
            }
            at
        })
    });
    g.finish();
}

fn encode(c: &mut Criterion) {
    let date = DateCache::new(SystemTime::now());
    let location = format!("https://example.com/{}", "p".repeat(70));
    assert_eq!(location.len(), 90);
    let mut out = Vec::with_capacity(4096);
    let mut g = c.benchmark_group("http_encode");
    g.throughput(Throughput::Elements(1));
    g.bench_function("redirect_302_location_90", |b| {
        b.iter(|| {
            out.clear();
            encode_redirect(
                &mut out,
                RedirectStatus::Found,
                black_box(location.as_bytes()),
                Conn::KeepAlive,
                &date,
            );
            out.len()
        })
    });
    g.finish();
}

criterion_group!(benches, parse, encode);
criterion_main!(benches);
