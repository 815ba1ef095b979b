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
#[derive(Clone, Debug, PartialEq, Eq)]
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
    /// Who created the link ([`crate::link::Author::NONE`]: unknown).
    pub author: crate::link::Author,
    /// What it does when visited ([`crate::behaviour::Behaviour::NONE`]: a plain redirect).
    pub behaviour: crate::behaviour::Behaviour,
    /// Its redirect rules (empty: none).
    pub rules: crate::rules::Rules,
    /// Its title and tags ([`crate::labels::Labels::NONE`]: neither).
    pub labels: crate::labels::Labels,
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
            author: self.author,
            behaviour: self.behaviour,
            rules: self.rules.clone(),
            labels: self.labels.clone(),
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
#[derive(Clone, Debug, PartialEq, Eq)]
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

#[cfg(test)]
mod tests {
    //! Log tests: roundtrip, group commit, torn tails, corruption, poisoning, random crashes.

    use std::fs;
    use std::path::{Path, PathBuf};

    use proptest::prelude::*;

    use super::blocking::{BlockingLog, FaultyStorage};
    use super::codec::HEADER_BYTES;
    use super::*;
    use crate::link::RedirectStatus;

    fn put(i: u64) -> LogOp {
        LogOp::Put(LinkFields {
            key: format!("k{i}"),
            target: format!("https://example.com/{}", "x".repeat((i % 50) as usize)),
            status: RedirectStatus::Found,
            expires_at_s: i % 3,
            created_at_s: 1_700_000_000 + i,
            flags: i as u32 & crate::link::CREATION_TAG_MASK,
            id: i,
            author: if i % 2 == 0 {
                crate::link::Author::from_id(&format!("a{i}")).unwrap()
            } else {
                crate::link::Author::NONE
            },
            behaviour: match i % 3 {
                0 => crate::behaviour::Behaviour {
                    valid_since_s: i,
                    forward_query: Some(true),
                    disabled: None,
                    max_visits: i + 1,
                    visits: i / 2,
                    crawlable: i % 2 == 0,
                },
                _ => crate::behaviour::Behaviour::NONE,
            },
            rules: match i % 4 {
                1 => crate::rules::Rules::from_rules(&[crate::rules::Rule {
                    target: format!("https://example.com/r{i}"),
                    conditions: vec![crate::rules::Condition::After(i)],
                }])
                .unwrap(),
                _ => crate::rules::Rules::NONE,
            },
            labels: match i % 5 {
                2 => crate::labels::Labels::new(Some(&format!("t{i}")), &["x", "y"]).unwrap(),
                _ => crate::labels::Labels::NONE,
            },
        })
    }

    fn op(i: u64) -> LogOp {
        match i % 6 {
            0 => put(i),
            4 => LogOp::FleetPut {
                link: LinkFields {
                    key: format!("f{i}"),
                    target: format!("https://example.com/fleet/{i}"),
                    status: RedirectStatus::TemporaryRedirect,
                    expires_at_s: i,
                    created_at_s: 1_700_000_000 + i,
                    flags: 0,
                    id: 0,
                    author: crate::link::Author::NONE,
                    behaviour: crate::behaviour::Behaviour::NONE,
                    rules: crate::rules::Rules::NONE,
                    labels: crate::labels::Labels::NONE,
                },
                version: i * 3 + 1,
                idem: (i % 4 == 0).then(|| (format!("api{i}:k"), [(i * 5) as u8; 32])),
            },
            5 => LogOp::FleetDelete {
                key: format!("f{i}"),
                version: i * 3 + 2,
            },
            1 => LogOp::Delete {
                key: format!("k{i}"),
            },
            2 => LogOp::PutWithIdem {
                link: LinkFields {
                    key: format!("k{i}"),
                    target: format!("https://example.com/idem/{i}"),
                    status: RedirectStatus::PermanentRedirect,
                    expires_at_s: 0,
                    created_at_s: 1_700_000_000 + i,
                    flags: 0,
                    id: i,
                    author: crate::link::Author::from_id("k").unwrap(),
                    behaviour: crate::behaviour::Behaviour {
                        valid_since_s: 0,
                        forward_query: None,
                        disabled: Some(crate::behaviour::Disabled {
                            reason: crate::behaviour::DisabledReason::Owner,
                            at_s: i,
                            by: crate::link::Author::NONE,
                        }),
                        ..crate::behaviour::Behaviour::NONE
                    },
                    rules: crate::rules::Rules::NONE,
                    labels: crate::labels::Labels::NONE,
                },
                scope: format!("api{i}:idem-{i}"),
                request_hash: [(i * 7) as u8; 32],
            },
            _ => LogOp::IdemRecord {
                scope: format!("api{i}:idem"),
                request_hash: [i as u8; 32],
                response_key: format!("r{i}"),
                created_at_s: i,
                created_tag: (i % 1_000_000) as u32,
            },
        }
    }

    fn log_path(dir: &Path) -> PathBuf {
        wal_path(dir, 3)
    }

    /// Writes `batches` batches of `per_batch` records; returns (records, end offset of each
    /// record).
    fn write_log(path: &Path, batches: u64, per_batch: u64) -> (Vec<LogRecord>, Vec<u64>) {
        let (mut log, rec) = BlockingLog::open(path, 3, false).unwrap();
        assert!(rec.records.is_empty());
        let mut written = Vec::new();
        for b in 0..batches {
            for j in 0..per_batch {
                let i = b * per_batch + j;
                let seq = log.append(i as u32 % 7, &op(i)).unwrap();
                written.push(LogRecord {
                    seq,
                    shard: i as u32 % 7,
                    op: op(i),
                });
            }
            log.commit().unwrap();
        }
        drop(log);
        // Frame end offsets, derived independently from the records' encoded sizes.
        let mut ends = Vec::new();
        let mut at = HEADER_BYTES as u64;
        for r in &written {
            at += (codec::FRAME_HEADER_BYTES + codec::payload_len(&r.op.as_ref())) as u64;
            ends.push(at);
        }
        assert_eq!(fs::metadata(path).unwrap().len(), at);
        (written, ends)
    }

    #[test]
    fn roundtrip_and_reopen_continues_seq() {
        let d = tempfile::tempdir().unwrap();
        let p = log_path(d.path());
        let (written, _) = write_log(&p, 3, 4);
        let (mut log, rec) = BlockingLog::open(&p, 3, false).unwrap();
        assert_eq!(rec.records, written);
        assert_eq!(rec.max_seq, 12);
        assert_eq!(rec.writer, Some(3));
        assert_eq!(rec.truncated_from, None);
        assert_eq!(log.append_durable(1, &put(99)).unwrap(), 13);
        let rec = recover(&p, false).unwrap();
        assert_eq!(rec.records.len(), 13);
        assert_eq!(rec.records[12].op, put(99));
    }

    #[test]
    fn wrong_writer_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = log_path(d.path());
        write_log(&p, 1, 1);
        let err = BlockingLog::open(&p, 4, false).unwrap_err();
        assert!(matches!(
            err,
            LogError::WriterMismatch {
                found: 3,
                expected: 4,
                ..
            }
        ));
    }

    #[test]
    fn foreign_file_refused_untouched() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.log");
        fs::write(&p, b"hello, this is not a log file at all").unwrap();
        assert!(matches!(recover(&p, false), Err(LogError::NotALog { .. })));
        fs::write(&p, b"hello").unwrap();
        assert!(matches!(recover(&p, false), Err(LogError::NotALog { .. })));
        assert_eq!(fs::read(&p).unwrap(), b"hello");
    }

    #[test]
    fn group_commit_many_appends_one_batch() {
        let mut w = LogWriter::new(0, 0, 1);
        let first = w.append(0, &put(0)).unwrap();
        let b1 = w.take_batch().unwrap().expect("batch");
        assert_eq!((b1.offset, b1.first_seq, b1.last_seq), (0, 1, 1));
        assert_eq!(first, 1);
        // While b1 is in flight, appends queue up; no second batch is handed out.
        for i in 1..=100 {
            assert_eq!(w.append(0, &put(i)).unwrap(), i + 1);
        }
        assert!(w.take_batch().unwrap().is_none());
        let len1 = b1.bytes.len() as u64;
        assert_eq!(w.complete(b1, Ok(())).unwrap(), 1);
        let b2 = w.take_batch().unwrap().expect("batch");
        assert_eq!((b2.offset, b2.first_seq, b2.last_seq), (len1, 2, 101));
        assert_eq!(w.durable_seq(), 1);
        assert_eq!(w.complete(b2, Ok(())).unwrap(), 101);
        assert_eq!(w.durable_seq(), 101);
        assert!(w.take_batch().unwrap().is_none());
    }

    #[test]
    fn batch_buffers_are_reused() {
        let mut w = LogWriter::new(0, 0, 1);
        w.append(0, &put(1)).unwrap();
        let b = w.take_batch().unwrap().unwrap();
        let ptr = b.bytes.as_ptr();
        w.complete(b, Ok(())).unwrap();
        w.append(0, &put(2)).unwrap(); // goes into the fresh pending buffer
        let b = w.take_batch().unwrap().unwrap();
        w.complete(b, Ok(())).unwrap();
        w.append(0, &put(3)).unwrap(); // pending is now the recycled first buffer
        let b = w.take_batch().unwrap().unwrap();
        assert_eq!(b.bytes.as_ptr(), ptr);
    }

    #[test]
    fn oversized_record_rejected() {
        let mut w = LogWriter::new(0, 0, 1);
        let big = LogOp::Delete {
            key: "k".repeat(MAX_RECORD_BYTES),
        };
        assert!(matches!(
            w.append(0, &big),
            Err(LogError::RecordTooLarge { .. })
        ));
        assert!(w.take_batch().unwrap().is_none());
        assert_eq!(w.append(0, &put(1)).unwrap(), 1);
    }

    #[test]
    fn torn_tail_at_every_offset_of_last_record() {
        let d = tempfile::tempdir().unwrap();
        let p = log_path(d.path());
        let (written, ends) = write_log(&p, 3, 2);
        let full = fs::read(&p).unwrap();
        let last_start = ends[ends.len() - 2] as usize;
        for cut in last_start..full.len() {
            fs::write(&p, &full[..cut]).unwrap();
            let rec = recover(&p, false).unwrap();
            assert_eq!(rec.records, written[..written.len() - 1], "cut at {cut}");
            assert_eq!(rec.valid_len, last_start as u64);
            let expect_trunc = (cut > last_start).then_some(last_start as u64);
            assert_eq!(rec.truncated_from, expect_trunc);
            assert_eq!(fs::metadata(&p).unwrap().len(), last_start as u64);
        }
    }

    #[test]
    fn torn_header_truncates_to_empty() {
        let d = tempfile::tempdir().unwrap();
        let p = log_path(d.path());
        write_log(&p, 1, 1);
        let full = fs::read(&p).unwrap();
        for cut in 1..HEADER_BYTES {
            fs::write(&p, &full[..cut]).unwrap();
            let rec = recover(&p, false).unwrap();
            assert_eq!(
                (rec.valid_len, rec.truncated_from, rec.writer),
                (0, Some(0), None)
            );
        }
        // The writer then starts over with a header.
        let (mut log, _) = BlockingLog::open(&p, 3, false).unwrap();
        log.append_durable(0, &put(5)).unwrap();
        assert_eq!(recover(&p, false).unwrap().records.len(), 1);
    }

    #[test]
    fn flipped_byte_in_last_record_truncates() {
        let d = tempfile::tempdir().unwrap();
        let p = log_path(d.path());
        let (written, ends) = write_log(&p, 4, 1);
        let full = fs::read(&p).unwrap();
        let last_start = ends[ends.len() - 2] as usize;
        for at in last_start..full.len() {
            let mut b = full.clone();
            b[at] ^= 0x40;
            fs::write(&p, &b).unwrap();
            let rec = recover(&p, false).unwrap();
            assert_eq!(rec.records, written[..3], "flip at {at}");
            assert_eq!(rec.truncated_from, Some(last_start as u64));
        }
    }

    #[test]
    fn flipped_byte_in_middle_refused_then_salvaged() {
        let d = tempfile::tempdir().unwrap();
        let p = log_path(d.path());
        // One record per batch, so the damaged record is in an earlier batch than later records.
        let (written, ends) = write_log(&p, 5, 1);
        let mut b = fs::read(&p).unwrap();
        let start = ends[1] as usize; // third record
        b[start + 12] ^= 0xff;
        fs::write(&p, &b).unwrap();
        match recover(&p, false) {
            Err(LogError::MidLogCorruption {
                offset, next_valid, ..
            }) => {
                assert_eq!(offset, ends[1]);
                assert_eq!(next_valid, ends[2]);
            }
            other => panic!("expected refusal, got {other:?}"),
        }
        let msg = recover(&p, false).unwrap_err().to_string();
        assert!(
            msg.contains("wal-3.log") && msg.contains(&ends[1].to_string()),
            "{msg}"
        );
        // Refusal leaves the file as it was.
        assert_eq!(fs::read(&p).unwrap(), b);
        let rec = recover(&p, true).unwrap();
        let mut expect = written.clone();
        expect.remove(2);
        assert_eq!(rec.records, expect);
        assert_eq!(rec.salvaged, vec![(ends[1], ends[2])]);
        assert_eq!(rec.truncated_from, None);
    }

    #[test]
    fn hole_inside_last_batch_truncates() {
        // Writeback may persist a later page of the final, unsynced batch but not an earlier one.
        let d = tempfile::tempdir().unwrap();
        let p = log_path(d.path());
        let (written, ends) = write_log(&p, 2, 4); // batch 2 = records 4..8
        let mut b = fs::read(&p).unwrap();
        let hole = ends[4] as usize..ends[5] as usize; // record 5 (second of batch 2) zeroed
        b[hole.clone()].fill(0);
        fs::write(&p, &b).unwrap();
        let rec = recover(&p, false).unwrap();
        assert_eq!(rec.records, written[..5]);
        assert_eq!(rec.truncated_from, Some(ends[4]));
    }

    #[test]
    fn failing_fsync_poisons() {
        let d = tempfile::tempdir().unwrap();
        let p = log_path(d.path());
        let (mut log, _) = BlockingLog::open_with(&p, 3, false, |s| {
            FaultyStorage::new(s).fail_sync(2, libc::EIO)
        })
        .unwrap();
        assert_eq!(log.append_durable(0, &put(1)).unwrap(), 1);
        let seq = log.append(0, &put(2)).unwrap();
        let err = log.commit().unwrap_err();
        assert!(
            matches!(err, LogError::Poisoned { durable_seq: 1, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("restart"));
        assert_eq!(log.writer().durable_seq(), 1);
        assert!(seq > log.writer().durable_seq());
        // Everything later fails; the failed fsync is never retried.
        assert!(matches!(
            log.append(0, &put(3)),
            Err(LogError::Poisoned { .. })
        ));
        assert!(matches!(log.commit(), Err(LogError::Poisoned { .. })));
        assert_eq!(log.storage().syncs(), 2);
    }

    #[test]
    fn enospc_write_poisons_and_recovery_drops_partial_batch() {
        let d = tempfile::tempdir().unwrap();
        let p = log_path(d.path());
        let (mut log, _) = BlockingLog::open_with(&p, 3, false, |s| {
            FaultyStorage::new(s).fail_write(2, libc::ENOSPC, 10)
        })
        .unwrap();
        log.append_durable(0, &put(1)).unwrap();
        log.append(0, &put(2)).unwrap();
        log.append(0, &put(3)).unwrap();
        let err = log.commit().unwrap_err();
        assert!(err.to_string().contains("No space left"), "{err}");
        assert_eq!(log.writer().durable_seq(), 1);
        assert!(log.append(0, &put(4)).is_err());
        drop(log);
        let (log, rec) = BlockingLog::open(&p, 3, false).unwrap();
        assert_eq!(rec.records.len(), 1);
        assert!(rec.truncated_from.is_some());
        assert_eq!(log.writer().next_seq(), 2);
    }

    #[test]
    fn poisoned_writer_reports_nothing_durable_from_failed_batch() {
        let mut w = LogWriter::new(0, 0, 1);
        w.append(0, &put(1)).unwrap();
        let b = w.take_batch().unwrap().unwrap();
        w.append(0, &put(2)).unwrap();
        let err = w
            .complete(b, Err(std::io::Error::from_raw_os_error(libc::EIO)))
            .unwrap_err();
        assert!(matches!(err, LogError::Poisoned { durable_seq: 0, .. }));
        assert_eq!(w.durable_seq(), 0);
        assert!(w.is_poisoned());
        assert!(w.take_batch().is_err());
    }

    #[test]
    fn durable_len_stops_at_the_last_durable_batch() {
        let mut w = LogWriter::new(0, 0, 1);
        assert_eq!(w.durable_len(), 0);
        w.append(0, &put(1)).unwrap();
        let b1 = w.take_batch().unwrap().unwrap();
        let end1 = b1.offset + b1.bytes.len() as u64;
        w.complete(b1, Ok(())).unwrap();
        assert_eq!(w.durable_len(), end1);
        w.append(0, &put(2)).unwrap();
        let b2 = w.take_batch().unwrap().unwrap();
        assert_eq!(b2.offset, end1);
        w.complete(b2, Err(std::io::Error::from_raw_os_error(libc::EIO)))
            .unwrap_err();
        assert_eq!(w.durable_len(), end1, "a failed batch is not durable");
        // A writer opened over an existing valid file starts at its length.
        assert_eq!(LogWriter::new(0, 4096, 9).durable_len(), 4096);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn random_crash_recovers_a_prefix(
            batch_sizes in proptest::collection::vec(1u64..6, 1..8),
            cut_frac in 0.0f64..=1.0,
            seed in 0u64..1000,
        ) {
            let d = tempfile::tempdir().unwrap();
            let p = log_path(d.path());
            let (mut log, _) = BlockingLog::open(&p, 3, false).unwrap();
            let mut written = Vec::new();
            let mut i = seed;
            for n in batch_sizes {
                for _ in 0..n {
                    let o = op(i);
                    let seq = log.append((i % 5) as u32, &o).unwrap();
                    written.push(LogRecord { seq, shard: (i % 5) as u32, op: o });
                    i += 1;
                }
                log.commit().unwrap();
            }
            drop(log);
            let full = fs::read(&p).unwrap();
            let cut = (full.len() as f64 * cut_frac) as usize;
            fs::write(&p, &full[..cut]).unwrap();
            let rec = recover(&p, false).unwrap();
            prop_assert!(rec.records.len() <= written.len());
            prop_assert_eq!(&rec.records[..], &written[..rec.records.len()]);
            // Only the record the cut went through (and those after it) may be lost.
            let fully_present = written
                .iter()
                .scan(HEADER_BYTES, |at, r| {
                    *at += codec::FRAME_HEADER_BYTES + codec::payload_len(&r.op.as_ref());
                    Some(*at)
                })
                .filter(|&end| end <= cut)
                .count();
            prop_assert_eq!(rec.records.len(), fully_present);
            prop_assert_eq!(fs::metadata(&p).unwrap().len(), rec.valid_len);
        }
    }

    #[test]
    fn crc_valid_undecodable_frame_refused_or_salvaged() {
        let d = tempfile::tempdir().unwrap();
        let p = log_path(d.path());
        let (written, ends) = write_log(&p, 3, 1);
        let mut b = fs::read(&p).unwrap();
        // Rewrite the second record's op tag to an unknown one and fix up its CRC.
        let start = ends[0] as usize;
        b[start + codec::FRAME_HEADER_BYTES + 20] = 99;
        let end = ends[1] as usize;
        let crc = crc32c::crc32c(&b[start + codec::FRAME_HEADER_BYTES..end]);
        b[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
        fs::write(&p, &b).unwrap();
        match recover(&p, false) {
            Err(LogError::InvalidRecord { offset, reason, .. }) => {
                assert_eq!(offset, ends[0]);
                assert!(reason.contains("tag"), "{reason}");
            }
            other => panic!("expected InvalidRecord, got {other:?}"),
        }
        let rec = recover(&p, true).unwrap();
        assert_eq!(rec.records, vec![written[0].clone(), written[2].clone()]);
        assert_eq!(rec.salvaged, vec![(ends[0], ends[1])]);
    }

    #[test]
    fn failed_first_write_leaves_recoverable_file() {
        let d = tempfile::tempdir().unwrap();
        let p = log_path(d.path());
        // The very first batch (header + record) is cut short by ENOSPC inside the header.
        let (mut log, _) = BlockingLog::open_with(&p, 3, false, |s| {
            FaultyStorage::new(s).fail_write(1, libc::ENOSPC, 10)
        })
        .unwrap();
        assert!(log.append_durable(0, &put(1)).is_err());
        assert_eq!(log.storage().writes(), 1);
        drop(log);
        assert_eq!(fs::metadata(&p).unwrap().len(), 10);
        let (mut log, rec) = BlockingLog::open(&p, 3, false).unwrap();
        assert_eq!((rec.truncated_from, rec.valid_len), (Some(0), 0));
        assert_eq!(log.append_durable(0, &put(2)).unwrap(), 1);
        let rec = recover(&p, false).unwrap();
        assert_eq!(rec.records.len(), 1);
        assert_eq!(rec.records[0].op, put(2));
    }

    #[test]
    fn streaming_recovery_matches_collected() {
        let d = tempfile::tempdir().unwrap();
        let p = log_path(d.path());
        let (written, _) = write_log(&p, 4, 3);
        let mut seen = Vec::new();
        let rep = recover_streaming(&p, false, |r| seen.push(r)).unwrap();
        assert_eq!(seen, written);
        assert_eq!((rep.records, rep.max_seq, rep.writer), (12, 12, Some(3)));
    }

    #[test]
    fn wal_path_layout() {
        assert_eq!(
            wal_path(Path::new("/data"), 7),
            PathBuf::from("/data/logs/wal-7.log")
        );
    }

    #[test]
    fn damage_before_a_later_whole_batch_is_refused() {
        // The damaged record ends batch 2; batch 3 after it was reported durable, so this is not
        // a torn final batch even though everything after the damage is one batch.
        let d = tempfile::tempdir().unwrap();
        let p = log_path(d.path());
        let (_, ends) = write_log(&p, 3, 2);
        let mut b = fs::read(&p).unwrap();
        b[ends[2] as usize + 30] ^= 1; // record 4 of 6
        fs::write(&p, &b).unwrap();
        assert!(matches!(
            recover(&p, false),
            Err(LogError::MidLogCorruption { offset, .. }) if offset == ends[2]
        ));
    }
}
