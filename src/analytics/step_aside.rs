//! Keeps a service thread that shares CPUs with the cores (a click aggregator) off a CPU whose
//! core wants it.
//!
//! The aggregators run in `SCHED_IDLE`: a core that *wakes* preempts one at once. That is not
//! enough. The scheduler still owes a `SCHED_IDLE` thread a sliver of CPU, and pays it at a
//! tick: a core that is running (spinning between requests, or busy) is preempted and the
//! aggregator keeps the CPU until the next tick, 4 ms at `HZ=250`, while the core's requests
//! wait (`perf sched timehist` in perf/reports/2026-12-04-issue23-profile.md: 6 such steals in
//! 3 s at 20k req/s, up to 3.1 ms each, 11.8 ms in all, most of the p99.9). A wake-up never
//! comes to end it, since the core never slept.
//!
//! So the thread checks, every [`CHECK_EVERY`] steps of its loops, whether a core pinned to
//! the CPU it is running on is awake (not parked in its ring: then it is runnable and waiting
//! for this CPU, since they share it), and if so yields the CPU at once. A check is a
//! `sched_getcpu` (rseq, no syscall) and one load per core on that CPU; the yield happens only
//! when a core is actually kept waiting.
//!
//! When `SCHED_IDLE` was refused the thread runs at nice 19 only, where a waking core may also
//! wait for the rest of its slice; it then yields every [`YIELD_EVERY`] steps regardless.

use crate::mesh::Doorbells;
use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::Arc;

thread_local! {
    /// Whether the calling thread is a service thread that shares CPUs with cores. The click
    /// store's yield point is also reached on a core's own thread (`analytics::on_core`: the
    /// core does click work in its idle moments), where stepping aside would yield the CPU
    /// to nobody but the core itself.
    static SERVICE_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as a service thread: its [`StepAside::point`]s step aside.
pub fn mark_service_thread() {
    SERVICE_THREAD.with(|s| s.set(true));
}

fn on_service_thread() -> bool {
    SERVICE_THREAD.with(Cell::get)
}

/// Loop steps (a click classified or merged, a link-day logged) between two checks: at most a
/// few tens of microseconds of work, so a core waits at most that long for its CPU.
pub const CHECK_EVERY: u32 = 8;

/// Steps between two unconditional `sched_yield`s when `SCHED_IDLE` was refused and the
/// thread runs at nice 19 only.
pub const YIELD_EVERY: u32 = 32;

/// Steps between two readings of which cores run on this thread's CPU (besides a move to
/// another CPU, which is always noticed).
const RESCAN_EVERY: u32 = 1 << 16;

/// One thread's yield points.
pub struct StepAside {
    bells: Arc<Doorbells>,
    /// `SCHED_IDLE` was refused: yield every [`YIELD_EVERY`] steps.
    nice_only: bool,
    steps: u32,
    /// The CPU the cores in `here` were found for, and those cores.
    cpu: i32,
    here: Vec<usize>,
    /// Yields made because a core on this CPU was awake (a metric for tests and reports).
    pub yields: u64,
}

impl StepAside {
    pub fn new(bells: Arc<Doorbells>, sched_idle: bool) -> StepAside {
        StepAside {
            bells,
            nice_only: !sched_idle,
            steps: 0,
            cpu: -1,
            here: Vec::new(),
            yields: 0,
        }
    }

    /// A yield point: called once per step of a long loop. A no-op on any thread not marked
    /// by [`mark_service_thread`] (a core's own thread doing click work between requests).
    #[inline]
    pub fn point(&mut self) {
        if !on_service_thread() {
            return;
        }
        self.steps = self.steps.wrapping_add(1);
        if self.nice_only {
            if self.steps % YIELD_EVERY == 0 {
                std::thread::yield_now();
            }
            return;
        }
        if self.steps % CHECK_EVERY == 0 && self.core_waits() {
            self.yields += 1;
            std::thread::yield_now();
        }
    }

    /// Whether a core pinned to the CPU this thread runs on is awake, i.e. waiting for it.
    pub fn core_waits(&mut self) -> bool {
        // SAFETY: sched_getcpu takes no arguments (glibc reads rseq's cpu_id, no syscall).
        let cpu = unsafe { libc::sched_getcpu() };
        // Cores still starting have no CPU yet: the list is also made again now and then.
        if cpu != self.cpu || self.steps % RESCAN_EVERY == 0 {
            self.cpu = cpu;
            self.here.clear();
            for (core, bell) in self.bells.0.iter().enumerate() {
                if bell.cpu.load(Ordering::Acquire) == cpu {
                    self.here.push(core);
                }
            }
        }
        self.here
            .iter()
            .any(|&c| !self.bells.0[c].parked.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pins the calling thread to the CPU it runs on, so `sched_getcpu` keeps answering it.
    fn pin_here() -> i32 {
        // SAFETY: no arguments.
        let cpu = unsafe { libc::sched_getcpu() };
        crate::base::cpus::pin_current_thread(&[cpu as usize]).expect("sched_setaffinity");
        cpu
    }

    #[test]
    fn a_core_awake_on_this_cpu_is_waiting_and_a_parked_one_or_another_cpus_is_not() {
        let cpu = pin_here();
        mark_service_thread();
        let bells = Arc::new(Doorbells::new(3).expect("eventfds"));
        let mut p = StepAside::new(bells.clone(), true);
        // No core has started: nobody waits.
        assert!(!p.core_waits());
        // Core 1 runs on another CPU and is awake: not ours to yield to.
        bells.0[1].cpu.store(cpu + 1, Ordering::Release);
        // Core 2 runs here, parked.
        bells.0[2].cpu.store(cpu, Ordering::Release);
        bells.0[2].parked.store(true, Ordering::Release);
        p.cpu = -1; // The list is made again at a CPU change; a test forces it.
        assert!(!p.core_waits());
        // Core 2 wakes up: it wants this CPU.
        bells.0[2].parked.store(false, Ordering::Release);
        assert!(p.core_waits());
        // Points yield only when it waits, and count each yield.
        for _ in 0..CHECK_EVERY * 4 {
            p.point();
        }
        assert_eq!(p.yields, 4);
        bells.0[2].parked.store(true, Ordering::Release);
        for _ in 0..CHECK_EVERY * 4 {
            p.point();
        }
        assert_eq!(p.yields, 4);
    }

    #[test]
    fn without_sched_idle_it_yields_every_few_steps_regardless() {
        mark_service_thread();
        let bells = Arc::new(Doorbells::new(1).expect("eventfds"));
        let mut p = StepAside::new(bells, false);
        for _ in 0..YIELD_EVERY * 3 {
            p.point();
        }
        assert_eq!(
            p.yields, 0,
            "unconditional yields are not counted as a core's"
        );
    }

    #[test]
    fn a_point_on_a_thread_not_marked_as_a_service_thread_never_yields() {
        std::thread::spawn(|| {
            let cpu = pin_here();
            let bells = Arc::new(Doorbells::new(1).expect("eventfds"));
            // An awake core on this very CPU: a service thread would yield to it.
            bells.0[0].cpu.store(cpu, Ordering::Release);
            let mut p = StepAside::new(bells, true);
            assert!(p.core_waits());
            for _ in 0..CHECK_EVERY * 4 {
                p.point();
            }
            assert_eq!(p.yields, 0, "a core's own thread steps aside for nobody");
        })
        .join()
        .expect("the test thread");
    }
}
