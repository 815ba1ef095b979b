//! One core's event loop: accept, read, parse, route to the owner, answer, write; plus the
//! mesh inbox, timeouts, parking and draining. Runs as a single glommio task on a pinned
//! executor and owns everything it touches, so nothing here takes a lock.
//!
//! A loop turn: reap socket completions (parsing and answering whatever arrived), serve the
//! mesh inbox (lookups from other cores, answers to our forwards), queue one send per
//! connection whose batch is complete, submit everything with one `io_uring_enter`, then let
//! glommio run its tasks (the mesh receivers) before the next turn.

use crate::cache::{InlineKey, Lru};
use crate::conns::{
    ApiOp, BufPool, Conn, PendingKind, Recv, INBUF_PAUSE_BYTES, INBUF_RESUME_BYTES, MAX_INBUF_BYTES,
};
use crate::http::date::DateCache;
use crate::http::encode::{self, Conn as Persist};
use crate::http::limits::{MAX_CONNECTIONS_PER_CORE, MAX_PIPELINED_REQUESTS};
use crate::http::parse::{parse_request, Method, Request};
use crate::http::status::Status;
use crate::mesh::{Answer, Mesh, MeshMsg, ReplyTo, Target, WriteOutcome};
use crate::ring::bufring::RECV_BUF_GROUP;
use crate::ring::{Op, Ring, Token};
use crate::router::Router;
use crate::store::Store;
use crate::writes::Writes;
use io_uring::{cqueue, opcode, types};
use shards::table::{SlotHint, Table};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// How often connection deadlines are checked. Timeouts fire at most this late.
pub const TIMEOUT_SWEEP_INTERVAL_MS: u64 = 100;

/// After a final response, how long a half-closed connection keeps reading (and discarding)
/// before it is closed hard. Closing with unread input makes the kernel send RST, which can
/// destroy the response still in flight (an error answer to an oversized request, say);
/// lingering first lets the client read it (nginx's `lingering_close`).
pub const LINGER_MS: u64 = 2_000;

/// After a failed compaction, wait this long before trying again.
pub const COMPACTION_RETRY_MS: u64 = 10_000;

/// Longest a draining core waits for in-flight requests before it exits anyway.
pub const DRAIN_TIMEOUT_MS: u64 = 10_000;

/// Longest a parked core sleeps without any event. Every real event (socket activity, a mesh
/// message, SIGTERM) wakes it at once; this only bounds how late glommio's own housekeeping runs.
pub const PARK_MAX_MS: u64 = 100;

/// Default spin before parking in adaptive mode, in microseconds.
pub const DEFAULT_SPIN_BEFORE_PARK_US: u64 = 200;

/// How an idle core waits for work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parking {
    /// Never sleep: lowest latency, burns the core at 100% even when idle.
    Busy,
    /// Poll for `spin_us` after the last event, then sleep in the ring until a socket event, a
    /// mesh message (doorbell) or [`PARK_MAX_MS`].
    Adaptive { spin_us: u64 },
}

impl Default for Parking {
    fn default() -> Self {
        Parking::Adaptive {
            spin_us: DEFAULT_SPIN_BEFORE_PARK_US,
        }
    }
}

/// State shared by all cores (read-mostly atomics; no locks).
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
}

impl Shared {
    pub fn ready(&self) -> bool {
        self.ready_cores.load(Ordering::Acquire) == self.cores
            && !self.draining.load(Ordering::Relaxed)
    }
}

/// Everything a core needs to start.
pub struct CoreSetup {
    pub router: Router,
    pub parking: Parking,
    pub listener_fd: RawFd,
    pub store: Store,
    pub lru_capacity: usize,
    pub shared: Arc<Shared>,
    pub timeouts: Timeouts,
    pub writes: Writes,
    pub api: ApiState,
    pub compaction: CompactionSetup,
}

/// When and where this core compacts (see `compaction`).
pub struct CompactionSetup {
    pub data_dir: std::path::PathBuf,
    /// Memtable entries that trigger a compaction.
    pub entries: usize,
    /// A log from an interrupted compaction was replayed: compact as soon as possible.
    pub folding: bool,
}

/// Everything the API needs on one core.
pub struct ApiState {
    pub keys: Arc<crate::api::keys::ApiKeyStore>,
    /// New key stores from `keywatch`, taken at each sweep.
    pub key_updates: crossbeam::channel::Receiver<Arc<crate::api::keys::ApiKeyStore>>,
    pub ratelimit: crate::api::ratelimit::RateLimiter,
    pub segments: shards::alloc::SegmentBuffer,
    pub alloc: shards::alloc::AllocClient,
    pub keygen: Arc<shards::keygen::KeyGen>,
    pub public_url: String,
    pub idem: crate::api::idempotency::IdemTable,
    pub id_waiters: VecDeque<crate::api_flow::IdWaiter>,
    pub idem_waiters: HashMap<u64, ReplyTo>,
    pub flights: HashMap<u32, crate::api_flow::Flight>,
    pub next_flight: u32,
    pub next_token: u64,
    /// PATCH/DELETE answers waiting for every other core's LRU invalidation ack.
    pub invalidations: HashMap<u64, (usize, ReplyTo, WriteOutcome)>,
}

/// Connection deadlines (defaults: `http::limits::HEADER_TIMEOUT_MS` and
/// `IDLE_KEEPALIVE_TIMEOUT_MS`; flags override them, e.g. for tests).
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// From a connection's first byte (or its accept) to a complete request head.
    pub header_ms: u64,
    /// Between requests on a keep-alive connection.
    pub idle_ms: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            header_ms: crate::http::limits::HEADER_TIMEOUT_MS,
            idle_ms: crate::http::limits::IDLE_KEEPALIVE_TIMEOUT_MS,
        }
    }
}

/// One core's loop state.
pub struct Core {
    ring: Ring,
    st: State,
}

/// Everything but the ring, so request handling can borrow ring buffers while mutating state.
pub(crate) struct State {
    pub(crate) me: usize,
    pub(crate) router: Router,
    pub(crate) store: Store,
    pub(crate) writes: Writes,
    pub(crate) api: ApiState,
    compaction: CompactionSetup,
    /// The running compaction's result, when it finishes.
    compacting: Option<crossbeam::channel::Receiver<crate::compaction::Compacted>>,
    /// No compaction is started before this (after a failed one).
    next_compaction_ms: u64,
    lru: Lru<Answer>,
    pub(crate) mesh: Mesh,
    /// Messages this core sends itself (an API request whose owner is this core).
    pub(crate) self_inbox: VecDeque<MeshMsg>,
    pub(crate) conns: Vec<Conn>,
    free_slots: Vec<u32>,
    live_conns: usize,
    pool: BufPool,
    /// Connections whose batch may be ready to send.
    dirty: Vec<u32>,
    /// Connections whose recv ran out of buffers.
    starved: Vec<u32>,
    /// Buffers given back this turn (published once per turn).
    pub(crate) date: DateCache,
    pub(crate) tally: crate::metrics::Tally,
    /// Monotonic time since the core started, refreshed once per loop turn.
    now_us: u64,
    now_ms: u64,
    /// When to read the wall clock again (`tick`).
    next_wall_ms: u64,
    pub(crate) now_s: u64,
    started: Instant,
    listener_fd: RawFd,
    accepting: bool,
    draining_since_ms: Option<u64>,
    /// This core counted itself in `Shared::drained_cores`.
    drained: bool,
    /// Tables replaced by a compaction, waiting for every other core's `PurgeAck`.
    retiring: HashMap<u64, (usize, Vec<&'static Table>)>,
    /// Idempotency records re-logged at the last rotation must be durable before the folded
    /// log (their previous home) is deleted.
    relog_seq: u64,
    shared: Arc<Shared>,
    timeouts: Timeouts,
    scratch: Vec<u8>,
    doorbell_buf: Box<u64>,
    /// SQEs to push after handling (handlers cannot reach the ring).
    sqes: Vec<io_uring::squeue::Entry>,
    /// Buffer ids to recycle.
    recycle: Vec<u16>,
    /// Finds the end of a request head (`\r\n\r\n`) for `prefetch_batch`; built once, since
    /// `memmem::find` builds a searcher on every call (~5% of a pipelined batch's CPU).
    head_end: memchr::memmem::Finder<'static>,
}

impl Core {
    pub fn new(setup: CoreSetup, mesh: Mesh) -> io::Result<Core> {
        let ring = Ring::new()?;
        let started = Instant::now();
        let mut st = State {
            me: mesh.me(),
            router: setup.router,
            store: setup.store,
            writes: setup.writes,
            api: setup.api,
            compaction: setup.compaction,
            compacting: None,
            next_compaction_ms: 0,
            self_inbox: VecDeque::new(),
            lru: Lru::with_capacity(setup.lru_capacity),
            mesh,
            conns: Vec::new(),
            free_slots: Vec::new(),
            live_conns: 0,
            pool: BufPool::new(),
            dirty: Vec::with_capacity(1024),
            starved: Vec::new(),
            date: DateCache::new(SystemTime::now()),
            tally: Default::default(),
            now_us: 0,
            now_ms: 0,
            next_wall_ms: 0,
            now_s: 0,
            started,
            listener_fd: setup.listener_fd,
            accepting: true,
            draining_since_ms: None,
            drained: false,
            retiring: HashMap::new(),
            relog_seq: 0,
            shared: setup.shared,
            timeouts: setup.timeouts,
            scratch: Vec::with_capacity(4096),
            doorbell_buf: Box::new(0),
            sqes: Vec::with_capacity(1024),
            recycle: Vec::with_capacity(1024),
            head_end: memchr::memmem::Finder::new(b"\r\n\r\n"),
        };
        st.tick();
        let mut core = Core { ring, st };
        core.arm_accept()?;
        core.arm_doorbell()?;
        Ok(core)
    }

    fn arm_accept(&mut self) -> io::Result<()> {
        let sqe = opcode::AcceptMulti::new(types::Fd(self.st.listener_fd))
            .build()
            .user_data(Token::new(Op::Accept, 0, 0).encode());
        self.ring.push(sqe)
    }

    fn arm_doorbell(&mut self) -> io::Result<()> {
        let fd = self.st.mesh.my_doorbell().fd;
        let buf: *mut u64 = &mut *self.st.doorbell_buf;
        let sqe = opcode::Read::new(types::Fd(fd), buf.cast(), 8)
            .build()
            .user_data(Token::new(Op::Doorbell, 0, 0).encode());
        self.ring.push(sqe)
    }

    /// Runs until drained. Returns an error only if the ring itself fails.
    pub async fn run(mut self, parking: Parking) -> io::Result<()> {
        let mut cqes: Vec<cqueue::Entry> =
            Vec::with_capacity(crate::ring::RING_CQ_ENTRIES as usize);
        let mut next_sweep_ms = 0;
        // Monotonic microseconds (from `tick`) at which the loop last found no work.
        let mut idle_since_us: Option<u64> = None;
        self.st.shared.ready_cores.fetch_add(1, Ordering::AcqRel);
        loop {
            self.st.tick();
            let mut work = false;

            self.ring.drain_completions(&mut cqes);
            work |= !cqes.is_empty();
            for cqe in &cqes {
                self.on_cqe(cqe);
            }
            loop {
                let msg = match self.st.self_inbox.pop_front() {
                    Some(m) => m,
                    None => match self.st.mesh.pop() {
                        Some(m) => m,
                        None => break,
                    },
                };
                work = true;
                self.st.on_mesh(msg);
            }
            if self.st.api.segments.is_loading() || !self.st.api.id_waiters.is_empty() {
                self.st.poll_allocator();
            }
            self.st.mesh.flush_outbox();
            self.submit_log_batch()?;
            self.st.flush();
            self.finish_turn()?;

            if self.st.now_ms >= next_sweep_ms {
                next_sweep_ms = self.st.now_ms + TIMEOUT_SWEEP_INTERVAL_MS;
                self.st.sweep();
                if let Ok(keys) = self.st.api.key_updates.try_recv() {
                    self.st.api.keys = keys;
                }
                self.st.poll_allocator();
                self.st.poll_compaction();
                if let Err(e) = self.st.maybe_compact() {
                    eprintln!("core {}: cannot start compaction: {e}", self.st.me);
                    self.st.next_compaction_ms = self.st.now_ms + COMPACTION_RETRY_MS;
                }
                self.finish_turn()?;
            }
            if self.st.shared.draining.load(Ordering::Relaxed) {
                if self.st.draining_since_ms.is_none() {
                    self.start_drain()?;
                }
                let since = self.st.draining_since_ms.unwrap_or(self.st.now_ms);
                if self.st.live_conns == 0 && !self.st.drained {
                    // Done here, but keep answering other cores' forwards and writes until
                    // every core is done: their in-flight requests may need this core.
                    self.st.drained = true;
                    self.st.shared.drained_cores.fetch_add(1, Ordering::AcqRel);
                }
                let all_drained =
                    self.st.shared.drained_cores.load(Ordering::Acquire) == self.st.shared.cores;
                if all_drained || self.st.now_ms - since > DRAIN_TIMEOUT_MS {
                    return Ok(());
                }
            }

            if work {
                self.st.shared.counters[self.st.me].publish(&self.st.tally, self.st.live_conns);
            }
            self.ring.uring.submit()?;

            if work {
                idle_since_us = None;
            } else if let Parking::Adaptive { spin_us } = parking {
                let since = *idle_since_us.get_or_insert(self.st.now_us);
                if self.st.now_us - since >= spin_us {
                    self.park().await?;
                    idle_since_us = None;
                }
            }
            // glommio's own tasks (none on the redirect path) get the core at its preempt timer.
            glommio::yield_if_needed().await;
        }
    }

    /// Sleeps in the ring until an event, closing the race with mesh senders (see `mesh`).
    async fn park(&mut self) -> io::Result<()> {
        let bell = self.st.mesh.my_doorbell();
        bell.parked.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        // Anything sent before `parked` became visible is in a queue now: look once more.
        let must_stay_awake = !self.st.mesh.inbox_is_empty()
            || !self.st.self_inbox.is_empty()
            || self.st.shared.draining.load(Ordering::Relaxed)
            || !self.ring.uring.completion().is_empty();
        if !must_stay_awake {
            let ts = types::Timespec::new().nsec((PARK_MAX_MS * 1_000_000) as u32);
            let args = types::SubmitArgs::new().timespec(&ts);
            match self.ring.uring.submitter().submit_with_args(1, &args) {
                Ok(_) => {}
                Err(e)
                    if e.raw_os_error() == Some(libc::ETIME)
                        || e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => {
                    self.st
                        .mesh
                        .my_doorbell()
                        .parked
                        .store(false, Ordering::SeqCst);
                    return Err(e);
                }
            }
        }
        self.st
            .mesh
            .my_doorbell()
            .parked
            .store(false, Ordering::SeqCst);
        Ok(())
    }

    fn start_drain(&mut self) -> io::Result<()> {
        self.st.draining_since_ms = Some(self.st.now_ms);
        self.st.accepting = false;
        let cancel = opcode::AsyncCancel::new(Token::new(Op::Accept, 0, 0).encode())
            .build()
            .user_data(Token::new(Op::Cancel, 0, 0).encode());
        self.ring.push(cancel)?;
        for slot in 0..self.st.conns.len() as u32 {
            let c = &mut self.st.conns[slot as usize];
            if !c.live || c.closing {
                continue;
            }
            if c.busy() || !c.out.is_empty() {
                c.close_after_send = true;
            } else {
                self.st.begin_close(slot, false);
            }
        }
        self.finish_turn()
    }

    /// Starts writing and syncing the log's pending records, if no batch is in flight.
    fn submit_log_batch(&mut self) -> io::Result<()> {
        let w = &mut self.st.writes;
        if w.batch.is_some() || w.log.is_poisoned() {
            return Ok(());
        }
        let Ok(Some(batch)) = w.log.take_batch() else {
            return Ok(());
        };
        let write = opcode::Write::new(
            types::Fd(w.log_fd),
            batch.bytes.as_ptr(),
            batch.bytes.len() as u32,
        )
        .offset(batch.offset)
        .build()
        .flags(io_uring::squeue::Flags::IO_LINK)
        .user_data(Token::new(Op::LogWrite, 0, 0).encode());
        let sync = opcode::Fsync::new(types::Fd(w.log_fd))
            .flags(types::FsyncFlags::DATASYNC)
            .build()
            .user_data(Token::new(Op::LogSync, 0, 0).encode());
        w.batch = Some(batch);
        w.batch_error = None;
        self.ring.push(write)?;
        self.ring.push(sync)
    }

    fn on_log_write(&mut self, res: i32) {
        let w = &mut self.st.writes;
        let len = w.batch.as_ref().map_or(0, |b| b.bytes.len());
        if res < 0 {
            w.batch_error = Some(io::Error::from_raw_os_error(-res));
        } else if (res as usize) < len {
            w.batch_error = Some(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short log write: {res} of {len} bytes"),
            ));
        }
    }

    fn on_log_sync(&mut self, res: i32) {
        let w = &mut self.st.writes;
        let Some(batch) = w.batch.take() else {
            return;
        };
        let result = if let Some(e) = w.batch_error.take() {
            Err(e)
        } else if res < 0 {
            Err(io::Error::from_raw_os_error(-res))
        } else if w.faults.fail_fsync_after.is_some_and(|n| w.fsyncs_ok >= n) {
            Err(io::Error::other(
                "injected fsync failure (--fault-fail-fsync-after)",
            ))
        } else {
            w.fsyncs_ok += 1;
            Ok(())
        };
        match w.log.complete(batch, result) {
            Ok(durable) => self.st.on_durable(durable),
            Err(e) => {
                eprintln!("core {}: {e}; creates, updates and deletes on this core now fail until restart; redirects continue", self.st.me);
                self.st.on_log_failed();
            }
        }
    }

    /// Pushes the SQEs handlers queued and gives recycled buffers back to the kernel.
    fn finish_turn(&mut self) -> io::Result<()> {
        if !self.st.recycle.is_empty() {
            for bid in self.st.recycle.drain(..) {
                self.ring.bufs.push(bid);
            }
            self.ring.bufs.publish();
            // Buffers are back: re-arm recvs that starved.
            while let Some(slot) = self.st.starved.pop() {
                self.st.arm_recv(slot);
            }
        }
        for sqe in self.st.sqes.drain(..) {
            self.ring.push(sqe)?;
        }
        Ok(())
    }

    fn on_cqe(&mut self, cqe: &cqueue::Entry) {
        let Some(tok) = Token::decode(cqe.user_data()) else {
            return;
        };
        let res = cqe.result();
        let flags = cqe.flags();
        match tok.op {
            Op::Accept => self.on_accept(res, flags),
            Op::Recv => self.on_recv(tok, res, flags),
            Op::Send => self.st.on_send(tok, res),
            Op::Doorbell => {
                if let Err(e) = self.arm_doorbell() {
                    eprintln!("core {}: cannot re-arm doorbell: {e}", self.st.me);
                }
            }
            Op::LogWrite => self.on_log_write(res),
            Op::LogSync => self.on_log_sync(res),
            Op::Shutdown => self.st.on_shutdown(tok),
            Op::Close | Op::Cancel | Op::Timeout => {}
        }
    }

    fn on_accept(&mut self, res: i32, flags: u32) {
        if res >= 0 {
            let fd = res;
            if !self.st.accepting || self.st.live_conns >= MAX_CONNECTIONS_PER_CORE {
                self.st.sqes.push(close_sqe(fd));
            } else {
                let slot = self.st.alloc_slot(fd);
                self.st.arm_recv(slot);
            }
        } else if res != -libc::ECANCELED {
            // EMFILE, ENFILE, ENOBUFS...: keep serving the connections we have.
            eprintln!(
                "core {}: accept failed: {}",
                self.st.me,
                io::Error::from_raw_os_error(-res)
            );
        }
        if !cqueue::more(flags) && self.st.accepting {
            if let Err(e) = self.arm_accept() {
                eprintln!("core {}: cannot re-arm accept: {e}", self.st.me);
            }
        }
    }

    fn on_recv(&mut self, tok: Token, res: i32, flags: u32) {
        let bid = cqueue::buffer_select(flags);
        let st = &mut self.st;
        let slot = tok.slot;
        let stale = st
            .conns
            .get(slot as usize)
            .is_none_or(|c| !c.live || c.gen != tok.gen);
        if stale {
            if let Some(bid) = bid {
                st.recycle.push(bid);
            }
            return;
        }
        let more = cqueue::more(flags);
        if !more {
            // The multishot recv ended (or this was its cancel's completion).
            let c = &mut st.conns[slot as usize];
            c.recv = match c.recv {
                Recv::Pausing => Recv::Paused,
                Recv::Armed => Recv::Idle,
                other => other,
            };
        }
        if res > 0 {
            let bid = bid.expect("a successful buffer-select recv names its buffer");
            let data = self.ring.bufs.slice(bid, res as usize);
            st.on_data(slot, data);
            st.recycle.push(bid);
        } else if res == -libc::ENOBUFS {
            let c = &mut st.conns[slot as usize];
            if c.recv == Recv::Idle {
                c.recv = Recv::Starved;
                st.starved.push(slot);
            }
        } else if res == -libc::ECANCELED {
            // Our own backpressure cancel: nothing to do but maybe resume (below).
        } else {
            // EOF (0) or an error: no more input. Answer everything already received, then
            // close (`flush` closes once nothing is left to answer).
            if let Some(bid) = bid {
                st.recycle.push(bid);
            }
            let c = &mut st.conns[slot as usize];
            c.recv = Recv::Done;
            if c.closing {
                st.maybe_free(slot);
                return;
            }
            if !c.busy() && !c.inbuf.is_empty() {
                st.process_inbuf(slot);
            }
            st.mark_dirty(slot);
            return;
        }
        let c = &st.conns[slot as usize];
        if c.closing {
            st.maybe_free(slot);
        } else if c.recv == Recv::Idle
            || (c.recv == Recv::Paused && c.inbuf.len() < INBUF_RESUME_BYTES)
        {
            st.arm_recv(slot);
        }
    }
}

/// Unmaps tables no answer can point into any more (see `State::retire_tables`).
fn free_tables(old: Vec<&'static Table>) {
    for t in old {
        // SAFETY: every table the store holds was created by `Box::leak(Box::new(..))`
        // (`server::open_tables`, `State::poll_compaction`) and is freed only here, once: it
        // was removed from the store, and every core acknowledged clearing its LRU after all
        // answers sent before the swap (FIFO queues), so no reference into it remains.
        drop(unsafe { Box::from_raw(t as *const Table as *mut Table) });
    }
}

fn close_sqe(fd: RawFd) -> io_uring::squeue::Entry {
    opcode::Close::new(types::Fd(fd))
        .build()
        .user_data(Token::new(Op::Close, 0, 0).encode())
}

impl State {
    /// Refreshes the clocks. `Instant` and `SystemTime` are vDSO reads, not syscalls.
    #[inline]
    /// One monotonic clock read per turn; the wall clock (for `Date` and expiry) is read again
    /// only when a new millisecond-second boundary passes, so NTP steps are picked up within 1 s.
    fn tick(&mut self) {
        let now_us = self.started.elapsed().as_micros() as u64;
        self.now_us = now_us;
        self.now_ms = now_us / 1000;
        if self.now_ms >= self.next_wall_ms {
            let now = SystemTime::now();
            self.now_s = now
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            self.date.refresh(now);
            // Re-read at the next wall-clock second (approximately; at most 1 s late).
            let sub_ms = now
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| u64::from(d.subsec_millis()))
                .unwrap_or(0);
            self.next_wall_ms = self.now_ms + (1000 - sub_ms).max(1);
        }
    }

    fn alloc_slot(&mut self, fd: RawFd) -> u32 {
        let slot = match self.free_slots.pop() {
            Some(s) => s,
            None => {
                self.conns.push(Conn::new());
                (self.conns.len() - 1) as u32
            }
        };
        let c = &mut self.conns[slot as usize];
        debug_assert!(!c.live);
        c.fd = fd;
        c.gen = c.gen.wrapping_add(1) & crate::ring::GEN_MASK;
        c.live = true;
        c.recv = Recv::Idle;
        c.send_inflight = false;
        c.closing = false;
        c.close_after_send = false;
        c.lingering = false;
        c.shutdown_pending = false;
        c.sent = 0;
        c.answers.clear();
        c.dirty = false;
        // A new connection must send a request within the header timeout.
        c.deadline_ms = self.now_ms + self.timeouts.header_ms;
        self.live_conns += 1;
        slot
    }

    /// Arms a multishot recv, unless one is armed or input must not be read now.
    fn arm_recv(&mut self, slot: u32) {
        let c = &mut self.conns[slot as usize];
        let may = match c.recv {
            Recv::Idle | Recv::Starved => true,
            Recv::Paused => c.inbuf.len() < INBUF_RESUME_BYTES,
            Recv::Armed | Recv::Pausing | Recv::Done => false,
        };
        if !c.live || c.closing || !may {
            return;
        }
        c.recv = Recv::Armed;
        let sqe = opcode::RecvMulti::new(types::Fd(c.fd), RECV_BUF_GROUP)
            .build()
            .user_data(Token::new(Op::Recv, slot, c.gen).encode());
        self.sqes.push(sqe);
    }

    /// Bytes arrived on `slot`.
    fn on_data(&mut self, slot: u32, data: &[u8]) {
        let c = &mut self.conns[slot as usize];
        if c.closing || c.close_after_send {
            return; // We are done reading from this one.
        }
        if c.busy() || !c.inbuf.is_empty() {
            if c.inbuf.len() + data.len() > MAX_INBUF_BYTES {
                // Cannot happen while the pause works (see `MAX_INBUF_BYTES`).
                eprintln!(
                    "core {}: connection input passed {MAX_INBUF_BYTES} bytes despite the pause; closing it",
                    self.me
                );
                self.begin_close(slot, false);
                return;
            }
            if c.inbuf.capacity() == 0 {
                c.inbuf = self.pool.get();
                c.deadline_ms = self.now_ms + self.timeouts.header_ms;
            }
            c.inbuf.extend_from_slice(data);
            if !c.busy() {
                self.process_inbuf(slot);
            }
            self.maybe_pause(slot);
            return;
        }
        let used = self.process(slot, data);
        let rest = &data[used..];
        let c = &mut self.conns[slot as usize];
        if !rest.is_empty() && !c.close_after_send {
            c.inbuf = self.pool.get();
            c.inbuf.extend_from_slice(rest);
            if !c.busy() && c.out.is_empty() {
                // An incomplete request: the header timeout runs from its first byte.
                c.deadline_ms = self.now_ms + self.timeouts.header_ms;
            }
        }
        self.mark_dirty(slot);
    }

    /// Backpressure: stops reading from a connection whose unparsed input passed
    /// [`INBUF_PAUSE_BYTES`] (the kernel's receive window then slows the client down).
    fn maybe_pause(&mut self, slot: u32) {
        let c = &mut self.conns[slot as usize];
        if c.inbuf.len() < INBUF_PAUSE_BYTES {
            return;
        }
        match c.recv {
            Recv::Armed => {
                c.recv = Recv::Pausing;
                let target = Token::new(Op::Recv, slot, c.gen).encode();
                let sqe = opcode::AsyncCancel::new(target)
                    .build()
                    .user_data(Token::new(Op::Cancel, 0, 0).encode());
                self.sqes.push(sqe);
            }
            Recv::Idle => c.recv = Recv::Paused,
            Recv::Starved => {
                c.recv = Recv::Paused;
                if let Some(i) = self.starved.iter().position(|&s| s == slot) {
                    self.starved.swap_remove(i);
                }
            }
            Recv::Pausing | Recv::Paused | Recv::Done => {}
        }
    }

    /// Parses what `inbuf` holds (after a batch was sent, or when more bytes arrived), and
    /// resumes reading if backpressure had paused it and the input is small again.
    fn process_inbuf(&mut self, slot: u32) {
        let mut inbuf = std::mem::take(&mut self.conns[slot as usize].inbuf);
        let used = self.process(slot, &inbuf);
        inbuf.drain(..used);
        if inbuf.is_empty() {
            self.pool.put(&mut inbuf);
        }
        self.conns[slot as usize].inbuf = inbuf;
        if self.conns[slot as usize].recv == Recv::Paused {
            self.arm_recv(slot);
        }
        self.mark_dirty(slot);
    }

    /// For a pipelined batch: finds the keys of the local GET/HEAD requests at the start of
    /// `data` (a cheap scan, not a parse: a wrong guess only wastes a hint) and prefetches their
    /// table slots, then the records the slots name, so the batch's cache misses overlap
    /// instead of being paid one lookup at a time. A single request skips all of this.
    fn prefetch_batch(&self, data: &[u8]) {
        let Some(first_end) = self.head_end.find(data) else {
            return;
        };
        if first_end + 4 >= data.len() {
            return; // One request: nothing to overlap.
        }
        let mut found = [(0u32, SlotHint::default()); MAX_PIPELINED_REQUESTS];
        let mut n = 0;
        let mut pos = 0;
        while n < found.len() && pos < data.len() {
            let rest = &data[pos..];
            let Some(end) = self.head_end.find(rest) else {
                break;
            };
            let line = &rest[..end];
            let start = if line.starts_with(b"GET /") {
                5
            } else if line.starts_with(b"HEAD /") {
                6
            } else {
                0
            };
            if start > 0 {
                let path = &line[start..];
                let key_len = memchr::memchr3(b' ', b'?', b'\r', path).unwrap_or(path.len());
                let key = &path[..key_len];
                if (1..=shards::link::MAX_KEY_BYTES).contains(&key.len()) {
                    let owner = self.router.owner(key);
                    if owner.core == self.me {
                        if let Some(s) = self.store.prefetch_slot(owner.shard, key) {
                            found[n] = (owner.shard, s);
                            n += 1;
                        }
                    }
                }
            }
            pos += end + 4;
        }
        for &(shard, s) in &found[..n] {
            self.store.prefetch_record(shard, s);
        }
    }

    /// Answers the complete requests at the start of `data`; returns the bytes consumed.
    fn process(&mut self, slot: u32, data: &[u8]) -> usize {
        self.prefetch_batch(data);
        let mut pos = 0;
        let mut answered = 0;
        let draining = self.draining_since_ms.is_some();
        while answered < MAX_PIPELINED_REQUESTS && pos < data.len() {
            match parse_request(&data[pos..]) {
                Ok(None) => break,
                Ok(Some(req)) => {
                    let total = req.head_len + req.content_length;
                    if data.len() - pos < total {
                        break; // The body is still on its way.
                    }
                    let persist = if draining {
                        Persist::Close
                    } else {
                        Persist::for_request(&req)
                    };
                    let body = &data[pos + req.head_len..pos + total];
                    let deferred_before = self.conns[slot as usize].answers.len();
                    self.handle(slot, &req, persist, body);
                    pos += total;
                    answered += 1;
                    if !persist.keep_alive() {
                        self.conns[slot as usize].close_after_send = true;
                        break;
                    }
                    // RFC 9112 section 9.3.2: only a run of safe requests may be processed in
                    // parallel. Requests after an unsafe one that is still being carried out
                    // wait in `inbuf` until its answer has been sent, so they see its effect.
                    if !req.method.is_safe()
                        && self.conns[slot as usize].answers.len() > deferred_before
                    {
                        break;
                    }
                }
                Err(e) => {
                    let c = &mut self.conns[slot as usize];
                    if c.out.capacity() == 0 {
                        c.out = self.pool.get();
                    }
                    if e == crate::http::parse::ParseError::PayloadTooLarge {
                        // Only bodies are large, and only the API takes bodies: answer in its
                        // error format.
                        let p = crate::api::problem::Problem::payload_too_large(
                            crate::http::limits::MAX_BODY_BYTES,
                        );
                        crate::api_flow::encode_problem(
                            &mut c.out,
                            &p,
                            &[],
                            data[pos..].starts_with(b"HEAD "),
                            Persist::Close,
                            &self.date,
                        );
                    } else {
                        // The method is known when the request line got that far; a HEAD
                        // request's answer has no body whatever went wrong after it.
                        let head = data[pos..].starts_with(b"HEAD ");
                        encode::encode_error(&mut c.out, e, head, &self.date);
                    }
                    c.close_after_send = true;
                    pos = data.len();
                    break;
                }
            }
        }
        if answered > 0 {
            // Something was answered: the idle clock restarts once the batch is sent.
            self.conns[slot as usize].deadline_ms = 0;
        }
        pos
    }

    /// Routes one request: health endpoints, then keys (local table, LRU, or forward).
    fn handle(&mut self, slot: u32, req: &Request<'_>, persist: Persist, body: &[u8]) {
        let c = &mut self.conns[slot as usize];
        if c.out.capacity() == 0 {
            c.out = self.pool.get();
        }
        let head = req.method == Method::Head;
        let get_or_head = matches!(req.method, Method::Get | Method::Head);
        let path = req.path;
        self.tally.requests += 1;
        if path == b"/metrics" && get_or_head {
            // Cold path: formatting allocates; the allocation counter shows it honestly.
            let mut text = String::with_capacity(4096);
            self.shared.counters[self.me].publish(&self.tally, self.live_conns);
            crate::metrics::render(&self.shared.counters, &mut text);
            let c = &mut self.conns[slot as usize];
            encode::encode_response(
                &mut c.out,
                Status::Ok,
                &[],
                Some("text/plain; version=0.0.4"),
                text.as_bytes(),
                head,
                persist,
                &self.date,
            );
            return;
        }
        if path == b"/healthz" || path == b"/readyz" {
            if !get_or_head {
                encode::encode_method_not_allowed(
                    &mut c.out,
                    "GET, HEAD",
                    head,
                    persist,
                    &self.date,
                );
            } else if path == b"/healthz" || self.shared.ready() {
                encode::encode_response(
                    &mut c.out,
                    Status::Ok,
                    &[],
                    Some("text/plain"),
                    b"ok\n",
                    head,
                    persist,
                    &self.date,
                );
            } else {
                encode::encode_response(
                    &mut c.out,
                    Status::ServiceUnavailable,
                    &[],
                    Some("text/plain"),
                    b"not ready\n",
                    head,
                    persist,
                    &self.date,
                );
            }
            return;
        }
        if path.starts_with(crate::api_flow::API_PREFIX) {
            self.tally.api_requests += 1;
            return self.handle_api(slot, req, body, persist);
        }
        let key = &path[1..];
        if shards::link::validate_key(key).is_err() {
            encode::encode_not_found(&mut c.out, head, persist, &self.date);
            return;
        }
        if !get_or_head {
            encode::encode_method_not_allowed(&mut c.out, "GET, HEAD", head, persist, &self.date);
            return;
        }
        self.lookup(slot, key, head, persist);
    }

    /// The redirect fast path: a local table hit, or an LRU hit for a foreign key, answer at
    /// once; anything else foreign goes to its owner.
    #[inline]
    fn lookup(&mut self, slot: u32, key: &[u8], head: bool, persist: Persist) {
        let owner = self.router.owner(key);
        if owner.core == self.me {
            let answer = self.local_answer(owner.shard, key);
            if answer.is_some() {
                self.tally.redirects += 1;
            } else {
                self.tally.not_found += 1;
            }
            let c = &mut self.conns[slot as usize];
            match answer {
                Some(a) => encode::encode_redirect(
                    &mut c.out,
                    a.status,
                    a.target.as_bytes(),
                    persist,
                    &self.date,
                ),
                None => encode::encode_not_found(&mut c.out, head, persist, &self.date),
            }
            return;
        }
        let c = &mut self.conns[slot as usize];
        if let Some(a) = self.lru.get(key) {
            if !a.expired(self.now_s) {
                self.tally.lru_hits += 1;
                self.tally.redirects += 1;
                encode::encode_redirect(
                    &mut c.out,
                    a.status,
                    a.target.as_bytes(),
                    persist,
                    &self.date,
                );
                return;
            }
            self.lru.remove(key);
            self.tally.not_found += 1;
            encode::encode_not_found(&mut c.out, head, persist, &self.date);
            return;
        }
        self.tally.forwarded += 1;
        let seq = c
            .answers
            .defer(&c.out, head, persist, PendingKind::Redirect);
        let reply = ReplyTo {
            core: self.me as u16,
            slot,
            gen: c.gen,
            seq,
        };
        let key = InlineKey::new(key).expect("validated keys fit inline");
        self.mesh.send(owner.core, MeshMsg::Lookup { reply, key });
    }

    fn on_mesh(&mut self, msg: MeshMsg) {
        match msg {
            MeshMsg::Lookup { reply, key } => {
                let owner = self.router.owner(key.as_bytes());
                debug_assert_eq!(owner.core, self.me, "lookups go to the owner");
                let answer = self.local_answer(owner.shard, key.as_bytes());
                self.mesh
                    .send(reply.core as usize, MeshMsg::Answer { reply, key, answer });
            }
            MeshMsg::Answer { reply, key, answer } => {
                if let Some(a) = &answer {
                    self.lru.insert(key.as_bytes(), a.clone());
                }
                self.complete_forward(reply, answer);
            }
            MeshMsg::Write { reply, req } => self.on_write(reply, req),
            MeshMsg::WriteDone { reply, outcome } => {
                if reply.slot == crate::api_flow::IDEM_SLOT && reply.core as usize == self.me {
                    self.on_flight_done(reply.seq, outcome);
                } else {
                    self.complete_api(reply, outcome);
                }
            }
            MeshMsg::IdemCreate {
                reply,
                scope,
                hash,
                req,
                created_at_s,
            } => self.on_idem_create(reply, scope, hash, req, created_at_s),
            MeshMsg::Invalidate { from, token, key } => {
                self.lru.remove(key.as_bytes());
                self.deliver(from as usize, MeshMsg::InvalidateAck { token });
            }
            MeshMsg::InvalidateAck { token } => self.on_invalidate_ack(token),
            MeshMsg::PurgeLru { from, token } => {
                self.lru.clear();
                self.deliver(from as usize, MeshMsg::PurgeAck { token });
            }
            MeshMsg::PurgeAck { token } => self.on_purge_ack(token),
        }
    }

    /// The live link for a key this core owns: the memtable overrides the table.
    #[inline]
    fn local_answer(&self, shard: u32, key: &[u8]) -> Option<Answer> {
        match self.writes.get(key) {
            None => self.store.get(shard, key, self.now_s),
            Some(None) => None,
            Some(Some(info)) => {
                let a = Answer {
                    target: Target::Shared(info.target.clone()),
                    status: info.status,
                    expires_at_s: info.expires_at_s,
                };
                (!a.expired(self.now_s)).then_some(a)
            }
        }
    }

    /// An owner answered an API request: encode the answer at its place in the batch (or, for
    /// a generated-key create that collided with an alias, retry with the next ID).
    fn complete_api(&mut self, reply: ReplyTo, outcome: WriteOutcome) {
        let Some(c) = self.conns.get_mut(reply.slot as usize) else {
            return;
        };
        if !c.live || c.gen != reply.gen {
            return;
        }
        let Some(p) = c.answers.get_mut(reply.seq) else {
            return;
        };
        let persist = p.persist;
        let PendingKind::Api(mut op) = std::mem::replace(&mut p.kind, PendingKind::Redirect) else {
            debug_assert!(false, "an API answer for a redirect");
            return;
        };
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let answered = self.api_answer(&mut op, outcome, persist, &mut scratch);
        if answered.is_none() {
            // Retry a create with the next generated ID; the request stays deferred.
            let retry = match &*op {
                ApiOp::Create {
                    req,
                    created_at_s,
                    tries,
                } => Some((req.clone(), *created_at_s, *tries)),
                _ => None,
            };
            if let Some(p) = self.conns[reply.slot as usize].answers.get_mut(reply.seq) {
                p.kind = PendingKind::Api(op);
            }
            self.scratch = scratch;
            if let Some((req, created, tries)) = retry {
                self.start_create(reply, req, created, tries);
            }
            return;
        }
        self.fill_answer(reply.slot, reply.seq, &scratch);
        self.scratch = scratch;
    }

    /// Writes the answer of deferred request `seq` at its place in the connection's batch;
    /// flushes when nothing is deferred any more.
    fn fill_answer(&mut self, slot: u32, seq: u32, bytes: &[u8]) {
        let c = &mut self.conns[slot as usize];
        let filled = c.answers.fill(&mut c.out, seq, bytes);
        debug_assert!(filled.is_some(), "the caller found it waiting");
        if c.answers.is_empty() {
            self.mark_dirty(slot);
        }
    }

    /// Inserts a forwarded request's response at its place in the connection's batch.
    fn complete_forward(&mut self, reply: ReplyTo, answer: Option<Answer>) {
        let Some(c) = self.conns.get_mut(reply.slot as usize) else {
            return;
        };
        if !c.live || c.gen != reply.gen {
            return; // The connection went away meanwhile.
        }
        let Some(p) = c.answers.get(reply.seq) else {
            return;
        };
        let (head, persist) = (p.head, p.persist);
        self.scratch.clear();
        match answer {
            Some(a) if !a.expired(self.now_s) => {
                self.tally.redirects += 1;
                encode::encode_redirect(
                    &mut self.scratch,
                    a.status,
                    a.target.as_bytes(),
                    persist,
                    &self.date,
                )
            }
            _ => {
                self.tally.not_found += 1;
                encode::encode_not_found(&mut self.scratch, head, persist, &self.date)
            }
        }
        let scratch = std::mem::take(&mut self.scratch);
        self.fill_answer(reply.slot, reply.seq, &scratch);
        self.scratch = scratch;
    }

    #[inline]
    fn mark_dirty(&mut self, slot: u32) {
        let c = &mut self.conns[slot as usize];
        if !c.dirty {
            c.dirty = true;
            self.dirty.push(slot);
        }
    }

    /// Queues one send per connection whose batch is complete.
    fn flush(&mut self) {
        let mut i = 0;
        while i < self.dirty.len() {
            let slot = self.dirty[i];
            i += 1;
            let c = &mut self.conns[slot as usize];
            c.dirty = false;
            if !c.live || c.closing || c.busy() {
                continue;
            }
            if c.out.is_empty() {
                if c.close_after_send {
                    self.begin_close(slot, true);
                } else if c.recv == Recv::Done {
                    // The peer sent its last byte and everything complete was answered (what
                    // is left in `inbuf`, if anything, is a request that can never finish).
                    self.begin_close(slot, false);
                } else if c.inbuf.is_empty() {
                    self.pool.put(&mut c.out);
                    c.deadline_ms = self.now_ms + self.timeouts.idle_ms;
                } else if c.deadline_ms == 0 {
                    // A partial request is left after the batch: it must complete in time.
                    c.deadline_ms = self.now_ms + self.timeouts.header_ms;
                }
                continue;
            }
            self.push_send(slot);
        }
        self.dirty.clear();
    }

    fn push_send(&mut self, slot: u32) {
        let c = &mut self.conns[slot as usize];
        debug_assert!(c.sent < c.out.len());
        c.send_inflight = true;
        // A client that stops reading cannot hold the connection (and its answers) forever:
        // no progress for the idle timeout closes it (nginx's `send_timeout`).
        c.deadline_ms = self.now_ms + self.timeouts.idle_ms;
        let rest = &c.out[c.sent..];
        let sqe = opcode::Send::new(types::Fd(c.fd), rest.as_ptr(), rest.len() as u32)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data(Token::new(Op::Send, slot, c.gen).encode());
        self.sqes.push(sqe);
    }

    fn on_send(&mut self, tok: Token, res: i32) {
        let slot = tok.slot;
        let Some(c) = self.conns.get_mut(slot as usize) else {
            return;
        };
        if !c.live || c.gen != tok.gen {
            return;
        }
        c.send_inflight = false;
        if c.closing {
            self.maybe_free(slot);
            return;
        }
        if res < 0 {
            self.begin_close(slot, false);
            return;
        }
        c.sent += res as usize;
        if c.sent < c.out.len() {
            self.push_send(slot); // Partial send: the rest, from where the kernel stopped.
            return;
        }
        c.out.clear();
        c.sent = 0;
        c.deadline_ms = 0;
        if c.close_after_send {
            self.begin_close(slot, true);
            return;
        }
        if !c.inbuf.is_empty() {
            self.process_inbuf(slot);
        } else {
            self.mark_dirty(slot);
        }
    }

    /// Shuts the socket down; the slot is freed once its recv and send have completed. With
    /// `linger`, only our side is shut (FIN after the last response) and input is read and
    /// dropped until the peer closes or [`LINGER_MS`] pass (see there).
    fn begin_close(&mut self, slot: u32, linger: bool) {
        let c = &mut self.conns[slot as usize];
        if c.closing {
            if !linger && c.lingering {
                // Lingered long enough: now shut the read side too, ending the recv.
                c.lingering = false;
                c.shutdown_pending = true;
                let sqe = opcode::Shutdown::new(types::Fd(c.fd), libc::SHUT_RDWR)
                    .build()
                    .user_data(Token::new(Op::Shutdown, slot, c.gen).encode());
                self.sqes.push(sqe);
            }
            return;
        }
        c.closing = true;
        c.shutdown_pending = true;
        c.lingering = linger && c.recv.in_flight();
        let how = if c.lingering {
            libc::SHUT_WR
        } else {
            libc::SHUT_RDWR
        };
        if c.lingering {
            c.deadline_ms = self.now_ms + LINGER_MS;
        }
        let sqe = opcode::Shutdown::new(types::Fd(c.fd), how)
            .build()
            .user_data(Token::new(Op::Shutdown, slot, c.gen).encode());
        self.sqes.push(sqe);
        if matches!(c.recv, Recv::Starved | Recv::Paused) {
            // No recv is armed to report the shutdown.
            c.recv = Recv::Idle;
            if let Some(i) = self.starved.iter().position(|&s| s == slot) {
                self.starved.swap_remove(i);
            }
        }
        self.maybe_free(slot);
    }

    fn maybe_free(&mut self, slot: u32) {
        let c = &mut self.conns[slot as usize];
        // The fd is closed only after its shutdown completed: once closed, its number can be
        // reused by the next accept, and a late shutdown would hit that new connection.
        if !c.live || !c.closing || c.recv.in_flight() || c.send_inflight || c.shutdown_pending {
            return;
        }
        self.sqes.push(close_sqe(c.fd));
        c.live = false;
        c.fd = -1;
        c.answers.clear();
        c.deadline_ms = 0;
        self.pool.put(&mut c.inbuf);
        self.pool.put(&mut c.out);
        c.gen = c.gen.wrapping_add(1) & crate::ring::GEN_MASK;
        self.free_slots.push(slot);
        self.live_conns -= 1;
    }

    /// Starts a compaction if the memtable is big enough and the log is quiet (see `compaction`).
    fn maybe_compact(&mut self) -> io::Result<()> {
        use crate::compaction::{fold_snapshot, folding_path};
        let due = self.compaction.folding || self.writes.memtable.len() >= self.compaction.entries;
        if !due || self.compacting.is_some() || self.now_ms < self.next_compaction_ms {
            return Ok(());
        }
        let w = &mut self.writes;
        if w.batch.is_some()
            || w.log.pending_bytes() > 0
            || !w.waiting.is_empty()
            || w.log.is_poisoned()
        {
            return Ok(()); // Wait for a quiet log.
        }
        let dir = self.compaction.data_dir.clone();
        if !self.compaction.folding {
            // Rotate: the current log becomes the one being folded.
            let me = self.me as u32;
            let live = shards::log::wal_path(&dir, me);
            std::fs::rename(&live, folding_path(&dir, me))?;
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&live)?;
            shards::alloc::durable::sync_dir(&dir.join(shards::log::LOG_DIR_NAME))?;
            let next_seq = w.log.next_seq();
            // SAFETY: the old fd is ours, no batch is in flight on it (checked above), and it
            // is closed exactly once here.
            unsafe { libc::close(w.log_fd) };
            w.log_fd = std::os::fd::IntoRawFd::into_raw_fd(file);
            w.log = shards::log::LogWriter::new(me, 0, next_seq);
            // Idempotency records live in the folded log: carry the live ones over.
            let mut relog_seq = 0;
            for (scope, rec) in self.api.idem.live_records(self.now_s) {
                let scope_s = crate::api_flow::scope_string(scope);
                let shard = self.router.owner(scope_s.as_bytes()).shard;
                if let Ok(seq) = w.log.append_ref(
                    shard,
                    shards::log::LogOpRef::IdemPut {
                        scope: &scope_s,
                        request_hash: &rec.request_hash.0,
                        response_key: &rec.key,
                        created_at_s: rec.created_at_s,
                    },
                ) {
                    relog_seq = seq;
                }
            }
            self.relog_seq = relog_seq;
        }
        self.compaction.folding = true;
        let snapshot = self.writes.memtable.clone();
        let (tx, rx) = crossbeam::channel::bounded(1);
        let router = self.router;
        let now_s = self.now_s;
        let bell = self.shared.doorbells.clone();
        let me = self.me;
        std::thread::Builder::new()
            .name(format!("ricochet-compact-{me}"))
            .spawn(move || {
                let _ = tx.send(fold_snapshot(&dir, router, snapshot, now_s));
                bell.ring(me);
            })?;
        self.compacting = Some(rx);
        Ok(())
    }

    /// Swaps in the tables of a finished compaction and drops the folded log.
    fn poll_compaction(&mut self) {
        let Some(rx) = &self.compacting else {
            return;
        };
        if self.writes.log.durable_seq() < self.relog_seq {
            return; // The re-logged idempotency records are not durable yet.
        }
        let Ok(done) = rx.try_recv() else {
            return;
        };
        self.compacting = None;
        if let Some(e) = done.error {
            eprintln!(
                "core {}: compaction failed (will retry; nothing lost, the log is kept): {e}",
                self.me
            );
            self.next_compaction_ms = self.now_ms + COMPACTION_RETRY_MS;
            return;
        }
        let shards_n = done.tables.len();
        let mut old = Vec::with_capacity(shards_n);
        for (shard, table) in done.tables {
            old.extend(self.store.set_table(shard, Box::leak(Box::new(table))));
        }
        self.retire_tables(old);
        let folded = done.snapshot.len();
        for (k, e) in done.snapshot {
            if self
                .writes
                .memtable
                .get(&k)
                .is_some_and(|now| crate::compaction::unchanged(now, &e))
            {
                self.writes.memtable.remove(&k);
            }
        }
        let path = crate::compaction::folding_path(&self.compaction.data_dir, self.me as u32);
        if let Err(e) = std::fs::remove_file(&path) {
            eprintln!(
                "core {}: cannot remove folded log {}: {e}",
                self.me,
                path.display()
            );
        }
        let _ = shards::alloc::durable::sync_dir(
            &self.compaction.data_dir.join(shards::log::LOG_DIR_NAME),
        );
        self.compaction.folding = false;
        eprintln!(
            "core {}: compacted {folded} logged links into {shards_n} shard tables",
            self.me
        );
    }

    fn on_shutdown(&mut self, tok: Token) {
        let Some(c) = self.conns.get_mut(tok.slot as usize) else {
            return;
        };
        if c.live && c.gen == tok.gen {
            c.shutdown_pending = false;
            self.maybe_free(tok.slot);
        }
    }

    /// Unmaps tables a compaction replaced, once no core can hold an answer pointing into them:
    /// at once with one core, else after every other core cleared its LRU (`PurgeLru`).
    fn retire_tables(&mut self, old: Vec<&'static Table>) {
        if old.is_empty() {
            return;
        }
        if self.router.cores() == 1 {
            return free_tables(old);
        }
        let token = self.api.next_token;
        self.api.next_token += 1;
        self.retiring.insert(token, (self.router.cores() - 1, old));
        for core in 0..self.router.cores() {
            if core != self.me {
                self.mesh.send(
                    core,
                    MeshMsg::PurgeLru {
                        from: self.me as u16,
                        token,
                    },
                );
            }
        }
    }

    fn on_purge_ack(&mut self, token: u64) {
        let Some(entry) = self.retiring.get_mut(&token) else {
            return;
        };
        entry.0 -= 1;
        if entry.0 == 0 {
            let (_, old) = self.retiring.remove(&token).expect("present");
            free_tables(old);
        }
    }

    /// Closes connections past their deadline (half-open, slow headers, idle keep-alive).
    fn sweep(&mut self) {
        let now = self.now_ms;
        for slot in 0..self.conns.len() as u32 {
            let c = &self.conns[slot as usize];
            let due = c.live && c.deadline_ms != 0 && now >= c.deadline_ms;
            // A send stuck past its deadline closes too; a batch still being computed by
            // other cores does not (its deadline is 0 until it is sent).
            if due && (c.lingering || (!c.closing && (!c.busy() || c.send_inflight))) {
                self.begin_close(slot, false);
            }
        }
    }
}
