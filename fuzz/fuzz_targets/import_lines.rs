//! The import's TSV, CSV and NDJSON line readers on arbitrary input: every line is a record or
//! a reported error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shards::import::{check_input, Format};

fuzz_target!(|data: &[u8]| {
    for format in [Format::Tsv, Format::Csv, Format::Ndjson] {
        let _ = check_input(data, format).expect("reading from memory cannot fail");
    }
});
