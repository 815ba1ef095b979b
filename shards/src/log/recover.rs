//! Startup validation of a log file: torn tails are truncated, corruption elsewhere refused.
//!
//! Rules, from the first bad frame found at offset `bad`:
//! 1. No plausible valid frame after `bad`: a torn tail (crash mid-write). Truncate at `bad`.
//! 2. A valid frame after `bad`, but it and every frame after it belong to one batch that
//!    started at or before `bad`: the last batch was torn non-contiguously (writeback does not
//!    persist pages in order before `fdatasync` returns). That batch was never reported
//!    durable, so truncating at `bad` loses nothing promised. Truncate at `bad`.
//! 3. Otherwise damaged bytes sit before data from a later batch, i.e. before records that
//!    were reported durable: refuse, naming file and offset, unless `salvage` is set, in which
//!    case skip to the next valid frame and report the skipped range. Salvage does not rewrite
//!    the file; compact it afterwards.
//!
//! A frame with a matching CRC that does not decode (or breaks the seq order) is a bug or a
//! foreign format, never a torn write: refused unless salvaging.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;

use super::codec::{decode_header, decode_payload, frame_at, HeaderError, HEADER_BYTES, LOG_MAGIC};
use super::{LogError, LogRecord};
use crate::log::codec::LOG_VERSION;

/// The outcome of [`recover`].
#[derive(Debug, Default)]
pub struct Recovery {
    /// Every valid record, in file order (strictly increasing seq).
    pub records: Vec<LogRecord>,
    /// Length of the file after recovery: where the writer continues.
    pub valid_len: u64,
    /// Offset the file was truncated at, if a torn tail was removed.
    pub truncated_from: Option<u64>,
    /// Byte ranges `[start, end)` skipped by salvage.
    pub salvaged: Vec<(u64, u64)>,
    /// Highest seq recovered, 0 if none. The writer continues at `max_seq + 1`.
    pub max_seq: u64,
    /// Writer id from the header; `None` for an empty file.
    pub writer: Option<u32>,
}

/// The outcome of [`recover_streaming`]: [`Recovery`] without the records.
#[derive(Debug, Default)]
pub struct RecoveryReport {
    pub valid_len: u64,
    pub truncated_from: Option<u64>,
    pub salvaged: Vec<(u64, u64)>,
    pub max_seq: u64,
    pub writer: Option<u32>,
    /// Number of records delivered.
    pub records: u64,
}

/// Validates the log at `path`, truncating a torn tail (with fsync), and returns its records.
pub fn recover(path: &Path, salvage: bool) -> Result<Recovery, LogError> {
    let mut records = Vec::new();
    let r = recover_streaming(path, salvage, |rec| records.push(rec))?;
    Ok(Recovery {
        records,
        valid_len: r.valid_len,
        truncated_from: r.truncated_from,
        salvaged: r.salvaged,
        max_seq: r.max_seq,
        writer: r.writer,
    })
}

/// [`recover`] delivering records to `on_record` one at a time instead of collecting them; the
/// file is memory-mapped, so memory use does not grow with the log. Records are delivered as
/// they are validated: if this returns an error, discard what was delivered.
pub fn recover_streaming(
    path: &Path,
    salvage: bool,
    on_record: impl FnMut(LogRecord),
) -> Result<RecoveryReport, LogError> {
    let io_err = |op: &'static str| {
        move |source: io::Error| LogError::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    };
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(io_err("open"))?;
    let file_len = file.metadata().map_err(io_err("stat"))?.len();
    let report = if file_len == 0 {
        RecoveryReport::default()
    } else {
        // SAFETY: the log is written only by its writer core, which is not running during
        // recovery (the server owns the data dir exclusively), so the mapped bytes do not change
        // or shrink while the map is alive; the map is dropped before any truncation below.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io_err("mmap"))?;
        scan(path, &map, salvage, on_record)?
    };
    if report.valid_len < file_len {
        truncate(&file, report.valid_len).map_err(io_err("truncate"))?;
    }
    Ok(report)
}

/// The records of a log another process may be appending to, without changing the file: its
/// bytes are read into memory at one instant, and a partial frame at the end (an append in
/// progress) ends the scan as a torn tail would. Damage before the tail is an error, as in
/// recovery. For `export`, which runs beside a serving process.
pub fn read_records(path: &Path) -> Result<Vec<LogRecord>, LogError> {
    let data = std::fs::read(path).map_err(|source| LogError::Io {
        op: "read",
        path: path.to_path_buf(),
        source,
    })?;
    let mut records = Vec::new();
    if !data.is_empty() {
        scan(path, &data, false, |r| records.push(r))?;
    }
    Ok(records)
}

fn truncate(file: &File, len: u64) -> io::Result<()> {
    file.set_len(len)?;
    file.sync_all()
}

/// The writer core the log's header names; `None` for a header torn by a crash while it was
/// written (only a prefix of the magic is accepted as that: anything else is not our file).
fn read_header(path: &Path, data: &[u8]) -> Result<Option<u32>, LogError> {
    if data.len() < HEADER_BYTES {
        let n = data.len().min(LOG_MAGIC.len());
        if data[..n] != LOG_MAGIC[..n] {
            return Err(LogError::NotALog {
                path: path.to_path_buf(),
            });
        }
        return Ok(None);
    }
    let header: &[u8; HEADER_BYTES] = data[..HEADER_BYTES].try_into().expect("header slice");
    let writer = decode_header(header).map_err(|e| match e {
        HeaderError::Magic => LogError::NotALog {
            path: path.to_path_buf(),
        },
        HeaderError::Version(version) => LogError::UnsupportedVersion {
            path: path.to_path_buf(),
            version,
            expected: LOG_VERSION,
        },
        HeaderError::Crc => LogError::BadHeader {
            path: path.to_path_buf(),
            reason: "CRC mismatch",
        },
        HeaderError::Reserved => LogError::BadHeader {
            path: path.to_path_buf(),
            reason: "reserved field is not zero",
        },
    })?;
    Ok(Some(writer))
}

fn scan(
    path: &Path,
    data: &[u8],
    salvage: bool,
    mut on_record: impl FnMut(LogRecord),
) -> Result<RecoveryReport, LogError> {
    let mut rep = RecoveryReport::default();
    let Some(writer) = read_header(path, data)? else {
        rep.truncated_from = Some(0);
        return Ok(rep);
    };
    rep.writer = Some(writer);

    let mut pos = HEADER_BYTES;
    let mut last_seq = 0u64;
    while pos < data.len() {
        if let Some(f) = frame_at(data, pos) {
            match decode_payload(f.payload) {
                Ok(d) if d.record.seq > last_seq => {
                    last_seq = d.record.seq;
                    rep.records += 1;
                    on_record(d.record);
                    pos += f.total_len;
                    continue;
                }
                Ok(d) if !salvage => {
                    return Err(LogError::InvalidRecord {
                        path: path.to_path_buf(),
                        offset: pos as u64,
                        reason: format!("seq {} does not follow seq {last_seq}", d.record.seq),
                    });
                }
                Err(reason) if !salvage => {
                    return Err(LogError::InvalidRecord {
                        path: path.to_path_buf(),
                        offset: pos as u64,
                        reason,
                    });
                }
                _ => {
                    rep.salvaged.push((pos as u64, (pos + f.total_len) as u64));
                    pos += f.total_len;
                    continue;
                }
            }
        }
        let bad = pos;
        match next_valid_frame(data, bad + 1, last_seq) {
            None => {
                rep.truncated_from = Some(bad as u64);
                break;
            }
            Some((next, batch_start)) => {
                if batch_start <= bad as u64 && rest_is_one_batch(data, next, batch_start, last_seq)
                {
                    rep.truncated_from = Some(bad as u64);
                    break;
                }
                if !salvage {
                    return Err(LogError::MidLogCorruption {
                        path: path.to_path_buf(),
                        offset: bad as u64,
                        next_valid: next as u64,
                    });
                }
                rep.salvaged.push((bad as u64, next as u64));
                pos = next;
            }
        }
    }
    rep.valid_len = rep.truncated_from.map_or(data.len(), |t| t as usize) as u64;
    rep.max_seq = last_seq;
    Ok(rep)
}

/// The first offset `>= from` holding a frame with a valid CRC that decodes and continues the
/// seq order, with its batch start. Requiring all three makes a false match in garbage
/// vanishingly unlikely.
fn next_valid_frame(data: &[u8], from: usize, last_seq: u64) -> Option<(usize, u64)> {
    (from..data.len()).find_map(|p| {
        let f = frame_at(data, p)?;
        let d = decode_payload(f.payload).ok()?;
        (d.record.seq > last_seq).then_some((p, d.batch_start))
    })
}

/// Whether everything from `pos` on belongs to the batch at `batch_start`: valid frames of
/// that batch, possibly with more damaged gaps between them, and nothing from a later batch.
fn rest_is_one_batch(data: &[u8], mut pos: usize, batch_start: u64, mut last_seq: u64) -> bool {
    while pos < data.len() {
        match frame_at(data, pos).map(|f| (f.total_len, decode_payload(f.payload))) {
            Some((n, Ok(d))) if d.batch_start == batch_start && d.record.seq > last_seq => {
                last_seq = d.record.seq;
                pos += n;
            }
            Some(_) => return false,
            None => match next_valid_frame(data, pos + 1, last_seq) {
                None => return true,
                Some((next, b)) if b == batch_start => pos = next,
                Some(_) => return false,
            },
        }
    }
    true
}
