//! Per-core counters, exported at `GET /metrics` in the Prometheus text format.
//!
//! Each core is the only writer of its own [`CoreCounters`] (relaxed stores of values it keeps
//! in plain fields anyway), so counting costs no shared cache-line traffic; whichever core
//! answers `/metrics` reads all of them.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// One core's counters.
#[derive(Default)]
pub struct CoreCounters {
    pub requests: AtomicU64,
    pub redirects: AtomicU64,
    pub not_found: AtomicU64,
    pub forwarded: AtomicU64,
    pub lru_hits: AtomicU64,
    pub api_requests: AtomicU64,
    pub mesh_deferred: AtomicU64,
    pub held_batches: AtomicU64,
    pub connections: AtomicU64,
    /// Heap allocations made on this core's thread since it started (0 unless the binary
    /// installs [`CountingAlloc`], as `ricochet` does).
    pub heap_allocations: AtomicU64,
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
    pub forwarded: u64,
    pub lru_hits: u64,
    pub api_requests: u64,
    /// Messages that waited in the mesh outbox because a peer's queue was full.
    pub mesh_deferred: u64,
    /// Times a connection's input was held back because the mesh outbox was congested.
    pub held_batches: u64,
}

impl CoreCounters {
    pub fn publish(&self, t: &Tally, connections: usize) {
        self.requests.store(t.requests, Ordering::Relaxed);
        self.redirects.store(t.redirects, Ordering::Relaxed);
        self.not_found.store(t.not_found, Ordering::Relaxed);
        self.forwarded.store(t.forwarded, Ordering::Relaxed);
        self.lru_hits.store(t.lru_hits, Ordering::Relaxed);
        self.api_requests.store(t.api_requests, Ordering::Relaxed);
        self.mesh_deferred.store(t.mesh_deferred, Ordering::Relaxed);
        self.held_batches.store(t.held_batches, Ordering::Relaxed);
        self.connections
            .store(connections as u64, Ordering::Relaxed);
        self.heap_allocations
            .store(thread_allocations(), Ordering::Relaxed);
    }
}

/// Renders every core's counters.
pub fn render(cores: &[CoreCounters], out: &mut String) {
    type Getter = fn(&CoreCounters) -> &AtomicU64;
    let series: [(&str, &str, &str, Getter); 15] = [
        (
            "ricochet_requests_total",
            "counter",
            "HTTP requests answered or routed",
            |c| &c.requests,
        ),
        (
            "ricochet_redirects_total",
            "counter",
            "Redirects answered",
            |c| &c.redirects,
        ),
        (
            "ricochet_not_found_total",
            "counter",
            "404 answers to key lookups",
            |c| &c.not_found,
        ),
        (
            "ricochet_forwarded_total",
            "counter",
            "Lookups forwarded to the owning core",
            |c| &c.forwarded,
        ),
        (
            "ricochet_lru_hits_total",
            "counter",
            "Foreign keys answered from this core's LRU",
            |c| &c.lru_hits,
        ),
        (
            "ricochet_api_requests_total",
            "counter",
            "API requests",
            |c| &c.api_requests,
        ),
        (
            "ricochet_mesh_deferred_sends_total",
            "counter",
            "Cross-core messages that waited because the peer's queue was full",
            |c| &c.mesh_deferred,
        ),
        (
            "ricochet_held_batches_total",
            "counter",
            "Connection inputs held back while the mesh outbox was congested",
            |c| &c.held_batches,
        ),
        (
            "ricochet_connections",
            "gauge",
            "Open client connections",
            |c| &c.connections,
        ),
        (
            "ricochet_core_heap_allocations_total",
            "counter",
            "Heap allocations on the core thread",
            |c| &c.heap_allocations,
        ),
        (
            "ricochet_ids_remaining",
            "gauge",
            "IDs on hand in the core's current and standby ranges",
            |c| &c.ids_remaining,
        ),
        (
            "ricochet_id_rate_millis_per_second",
            "gauge",
            "Generated-key creates per second on the core (estimate, x1000)",
            |c| &c.id_rate_milli,
        ),
        (
            "ricochet_id_backoff",
            "gauge",
            "1 while the core's ID range loads back off after a failure",
            |c| &c.id_backoff,
        ),
        (
            "ricochet_ids_used_total",
            "counter",
            "Generated IDs the core took from its ranges",
            |c| &c.ids_used,
        ),
        (
            "ricochet_id_seconds_left",
            "gauge",
            "IDs on hand over the create rate: seconds until the core runs out without a new range",
            |c| &c.id_seconds_left,
        ),
    ];
    for (name, kind, help, get) in series {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (i, c) in cores.iter().enumerate() {
            let _ = writeln!(
                out,
                "{name}{{core=\"{i}\"}} {}",
                get(c).load(Ordering::Relaxed)
            );
        }
    }
}

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

/// Heap allocations made by the calling thread so far.
pub fn thread_allocations() -> u64 {
    ALLOCS.with(|a| a.get())
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

/// Renders fleet mode's allocation counters (`--fleet-pg`). Labels: `class` only, from a
/// fixed vocabulary (`fleet::FailureClass`).
pub fn render_fleet(f: &fleet::FleetStatsSnapshot, out: &mut String) {
    let plain: [(&str, &str, &str, u64); 6] = [
        (
            "ricochet_fleet_allocations_total",
            "counter",
            "ID ranges confirmed by the PostgreSQL authority",
            f.allocations,
        ),
        (
            "ricochet_fleet_confirmed_ids_total",
            "counter",
            "IDs in ranges confirmed for this node (used or not: waste is confirmed minus used)",
            f.confirmed_ids,
        ),
        (
            "ricochet_fleet_unknown_commit_outcomes_total",
            "counter",
            "Allocations whose COMMIT reply was lost and whose outcome could not be proven",
            f.unknown_outcomes,
        ),
        (
            "ricochet_fleet_fenced",
            "gauge",
            "1 once the authority lost allocations this node confirmed (creates refused)",
            u64::from(f.fenced),
        ),
        (
            "ricochet_fleet_namespace_next_id",
            "gauge",
            "The namespace's next_id as last seen by this node",
            f.next_id_seen,
        ),
        (
            "ricochet_fleet_namespace_remaining_ids",
            "gauge",
            "IDs the namespace has not handed out yet, as last seen",
            f.namespace_hi.saturating_sub(f.next_id_seen),
        ),
    ];
    for (name, kind, help, v) in plain {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
        );
    }
    let name = "ricochet_fleet_allocation_failures_total";
    let _ = writeln!(
        out,
        "# HELP {name} Failed allocation attempts by class\n# TYPE {name} counter"
    );
    for (class, n) in &f.failures {
        let _ = writeln!(out, "{name}{{class=\"{class}\"}} {n}");
    }
    let name = "ricochet_fleet_allocation_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} Allocation transaction latency, measured by the node\n# TYPE {name} histogram"
    );
    for (le, n) in &f.latency_buckets {
        if le.is_infinite() {
            let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {n}");
        } else {
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {n}");
        }
    }
    let _ = writeln!(
        out,
        "{name}_sum {}\n{name}_count {}",
        f.latency_sum_s, f.latency_count
    );
}
