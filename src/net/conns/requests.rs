//! Between bytes in and bytes out: parse the complete requests of a connection's input,
//! answer each at once (health, metrics, a local hit, an LRU hit, a 404) or defer it to its
//! owner (a forwarded lookup, an API request), and fill deferred answers when owners reply.

use super::run::{Parsed, Run, RunEnd, PARSE_AHEAD};
use super::{Conns, PendingKind, Recv, MAX_INBUF_BYTES};
use crate::analytics::combiner::{Click, ClickFields, ClickRule};
use crate::api::domains::{Domains, HostDomain, NotFound};
use crate::api_front::stats_sum::StatsStep;
use crate::api_front::{ApiFront, ApiOp, Step, API_PREFIX};
use crate::base::clock::Clock;
use crate::base::key::InlineKey;
use crate::http::encode::{self, Conn as Persist, Framing, Response};
use crate::http::limits::MAX_PIPELINED_REQUESTS;
use crate::http::location::Reshape;
use crate::http::parse::{parse_request, BadRequest, Expect, Method, ParseError, Request};
use crate::http::status::Status;
use crate::mesh::{Answer, LiveLink, Mesh, RedirectMsg, ReplyTo, RequestPlace, WriteOutcome};
use crate::net::conns::visit::{Visit, VisitorSource};
use crate::owner::Owner;
use crate::route::Route;
use shards::link::RedirectStatus::Found;
use shards::table::SlotHint;

/// What answering requests may use besides the connections: the owner's links (read only),
/// the API's requesting side, the mesh and the clock.
pub struct Env<'a> {
    pub owner: &'a Owner,
    pub api: &'a mut ApiFront,
    pub mesh: &'a mut Mesh,
    pub clock: &'a Clock,
}

impl Conns {
    /// Bytes arrived on `slot`.
    pub(super) fn on_data(&mut self, slot: u32, data: &[u8], env: &mut Env) {
        let now_ms = env.clock.now_ms;
        let c = &mut self.slots[slot as usize];
        if c.is_closing() || c.closes_after_send() {
            return; // We are done reading from this one.
        }
        if c.busy() || !c.inbuf.is_empty() {
            if c.inbuf.len() + data.len() > MAX_INBUF_BYTES {
                // Cannot happen while the pause works (see `MAX_INBUF_BYTES`).
                eprintln!(
                    "core {}: connection input passed {MAX_INBUF_BYTES} bytes despite the pause; closing it",
                    self.me
                );
                return self.begin_close(slot, false, now_ms);
            }
            if c.inbuf.capacity() == 0 {
                c.inbuf = self.pool.get();
                c.deadline_ms = now_ms + self.timeouts.header_ms;
            }
            c.inbuf.extend_from_slice(data);
            if !c.busy() {
                self.process_inbuf(slot, env);
            }
            return self.maybe_pause(slot);
        }
        let used = self.process(slot, data, env);
        let rest = &data[used..];
        let c = &mut self.slots[slot as usize];
        if !rest.is_empty() && !c.closes_after_send() {
            c.inbuf = self.pool.get();
            c.inbuf.extend_from_slice(rest);
            if !c.busy() && c.out.is_empty() {
                // An incomplete request: the header timeout runs from its first byte.
                c.deadline_ms = now_ms + self.timeouts.header_ms;
            }
        }
        self.mark_dirty(slot);
    }

    /// Parses what `inbuf` holds (after a batch was sent, or when more bytes arrived), and
    /// resumes reading if backpressure had paused it and the input is small again.
    pub(super) fn process_inbuf(&mut self, slot: u32, env: &mut Env) {
        let mut inbuf = std::mem::take(&mut self.slots[slot as usize].inbuf);
        let used = self.process(slot, &inbuf, env);
        inbuf.drain(..used);
        if inbuf.is_empty() {
            self.pool.put(&mut inbuf);
        }
        self.slots[slot as usize].inbuf = inbuf;
        if self.slots[slot as usize].recv == Recv::Paused {
            self.arm_recv(slot);
        }
        self.mark_dirty(slot);
    }

    /// For a pipelined run: finds each redirect's domain (kept for its answer) and stored key,
    /// and prefetches the table slots of the keys owned here, then the records the slots
    /// name, so the run's cache misses overlap. A single request skips all of this.
    fn prefetch_run(&mut self, run: &mut Run<'_>, owner: &Owner) {
        if run.len() < 2 {
            return; // Nothing to overlap.
        }
        let store = owner.store();
        let mut found = [(0u32, SlotHint::default()); PARSE_AHEAD];
        let mut n = 0;
        for a in run.items_mut() {
            let Route::Redirect(key) = a.route else {
                continue;
            };
            let domain = self.host_memo.domain_of(&self.domains, a.req.host);
            a.domain = HostDomain::Found(domain);
            let Some(domain) = domain else {
                continue;
            };
            let mut stored = [0u8; shards::link::MAX_STORED_KEY_BYTES];
            let key = shards::link::stored_key_in(domain, key, &mut stored);
            let o = self.router.owner(key);
            if o.core == self.me {
                if let Some(s) = store.prefetch_slot(o.shard, key) {
                    found[n] = (o.shard, s);
                    n += 1;
                }
            }
        }
        for &(shard, s) in &found[..n] {
            store.prefetch_record(shard, s);
        }
    }

    /// Answers the complete requests at the start of `data`; returns the bytes consumed. Runs
    /// of bodiless `GET`/`HEAD` requests (a pipelined client's redirects) are parsed ahead
    /// and prefetched together (`run.rs`); anything else goes one request at a time.
    fn process(&mut self, slot: u32, data: &[u8], env: &mut Env) -> usize {
        if self.congested {
            // Bounded mesh outbox: new requests wait, unparsed, until it drains.
            let c = &mut self.slots[slot as usize];
            if !c.outbox_wait {
                c.outbox_wait = true;
                self.outbox_waiters.push(slot);
                self.tally.held_batches += 1;
            }
            return 0;
        }
        let mut pos = 0;
        let mut answered = 0;
        'batch: while answered < MAX_PIPELINED_REQUESTS && pos < data.len() {
            let most = (MAX_PIPELINED_REQUESTS - answered).min(PARSE_AHEAD);
            let mut run = Run::parse(&data[pos..], most);
            self.prefetch_run(&mut run, env.owner);
            for a in run.items() {
                pos += a.req.head_len;
                answered += 1;
                if !self.answer_one(slot, a, &[], env) {
                    break 'batch;
                }
            }
            match run.end {
                RunEnd::Full => continue,
                RunEnd::Incomplete => break,
                RunEnd::Other => {}
            }
            match self.process_one(slot, &data[pos..], env) {
                Took::Answered { used, more } => {
                    pos += used;
                    answered += 1;
                    if !more {
                        break;
                    }
                }
                Took::Wait => break,
                Took::Rest => {
                    pos = data.len();
                    break;
                }
            }
        }
        if answered > 0 {
            // Something was answered: the idle clock restarts once the batch is sent.
            self.slots[slot as usize].deadline_ms = 0;
        }
        pos
    }

    /// Parses and answers the one request at the start of `data`, whatever it is.
    fn process_one(&mut self, slot: u32, data: &[u8], env: &mut Env) -> Took {
        let head_only = data.starts_with(b"HEAD ");
        let req = match parse_request(data) {
            Ok(None) => return Took::Wait,
            Ok(Some(req)) => req,
            Err(e) => {
                self.parse_error(slot, e, head_only, env.clock);
                return Took::Rest;
            }
        };
        if req.expect == Expect::Unsupported {
            self.refuse_expectation(slot, env.clock);
            return Took::Rest;
        }
        let (total, decoded) = match frame(&req, &data[req.head_len..]) {
            Ok(framed) => framed,
            Err(err) => {
                self.parse_error(slot, err, head_only, env.clock);
                return Took::Rest;
            }
        };
        if data.len() < total {
            // The body is still on its way; a client that asked to be told first is.
            if req.expect == Expect::Continue && self.answer_expect(slot, &req, env) {
                return Took::Rest;
            }
            return Took::Wait;
        }
        let body = match &decoded {
            Some(b) => &b[..],
            None => &data[req.head_len..total],
        };
        let more = self.answer_one(slot, &Parsed::new(req), body, env);
        Took::Answered { used: total, more }
    }

    /// Answers one complete request; `false` when the requests after it must wait (the
    /// connection closes after it, or it is unsafe and still being carried out).
    fn answer_one(&mut self, slot: u32, p: &Parsed<'_>, body: &[u8], env: &mut Env) -> bool {
        let req = &p.req;
        self.slots[slot as usize].continue_sent = false;
        let persist = if self.draining {
            Persist::Close
        } else {
            Persist::for_request(req)
        };
        let deferred_before = self.slots[slot as usize].answers.len();
        self.handle(slot, p, persist, body, env);
        if !persist.keep_alive() {
            self.slots[slot as usize].close_after_send();
            return false;
        }
        // RFC 9112 section 9.3.2: only a run of safe requests may be processed in parallel.
        // Requests after an unsafe one that is still being carried out wait in `inbuf` until
        // its answer has been sent, so they see its effect.
        req.method.is_safe() || self.slots[slot as usize].answers.len() == deferred_before
    }

    /// `Expect: 100-continue` with the body not yet sent (RFC 9110 section 10.1.1): if the head
    /// alone decides a refusal (an API request with a bad path, method, key or size), answer it
    /// now and close (returns `true`: the rest of the input is dropped); otherwise send
    /// `100 Continue` once, to HTTP/1.1 clients only, after the answers before it.
    fn answer_expect(&mut self, slot: u32, req: &Request<'_>, env: &mut Env) -> bool {
        let c = &mut self.slots[slot as usize];
        if c.continue_sent || req.minor_version == 0 {
            return false;
        }
        if c.out.capacity() == 0 {
            c.out = self.pool.get();
        }
        if req.path.starts_with(API_PREFIX) {
            if let Err(refusal) = env.api.check_head(req) {
                let f = Framing {
                    head_only: req.method == Method::Head,
                    conn: Persist::Close,
                    date: &env.clock.date,
                    cors: env.api.cors_for(req),
                };
                refusal.encode(&mut c.out, f);
                c.close_after_send();
                self.mark_dirty(slot);
                return true;
            }
        }
        c.out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
        c.continue_sent = true;
        self.mark_dirty(slot);
        false
    }

    /// An `Expect` other than `100-continue`: 417, then close (a body may follow).
    fn refuse_expectation(&mut self, slot: u32, clock: &Clock) {
        let c = &mut self.slots[slot as usize];
        if c.out.capacity() == 0 {
            c.out = self.pool.get();
        }
        let (st, ct) = (Status::ExpectationFailed, Some("text/plain"));
        let body = b"only Expect: 100-continue is supported\n";
        encode::encode_response(
            &mut c.out,
            &Response {
                status: st,
                headers: &[],
                content_type: ct,
                body,
            },
            Framing::plain(false, Persist::Close, &clock.date),
        );
        c.close_after_send();
    }

    /// A request that cannot be parsed: its error answer, then close. The method is known
    /// when the request line got that far (`head`): a HEAD request's answer has no body.
    fn parse_error(&mut self, slot: u32, e: ParseError, head: bool, clock: &Clock) {
        let c = &mut self.slots[slot as usize];
        if c.out.capacity() == 0 {
            c.out = self.pool.get();
        }
        if e == ParseError::PayloadTooLarge {
            // Only bodies are large, and only the API takes bodies: answer in its format.
            let p = crate::api::problem::Problem::payload_too_large(
                crate::http::limits::MAX_BODY_BYTES,
            );
            let f = Framing::plain(head, Persist::Close, &clock.date);
            crate::api_front::encode_problem(&mut c.out, &p, &[], f);
        } else {
            encode::encode_error(&mut c.out, e, head, &clock.date);
        }
        c.close_after_send();
    }

    /// Answers one request, or defers it to its owner: the handler `route` names.
    fn handle(&mut self, slot: u32, p: &Parsed<'_>, persist: Persist, body: &[u8], env: &mut Env) {
        let (req, route) = (&p.req, p.route);
        let date = &env.clock.date;
        let c = &mut self.slots[slot as usize];
        if c.out.capacity() == 0 {
            c.out = self.pool.get();
        }
        let head = req.method == Method::Head;
        self.tally.requests += 1;
        if c.batch_requests == 0 {
            c.batch_started_us = env.clock.now_us.max(1);
        }
        c.batch_requests += 1;
        let out = &mut c.out;
        let f = Framing {
            head_only: head,
            conn: persist,
            date,
            cors: None,
        };
        match route {
            Route::Redirect(key) => self.redirect(slot, req, (key, b""), p.domain, persist, env),
            Route::RedirectExtra { key, extra } => {
                self.redirect_extra(slot, p, (key, extra), persist, env);
            }
            Route::NotImplemented => {
                let r = Response {
                    status: Status::NotImplemented,
                    headers: &[],
                    content_type: Some("text/plain"),
                    body: b"method not implemented\n",
                };
                // A method it does not know is not a HEAD: the body goes.
                encode::encode_response(
                    out,
                    &r,
                    Framing {
                        head_only: false,
                        ..f
                    },
                );
            }
            Route::Options(allow) => {
                let r = Response {
                    status: Status::NoContent,
                    headers: &[("Allow", allow)],
                    content_type: None,
                    body: b"",
                };
                encode::encode_response(out, &r, f);
            }
            Route::Preflight => env.api.preflight(out, req, f),
            Route::MethodNotAllowed(allow) => encode::encode_method_not_allowed(out, allow, f),
            Route::NotFound => {
                self.orphan_visit(slot, req, env.clock.now_s);
                not_found(&self.domains, req, &mut self.slots[slot as usize].out, f);
            }
            Route::Metrics => self.answer_metrics(slot, f),
            Route::Probe | Route::OpenApi | Route::StatsPage => {
                answer_read_only((&self.shared, &self.blocklist), route, req, out, f)
            }
            Route::Robots => self.robots(slot, req, p.domain, persist, env),
            Route::Api | Route::ShlinkApi => self.hand_to_api(slot, req, persist, body, env),
        }
    }

    /// `/metrics`. Cold path: formatting allocates; the allocation counter shows it honestly.
    fn answer_metrics(&mut self, slot: u32, f: Framing<'_>) {
        self.shared.counters[self.me].publish(&self.tally, self.live);
        let text = crate::metrics::render(&self.shared);
        let r = Response {
            status: Status::Ok,
            headers: &[],
            content_type: Some("application/openmetrics-text; version=1.0.0; charset=utf-8"),
            body: text.as_bytes(),
        };
        encode::encode_response(&mut self.slots[slot as usize].out, &r, f);
    }

    /// An API request (native or Shlink's): the API side answers it, or defers it to owners
    /// with a place in the connection's answers.
    fn hand_to_api(
        &mut self,
        slot: u32,
        req: &Request<'_>,
        persist: Persist,
        body: &[u8],
        env: &mut Env,
    ) {
        self.tally.api_requests += 1;
        let c = &mut self.slots[slot as usize];
        let (out, answers, gen, me) = (&mut c.out, &mut c.answers, c.gen, self.me as u16);
        let cors = env.api.cors_for(req);
        let mut defer = |out: &[u8], op: ApiOp| {
            let kind = PendingKind::Api(Box::new(op));
            let seq = answers.defer(out, (false, persist, cors), kind);
            ReplyTo::request(me, slot, gen, seq)
        };
        let (clock, mesh) = (env.clock, &mut *env.mesh);
        if req
            .path
            .starts_with(crate::api_front::shlink::SHLINK_PREFIX)
        {
            return env
                .api
                .handle_shlink(out, &mut defer, req, body, persist, clock, mesh);
        }
        env.api
            .handle(out, &mut defer, req, body, persist, clock, mesh)
    }

    /// `/{key}{extra}`: a redirect, or 404, as the `Host`'s domain's extra-path mode (else
    /// `--extra-path`) says.
    fn redirect_extra(
        &mut self,
        slot: u32,
        p: &Parsed<'_>,
        (key, extra): (&[u8], &[u8]),
        persist: Persist,
        env: &mut Env,
    ) {
        let req = &p.req;
        let domain = p
            .domain
            .resolve(&mut self.host_memo, &self.domains, req.host);
        let rules = match domain {
            Some(d) => self.domains.visits(d).over(self.visit_rules),
            None => self.visit_rules,
        };
        match rules.extra(extra) {
            Some(extra) => {
                let found = HostDomain::Found(domain);
                self.redirect(slot, req, (key, extra), found, persist, env);
            }
            None => {
                self.orphan_visit(slot, req, env.clock.now_s);
                let f = Framing::plain(req.method == Method::Head, persist, &env.clock.date);
                not_found(&self.domains, req, &mut self.slots[slot as usize].out, f);
            }
        }
    }

    /// A GET that reached no link but a short code's (the base URL `/`, or a path that
    /// matched nothing): counted with the 404s and, with the visit log on, carried as an
    /// orphan visit (Shlink's `base_url` or `regular_404`) keyed by the domain's empty key or
    /// the path. Not the redirect path: a 404's.
    fn orphan_visit(&mut self, slot: u32, req: &Request<'_>, now_s: u64) {
        use shards::clicks::visits::{Orphan, MAX_ORPHAN_PATH_BYTES};
        let Some(k) = self.clicks.as_mut().filter(|_| req.method == Method::Get) else {
            return;
        };
        let Some(domain) = self.domains.domain_of(req.host) else {
            return;
        };
        let (kind, path) = match req.path {
            b"/" => (Orphan::BaseUrl, &b""[..]),
            p => {
                // Request targets are visible ASCII (RFC 9112); the key keeps at most a
                // bounded prefix of them.
                let n = p
                    .iter()
                    .take(MAX_ORPHAN_PATH_BYTES)
                    .take_while(|b| b.is_ascii_graphic())
                    .count();
                (Orphan::Regular404, &p[..n])
            }
        };
        let mut stored = [0u8; shards::link::MAX_STORED_KEY_BYTES];
        let key = shards::link::stored_key_in(domain, path, &mut stored);
        let c = &self.slots[slot as usize];
        let fields = ClickFields {
            peer: c.peer,
            forwarded_for: req.forwarded_for,
            user_agent: req.user_agent,
            referer: req.referer,
        };
        let click = k.take(self.client_ip, &fields, now_s);
        k.orphan(kind, key, Some(&click), now_s);
    }

    /// `/robots.txt` of the `Host`'s domain (`api_front::robots`): kept text, or a deferred
    /// walk of its crawlable links. A host with no keyspace allows nothing.
    fn robots(
        &mut self,
        slot: u32,
        req: &Request<'_>,
        domain: HostDomain,
        persist: Persist,
        env: &mut Env,
    ) {
        let head = req.method == Method::Head;
        let domain = domain.resolve(&mut self.host_memo, &self.domains, req.host);
        let c = &mut self.slots[slot as usize];
        let (out, answers, gen, me) = (&mut c.out, &mut c.answers, c.gen, self.me as u16);
        let f = Framing::plain(head, persist, &env.clock.date);
        let Some(domain) = domain else {
            return crate::api_front::robots::answer(out, crate::api_front::robots::ROBOTS_TXT, f);
        };
        let mut defer = |out: &[u8], op: ApiOp| {
            let seq = answers.defer(out, (head, persist, None), PendingKind::Api(Box::new(op)));
            ReplyTo::request(me, slot, gen, seq)
        };
        let now_s = env.clock.now_s;
        env.api
            .robots(out, &mut defer, domain, (f, now_s), &mut *env.mesh);
    }

    /// A redirect: the click's context taken (a GET with analytics on), then the lookup.
    #[inline]
    fn redirect(
        &mut self,
        slot: u32,
        req: &Request<'_>,
        (key, extra): (&[u8], &[u8]),
        domain: HostDomain,
        persist: Persist,
        env: &mut Env,
    ) {
        let head = req.method == Method::Head;
        // The keyspace is the `Host`'s domain: its stored key carries the domain's number
        // (`shards::link::stored_key`), built on the stack; the default domain's is the key.
        let mut stored = [0u8; shards::link::MAX_STORED_KEY_BYTES];
        let domain = domain.resolve(&mut self.host_memo, &self.domains, req.host);
        let key = match domain {
            Some(domain) => shards::link::stored_key_in(domain, key, &mut stored),
            None => {
                // `--unknown-host not-found`: no keyspace, so no link and no click.
                let f = Framing::plain(head, persist, &env.clock.date);
                self.tally.not_found += 1;
                return encode::encode_not_found(&mut self.slots[slot as usize].out, f);
            }
        };
        let c = &self.slots[slot as usize];
        // HEAD is never a click (RFC 9110: a HEAD is no visit); a GET's context is taken now,
        // while its header fields are at hand, and counted only if it is answered with a
        // redirect.
        let ctx = match &mut self.clicks {
            Some(k) if !head => {
                let fields = ClickFields {
                    peer: c.peer,
                    forwarded_for: req.forwarded_for,
                    user_agent: req.user_agent,
                    referer: req.referer,
                };
                Some(k.take(self.client_ip, &fields, env.clock.now_s))
            }
            _ => None,
        };
        let visit = Visit {
            reshape: self.visit_rules.reshape(extra, req.query),
            user_agent: req.user_agent.unwrap_or_default(),
            accept_language: req.accept_language.unwrap_or_default(),
            forwarded_for: req.forwarded_for.unwrap_or_default(),
        };
        self.lookup(slot, key, (head, persist), (ctx, visit), env);
    }

    /// The redirect fast path: a local table hit, or an LRU hit for a foreign key, answer at
    /// once; anything else foreign goes to its owner.
    #[inline]
    fn lookup(
        &mut self,
        slot: u32,
        key: &[u8],
        (head, persist): (bool, Persist),
        (ctx, visit): (Option<Click>, Visit<'_>),
        env: &mut Env,
    ) {
        let clock = env.clock;
        let now_s = clock.now_s;
        let owner = self.router.owner(key);
        let c = &mut self.slots[slot as usize];
        let mut counted = Counted {
            visitors: (&self.visitors, c.peer),
            tally: &mut self.tally,
            clicks: &mut self.clicks,
            domains: &self.domains,
            blocklist: &self.blocklist,
            verdicts: &mut self.verdicts,
            forward_default: self.visit_rules.forward_query,
        };
        if owner.core == self.me {
            let answer = env.owner.local_answer(owner.shard, key, now_s);
            // Fleet mode: a miss here is asked of the database, through this core's owner
            // role like another core's lookup (`Owner::on_lookup`), so it is deferred; so is
            // a visit of a link with a visit limit, which the owner role counts durably.
            let limited = answer.as_ref().is_some_and(Answer::limited);
            if !limited && (answer.is_some() || !env.owner.reads_through()) {
                // The owner's current tables are always readable here.
                let found = answer.as_ref().and_then(|a| a.readable(&self.view));
                debug_assert!(
                    found.is_some() || answer.is_none(),
                    "a current table was retired"
                );
                return counted.answer(
                    &mut c.out,
                    found,
                    key,
                    (head, persist),
                    (ctx, visit),
                    clock,
                );
            }
        } else if let Some(a) = self.lru.get(key) {
            match a.readable(&self.view) {
                Some(found) if !a.expired(now_s) => {
                    counted.tally.lru_hits += 1;
                    let found = Some(found);
                    return counted.answer(
                        &mut c.out,
                        found,
                        key,
                        (head, persist),
                        (ctx, visit),
                        clock,
                    );
                }
                Some(_) => {
                    self.lru.remove(key);
                    return counted.answer(
                        &mut c.out,
                        None,
                        key,
                        (head, persist),
                        (ctx, visit),
                        clock,
                    );
                }
                // Its table was replaced since: ask the owner again.
                None => drop(self.lru.remove(key)),
            }
        }
        self.forward_lookup(slot, (key, owner.core), (head, persist), (ctx, visit), env);
    }

    /// Defers a lookup in its connection's batch and asks `owner` (this core's own owner role
    /// too, for a fleet-mode miss or a limited link's visit).
    fn forward_lookup(
        &mut self,
        slot: u32,
        (key, owner): (&[u8], usize),
        (head, persist): (bool, Persist),
        (ctx, visit): (Option<Click>, Visit<'_>),
        env: &mut Env,
    ) {
        self.tally.forwarded += 1;
        let c = &mut self.slots[slot as usize];
        let kept = c.answers.keep(&visit);
        let seq = c.answers.defer(
            &c.out,
            (head, persist, None),
            PendingKind::Redirect(ctx, kept),
        );
        let reply = ReplyTo::request(self.me as u16, slot, c.gen, seq);
        let key = InlineKey::new(key).expect("validated keys fit inline");
        let visit = !head;
        env.mesh
            .deliver(owner, RedirectMsg::Lookup { reply, key, visit });
    }

    /// The owner read a key through to the fleet database: fill the request's place. Not
    /// cached (see `RedirectMsg::Fetched`).
    pub fn on_fetched(
        &mut self,
        reply: RequestPlace,
        key: InlineKey,
        fetched: crate::mesh::Fetched,
        clock: &Clock,
    ) {
        let answer = match fetched {
            crate::mesh::Fetched::Found(a) => Some(a),
            crate::mesh::Fetched::Absent => None,
            crate::mesh::Fetched::Unavailable => return self.on_unavailable(reply, clock),
        };
        self.fill_lookup(reply, key, answer, clock)
    }

    /// The link database could not say whether the key exists: 503, never a guessed 404.
    fn on_unavailable(&mut self, reply: RequestPlace, clock: &Clock) {
        let Some(p) = self.waiting(reply) else {
            return; // The connection went away meanwhile.
        };
        let f = p.framing(&clock.date);
        let r = Response {
            status: Status::ServiceUnavailable,
            headers: &[("retry-after", &b"1"[..])],
            content_type: Some("text/plain"),
            body: b"the link database is unreachable; retry\n",
        };
        self.scratch.clear();
        encode::encode_response(&mut self.scratch, &r, f);
        self.fill_answer(reply);
    }

    /// An owner answered a forwarded lookup: cache a live answer, and fill the request's
    /// place in its batch.
    pub fn on_answer(
        &mut self,
        reply: RequestPlace,
        key: InlineKey,
        answer: Option<Answer>,
        clock: &Clock,
    ) {
        // A limited link's answer is never cached: each visit must reach its owner's count.
        if let Some(a) = answer.as_ref().filter(|a| !a.limited()) {
            self.lru.insert(key.as_bytes(), a.clone());
        }
        self.fill_lookup(reply, key, answer, clock)
    }

    /// A lookup's answer (forwarded or read through): count it and fill its place.
    fn fill_lookup(
        &mut self,
        reply: RequestPlace,
        key: InlineKey,
        answer: Option<Answer>,
        clock: &Clock,
    ) {
        let Some(p) = self.waiting(reply) else {
            return; // The connection went away meanwhile.
        };
        let (head, persist) = (p.head, p.persist);
        let (ctx, kept) = match p.kind {
            PendingKind::Redirect(ctx, kept) => (ctx, kept),
            PendingKind::Api(_) => (None, Default::default()),
        };
        self.scratch.clear();
        let c = &self.slots[reply.slot as usize];
        // Answers come in FIFO before any retirement of their table, so they resolve.
        let live = answer.as_ref().filter(|a| !a.expired(clock.now_s));
        let found = live.and_then(|a| a.readable(&self.view));
        let mut counted = Counted {
            visitors: (&self.visitors, c.peer),
            tally: &mut self.tally,
            clicks: &mut self.clicks,
            domains: &self.domains,
            blocklist: &self.blocklist,
            verdicts: &mut self.verdicts,
            forward_default: self.visit_rules.forward_query,
        };
        let visit = c.answers.visit_of(kept);
        counted.answer(
            &mut self.scratch,
            found,
            key.as_bytes(),
            (head, persist),
            (ctx, visit),
            clock,
        );
        self.fill_answer(reply);
    }

    /// An owner answered an API request: encode the answer at its place in the batch (or, for
    /// a generated-key create that collided with an alias, retry with the next ID).
    pub fn on_api_answer(
        &mut self,
        reply: RequestPlace,
        outcome: WriteOutcome,
        api: &mut ApiFront,
        clock: &Clock,
        mesh: &mut Mesh,
    ) {
        let Some(p) = self.waiting(reply) else {
            return; // The connection went away meanwhile.
        };
        let f = p.framing(&clock.date);
        let PendingKind::Api(mut op) =
            std::mem::replace(&mut p.kind, PendingKind::Redirect(None, Default::default()))
        else {
            debug_assert!(false, "an API answer for a redirect");
            return;
        };
        self.scratch.clear();
        let back = ReplyTo::Request {
            core: self.me as u16,
            place: reply,
        };
        match api.on_reply(back, &mut op, outcome, &mut self.scratch, f, mesh) {
            Step::Answered => self.fill_answer(reply),
            Step::Continues => {
                if let Some(p) = self.slots[reply.slot as usize].answers.get_mut(reply.seq) {
                    p.kind = PendingKind::Api(op);
                }
            }
        }
    }

    /// Stats JSON from the aggregators: the answer to the deferred request (in Shlink's shape
    /// for a Shlink request, `ApiFront::shlink_stats_body`; a Shlink list page asks its next
    /// link's totals, `ApiFront::on_list_visits`).
    pub fn on_stats_answer(
        &mut self,
        reply: RequestPlace,
        body: Option<&[u8]>,
        clock: &Clock,
        (api, mesh): (&mut ApiFront, &mut crate::mesh::Mesh),
    ) {
        let me = self.me as u16;
        let Some(p) = self.waiting(reply) else {
            return; // The connection went away meanwhile.
        };
        let f = p.framing(&clock.date);
        let step = match (&mut p.kind, body) {
            (PendingKind::Api(op), Some(b)) => {
                let again = ReplyTo::request(me, reply.slot, reply.gen, reply.seq);
                Some((api.on_stats_body(op, b, again, mesh), op.is_shlink()))
            }
            (_, Some(b)) => Some((StatsStep::Done(b.to_vec()), false)),
            (_, None) => None,
        };
        self.scratch.clear();
        match step {
            Some((StatsStep::Asked, _)) => return,
            Some((StatsStep::Done(body), _)) => {
                crate::api_front::encode_json(&mut self.scratch, &body, f)
            }
            Some((StatsStep::Failed(problem), true)) => {
                api.encode_shlink_problem(&mut self.scratch, &problem, f)
            }
            Some((StatsStep::Failed(problem), false)) => {
                crate::api_front::encode_problem(&mut self.scratch, &problem, &[], f)
            }
            None => {
                let mut p = crate::api::problem::Problem::unavailable(1);
                p.detail = "the fleet database did not answer the stats query in time; retry. \
                            Redirects keep working."
                    .into();
                crate::api_front::encode_problem(&mut self.scratch, &p, &[], f);
            }
        }
        self.fill_answer(reply);
    }

    /// `keywatch` answered a domain edit (Shlink's `PATCH /rest/v3/domains/redirects`).
    pub fn on_domain_edited(
        &mut self,
        done: &crate::node::keywatch::EditDone,
        clock: &Clock,
        api: &ApiFront,
    ) {
        let Some(p) = self.waiting(done.place) else {
            return; // The connection went away meanwhile.
        };
        let f = p.framing(&clock.date);
        self.scratch.clear();
        api.encode_domain_edited(&mut self.scratch, &done.result, f);
        self.fill_answer(done.place);
    }

    /// The deferred request `reply` answers, if its connection is still the one that asked
    /// (not closed, its slot not reused).
    fn waiting(&mut self, reply: RequestPlace) -> Option<&mut super::answers::Pending> {
        let c = self.slots.get_mut(reply.slot as usize)?;
        if !c.is_live() || c.gen != reply.gen {
            return None;
        }
        c.answers.get_mut(reply.seq)
    }

    /// Writes the answer in `scratch` at deferred request `reply`'s place in its batch;
    /// the batch is flushed once nothing is deferred any more.
    fn fill_answer(&mut self, reply: RequestPlace) {
        let c = &mut self.slots[reply.slot as usize];
        let filled = c.answers.fill(&mut c.out, reply.seq, &self.scratch);
        debug_assert!(filled.is_some(), "the caller found it waiting");
        if c.answers.is_empty() {
            self.mark_dirty(reply.slot);
        }
    }

    /// An owner changed `key`: drop any answer for it this core cached.
    pub fn invalidate(&mut self, key: &InlineKey) {
        self.lru.remove(key.as_bytes());
    }

    /// An owner replaced tables: no answer into them is read here again (cached ones resolve
    /// to `None` and are asked for anew). `forget_all`: every cached answer goes too.
    pub fn retire_tables(&mut self, retired: &[(u32, u32)], forget_all: bool) {
        for &(shard, gen) in retired {
            self.view.retire(shard, gen);
        }
        if forget_all {
            self.lru.clear();
        }
    }
}

/// The one place a lookup's answer is encoded and counted, whichever path found it (the
/// owner's memtable or tables, the LRU, a forward): a redirect, or a 404.
struct Counted<'a> {
    tally: &'a mut crate::metrics::Tally,
    clicks: &'a mut Option<crate::analytics::combiner::Combiner>,
    domains: &'a crate::api::domains::Domains,
    blocklist: &'a crate::api::blocklist::Blocklist,
    verdicts: &'a mut crate::api::blocklist::VerdictMemo,
    /// `--forward-query`: whether a link without its own `forward_query` forwards the
    /// visitor's query.
    forward_default: bool,
    /// Where redirect rules find the visitor's address and country, and the connection's
    /// peer address.
    visitors: (&'a VisitorSource, [u8; 16]),
}

impl Counted<'_> {
    /// Encodes the answer (`found`: status and target, reshaped by the visit) into `out`, and
    /// counts it: a redirect to a GET is a click on `key` (`ctx` is `None` for HEAD), a 404
    /// to a GET a miss.
    #[inline]
    fn answer(
        &mut self,
        out: &mut Vec<u8>,
        found: Option<LiveLink<'_>>,
        key: &[u8],
        (head, persist): (bool, Persist),
        (ctx, visit): (Option<Click>, Visit<'_>),
        clock: &Clock,
    ) {
        match found {
            Some(LiveLink {
                disabled: Some(reason),
                ..
            }) => {
                // Disabled by an admin: the link is kept, its visits get the reason's status.
                self.tally.disabled += 1;
                let f = Framing::plain(head, persist, &clock.date);
                encode::encode_disabled(out, reason, f);
            }
            Some(found) => {
                let status = found.status;
                let (target, rule) = self.target_of(&found, &visit, clock.now_s);
                let reshape = visit.reshape;
                // The visitor's query goes along only if the link (or its domain, or the
                // server) forwards it.
                let reshape = match reshape.query.is_empty() || self.forwards(&found, key) {
                    true => reshape,
                    false => Reshape {
                        query: b"",
                        ..reshape
                    },
                };
                // The blocklist's filter line is fetched while the redirect is encoded; a
                // target it names is answered 451 instead: the link is kept, but sends nobody
                // there, and is no click.
                let begun = self.blocklist.begin(target);
                let mark = out.len();
                let blocked = match reshape.is_none() {
                    true => {
                        encode::encode_redirect(out, status, target, persist, &clock.date);
                        self.blocklist.finish(begun, target, self.verdicts)
                    }
                    false => self.reshaped(out, (status, target), reshape, persist, clock),
                };
                if blocked {
                    out.truncate(mark);
                    self.tally.blocked += 1;
                    let f = Framing::plain(head, persist, &clock.date);
                    return encode::encode_blocked(out, f);
                }
                self.tally.redirects += 1;
                if let (Some(k), Some(ctx)) = (self.clicks.as_mut(), ctx.as_ref()) {
                    k.record(key, ctx, rule, clock.now_s);
                }
            }
            None => {
                self.tally.not_found += 1;
                let f = Framing::plain(head, persist, &clock.date);
                let (domain, _) = shards::link::split_stored_key(key);
                match self
                    .domains
                    .not_found_redirect(domain, NotFound::InvalidShortUrl)
                {
                    Some(url) => {
                        encode::encode_redirect(out, Found, url.as_bytes(), persist, &clock.date)
                    }
                    None => encode::encode_not_found(out, f),
                }
                if let (Some(k), false) = (self.clicks.as_mut(), head) {
                    k.not_found(key, ctx.as_ref(), clock.now_s);
                }
            }
        }
    }
}

impl Counted<'_> {
    /// Where a visit of `found` goes: the first redirect rule it matches, else the link's
    /// target; and which rule that was, for its click.
    #[inline]
    fn target_of<'t>(
        &mut self,
        found: &LiveLink<'t>,
        visit: &Visit<'_>,
        now_s: u64,
    ) -> (&'t [u8], ClickRule) {
        if found.rules.is_empty() {
            return (found.target, ClickRule::NONE);
        }
        let (source, peer) = self.visitors;
        match source.first_match(found.rules, visit, peer, now_s) {
            Some(m) => {
                self.tally.rule_redirects += 1;
                (m.target, ClickRule::matched(m.index))
            }
            None => (found.target, ClickRule::DEFAULT),
        }
    }

    /// Whether a visit of `found` (stored key `key`) forwards its query: the link's own
    /// `forward_query`, else its domain's, else `--forward-query`.
    #[inline]
    fn forwards(&self, found: &LiveLink<'_>, key: &[u8]) -> bool {
        found
            .forward_query
            .or_else(|| {
                let domain = shards::link::split_stored_key(key).0;
                self.domains.visits(domain).forward_query
            })
            .unwrap_or(self.forward_default)
    }

    /// A redirect whose `Location` the visit reshapes (`http::location`): whether the link's
    /// target or the reshaped `Location` is blocked (an appended path can reach a blocked
    /// prefix).
    #[cold]
    #[inline(never)]
    fn reshaped(
        &mut self,
        out: &mut Vec<u8>,
        (status, target): (shards::link::RedirectStatus, &[u8]),
        reshape: Reshape<'_>,
        persist: Persist,
        clock: &Clock,
    ) -> bool {
        let loc =
            encode::encode_redirect_reshaped(out, status, target, reshape, persist, &clock.date);
        self.blocklist.blocks(target, self.verdicts)
            || self.blocklist.blocks(&out[loc], self.verdicts)
    }
}

/// A path with no handler: 404, or on a GET or HEAD the `Host`'s domain's base URL redirect
/// (for `/`) or regular 404 redirect (any other path), if it has one.
fn not_found(domains: &Domains, req: &Request<'_>, out: &mut Vec<u8>, f: Framing<'_>) {
    let case = match req.path {
        b"/" => NotFound::BaseUrl,
        _ => NotFound::Regular404,
    };
    let url = matches!(req.method, Method::Get | Method::Head)
        .then(|| domains.domain_of(req.host))
        .flatten()
        .and_then(|d| domains.not_found_redirect(d, case));
    match url {
        Some(url) => encode::encode_redirect(out, Found, url.as_bytes(), f.conn, f.date),
        None => encode::encode_not_found(out, f),
    }
}

/// The read-only endpoints besides redirects: probes, the OpenAPI document, the stats
/// page. Cold paths: probes format their answers (`probes`); the rest are static bytes.
fn answer_read_only(
    (shared, blocklist): (
        &crate::node::shared::Shared,
        &crate::api::blocklist::Blocklist,
    ),
    route: Route<'_>,
    req: &Request<'_>,
    out: &mut Vec<u8>,
    f: Framing<'_>,
) {
    match route {
        Route::Probe => {
            // Cold path: probes format their answers (`probes`).
            let a = crate::node::probes::answer(req.path, req.query, shared, blocklist)
                .expect("a probe path");
            let r = Response {
                status: if a.ok {
                    Status::Ok
                } else {
                    Status::ServiceUnavailable
                },
                headers: &[],
                content_type: Some(if a.json {
                    "application/json"
                } else {
                    "text/plain"
                }),
                body: &a.body,
            };
            encode::encode_response(out, &r, f);
        }
        Route::OpenApi => {
            let r = Response {
                status: Status::Ok,
                headers: &[],
                content_type: Some("application/json"),
                body: &shared.openapi_json[..],
            };
            encode::encode_response(out, &r, f);
        }
        Route::StatsPage => match crate::analytics::page::asset(req.path) {
            // Cold path: the stats page and its assets (static bytes).
            Some((ct, body)) => {
                let headers = &crate::analytics::page::headers();
                let r = Response {
                    status: Status::Ok,
                    headers,
                    content_type: Some(ct),
                    body,
                };
                encode::encode_response(out, &r, f);
            }
            None => encode::encode_not_found(out, f),
        },
        _ => debug_assert!(false, "not a read-only endpoint: {route:?}"),
    }
}

/// What `Conns::process_one` did with the request at the start of its input.
enum Took {
    /// Answered (or deferred) it, which took `used` bytes; `more`: the requests after it may
    /// be answered now.
    Answered { used: usize, more: bool },
    /// It is not complete yet: wait for more bytes.
    Wait,
    /// It was refused and the connection closes: the rest of the input is dropped.
    Rest,
}

/// The bytes a request takes (`usize::MAX` while its chunked body is incomplete) and its
/// decoded body if chunked; `after_head` is the input after its head. A chunked body is framed
/// by its own last chunk (`http::chunked`, API path only).
fn frame(req: &Request<'_>, after_head: &[u8]) -> Result<(usize, Option<Vec<u8>>), ParseError> {
    if !req.chunked {
        return Ok((req.head_len + req.content_length, None));
    }
    match crate::http::chunked::decode(after_head) {
        Ok(Some((n, body))) => Ok((req.head_len + n, Some(body))),
        Ok(None) => Ok((usize::MAX, None)),
        Err(crate::http::chunked::ChunkedError::Syntax) => {
            Err(ParseError::BadRequest(BadRequest::Chunked))
        }
        Err(crate::http::chunked::ChunkedError::TooLarge) => Err(ParseError::PayloadTooLarge),
    }
}
