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

#[cfg(test)]
mod tests {
    //! The allocator fault matrix (adapted from the Leaf-segment design seed). IDs and confirmed
    //! ranges are recorded directly, never inferred from a table with a unique index.

    use std::collections::HashSet;
    use std::fs;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::thread;
    use std::time::{Duration, Instant};

    use crossbeam::channel;

    use super::*;
    use crate::keygen::KEY_SPACE;

    fn cfg(len: u64) -> SegmentConfig {
        SegmentConfig {
            segment_len: len,
            ..SegmentConfig::default()
        }
    }

    /// Runs `threads` workers, each taking `per_thread` IDs through its own SegmentBuffer against
    /// one service. Returns every ID taken and the timeouts seen.
    fn contend(
        svc: &AllocatorService,
        threads: usize,
        per_thread: usize,
        len: u64,
    ) -> Vec<(usize, u64)> {
        let wakes = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let w = Arc::clone(&wakes);
                let client = svc.client(
                    t,
                    Box::new(move || {
                        w.fetch_add(1, Ordering::Relaxed);
                    }),
                );
                thread::spawn(move || {
                    let mut buf = SegmentBuffer::new(cfg(len));
                    let mut ids = Vec::with_capacity(per_thread);
                    while ids.len() < per_thread {
                        match next_id_blocking(&mut buf, &client) {
                            Ok(id) => ids.push((t, id)),
                            Err(NextIdError::NeedRange { .. }) => continue,
                            Err(NextIdError::Exhausted) => panic!("unexpected exhaustion"),
                        }
                    }
                    ids
                })
            })
            .collect();
        let ids: Vec<(usize, u64)> = handles
            .into_iter()
            .flat_map(|h| h.join().expect("worker"))
            .collect();
        assert!(wakes.load(Ordering::Relaxed) > 0, "wake callback never ran");
        ids
    }

    fn check_unique_in_bounds(ids: &[(usize, u64)], confirmed: &[(usize, IdRange)]) {
        let mut seen = HashSet::new();
        for &(t, id) in ids {
            assert!((1..KEY_SPACE).contains(&id), "id {id} out of bounds");
            assert!(seen.insert(id), "duplicate id {id}");
            // Each ID comes from a range confirmed for the same requester.
            assert!(
                confirmed.iter().any(|&(ct, r)| ct == t && r.contains(id)),
                "id {id} of requester {t} is in no range confirmed for it"
            );
        }
        let mut ranges: Vec<IdRange> = confirmed.iter().map(|&(_, r)| r).collect();
        ranges.sort_by_key(|r| r.start);
        for w in ranges.windows(2) {
            assert!(!w[0].overlaps(&w[1]), "{:?} overlaps {:?}", w[0], w[1]);
        }
    }

    #[test]
    fn tiny_segments_many_threads_memory_authority() {
        for len in [1, 2, 3] {
            let svc = AllocatorService::start(Box::new(MemoryAuthority::new(1)), true).unwrap();
            let ids = contend(&svc, 4, 3_000, len);
            assert_eq!(ids.len(), 12_000);
            check_unique_in_bounds(&ids, &svc.confirmed());
        }
    }

    #[test]
    fn tiny_segments_file_authority_matches_audit() {
        let d = tempfile::tempdir().unwrap();
        let auth = FileAuthority::open(d.path(), 0).unwrap();
        let svc = AllocatorService::start(Box::new(auth), true).unwrap();
        let ids = contend(&svc, 2, 40, 3);
        let (auth, confirmed) = svc.stop();
        check_unique_in_bounds(&ids, &confirmed);
        let hw = auth.high_water();
        drop(auth);
        let audit: Vec<IdRange> = read_audit(d.path())
            .unwrap()
            .iter()
            .map(|e| e.range)
            .collect();
        let recorded: Vec<IdRange> = confirmed.iter().map(|&(_, r)| r).collect();
        assert_eq!(audit, recorded);
        assert_eq!(audit.last().unwrap().end, hw);
    }

    /// An authority that blocks each allocation until a permit arrives.
    struct GateAuthority {
        inner: MemoryAuthority,
        permits: channel::Receiver<()>,
    }

    impl Authority for GateAuthority {
        fn allocate(&mut self, len: u64) -> Result<IdRange, AuthorityError> {
            self.permits
                .recv()
                .map_err(|_| AuthorityError::Unavailable("gate closed".into()))?;
            self.inner.allocate(len)
        }
        fn high_water(&self) -> u64 {
            self.inner.high_water()
        }
    }

    #[test]
    fn waiting_for_a_range_is_bounded_then_recovers() {
        let (permit, permits) = channel::unbounded();
        let auth = GateAuthority {
            inner: MemoryAuthority::new(1),
            permits,
        };
        let svc = AllocatorService::start(Box::new(auth), true).unwrap();
        let client = svc.client(0, Box::new(|| {}));
        let mut buf = SegmentBuffer::new(SegmentConfig {
            segment_len: 2,
            next_id_deadline_ms: 50,
            ..SegmentConfig::default()
        });
        let t0 = Instant::now();
        let err = next_id_blocking(&mut buf, &client).unwrap_err();
        assert!(matches!(err, NextIdError::NeedRange { .. }));
        let waited = t0.elapsed();
        assert!(
            waited >= Duration::from_millis(50) && waited < Duration::from_secs(5),
            "{waited:?}"
        );
        assert!(buf.is_loading(), "the load stays in flight");
        permit.send(()).unwrap();
        permit.send(()).unwrap(); // for the prefetch after the first ID
        assert_eq!(next_id_blocking(&mut buf, &client).unwrap(), 1);
        assert_eq!(next_id_blocking(&mut buf, &client).unwrap(), 2);
        assert_eq!(next_id_blocking(&mut buf, &client).unwrap(), 3);
        // Close the gate so the allocator thread, blocked on a prefetch, can stop.
        drop(permit);
        drop(svc);
    }

    #[test]
    fn restart_never_reuses_ranges() {
        let d = tempfile::tempdir().unwrap();
        let mut a = FileAuthority::open(d.path(), 0).unwrap();
        let r1 = a.allocate(100).unwrap();
        let r2 = a.allocate(100).unwrap();
        assert_eq!((r1.start, r1.end, r2.start, r2.end), (1, 101, 101, 201));
        // "Kill": drop with both ranges unused.
        drop(a);
        let mut a = FileAuthority::open(d.path(), 0).unwrap();
        assert_eq!(a.high_water(), 201);
        let r3 = a.allocate(50).unwrap();
        assert!(r3.start >= r2.end, "{r3:?} reuses space below {}", r2.end);
        let audit = read_audit(d.path()).unwrap();
        assert_eq!(
            audit.iter().map(|e| e.range).collect::<Vec<_>>(),
            vec![r1, r2, r3]
        );
    }

    #[test]
    fn rolled_back_authority_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let alloc_dir = d.path().join(ALLOC_DIR_NAME);
        let mut a = FileAuthority::open(d.path(), 0).unwrap();
        a.allocate(10).unwrap();
        let old = fs::read(alloc_dir.join(AUTHORITY_FILE_NAME)).unwrap();
        let last = a.allocate(10).unwrap();
        a.allocate(10).unwrap();
        drop(a);
        fs::write(alloc_dir.join(AUTHORITY_FILE_NAME), &old).unwrap();
        let err = FileAuthority::open(d.path(), 0).unwrap_err();
        match &err {
            AuthorityError::RolledBack {
                high_water,
                confirmed,
                evidence,
                ..
            } => {
                assert_eq!(
                    (*high_water, *confirmed, *evidence),
                    (11, 31, "the audit log")
                );
            }
            other => panic!("expected RolledBack, got {other:?}"),
        }
        assert!(err.to_string().contains("rolled back"));
        // Restore both files from the same old backup: the audit agrees, but the data does not.
        fs::remove_file(alloc_dir.join(AUDIT_FILE_NAME)).unwrap();
        let err = FileAuthority::open(d.path(), last.end - 1).unwrap_err();
        assert!(matches!(
            err,
            AuthorityError::RolledBack {
                evidence: "the tables and logs",
                ..
            }
        ));
        // With no evidence of higher IDs it opens, at the restored high-water.
        assert_eq!(FileAuthority::open(d.path(), 10).unwrap().high_water(), 11);
    }

    #[test]
    fn missing_or_corrupt_authority_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let alloc_dir = d.path().join(ALLOC_DIR_NAME);
        let mut a = FileAuthority::open(d.path(), 0).unwrap();
        a.allocate(10).unwrap();
        drop(a);
        let good = fs::read(alloc_dir.join(AUTHORITY_FILE_NAME)).unwrap();
        let mut bad = good.clone();
        bad[9] ^= 1;
        fs::write(alloc_dir.join(AUTHORITY_FILE_NAME), &bad).unwrap();
        assert!(matches!(
            FileAuthority::open(d.path(), 0),
            Err(AuthorityError::Corrupt { .. })
        ));
        fs::remove_file(alloc_dir.join(AUTHORITY_FILE_NAME)).unwrap();
        assert!(matches!(
            FileAuthority::open(d.path(), 0),
            Err(AuthorityError::Missing { .. })
        ));
        // A fresh data dir with data in it but no authority at all is refused too.
        let d2 = tempfile::tempdir().unwrap();
        assert!(matches!(
            FileAuthority::open(d2.path(), 5),
            Err(AuthorityError::Missing { .. })
        ));
        // initialize refuses a high-water below the audit, then accepts a proven one.
        assert!(matches!(
            FileAuthority::initialize(d.path(), 5),
            Err(AuthorityError::RolledBack { .. })
        ));
        let a = FileAuthority::initialize(d.path(), 1_000).unwrap();
        assert_eq!(a.high_water(), 1_000);
        assert!(matches!(
            FileAuthority::initialize(d.path(), 2_000),
            Err(AuthorityError::AlreadyInitialized { .. })
        ));
    }

    #[test]
    fn torn_audit_tail_truncated_middle_damage_refused() {
        let d = tempfile::tempdir().unwrap();
        let audit_path = d.path().join(ALLOC_DIR_NAME).join(AUDIT_FILE_NAME);
        let mut a = FileAuthority::open(d.path(), 0).unwrap();
        for _ in 0..3 {
            a.allocate(5).unwrap();
        }
        drop(a);
        let full = fs::read(&audit_path).unwrap();
        // Torn append: a partial fourth record.
        let mut torn = full.clone();
        torn.extend_from_slice(&[1, 2, 3]);
        fs::write(&audit_path, &torn).unwrap();
        let mut a = FileAuthority::open(d.path(), 0).unwrap();
        assert_eq!(fs::metadata(&audit_path).unwrap().len(), full.len() as u64);
        a.allocate(5).unwrap();
        drop(a);
        assert_eq!(read_audit(d.path()).unwrap().len(), 4);
        // Damage in the first record is refused.
        let mut b = fs::read(&audit_path).unwrap();
        b[10] ^= 0xff;
        fs::write(&audit_path, &b).unwrap();
        assert!(matches!(
            FileAuthority::open(d.path(), 0),
            Err(AuthorityError::Corrupt { .. })
        ));
    }

    #[test]
    fn exhaustion_last_id_usable_then_explicit() {
        let d = tempfile::tempdir().unwrap();
        let auth = FileAuthority::initialize(d.path(), KEY_SPACE - 5).unwrap();
        let svc = AllocatorService::start(Box::new(auth), true).unwrap();
        let client = svc.client(0, Box::new(|| {}));
        let mut buf = SegmentBuffer::new(cfg(3));
        let mut ids = Vec::new();
        loop {
            match next_id_blocking(&mut buf, &client) {
                Ok(id) => ids.push(id),
                Err(NextIdError::Exhausted) => break,
                Err(e) => panic!("unexpected {e:?}"),
            }
        }
        assert_eq!(ids, (KEY_SPACE - 5..KEY_SPACE).collect::<Vec<_>>());
        assert_eq!(
            svc.confirmed().iter().map(|&(_, r)| r).collect::<Vec<_>>(),
            vec![
                IdRange {
                    start: KEY_SPACE - 5,
                    end: KEY_SPACE - 2
                },
                IdRange {
                    start: KEY_SPACE - 2,
                    end: KEY_SPACE
                },
            ]
        );
        // Stays exhausted, explicitly, and so does the authority across a restart.
        assert_eq!(
            next_id_blocking(&mut buf, &client),
            Err(NextIdError::Exhausted)
        );
        drop(svc);
        let mut a = FileAuthority::open(d.path(), KEY_SPACE - 1).unwrap();
        assert!(matches!(a.allocate(1), Err(AuthorityError::Exhausted)));
        // Boundary cases of the range carving itself.
        let mut m = MemoryAuthority::new(KEY_SPACE - 1);
        assert_eq!(
            m.allocate(10).unwrap(),
            IdRange {
                start: KEY_SPACE - 1,
                end: KEY_SPACE
            }
        );
        assert!(matches!(m.allocate(1), Err(AuthorityError::Exhausted)));
        assert!(matches!(
            MemoryAuthority::new(1).allocate(0),
            Err(AuthorityError::BadLength(0))
        ));
        assert!(matches!(
            MemoryAuthority::new(1).allocate(MAX_SEGMENT_LEN + 1),
            Err(AuthorityError::BadLength(_))
        ));
    }

    /// Fails the first `failures` allocations.
    struct FlakyAuthority {
        inner: MemoryAuthority,
        failures: Arc<AtomicU64>,
    }

    impl Authority for FlakyAuthority {
        fn allocate(&mut self, len: u64) -> Result<IdRange, AuthorityError> {
            if self
                .failures
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return Err(AuthorityError::Unavailable("injected failure".into()));
            }
            self.inner.allocate(len)
        }
        fn high_water(&self) -> u64 {
            self.inner.high_water()
        }
    }

    #[test]
    fn backoff_is_exponential_capped_and_resets() {
        let mut buf = SegmentBuffer::new(cfg(10));
        let t0 = Instant::now();
        let mut now = t0;
        let mut delays = Vec::new();
        for _ in 0..12 {
            assert!(buf.wants_prefetch(now));
            buf.loading_started();
            assert!(
                !buf.wants_prefetch(now),
                "no second load while one is in flight"
            );
            buf.on_reply(now, Err(AuthorityError::Unavailable("x".into())));
            assert!(!buf.is_loading(), "a failure clears loading");
            let retry = buf.retry_at().unwrap();
            delays.push((retry - now).as_millis() as u64);
            assert!(!buf.wants_prefetch(now));
            assert!(!buf.wants_prefetch(retry - Duration::from_millis(1)));
            now = retry;
        }
        let expect: Vec<u64> = (0..12)
            .map(|i| (BACKOFF_MIN_MS << i).min(BACKOFF_MAX_MS))
            .collect();
        assert_eq!(delays, expect);
        assert!(matches!(
            buf.next_id(now),
            Err(NextIdError::NeedRange { .. })
        ));
        buf.loading_started();
        buf.on_loaded(IdRange { start: 1, end: 11 });
        assert_eq!(buf.failures(), 0);
        assert_eq!(buf.retry_at(), None);
        assert_eq!(buf.next_id(now), Ok(1));
    }

    #[test]
    fn prefetch_failures_back_off_and_recover_through_service() {
        let failures = Arc::new(AtomicU64::new(5));
        let auth = FlakyAuthority {
            inner: MemoryAuthority::new(1),
            failures: Arc::clone(&failures),
        };
        let svc = AllocatorService::start(Box::new(auth), true).unwrap();
        let client = svc.client(0, Box::new(|| {}));
        let mut buf = SegmentBuffer::new(SegmentConfig {
            segment_len: 4,
            next_id_deadline_ms: 5_000,
            ..SegmentConfig::default()
        });
        let ids: Vec<u64> = (0..10)
            .map(|_| next_id_blocking(&mut buf, &client).unwrap())
            .collect();
        assert_eq!(ids, (1..=10).collect::<Vec<_>>());
        assert_eq!(failures.load(Ordering::SeqCst), 0);
        assert_eq!(buf.failures(), 0);
    }

    #[test]
    fn prefetch_tracks_rate_and_double_buffers() {
        let mut buf = SegmentBuffer::new(SegmentConfig {
            segment_len: 10_000,
            prefetch_lead_ms: 3_000,
            ..SegmentConfig::default()
        });
        let t0 = Instant::now();
        buf.loading_started();
        buf.on_loaded(IdRange {
            start: 1,
            end: 10_001,
        });
        // One ID per millisecond = 1,000/s: at 3 s lead, prefetch once under ~3,000 are left.
        let mut first_want = None;
        for i in 0..9_000u64 {
            let now = t0 + Duration::from_millis(i);
            assert_eq!(buf.next_id(now), Ok(i + 1));
            if first_want.is_none() && buf.wants_prefetch(now) {
                first_want = Some(buf.remaining());
            }
        }
        let left = first_want.expect("prefetch never wanted");
        assert!((2_000..3_200).contains(&left), "prefetch at {left} left");
        // Standby arrives; no further prefetch until the switch.
        buf.loading_started();
        buf.on_loaded(IdRange {
            start: 20_000,
            end: 30_000,
        });
        let now = t0 + Duration::from_millis(9_000);
        assert!(!buf.wants_prefetch(now));
        assert_eq!(buf.remaining(), 1_000 + 10_000);
        for i in 9_001..=10_000u64 {
            assert_eq!(buf.next_id(now), Ok(i));
        }
        assert_eq!(buf.next_id(now), Ok(20_000), "switch to standby");
        // Idle buffers still prefetch near the end of a range.
        let mut idle = SegmentBuffer::new(cfg(100));
        idle.loading_started();
        idle.on_loaded(IdRange { start: 1, end: 101 });
        let mut n = 0;
        while !idle.wants_prefetch(t0) {
            idle.next_id(t0 + Duration::from_secs(3600 * n)).unwrap();
            n += 1;
        }
        assert_eq!(idle.remaining(), 9);
    }

    #[test]
    #[should_panic(expected = "overlapping or before")]
    fn backwards_range_is_rejected() {
        let mut buf = SegmentBuffer::new(cfg(10));
        buf.loading_started();
        buf.on_loaded(IdRange {
            start: 100,
            end: 110,
        });
        for _ in 0..10 {
            buf.next_id(Instant::now()).unwrap();
        }
        buf.loading_started();
        buf.on_loaded(IdRange {
            start: 105,
            end: 115,
        });
    }
}
