//! The request parser on arbitrary bytes: never panics, and whatever it accepts httparse (the
//! parser it is built on, without our stricter framing rules) accepts too, with the same head
//! length, method and target: the two can never disagree on where a request ends.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ricochet::http::parse::parse_request;

fuzz_target!(|data: &[u8]| {
    let Ok(Some(req)) = parse_request(data) else {
        return;
    };
    assert!(req.head_len <= data.len());
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut theirs = httparse::Request::new(&mut headers);
    match theirs.parse(data) {
        Ok(httparse::Status::Complete(n)) => {
            assert_eq!(
                n, req.head_len,
                "the parsers disagree on where the head ends"
            );
            let target = theirs.path.expect("complete").as_bytes();
            // Ours is the target's path and query: as is (origin-form, `*`), or the tail of an
            // absolute-form URL (whose bare authority means `/`).
            let mut pq = req.path.to_vec();
            if let Some(q) = req.query {
                pq.push(b'?');
                pq.extend_from_slice(q);
            }
            assert!(
                target == pq.as_slice() || target.ends_with(&pq) || req.path == b"/",
                "path and query {pq:?} are not from target {target:?}"
            );
        }
        other => panic!("we accepted a request httparse calls {other:?}"),
    }
});
