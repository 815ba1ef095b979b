//! Key choice for creates on one core: a custom alias is the key; otherwise the next ID of the
//! core's ID ranges ([`SegmentBuffer`]) mapped through the keyed Feistel permutation. Creates
//! that find no ID on hand wait here for the allocator thread's next range.

use crate::api::problem::Problem;
use crate::api::request::CreateRequest;
use crate::base::key::InlineKey;
use crate::mesh::router::Router;
use crate::mesh::{ApiMsg, Mesh, ReplyTo, WriteOutcome, WriteReq};
use shards::alloc::{AllocClient, NextIdError, SegmentBuffer};
use shards::keygen::KeyGen;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

/// The idempotency scope and request hash a flight's create carries to the key's owner, which
/// logs them in the link's own record (`LogOp::PutWithIdem`).
pub type IdemTag = Box<(String, [u8; 32])>;

/// A create waiting for an ID range (the segment buffer was empty).
struct IdWaiter {
    reply: ReplyTo,
    req: Box<CreateRequest>,
    created_at_s: u64,
    deadline: Instant,
    tries: u8,
    idem: Option<IdemTag>,
}

/// One core's key choice.
pub struct Creates {
    me: usize,
    router: Router,
    segments: SegmentBuffer,
    alloc: AllocClient,
    keygen: Arc<KeyGen>,
    waiters: VecDeque<IdWaiter>,
    /// The allocation authority is fenced (`AuthorityError::Fenced`: it lost allocations this
    /// node had confirmed). From then on no generated key is made, not even from ranges already
    /// on hand: the fleet may have issued them again.
    fenced: bool,
    /// Generated IDs taken from the segment buffer (`/metrics`).
    ids_used: u64,
    /// Fleet mode: custom aliases shaped like generated keys are refused
    /// ([`Creates::check_alias`]), and no create is tried while the fleet database is refused
    /// (`FleetStats::refused`).
    fleet: Option<Arc<fleet::FleetStats>>,
}

impl Creates {
    pub fn new(
        me: usize,
        router: Router,
        segments: SegmentBuffer,
        alloc: AllocClient,
        keygen: Arc<KeyGen>,
        fleet: Option<Arc<fleet::FleetStats>>,
    ) -> Creates {
        Creates {
            me,
            router,
            segments,
            alloc,
            keygen,
            waiters: VecDeque::new(),
            fenced: false,
            ids_used: 0,
            fleet,
        }
    }

    /// Fleet mode reserves the generated keys' shape (exactly 7 letters and digits) for
    /// generated keys: a node answers 404 for such a key whose ID was never issued without
    /// asking the database (docs/fleet.md, "Unknown-key floods"), which an alias of that shape
    /// would defeat. Single nodes take such aliases (a generated create that meets one takes
    /// the next ID).
    pub fn check_alias(&self, req: &CreateRequest) -> Result<(), Problem> {
        let Some(alias) = &req.custom_alias else {
            return Ok(());
        };
        if self.fleet.is_some() && shards::keygen::base62_decode7(alias.as_bytes()).is_some() {
            return Err(Problem::invalid_field(
                Some("custom_alias"),
                format!(
                    "custom_alias \"{alias}\" has the shape of a generated key (exactly {} letters \
                     and digits), which fleet mode reserves for generated keys; make it longer or \
                     shorter, or add '-' or '_'",
                    shards::keygen::KEY_CHARS
                ),
            ));
        }
        Ok(())
    }

    /// Whether the node runs in fleet mode.
    pub fn is_fleet(&self) -> bool {
        self.fleet.is_some()
    }

    /// Publishes the ID gauges (`/metrics`): IDs on hand, rate, backoff.
    pub fn publish(&self, c: &crate::metrics::CoreCounters) {
        use std::sync::atomic::Ordering::Relaxed;
        let remaining = if self.fenced {
            0
        } else {
            self.segments.remaining()
        };
        c.ids_remaining.store(remaining, Relaxed);
        c.id_rate_milli
            .store((self.segments.rate_per_s() * 1000.0) as u64, Relaxed);
        c.id_backoff
            .store(u64::from(self.segments.in_backoff(Instant::now())), Relaxed);
    }

    /// Whether generated-key creates are refused because the authority is fenced.
    pub fn is_fenced(&self) -> bool {
        self.fenced
    }

    /// No ID on hand may be used now: the authority is fenced (told by an allocation, or by
    /// the follower, which checks at once when it finds the database on another history), or
    /// the follower has yet to prove the IDs on hand still the database's (issue #24, hole 2).
    fn ids_on_hold(&mut self) -> bool {
        if let Some(f) = &self.fleet {
            self.fenced |= f.is_fenced();
            return self.fenced || f.ids_on_hold();
        }
        self.fenced
    }

    /// The key space is used up: no generated key can be made any more.
    pub fn is_exhausted(&self) -> bool {
        self.segments.is_exhausted()
    }

    /// A range load is in flight or creates wait for one: poll the allocator every turn.
    pub fn needs_poll(&self) -> bool {
        self.segments.is_loading() || !self.waiters.is_empty()
    }

    /// Picks the key (alias, or the next generated ID's key) and sends the create to its owner.
    pub fn start(
        &mut self,
        reply: ReplyTo,
        req: Box<CreateRequest>,
        created_at_s: u64,
        tries: u8,
        idem: Option<IdemTag>,
        mesh: &mut Mesh,
    ) {
        let refused = self.fleet.as_ref().and_then(|f| f.refused());
        if let Some(r) = refused.filter(|&r| r != fleet::DbRefusal::Unchecked) {
            // Not even an ID is taken: the database that answers is not this fleet's to use.
            let outcome = WriteOutcome::DatabaseRefused(r);
            return mesh.deliver(reply.core(), ApiMsg::WriteDone { reply, outcome });
        }
        let (key, id) = match &req.custom_alias {
            Some(a) => (req.stored_key(a.as_bytes()), 0),
            None if self.ids_on_hold() => return busy(reply, mesh),
            None => match self.next_generated_key() {
                Ok((k, id)) => (req.stored_key(k.as_bytes()), id),
                Err(NextIdError::NeedRange { deadline }) => {
                    self.request_range();
                    self.waiters.push_back(IdWaiter {
                        reply,
                        req,
                        created_at_s,
                        deadline,
                        tries,
                        idem,
                    });
                    return;
                }
                Err(NextIdError::Exhausted) => return busy(reply, mesh),
            },
        };
        self.send_create(reply, key, id, &req, created_at_s, idem, mesh);
    }

    /// Sends the create of `key` (ID `id`, 0 for an alias) to its owner.
    #[allow(clippy::too_many_arguments)]
    fn send_create(
        &self,
        reply: ReplyTo,
        key: InlineKey,
        id: u64,
        req: &CreateRequest,
        created_at_s: u64,
        idem: Option<IdemTag>,
        mesh: &mut Mesh,
    ) {
        let owner = self.router.owner(key.as_bytes()).core;
        let new = crate::mesh::NewLink {
            target: Arc::from(req.long_url.as_str()),
            status: req.redirect_status,
            expires_at_s: req.expires_at_s.unwrap_or(0),
            created_at_s,
            id,
            idem,
            author: req.author,
            behaviour: req.behaviour,
            rules: req.rules.clone(),
            labels: req.labels.clone(),
        };
        let wreq = WriteReq::Create {
            key,
            new: Box::new(new),
        };
        mesh.deliver(owner, ApiMsg::Write { reply, req: wreq });
    }

    /// Fleet mode: a retried create whose scope this core recorded is judged by the database,
    /// not the local record: the database knows which transaction created the link now under
    /// `key` (a re-creation within the same second is another link; issue #24, hole 11). The
    /// create goes to `key`'s owner under the same tag; the scope's claim there answers it.
    /// `false` on a single node (the caller replays from its record).
    pub fn replay_through_fleet(
        &self,
        reply: ReplyTo,
        key: InlineKey,
        req: &CreateRequest,
        created_at_s: u64,
        idem: IdemTag,
        mesh: &mut Mesh,
    ) -> bool {
        if self.fleet.is_none() {
            return false;
        }
        let id = self.keygen.id_for(key.as_bytes()).unwrap_or(0);
        self.send_create(reply, key, id, req, created_at_s, Some(idem), mesh);
        true
    }

    /// The next generated key and its ID, skipping the (astronomically rare) IDs whose key is
    /// a reserved word such as `healthz`.
    fn next_generated_key(&mut self) -> Result<(InlineKey, u64), NextIdError> {
        loop {
            let id = self.segments.next_id(Instant::now())?;
            self.ids_used += 1;
            let key = self.keygen.key_for(id);
            let reserved =
                std::str::from_utf8(&key).is_ok_and(crate::api::request::is_reserved_alias);
            if !reserved {
                return Ok((InlineKey::new(&key).expect("7 bytes"), id));
            }
        }
    }

    /// Asks the allocator for a range if the segment buffer wants one.
    fn request_range(&mut self) {
        let now = Instant::now();
        if self.segments.wants_prefetch(now) {
            let len = self.segments.request_len();
            self.segments.loading_started();
            if self.alloc.request(len).is_err() {
                // The allocator thread is gone: back off like any failed load.
                self.segments.on_load_failed(now);
            }
        }
    }

    /// Takes allocator replies and serves creates that waited for an ID (or answers them 503
    /// past their deadline).
    pub fn poll(&mut self, mesh: &mut Mesh) {
        let now = Instant::now();
        while let Some(r) = self.alloc.try_recv() {
            if let Err(e) = &r {
                eprintln!("core {}: ID range allocation failed: {e}", self.me);
                self.fenced |= matches!(e, shards::alloc::AuthorityError::Fenced { .. });
            }
            self.segments.on_reply(now, r);
        }
        self.request_range();
        for _ in 0..self.waiters.len() {
            let Some(w) = self.waiters.pop_front() else {
                break;
            };
            if self.ids_on_hold() {
                busy(w.reply, mesh);
            } else if self.segments.remaining() > 0 {
                self.start(w.reply, w.req, w.created_at_s, w.tries, w.idem, mesh);
            } else if now >= w.deadline || self.segments.is_exhausted() {
                busy(w.reply, mesh);
            } else {
                self.waiters.push_back(w);
            }
        }
    }
}

/// No key could be chosen: 503 to whoever asked.
fn busy(reply: ReplyTo, mesh: &mut Mesh) {
    let outcome = WriteOutcome::Busy;
    mesh.deliver(reply.core(), ApiMsg::WriteDone { reply, outcome });
}
