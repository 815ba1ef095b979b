//! One core's event loop. Runs as a single glommio task on a pinned executor and owns every
//! role of its core, so nothing here takes a lock. The loop only dispatches:
//!
//! - ring completions: sockets to [`Conns`], log write and sync to [`Owner`];
//! - mesh messages: lookups and writes to [`Owner`], answers to [`Conns`], idempotent creates
//!   to [`Flights`], LRU invalidations and purges to [`Conns`];
//! - once a turn: allocator replies ([`ApiFront`]'s creates), the mesh outbox, the next log
//!   batch, sends; once a sweep: deadlines, API key reloads, compaction;
//! - then one `io_uring_enter` for everything queued, and parking when idle.

use crate::api_front::ApiFront;
use crate::base::clock::Clock;
use crate::flights::Flights;
use crate::mesh::{ApiMsg, CacheMsg, Mesh, MeshMsg, RedirectMsg, ReplyTo};
use crate::net::conns::{Conns, Env, ACCEPT_BACKOFF_MS};
use crate::net::ring::{Op, Ring, Token};
use crate::node::shared::Shared;
use crate::owner::Owner;
use io_uring::{cqueue, opcode, types};
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

pub use crate::net::conns::Timeouts;

/// How often connection deadlines are checked. Timeouts fire at most this late.
pub const TIMEOUT_SWEEP_INTERVAL_MS: u64 = 100;

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

/// Everything a core needs to start: its roles, built by `server::serve`.
pub struct CoreSetup {
    pub parking: Parking,
    pub listener_fd: RawFd,
    pub conns: Conns,
    pub owner: Owner,
    pub api: ApiFront,
    pub flights: Flights,
    pub shared: Arc<Shared>,
    /// Answers from the click aggregators (stats, purges), unless analytics is off.
    pub clicks_inbox: Option<crate::mesh::service::Inbox<crate::analytics::ToCore>>,
    /// This core's click aggregator, when the core runs it between requests.
    pub click_slices: Option<crate::analytics::on_core::ClickSlices>,
    /// Fleet mode: the link writer's answers and the change feed's rows.
    pub fleet_inbox: Option<crate::mesh::service::Inbox<crate::fleet_mode::messages::FleetToCore>>,
}

/// One core's loop state.
pub struct Core {
    me: usize,
    ring: Ring,
    conns: Conns,
    owner: Owner,
    api: ApiFront,
    flights: Flights,
    clicks_inbox: Option<crate::mesh::service::Inbox<crate::analytics::ToCore>>,
    click_slices: Option<crate::analytics::on_core::ClickSlices>,
    fleet_inbox: Option<crate::mesh::service::Inbox<crate::fleet_mode::messages::FleetToCore>>,
    mesh: Mesh,
    clock: Clock,
    shared: Arc<Shared>,
    listener_fd: RawFd,
    accepting: bool,
    /// Accepting backs off after running out of descriptors: re-armed at this time.
    accept_again_ms: Option<u64>,
    draining_since_ms: Option<u64>,
    /// This core counted itself in `Shared::drained_cores`.
    drained: bool,
    doorbell_buf: Box<u64>,
    /// Whether idle moments may go to the click aggregator (`idle`).
    idle: crate::base::idle::IdleMeter,
}

impl Core {
    pub fn new(setup: CoreSetup, mesh: Mesh) -> io::Result<Core> {
        let mut core = Core {
            me: mesh.me(),
            ring: Ring::new()?,
            conns: setup.conns,
            owner: setup.owner,
            api: setup.api,
            flights: setup.flights,
            clicks_inbox: setup.clicks_inbox,
            click_slices: setup.click_slices,
            fleet_inbox: setup.fleet_inbox,
            mesh,
            clock: Clock::new(),
            shared: setup.shared,
            listener_fd: setup.listener_fd,
            accepting: true,
            accept_again_ms: None,
            draining_since_ms: None,
            drained: false,
            doorbell_buf: Box::new(0),
            idle: crate::base::idle::IdleMeter::new(0),
        };
        // SAFETY: sched_getcpu has no arguments; the executor is pinned, so the answer holds.
        let cpu = unsafe { libc::sched_getcpu() };
        core.mesh.my_doorbell().cpu.store(cpu, Ordering::Release);
        core.arm_accept()?;
        core.arm_doorbell()?;
        Ok(core)
    }

    fn arm_accept(&mut self) -> io::Result<()> {
        let sqe = opcode::AcceptMulti::new(types::Fd(self.listener_fd))
            .build()
            .user_data(Token::new(Op::Accept, 0, 0).encode());
        self.ring.push(sqe)
    }

    fn rearm_accept(&mut self) {
        self.accept_again_ms = None;
        if let Err(e) = self.arm_accept() {
            eprintln!("core {}: cannot re-arm accept: {e}", self.me);
        }
    }

    fn arm_doorbell(&mut self) -> io::Result<()> {
        let fd = self.mesh.my_doorbell().fd;
        let buf: *mut u64 = &mut *self.doorbell_buf;
        let sqe = opcode::Read::new(types::Fd(fd), buf.cast(), 8)
            .build()
            .user_data(Token::new(Op::Doorbell, 0, 0).encode());
        self.ring.push(sqe)
    }

    /// Runs until drained. Returns an error only if the ring itself fails.
    pub async fn run(mut self, parking: Parking) -> io::Result<()> {
        let mut cqes: Vec<cqueue::Entry> =
            Vec::with_capacity(crate::net::ring::RING_CQ_ENTRIES as usize);
        let mut next_sweep_ms = 0;
        // Monotonic microseconds at which the loop last found no work.
        let mut idle_since_us: Option<u64> = None;
        self.shared.ready_cores.fetch_add(1, Ordering::AcqRel);
        loop {
            self.clock.tick();
            self.idle.turn(self.clock.now_us);
            self.ring.drain_completions(&mut cqes);
            let mut work = !cqes.is_empty();
            for cqe in &cqes {
                self.on_cqe(cqe);
            }
            // Local messages sent while draining wait for the next turn (`Mesh::begin_turn`).
            self.mesh.begin_turn();
            while let Some(msg) = self.mesh.pop() {
                work = true;
                self.on_mesh(msg);
            }
            work |= !self.mesh.inbox_is_empty();
            if self
                .accept_again_ms
                .is_some_and(|t| self.clock.now_ms >= t && self.accepting)
            {
                self.rearm_accept();
            }
            if self.api.creates.needs_poll() {
                self.api.creates.poll(&mut self.mesh);
            }
            work |= self.poll_clicks();
            work |= self.poll_fleet();
            self.mesh.flush_outbox();
            let congested = self.mesh.congested();
            let (conns, _, mut env) = self.env();
            conns.set_congested(congested, &mut env);
            self.submit_log_batch()?;
            self.conns.flush(self.clock.now_ms, self.clock.precise_us());
            self.finish_turn()?;

            if self.clock.now_ms >= next_sweep_ms {
                next_sweep_ms = self.clock.now_ms + TIMEOUT_SWEEP_INTERVAL_MS;
                self.idle.close_window(self.clock.now_us);
                self.sweep();
                self.finish_turn()?;
            }
            if self.shared.draining.load(Ordering::Relaxed) && self.drain_step()? {
                self.close_clicks();
                return Ok(());
            }
            if work {
                self.conns.tally.mesh_deferred = self.mesh.deferred_sends;
                self.conns.publish_counters();
            }
            self.ring.uring.submit()?;

            if !work {
                // An idle moment: a slice of this core's click work, if it runs its
                // aggregator (`analytics::on_core`); then the ring again.
                work = self.click_slices.as_mut().is_some_and(|c| c.slice());
            }
            if work {
                idle_since_us = None;
            } else if let Parking::Adaptive { spin_us } = parking {
                self.idle.idle();
                let since = *idle_since_us.get_or_insert(self.clock.now_us);
                // With clicks waiting for an aggregator thread (which shares CPUs with the
                // cores), spinning would only keep it off the CPU: park at once, unless the
                // core is saturated (`idle`: then its clicks are dropped, not its redirects
                // slowed).
                let lend = self.idle.lends() && self.clicks_want_cpu();
                if self.clock.now_us - since >= spin_us || lend {
                    self.park().await?;
                    idle_since_us = None;
                }
            }
            // glommio's own tasks (none on the redirect path) get the core at its preempt timer.
            glommio::yield_if_needed().await;
        }
    }

    /// Every [`TIMEOUT_SWEEP_INTERVAL_MS`]: deadlines, key reloads, allocator, compaction.
    fn sweep(&mut self) {
        let (now_ms, now_s) = (self.clock.now_ms, self.clock.now_s);
        self.conns.sweep(now_ms);
        if let Some(r) = self.api.take_reloads() {
            self.conns.set_domains(r.domains.clone());
            self.conns.set_blocklist(r.blocklist.clone());
        }
        // After the reloads: an edit's answer leaves once its change is in force here.
        while let Some(done) = self.api.take_edits_done() {
            self.conns.on_domain_edited(&done, &self.clock, &self.api);
        }
        self.api.creates.poll(&mut self.mesh);
        self.api.creates.publish(&self.shared.counters[self.me]);
        self.shared.counters[self.me].publish_owner(&self.owner.tally());
        if let Some(slices) = &mut self.click_slices {
            slices.catch_up();
            self.shared.counters[self.me]
                .click_allocations
                .store(slices.allocations, Ordering::Relaxed);
        }
        let beat = self.shared.uptime_ms();
        self.shared.counters[self.me]
            .heartbeat_ms
            .store(beat, std::sync::atomic::Ordering::Relaxed);
        if let Some(stall) = &self.shared.test_stall {
            stall.maybe_stall(self.me, beat);
        }
        self.owner.send_purges();
        self.owner.poll_compaction(now_ms, &mut self.mesh);
        self.owner
            .maybe_compact(now_ms, now_s, &self.flights.table, &mut self.mesh);
    }

    /// Answers from the click aggregators: stats bodies to their requests, purges to the
    /// owner. `true` if there were any.
    fn poll_clicks(&mut self) -> bool {
        let Some(inbox) = &self.clicks_inbox else {
            return false;
        };
        let mut any = false;
        for reply in self.api.take_lost_stats() {
            any = true;
            self.api.stats_done();
            if let Some(place) = reply.place() {
                self.conns.on_stats_answer(
                    place,
                    None,
                    &self.clock,
                    (&mut self.api, &mut self.mesh),
                );
            }
        }
        while let Ok(m) = inbox.try_recv() {
            any = true;
            match m {
                crate::analytics::ToCore::Purged { token } => {
                    self.owner.on_clicks_purged(token, &mut self.mesh)
                }
                crate::analytics::ToCore::Stats { reply, body } => {
                    self.api.stats_done();
                    if let Some(place) = reply.place() {
                        self.conns.on_stats_answer(
                            place,
                            body.as_deref(),
                            &self.clock,
                            (&mut self.api, &mut self.mesh),
                        )
                    }
                }
                crate::analytics::ToCore::GlobalPart { reply, part } => {
                    let dropped = self.shared.clicks.as_ref().map_or(0, |c| c.dropped_total());
                    let body = self.api.gather(reply, *part, dropped);
                    if let (Some(body), Some(place)) = (body, reply.place()) {
                        self.conns.on_stats_answer(
                            place,
                            Some(&body),
                            &self.clock,
                            (&mut self.api, &mut self.mesh),
                        )
                    }
                }
            }
        }
        any
    }

    /// Fleet mode: the database's answers to this core's writes, and feed rows it owns. Not
    /// while a compaction drains the log (they append to it): they wait in the queue.
    fn poll_fleet(&mut self) -> bool {
        let Some(inbox) = &self.fleet_inbox else {
            return false;
        };
        let mut any = false;
        while !self.owner.log_is_held() {
            let Ok(m) = inbox.try_recv() else {
                break;
            };
            any = true;
            match m {
                crate::fleet_mode::messages::FleetToCore::Written(a) => self
                    .owner
                    .on_fleet_written(a, self.clock.now_s, &mut self.mesh),
                crate::fleet_mode::messages::FleetToCore::Feed { batch, rows } => {
                    self.owner.on_feed_batch(batch, rows)
                }
                crate::fleet_mode::messages::FleetToCore::Read(a) => {
                    self.owner.on_read(a, self.clock.now_s, &mut self.mesh)
                }
                crate::fleet_mode::messages::FleetToCore::Ceilings(c) => self.owner.on_ceilings(c),
                crate::fleet_mode::messages::FleetToCore::Resets { batch, keys } => {
                    self.owner.on_resets(batch, keys, &mut self.mesh)
                }
                crate::fleet_mode::messages::FleetToCore::Regen { batch, step } => {
                    self.owner.on_regen(batch, step)
                }
            }
        }
        any
    }

    /// One turn of draining; `true` once this core may exit.
    fn drain_step(&mut self) -> io::Result<bool> {
        let now_ms = self.clock.now_ms;
        if self.draining_since_ms.is_none() {
            self.draining_since_ms = Some(now_ms);
            self.accepting = false;
            let cancel = opcode::AsyncCancel::new(Token::new(Op::Accept, 0, 0).encode())
                .build()
                .user_data(Token::new(Op::Cancel, 0, 0).encode());
            self.ring.push(cancel)?;
            self.conns.start_drain(now_ms);
            self.finish_turn()?;
        }
        let since = self.draining_since_ms.unwrap_or(now_ms);
        if self.conns.live() == 0 && !self.drained {
            // Done here, but keep answering other cores' forwards and writes until every core
            // is done: their in-flight requests may need this core.
            self.drained = true;
            self.shared.drained_cores.fetch_add(1, Ordering::AcqRel);
        }
        let all_drained = self.shared.drained_cores.load(Ordering::Acquire) == self.shared.cores;
        Ok(all_drained || now_ms - since > DRAIN_TIMEOUT_MS)
    }

    /// The last clicks go to the aggregator, which makes them durable before the server
    /// exits (SIGTERM loses none); one run by this core goes to its service thread for that.
    fn close_clicks(&mut self) {
        self.conns.close_clicks();
        if let Some(slices) = self.click_slices.take() {
            slices.finish();
        }
    }

    /// Whether click work waits for a thread sharing this core's CPU: the aggregator thread
    /// (`--service-cpus` aside), or this core's own aggregator away on its service thread.
    fn clicks_want_cpu(&self) -> bool {
        match &self.click_slices {
            Some(slices) => slices.away(),
            None => self.conns.clicks_waiting(),
        }
    }

    /// Sleeps in the ring until an event, closing the race with mesh senders (see `mesh`).
    /// At most [`PARK_MAX_MS`], and no later than this core's aggregator's next sync.
    async fn park(&mut self) -> io::Result<()> {
        let bell = self.mesh.my_doorbell();
        bell.parked.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        // Anything sent before `parked` became visible is in a queue now: look once more.
        let must_stay_awake = !self.mesh.inbox_is_empty()
            || self.shared.draining.load(Ordering::Relaxed)
            || !self.ring.uring.completion().is_empty();
        let mut result = Ok(());
        if !must_stay_awake {
            let max = std::time::Duration::from_millis(PARK_MAX_MS);
            let sleep = self
                .click_slices
                .as_ref()
                .and_then(|c| c.until_sync())
                .map_or(max, |d| d.clamp(std::time::Duration::from_micros(100), max));
            let ts = types::Timespec::new().nsec(sleep.as_nanos() as u32);
            let args = types::SubmitArgs::new().timespec(&ts);
            match self.ring.uring.submitter().submit_with_args(1, &args) {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR)) => {}
                Err(e) => result = Err(e),
            }
        }
        self.mesh
            .my_doorbell()
            .parked
            .store(false, Ordering::SeqCst);
        result
    }

    /// Starts writing and syncing the log's pending records, if no batch is in flight.
    fn submit_log_batch(&mut self) -> io::Result<()> {
        let Some((fd, batch)) = self.owner.start_log_batch() else {
            return Ok(());
        };
        let write = opcode::Write::new(
            types::Fd(fd),
            batch.bytes.as_ptr(),
            batch.bytes.len() as u32,
        )
        .offset(batch.offset)
        .build()
        .flags(io_uring::squeue::Flags::IO_LINK)
        .user_data(Token::new(Op::LogWrite, 0, 0).encode());
        let sync = opcode::Fsync::new(types::Fd(fd))
            .flags(types::FsyncFlags::DATASYNC)
            .build()
            .user_data(Token::new(Op::LogSync, 0, 0).encode());
        self.ring.push(write)?;
        self.ring.push(sync)
    }

    /// Pushes the SQEs the connections queued and gives recycled buffers back to the kernel.
    fn finish_turn(&mut self) -> io::Result<()> {
        if !self.conns.recycle.is_empty() {
            for bid in self.conns.recycle.drain(..) {
                self.ring.bufs.push(bid);
            }
            self.ring.bufs.publish();
            self.conns.buffers_returned();
        }
        for sqe in self.conns.sqes.drain(..) {
            self.ring.push(sqe)?;
        }
        Ok(())
    }

    fn env(&mut self) -> (&mut Conns, &crate::net::ring::bufring::BufRing, Env<'_>) {
        let env = Env {
            owner: &self.owner,
            api: &mut self.api,
            mesh: &mut self.mesh,
            clock: &self.clock,
        };
        (&mut self.conns, &self.ring.bufs, env)
    }

    fn on_cqe(&mut self, cqe: &cqueue::Entry) {
        let Some(tok) = Token::decode(cqe.user_data()) else {
            return;
        };
        let (res, flags) = (cqe.result(), cqe.flags());
        match tok.op {
            Op::Accept => {
                let back_off = self.conns.on_accept(res, self.clock.now_ms);
                if !cqueue::more(flags) && self.accepting {
                    if back_off {
                        self.accept_again_ms = Some(self.clock.now_ms + ACCEPT_BACKOFF_MS);
                    } else {
                        self.rearm_accept();
                    }
                }
            }
            Op::Recv => {
                let (conns, bufs, mut env) = self.env();
                conns.on_recv(tok, res, flags, bufs, &mut env);
            }
            Op::Send => {
                let (conns, _, mut env) = self.env();
                conns.on_send(tok, res, &mut env);
            }
            Op::Doorbell => {
                if let Err(e) = self.arm_doorbell() {
                    eprintln!("core {}: cannot re-arm doorbell: {e}", self.me);
                }
            }
            Op::LogWrite => self.owner.on_log_write(res),
            Op::LogSync => {
                let (now_ms, now_s) = (self.clock.now_ms, self.clock.now_s);
                self.owner.on_log_sync(res, now_s, &mut self.mesh);
                // A due compaction starts as soon as the log has drained, not at the next sweep.
                if self.owner.compaction_due(now_ms) {
                    self.owner
                        .maybe_compact(now_ms, now_s, &self.flights.table, &mut self.mesh);
                }
            }
            Op::Shutdown => self.conns.on_shutdown(tok),
            Op::Close | Op::Cancel | Op::Timeout => {}
        }
    }

    fn on_mesh(&mut self, msg: MeshMsg) {
        match msg {
            MeshMsg::Redirect(m) => self.on_redirect_msg(m),
            MeshMsg::Api(m) => self.on_api_msg(m),
            MeshMsg::Cache(m) => self.on_cache_msg(m),
        }
    }

    #[inline]
    fn on_redirect_msg(&mut self, msg: RedirectMsg) {
        match msg {
            RedirectMsg::Lookup { reply, key, visit } => {
                self.owner
                    .on_lookup(reply, (key, visit), self.clock.now_s, &mut self.mesh)
            }
            RedirectMsg::Answer { reply, key, answer } => {
                if let Some(place) = reply.place() {
                    self.conns.on_answer(place, key, answer, &self.clock)
                }
            }
            RedirectMsg::Fetched {
                reply,
                key,
                fetched,
            } => {
                if let Some(place) = reply.place() {
                    self.conns.on_fetched(place, key, fetched, &self.clock)
                }
            }
        }
    }

    fn on_api_msg(&mut self, msg: ApiMsg) {
        let (now_s, mesh) = (self.clock.now_s, &mut self.mesh);
        match msg {
            ApiMsg::Write { reply, req } => self.owner.on_write(reply, req, now_s, mesh),
            ApiMsg::Read { reply, req } => self.owner.on_api_read(reply, req, now_s, mesh),
            ApiMsg::List {
                reply,
                shard,
                after,
                limit,
                filter,
                budget,
            } => {
                let page = crate::owner::Page {
                    shard,
                    after,
                    limit,
                    filter,
                    budget,
                };
                self.owner.on_list(reply, page, now_s, mesh)
            }
            ApiMsg::WriteDone { reply, outcome } => match reply {
                ReplyTo::Flight { flight, .. } => {
                    let creates = &mut self.api.creates;
                    self.flights
                        .on_flight_done(flight, outcome, now_s, creates, mesh)
                }
                ReplyTo::Request { place, .. } => {
                    self.conns
                        .on_api_answer(place, outcome, &mut self.api, &self.clock, mesh)
                }
            },
            ApiMsg::IdemCreate {
                reply,
                scope,
                hash,
                req,
                created_at_s,
            } => {
                let creates = &mut self.api.creates;
                self.flights.on_idem_create(
                    reply,
                    scope,
                    hash,
                    req,
                    created_at_s,
                    now_s,
                    creates,
                    mesh,
                )
            }
        }
    }

    fn on_cache_msg(&mut self, msg: CacheMsg) {
        let mesh = &mut self.mesh;
        match msg {
            CacheMsg::Invalidate {
                from,
                token,
                key,
                purge,
            } => {
                self.conns.invalidate(&key);
                let clicks_seq = if purge { self.conns.cut_clicks() } else { 0 };
                let me = self.me as u16;
                let ack = CacheMsg::InvalidateAck {
                    token,
                    from: me,
                    clicks_seq,
                };
                mesh.deliver(from as usize, ack);
            }
            CacheMsg::InvalidateAck {
                token,
                from,
                clicks_seq,
            } => self.owner.on_invalidate_ack(token, from, clicks_seq, mesh),
            CacheMsg::RetireTables {
                from,
                token,
                retired,
                forget_all,
            } => {
                self.conns.retire_tables(&retired, forget_all);
                mesh.deliver(from as usize, CacheMsg::RetireAck { token });
            }
            CacheMsg::RetireAck { token } => self.owner.on_retire_ack(token),
        }
    }
}
