//! The import's TSV, CSV and NDJSON line readers, and the other shorteners' CSV readers, on
//! arbitrary input: every line is a record or a reported error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shards::import::vendor::Vendor;
use shards::import::{check_input, Format};

fuzz_target!(|data: &[u8]| {
    let vendor = |vendor, drop_unsupported| Format::Vendor { vendor, drop_unsupported };
    for format in [
        Format::Tsv,
        Format::Csv,
        Format::Ndjson,
        vendor(Vendor::Shlink, false),
        vendor(Vendor::Yourls, true),
        vendor(Vendor::Bitly, true),
    ] {
        let _ = check_input(data, format).expect("reading from memory cannot fail");
    }
});
