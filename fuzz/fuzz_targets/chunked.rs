//! The chunked request-body decoder on arbitrary bytes: never panics, never claims more input
//! than it has, and a body it decodes comes back the same when encoded again as one chunk.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ricochet::http::chunked::decode;

fuzz_target!(|data: &[u8]| {
    let Ok(Some((used, body))) = decode(data) else {
        return;
    };
    assert!(used <= data.len() && body.len() < used, "consumed {used} of {}", data.len());
    let mut again = Vec::new();
    if !body.is_empty() {
        again.extend_from_slice(format!("{:x}\r\n", body.len()).as_bytes());
        again.extend_from_slice(&body);
        again.extend_from_slice(b"\r\n");
    }
    again.extend_from_slice(b"0\r\n\r\n");
    assert_eq!(decode(&again), Ok(Some((again.len(), body))));
});
