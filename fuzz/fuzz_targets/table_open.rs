//! `Table::open` on arbitrary file contents: an error naming the file, or a table whose records
//! iterate and look up without a panic or an out-of-bounds read.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ricochet_fuzz::{open_and_walk, temp_table_path};
use std::sync::OnceLock;

fuzz_target!(|data: &[u8]| {
    static PATH: OnceLock<std::path::PathBuf> = OnceLock::new();
    open_and_walk(PATH.get_or_init(|| temp_table_path("open")), data);
});
