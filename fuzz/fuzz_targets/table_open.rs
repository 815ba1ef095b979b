//! `Table::open` on arbitrary file contents: an error naming the file, or a table whose every
//! record can be iterated and looked up without a panic or an out-of-bounds read.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shards::table::Table;
use std::sync::OnceLock;

fn path() -> &'static std::path::PathBuf {
    static P: OnceLock<std::path::PathBuf> = OnceLock::new();
    P.get_or_init(|| std::env::temp_dir().join(format!("ricochet-fuzz-{}.tbl", std::process::id())))
}

fuzz_target!(|data: &[u8]| {
    std::fs::write(path(), data).expect("temp file");
    let Ok(t) = Table::open(path()) else {
        return;
    };
    for (key, link) in t.iter() {
        let found = t.get(key.as_bytes()).expect("an iterated key is found");
        assert_eq!(found.target, link.target);
    }
    let _ = t.get(b"aB3xZ9");
});
