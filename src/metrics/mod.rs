//! Per-core counters, exported at `GET /metrics` in the OpenMetrics text format by the
//! `prometheus-client` encoder (`encode.rs`).
//!
//! Each core is the only writer of its own [`CoreCounters`] (relaxed stores of values it keeps
//! in plain fields anyway: [`Tally`] once per loop turn, [`OwnerTally`] at each sweep), so
//! counting costs no shared cache-line traffic; whichever core answers `/metrics` reads all of
//! them. Histograms are fixed buckets ([`Buckets`]), counted in plain arrays on the core: no
//! allocation and no atomic read-modify-write on the hot path.

mod encode;
pub use encode::render;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds (µs) of the request-duration histogram (receive completion to send queued).
pub const REQUEST_US_BUCKETS: [u64; 13] = [
    5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 25_000, 100_000, 1_000_000,
];

/// Upper bounds (µs) of the log fdatasync histogram.
pub const FSYNC_US_BUCKETS: [u64; 11] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 100_000, 1_000_000,
];

/// Upper bounds of the log batch size histogram (records per batch).
pub const BATCH_RECORDS_BUCKETS: [u64; 9] = [1, 2, 4, 8, 16, 64, 256, 1_024, 4_096];

/// A fixed-bucket histogram counted in place: per-bucket counts (the last is +Inf) and a sum.
#[derive(Clone, Copy, Debug)]
pub struct Buckets<const N: usize> {
    pub counts: [u64; N],
    pub sum: u64,
}

impl<const N: usize> Default for Buckets<N> {
    fn default() -> Self {
        Buckets {
            counts: [0; N],
            sum: 0,
        }
    }
}

impl<const N: usize> Buckets<N> {
    /// Counts `n` observations of `v` against `bounds` (`bounds.len() == N - 1`).
    #[inline]
    pub fn observe(&mut self, bounds: &[u64], v: u64, n: u64) {
        debug_assert_eq!(bounds.len() + 1, N);
        let i = bounds.iter().position(|&b| v <= b).unwrap_or(N - 1);
        self.counts[i] += n;
        self.sum += v * n;
    }
}

/// The atomic mirror of a [`Buckets`], published by its one writer.
#[derive(Debug)]
pub struct AtomicBuckets<const N: usize> {
    pub counts: [AtomicU64; N],
    pub sum: AtomicU64,
}

impl<const N: usize> Default for AtomicBuckets<N> {
    fn default() -> Self {
        AtomicBuckets {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            sum: AtomicU64::new(0),
        }
    }
}

impl<const N: usize> AtomicBuckets<N> {
    fn publish(&self, b: &Buckets<N>) {
        for (a, v) in self.counts.iter().zip(b.counts) {
            a.store(v, Ordering::Relaxed);
        }
        self.sum.store(b.sum, Ordering::Relaxed);
    }

    /// A copy (for encoding).
    pub fn load(&self) -> Buckets<N> {
        Buckets {
            counts: std::array::from_fn(|i| self.counts[i].load(Ordering::Relaxed)),
            sum: self.sum.load(Ordering::Relaxed),
        }
    }
}

/// What the key-owner role counts on its core, published at each sweep.
#[derive(Default, Clone, Copy, Debug)]
pub struct OwnerTally {
    pub log_records: u64,
    pub log_batches: u64,
    pub batch_records: Buckets<{ BATCH_RECORDS_BUCKETS.len() + 1 }>,
    pub fsync_us: Buckets<{ FSYNC_US_BUCKETS.len() + 1 }>,
    pub compactions: u64,
    pub compaction_ms: u64,
    pub compacted_entries: u64,
    pub memtable_entries: u64,
    pub table_links: u64,
    pub table_bytes: u64,
}

/// Why an accept failed (the `class` label of `ricochet_accept_errors_total`).
pub const ACCEPT_ERROR_CLASSES: [&str; 4] = ["descriptors", "memory", "aborted", "other"];

/// The class of an accept error (`-res` of the completion).
pub fn accept_error_class(errno: i32) -> usize {
    match errno {
        libc::EMFILE | libc::ENFILE => 0,
        libc::ENOBUFS | libc::ENOMEM => 1,
        libc::ECONNABORTED | libc::EPROTO | libc::EPERM => 2,
        _ => 3,
    }
}

/// One core's counters.
#[derive(Default)]
pub struct CoreCounters {
    pub requests: AtomicU64,
    pub redirects: AtomicU64,
    pub not_found: AtomicU64,
    pub blocked: AtomicU64,
    pub disabled: AtomicU64,
    pub rule_redirects: AtomicU64,
    pub forwarded: AtomicU64,
    pub lru_hits: AtomicU64,
    pub api_requests: AtomicU64,
    pub mesh_deferred: AtomicU64,
    pub held_batches: AtomicU64,
    pub connections: AtomicU64,
    /// Heap allocations made on this core's thread since it started (0 unless the binary
    /// installs [`CountingAlloc`], as `ricochet` does).
    pub heap_allocations: AtomicU64,
    /// Heap allocations of the click work this core's thread did between requests
    /// (`analytics::on_core`), kept out of `heap_allocations`: that work is not the redirect
    /// path (new link-days, interned values, the store's growth).
    pub click_allocations: AtomicU64,
    /// IDs on hand in this core's current and standby ranges (published at each sweep).
    pub ids_remaining: AtomicU64,
    /// This core's generated-key create rate estimate, in thousandths per second.
    pub id_rate_milli: AtomicU64,
    /// 1 while this core's range loads are backing off after a failure.
    pub id_backoff: AtomicU64,
    /// Generated IDs this core has taken from its ranges (waste = confirmed - used - on hand).
    pub ids_used: AtomicU64,
    /// IDs on hand divided by the create rate, in seconds (capped at [`MAX_SECONDS_LEFT`]).
    pub id_seconds_left: AtomicU64,
    /// `Shared::uptime_ms` at this core's last sweep: its loop is making progress (`/livez`).
    pub heartbeat_ms: AtomicU64,
    /// Request duration, receive completion to send queued.
    pub request_us: AtomicBuckets<{ REQUEST_US_BUCKETS.len() + 1 }>,
    pub accept_errors: [AtomicU64; ACCEPT_ERROR_CLASSES.len()],
    pub log_records: AtomicU64,
    pub log_batches: AtomicU64,
    pub batch_records: AtomicBuckets<{ BATCH_RECORDS_BUCKETS.len() + 1 }>,
    pub fsync_us: AtomicBuckets<{ FSYNC_US_BUCKETS.len() + 1 }>,
    pub compactions: AtomicU64,
    pub compaction_ms: AtomicU64,
    pub compacted_entries: AtomicU64,
    pub memtable_entries: AtomicU64,
    pub table_links: AtomicU64,
    pub table_bytes: AtomicU64,
}

/// `ricochet_id_seconds_left` when the core makes no creates: a year stands for "not running
/// out" without an infinity in a gauge.
pub const MAX_SECONDS_LEFT: u64 = 365 * 86_400;

/// A core's private tallies, published to its [`CoreCounters`] once per loop turn.
#[derive(Default, Clone, Copy)]
pub struct Tally {
    pub requests: u64,
    pub redirects: u64,
    pub not_found: u64,
    /// Links answered 451 because the blocklist names their target.
    pub blocked: u64,
    /// Links answered 410 or 451 because an admin disabled them.
    pub disabled: u64,
    /// Redirects that went to a redirect rule's target (`shards::rules`).
    pub rule_redirects: u64,
    pub forwarded: u64,
    pub lru_hits: u64,
    pub api_requests: u64,
    /// Messages that waited in the mesh outbox because a peer's queue was full.
    pub mesh_deferred: u64,
    /// Times a connection's input was held back because the mesh outbox was congested.
    pub held_batches: u64,
    /// Request duration, receive completion to send queued (one reading per batch sent).
    pub request_us: Buckets<{ REQUEST_US_BUCKETS.len() + 1 }>,
    pub accept_errors: [u64; ACCEPT_ERROR_CLASSES.len()],
}

impl CoreCounters {
    pub fn publish(&self, t: &Tally, connections: usize) {
        self.requests.store(t.requests, Ordering::Relaxed);
        self.redirects.store(t.redirects, Ordering::Relaxed);
        self.not_found.store(t.not_found, Ordering::Relaxed);
        self.blocked.store(t.blocked, Ordering::Relaxed);
        self.disabled.store(t.disabled, Ordering::Relaxed);
        self.rule_redirects
            .store(t.rule_redirects, Ordering::Relaxed);
        self.forwarded.store(t.forwarded, Ordering::Relaxed);
        self.lru_hits.store(t.lru_hits, Ordering::Relaxed);
        self.api_requests.store(t.api_requests, Ordering::Relaxed);
        self.mesh_deferred.store(t.mesh_deferred, Ordering::Relaxed);
        self.held_batches.store(t.held_batches, Ordering::Relaxed);
        self.connections
            .store(connections as u64, Ordering::Relaxed);
        self.heap_allocations
            .store(thread_allocations(), Ordering::Relaxed);
        self.request_us.publish(&t.request_us);
        for (a, v) in self.accept_errors.iter().zip(t.accept_errors) {
            a.store(v, Ordering::Relaxed);
        }
    }

    /// Publishes the key owner's tallies (at each sweep).
    pub fn publish_owner(&self, t: &OwnerTally) {
        let set = |a: &AtomicU64, v: u64| a.store(v, Ordering::Relaxed);
        set(&self.log_records, t.log_records);
        set(&self.log_batches, t.log_batches);
        self.batch_records.publish(&t.batch_records);
        self.fsync_us.publish(&t.fsync_us);
        set(&self.compactions, t.compactions);
        set(&self.compaction_ms, t.compaction_ms);
        set(&self.compacted_entries, t.compacted_entries);
        set(&self.memtable_entries, t.memtable_entries);
        set(&self.table_links, t.table_links);
        set(&self.table_bytes, t.table_bytes);
    }
}

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

/// Heap allocations made by the calling thread so far.
pub fn thread_allocations() -> u64 {
    ALLOCS.with(|a| a.get())
}

/// Runs `f` without counting its allocations in [`thread_allocations`]: returns what `f`
/// returned and how many allocations it made, for the caller to account apart.
pub fn counted_apart<R>(f: impl FnOnce() -> R) -> (R, u64) {
    let before = thread_allocations();
    let r = f();
    let made = ALLOCS.with(|a| {
        let made = a.get().wrapping_sub(before);
        a.set(before);
        made
    });
    (r, made)
}

/// The system allocator, counting allocations per thread (a thread-local increment: no atomics,
/// no locks). Installed by the `ricochet` binary so `/metrics` and the tests can prove the
/// redirect path allocates nothing once warm.
pub struct CountingAlloc;

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the only
// addition is a thread-local counter update, which does not allocate.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|a| a.set(a.get() + 1));
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged; `ptr` came from `System` via this allocator.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|a| a.set(a.get() + 1));
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|a| a.set(a.get() + 1));
        // SAFETY: forwarded unchanged; `ptr` came from `System` via this allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
