//! ID allocation, Leaf-segment style.
//!
//! An [`Authority`] hands out ranges `[start, end)` of the ID space `[1, KEY_SPACE)` (0 is a
//! sentinel) and makes each one durable, by advancing a high-water mark, before returning it.
//! Ranges are never rolled back and never reused: a restart discards whatever was not used.
//! [`FileAuthority`] keeps the high-water in the data dir plus an audit log of every confirmed
//! range, and refuses to open if the high-water is provably behind (a restored or rolled-back
//! file). The [`AllocatorService`] thread owns the authority (blocking fsync is fine there) and
//! serves range requests from cores; each core runs a sans-IO [`SegmentBuffer`] (current +
//! standby range, rate-driven prefetch, bounded backoff).

mod file_authority;
mod memory;
mod segment;
mod service;

#[cfg(test)]
mod tests;

use std::io;
use std::path::PathBuf;

use crate::keygen::KEY_SPACE;

pub use file_authority::{
    read_audit, AuditEntry, FileAuthority, ALLOC_DIR_NAME, AUDIT_FILE_NAME, AUTHORITY_FILE_NAME,
};
pub use memory::MemoryAuthority;
pub use segment::{
    NextIdError, SegmentBuffer, SegmentConfig, BACKOFF_MAX_MS, BACKOFF_MIN_MS, DEFAULT_SEGMENT_LEN,
    MAX_SEGMENT_LEN, MIN_SEGMENT_LEN, NEXT_ID_DEADLINE_MS, PREFETCH_LEAD_MS,
    PREFETCH_MIN_REMAINING_PERCENT, RATE_EWMA_ALPHA, RATE_WINDOW_MS,
};
pub use service::{next_id_blocking, AllocClient, AllocatorService};

/// The first allocatable ID; 0 is the "no ID" sentinel (custom aliases carry id 0).
pub const FIRST_ID: u64 = 1;

/// A half-open range of IDs `[start, end)`. Once published it is immutable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct IdRange {
    pub start: u64,
    /// Exclusive.
    pub end: u64,
}

impl IdRange {
    /// Number of IDs in the range.
    pub fn len(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }

    /// Whether the range holds no ID.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `id` is in the range.
    pub fn contains(&self, id: u64) -> bool {
        (self.start..self.end).contains(&id)
    }

    /// Whether the two ranges share an ID.
    pub fn overlaps(&self, other: &IdRange) -> bool {
        self.start < other.end && other.start < self.end
    }
}

/// A source of durable, never-reused ID ranges. Small on purpose, so that another authority
/// (e.g. a PostgreSQL counter row) can replace the file one without touching callers.
pub trait Authority: Send {
    /// Durably reserves up to `len` IDs and returns them. The range is clipped at
    /// [`KEY_SPACE`] (its last ID, `KEY_SPACE - 1`, is usable); once nothing is left, returns
    /// [`AuthorityError::Exhausted`]. `len` must be in `[MIN_SEGMENT_LEN, MAX_SEGMENT_LEN]`.
    fn allocate(&mut self, len: u64) -> Result<IdRange, AuthorityError>;

    /// The next never-allocated ID: every ID below it may have been handed out.
    fn high_water(&self) -> u64;
}

/// Why no range was allocated. Cold path.
#[derive(Debug, thiserror::Error)]
pub enum AuthorityError {
    #[error("ID space exhausted: every ID below {KEY_SPACE} has been allocated")]
    Exhausted,
    #[error("range length {0} is outside [{MIN_SEGMENT_LEN}, {MAX_SEGMENT_LEN}]")]
    BadLength(u64),
    #[error("allocation authority: {op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("allocation authority file {path} is corrupt: {reason}; restore it, do not delete it")]
    Corrupt { path: PathBuf, reason: String },
    #[error(
        "allocation authority {path} has high-water {high_water}, but {evidence} shows IDs up to \
         {confirmed} were already allocated: the file was rolled back or restored. Refusing to \
         allocate (it would re-issue IDs); set a proven high-water with FileAuthority::initialize \
         on a fresh alloc dir"
    )]
    RolledBack {
        path: PathBuf,
        high_water: u64,
        /// Smallest high-water the evidence allows.
        confirmed: u64,
        evidence: &'static str,
    },
    #[error(
        "allocation authority {path} is missing but {evidence} shows IDs were allocated; \
         restore it from backup or use FileAuthority::initialize with a proven high-water"
    )]
    Missing {
        path: PathBuf,
        evidence: &'static str,
    },
    #[error("allocation authority {path} already exists; initialize only creates a new one")]
    AlreadyInitialized { path: PathBuf },
    #[error(
        "allocation authority is poisoned after a failed write or sync ({reason}); restart so \
         it re-reads its durable state"
    )]
    Poisoned { reason: String },
    #[error("allocation authority unavailable: {0}")]
    Unavailable(String),
    #[error(
        "allocation authority fenced: {reason}. Generated-key creates are refused until an \
         operator has followed the rollback runbook (docs/fleet.md) and restarted this node"
    )]
    Fenced { reason: String },
}

/// Carves the next range from `high_water`, clipping at [`KEY_SPACE`]. Shared by authorities.
pub(crate) fn carve(high_water: u64, len: u64) -> Result<IdRange, AuthorityError> {
    if !(MIN_SEGMENT_LEN..=MAX_SEGMENT_LEN).contains(&len) {
        return Err(AuthorityError::BadLength(len));
    }
    let start = high_water.max(FIRST_ID);
    if start >= KEY_SPACE {
        return Err(AuthorityError::Exhausted);
    }
    Ok(IdRange {
        start,
        end: start.saturating_add(len).min(KEY_SPACE),
    })
}
