//! The run loop: one thread paces requests on a spinning monotonic clock, spreads them over
//! keep-alive connections, and reads responses through non-blocking sockets (mio / epoll).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

use super::check::check;
use super::clock::{Clock, MonotonicClock};
use super::links::Dataset;
use super::pacing::Schedule;
use super::request::{unknown_key, Expect, MixError, RequestMix, RequestWriter};
use super::response::{parse_response, Parse};
use super::stats::{Failure, Recorder, RunReport};
use super::zipf::KeyDist;

/// How long the initial connections may take to open, in ms, before the run is abandoned.
pub const CONNECT_TIMEOUT_MS: u64 = 5_000;

/// Default time after the last scheduled send to wait for outstanding responses, in ms. Longer
/// than any sane latency SLO; what is still unanswered then is counted as `unanswered`.
pub const DEFAULT_DRAIN_MS: u64 = 2_000;

/// Wait before reopening a connection whose reconnect failed, in ms: retrying sooner would
/// only burn the pacing thread on a server that refuses connections.
pub const RECONNECT_BACKOFF_MS: u64 = 100;

/// Bytes reserved per read call: many pipelined responses fit in one syscall.
pub const READ_CHUNK_BYTES: usize = 64 * 1024;

/// Readiness events taken per poll.
pub const MAX_EVENTS: usize = 1024;

/// Interval of housekeeping (reconnect retries), in ns; keeps the per-iteration cost O(1).
pub const HOUSEKEEPING_INTERVAL_NS: u64 = 1_000_000;

/// Most connections one run may open (one mio token each, bounded by typical fd limits).
pub const MAX_CONNECTIONS: usize = 16_384;

/// Deepest pipeline accepted; deeper gains nothing and hides queueing inside the server.
pub const MAX_PIPELINE: usize = 1024;

/// Settings of one run.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// Server address.
    pub target: SocketAddr,
    /// Host header value (defaults to the target address).
    pub host: String,
    /// Requests per second.
    pub rate: u64,
    /// Measured duration (after warm-up).
    pub duration: Duration,
    /// Warm-up at the same rate whose results are discarded.
    pub warmup: Duration,
    /// Keep-alive connections.
    pub connections: usize,
    /// Requests in flight per connection.
    pub pipeline: usize,
    /// Key popularity.
    pub dist: KeyDist,
    /// Share of requests for keys not in the dataset (expect 404).
    pub unknown_share: f64,
    /// Share of create requests (expect 201).
    pub create_share: f64,
    /// Bearer token for creates.
    pub api_key: Option<String>,
    /// Seed of the request mix.
    pub seed: u64,
    /// Send `User-Agent`, `Referer` and `X-Forwarded-For` with every GET (click analytics
    /// classifies and hashes them): a realistic browser request instead of a bare one.
    pub click_headers: bool,
    /// Wait for stragglers after the last send.
    pub drain: Duration,
}

impl LoadConfig {
    /// Defaults: 1000 req/s for 10 s, 2 s warm-up, 16 connections, no pipelining, uniform keys,
    /// only dataset keys.
    pub fn new(target: SocketAddr) -> LoadConfig {
        LoadConfig {
            target,
            host: target.to_string(),
            rate: 1000,
            duration: Duration::from_secs(10),
            warmup: Duration::from_secs(2),
            connections: 16,
            pipeline: 1,
            dist: KeyDist::Uniform,
            unknown_share: 0.0,
            create_share: 0.0,
            api_key: None,
            seed: 1,
            click_headers: false,
            drain: Duration::from_millis(DEFAULT_DRAIN_MS),
        }
    }
}

/// Errors that stop a run.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot connect to {addr}: {source}")]
    Connect { addr: SocketAddr, source: io::Error },
    #[error("connections to {0} did not open within {CONNECT_TIMEOUT_MS} ms")]
    ConnectTimeout(SocketAddr),
    #[error("bad request mix: {0}")]
    Mix(#[from] MixError),
    #[error("bad configuration: {0}")]
    Config(String),
    #[error("cannot pin to CPU {cpu}: {source}")]
    Affinity { cpu: usize, source: io::Error },
    #[error("poll failed: {0}")]
    Io(#[from] io::Error),
}

/// Pins the calling thread to one CPU so pacing is not migrated mid-run.
pub fn pin_to_cpu(cpu: usize) -> Result<(), LoadError> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(LoadError::Affinity {
            cpu,
            source: io::Error::from(io::ErrorKind::InvalidInput),
        });
    }
    // SAFETY: cpu_set_t is a plain bitmask for which all-zero is a valid (empty) value.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` < CPU_SETSIZE was checked above, so CPU_SET stays inside `set`.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 means the calling thread; `set` is a valid, initialized cpu_set_t of the
    // size passed.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(LoadError::Affinity {
            cpu,
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

#[derive(Clone, Copy, Debug)]
struct Pending {
    scheduled_ns: u64,
    expect: Expect,
}

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum ConnState {
    Connecting,
    Connected,
    Down { retry_at_ns: u64 },
}

struct Conn {
    stream: Option<TcpStream>,
    state: ConnState,
    out: Vec<u8>,
    out_pos: usize,
    /// Read buffer, always initialized; `rbuf[..rlen]` holds unparsed bytes. Kept zero-filled
    /// once instead of resized per read, which would memset 64 KiB on every readable event.
    rbuf: Vec<u8>,
    rlen: usize,
    in_flight: VecDeque<Pending>,
    queued: VecDeque<Pending>,
    dirty: bool,
    last_error: Option<io::Error>,
}

impl Conn {
    fn load(&self) -> usize {
        self.in_flight.len() + self.queued.len()
    }
}

struct Engine<'a> {
    cfg: &'a LoadConfig,
    data: &'a Dataset,
    poll: Poll,
    conns: Vec<Conn>,
    writer: RequestWriter,
    rec: Recorder,
    rr: usize,
    dirty: Vec<usize>,
    outstanding: u64,
}

/// Refuses a configuration the engine cannot run (limits named in the error).
fn check_config(cfg: &LoadConfig) -> Result<(), LoadError> {
    if cfg.rate == 0 {
        return Err(LoadError::Config("rate must be > 0".into()));
    }
    if cfg.connections == 0 || cfg.connections > MAX_CONNECTIONS {
        return Err(LoadError::Config(format!(
            "connections must be within 1..={MAX_CONNECTIONS}"
        )));
    }
    if cfg.pipeline == 0 || cfg.pipeline > MAX_PIPELINE {
        return Err(LoadError::Config(format!(
            "pipeline must be within 1..={MAX_PIPELINE}"
        )));
    }
    if cfg.create_share > 0.0 && cfg.api_key.is_none() {
        return Err(LoadError::Config("creates need an API key".into()));
    }
    Ok(())
}

/// Runs one constant-rate load test against `cfg.target` and reports what it measured.
pub fn run(cfg: &LoadConfig, data: &Dataset) -> Result<RunReport, LoadError> {
    check_config(cfg)?;
    let mut mix = RequestMix::new(
        data,
        cfg.dist,
        cfg.unknown_share,
        cfg.create_share,
        cfg.seed,
    )?;
    let clock = MonotonicClock::new();
    let mut engine = Engine {
        cfg,
        data,
        poll: Poll::new()?,
        conns: Vec::with_capacity(cfg.connections),
        writer: RequestWriter::new(&cfg.host, cfg.api_key.as_deref())
            .with_click_headers(cfg.click_headers),
        rec: Recorder::new(0),
        rr: 0,
        dirty: Vec::new(),
        outstanding: 0,
    };
    engine.connect_all(&clock)?;

    let start_ns = clock.now_ns();
    let warmup_ns = cfg.warmup.as_nanos() as u64;
    let total_ns = warmup_ns + cfg.duration.as_nanos() as u64;
    let mut sched = Schedule::new(start_ns, cfg.rate, Schedule::count_for(cfg.rate, total_ns));
    let window_start_ns = start_ns + warmup_ns;
    engine.rec = Recorder::new(window_start_ns);
    let drain_ns = cfg.drain.as_nanos() as u64;
    let mut events = Events::with_capacity(MAX_EVENTS);
    let mut next_housekeeping_ns = start_ns + HOUSEKEEPING_INTERVAL_NS;
    loop {
        let now = clock.now_ns();
        let mut busy = false;
        while let Some(t) = sched.next_due(now) {
            let expect = mix.next_request();
            engine.rec.on_dispatch(t, now, expect.kind());
            engine.dispatch(Pending {
                scheduled_ns: t,
                expect,
            });
            busy = true;
        }
        engine.flush_dirty(now);

        engine.poll.poll(&mut events, Some(Duration::ZERO))?;
        busy |= engine.on_events(&events, &clock);
        engine.flush_dirty(clock.now_ns());

        if now >= next_housekeeping_ns {
            engine.retry_down(now);
            next_housekeeping_ns = now + HOUSEKEEPING_INTERVAL_NS;
        }
        if sched.is_done() {
            if engine.outstanding == 0 {
                break;
            }
            if now >= sched.end_ns() + drain_ns {
                engine.fail_all_outstanding(Failure::Unanswered);
                break;
            }
        }
        if !busy {
            std::hint::spin_loop();
        }
    }
    Ok(describe(engine.rec.report(sched.end_ns()), cfg))
}

/// The report with the run's configuration filled in.
fn describe(mut report: RunReport, cfg: &LoadConfig) -> RunReport {
    report.target = cfg.target.to_string();
    report.target_rps = cfg.rate;
    report.duration_s = cfg.duration.as_secs_f64();
    report.warmup_s = cfg.warmup.as_secs_f64();
    report.connections = cfg.connections;
    report.pipeline = cfg.pipeline;
    report
}

impl Engine<'_> {
    /// Handles one poll's readiness events; whether there were any.
    fn on_events(&mut self, events: &Events, clock: &MonotonicClock) -> bool {
        for ev in events.iter() {
            let i = ev.token().0;
            if self.conns[i].state == ConnState::Connecting && ev.is_writable() {
                self.finish_connect(i, clock.now_ns());
            }
            if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                self.on_readable(i, clock);
            }
            if ev.is_writable() {
                self.flush(i, clock.now_ns());
            }
        }
        !events.is_empty()
    }

    fn connect_all(&mut self, clock: &MonotonicClock) -> Result<(), LoadError> {
        for i in 0..self.cfg.connections {
            self.conns.push(Conn {
                stream: None,
                state: ConnState::Down { retry_at_ns: 0 },
                out: Vec::new(),
                out_pos: 0,
                rbuf: vec![0; READ_CHUNK_BYTES],
                rlen: 0,
                in_flight: VecDeque::new(),
                queued: VecDeque::new(),
                dirty: false,
                last_error: None,
            });
            self.open(i, 0);
            if let Some(e) = self.conns[i].last_error.take() {
                return Err(LoadError::Connect {
                    addr: self.cfg.target,
                    source: e,
                });
            }
        }
        let deadline = clock.now_ns() + CONNECT_TIMEOUT_MS * 1_000_000;
        let mut events = Events::with_capacity(MAX_EVENTS);
        while self.conns.iter().any(|c| c.state == ConnState::Connecting) {
            if clock.now_ns() > deadline {
                return Err(LoadError::ConnectTimeout(self.cfg.target));
            }
            self.poll
                .poll(&mut events, Some(Duration::from_millis(10)))?;
            for ev in events.iter() {
                let i = ev.token().0;
                if self.conns[i].state == ConnState::Connecting {
                    self.finish_connect(i, clock.now_ns());
                }
                if let Some(e) = self.conns[i].last_error.take() {
                    return Err(LoadError::Connect {
                        addr: self.cfg.target,
                        source: e,
                    });
                }
            }
        }
        Ok(())
    }

    /// Starts a non-blocking connect for connection `i`.
    fn open(&mut self, i: usize, now: u64) {
        let c = &mut self.conns[i];
        match TcpStream::connect(self.cfg.target) {
            Ok(mut s) => {
                match self.poll.registry().register(
                    &mut s,
                    Token(i),
                    Interest::READABLE | Interest::WRITABLE,
                ) {
                    Ok(()) => {
                        c.stream = Some(s);
                        c.state = ConnState::Connecting;
                    }
                    Err(e) => self.mark_down(i, now, e),
                }
            }
            Err(e) => self.mark_down(i, now, e),
        }
    }

    fn finish_connect(&mut self, i: usize, now: u64) {
        let c = &mut self.conns[i];
        let Some(s) = c.stream.as_ref() else { return };
        match s.take_error() {
            Ok(None) => {}
            Ok(Some(e)) | Err(e) => return self.mark_down(i, now, e),
        }
        match s.peer_addr() {
            Ok(_) => {
                // Requests are small and latency-bound: never let Nagle hold them back.
                if let Err(e) = s.set_nodelay(true) {
                    return self.mark_down(i, now, e);
                }
                c.state = ConnState::Connected;
                self.fill(i);
            }
            Err(e) if e.kind() == io::ErrorKind::NotConnected => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) => self.mark_down(i, now, e),
        }
    }

    /// Connection `i` cannot be used: its queued requests fail, it is retried after a backoff.
    fn mark_down(&mut self, i: usize, now: u64, err: io::Error) {
        self.drop_stream(i, Failure::Closed);
        let c = &mut self.conns[i];
        c.state = ConnState::Down {
            retry_at_ns: now + RECONNECT_BACKOFF_MS * 1_000_000,
        };
        c.last_error = Some(err);
        while let Some(p) = c.queued.pop_front() {
            self.rec.on_failure(p.scheduled_ns, Failure::Connect);
            self.outstanding -= 1;
        }
    }

    /// Closes `i`'s socket; requests already written fail with `in_flight_failure`.
    fn drop_stream(&mut self, i: usize, in_flight_failure: Failure) {
        let c = &mut self.conns[i];
        if let Some(mut s) = c.stream.take() {
            // Deregistering a socket about to be closed cannot fail in a way that matters.
            let _ = self.poll.registry().deregister(&mut s);
        }
        while let Some(p) = c.in_flight.pop_front() {
            self.rec.on_failure(p.scheduled_ns, in_flight_failure);
            self.outstanding -= 1;
        }
        c.out.clear();
        c.out_pos = 0;
        c.rlen = 0;
    }

    /// Server closed (or broke) the connection: fail what was in flight and reconnect at once.
    fn reconnect(&mut self, i: usize, now: u64, in_flight_failure: Failure) {
        self.drop_stream(i, in_flight_failure);
        self.open(i, now);
        self.conns[i].last_error = None;
    }

    fn retry_down(&mut self, now: u64) {
        for i in 0..self.conns.len() {
            if let ConnState::Down { retry_at_ns } = self.conns[i].state {
                if now >= retry_at_ns {
                    self.open(i, now);
                    self.conns[i].last_error = None;
                }
            }
        }
    }

    /// Hands a request to the least-loaded usable connection (ties go round-robin).
    fn dispatch(&mut self, p: Pending) {
        let n = self.conns.len();
        let mut best: Option<(usize, usize)> = None;
        for k in 0..n {
            let i = (self.rr + k) % n;
            let c = &self.conns[i];
            if matches!(c.state, ConnState::Down { .. }) {
                continue;
            }
            let load = c.load();
            let better = match best {
                None => true,
                Some((_, l)) => load < l,
            };
            if better {
                best = Some((i, load));
                if load == 0 {
                    break;
                }
            }
        }
        self.rr = (self.rr + 1) % n;
        let Some((i, _)) = best else {
            self.rec.on_failure(p.scheduled_ns, Failure::Connect);
            return;
        };
        self.outstanding += 1;
        self.conns[i].queued.push_back(p);
        self.fill(i);
    }

    /// Moves queued requests onto the wire buffer while the pipeline has room.
    fn fill(&mut self, i: usize) {
        let c = &mut self.conns[i];
        if c.state != ConnState::Connected {
            return;
        }
        while c.in_flight.len() < self.cfg.pipeline {
            let Some(p) = c.queued.pop_front() else { break };
            self.writer.write(&mut c.out, p.expect, self.data);
            c.in_flight.push_back(p);
            if !c.dirty {
                c.dirty = true;
                self.dirty.push(i);
            }
        }
    }

    fn flush_dirty(&mut self, now: u64) {
        while let Some(i) = self.dirty.pop() {
            self.conns[i].dirty = false;
            self.flush(i, now);
        }
    }

    /// Writes as much of `i`'s buffer as the socket takes.
    fn flush(&mut self, i: usize, now: u64) {
        let c = &mut self.conns[i];
        if c.state != ConnState::Connected {
            return;
        }
        let Some(s) = c.stream.as_mut() else { return };
        while c.out_pos < c.out.len() {
            match s.write(&c.out[c.out_pos..]) {
                Ok(0) => return self.reconnect(i, now, Failure::Closed),
                Ok(n) => c.out_pos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return self.reconnect(i, now, Failure::Closed),
            }
        }
        c.out.clear();
        c.out_pos = 0;
    }

    /// Reads everything available on `i`, completing full responses in order as they arrive.
    fn on_readable(&mut self, i: usize, clock: &MonotonicClock) {
        loop {
            let c = &mut self.conns[i];
            if c.state != ConnState::Connected {
                return;
            }
            let Some(s) = c.stream.as_mut() else { return };
            if c.rbuf.len() - c.rlen < READ_CHUNK_BYTES / 4 {
                // One response is bigger than the free space: grow. The parser caps a response
                // at MAX_RESPONSE_BYTES, and complete responses are consumed after every read,
                // so this stays bounded.
                let grown = c.rbuf.len() * 2;
                c.rbuf.resize(grown, 0);
            }
            let eof = match s.read(&mut c.rbuf[c.rlen..]) {
                Ok(0) => true,
                Ok(n) => {
                    c.rlen += n;
                    false
                }
                Err(e) => match e.kind() {
                    io::ErrorKind::WouldBlock => return,
                    io::ErrorKind::Interrupted => continue,
                    _ => true,
                },
            };
            let done = self.complete_responses(i, clock.now_ns(), eof);
            if done {
                // Framing is lost or the server is done with this connection: requests still
                // in flight on it will never be answered.
                self.reconnect(i, clock.now_ns(), Failure::Closed);
                return;
            }
            self.fill(i);
        }
    }

    /// Checks and records every complete response buffered on `i`. Returns true when the
    /// connection must be closed (peer closed, `Connection: close`, or a framing error).
    fn complete_responses(&mut self, i: usize, now: u64, eof: bool) -> bool {
        let c = &mut self.conns[i];
        let data = self.data;
        let mut start = 0;
        let mut close = eof;
        while start < c.rlen {
            let buf = &c.rbuf[start..c.rlen];
            match parse_response(buf, eof) {
                Ok(Parse::Partial) => break,
                Ok(Parse::Complete(r)) => {
                    let Some(p) = c.in_flight.pop_front() else {
                        // A response nobody asked for: the stream is out of sync.
                        close = true;
                        break;
                    };
                    self.outstanding -= 1;
                    let location = r.location.clone().map(|l| &buf[l]);
                    let verdict = check(p.expect, data, r.status, location);
                    self.rec
                        .on_response(p.scheduled_ns, now, p.expect.kind(), verdict, || {
                            describe_mismatch(p.expect, data, r.status, location)
                        });
                    start += r.len;
                    if r.close {
                        close = true;
                        break;
                    }
                }
                Err(e) => {
                    if let Some(p) = c.in_flight.pop_front() {
                        self.outstanding -= 1;
                        self.rec.on_failure(p.scheduled_ns, Failure::Protocol(e));
                    }
                    close = true;
                    break;
                }
            }
        }
        c.rbuf.copy_within(start..c.rlen, 0);
        c.rlen -= start;
        close
    }

    fn fail_all_outstanding(&mut self, failure: Failure) {
        for c in &mut self.conns {
            for p in c.in_flight.drain(..).chain(c.queued.drain(..)) {
                self.rec.on_failure(p.scheduled_ns, failure);
                self.outstanding -= 1;
            }
        }
    }
}

/// Human description of a wrong answer, for the report's samples.
fn describe_mismatch(
    expect: Expect,
    data: &Dataset,
    status: u16,
    location: Option<&[u8]>,
) -> String {
    let got_loc = location.map_or_else(
        || "(none)".into(),
        |l| String::from_utf8_lossy(l).into_owned(),
    );
    match expect {
        Expect::Link(i) => format!(
            "GET /{}: expected {} {}, got {} {}",
            String::from_utf8_lossy(data.key(i as usize)),
            data.status(i as usize),
            String::from_utf8_lossy(data.url(i as usize)),
            status,
            got_loc
        ),
        Expect::Unknown(seed) => {
            let mut buf = [0u8; shards::link::MAX_KEY_BYTES];
            let n = unknown_key(seed, data, &mut buf);
            format!(
                "GET /{} (unknown key): expected 404, got {} {}",
                String::from_utf8_lossy(&buf[..n]),
                status,
                got_loc
            )
        }
        Expect::Create(_) => format!("POST create: expected 201, got {status}"),
    }
}
