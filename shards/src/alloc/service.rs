//! The allocator thread: owns the [`Authority`] and serves range requests from cores.
//!
//! Cores must not block, the authority does (fsync), so it lives on its own std thread.
//! Each requester registers a reply channel and a wake callback; after every reply the thread
//! runs the callback so the requester's event loop (e.g. an io_uring ring) notices.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam::channel::{self, Receiver, RecvTimeoutError, Sender};

use super::{Authority, AuthorityError, IdRange, NextIdError, SegmentBuffer};

type Reply = Result<IdRange, AuthorityError>;

/// Requests (and registrations) the allocator thread's queue holds. A core has at most one
/// range request in flight (`SegmentBuffer::loading_started`), so this is far above what any
/// core count sends; a full queue fails the request (the core backs off) instead of blocking.
pub const ALLOC_QUEUE_CAPACITY: usize = 4096;

/// Replies one client's queue holds. One is in flight per request; a reply to a requester that
/// does not take it is dropped (its IDs are never handed out again, only wasted).
pub const ALLOC_REPLIES_PER_CLIENT: usize = 4;
type Confirmed = Arc<Mutex<Vec<(usize, IdRange)>>>;
type Wake = Box<dyn Fn() + Send>;

enum Msg {
    Register {
        requester: usize,
        reply: Sender<Reply>,
        wake: Wake,
    },
    Request {
        requester: usize,
        len: u64,
    },
    Stop,
}

/// Handle to the allocator thread. Dropping it stops the thread.
pub struct AllocatorService {
    tx: Sender<Msg>,
    thread: Option<JoinHandle<Box<dyn Authority>>>,
    confirmed: Confirmed,
    high_water: Arc<AtomicU64>,
}

impl std::fmt::Debug for AllocatorService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AllocatorService")
            .field("high_water", &self.high_water())
            .finish_non_exhaustive()
    }
}

impl AllocatorService {
    /// Starts the thread (named `ricochet-alloc`) owning `authority`. With `record_confirmed`,
    /// every range handed out is also kept in memory for [`AllocatorService::confirmed`]
    /// (tests and audits; unbounded, so leave it off in the server).
    pub fn start(
        authority: Box<dyn Authority>,
        record_confirmed: bool,
    ) -> io::Result<AllocatorService> {
        let (tx, rx) = channel::bounded(ALLOC_QUEUE_CAPACITY);
        let confirmed = Arc::new(Mutex::new(Vec::new()));
        let high_water = Arc::new(AtomicU64::new(authority.high_water()));
        let thread = {
            let confirmed = record_confirmed.then(|| Arc::clone(&confirmed));
            let high_water = Arc::clone(&high_water);
            thread::Builder::new()
                .name("ricochet-alloc".into())
                .spawn(move || serve(authority, rx, confirmed, high_water))?
        };
        Ok(AllocatorService {
            tx,
            thread: Some(thread),
            confirmed,
            high_water,
        })
    }

    /// A client for requester `requester` (e.g. the core id). `wake` runs on the allocator
    /// thread after each reply to this client. Registering the same id again replaces the
    /// earlier registration.
    pub fn client(&self, requester: usize, wake: Box<dyn Fn() + Send>) -> AllocClient {
        let (reply, rx) = channel::bounded(ALLOC_REPLIES_PER_CLIENT);
        // If the thread is gone, requests will fail with `Unavailable`; nothing to do here.
        let _ = self.tx.send(Msg::Register {
            requester,
            reply,
            wake,
        });
        AllocClient {
            requester,
            tx: self.tx.clone(),
            rx,
        }
    }

    /// Every range handed out so far, with its requester, in allocation order (only when
    /// started with `record_confirmed`).
    pub fn confirmed(&self) -> Vec<(usize, IdRange)> {
        self.confirmed.lock().expect("confirmed lock").clone()
    }

    /// The authority's high-water after the latest allocation.
    pub fn high_water(&self) -> u64 {
        self.high_water.load(Ordering::Acquire)
    }

    /// Stops the thread after serving the requests already queued; returns the authority and
    /// the final list of confirmed ranges (see [`AllocatorService::confirmed`]).
    pub fn stop(mut self) -> (Box<dyn Authority>, Vec<(usize, IdRange)>) {
        let _ = self.tx.send(Msg::Stop);
        let t = self.thread.take().expect("thread present until stop");
        let authority = t.join().expect("allocator thread panicked");
        (authority, self.confirmed())
    }
}

impl Drop for AllocatorService {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = self.tx.send(Msg::Stop);
            let _ = t.join();
        }
    }
}

fn serve(
    mut authority: Box<dyn Authority>,
    rx: Receiver<Msg>,
    confirmed: Option<Confirmed>,
    high_water: Arc<AtomicU64>,
) -> Box<dyn Authority> {
    let mut clients: HashMap<usize, (Sender<Reply>, Wake)> = HashMap::new();
    while let Ok(msg) = rx.recv() {
        match msg {
            Msg::Register {
                requester,
                reply,
                wake,
            } => {
                clients.insert(requester, (reply, wake));
            }
            Msg::Request { requester, len } => {
                let result = authority.allocate(len);
                high_water.store(authority.high_water(), Ordering::Release);
                if let (Ok(r), Some(c)) = (&result, &confirmed) {
                    c.lock().expect("confirmed lock").push((requester, *r));
                }
                // Requests are only sent by registered clients (registration is queued first).
                if let Some((reply, wake)) = clients.get(&requester) {
                    // A requester that went away, or does not take its replies, just wastes the
                    // range; the allocator never blocks on a core.
                    if reply.try_send(result).is_ok() {
                        wake();
                    }
                }
            }
            Msg::Stop => break,
        }
    }
    authority
}

/// One requester's end of the allocator: send requests, receive replies.
#[derive(Debug)]
pub struct AllocClient {
    requester: usize,
    tx: Sender<Msg>,
    rx: Receiver<Reply>,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Msg::Register { requester, .. } => write!(f, "Register({requester})"),
            Msg::Request { requester, len } => write!(f, "Request({requester}, {len})"),
            Msg::Stop => write!(f, "Stop"),
        }
    }
}

impl AllocClient {
    /// This client's requester id.
    pub fn requester(&self) -> usize {
        self.requester
    }

    /// Asks for a range of `len` IDs; the reply arrives on this client. Never blocks: fails if
    /// the allocator thread has stopped or its queue is full.
    pub fn request(&self, len: u64) -> Result<(), AuthorityError> {
        let msg = Msg::Request {
            requester: self.requester,
            len,
        };
        self.tx.try_send(msg).map_err(|e| {
            let why = match e {
                channel::TrySendError::Full(_) => "allocator queue is full",
                channel::TrySendError::Disconnected(_) => "allocator thread has stopped",
            };
            AuthorityError::Unavailable(why.into())
        })
    }

    /// A reply, if one has arrived. Never blocks.
    pub fn try_recv(&self) -> Option<Result<IdRange, AuthorityError>> {
        self.rx.try_recv().ok()
    }

    /// Waits up to `timeout` for a reply (blocking: not for core threads).
    pub fn recv_timeout(&self, timeout: Duration) -> Option<Result<IdRange, AuthorityError>> {
        match self.rx.recv_timeout(timeout) {
            Ok(r) => Some(r),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => Some(Err(AuthorityError::Unavailable(
                "allocator thread has stopped".into(),
            ))),
        }
    }
}

/// Takes an ID for a thread that may block (tools, tests): applies replies, prefetches, and
/// when no ID is on hand waits for a range until the buffer's deadline, then returns
/// [`NextIdError::NeedRange`]. Never waits longer than that deadline.
pub fn next_id_blocking(buf: &mut SegmentBuffer, client: &AllocClient) -> Result<u64, NextIdError> {
    let mut deadline = None;
    loop {
        let now = Instant::now();
        while let Some(reply) = client.try_recv() {
            buf.on_reply(now, reply);
        }
        maybe_prefetch(buf, client, now);
        match buf.next_id(now) {
            Ok(id) => {
                maybe_prefetch(buf, client, now);
                return Ok(id);
            }
            Err(NextIdError::NeedRange { deadline: d }) => {
                let d = *deadline.get_or_insert(d);
                if now >= d {
                    return Err(NextIdError::NeedRange { deadline: d });
                }
                if buf.is_loading() {
                    if let Some(reply) = client.recv_timeout(d - now) {
                        buf.on_reply(Instant::now(), reply);
                    }
                } else {
                    // Backing off: sleep until the retry time or the deadline.
                    let until = buf.retry_at().map_or(d, |r| r.min(d));
                    thread::sleep(until.saturating_duration_since(now));
                }
            }
            Err(e) => return Err(e),
        }
    }
}

fn maybe_prefetch(buf: &mut SegmentBuffer, client: &AllocClient, now: Instant) {
    if buf.wants_prefetch(now) {
        buf.loading_started();
        if client.request(buf.request_len()).is_err() {
            buf.on_load_failed(now);
        }
    }
}
