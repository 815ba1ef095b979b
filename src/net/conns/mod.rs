//! The connection role: connection slots driven as state machines by ring completions, their
//! pipelined answers, the LRU of answers from other cores, and the buffer pool.
//!
//! [`Conns`] owns every connection of one core. It turns completions (accept, recv, send,
//! shutdown) into parsing, answering and sending; `requests.rs` holds what happens between
//! bytes in and bytes out (parse, route, answer at once or defer to an owner, fill deferred
//! answers). It never touches the ring: socket operations are queued in `sqes` for the core
//! loop to push, and buffers to give back in `recycle`.

pub mod answers;
pub mod conn;
pub mod pool;
mod requests;
mod run;
pub mod visit;

pub use answers::{Answers, Pending, PendingKind};
pub use conn::{Conn, Life, Recv, INBUF_PAUSE_BYTES, INBUF_RESUME_BYTES, MAX_INBUF_BYTES};
pub use pool::{
    BufPool, MAX_POOLED_BUFS, MAX_POOLED_BUF_BYTES, POOLED_BUF_BYTES, PREALLOCATED_BUFS,
};
pub use requests::Env;

use crate::base::cache::Lru;
use crate::base::target::TableView;
use crate::http::limits::MAX_CONNECTIONS_PER_CORE;
use crate::mesh::router::Router;
use crate::mesh::Answer;
use crate::net::ring::bufring::{BufRing, RECV_BUF_GROUP};
use crate::net::ring::{Op, Token};
use crate::node::shared::Shared;
use io_uring::{cqueue, opcode, squeue, types};
use std::os::fd::RawFd;
use std::sync::Arc;

/// After a final response, how long a half-closed connection keeps reading (and discarding)
/// before it is closed hard. Closing with unread input makes the kernel send RST, which can
/// destroy the response still in flight (an error answer to an oversized request, say);
/// lingering first lets the client read it (nginx's `lingering_close`).
pub const LINGER_MS: u64 = 2_000;

/// After an accept fails for lack of descriptors or memory, how long before accepting again.
/// Tens of ms: long enough not to spin (a retry at once fails the same way), short enough
/// that new clients wait little once descriptors free up.
pub const ACCEPT_BACKOFF_MS: u64 = 50;

/// Accept failures are reported at most once per this interval (with a count).
pub const ACCEPT_REPORT_INTERVAL_MS: u64 = 1_000;

/// Connection deadlines (defaults: `http::limits::HEADER_TIMEOUT_MS` and
/// `IDLE_KEEPALIVE_TIMEOUT_MS`; flags override them, e.g. for tests).
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// From a connection's first byte (or its accept) to a complete request head.
    pub header_ms: u64,
    /// Between requests on a keep-alive connection; also the longest a send may make no
    /// progress (a client that stops reading).
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

/// Every connection of one core.
pub struct Conns {
    me: usize,
    router: Router,
    slots: Vec<Conn>,
    free_slots: Vec<u32>,
    live: usize,
    pool: BufPool,
    /// Connections whose batch may be ready to send.
    dirty: Vec<u32>,
    /// Connections whose recv ran out of buffers.
    starved: Vec<u32>,
    /// Connections whose input waits for the mesh outbox to drain.
    outbox_waiters: Vec<u32>,
    /// The mesh outbox is congested (`Mesh::congested`): parse no new requests.
    congested: bool,
    /// Socket operations for the core loop to push into the ring.
    pub sqes: Vec<squeue::Entry>,
    /// Receive buffers to give back to the kernel at the end of the turn.
    pub recycle: Vec<u16>,
    /// Answers this core received from other cores' owners.
    lru: Lru<Answer>,
    /// Which table generations this core may still read (`crate::base::target`).
    view: TableView,
    pub tally: crate::metrics::Tally,
    timeouts: Timeouts,
    shared: Arc<Shared>,
    /// New requests are answered with `Connection: close` (SIGTERM).
    draining: bool,
    /// Accept failures since the last report, and when the next report may be printed.
    accept_errors: u64,
    next_accept_report_ms: u64,
    scratch: Vec<u8>,
    /// Click counting (`analytics::combiner`), unless `--analytics off`.
    pub clicks: Option<crate::analytics::combiner::Combiner>,
    client_ip: crate::analytics::ClientIp,
    /// Where redirect rules find a visitor's address and country (`visit`).
    visitors: visit::VisitorSource,
    /// The declared domains: which keyspace a request's `Host` names (`api::domains`).
    domains: Arc<crate::api::domains::Domains>,
    host_memo: crate::api::domains::HostMemo,
    /// The abuse blocklist in force (`api::blocklist`), and this core's verdicts for targets
    /// it parses the slow way.
    blocklist: Arc<crate::api::blocklist::Blocklist>,
    /// How a visit shapes its redirect: an extra path, a forwarded query (`route`).
    visit_rules: crate::route::VisitRules,
    verdicts: crate::api::blocklist::VerdictMemo,
}

impl Conns {
    pub fn new(
        me: usize,
        router: Router,
        lru_capacity: usize,
        timeouts: Timeouts,
        shared: Arc<Shared>,
    ) -> Conns {
        Conns {
            me,
            router,
            slots: Vec::new(),
            free_slots: Vec::new(),
            live: 0,
            pool: BufPool::new(),
            dirty: Vec::with_capacity(1024),
            starved: Vec::new(),
            outbox_waiters: Vec::new(),
            congested: false,
            sqes: Vec::with_capacity(1024),
            recycle: Vec::with_capacity(1024),
            lru: Lru::with_capacity(lru_capacity),
            view: TableView::new(router.shard_count()),
            tally: Default::default(),
            timeouts,
            shared,
            draining: false,
            accept_errors: 0,
            next_accept_report_ms: 0,
            scratch: Vec::with_capacity(4096),
            clicks: None,
            client_ip: crate::analytics::ClientIp::Peer,
            visitors: Default::default(),
            domains: crate::api::domains::Domains::none(),
            host_memo: Default::default(),
            blocklist: crate::api::blocklist::Blocklist::none(),
            verdicts: Default::default(),
            visit_rules: Default::default(),
        }
    }

    /// Where redirect rules find a visitor's address and country, set once at start.
    pub fn set_visitor_source(&mut self, source: visit::VisitorSource) {
        self.visitors = source;
    }

    /// How visits shape their redirects (`serve --extra-path`, `--forward-query`,
    /// `--trailing-slash`), set once at start.
    pub fn set_visit_rules(&mut self, rules: crate::route::VisitRules) {
        self.visit_rules = rules;
    }

    /// The abuse blocklist from now on (at start, and on each reload).
    pub fn set_blocklist(&mut self, blocklist: Arc<crate::api::blocklist::Blocklist>) {
        self.blocklist = blocklist;
    }

    /// The declared domains from now on (at start, and on each reload).
    pub fn set_domains(&mut self, domains: Arc<crate::api::domains::Domains>) {
        self.domains = domains;
        self.host_memo.clear();
    }

    /// A link is deleted or its stats reset: hand off this core's clicks so far; the number
    /// of the last click message that may hold the old link's (`Combiner::cut`).
    pub fn cut_clicks(&mut self) -> u64 {
        self.clicks.as_mut().map_or(0, |k| k.cut())
    }

    /// Batches handed off that the aggregator has not taken yet.
    pub fn clicks_waiting(&self) -> bool {
        self.clicks.as_ref().is_some_and(|k| k.waiting())
    }

    /// The core stops: its last clicks go to the aggregator.
    pub fn close_clicks(&mut self) {
        if let Some(k) = &mut self.clicks {
            k.close();
        }
    }

    /// Counts clicks with `combiner`, taking client addresses as `client_ip` says.
    pub fn set_clicks(
        &mut self,
        combiner: crate::analytics::combiner::Combiner,
        client_ip: crate::analytics::ClientIp,
    ) {
        self.clicks = Some(combiner);
        self.client_ip = client_ip;
    }

    /// Whether the mesh outbox is congested; when it no longer is, held input is parsed.
    pub fn set_congested(&mut self, congested: bool, env: &mut Env) {
        self.congested = congested;
        if congested {
            return;
        }
        while let Some(slot) = self.outbox_waiters.pop() {
            let c = &mut self.slots[slot as usize];
            c.outbox_wait = false;
            if c.is_live() && !c.is_closing() && !c.busy() && !c.inbuf.is_empty() {
                self.process_inbuf(slot, env);
            }
        }
    }

    /// Open connections.
    pub fn live(&self) -> usize {
        self.live
    }

    /// Publishes this core's counters for `/metrics`.
    pub fn publish_counters(&self) {
        self.shared.counters[self.me].publish(&self.tally, self.live);
    }

    /// A connection arrived (`res` is the accept's result). Refused while draining or past
    /// [`MAX_CONNECTIONS_PER_CORE`]. Returns whether accepting should back off for
    /// [`ACCEPT_BACKOFF_MS`]: the process or system is out of descriptors or memory, and
    /// retrying at once would only spin (the connections already open keep being served).
    pub fn on_accept(&mut self, res: i32, now_ms: u64) -> bool {
        if res >= 0 {
            let fd = res;
            if self.draining || self.live >= MAX_CONNECTIONS_PER_CORE {
                self.sqes.push(close_sqe(fd));
            } else {
                let slot = self.alloc_slot(fd, now_ms);
                self.arm_recv(slot);
            }
            return false;
        }
        if res == -libc::ECANCELED {
            return false;
        }
        self.accept_errors += 1;
        self.tally.accept_errors[crate::metrics::accept_error_class(-res)] += 1;
        if now_ms >= self.next_accept_report_ms {
            // At most one line per ACCEPT_REPORT_INTERVAL_MS, with the count since the last.
            let e = std::io::Error::from_raw_os_error(-res);
            eprintln!(
                "core {}: accept failed {} time(s) in the last {} ms, last: {e}; backing off {} ms \
                 and still serving the {} open connections",
                self.me, self.accept_errors, ACCEPT_REPORT_INTERVAL_MS, ACCEPT_BACKOFF_MS, self.live
            );
            self.accept_errors = 0;
            self.next_accept_report_ms = now_ms + ACCEPT_REPORT_INTERVAL_MS;
        }
        matches!(
            -res,
            libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM
        )
    }

    fn alloc_slot(&mut self, fd: RawFd, now_ms: u64) -> u32 {
        let slot = match self.free_slots.pop() {
            Some(s) => s,
            None => {
                self.slots.push(Conn::new());
                (self.slots.len() - 1) as u32
            }
        };
        let c = &mut self.slots[slot as usize];
        debug_assert!(!c.is_live());
        c.fd = fd;
        c.gen = c.gen.wrapping_add(1) & crate::net::ring::GEN_MASK;
        c.life = Life::Open;
        c.recv = Recv::Idle;
        c.send_inflight = false;
        c.sent = 0;
        c.answers.clear();
        c.dirty = false;
        c.outbox_wait = false;
        c.continue_sent = false;
        c.peer = match &self.clicks {
            Some(k) if k.full() => peer_address(fd),
            _ => [0; 16],
        };
        // A new connection must send a request within the header timeout.
        c.deadline_ms = now_ms + self.timeouts.header_ms;
        self.live += 1;
        slot
    }

    /// Arms a multishot recv, unless one is armed or input must not be read now.
    fn arm_recv(&mut self, slot: u32) {
        let c = &mut self.slots[slot as usize];
        let may = match c.recv {
            Recv::Idle | Recv::Starved => true,
            Recv::Paused => c.inbuf.len() < INBUF_RESUME_BYTES,
            Recv::Armed | Recv::Pausing | Recv::Done => false,
        };
        if !c.is_live() || c.is_closing() || !may {
            return;
        }
        c.recv = Recv::Armed;
        let sqe = opcode::RecvMulti::new(types::Fd(c.fd), RECV_BUF_GROUP)
            .build()
            .user_data(Token::new(Op::Recv, slot, c.gen).encode());
        self.sqes.push(sqe);
    }

    /// Receive buffers came back to the kernel: re-arm the recvs that starved.
    pub fn buffers_returned(&mut self) {
        while let Some(slot) = self.starved.pop() {
            self.arm_recv(slot);
        }
    }

    /// A recv completion for `tok`'s connection.
    pub fn on_recv(&mut self, tok: Token, res: i32, flags: u32, bufs: &BufRing, env: &mut Env) {
        let bid = cqueue::buffer_select(flags);
        let slot = tok.slot;
        let stale = self
            .slots
            .get(slot as usize)
            .is_none_or(|c| !c.is_live() || c.gen != tok.gen);
        if stale {
            self.recycle.extend(bid);
            return;
        }
        if !cqueue::more(flags) {
            // The multishot recv ended (or this was its cancel's completion).
            let c = &mut self.slots[slot as usize];
            c.recv = match c.recv {
                Recv::Pausing => Recv::Paused,
                Recv::Armed => Recv::Idle,
                other => other,
            };
        }
        if res > 0 {
            let bid = bid.expect("a successful buffer-select recv names its buffer");
            self.on_data(slot, bufs.slice(bid, res as usize), env);
            self.recycle.push(bid);
        } else if res == -libc::ENOBUFS {
            let c = &mut self.slots[slot as usize];
            if c.recv == Recv::Idle {
                c.recv = Recv::Starved;
                self.starved.push(slot);
            }
        } else if res == -libc::ECANCELED {
            // Our own backpressure cancel: nothing to do but maybe resume (below).
        } else {
            // EOF (0) or an error: no more input. Answer everything already received, then
            // close (`flush` closes once nothing is left to answer).
            self.recycle.extend(bid);
            let c = &mut self.slots[slot as usize];
            c.recv = Recv::Done;
            if c.is_closing() {
                return self.maybe_free(slot);
            }
            if !c.busy() && !c.inbuf.is_empty() {
                self.process_inbuf(slot, env);
            }
            return self.mark_dirty(slot);
        }
        let c = &self.slots[slot as usize];
        if c.is_closing() {
            self.maybe_free(slot);
        } else if matches!(c.recv, Recv::Idle | Recv::Paused) {
            self.arm_recv(slot);
        }
    }

    /// Backpressure: stops reading from a connection whose unparsed input passed
    /// [`INBUF_PAUSE_BYTES`] (the kernel's receive window then slows the client down).
    fn maybe_pause(&mut self, slot: u32) {
        let c = &mut self.slots[slot as usize];
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
                self.starved.retain(|&s| s != slot);
            }
            Recv::Pausing | Recv::Paused | Recv::Done => {}
        }
    }

    #[inline]
    fn mark_dirty(&mut self, slot: u32) {
        let c = &mut self.slots[slot as usize];
        if !c.dirty {
            c.dirty = true;
            self.dirty.push(slot);
        }
    }

    /// Queues one send per connection whose batch is complete; closes those that are done.
    /// `now_us` is a fresh clock reading: the send-queued end of each batch's request duration.
    pub fn flush(&mut self, now_ms: u64, now_us: u64) {
        let mut i = 0;
        while i < self.dirty.len() {
            let slot = self.dirty[i];
            i += 1;
            let c = &mut self.slots[slot as usize];
            c.dirty = false;
            if !c.is_live() || c.is_closing() || c.busy() {
                continue;
            }
            if !c.out.is_empty() {
                if c.batch_requests > 0 {
                    let took = now_us.saturating_sub(c.batch_started_us);
                    let n = u64::from(std::mem::take(&mut c.batch_requests));
                    self.tally
                        .request_us
                        .observe(&crate::metrics::REQUEST_US_BUCKETS, took, n);
                }
                self.push_send(slot, now_ms);
            } else if c.closes_after_send() {
                self.begin_close(slot, true, now_ms);
            } else if c.recv == Recv::Done {
                // The peer sent its last byte and everything complete was answered (what
                // is left in `inbuf`, if anything, is a request that can never finish).
                self.begin_close(slot, false, now_ms);
            } else if c.inbuf.is_empty() {
                self.pool.put(&mut c.out);
                c.deadline_ms = now_ms + self.timeouts.idle_ms;
            } else if c.deadline_ms == 0 {
                // A partial request is left after the batch: it must complete in time.
                c.deadline_ms = now_ms + self.timeouts.header_ms;
            }
        }
        self.dirty.clear();
    }

    fn push_send(&mut self, slot: u32, now_ms: u64) {
        let c = &mut self.slots[slot as usize];
        debug_assert!(c.sent < c.out.len());
        c.send_inflight = true;
        // A client that stops reading cannot hold the connection (and its answers) forever:
        // no progress for the idle timeout closes it (nginx's `send_timeout`).
        c.deadline_ms = now_ms + self.timeouts.idle_ms;
        let rest = &c.out[c.sent..];
        let sqe = opcode::Send::new(types::Fd(c.fd), rest.as_ptr(), rest.len() as u32)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data(Token::new(Op::Send, slot, c.gen).encode());
        self.sqes.push(sqe);
    }

    /// A send completed: send the rest, or start on input that arrived meanwhile, or close.
    pub fn on_send(&mut self, tok: Token, res: i32, env: &mut Env) {
        let slot = tok.slot;
        let now_ms = env.clock.now_ms;
        let Some(c) = self.slots.get_mut(slot as usize) else {
            return;
        };
        if !c.is_live() || c.gen != tok.gen {
            return;
        }
        c.send_inflight = false;
        if c.is_closing() {
            return self.maybe_free(slot);
        }
        if res < 0 {
            return self.begin_close(slot, false, now_ms);
        }
        c.sent += res as usize;
        if c.sent < c.out.len() {
            return self.push_send(slot, now_ms); // Partial: the rest, from where it stopped.
        }
        c.out.clear();
        c.sent = 0;
        c.deadline_ms = 0;
        if c.closes_after_send() {
            return self.begin_close(slot, true, now_ms);
        }
        if !c.inbuf.is_empty() {
            self.process_inbuf(slot, env);
        } else {
            self.mark_dirty(slot);
        }
    }

    /// Shuts the socket down; the slot is freed once its recv and send have completed. With
    /// `linger`, only our side is shut (FIN after the last response) and input is read and
    /// dropped until the peer closes or [`LINGER_MS`] pass (see there).
    fn begin_close(&mut self, slot: u32, linger: bool, now_ms: u64) {
        let c = &mut self.slots[slot as usize];
        match c.life {
            Life::Closing { linger: true, .. } if !linger => {
                // Lingered long enough: now shut the read side too, ending the recv.
                c.life = Life::Closing {
                    linger: false,
                    shutdown_pending: true,
                };
                self.sqes.push(shutdown_sqe(c, slot, libc::SHUT_RDWR));
                return;
            }
            Life::Closing { .. } | Life::Free => return,
            Life::Open | Life::CloseAfterSend => {}
        }
        let linger = linger && c.recv.in_flight();
        c.life = Life::Closing {
            linger,
            shutdown_pending: true,
        };
        let how = if linger {
            c.deadline_ms = now_ms + LINGER_MS;
            libc::SHUT_WR
        } else {
            libc::SHUT_RDWR
        };
        self.sqes.push(shutdown_sqe(c, slot, how));
        if matches!(c.recv, Recv::Starved | Recv::Paused) {
            // No recv is armed to report the shutdown.
            c.recv = Recv::Idle;
            self.starved.retain(|&s| s != slot);
        }
        self.maybe_free(slot);
    }

    fn maybe_free(&mut self, slot: u32) {
        let c = &mut self.slots[slot as usize];
        // The fd is closed only after its shutdown completed: once closed, its number can be
        // reused by the next accept, and a late shutdown would hit that new connection.
        let done = matches!(
            c.life,
            Life::Closing {
                shutdown_pending: false,
                ..
            }
        );
        if !done || c.recv.in_flight() || c.send_inflight {
            return;
        }
        self.sqes.push(close_sqe(c.fd));
        c.life = Life::Free;
        c.fd = -1;
        c.answers.clear();
        c.deadline_ms = 0;
        self.pool.put(&mut c.inbuf);
        self.pool.put(&mut c.out);
        c.gen = c.gen.wrapping_add(1) & crate::net::ring::GEN_MASK;
        self.free_slots.push(slot);
        self.live -= 1;
    }

    /// A shutdown completed.
    pub fn on_shutdown(&mut self, tok: Token) {
        let Some(c) = self.slots.get_mut(tok.slot as usize) else {
            return;
        };
        if c.gen != tok.gen {
            return;
        }
        if let Life::Closing {
            shutdown_pending, ..
        } = &mut c.life
        {
            *shutdown_pending = false;
            self.maybe_free(tok.slot);
        }
    }

    /// Closes connections past their deadline (half-open, slow headers, idle keep-alive,
    /// a send that makes no progress, lingering).
    pub fn sweep(&mut self, now_ms: u64) {
        if let Some(k) = &mut self.clicks {
            k.sweep();
            if let Some(st) = &self.shared.clicks {
                let c = &st.per_core[self.me];
                c.clicks
                    .store(k.tally.clicks, std::sync::atomic::Ordering::Relaxed);
                c.dropped
                    .store(k.tally.dropped, std::sync::atomic::Ordering::Relaxed);
            }
        }
        for slot in 0..self.slots.len() as u32 {
            let c = &self.slots[slot as usize];
            let due = c.is_live() && c.deadline_ms != 0 && now_ms >= c.deadline_ms;
            // A batch still being computed by other cores is not closed (its deadline is 0
            // until it is sent).
            if due && (c.is_lingering() || (!c.is_closing() && (!c.busy() || c.send_inflight))) {
                self.begin_close(slot, false, now_ms);
            }
        }
    }

    /// SIGTERM: refuse new connections, close idle ones, let busy ones finish their batch
    /// with `Connection: close`. A request still being received (part of it in `inbuf`) is
    /// read on and answered, within its own read deadline, with `Connection: close` (every
    /// answer while draining has it): a readiness probe is told `503 draining`, not cut off.
    pub fn start_drain(&mut self, now_ms: u64) {
        self.draining = true;
        for slot in 0..self.slots.len() as u32 {
            let c = &mut self.slots[slot as usize];
            if !c.is_live() || c.is_closing() {
                continue;
            }
            if c.busy() || !c.out.is_empty() {
                c.close_after_send();
            } else if !c.inbuf.is_empty() {
                // Mid-request: left open; its answer closes it.
            } else {
                self.begin_close(slot, false, now_ms);
            }
        }
    }
}

fn shutdown_sqe(c: &Conn, slot: u32, how: i32) -> squeue::Entry {
    opcode::Shutdown::new(types::Fd(c.fd), how)
        .build()
        .user_data(Token::new(Op::Shutdown, slot, c.gen).encode())
}

fn close_sqe(fd: RawFd) -> squeue::Entry {
    opcode::Close::new(types::Fd(fd))
        .build()
        .user_data(Token::new(Op::Close, 0, 0).encode())
}

/// The peer address of socket `fd` as 16 bytes (IPv4 mapped into IPv6); zero if unknown.
/// One `getpeername` per accepted connection when analytics counts visitors (a non-blocking
/// syscall, not one per request).
fn peer_address(fd: RawFd) -> [u8; 16] {
    // SAFETY: a zeroed sockaddr_storage is a valid buffer; getpeername writes at most `len`
    // bytes into it and sets `len`.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `fd` is the socket just accepted; the pointers are to `ss` and `len` above.
    let rc = unsafe {
        libc::getpeername(
            fd,
            (&mut ss as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return [0; 16];
    }
    match i32::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let a: &libc::sockaddr_in = unsafe { &*(&ss as *const libc::sockaddr_storage).cast() };
            let mut out = [0u8; 16];
            out[10] = 0xff;
            out[11] = 0xff;
            out[12..].copy_from_slice(&a.sin_addr.s_addr.to_ne_bytes());
            out
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let a: &libc::sockaddr_in6 = unsafe { &*(&ss as *const libc::sockaddr_storage).cast() };
            a.sin6_addr.s6_addr
        }
        _ => [0; 16],
    }
}
