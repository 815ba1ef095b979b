//! The per-core, sans-IO double buffer of ID ranges.
//!
//! State: `current` (the range IDs are taken from, with a cursor), `standby` (the next
//! confirmed range), `loading` (a request is in flight), `retry_at` (backoff after a failed
//! load), `exhausted`. Published ranges are immutable and never reused: a range leaves the
//! buffer only by being used up or by the process ending (restarts discard it).
//!
//! The caller drives it: after taking an ID (or failing to), if [`SegmentBuffer::wants_prefetch`]
//! it sends a request and calls [`SegmentBuffer::loading_started`]; replies go to
//! [`SegmentBuffer::on_reply`]. A caller that gets [`NextIdError::NeedRange`] parks the request
//! until a reply arrives or the returned deadline passes, then fails it: nobody waits forever.

use std::time::{Duration, Instant};

use super::{AuthorityError, IdRange};

/// Range length requested by default. At a 5,000 creations/s peak per core, 10,000 IDs last
/// 2 s, far longer than one allocation (a few fsyncs), so the standby is normally ready; a
/// restart wastes at most two ranges per core, negligible against 62^7.
pub const DEFAULT_SEGMENT_LEN: u64 = 10_000;

/// Smallest range length accepted: 1 (tests use 1–3 to force constant switching).
pub const MIN_SEGMENT_LEN: u64 = 1;

/// Largest range length accepted: 10 million, so that the IDs a crash can waste stay a tiny
/// fraction (3 × 10^-6) of the key space even with many cores.
pub const MAX_SEGMENT_LEN: u64 = 10_000_000;

/// Default prefetch lead time: prefetch once the IDs left would last less than this at the
/// observed rate. Covers allocation latency (a few fsyncs, ~10–50 ms), a maximal backoff
/// ([`BACKOFF_MAX_MS`]) and scheduling jitter with margin.
pub const PREFETCH_LEAD_MS: u64 = 3_000;

/// Prefetch also once the current range is below this percentage of its length, whatever the
/// rate: at low traffic the rate estimate is near 0 and would otherwise let the buffer run dry
/// before fetching (Leaf uses a similar fixed threshold).
pub const PREFETCH_MIN_REMAINING_PERCENT: u64 = 10;

/// First retry delay after a failed load; doubled per consecutive failure. Small, because the
/// authority is local and a transient failure usually clears fast.
pub const BACKOFF_MIN_MS: u64 = 10;

/// Cap on the retry delay, so that a recovered authority is noticed within 2 s. No jitter:
/// all requests are serialized by one allocator thread, so synchronized retries cost nothing.
pub const BACKOFF_MAX_MS: u64 = 2_000;

/// Default longest time a creation waits for a range before failing (503-style). Long enough
/// to ride out a slow fsync, short enough to answer well within client timeouts.
pub const NEXT_ID_DEADLINE_MS: u64 = 500;

/// Length of the rate-estimation window: one sample (IDs / elapsed) per window.
pub const RATE_WINDOW_MS: u64 = 1_000;

/// EWMA weight of the newest rate sample: 0.3 reacts to a surge within a few windows while
/// smoothing single-window spikes.
pub const RATE_EWMA_ALPHA: f64 = 0.3;

/// Tuning of a [`SegmentBuffer`]. Defaults are the constants above.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentConfig {
    /// Length of each requested range, in `[MIN_SEGMENT_LEN, MAX_SEGMENT_LEN]`.
    pub segment_len: u64,
    pub prefetch_lead_ms: u64,
    pub backoff_min_ms: u64,
    pub backoff_max_ms: u64,
    pub next_id_deadline_ms: u64,
}

impl Default for SegmentConfig {
    fn default() -> Self {
        SegmentConfig {
            segment_len: DEFAULT_SEGMENT_LEN,
            prefetch_lead_ms: PREFETCH_LEAD_MS,
            backoff_min_ms: BACKOFF_MIN_MS,
            backoff_max_ms: BACKOFF_MAX_MS,
            next_id_deadline_ms: NEXT_ID_DEADLINE_MS,
        }
    }
}

impl SegmentConfig {
    /// Checks user-supplied values; the error says which is wrong.
    pub fn validate(&self) -> Result<(), &'static str> {
        if !(MIN_SEGMENT_LEN..=MAX_SEGMENT_LEN).contains(&self.segment_len) {
            return Err("segment length out of range");
        }
        if self.backoff_min_ms == 0 || self.backoff_min_ms > self.backoff_max_ms {
            return Err("backoff bounds must satisfy 0 < min <= max");
        }
        if self.next_id_deadline_ms == 0 {
            return Err("next-ID deadline must be positive");
        }
        Ok(())
    }
}

/// Why [`SegmentBuffer::next_id`] gave no ID. Small and `Copy`: this is the creation hot path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NextIdError {
    /// No ID on hand. Wait for a range until `deadline`, then fail the request.
    NeedRange { deadline: Instant },
    /// The ID space is used up: fail creations with generated keys permanently.
    Exhausted,
}

#[derive(Debug, Clone, Copy)]
struct RateEstimator {
    window_start: Option<Instant>,
    count: u64,
    ewma_per_s: f64,
}

impl RateEstimator {
    fn tick(&mut self, now: Instant) {
        let start = *self.window_start.get_or_insert(now);
        let elapsed = now.saturating_duration_since(start);
        if elapsed >= Duration::from_millis(RATE_WINDOW_MS) {
            let sample = self.count as f64 / elapsed.as_secs_f64();
            self.ewma_per_s = RATE_EWMA_ALPHA * sample + (1.0 - RATE_EWMA_ALPHA) * self.ewma_per_s;
            self.window_start = Some(now);
            self.count = 0;
        }
        self.count += 1;
    }

    /// The smoothed rate, or the current window's count if that is higher (a surge shows up
    /// before its window closes).
    fn per_s(&self) -> f64 {
        let window_s = RATE_WINDOW_MS as f64 / 1000.0;
        self.ewma_per_s.max(self.count as f64 / window_s)
    }
}

/// One core's ID double buffer. See the module docs.
#[derive(Debug, Clone)]
pub struct SegmentBuffer {
    cfg: SegmentConfig,
    current: IdRange,
    cursor: u64,
    standby: Option<IdRange>,
    loading: bool,
    retry_at: Option<Instant>,
    failures: u32,
    exhausted: bool,
    /// End of the newest range received; ranges must never go backwards.
    last_end: u64,
    rate: RateEstimator,
}

impl SegmentBuffer {
    /// An empty buffer (it wants a load immediately). `cfg` must pass
    /// [`SegmentConfig::validate`] (asserted).
    pub fn new(cfg: SegmentConfig) -> SegmentBuffer {
        if let Err(e) = cfg.validate() {
            panic!("invalid SegmentConfig: {e}");
        }
        SegmentBuffer {
            cfg,
            current: IdRange::default(),
            cursor: 0,
            standby: None,
            loading: false,
            retry_at: None,
            failures: 0,
            exhausted: false,
            last_end: 0,
            rate: RateEstimator {
                window_start: None,
                count: 0,
                ewma_per_s: 0.0,
            },
        }
    }

    /// Takes the next ID: from `current`, else by switching to `standby`.
    #[inline]
    pub fn next_id(&mut self, now: Instant) -> Result<u64, NextIdError> {
        if self.cursor >= self.current.end {
            match self.standby.take() {
                Some(s) => {
                    self.current = s;
                    self.cursor = s.start;
                }
                None if self.exhausted => return Err(NextIdError::Exhausted),
                None => {
                    return Err(NextIdError::NeedRange {
                        deadline: now + Duration::from_millis(self.cfg.next_id_deadline_ms),
                    })
                }
            }
        }
        let id = self.cursor;
        self.cursor += 1;
        self.rate.tick(now);
        Ok(id)
    }

    /// Whether to request a range now: no standby, nothing loading, not backing off, not
    /// exhausted, and the IDs left in `current` would last less than the lead time at the
    /// observed rate (or are below [`PREFETCH_MIN_REMAINING_PERCENT`] of the range, or none).
    pub fn wants_prefetch(&self, now: Instant) -> bool {
        if self.loading || self.standby.is_some() || self.exhausted || self.in_backoff(now) {
            return false;
        }
        let left = self.current.end.saturating_sub(self.cursor);
        if left == 0 {
            return true;
        }
        let by_rate = (left as f64) < self.rate.per_s() * self.cfg.prefetch_lead_ms as f64 / 1e3;
        let by_fraction = left * 100 < self.current.len() * PREFETCH_MIN_REMAINING_PERCENT;
        by_rate || by_fraction
    }

    /// Length to request.
    pub fn request_len(&self) -> u64 {
        self.cfg.segment_len
    }

    /// Records that a request was sent. At most one is in flight (asserted).
    pub fn loading_started(&mut self) {
        assert!(!self.loading, "a range load is already in flight");
        self.loading = true;
    }

    /// Publishes a newly allocated range: it becomes `current` if that is used up, else the
    /// standby. Ranges must be non-empty and after every earlier one (asserted: anything else
    /// is an authority bug that would re-issue IDs).
    pub fn on_loaded(&mut self, range: IdRange) {
        assert!(self.loading, "on_loaded without loading_started");
        assert!(!range.is_empty(), "empty range from the authority");
        assert!(
            range.start >= self.last_end,
            "authority returned {range:?}, overlapping or before an earlier range ending at {}",
            self.last_end
        );
        self.loading = false;
        self.failures = 0;
        self.retry_at = None;
        self.last_end = range.end;
        if self.cursor >= self.current.end {
            self.current = range;
            self.cursor = range.start;
        } else {
            assert!(
                self.standby.is_none(),
                "load requested with a standby on hand"
            );
            self.standby = Some(range);
        }
    }

    /// Records a failed load: retry after a backoff of `backoff_min_ms · 2^(failures-1)`,
    /// capped at `backoff_max_ms`.
    pub fn on_load_failed(&mut self, now: Instant) {
        assert!(self.loading, "on_load_failed without loading_started");
        self.loading = false;
        self.failures = self.failures.saturating_add(1);
        let shift = (self.failures - 1).min(30);
        let ms = self
            .cfg
            .backoff_min_ms
            .saturating_mul(1u64 << shift)
            .min(self.cfg.backoff_max_ms);
        self.retry_at = Some(now + Duration::from_millis(ms));
    }

    /// Records that the authority has no IDs left: once the ranges on hand are used,
    /// `next_id` returns [`NextIdError::Exhausted`].
    pub fn on_exhausted(&mut self) {
        assert!(self.loading, "on_exhausted without loading_started");
        self.loading = false;
        self.exhausted = true;
    }

    /// Dispatches an allocator reply to `on_loaded`, `on_exhausted` or `on_load_failed`.
    pub fn on_reply(&mut self, now: Instant, reply: Result<IdRange, AuthorityError>) {
        match reply {
            Ok(r) => self.on_loaded(r),
            Err(AuthorityError::Exhausted) => self.on_exhausted(),
            Err(_) => self.on_load_failed(now),
        }
    }

    /// IDs on hand (current + standby).
    pub fn remaining(&self) -> u64 {
        self.current.end.saturating_sub(self.cursor) + self.standby.map_or(0, |s| s.len())
    }

    /// Whether a load is in flight.
    pub fn is_loading(&self) -> bool {
        self.loading
    }

    /// Whether the authority reported exhaustion.
    pub fn is_exhausted(&self) -> bool {
        self.exhausted
    }

    /// Whether a retry is being held back at `now`.
    pub fn in_backoff(&self, now: Instant) -> bool {
        self.retry_at.is_some_and(|t| now < t)
    }

    /// When the current backoff ends, if any.
    pub fn retry_at(&self) -> Option<Instant> {
        self.retry_at
    }

    /// Consecutive failed loads.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Observed creation rate, IDs per second.
    pub fn rate_per_s(&self) -> f64 {
        self.rate.per_s()
    }

    /// The configuration.
    pub fn config(&self) -> &SegmentConfig {
        &self.cfg
    }
}
