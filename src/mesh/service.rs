//! The one pattern every slow job uses to talk to the cores: work runs on a named service
//! thread (never on a core), results reach each core through a bounded channel the core polls
//! without a syscall, and the core's doorbell is rung after each hand-off so a parked core
//! wakes at once (`mesh::Doorbells`). The allocator thread (`shards::alloc::AllocatorService`,
//! through [`waker`]), the API key watcher (`keywatch`) and compaction folds
//! (`owner::compaction`, through [`run_once`]) use it; fleet and analytics services will too.

use crate::mesh::Doorbells;
use crossbeam::channel::{bounded, Receiver, Sender, TrySendError};
use std::io;
use std::sync::Arc;

/// A core's end of a service: a bounded queue it polls with `try_recv` (no syscall).
pub type Inbox<T> = Receiver<T>;

/// A service's end: one bounded queue per core, and the cores' doorbells.
pub struct Outlets<T> {
    txs: Vec<Sender<T>>,
    bells: Arc<Doorbells>,
}

impl<T> Outlets<T> {
    /// Queues of `capacity` items for each of `cores` cores.
    pub fn new(
        cores: usize,
        capacity: usize,
        bells: Arc<Doorbells>,
    ) -> (Outlets<T>, Vec<Inbox<T>>) {
        assert!(capacity > 0, "a bounded queue holds at least one item");
        let (txs, rxs) = (0..cores).map(|_| bounded(capacity)).unzip();
        (Outlets { txs, bells }, rxs)
    }

    /// Hands `item` to `core` and wakes it. A full queue (the core has not taken what it was
    /// given) returns the item: the service decides whether to drop, coalesce or retry it.
    pub fn offer(&self, core: usize, item: T) -> Result<(), T> {
        match self.txs[core].try_send(item) {
            Ok(()) => {
                self.bells.ring(core);
                Ok(())
            }
            Err(TrySendError::Full(item) | TrySendError::Disconnected(item)) => Err(item),
        }
    }

    /// Number of cores served.
    pub fn cores(&self) -> usize {
        self.txs.len()
    }
}

/// Runs `job` once on a thread named `name` and hands its result to `core` (a queue of one,
/// then the doorbell): compaction's fold.
pub fn run_once<T: Send + 'static>(
    name: String,
    bells: Arc<Doorbells>,
    core: usize,
    job: impl FnOnce() -> T + Send + 'static,
) -> io::Result<Inbox<T>> {
    let (tx, rx) = bounded(1);
    std::thread::Builder::new().name(name).spawn(move || {
        // The core may have stopped caring (shutting down): then the result is dropped.
        let _ = tx.try_send(job());
        bells.ring(core);
    })?;
    Ok(rx)
}

/// A wake-up for a service that keeps its own queues (the allocator in `shards`, which knows
/// nothing of doorbells): rings `core`'s doorbell.
pub fn waker(bells: &Arc<Doorbells>, core: usize) -> Box<dyn Fn() + Send> {
    let bells = bells.clone();
    Box::new(move || bells.ring(core))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn offers_are_bounded_and_ring_the_doorbell_of_a_parked_core() {
        let bells = Arc::new(Doorbells::new(2).unwrap());
        bells.0[1].parked.store(true, Ordering::SeqCst);
        let (out, rx) = Outlets::new(2, 1, bells.clone());
        assert!(out.offer(1, 7).is_ok());
        assert_eq!(out.offer(1, 8), Err(8), "a full queue gives the item back");
        let mut n = 0u64;
        // SAFETY: reading 8 bytes into a u64 from the eventfd this test created.
        let r = unsafe { libc::read(bells.0[1].fd, (&mut n as *mut u64).cast(), 8) };
        assert_eq!(r, 8, "the parked core's doorbell was rung");
        assert_eq!(rx[1].try_recv(), Ok(7));
        assert!(rx[0].try_recv().is_err());
    }

    #[test]
    fn run_once_delivers_the_result() {
        let bells = Arc::new(Doorbells::new(1).unwrap());
        let rx = run_once("t".into(), bells, 0, || 41 + 1).unwrap();
        assert_eq!(rx.recv_timeout(std::time::Duration::from_secs(5)), Ok(42));
    }
}
