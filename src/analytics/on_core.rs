//! Click aggregation on the core's own thread, between requests (`--clicks-on-cores`, without
//! `--service-cpus`).
//!
//! Why: an aggregator thread sharing its core's CPU costs the core a context switch and a
//! wake-up every time it runs, and it runs in every idle gap: at 60k req/s on one CPU, 12,000
//! slices a second of 10 µs each, each paid for by the next request (a parked core takes
//! ~10 µs to wake), and at a high rate the core stops lending its CPU and the clicks are
//! dropped (perf/reports/2026-12-05-issue23-on-core.md). Done on the core, the same work costs
//! no switch and no wake-up: the loop, finding no request to serve, does one slice
//! ([`SLICE_BUDGET`]) of classifying its batches and merging the deltas it owns, then looks
//! at its ring again. A request that arrives during a slice waits for the rest of it at most.
//!
//! What blocks or takes long never runs here: the once-a-second sync (click log writes and
//! fdatasync, snapshots, retention), purges and stats queries, a new day's salt. For those
//! the aggregator itself moves to its service thread (`ricochet-clicks-<core>`, `SCHED_IDLE`,
//! stepping aside for the core: `step_aside`) and comes back when the chore is done. The
//! move is by value (`Box<Aggregator>` through a channel of one), so exactly one thread holds
//! it at any time: the types say who may touch it, no lock does.
//!
//! The allocations of these slices (new link-days, interned values, the store's growth) are
//! counted apart (`ricochet_core_click_allocations_total`): they are not the redirect path's.
//!
//! Measured against aggregator threads on one shared CPU (the default): far fewer clicks
//! dropped near saturation, but a higher p99 at 10-20k req/s, since a request arriving during
//! a slice waits for it; hence opt-in.

use super::aggregator::{Aggregator, Chore, Step};
use crate::mesh::Doorbells;
use crossbeam::channel::{bounded, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest slice of click work a core does before it looks at its ring again: the most a
/// request arriving meanwhile waits for it.
pub const SLICE_BUDGET: Duration = Duration::from_micros(20);

/// Most slices a sweep does for a due sync on a core that had no idle moment for it (at
/// most a millisecond of its time every `TIMEOUT_SWEEP_INTERVAL_MS`).
pub const MAX_CATCH_UP_SLICES: usize = 50;

/// A core's aggregator: at home on the core, or away on its service thread for a chore.
pub struct ClickSlices {
    /// `None` while the service thread holds it.
    home: Option<Box<Aggregator>>,
    to_service: Sender<(Box<Aggregator>, Chore)>,
    from_service: Receiver<Box<Aggregator>>,
    /// Heap allocations made by the slices (kept out of the core's redirect-path count).
    pub allocations: u64,
}

impl ClickSlices {
    /// Starts `agg`'s service thread, which prepares it (retention at start) and sends it
    /// to the core.
    pub fn start(
        agg: Aggregator,
        core: usize,
        bells: Arc<Doorbells>,
    ) -> std::io::Result<(ClickSlices, std::thread::JoinHandle<()>)> {
        let (to_service, service_rx) = bounded::<(Box<Aggregator>, Chore)>(1);
        let (service_tx, from_service) = bounded::<Box<Aggregator>>(1);
        let handle = std::thread::Builder::new()
            .name(format!("ricochet-clicks-{core}"))
            .spawn(move || serve_chores(Box::new(agg), core, &bells, &service_rx, &service_tx))?;
        let slices = ClickSlices {
            home: None,
            to_service,
            from_service,
            allocations: 0,
        };
        Ok((slices, handle))
    }

    /// One slice of click work, at an idle moment of the core's loop; whether it did any
    /// (the loop then looks at its ring and calls again instead of parking).
    pub fn slice(&mut self) -> bool {
        if self.home.is_none() {
            match self.from_service.try_recv() {
                Ok(agg) => self.home = Some(agg),
                Err(_) => return false,
            }
        }
        let agg = self.home.as_mut().expect("at home");
        let deadline = Instant::now() + SLICE_BUDGET;
        let (step, allocations) = crate::metrics::counted_apart(|| agg.step(deadline));
        self.allocations += allocations;
        match step {
            Step::Worked => true,
            Step::Idle => false,
            Step::Away(chore) => {
                let agg = self.home.take().expect("at home");
                // Room for it: the channel holds one and the only one is this.
                if self.to_service.try_send((agg, chore)).is_err() {
                    eprintln!(
                        "a click aggregator's service thread is gone; clicks are no longer counted"
                    );
                }
                true
            }
        }
    }

    /// The aggregator is on its service thread: the core lends it its idle moments.
    pub fn away(&self) -> bool {
        self.home.is_none() && self.from_service.is_empty()
    }

    /// How long until the aggregator's next sync is due (a parked core wakes for it), if it
    /// is at home.
    pub fn until_sync(&self) -> Option<Duration> {
        let agg = self.home.as_ref()?;
        Some(agg.next_sync().saturating_duration_since(Instant::now()))
    }

    /// At each sweep: while the aggregator is at home with a sync due or half encoded, up to
    /// [`MAX_CATCH_UP_SLICES`] slices. A saturated core has no idle moment, and without this
    /// its clicks would stay unsynced past the click log's durability window.
    pub fn catch_up(&mut self) {
        for _ in 0..MAX_CATCH_UP_SLICES {
            if !self.home.as_ref().is_some_and(|a| a.sync_pending()) || !self.slice() {
                return;
            }
        }
    }

    /// The core stops: the aggregator goes to its service thread for good, which finishes
    /// what it took and runs the thread's loop until every core closed (`Aggregator::serve`).
    /// The core's own closing message is in its queue already or comes after.
    pub fn finish(mut self) {
        let agg = match self.home.take() {
            Some(agg) => Some(agg),
            // Blocking is fine now: the core serves no more requests.
            None => self.from_service.recv().ok(),
        };
        if let Some(agg) = agg {
            let _ = self.to_service.send((agg, Chore::Finish));
        }
    }
}

/// The service thread: prepares the aggregator, then does each chore the core sends it with
/// and gives it back (ringing the core, which may have parked meanwhile), until
/// [`Chore::Finish`] or the core is gone.
fn serve_chores(
    mut agg: Box<Aggregator>,
    core: usize,
    bells: &Doorbells,
    from_core: &Receiver<(Box<Aggregator>, Chore)>,
    to_core: &Sender<Box<Aggregator>>,
) {
    agg.prepare();
    if to_core.send(agg).is_err() {
        return;
    }
    bells.ring(core);
    while let Ok((mut agg, chore)) = from_core.recv() {
        let finish = matches!(chore, Chore::Finish);
        agg.do_chore(chore);
        if finish {
            return agg.serve();
        }
        if to_core.send(agg).is_err() {
            return;
        }
        bells.ring(core);
    }
}
