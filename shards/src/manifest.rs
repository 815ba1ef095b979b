//! `MANIFEST.json`: what a data dir is (format version, shard count). Written once at creation,
//! crash-safely; the shard count is fixed for the life of the dir because placement depends on it.

use crate::durable;
use crate::error::Error;
use crate::placement::MAX_SHARD_COUNT;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// File name of the manifest inside a data dir.
pub const MANIFEST_FILE: &str = "MANIFEST.json";

/// The data-dir format this build reads and writes. Bump on any incompatible layout change.
pub const DATA_DIR_FORMAT_VERSION: u32 = 1;

/// Largest manifest accepted, in bytes. A real one is under 100 bytes; the cap keeps a
/// mistaken path (a huge file) from being read into memory.
pub const MAX_MANIFEST_BYTES: u64 = 64 * 1024;

/// Contents of `MANIFEST.json`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Data-dir format version; see [`DATA_DIR_FORMAT_VERSION`].
    pub format_version: u32,
    /// Number of virtual shards (see [`crate::placement::shard_of`]).
    pub shard_count: u32,
    /// When the dir was created, seconds since the Unix epoch.
    pub created_at_s: u64,
}

impl Manifest {
    /// A manifest for a new dir with `shard_count` shards, created now.
    pub fn new(shard_count: u32) -> Result<Manifest, Error> {
        check_shard_count(shard_count)?;
        Ok(Manifest {
            format_version: DATA_DIR_FORMAT_VERSION,
            shard_count,
            created_at_s: now_s(),
        })
    }

    /// Reads and checks the manifest at `path`.
    pub fn read(path: &Path) -> Result<Manifest, Error> {
        use std::io::Read;
        let f = std::fs::File::open(path).map_err(|e| Error::io(path, "open", e))?;
        let mut text = String::new();
        f.take(MAX_MANIFEST_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|e| Error::io(path, "read", e))?;
        if text.len() as u64 > MAX_MANIFEST_BYTES {
            return Err(bad(path, format!("larger than {MAX_MANIFEST_BYTES} bytes")));
        }
        // Look at the version before the full parse so a future format with new fields is
        // reported as "unsupported version", not as a confusing field error.
        let value: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| bad(path, e.to_string()))?;
        let version = value
            .get("format_version")
            .and_then(|v| v.as_u64())
            .ok_or_else(|| bad(path, "missing or non-numeric format_version".into()))?;
        if version != u64::from(DATA_DIR_FORMAT_VERSION) {
            return Err(Error::UnsupportedFormat {
                path: path.to_path_buf(),
                found: u32::try_from(version).unwrap_or(u32::MAX),
                supported: DATA_DIR_FORMAT_VERSION,
            });
        }
        let m: Manifest = serde_json::from_value(value).map_err(|e| bad(path, e.to_string()))?;
        if check_shard_count(m.shard_count).is_err() {
            return Err(bad(
                path,
                format!(
                    "shard_count {} out of range (1..={MAX_SHARD_COUNT})",
                    m.shard_count
                ),
            ));
        }
        Ok(m)
    }

    /// Writes the manifest to `path` crash-safely (temp, fsync, rename, fsync dir).
    pub fn write(&self, path: &Path) -> Result<(), Error> {
        let mut text = serde_json::to_string_pretty(self).expect("manifest serializes");
        text.push('\n');
        durable::write_file_durable(path, text.as_bytes())
    }
}

fn bad(path: &Path, reason: String) -> Error {
    Error::BadManifest {
        path: path.to_path_buf(),
        reason,
    }
}

fn check_shard_count(n: u32) -> Result<(), Error> {
    if n == 0 || n > MAX_SHARD_COUNT {
        return Err(Error::BadShardCount(n));
    }
    Ok(())
}

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_version_check() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(MANIFEST_FILE);
        let m = Manifest::new(16).unwrap();
        m.write(&p).unwrap();
        assert_eq!(Manifest::read(&p).unwrap(), m);

        std::fs::write(
            &p,
            r#"{"format_version": 99, "shard_count": 16, "created_at_s": 0}"#,
        )
        .unwrap();
        let e = Manifest::read(&p).unwrap_err();
        assert!(
            matches!(e, Error::UnsupportedFormat { found: 99, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("MANIFEST.json"), "{e}");

        std::fs::write(
            &p,
            r#"{"format_version": 1, "shard_count": 0, "created_at_s": 0}"#,
        )
        .unwrap();
        assert!(matches!(Manifest::read(&p), Err(Error::BadManifest { .. })));
        std::fs::write(&p, "not json").unwrap();
        assert!(matches!(Manifest::read(&p), Err(Error::BadManifest { .. })));
        assert!(Manifest::new(0).is_err());
    }
}
