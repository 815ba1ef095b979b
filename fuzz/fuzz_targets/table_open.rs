//! `Table::open` on arbitrary file contents: an error naming the file, or a table whose records
//! iterate and look up without a panic or an out-of-bounds read.
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
    // Open checks the structure in O(1), not every record (docs/storage.md, "Checks on
    // every access"): a forged table with valid checksums may answer a miss or a wrong but
    // well-formed link. What must hold is that every access stays in bounds.
    for (key, link) in t.iter() {
        let _ = (link.target.len(), link.status);
        if let Some(found) = t.get(key.as_bytes()) {
            let _ = found.target.len();
        }
    }
    let _ = t.get(b"aB3xZ9");
});
