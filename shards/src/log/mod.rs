//! The per-writer-core append log: CRC-framed records, group commit, crash recovery.
//!
//! One log per writer core, `logs/wal-<writer>.log` in the data dir ([`wal_path`]). Records carry
//! the virtual shard id, so a log can be replayed by any core count. The byte format is
//! specified in `docs/log.md` and implemented in [`codec`].
//!
//! - [`LogWriter`] is sans-IO: it builds batches of bytes; the caller writes them at the given
//!   offset, `fdatasync`s, and reports the outcome. One batch is in flight at a time; appends
//!   made meanwhile go into the next batch (group commit). A failed write or sync poisons it.
//! - [`recover`] / [`recover_streaming`] validate a log at startup, truncate a torn tail and
//!   refuse (or, with `salvage`, skip) corruption in the middle.
//! - [`blocking::BlockingLog`] drives a `LogWriter` with blocking std I/O, for tools and tests.

pub mod blocking;
pub mod codec;
mod recover;
mod writer;

#[cfg(test)]
mod tests;

use std::io;
use std::path::{Path, PathBuf};

use crate::link::RedirectStatus;

pub use recover::{read_records, recover, recover_streaming, Recovery, RecoveryReport};
pub use writer::{Batch, LogWriter};

/// Largest record payload, in bytes. A record holds at most a 64-byte key, an 8 KiB URL and
/// small fixed fields, or an idempotency entry; 32 KiB leaves room for growth while letting
/// recovery reject an implausible length field (a corrupted length) without reading far ahead.
/// It also keeps every variable-length field's length within its `u16` length prefix.
pub const MAX_RECORD_BYTES: usize = 32 * 1024;

/// Directory holding the logs, relative to the data dir.
pub const LOG_DIR_NAME: &str = "logs";

/// Path of writer `writer`'s log in `data_dir`: `<data_dir>/logs/wal-<writer>.log`.
pub fn wal_path(data_dir: &Path, writer: u32) -> PathBuf {
    data_dir
        .join(LOG_DIR_NAME)
        .join(format!("wal-{writer}.log"))
}

/// A link's fields as a log record holds them: the one definition that `Put`, `PutWithIdem`,
/// the codec, compaction and recovery share. `S` is `String` in decoded records and `&str`
/// when encoding straight from request buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkFields<S = String> {
    pub key: S,
    pub target: S,
    pub status: RedirectStatus,
    /// Unix seconds after which the link is gone; 0 = never.
    pub expires_at_s: u64,
    pub created_at_s: u64,
    /// Bits 0..24: the creation tag (`link::CREATION_TAG_MASK`); the others reserved (0).
    pub flags: u32,
    /// The generated ID behind `key`; 0 for a custom alias.
    pub id: u64,
}

impl LinkFields<String> {
    /// Borrows the fields for encoding.
    pub fn as_ref(&self) -> LinkFields<&str> {
        LinkFields {
            key: &self.key,
            target: &self.target,
            status: self.status,
            expires_at_s: self.expires_at_s,
            created_at_s: self.created_at_s,
            flags: self.flags,
            id: self.id,
        }
    }
}

/// One logged mutation. The names say what a replay does with it: `Put` and `PutWithIdem`
/// write a link (the second also its idempotency record), `Delete` removes one, and
/// `IdemRecord` is an idempotency record alone (carried into a new log at rotation or on a
/// core-count change).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogOp {
    /// Create or replace a link.
    Put(LinkFields),
    /// Remove a link.
    Delete { key: String },
    /// A link created under an Idempotency-Key: the link and its idempotency record in one
    /// CRC-framed record, so a crash can never keep one without the other.
    PutWithIdem {
        link: LinkFields,
        /// API-key id + idempotency key.
        scope: String,
        request_hash: [u8; 32],
    },
    /// Fleet mode: a link as the fleet database committed it, at `version` (one sequence for
    /// the whole fleet). Replay keeps, per key, the record with the highest version, so the
    /// order in which API writes and feed rows reached the log does not matter. `idem` is the
    /// idempotency record of a create under an Idempotency-Key, in the same frame.
    FleetPut {
        link: LinkFields,
        version: u64,
        idem: Option<(String, [u8; 32])>,
    },
    /// Fleet mode: a tombstone the fleet database committed at `version`.
    FleetDelete { key: String, version: u64 },
    /// Remember an idempotent creation so a retried request gets the same answer.
    IdemRecord {
        /// API-key id + idempotency key.
        scope: String,
        /// Hash of the normalized request; a retry with a different hash is a conflict.
        request_hash: [u8; 32],
        /// The key created by the original request.
        response_key: String,
        created_at_s: u64,
        /// Its link's creation tag (`link::CREATION_TAG_MASK`); 0: unknown.
        created_tag: u32,
    },
}

/// A borrowed [`LogOp`], so the writer can encode straight from request buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogOpRef<'a> {
    /// See [`LogOp::Put`].
    Put(LinkFields<&'a str>),
    /// See [`LogOp::Delete`].
    Delete { key: &'a str },
    /// See [`LogOp::PutWithIdem`].
    PutWithIdem {
        link: LinkFields<&'a str>,
        scope: &'a str,
        request_hash: &'a [u8; 32],
    },
    /// See [`LogOp::FleetPut`].
    FleetPut {
        link: LinkFields<&'a str>,
        version: u64,
        idem: Option<(&'a str, &'a [u8; 32])>,
    },
    /// See [`LogOp::FleetDelete`].
    FleetDelete { key: &'a str, version: u64 },
    /// See [`LogOp::IdemRecord`].
    IdemRecord {
        scope: &'a str,
        request_hash: &'a [u8; 32],
        response_key: &'a str,
        created_at_s: u64,
        created_tag: u32,
    },
}

impl LogOp {
    /// Borrows this op for encoding.
    pub fn as_ref(&self) -> LogOpRef<'_> {
        match self {
            LogOp::Put(link) => LogOpRef::Put(link.as_ref()),
            LogOp::Delete { key } => LogOpRef::Delete { key },
            LogOp::PutWithIdem {
                link,
                scope,
                request_hash,
            } => LogOpRef::PutWithIdem {
                link: link.as_ref(),
                scope,
                request_hash,
            },
            LogOp::FleetPut {
                link,
                version,
                idem,
            } => LogOpRef::FleetPut {
                link: link.as_ref(),
                version: *version,
                idem: idem.as_ref().map(|(s, h)| (s.as_str(), h)),
            },
            LogOp::FleetDelete { key, version } => LogOpRef::FleetDelete {
                key,
                version: *version,
            },
            LogOp::IdemRecord {
                scope,
                request_hash,
                response_key,
                created_at_s,
                created_tag,
            } => LogOpRef::IdemRecord {
                scope,
                request_hash,
                response_key,
                created_at_s: *created_at_s,
                created_tag: *created_tag,
            },
        }
    }

    /// The link this op writes (`Put`, `PutWithIdem`, `FleetPut`), if any.
    pub fn link(&self) -> Option<&LinkFields> {
        match self {
            LogOp::Put(link) | LogOp::PutWithIdem { link, .. } | LogOp::FleetPut { link, .. } => {
                Some(link)
            }
            LogOp::Delete { .. } | LogOp::FleetDelete { .. } | LogOp::IdemRecord { .. } => None,
        }
    }

    /// The key this op removes (`Delete`, `FleetDelete`), if any.
    pub fn deleted_key(&self) -> Option<&str> {
        match self {
            LogOp::Delete { key } | LogOp::FleetDelete { key, .. } => Some(key),
            _ => None,
        }
    }

    /// The fleet version of a `FleetPut` or `FleetDelete`; 0 for the single-node ops.
    pub fn version(&self) -> u64 {
        match self {
            LogOp::FleetPut { version, .. } | LogOp::FleetDelete { version, .. } => *version,
            _ => 0,
        }
    }
}

/// Replay's rule for fleet records: per key, only an op with a higher fleet version than any
/// seen before takes effect (single-node ops, version 0, always do). API writes and feed rows
/// of one key can reach a log in either order; replaying through this gives the state with the
/// newest version, as the live memtable does. Compaction, export and recovery all use it.
#[derive(Debug, Default)]
pub struct NewestWins {
    seen: std::collections::HashMap<String, u64>,
}

impl NewestWins {
    /// Whether `op` takes effect; records its version if so.
    pub fn admits(&mut self, op: &LogOp) -> bool {
        let version = op.version();
        if version == 0 {
            return true;
        }
        let key = match op {
            LogOp::FleetPut { link, .. } => &link.key,
            LogOp::FleetDelete { key, .. } => key,
            _ => unreachable!("only fleet ops carry a version"),
        };
        match self.seen.get_mut(key) {
            Some(v) if *v >= version => false,
            Some(v) => {
                *v = version;
                true
            }
            None => {
                self.seen.insert(key.clone(), version);
                true
            }
        }
    }
}

/// A decoded log record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogRecord {
    /// Per-log sequence number, strictly increasing within a log file, starting at 1.
    pub seq: u64,
    /// Virtual shard of the record's key (or idempotency scope).
    pub shard: u32,
    pub op: LogOp,
}

/// Everything that can go wrong with a log. Cold path: one error type for the module.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error(
        "log writer is poisoned: {reason}; nothing after seq {durable_seq} is durable; \
         restart so recovery re-reads the file (a failed fsync is never retried)"
    )]
    Poisoned { reason: String, durable_seq: u64 },
    #[error("log record of {bytes} bytes exceeds the {MAX_RECORD_BYTES}-byte limit")]
    RecordTooLarge { bytes: usize },
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path} is not a ricochet log (bad magic); refusing to touch it")]
    NotALog { path: PathBuf },
    #[error("{path}: log header is corrupt ({reason})")]
    BadHeader { path: PathBuf, reason: &'static str },
    #[error("{path}: log format version {version} is not supported (expected {expected})")]
    UnsupportedVersion {
        path: PathBuf,
        version: u32,
        expected: u32,
    },
    #[error("{path}: log belongs to writer {found}, expected writer {expected}")]
    WriterMismatch {
        path: PathBuf,
        found: u32,
        expected: u32,
    },
    #[error(
        "{path}: corruption in the middle of the log at byte offset {offset} (next valid record \
         at offset {next_valid}); refusing to start. Restore the file from backup, or rerun \
         recovery with salvage to skip the damaged bytes and lose the records in them"
    )]
    MidLogCorruption {
        path: PathBuf,
        offset: u64,
        next_valid: u64,
    },
    #[error(
        "{path}: record at byte offset {offset} has a valid checksum but is invalid: {reason}"
    )]
    InvalidRecord {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
}
