//! The redirect hot path allocates nothing once warm: parsing a pipelined buffer, refreshing the
//! date and encoding redirects and 404s into a write buffer that already has capacity.

mod common {
    pub mod counting_alloc;
}

use std::time::{Duration, UNIX_EPOCH};

use common::counting_alloc::{allocations, CountingAlloc};
use ricochet::http::{encode_not_found, encode_redirect, parse_request, Conn, DateCache, Framing};
use shards::link::RedirectStatus;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

#[test]
fn parse_and_encode_do_not_allocate_when_warm() {
    let mut input = Vec::new();
    for _ in 0..16 {
        input.extend_from_slice(b"GET /abc123 HTTP/1.1\r\nHost: localhost:8080\r\n\r\n");
    }
    let mut date = DateCache::new(UNIX_EPOCH + Duration::from_secs(1_700_000_000));
    let mut out = Vec::with_capacity(64 * 1024);
    let location = [b'x'; 90];

    let before = allocations();
    for round in 0..100u64 {
        date.refresh(UNIX_EPOCH + Duration::from_secs(1_700_000_000 + round));
        out.clear();
        let mut at = 0;
        while let Some(req) = parse_request(&input[at..]).expect("valid") {
            let conn = Conn::for_request(&req);
            if req.path == b"/abc123" {
                encode_redirect(&mut out, RedirectStatus::Found, &location, conn, &date);
            } else {
                let f = Framing::plain(false, conn, &date);
                encode_not_found(&mut out, f);
            }
            at += req.head_len + req.content_length;
        }
        assert_eq!(at, input.len());
    }
    let after = allocations();
    assert_eq!(after - before, 0, "hot path allocated");
    assert!(out.starts_with(b"HTTP/1.1 302 Found\r\n"));

    let v: Vec<u8> = Vec::with_capacity(16);
    assert!(allocations() > after);
    drop(v);
}
