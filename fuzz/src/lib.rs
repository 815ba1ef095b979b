//! What the table targets share.

use shards::table::Table;
use std::path::PathBuf;

/// A temp file for this fuzzing process (`tag` keeps targets apart).
pub fn temp_table_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("ricochet-fuzz-{tag}-{}.tbl", std::process::id()))
}

/// Writes `bytes` to `path` and opens it as a table. An error is fine; an opened table must
/// iterate and look up in bounds. Open checks structure in O(1), not every record
/// (docs/storage.md, "Checks on every access"): a forged table with valid checksums may answer
/// a miss or a wrong but well-formed link, never read out of bounds.
pub fn open_and_walk(path: &std::path::Path, bytes: &[u8]) {
    std::fs::write(path, bytes).expect("temp file");
    let Ok(t) = Table::open(path) else {
        return;
    };
    for (key, link) in t.iter() {
        let _ = (link.target.len(), link.status);
        if let Some(found) = t.get(key.as_bytes()) {
            let _ = found.target.len();
        }
    }
    let _ = t.get(b"aB3xZ9");
}
