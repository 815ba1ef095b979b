//! The API's create and patch body parsers on arbitrary bytes: an answer (a request or a
//! problem), never a panic; an accepted create holds only valid fields.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ricochet::api::request::{parse_create, parse_patch};

const NOW: u64 = 1_800_000_000;

fuzz_target!(|data: &[u8]| {
    if let Ok(c) = parse_create(data, NOW) {
        assert!(shards::link::validate_url(&c.long_url).is_ok());
        if let Some(a) = &c.custom_alias {
            assert!(shards::link::validate_key(a.as_bytes()).is_ok());
        }
    }
    let _ = parse_patch(data, NOW);
});
