//! The API on the core loop: the requesting side (auth, rate limit, validation, key choice,
//! routing to the owner, encoding the answer) and the owner side (conditional insert, patch,
//! delete, read; durability through the log; LRU invalidation; idempotency flights).
//!
//! Every step runs on exactly one core and is a plain method on [`State`]; cross-core steps are
//! mesh messages, so nothing here takes a lock either. This is not the redirect hot path:
//! allocation is fine here.

use crate::api::idempotency::{
    request_hash, Begin, IdemScope, Outcome as IdemOutcome, WaiterToken,
};
use crate::api::problem::{Problem, PROBLEM_CONTENT_TYPE};
use crate::api::request::{
    link_json, parse_create, parse_patch, CreateRequest, ExpiryUpdate, MAX_REQUEST_BODY_BYTES,
};
use crate::cache::InlineKey;
use crate::conns::{ApiOp, PendingKind};
use crate::core::State;
use crate::http::encode::{self, Conn as Persist};
use crate::http::parse::{Method, Request};
use crate::http::status::Status;
use crate::mesh::{LinkInfo, MeshMsg, ReplyTo, WriteOutcome, WriteReq};
use crate::writes::{Durable, MemEntry, Then};
use shards::alloc::NextIdError;
use shards::log::LogOpRef;
use std::sync::Arc;
use std::time::Instant;

/// A planned `Put`: the new link, its generated ID, the key to invalidate on other cores, and
/// how to report it.
type Planned = (
    LinkInfo,
    u64,
    Option<InlineKey>,
    fn(LinkInfo) -> WriteOutcome,
);

/// Prefix of every API path.
pub const API_PREFIX: &[u8] = b"/api/";
const URLS: &[u8] = b"/api/v1/urls";

/// Generated-key creates that hit an existing key (a custom alias took it) retry with the next
/// ID this many times before giving up with 503.
pub const MAX_CREATE_TRIES: u8 = 8;

/// `ReplyTo::slot` of answers addressed to an idempotency flight rather than a connection.
pub const IDEM_SLOT: u32 = u32::MAX;

/// A create waiting for an ID range (the segment buffer was empty).
pub struct IdWaiter {
    pub reply: ReplyTo,
    pub req: Box<CreateRequest>,
    pub created_at_s: u64,
    pub deadline: Instant,
    pub tries: u8,
}

/// An idempotent create in progress on its scope's owner.
pub struct Flight {
    pub scope: IdemScope,
    pub hash: crate::api::idempotency::RequestHash,
    pub origin: ReplyTo,
    pub req: Box<CreateRequest>,
    pub created_at_s: u64,
}

impl State {
    // ----- requesting side -------------------------------------------------------------------

    /// Answers or routes an API request. `body` is the complete request body.
    pub(crate) fn handle_api(
        &mut self,
        slot: u32,
        req: &Request<'_>,
        body: &[u8],
        persist: Persist,
    ) {
        let path = req.path;
        let (collection, key) = if path == URLS {
            (true, None)
        } else if let Some(k) = path.strip_prefix(URLS).and_then(|r| r.strip_prefix(b"/")) {
            (false, Some(k))
        } else {
            let c = &mut self.conns[slot as usize];
            let head = req.method == Method::Head;
            return encode_problem(
                &mut c.out,
                &Problem::not_found(),
                &[],
                head,
                persist,
                &self.date,
            );
        };
        let allowed = if collection {
            "POST"
        } else {
            "GET, PATCH, DELETE"
        };
        let method_ok = match req.method {
            Method::Post => collection,
            Method::Get | Method::Patch | Method::Delete => !collection,
            _ => false,
        };
        if !method_ok {
            let c = &mut self.conns[slot as usize];
            return encode_problem(
                &mut c.out,
                &Problem::method_not_allowed(),
                &[("Allow", allowed.as_bytes())],
                req.method == Method::Head,
                persist,
                &self.date,
            );
        }
        // The auth scheme is case-insensitive (RFC 9110 section 11.1).
        let Some(key_id) = req
            .authorization
            .filter(|a| a.len() > 7 && a[..7].eq_ignore_ascii_case(b"bearer "))
            .and_then(|a| self.api.keys.verify(a[7..].trim_ascii()))
        else {
            let c = &mut self.conns[slot as usize];
            return encode_problem(
                &mut c.out,
                &Problem::unauthorized(),
                &[("WWW-Authenticate", b"Bearer")],
                false,
                persist,
                &self.date,
            );
        };
        if body.len() > MAX_REQUEST_BODY_BYTES {
            return self.api_problem(
                slot,
                Problem::payload_too_large(MAX_REQUEST_BODY_BYTES),
                persist,
            );
        }
        let now_s = self.now_s;
        if collection {
            if let Err(ra) = self.api.ratelimit.check(key_id, Instant::now()) {
                return self.api_problem(slot, ra.into(), persist);
            }
            let cr = match parse_create(body, now_s) {
                Ok(cr) => cr,
                Err(p) => return self.api_problem(slot, p, persist),
            };
            let idem = match req.idempotency_key {
                Some(h) => match IdemScope::new(key_id, h) {
                    Ok(s) => Some(s),
                    Err(p) => return self.api_problem(slot, p, persist),
                },
                None => None,
            };
            let reply = self.push_api_pending(
                slot,
                persist,
                ApiOp::Create {
                    req: Box::new(cr.clone()),
                    created_at_s: now_s,
                    tries: 0,
                },
            );
            match idem {
                Some(scope) => {
                    let hash = request_hash(&cr);
                    let owner = self.router.owner(scope_string(&scope).as_bytes()).core;
                    self.deliver(
                        owner,
                        MeshMsg::IdemCreate {
                            reply,
                            scope,
                            hash,
                            req: Box::new(cr),
                            created_at_s: now_s,
                        },
                    );
                }
                None => self.start_create(reply, Box::new(cr), now_s, 0),
            }
            return;
        }
        let key = key.expect("item path has a key");
        if shards::link::validate_key(key).is_err() {
            return self.api_problem(slot, Problem::not_found(), persist);
        }
        let ikey = InlineKey::new(key).expect("validated keys fit inline");
        let (op, wreq) = match req.method {
            Method::Get => (ApiOp::Get, WriteReq::Get { key: ikey }),
            Method::Delete => (ApiOp::Delete, WriteReq::Delete { key: ikey }),
            _ => {
                let p = match parse_patch(body, now_s) {
                    Ok(p) => p,
                    Err(p) => return self.api_problem(slot, p, persist),
                };
                (
                    ApiOp::Patch,
                    WriteReq::Patch {
                        key: ikey,
                        target: p.long_url.map(Arc::from),
                        expiry: p.expiry,
                        status: p.redirect_status,
                    },
                )
            }
        };
        let reply = self.push_api_pending(slot, persist, op);
        let owner = self.router.owner(key).core;
        self.deliver(owner, MeshMsg::Write { reply, req: wreq });
    }

    /// Picks the key (alias, or the next generated ID's key) and sends the create to its owner.
    pub(crate) fn start_create(
        &mut self,
        reply: ReplyTo,
        req: Box<CreateRequest>,
        created_at_s: u64,
        tries: u8,
    ) {
        let (key, id) = match &req.custom_alias {
            Some(a) => (InlineKey::new(a.as_bytes()).expect("validated alias"), 0),
            None => match self.next_generated_key() {
                Ok(k) => k,
                Err(NextIdError::NeedRange { deadline }) => {
                    self.request_range();
                    self.api.id_waiters.push_back(IdWaiter {
                        reply,
                        req,
                        created_at_s,
                        deadline,
                        tries,
                    });
                    return;
                }
                Err(NextIdError::Exhausted) => {
                    return self.deliver(
                        reply.core as usize,
                        MeshMsg::WriteDone {
                            reply,
                            outcome: WriteOutcome::Busy,
                        },
                    );
                }
            },
        };
        let owner = self.router.owner(key.as_bytes()).core;
        // A create on behalf of an idempotency flight carries its scope to the key's owner.
        let idem = (reply.slot == IDEM_SLOT && reply.core as usize == self.me)
            .then(|| self.api.flights.get(&reply.seq))
            .flatten()
            .map(|f| Box::new((scope_string(&f.scope), f.hash.0)));
        let wreq = WriteReq::Create {
            key,
            target: Arc::from(req.long_url.as_str()),
            status: req.redirect_status,
            expires_at_s: req.expires_at_s.unwrap_or(0),
            created_at_s,
            id,
            idem,
        };
        self.deliver(owner, MeshMsg::Write { reply, req: wreq });
    }

    /// The next generated key and its ID, skipping the (astronomically rare) IDs whose key is
    /// a reserved word such as `healthz`.
    fn next_generated_key(&mut self) -> Result<(InlineKey, u64), NextIdError> {
        loop {
            let id = self.api.segments.next_id(Instant::now())?;
            let key = self.api.keygen.key_for(id);
            let reserved =
                std::str::from_utf8(&key).is_ok_and(crate::api::request::is_reserved_alias);
            if !reserved {
                return Ok((InlineKey::new(&key).expect("7 bytes"), id));
            }
        }
    }

    /// Asks the allocator for a range if the segment buffer wants one.
    pub(crate) fn request_range(&mut self) {
        let now = Instant::now();
        if self.api.segments.wants_prefetch(now) {
            let len = self.api.segments.request_len();
            self.api.segments.loading_started();
            if self.api.alloc.request(len).is_err() {
                // The allocator thread is gone: back off like any failed load.
                self.api.segments.on_load_failed(now);
            }
        }
    }

    /// Takes allocator replies and serves creates that waited for an ID.
    pub(crate) fn poll_allocator(&mut self) {
        let now = Instant::now();
        while let Some(r) = self.api.alloc.try_recv() {
            if let Err(e) = &r {
                eprintln!("core {}: ID range allocation failed: {e}", self.me);
            }
            self.api.segments.on_reply(now, r);
        }
        self.request_range();
        let n = self.api.id_waiters.len();
        for _ in 0..n {
            let Some(w) = self.api.id_waiters.pop_front() else {
                break;
            };
            if self.api.segments.remaining() > 0 {
                self.start_create(w.reply, w.req, w.created_at_s, w.tries);
            } else if now >= w.deadline || self.api.segments.is_exhausted() {
                self.deliver(
                    w.reply.core as usize,
                    MeshMsg::WriteDone {
                        reply: w.reply,
                        outcome: WriteOutcome::Busy,
                    },
                );
            } else {
                self.api.id_waiters.push_back(w);
            }
        }
    }

    /// Registers a pending API answer on the connection and returns its reply address.
    fn push_api_pending(&mut self, slot: u32, persist: Persist, op: ApiOp) -> ReplyTo {
        let c = &mut self.conns[slot as usize];
        let seq = c
            .answers
            .defer(&c.out, false, persist, PendingKind::Api(Box::new(op)));
        ReplyTo {
            core: self.me as u16,
            slot,
            gen: c.gen,
            seq,
        }
    }

    fn api_problem(&mut self, slot: u32, p: Problem, persist: Persist) {
        let c = &mut self.conns[slot as usize];
        encode_problem(&mut c.out, &p, &[], false, persist, &self.date);
    }

    /// Encodes the answer to an API request whose owner replied.
    pub(crate) fn api_answer(
        &mut self,
        op: &mut ApiOp,
        outcome: WriteOutcome,
        persist: Persist,
        out: &mut Vec<u8>,
    ) -> Option<()> {
        let public = self.api.public_url.clone();
        let json = |info: &LinkInfo| {
            link_json(
                std::str::from_utf8(info.key.as_bytes()).unwrap_or(""),
                &public,
                &info.target,
                info.created_at_s,
                (info.expires_at_s != 0).then_some(info.expires_at_s),
                info.status,
            )
        };
        let problem = |out: &mut Vec<u8>, p: Problem, date: &crate::http::date::DateCache| {
            encode_problem(out, &p, &[], false, persist, date)
        };
        const JSON: Option<&str> = Some("application/json");
        match (op, outcome) {
            (ApiOp::Create { .. }, WriteOutcome::Created(info) | WriteOutcome::Found(info)) => {
                encode::encode_response(
                    out,
                    Status::Created,
                    &[],
                    JSON,
                    &json(&info),
                    false,
                    persist,
                    &self.date,
                )
            }
            (ApiOp::Create { req, tries, .. }, WriteOutcome::Exists) => {
                if req.custom_alias.is_some() {
                    problem(out, Problem::alias_taken(), &self.date);
                } else if *tries + 1 < MAX_CREATE_TRIES {
                    // A custom alias holds this generated key: take the next ID (not an answer yet).
                    *tries += 1;
                    return None;
                } else {
                    problem(out, Problem::unavailable(1), &self.date);
                }
            }
            (_, WriteOutcome::Found(info) | WriteOutcome::Updated(info)) => {
                encode::encode_response(
                    out,
                    Status::Ok,
                    &[],
                    JSON,
                    &json(&info),
                    false,
                    persist,
                    &self.date,
                )
            }
            (_, WriteOutcome::Created(info)) => encode::encode_response(
                out,
                Status::Created,
                &[],
                JSON,
                &json(&info),
                false,
                persist,
                &self.date,
            ),
            (_, WriteOutcome::Deleted) => encode::encode_response(
                out,
                Status::NoContent,
                &[],
                None,
                b"",
                true,
                persist,
                &self.date,
            ),
            (_, WriteOutcome::NotFound | WriteOutcome::Exists) => {
                problem(out, Problem::not_found(), &self.date)
            }
            (_, WriteOutcome::WriteInProgress) => {
                let mut p = Problem::unavailable(1);
                p.detail = "another change to this link is being made durable; retry".into();
                problem(out, p, &self.date)
            }
            (_, WriteOutcome::StorageFailed) => {
                let mut p = Problem::insufficient_storage();
                p.detail = "the write could not be made durable (log write or fsync failed); nothing was saved. Redirects keep working; creates resume after a restart.".into();
                problem(out, p, &self.date)
            }
            (_, WriteOutcome::IdemMismatch) => {
                problem(out, Problem::idempotency_mismatch(), &self.date)
            }
            (_, WriteOutcome::Busy) => {
                let mut p = Problem::unavailable(1);
                p.detail = if self.api.segments.is_exhausted() {
                    "the key space is exhausted: no more generated keys can be allocated".into()
                } else {
                    "no key could be allocated in time (allocation authority unavailable or too many requests in flight); retry".into()
                };
                problem(out, p, &self.date)
            }
        }
        Some(())
    }

    /// Routes a message to `core`, or to this core's own inbox.
    pub(crate) fn deliver(&mut self, core: usize, msg: MeshMsg) {
        if core == self.me {
            self.self_inbox.push_back(msg);
        } else {
            self.mesh.send(core, msg);
        }
    }

    // ----- owner side ------------------------------------------------------------------------

    /// The link `key` as the API sees it, if live.
    fn link_info(&self, shard: u32, key: &InlineKey) -> Option<LinkInfo> {
        if let Some(m) = self.writes.get(key.as_bytes()) {
            return m
                .filter(|i| i.expires_at_s == 0 || self.now_s < i.expires_at_s)
                .cloned();
        }
        let l = self.store.get_ref(shard, key.as_bytes())?;
        if l.expires_at_s != 0 && self.now_s >= l.expires_at_s {
            return None;
        }
        Some(LinkInfo {
            key: *key,
            target: Arc::from(l.target),
            status: l.status,
            created_at_s: l.created_at_s,
            expires_at_s: l.expires_at_s,
        })
    }

    /// Executes a write on this core, which owns its key.
    pub(crate) fn on_write(&mut self, reply: ReplyTo, req: WriteReq) {
        let key = match &req {
            WriteReq::Create { key, .. }
            | WriteReq::Patch { key, .. }
            | WriteReq::Delete { key }
            | WriteReq::Get { key } => *key,
        };
        let shard = self.router.owner(key.as_bytes()).shard;
        let done = |s: &mut State, outcome| {
            s.deliver(reply.core as usize, MeshMsg::WriteDone { reply, outcome })
        };
        if let WriteReq::Get { .. } = req {
            let outcome = match self.link_info(shard, &key) {
                Some(i) => WriteOutcome::Found(i),
                None => WriteOutcome::NotFound,
            };
            return done(self, outcome);
        }
        if self.writes.log.is_poisoned() {
            return done(self, WriteOutcome::StorageFailed);
        }
        if self.writes.in_flight_keys.contains(&key) {
            // Wait for the in-flight write: judged against the state it leaves, this one
            // then gets the answer it would have got had it come a moment later.
            let queue = self.writes.queued.entry(key).or_default();
            if queue.len() < crate::writes::MAX_QUEUED_WRITES_PER_KEY {
                queue.push_back((reply, req));
                return;
            }
            return done(self, WriteOutcome::WriteInProgress);
        }
        let current = self.link_info(shard, &key);
        let mut idem: Option<Box<(String, [u8; 32])>> = None;
        let (info, id, invalidate, outcome_of): Planned = match req {
            WriteReq::Create {
                target,
                status,
                expires_at_s,
                created_at_s,
                id,
                idem: create_idem,
                ..
            } => {
                idem = create_idem;
                if current.is_some() {
                    return done(self, WriteOutcome::Exists);
                }
                (
                    LinkInfo {
                        key,
                        target,
                        status,
                        created_at_s,
                        expires_at_s,
                    },
                    id,
                    None,
                    WriteOutcome::Created,
                )
            }
            WriteReq::Patch {
                target,
                expiry,
                status,
                ..
            } => {
                let Some(mut info) = current else {
                    return done(self, WriteOutcome::NotFound);
                };
                if let Some(t) = target {
                    info.target = t;
                }
                if let Some(s) = status {
                    info.status = s;
                }
                match expiry {
                    ExpiryUpdate::Keep => {}
                    ExpiryUpdate::Clear => info.expires_at_s = 0,
                    ExpiryUpdate::Set(t) => info.expires_at_s = t,
                }
                let id = match self.writes.memtable.get(&key) {
                    Some(MemEntry::Live { id, .. }) => *id,
                    _ => 0,
                };
                (info, id, Some(key), WriteOutcome::Updated)
            }
            WriteReq::Delete { .. } => {
                if current.is_none() {
                    return done(self, WriteOutcome::NotFound);
                }
                let seq = match self
                    .writes
                    .log
                    .append_ref(shard, LogOpRef::Delete { key: key_str(&key) })
                {
                    Ok(seq) => seq,
                    Err(_) => return done(self, WriteOutcome::StorageFailed),
                };
                self.writes.in_flight_keys.insert(key);
                self.writes.waiting.push_back(Durable {
                    seq,
                    apply: Some((key, MemEntry::Deleted)),
                    then: Then::Reply {
                        reply,
                        outcome: WriteOutcome::Deleted,
                        invalidate: Some(key),
                    },
                });
                return;
            }
            WriteReq::Get { .. } => unreachable!("handled above"),
        };
        let op = match &idem {
            None => LogOpRef::Put {
                key: key_str(&key),
                target: &info.target,
                status: info.status,
                expires_at_s: info.expires_at_s,
                created_at_s: info.created_at_s,
                flags: 0,
                id,
            },
            Some(i) => LogOpRef::PutIdem {
                key: key_str(&key),
                target: &info.target,
                status: info.status,
                expires_at_s: info.expires_at_s,
                created_at_s: info.created_at_s,
                flags: 0,
                id,
                scope: &i.0,
                request_hash: &i.1,
            },
        };
        let seq = match self.writes.log.append_ref(shard, op) {
            Ok(seq) => seq,
            Err(_) => return done(self, WriteOutcome::StorageFailed),
        };
        self.writes.in_flight_keys.insert(key);
        self.writes.waiting.push_back(Durable {
            seq,
            apply: Some((
                key,
                MemEntry::Live {
                    info: info.clone(),
                    id,
                },
            )),
            then: Then::Reply {
                reply,
                outcome: outcome_of(info),
                invalidate,
            },
        });
    }

    /// The log is durable through `seq`: make those writes visible and answer them, then start
    /// the next queued write of each key that is free now.
    pub(crate) fn on_durable(&mut self, seq: u64) {
        let mut freed = Vec::new();
        while self.writes.waiting.front().is_some_and(|d| d.seq <= seq) {
            let d = self.writes.waiting.pop_front().expect("checked");
            if let Some((key, entry)) = d.apply {
                self.writes.in_flight_keys.remove(&key);
                self.writes.memtable.insert(key, entry);
                freed.push(key);
            }
            match d.then {
                Then::Reply {
                    reply,
                    outcome,
                    invalidate,
                } => {
                    if let (Some(key), true) = (invalidate, self.router.cores() > 1) {
                        self.broadcast_invalidate(key, reply, outcome);
                    } else {
                        self.deliver(reply.core as usize, MeshMsg::WriteDone { reply, outcome });
                    }
                }
            }
        }
        for key in freed {
            self.run_queued(key);
        }
    }

    /// Starts the oldest write queued behind `key`, if `key` is free (`on_write` queues again
    /// or answers at once when it is not).
    fn run_queued(&mut self, key: InlineKey) {
        if self.writes.in_flight_keys.contains(&key) {
            return;
        }
        let Some(queue) = self.writes.queued.get_mut(&key) else {
            return;
        };
        let next = queue.pop_front();
        if queue.is_empty() {
            self.writes.queued.remove(&key);
        }
        if let Some((reply, req)) = next {
            self.on_write(reply, req);
            // A write answered without logging (404, 409) leaves the key free: go on.
            self.run_queued(key);
        }
    }

    /// Every queued write failed to become durable: answer them all with a storage error.
    pub(crate) fn on_log_failed(&mut self) {
        self.cut_unacknowledged_log_tail();
        // Queued writes would meet the poisoned log: answer them the same way.
        for (_, queue) in std::mem::take(&mut self.writes.queued) {
            for (reply, _) in queue {
                self.deliver(
                    reply.core as usize,
                    MeshMsg::WriteDone {
                        reply,
                        outcome: WriteOutcome::StorageFailed,
                    },
                );
            }
        }
        while let Some(d) = self.writes.waiting.pop_front() {
            if let Some((key, _)) = d.apply {
                self.writes.in_flight_keys.remove(&key);
            }
            match d.then {
                Then::Reply { reply, .. } => self.deliver(
                    reply.core as usize,
                    MeshMsg::WriteDone {
                        reply,
                        outcome: WriteOutcome::StorageFailed,
                    },
                ),
            }
        }
    }

    /// Cuts the log back to its last durable batch. The failed batch's bytes may well be in the
    /// file (the write succeeded and only the fsync failed, or the page cache still holds them):
    /// left there, recovery would replay writes that were just answered as failed. Blocking
    /// syscalls on the core loop are acceptable here: this runs once, when the log is poisoned
    /// for the rest of the run, and no I/O on the log is in flight (the failed batch completed).
    fn cut_unacknowledged_log_tail(&mut self) {
        let len = self.writes.log.durable_len();
        let fd = self.writes.log_fd;
        // SAFETY: `fd` is this core's open log file descriptor, owned by `Writes` for the run;
        // ftruncate and fdatasync take no pointers.
        let rc = unsafe {
            if libc::ftruncate(fd, len as libc::off_t) == 0 {
                libc::fdatasync(fd)
            } else {
                -1
            }
        };
        if rc != 0 {
            eprintln!(
                "core {}: could not cut the log back to its durable length {len} ({}); a restart may \
                 replay writes that were answered as failed",
                self.me,
                std::io::Error::last_os_error()
            );
        }
    }

    fn broadcast_invalidate(&mut self, key: InlineKey, reply: ReplyTo, outcome: WriteOutcome) {
        let token = self.api.next_token;
        self.api.next_token += 1;
        let peers = self.router.cores() - 1;
        self.api
            .invalidations
            .insert(token, (peers, reply, outcome));
        for core in 0..self.router.cores() {
            if core != self.me {
                self.mesh.send(
                    core,
                    MeshMsg::Invalidate {
                        from: self.me as u16,
                        token,
                        key,
                    },
                );
            }
        }
    }

    pub(crate) fn on_invalidate_ack(&mut self, token: u64) {
        let Some(entry) = self.api.invalidations.get_mut(&token) else {
            return;
        };
        entry.0 -= 1;
        if entry.0 == 0 {
            let (_, reply, outcome) = self.api.invalidations.remove(&token).expect("present");
            self.deliver(reply.core as usize, MeshMsg::WriteDone { reply, outcome });
        }
    }

    // ----- idempotency flights (on the scope's owner) ----------------------------------------

    pub(crate) fn on_idem_create(
        &mut self,
        reply: ReplyTo,
        scope: IdemScope,
        hash: crate::api::idempotency::RequestHash,
        req: Box<CreateRequest>,
        created_at_s: u64,
    ) {
        let token = self.api.next_token;
        self.api.next_token += 1;
        match self
            .api
            .idem
            .begin(scope.clone(), hash, self.now_s, WaiterToken(token))
        {
            Begin::Proceed => {
                let flight = self.api.next_flight;
                self.api.next_flight = self.api.next_flight.wrapping_add(1);
                let fr = ReplyTo {
                    core: self.me as u16,
                    slot: IDEM_SLOT,
                    gen: 0,
                    seq: flight,
                };
                self.api.flights.insert(
                    flight,
                    Flight {
                        scope,
                        hash,
                        origin: reply,
                        req: req.clone(),
                        created_at_s,
                    },
                );
                self.start_create(fr, req, created_at_s, 0);
            }
            Begin::Wait => {
                self.api.idem_waiters.insert(token, reply);
            }
            Begin::Replay(key) => {
                // The original response, rebuilt from the link as it is now.
                match InlineKey::new(key.as_bytes()) {
                    Some(k) => {
                        let owner = self.router.owner(k.as_bytes()).core;
                        self.deliver(
                            owner,
                            MeshMsg::Write {
                                reply,
                                req: WriteReq::Get { key: k },
                            },
                        );
                    }
                    None => self.deliver(
                        reply.core as usize,
                        MeshMsg::WriteDone {
                            reply,
                            outcome: WriteOutcome::NotFound,
                        },
                    ),
                }
            }
            Begin::Mismatch => self.deliver(
                reply.core as usize,
                MeshMsg::WriteDone {
                    reply,
                    outcome: WriteOutcome::IdemMismatch,
                },
            ),
            Begin::Busy => self.deliver(
                reply.core as usize,
                MeshMsg::WriteDone {
                    reply,
                    outcome: WriteOutcome::Busy,
                },
            ),
        }
    }

    /// An owner answered a flight's create.
    pub(crate) fn on_flight_done(&mut self, flight: u32, outcome: WriteOutcome) {
        let Some(f) = self.api.flights.get(&flight) else {
            return;
        };
        match outcome {
            // The link and its idempotency record were made durable together (`PutIdem`).
            WriteOutcome::Created(info) => self.finish_flight(flight, Ok(info)),
            WriteOutcome::Exists if f.req.custom_alias.is_none() => {
                let (req, created) = (f.req.clone(), f.created_at_s);
                let fr = ReplyTo {
                    core: self.me as u16,
                    slot: IDEM_SLOT,
                    gen: 0,
                    seq: flight,
                };
                self.start_create(fr, req, created, 1);
            }
            other => self.finish_flight(flight, Err(other)),
        }
    }

    fn finish_flight(&mut self, flight: u32, result: Result<LinkInfo, WriteOutcome>) {
        let Some(f) = self.api.flights.remove(&flight) else {
            return;
        };
        let outcome = match &result {
            Ok(info) => IdemOutcome::Created(key_str(&info.key).to_string()),
            Err(_) => IdemOutcome::Failed,
        };
        let tokens = self.api.idem.finish(&f.scope, outcome, self.now_s);
        let mut replies = vec![f.origin];
        replies.extend(
            tokens
                .iter()
                .filter_map(|t| self.api.idem_waiters.remove(&t.0)),
        );
        for reply in replies {
            let outcome = match &result {
                Ok(info) => WriteOutcome::Created(info.clone()),
                Err(o) => clone_failure(o),
            };
            self.deliver(reply.core as usize, MeshMsg::WriteDone { reply, outcome });
        }
    }
}

/// Appends `p` as an `application/problem+json` response (with `Retry-After` when it has one,
/// plus `extra` headers; without the body for a HEAD request). The one place API errors
/// become bytes.
pub(crate) fn encode_problem(
    out: &mut Vec<u8>,
    p: &Problem,
    extra: &[(&str, &[u8])],
    head: bool,
    persist: Persist,
    date: &crate::http::date::DateCache,
) {
    let status = Status::from_code(p.status).unwrap_or(Status::InternalServerError);
    let retry = p.retry_after_s().map(|s| s.to_string());
    let mut headers: Vec<(&str, &[u8])> = extra.to_vec();
    if let Some(r) = &retry {
        headers.push(("Retry-After", r.as_bytes()));
    }
    encode::encode_response(
        out,
        status,
        &headers,
        Some(PROBLEM_CONTENT_TYPE),
        &p.to_json(),
        head,
        persist,
        date,
    );
}

fn clone_failure(o: &WriteOutcome) -> WriteOutcome {
    match o {
        WriteOutcome::Exists => WriteOutcome::Exists,
        WriteOutcome::NotFound => WriteOutcome::NotFound,
        WriteOutcome::WriteInProgress => WriteOutcome::WriteInProgress,
        WriteOutcome::IdemMismatch => WriteOutcome::IdemMismatch,
        WriteOutcome::Busy => WriteOutcome::Busy,
        _ => WriteOutcome::StorageFailed,
    }
}

/// The idempotency scope as stored in the log: `<api key id>:<Idempotency-Key>`.
pub fn scope_string(scope: &IdemScope) -> String {
    format!("{}:{}", scope.key_id, scope.idempotency_key)
}

/// Parses [`scope_string`] back.
pub fn parse_scope(s: &str) -> Option<IdemScope> {
    let (id, k) = s.split_once(':')?;
    IdemScope::new(crate::api::keys::KeyId::parse(id)?, k.as_bytes()).ok()
}

fn key_str(k: &InlineKey) -> &str {
    // Keys are validated ASCII before they become InlineKeys.
    std::str::from_utf8(k.as_bytes()).unwrap_or("")
}
