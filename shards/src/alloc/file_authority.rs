//! The data-dir allocation authority: a crash-safely replaced high-water file plus an
//! append-only audit log of every confirmed range.
//!
//! Files in `<data_dir>/alloc/` (all integers little-endian):
//! - `authority`, 20 bytes: magic `RCALLOC1`, high_water u64, CRC32C of bytes 0..16.
//!   Replaced via temp + fsync + rename + fsync dir before a range is returned.
//! - `audit.log`: magic `RCAUDIT1`, then 28-byte records: start u64, end u64 (exclusive),
//!   unix_ms u64, CRC32C of the 24 preceding bytes. Appended and fdatasynced after the
//!   high-water advance and before the range is returned, so `max(end) <= high_water` always
//!   holds for an intact pair of files; a high-water below it proves a rollback.
//!
//! Order matters: advancing the high-water first means a crash between the two writes only
//! wastes a range; the reverse could make the audit claim a range the authority does not cover.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::{carve, Authority, AuthorityError, IdRange, FIRST_ID};
use crate::durable;
use crate::keygen::KEY_SPACE;

/// Allocation directory inside the data dir.
pub const ALLOC_DIR_NAME: &str = "alloc";
/// High-water file inside [`ALLOC_DIR_NAME`].
pub const AUTHORITY_FILE_NAME: &str = "authority";
/// Audit log inside [`ALLOC_DIR_NAME`].
pub const AUDIT_FILE_NAME: &str = "audit.log";

const AUTHORITY_MAGIC: &[u8; 8] = b"RCALLOC1";
const AUTHORITY_BYTES: usize = 20;
const AUDIT_MAGIC: &[u8; 8] = b"RCAUDIT1";
const AUDIT_RECORD_BYTES: usize = 28;

/// One confirmed allocation from the audit log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuditEntry {
    pub range: IdRange,
    /// Wall-clock time of the allocation, Unix milliseconds (informational).
    pub unix_ms: u64,
}

/// The file-backed [`Authority`]. See the module docs for the format and ordering.
#[derive(Debug)]
pub struct FileAuthority {
    dir: PathBuf,
    high_water: u64,
    audit: File,
    audit_len: u64,
    poison: Option<String>,
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> AuthorityError + 'a {
    move |source| AuthorityError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

impl FileAuthority {
    /// Opens the authority of `data_dir`, creating it (high-water [`FIRST_ID`]) on a fresh
    /// data dir. `min_confirmed` is the highest ID the caller has seen in tables and logs (0 if
    /// none).
    ///
    /// Refuses if the high-water is below the audit log's highest end, or not above
    /// `min_confirmed`: either proves the file was rolled back or restored from an old backup,
    /// and allocating from it would re-issue IDs. Also refuses a missing authority file when
    /// the audit log or `min_confirmed` shows allocations happened. A torn last audit record
    /// (crash mid-append) is truncated; damage elsewhere is refused.
    pub fn open(data_dir: &Path, min_confirmed: u64) -> Result<FileAuthority, AuthorityError> {
        let dir = data_dir.join(ALLOC_DIR_NAME);
        durable::create_dir_durable(&dir).map_err(io_err("create", &dir))?;
        let (audit, audit_len, entries) = open_audit(&dir)?;
        let audit_max_end = entries.last().map_or(0, |e| e.range.end);
        let path = dir.join(AUTHORITY_FILE_NAME);
        let high_water = match fs::read(&path) {
            Ok(bytes) => parse_authority(&bytes).ok_or_else(|| AuthorityError::Corrupt {
                path: path.clone(),
                reason: "bad size, magic or CRC".into(),
            })?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if audit_max_end > 0 {
                    return Err(AuthorityError::Missing {
                        path,
                        evidence: "the audit log",
                    });
                }
                if min_confirmed > 0 {
                    return Err(AuthorityError::Missing {
                        path,
                        evidence: "the tables and logs",
                    });
                }
                write_authority(&dir, FIRST_ID)?;
                FIRST_ID
            }
            Err(e) => return Err(io_err("read", &path)(e)),
        };
        if high_water < audit_max_end {
            return Err(AuthorityError::RolledBack {
                path,
                high_water,
                confirmed: audit_max_end,
                evidence: "the audit log",
            });
        }
        if min_confirmed > 0 && high_water <= min_confirmed {
            return Err(AuthorityError::RolledBack {
                path,
                high_water,
                confirmed: min_confirmed + 1,
                evidence: "the tables and logs",
            });
        }
        Ok(FileAuthority {
            dir,
            high_water,
            audit,
            audit_len,
            poison: None,
        })
    }

    /// Creates the authority of `data_dir` at a proven `high_water` (migration, or recovery
    /// after a loss, with the high-water established by an operator). Refuses if the authority
    /// file exists, or if `high_water` is below what the audit log shows.
    pub fn initialize(data_dir: &Path, high_water: u64) -> Result<FileAuthority, AuthorityError> {
        let dir = data_dir.join(ALLOC_DIR_NAME);
        durable::create_dir_durable(&dir).map_err(io_err("create", &dir))?;
        let path = dir.join(AUTHORITY_FILE_NAME);
        if path.exists() {
            return Err(AuthorityError::AlreadyInitialized { path });
        }
        let high_water = high_water.clamp(FIRST_ID, KEY_SPACE);
        let (_, _, entries) = open_audit(&dir)?;
        if let Some(last) = entries.last().filter(|e| e.range.end > high_water) {
            return Err(AuthorityError::RolledBack {
                path,
                high_water,
                confirmed: last.range.end,
                evidence: "the audit log",
            });
        }
        write_authority(&dir, high_water)?;
        FileAuthority::open(data_dir, 0)
    }

    fn check_poison(&self) -> Result<(), AuthorityError> {
        match &self.poison {
            None => Ok(()),
            Some(reason) => Err(AuthorityError::Poisoned {
                reason: reason.clone(),
            }),
        }
    }
}

impl Authority for FileAuthority {
    fn allocate(&mut self, len: u64) -> Result<IdRange, AuthorityError> {
        self.check_poison()?;
        let range = carve(self.high_water, len)?;
        // Any failure from here on leaves the files in a state only a re-open can judge (a
        // rename may or may not have reached the disk; the audit may hold a torn record), so
        // it poisons; the range is never returned, at worst wasted.
        if let Err(e) = write_authority(&self.dir, range.end) {
            self.poison = Some(e.to_string());
            return Err(e);
        }
        self.high_water = range.end;
        let rec = encode_audit(&AuditEntry {
            range,
            unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        });
        let audit_path = self.dir.join(AUDIT_FILE_NAME);
        let res = self
            .audit
            .write_all_at(&rec, self.audit_len)
            .and_then(|()| self.audit.sync_data());
        if let Err(e) = res {
            let e = io_err("append to", &audit_path)(e);
            self.poison = Some(e.to_string());
            return Err(e);
        }
        self.audit_len += rec.len() as u64;
        Ok(range)
    }

    fn high_water(&self) -> u64 {
        self.high_water
    }
}

/// Reads and validates the audit log of `data_dir` (read-only: a torn tail is reported by
/// omission, not truncated).
pub fn read_audit(data_dir: &Path) -> Result<Vec<AuditEntry>, AuthorityError> {
    let path = data_dir.join(ALLOC_DIR_NAME).join(AUDIT_FILE_NAME);
    let bytes = fs::read(&path).map_err(io_err("read", &path))?;
    Ok(parse_audit(&path, &bytes)?.0)
}

fn encode_authority(high_water: u64) -> [u8; AUTHORITY_BYTES] {
    let mut b = [0u8; AUTHORITY_BYTES];
    b[..8].copy_from_slice(AUTHORITY_MAGIC);
    b[8..16].copy_from_slice(&high_water.to_le_bytes());
    let crc = crc32c::crc32c(&b[..16]);
    b[16..].copy_from_slice(&crc.to_le_bytes());
    b
}

fn parse_authority(b: &[u8]) -> Option<u64> {
    if b.len() != AUTHORITY_BYTES || &b[..8] != AUTHORITY_MAGIC {
        return None;
    }
    let crc = u32::from_le_bytes(b[16..20].try_into().ok()?);
    if crc32c::crc32c(&b[..16]) != crc {
        return None;
    }
    let hw = u64::from_le_bytes(b[8..16].try_into().ok()?);
    (FIRST_ID..=KEY_SPACE).contains(&hw).then_some(hw)
}

fn write_authority(dir: &Path, high_water: u64) -> Result<(), AuthorityError> {
    let path = dir.join(AUTHORITY_FILE_NAME);
    durable::write_atomic(
        dir,
        AUTHORITY_FILE_NAME,
        &encode_authority(high_water),
        0o600,
    )
    .map_err(io_err("write", &path))
}

fn encode_audit(e: &AuditEntry) -> [u8; AUDIT_RECORD_BYTES] {
    let mut b = [0u8; AUDIT_RECORD_BYTES];
    b[..8].copy_from_slice(&e.range.start.to_le_bytes());
    b[8..16].copy_from_slice(&e.range.end.to_le_bytes());
    b[16..24].copy_from_slice(&e.unix_ms.to_le_bytes());
    let crc = crc32c::crc32c(&b[..24]);
    b[24..].copy_from_slice(&crc.to_le_bytes());
    b
}

fn decode_audit(b: &[u8]) -> Option<AuditEntry> {
    let u = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
    let crc = u32::from_le_bytes(b[24..28].try_into().ok()?);
    (crc32c::crc32c(&b[..24]) == crc).then(|| AuditEntry {
        range: IdRange {
            start: u(0),
            end: u(8),
        },
        unix_ms: u(16),
    })
}

/// Parses an audit log; returns the entries and the valid length (shorter than the file when
/// the tail is torn).
fn parse_audit(path: &Path, bytes: &[u8]) -> Result<(Vec<AuditEntry>, u64), AuthorityError> {
    let corrupt = |reason: String| AuthorityError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    if bytes.len() < AUDIT_MAGIC.len() {
        // Torn creation: only a prefix of our magic is acceptable.
        if bytes[..] != AUDIT_MAGIC[..bytes.len()] {
            return Err(corrupt("bad magic".into()));
        }
        return Ok((Vec::new(), 0));
    }
    if &bytes[..8] != AUDIT_MAGIC {
        return Err(corrupt("bad magic".into()));
    }
    let body = &bytes[8..];
    let full = body.len() / AUDIT_RECORD_BYTES;
    let mut entries: Vec<AuditEntry> = Vec::with_capacity(full);
    for i in 0..full {
        let at = i * AUDIT_RECORD_BYTES;
        let Some(e) = decode_audit(&body[at..at + AUDIT_RECORD_BYTES]) else {
            let is_last = i + 1 == full && body.len() % AUDIT_RECORD_BYTES == 0;
            if is_last {
                break; // torn or damaged last record: never confirmed
            }
            return Err(corrupt(format!(
                "record {i} at byte offset {} fails its CRC",
                8 + at
            )));
        };
        let prev_end = entries.last().map_or(FIRST_ID, |p| p.range.end);
        if e.range.start < prev_end || e.range.end <= e.range.start || e.range.end > KEY_SPACE {
            return Err(corrupt(format!(
                "record {i} [{}, {}) overlaps or precedes the one before",
                e.range.start, e.range.end
            )));
        }
        entries.push(e);
    }
    let valid = 8 + entries.len() * AUDIT_RECORD_BYTES;
    Ok((entries, valid as u64))
}

/// Opens (creating if missing) the audit log, truncating a torn tail; returns the file
/// positioned by length and its entries.
fn open_audit(dir: &Path) -> Result<(File, u64, Vec<AuditEntry>), AuthorityError> {
    let path = dir.join(AUDIT_FILE_NAME);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(io_err("open", &path))?;
    let bytes = fs::read(&path).map_err(io_err("read", &path))?;
    let (entries, mut valid) = parse_audit(&path, &bytes)?;
    if valid == 0 {
        // New file, or its creation was torn: (re)write the header.
        file.set_len(0).map_err(io_err("truncate", &path))?;
        file.write_all_at(AUDIT_MAGIC, 0)
            .and_then(|()| file.sync_all())
            .map_err(io_err("write", &path))?;
        durable::sync_dir(dir).map_err(io_err("fsync dir of", &path))?;
        valid = AUDIT_MAGIC.len() as u64;
    } else if valid < bytes.len() as u64 {
        file.set_len(valid)
            .and_then(|()| file.sync_all())
            .map_err(io_err("truncate", &path))?;
    }
    Ok((file, valid, entries))
}
