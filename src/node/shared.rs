//! State every core reads: readiness, draining, counters, doorbells (atomics only; no locks;
//! the one `OnceLock` is written once, by a service thread, and read at exit).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// State shared by all cores.
pub struct Shared {
    pub cores: usize,
    /// Cores that have opened their shards, joined the mesh and armed their listener.
    pub ready_cores: AtomicUsize,
    /// Every core's counters (each written only by its core).
    pub counters: Vec<crate::metrics::CoreCounters>,
    /// Cores that finished their own connections while draining.
    pub drained_cores: AtomicUsize,
    /// Cores whose loop failed (startup waits for readiness or the first failure).
    pub failed_cores: AtomicUsize,
    /// Set by SIGTERM/SIGINT: stop accepting, finish in-flight requests, exit.
    pub draining: Arc<AtomicBool>,
    pub doorbells: Arc<crate::mesh::Doorbells>,
    /// Fleet mode's allocation counters (`--fleet-pg`), for `/metrics` and `/readyz`.
    pub fleet: Option<Arc<fleet::FleetStats>>,
    /// The one clock every core's heartbeat is measured on (`probes`).
    pub started: std::time::Instant,
    /// Damped verdicts of `/readyz` and `/readyz?creates` (`damped::Damped`).
    pub ready: crate::base::damped::Damped,
    pub ready_for_creates: crate::base::damped::Damped,
    /// `docs/openapi.yaml` as JSON (`GET /api/v1/openapi.json`), converted at start.
    pub openapi_json: Vec<u8>,
    /// Click analytics counters (`None` with `--analytics off`).
    pub clicks: Option<Arc<crate::analytics::ClickStats>>,
    /// Fleet mode's click flusher counters (`None` outside fleet mode or without analytics).
    pub fleet_clicks: Option<Arc<crate::analytics::fleet::FleetClickStats>>,
    /// Test only (`--test-stall-core`): a core that blocks its loop once.
    pub test_stall: Option<crate::base::test_faults::TestStall>,
}

impl Shared {
    /// Milliseconds since the server started, on the clock heartbeats use (never 0 once a
    /// core has beaten, so 0 can mean "not yet").
    pub fn uptime_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64 + 1
    }

    /// Every core is serving and the server is not draining (`/readyz`).
    pub fn ready(&self) -> bool {
        self.ready_cores.load(Ordering::Acquire) == self.cores
            && !self.draining.load(Ordering::Relaxed)
    }
}
