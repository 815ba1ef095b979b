//! Test-only faults on a core thread (hidden `serve` flags). Nothing here runs unless such a
//! flag was given; it lives outside the redirect-path modules on purpose, since it blocks.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How long `--test-stall-core` blocks its core: long enough for `/livez` to notice
/// (`probes::LIVENESS_STALL_MS`) and a test to watch it fail, short enough to end by itself.
pub const TEST_STALL_MS: u64 = 6_000;

/// `--test-stall-core N --test-stall-after-ms T`: core N blocks its loop once, T ms after start,
/// standing in for a deadlocked or wedged core.
pub struct TestStall {
    pub core: usize,
    pub after_ms: u64,
    done: AtomicBool,
}

impl TestStall {
    pub fn new(core: usize, after_ms: u64) -> TestStall {
        TestStall {
            core,
            after_ms,
            done: AtomicBool::new(false),
        }
    }

    /// Called from core `me`'s sweep at `uptime_ms`: blocks once when due.
    pub fn maybe_stall(&self, me: usize, uptime_ms: u64) {
        if me == self.core && uptime_ms >= self.after_ms && !self.done.swap(true, Ordering::Relaxed)
        {
            eprintln!("core {me}: test stall for {TEST_STALL_MS} ms (--test-stall-core)");
            std::thread::sleep(Duration::from_millis(TEST_STALL_MS));
        }
    }
}
