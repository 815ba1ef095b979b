//! The node's own record of its last confirmed allocation, fsynced before a range is
//! published. It is the evidence a rolled-back authority is caught by: the database must
//! still hold this audit row and a `next_id` at or past its end.
//!
//! File `alloc/fleet-confirmed` in the data dir, replaced atomically (`shards::durable`):
//!
//! ```text
//! magic "RCFLEET1" | u16 len | namespace | u16 len | request id | u64 start | u64 end | u32 CRC32C
//! ```
//! (integers little-endian; the CRC covers every byte before it).

use std::path::{Path, PathBuf};

use crate::db::FleetError;

/// File name, inside `shards::alloc::ALLOC_DIR_NAME`.
pub const EVIDENCE_FILE_NAME: &str = "fleet-confirmed";

const MAGIC: &[u8; 8] = b"RCFLEET1";

/// A confirmed allocation: `[start, end)` of `namespace`, made by `request_id`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evidence {
    pub namespace: String,
    pub request_id: String,
    pub start: u64,
    pub end: u64,
}

impl Evidence {
    /// The evidence file's path in `data_dir`.
    pub fn path(data_dir: &Path) -> PathBuf {
        data_dir
            .join(shards::alloc::ALLOC_DIR_NAME)
            .join(EVIDENCE_FILE_NAME)
    }

    /// Reads the evidence, if any. A damaged file is an error naming it, never ignored.
    pub fn load(data_dir: &Path) -> Result<Option<Evidence>, FleetError> {
        let path = Evidence::path(data_dir);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(FleetError::Refused(format!(
                    "cannot read {}: {e}",
                    path.display()
                )))
            }
        };
        decode(&bytes).map(Some).ok_or_else(|| {
            FleetError::Refused(format!(
                "{} is corrupt (magic, lengths or CRC); it is this node's proof of its last \
                 allocation: restore it, do not delete it",
                path.display()
            ))
        })
    }

    /// Writes the evidence durably (temp file, fsync, rename, directory fsync).
    pub fn store(&self, data_dir: &Path) -> std::io::Result<()> {
        let dir = data_dir.join(shards::alloc::ALLOC_DIR_NAME);
        shards::durable::create_dir_durable(&dir)?;
        shards::durable::write_atomic(&dir, EVIDENCE_FILE_NAME, &self.encode(), 0o600)
    }

    fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(64);
        v.extend_from_slice(MAGIC);
        for s in [&self.namespace, &self.request_id] {
            v.extend_from_slice(&(s.len() as u16).to_le_bytes());
            v.extend_from_slice(s.as_bytes());
        }
        v.extend_from_slice(&self.start.to_le_bytes());
        v.extend_from_slice(&self.end.to_le_bytes());
        let crc = crc32c::crc32c(&v);
        v.extend_from_slice(&crc.to_le_bytes());
        v
    }
}

fn decode(b: &[u8]) -> Option<Evidence> {
    let body_len = b.len().checked_sub(4)?;
    let crc = u32::from_le_bytes(b[body_len..].try_into().ok()?);
    if crc32c::crc32c(&b[..body_len]) != crc || b.get(..8)? != MAGIC {
        return None;
    }
    let mut at = 8;
    let mut text = || {
        let len = u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?) as usize;
        let s = std::str::from_utf8(b.get(at + 2..at + 2 + len)?)
            .ok()?
            .to_owned();
        at += 2 + len;
        Some(s)
    };
    let namespace = text()?;
    let request_id = text()?;
    let rest = b.get(at..body_len)?;
    if rest.len() != 16 {
        return None;
    }
    let start = u64::from_le_bytes(rest[..8].try_into().ok()?);
    let end = u64::from_le_bytes(rest[8..].try_into().ok()?);
    (start < end).then_some(Evidence {
        namespace,
        request_id,
        start,
        end,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_damage() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Evidence::load(dir.path()).unwrap(), None);
        let e = Evidence {
            namespace: "eu".into(),
            request_id: "00ff".into(),
            start: 7,
            end: 10,
        };
        e.store(dir.path()).unwrap();
        assert_eq!(Evidence::load(dir.path()).unwrap(), Some(e));
        let path = Evidence::path(dir.path());
        let mut bytes = std::fs::read(&path).unwrap();
        for i in 0..bytes.len() {
            bytes[i] ^= 1;
            assert!(decode(&bytes).is_none(), "flip at {i}");
            bytes[i] ^= 1;
        }
        std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        let err = Evidence::load(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("fleet-confirmed") && err.contains("corrupt"),
            "{err}"
        );
    }
}
