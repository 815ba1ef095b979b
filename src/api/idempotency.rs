//! Idempotent link creation: a retried `POST /api/v1/urls` with the same `Idempotency-Key`
//! returns the link the first attempt made instead of minting a second one.
//!
//! - Scope: API key id + `Idempotency-Key` value. Keys of different API keys never collide.
//! - Request identity: SHA-256 of the normalized create request ([`request_hash`]). Same scope
//!   and same hash: replay the first result. Same scope, different hash: refuse
//!   ([`Problem::idempotency_mismatch`], 422, as the IETF Idempotency-Key draft advises).
//! - In flight: the owner core handles one request at a time, but a create may await storage
//!   while a duplicate arrives. The first request of a scope `Proceed`s and leaves a pending
//!   entry; duplicates `Wait` on it under a caller-chosen [`WaiterToken`]; [`IdemTable::finish`]
//!   hands back their tokens so the caller answers them all with the owner's result: the
//!   created key, or the same error the owner got (they sent the identical request at the same
//!   moment). After a failure the scope is free again, so a later retry starts afresh.
//! - Retention: a result is replayed for [`IDEMPOTENCY_RETENTION_S`] after it was recorded,
//!   then forgotten. Past [`IDEMPOTENCY_TABLE_CAPACITY`] records the oldest are forgotten early
//!   (availability over an unbounded table; the rate limiter bounds how fast that can happen).

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};

use sha2::{Digest, Sha256};

use super::keys::KeyId;
use super::problem::Problem;
use super::request::CreateRequest;

/// Name of the request header carrying the client's idempotency key.
pub const IDEMPOTENCY_KEY_HEADER: &str = "Idempotency-Key";

/// Longest `Idempotency-Key` value, in bytes: 255 fits a UUID or any client-side request id
/// with room to spare, and bounds the memory a table entry can pin.
pub const MAX_IDEMPOTENCY_KEY_BYTES: usize = 255;

/// How long a create result is replayed: 24 hours, the retry horizon clients (and the
/// Idempotency-Key draft's examples) assume; a retry later than that is a new request.
pub const IDEMPOTENCY_RETENTION_S: u64 = 24 * 60 * 60;

/// Records one [`IdemTable`] holds: 65 536, about 16 MiB per table at ~250 bytes each with
/// UUID keys. That covers the default per-key create rate's 24 h output only for light use;
/// past it the oldest records are forgotten first.
pub const IDEMPOTENCY_TABLE_CAPACITY: usize = 65_536;

/// Checks an `Idempotency-Key` header value: 1..=[`MAX_IDEMPOTENCY_KEY_BYTES`] visible ASCII
/// characters (0x21..=0x7E). The value is compared byte for byte (a quoted structured-field
/// string keeps its quotes), so a client must resend it unchanged.
pub fn validate_idempotency_key(value: &[u8]) -> Result<&str, Problem> {
    if value.is_empty() {
        return Err(Problem::invalid_header(IDEMPOTENCY_KEY_HEADER, "is empty"));
    }
    if value.len() > MAX_IDEMPOTENCY_KEY_BYTES {
        return Err(Problem::invalid_header(
            IDEMPOTENCY_KEY_HEADER,
            format!("is longer than {MAX_IDEMPOTENCY_KEY_BYTES} bytes"),
        ));
    }
    if !value.iter().all(u8::is_ascii_graphic) {
        return Err(Problem::invalid_header(
            IDEMPOTENCY_KEY_HEADER,
            "may contain only visible ASCII characters",
        ));
    }
    // All bytes are ASCII, checked above.
    Ok(std::str::from_utf8(value).expect("ASCII is UTF-8"))
}

/// SHA-256 of a normalized create request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RequestHash(pub [u8; 32]);

/// Hashes what the client asked for, normalized: members in a fixed order, each
/// length-prefixed or tagged so no two requests encode alike, defaults filled in (no
/// `redirect_status` hashes as 302). Expiry hashes as sent: `ttl_days` by its value, not the
/// derived instant, since a retry a second later derives a different one; `expires_at` by its
/// absolute second (so `+02:00` and `Z` spellings of one instant agree). `ttl_days` and an
/// `expires_at` that happen to coincide differ. `long_url` hashes byte for byte: two spellings
/// of one URL are different requests (refusing is safer than replaying the wrong target).
pub fn request_hash(req: &CreateRequest) -> RequestHash {
    let mut h = Sha256::new();
    h.update(b"ricochet create v1\0");
    h.update((req.long_url.len() as u64).to_le_bytes());
    h.update(req.long_url.as_bytes());
    match &req.custom_alias {
        None => h.update([0u8]),
        Some(alias) => {
            h.update([1u8]);
            h.update((alias.len() as u64).to_le_bytes());
            h.update(alias.as_bytes());
        }
    }
    match (req.ttl_days, req.expires_at_s) {
        (Some(days), _) => {
            h.update([1u8]);
            h.update(u64::from(days).to_le_bytes());
        }
        (None, Some(t)) => {
            h.update([2u8]);
            h.update(t.to_le_bytes());
        }
        (None, None) => h.update([0u8]),
    }
    h.update(req.redirect_status.code().to_le_bytes());
    // Only when sent: a record written before domains still matches its retry.
    if let Some(d) = &req.domain {
        h.update([1u8]);
        h.update((d.len() as u64).to_le_bytes());
        h.update(d.as_bytes());
    }
    // Likewise only when set (a record written before behaviours still matches).
    let b = &req.behaviour;
    if !b.is_none() {
        h.update([2u8]);
        h.update(b.valid_since_s.to_le_bytes());
        h.update([match b.forward_query {
            None => 0u8,
            Some(true) => 1,
            Some(false) => 2,
        }]);
        h.update(b.max_visits.to_le_bytes());
        if b.crawlable {
            h.update([4u8]);
        }
    }
    // Likewise only when set.
    if !req.rules.is_empty() {
        let program = req.rules.set().bytes();
        h.update([3u8]);
        h.update((program.len() as u64).to_le_bytes());
        h.update(program);
    }
    // And the labels, each tag and the title length-prefixed.
    if !req.labels.is_none() {
        h.update([5u8]);
        let title = req.labels.title().unwrap_or("");
        h.update((title.len() as u64).to_le_bytes());
        h.update(title.as_bytes());
        for t in req.labels.tags() {
            h.update((t.len() as u64).to_le_bytes());
            h.update(t.as_bytes());
        }
    }
    RequestHash(h.finalize().into())
}

/// Where idempotency keys live: one API key's namespace.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IdemScope {
    /// The API key that sent the request.
    pub key_id: KeyId,
    /// The validated `Idempotency-Key` value.
    pub idempotency_key: Box<str>,
}

impl IdemScope {
    /// Validates the header value (see [`validate_idempotency_key`]) and builds the scope.
    pub fn new(key_id: KeyId, header_value: &[u8]) -> Result<IdemScope, Problem> {
        let idempotency_key = validate_idempotency_key(header_value)?.into();
        Ok(IdemScope {
            key_id,
            idempotency_key,
        })
    }
}

/// A completed create, remembered for replay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdemRecord {
    /// Hash of the request that created it.
    pub request_hash: RequestHash,
    /// The key of the created link.
    pub key: String,
    /// Unix second the result was recorded; retention counts from here.
    pub created_at_s: u64,
    /// The link's creation tag (`shards::link::CREATION_TAG_MASK`): with `created_at_s` it
    /// names this creation, not only its second. 0: unknown.
    pub created_tag: u32,
}

/// What to do with a create, given the scope's record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IdemDecision {
    /// No record: create.
    Fresh,
    /// Same request seen: answer with link `key`, if it is still the link that request
    /// created (created at `created_at_s`).
    Replay {
        key: String,
        created_at_s: u64,
        created_tag: u32,
    },
    /// Different request under the same idempotency key: refuse.
    Mismatch,
}

/// Decides from a completed record (already filtered for retention).
pub fn decide(existing: Option<&IdemRecord>, request_hash: &RequestHash) -> IdemDecision {
    match existing {
        None => IdemDecision::Fresh,
        Some(r) if r.request_hash == *request_hash => IdemDecision::Replay {
            key: r.key.clone(),
            created_at_s: r.created_at_s,
            created_tag: r.created_tag,
        },
        Some(_) => IdemDecision::Mismatch,
    }
}

/// Caller-chosen id of a request waiting on an in-flight duplicate (e.g. a connection id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WaiterToken(pub u64);

/// Answer of [`IdemTable::begin`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Begin {
    /// This request owns the scope: create the link, then call [`IdemTable::finish`].
    Proceed,
    /// The same request is in flight: park this one under its token until `finish` returns it.
    Wait,
    /// The same request already completed: answer with link `key`, created at the second
    /// given (a link under that key created at another time is someone else's: 404).
    Replay(String, u64, u32),
    /// A different request used this idempotency key: answer 422.
    Mismatch,
    /// The table is full of in-flight creates: answer 503.
    Busy,
}

/// How an owned create ended, for [`IdemTable::finish`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The link was created under this key, with this creation tag.
    Created(String, u32),
    /// Nothing was created (alias taken, storage full, ...).
    Failed,
}

#[derive(Debug)]
enum Slot {
    Pending {
        request_hash: RequestHash,
        waiters: Vec<WaiterToken>,
    },
    Done {
        record: IdemRecord,
        /// Matches the `order` entry that tracks this record.
        generation: u64,
    },
}

/// Idempotency records and in-flight creates of one owner core. Not shared between threads:
/// the owner core calls it between requests, so no locking is needed.
#[derive(Debug)]
pub struct IdemTable {
    capacity: usize,
    retention_s: u64,
    slots: HashMap<IdemScope, Slot>,
    /// Completed records in the order they were recorded, for expiry and eviction. An entry
    /// whose generation no longer matches its slot is stale and skipped.
    order: VecDeque<(u64, IdemScope)>,
    next_generation: u64,
}

impl Default for IdemTable {
    fn default() -> IdemTable {
        IdemTable::new(IDEMPOTENCY_TABLE_CAPACITY, IDEMPOTENCY_RETENTION_S)
    }
}

impl IdemTable {
    /// A table of at most `capacity` scopes (pending or completed) keeping results for
    /// `retention_s`. Use [`IdemTable::default`] for the documented defaults.
    pub fn new(capacity: usize, retention_s: u64) -> IdemTable {
        assert!(capacity > 0, "idempotency table capacity must be positive");
        IdemTable {
            capacity,
            retention_s,
            slots: HashMap::new(),
            order: VecDeque::new(),
            next_generation: 0,
        }
    }

    /// Starts a create of `request_hash` in `scope` at `now_s`. On [`Begin::Wait`], `waiter`
    /// is parked until the owner's [`IdemTable::finish`] returns it.
    pub fn begin(
        &mut self,
        scope: IdemScope,
        request_hash: RequestHash,
        now_s: u64,
        waiter: WaiterToken,
    ) -> Begin {
        let retention_s = self.retention_s;
        if !self.slots.contains_key(&scope) && self.slots.len() >= self.capacity {
            self.expire(now_s);
            if self.slots.len() >= self.capacity && !self.evict_oldest() {
                return Begin::Busy;
            }
        }
        match self.slots.entry(scope) {
            Entry::Vacant(v) => {
                v.insert(Slot::Pending {
                    request_hash,
                    waiters: Vec::new(),
                });
                Begin::Proceed
            }
            Entry::Occupied(mut o) => match o.get_mut() {
                Slot::Pending {
                    request_hash: owner_hash,
                    waiters,
                } => {
                    if *owner_hash == request_hash {
                        waiters.push(waiter);
                        Begin::Wait
                    } else {
                        Begin::Mismatch
                    }
                }
                Slot::Done { record, .. } if is_live(record, now_s, retention_s) => {
                    match decide(Some(record), &request_hash) {
                        IdemDecision::Replay {
                            key,
                            created_at_s,
                            created_tag,
                        } => Begin::Replay(key, created_at_s, created_tag),
                        IdemDecision::Mismatch => Begin::Mismatch,
                        IdemDecision::Fresh => unreachable!("decide(Some) is never Fresh"),
                    }
                }
                Slot::Done { .. } => {
                    // Expired but not yet collected: the scope is free. Its `order` entry
                    // goes stale.
                    o.insert(Slot::Pending {
                        request_hash,
                        waiters: Vec::new(),
                    });
                    Begin::Proceed
                }
            },
        }
    }

    /// Ends the create that [`Begin::Proceed`] gave the caller for `scope`, at `now_s`, and
    /// returns the tokens of duplicates that waited on it: answer each with the same outcome.
    /// `Created` records the result for replay; `Failed` frees the scope.
    pub fn finish(&mut self, scope: &IdemScope, outcome: Outcome, now_s: u64) -> Vec<WaiterToken> {
        if !matches!(self.slots.get(scope), Some(Slot::Pending { .. })) {
            debug_assert!(false, "finish without a pending begin for {scope:?}");
            return Vec::new();
        }
        let Some(Slot::Pending {
            request_hash,
            waiters,
        }) = self.slots.remove(scope)
        else {
            unreachable!("checked above");
        };
        if let Outcome::Created(key, created_tag) = outcome {
            let generation = self.next_generation;
            self.next_generation += 1;
            let record = IdemRecord {
                request_hash,
                key,
                created_at_s: now_s,
                created_tag,
            };
            self.slots
                .insert(scope.clone(), Slot::Done { record, generation });
            self.push_order(generation, scope.clone());
        }
        waiters
    }

    /// Stops waiting for `waiter` (its client went away). Returns whether it was parked.
    pub fn cancel_wait(&mut self, scope: &IdemScope, waiter: WaiterToken) -> bool {
        match self.slots.get_mut(scope) {
            Some(Slot::Pending { waiters, .. }) => {
                let before = waiters.len();
                waiters.retain(|w| *w != waiter);
                waiters.len() != before
            }
            _ => false,
        }
    }

    /// The completed, unexpired record of `scope` at `now_s`.
    /// Every finished record still within retention (compaction re-logs them so they outlive
    /// the log file they were first written to).
    pub fn live_records(&self, now_s: u64) -> impl Iterator<Item = (&IdemScope, &IdemRecord)> {
        self.slots
            .iter()
            .filter_map(move |(scope, slot)| match slot {
                Slot::Done { record, .. } if is_live(record, now_s, self.retention_s) => {
                    Some((scope, record))
                }
                _ => None,
            })
    }

    pub fn get(&self, scope: &IdemScope, now_s: u64) -> Option<&IdemRecord> {
        match self.slots.get(scope) {
            Some(Slot::Done { record, .. }) if is_live(record, now_s, self.retention_s) => {
                Some(record)
            }
            _ => None,
        }
    }

    /// Records a completed create directly (e.g. rebuilt from the log at start-up). Refuses,
    /// returning `false`, if the scope has a create in flight, the record is already expired
    /// at `now_s`, or the table is full of in-flight creates. Replaces a completed record.
    pub fn insert(&mut self, scope: IdemScope, record: IdemRecord, now_s: u64) -> bool {
        if !is_live(&record, now_s, self.retention_s) {
            return false;
        }
        match self.slots.get(&scope) {
            Some(Slot::Pending { .. }) => return false,
            Some(Slot::Done { .. }) => {}
            None => {
                if self.slots.len() >= self.capacity {
                    self.expire(now_s);
                    if self.slots.len() >= self.capacity && !self.evict_oldest() {
                        return false;
                    }
                }
            }
        }
        let generation = self.next_generation;
        self.next_generation += 1;
        self.slots
            .insert(scope.clone(), Slot::Done { record, generation });
        self.push_order(generation, scope);
        true
    }

    /// Forgets completed records older than the retention at `now_s`; returns how many.
    /// Records are collected in the order they were recorded, so one recorded out of time
    /// order (via `insert`) may linger past expiry, though it is never replayed.
    pub fn expire(&mut self, now_s: u64) -> usize {
        let mut removed = 0;
        while let Some((generation, scope)) = self.order.front() {
            match self.slots.get(scope) {
                Some(Slot::Done {
                    record,
                    generation: g,
                }) if g == generation => {
                    if is_live(record, now_s, self.retention_s) {
                        break;
                    }
                    self.slots.remove(scope);
                    removed += 1;
                }
                _ => {} // stale
            }
            self.order.pop_front();
        }
        removed
    }

    /// Scopes held, pending or completed (including expired ones not yet collected).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the table holds nothing.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Forgets the oldest completed record. `false` if there is none (all in flight).
    fn evict_oldest(&mut self) -> bool {
        while let Some((generation, scope)) = self.order.pop_front() {
            if let Some(Slot::Done { generation: g, .. }) = self.slots.get(&scope) {
                if *g == generation {
                    self.slots.remove(&scope);
                    return true;
                }
            }
        }
        false
    }

    fn push_order(&mut self, generation: u64, scope: IdemScope) {
        self.order.push_back((generation, scope));
        // Stale entries are normally popped as they reach the front; bound them regardless.
        if self.order.len() > 2 * self.capacity {
            let slots = &self.slots;
            self.order.retain(|(generation, scope)| {
                matches!(slots.get(scope), Some(Slot::Done { generation: g, .. }) if g == generation)
            });
        }
    }
}

fn is_live(record: &IdemRecord, now_s: u64, retention_s: u64) -> bool {
    now_s < record.created_at_s.saturating_add(retention_s)
}

/// The idempotency scope as stored in the log, and placed on its owner core like a key:
/// `<api key id>:<Idempotency-Key>`.
pub fn scope_string(scope: &IdemScope) -> String {
    format!("{}:{}", scope.key_id, scope.idempotency_key)
}

/// Parses [`scope_string`] back.
pub fn parse_scope(s: &str) -> Option<IdemScope> {
    let (id, k) = s.split_once(':')?;
    IdemScope::new(crate::api::keys::KeyId::parse(id)?, k.as_bytes()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::request::parse_create;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use shards::link::RedirectStatus;

    const NOW: u64 = 1_900_000_000;

    fn scope(key: &str, idem: &str) -> IdemScope {
        IdemScope::new(KeyId::parse(key).unwrap(), idem.as_bytes()).unwrap()
    }

    fn h(n: u8) -> RequestHash {
        RequestHash([n; 32])
    }

    fn req(json: &str, now_s: u64) -> CreateRequest {
        parse_create(json.as_bytes(), now_s).unwrap()
    }

    #[test]
    fn header_validation() {
        assert_eq!(
            validate_idempotency_key(b"8e03978e-40d5-43e8-bc93-6894a57f9324"),
            Ok("8e03978e-40d5-43e8-bc93-6894a57f9324")
        );
        assert!(validate_idempotency_key(&[b'k'; MAX_IDEMPOTENCY_KEY_BYTES]).is_ok());
        assert!(validate_idempotency_key(b"\"quoted\"").is_ok());
        for bad in [
            &b""[..],
            &[b'k'; MAX_IDEMPOTENCY_KEY_BYTES + 1],
            b"has space",
            b"tab\t",
            b"nul\0",
            "caf\u{e9}".as_bytes(),
            b"\x7f",
        ] {
            let p = validate_idempotency_key(bad).unwrap_err();
            assert_eq!(p.status, 400);
            assert!(p.detail.starts_with("Idempotency-Key: "), "{p}");
        }
        assert!(IdemScope::new(KeyId::parse("a").unwrap(), b"").is_err());
    }

    #[test]
    fn hash_covers_every_member() {
        let base = req(r#"{"long_url":"https://a.b/x"}"#, NOW);
        let same = req(
            r#"{"redirect_status":302,"long_url":"https://a.b/x","custom_alias":null}"#,
            NOW,
        );
        assert_eq!(request_hash(&base), request_hash(&same));
        let variants = [
            r#"{"long_url":"https://a.b/y"}"#,
            r#"{"long_url":"https://a.b/x","custom_alias":"x"}"#,
            r#"{"long_url":"https://a.b/x","ttl_days":1}"#,
            r#"{"long_url":"https://a.b/x","expires_at":"2030-03-18T17:46:40Z"}"#,
            r#"{"long_url":"https://a.b/x","redirect_status":301}"#,
        ];
        let mut hashes = vec![request_hash(&base)];
        for v in variants {
            hashes.push(request_hash(&req(v, NOW)));
        }
        let n = hashes.len();
        hashes.sort_by_key(|h| h.0);
        hashes.dedup();
        assert_eq!(hashes.len(), n);
    }

    #[test]
    fn hash_is_stable_across_retry_time_and_offsets() {
        let body = r#"{"long_url":"https://a.b/x","ttl_days":30}"#;
        let first = req(body, NOW);
        let retry = req(body, NOW + 5);
        assert_ne!(first.expires_at_s, retry.expires_at_s);
        assert_eq!(request_hash(&first), request_hash(&retry));

        let z = req(
            r#"{"long_url":"https://a.b/x","expires_at":"2030-03-18T17:46:40Z"}"#,
            NOW,
        );
        let plus2 = req(
            r#"{"long_url":"https://a.b/x","expires_at":"2030-03-18T19:46:40+02:00"}"#,
            NOW + 5,
        );
        assert_eq!(request_hash(&z), request_hash(&plus2));
        // ttl_days: 1 and the equivalent absolute expiry are different requests.
        let ttl = req(r#"{"long_url":"https://a.b/x","ttl_days":1}"#, NOW);
        assert_eq!(ttl.expires_at_s, z.expires_at_s);
        assert_ne!(request_hash(&ttl), request_hash(&z));
    }

    #[test]
    fn hash_fields_do_not_run_together() {
        let a = CreateRequest {
            author: shards::link::Author::NONE,
            behaviour: shards::behaviour::Behaviour::NONE,
            rules: shards::rules::Rules::NONE,
            labels: shards::labels::Labels::NONE,
            long_url: "https://a.b/xy".into(),
            custom_alias: Some("z".into()),
            expires_at_s: None,
            ttl_days: None,
            redirect_status: RedirectStatus::Found,
            domain: None,
            domain_number: 0,
        };
        let b = CreateRequest {
            long_url: "https://a.b/x".into(),
            custom_alias: Some("yz".into()),
            ..a.clone()
        };
        assert_ne!(request_hash(&a), request_hash(&b));
    }

    #[test]
    fn decide_cases() {
        let rec = IdemRecord {
            request_hash: h(1),
            key: "abc".into(),
            created_at_s: NOW,
            created_tag: 7,
        };
        assert_eq!(decide(None, &h(1)), IdemDecision::Fresh);
        assert_eq!(
            decide(Some(&rec), &h(1)),
            IdemDecision::Replay {
                key: "abc".into(),
                created_at_s: rec.created_at_s,
                created_tag: 7,
            }
        );
        assert_eq!(decide(Some(&rec), &h(2)), IdemDecision::Mismatch);
    }

    #[test]
    fn duplicates_in_flight_wait_and_get_the_owner_result() {
        let mut t = IdemTable::default();
        let s = scope("k1", "req-1");
        assert_eq!(
            t.begin(s.clone(), h(1), NOW, WaiterToken(10)),
            Begin::Proceed
        );
        assert_eq!(t.begin(s.clone(), h(1), NOW, WaiterToken(11)), Begin::Wait);
        assert_eq!(t.begin(s.clone(), h(1), NOW, WaiterToken(12)), Begin::Wait);
        assert_eq!(
            t.begin(s.clone(), h(2), NOW, WaiterToken(13)),
            Begin::Mismatch
        );
        assert_eq!(t.get(&s, NOW), None);
        // Another API key's identical idempotency key is a separate scope.
        let other = scope("k2", "req-1");
        assert_eq!(
            t.begin(other.clone(), h(1), NOW, WaiterToken(20)),
            Begin::Proceed
        );

        assert!(t.cancel_wait(&s, WaiterToken(12)));
        assert!(!t.cancel_wait(&s, WaiterToken(12)));
        let waiters = t.finish(&s, Outcome::Created("aB3".into(), 5), NOW + 1);
        assert_eq!(waiters, vec![WaiterToken(11)]);
        assert_eq!(
            t.begin(s.clone(), h(1), NOW + 2, WaiterToken(14)),
            Begin::Replay("aB3".into(), NOW + 1, 5)
        );
        assert_eq!(
            t.begin(s.clone(), h(2), NOW + 2, WaiterToken(15)),
            Begin::Mismatch
        );
        let rec = t.get(&s, NOW + 2).unwrap();
        assert_eq!((rec.key.as_str(), rec.created_at_s), ("aB3", NOW + 1));
        assert!(!t.cancel_wait(&s, WaiterToken(11)));
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn failure_wakes_waiters_and_frees_the_scope() {
        let mut t = IdemTable::default();
        let s = scope("k1", "req-1");
        assert_eq!(
            t.begin(s.clone(), h(1), NOW, WaiterToken(1)),
            Begin::Proceed
        );
        assert_eq!(t.begin(s.clone(), h(1), NOW, WaiterToken(2)), Begin::Wait);
        assert_eq!(t.finish(&s, Outcome::Failed, NOW), vec![WaiterToken(2)]);
        assert!(t.is_empty());
        // A later retry, even with a different body, starts afresh.
        assert_eq!(
            t.begin(s.clone(), h(3), NOW, WaiterToken(3)),
            Begin::Proceed
        );
        assert!(t
            .finish(&s, Outcome::Created("k".into(), 0), NOW)
            .is_empty());
        assert_eq!(
            t.begin(s, h(3), NOW, WaiterToken(4)),
            Begin::Replay("k".into(), NOW, 0)
        );
    }

    #[test]
    fn records_expire_after_retention() {
        let mut t = IdemTable::new(16, 100);
        let s1 = scope("k", "one");
        let s2 = scope("k", "two");
        t.begin(s1.clone(), h(1), NOW, WaiterToken(0));
        t.finish(&s1, Outcome::Created("a".into(), 0), NOW);
        t.begin(s2.clone(), h(2), NOW + 50, WaiterToken(0));
        t.finish(&s2, Outcome::Created("b".into(), 0), NOW + 50);

        assert!(t.get(&s1, NOW + 99).is_some());
        assert_eq!(t.get(&s1, NOW + 100), None);
        // Not yet collected, but no longer replayed: a new request takes the scope.
        assert_eq!(
            t.begin(s1.clone(), h(9), NOW + 100, WaiterToken(0)),
            Begin::Proceed
        );
        t.finish(&s1, Outcome::Created("c".into(), 0), NOW + 100);

        assert_eq!(t.expire(NOW + 149), 0);
        assert_eq!(t.expire(NOW + 150), 1);
        assert_eq!(t.get(&s2, NOW + 150), None);
        assert_eq!(t.get(&s1, NOW + 150).unwrap().key, "c");
        assert_eq!(t.expire(NOW + 200), 1);
        assert!(t.is_empty());
    }

    #[test]
    fn full_table_evicts_oldest_record_never_in_flight() {
        let mut t = IdemTable::new(2, 1000);
        let (a, b, c, d) = (
            scope("k", "a"),
            scope("k", "b"),
            scope("k", "c"),
            scope("k", "d"),
        );
        t.begin(a.clone(), h(1), NOW, WaiterToken(0));
        t.finish(&a, Outcome::Created("ka".into(), 0), NOW);
        t.begin(b.clone(), h(2), NOW, WaiterToken(0));
        t.finish(&b, Outcome::Created("kb".into(), 0), NOW + 1);
        assert_eq!(
            t.begin(c.clone(), h(3), NOW + 2, WaiterToken(0)),
            Begin::Proceed
        );
        assert_eq!(t.get(&a, NOW + 2), None);
        assert!(t.get(&b, NOW + 2).is_some());
        // b is the only completed record; c is in flight.
        assert_eq!(
            t.begin(d.clone(), h(4), NOW + 2, WaiterToken(0)),
            Begin::Proceed
        );
        assert_eq!(t.get(&b, NOW + 2), None);
        // Now both slots are in flight.
        assert_eq!(
            t.begin(a.clone(), h(1), NOW + 2, WaiterToken(0)),
            Begin::Busy
        );
        assert_eq!(t.len(), 2);
        t.finish(&c, Outcome::Failed, NOW + 3);
        assert_eq!(t.begin(a, h(1), NOW + 3, WaiterToken(0)), Begin::Proceed);
    }

    #[test]
    fn insert_for_recovery() {
        let mut t = IdemTable::new(4, 100);
        let s = scope("k", "x");
        let rec = |key: &str, at| IdemRecord {
            request_hash: h(1),
            key: key.into(),
            created_at_s: at,
            created_tag: 0,
        };
        assert!(!t.insert(s.clone(), rec("old", NOW - 100), NOW));
        assert!(t.insert(s.clone(), rec("k1", NOW - 10), NOW));
        assert_eq!(
            t.begin(s.clone(), h(1), NOW, WaiterToken(0)),
            Begin::Replay("k1".into(), NOW - 10, 0)
        );
        assert!(t.insert(s.clone(), rec("k2", NOW), NOW));
        assert_eq!(t.get(&s, NOW).unwrap().key, "k2");
        let p = scope("k", "pending");
        t.begin(p.clone(), h(2), NOW, WaiterToken(0));
        assert!(!t.insert(p.clone(), rec("k3", NOW), NOW));
        // The replaced record's stale order entry does not expire the new one early.
        assert_eq!(t.expire(NOW + 99), 0);
        assert!(t.get(&s, NOW + 99).is_some());
        assert_eq!(t.expire(NOW + 100), 1);
    }

    #[test]
    fn order_queue_stays_bounded() {
        let mut t = IdemTable::new(4, 10);
        let s = scope("k", "same");
        for i in 0..1000u64 {
            let now = NOW + i * 10;
            assert_eq!(
                t.begin(s.clone(), h(1), now, WaiterToken(0)),
                Begin::Proceed
            );
            t.finish(&s, Outcome::Created(format!("k{i}"), 0), now);
        }
        assert!(t.order.len() <= 8, "{}", t.order.len());
        assert_eq!(t.len(), 1);
    }

    /// Simulates an owner core: requests arrive interleaved with storage completions, in random
    /// order. Every scope must get at most one link per success, every same-body duplicate must
    /// end with that link, and different bodies must be refused.
    #[test]
    fn simulated_concurrent_duplicates_resolve_to_one_link() {
        for seed in 0..200u64 {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut t = IdemTable::new(64, IDEMPOTENCY_RETENTION_S);
            let scopes: Vec<IdemScope> = (0..4).map(|i| scope("k", &format!("s{i}"))).collect();
            // (scope index, body hash) per request; body 0 is the "real" one, 1 a conflicting one.
            let requests: Vec<(usize, u8)> = (0..40)
                .map(|_| (rng.gen_range(0..4), u8::from(rng.gen_bool(0.1))))
                .collect();
            let mut answers: Vec<Option<Result<String, &str>>> = vec![None; requests.len()];
            // Scope index -> the request that owns its in-flight create.
            let mut owners: HashMap<usize, usize> = HashMap::new();
            let mut created: HashMap<usize, Vec<String>> = HashMap::new();
            let mut next_req = 0;
            let mut link_no = 0;
            while next_req < requests.len() || !owners.is_empty() {
                let complete =
                    !owners.is_empty() && (next_req == requests.len() || rng.gen_bool(0.3));
                if complete {
                    // Storage finishes one owned create; 20% fail.
                    let &si = owners.keys().nth(rng.gen_range(0..owners.len())).unwrap();
                    let owner = owners.remove(&si).unwrap();
                    let (outcome, answer) = if rng.gen_bool(0.2) {
                        (Outcome::Failed, Err("failed"))
                    } else {
                        link_no += 1;
                        let key = format!("L{link_no}");
                        created.entry(si).or_default().push(key.clone());
                        (Outcome::Created(key.clone(), 0), Ok(key))
                    };
                    answers[owner] = Some(answer.clone());
                    for w in t.finish(&scopes[si], outcome, NOW) {
                        let w = w.0 as usize;
                        assert!(answers[w].is_none(), "seed {seed}: answered twice");
                        assert_eq!(requests[w], requests[owner], "seed {seed}");
                        answers[w] = Some(answer.clone());
                    }
                } else {
                    let i = next_req;
                    next_req += 1;
                    let (si, body) = requests[i];
                    match t.begin(scopes[si].clone(), h(body), NOW, WaiterToken(i as u64)) {
                        Begin::Proceed => assert!(owners.insert(si, i).is_none(), "seed {seed}"),
                        Begin::Wait => {}
                        Begin::Replay(key, ..) => answers[i] = Some(Ok(key)),
                        Begin::Mismatch => answers[i] = Some(Err("mismatch")),
                        Begin::Busy => panic!("seed {seed}: table of 64 cannot fill"),
                    }
                }
            }
            assert!(
                answers.iter().all(Option::is_some),
                "seed {seed}: a request never answered"
            );
            for (si, keys) in &created {
                assert_eq!(keys.len(), 1, "seed {seed}: scope {si} created {keys:?}");
                let rec = t.get(&scopes[*si], NOW).unwrap();
                assert_eq!(&rec.key, &keys[0]);
                // Every request for this scope answered after the creation with the winning
                // body got that key.
                let winner_hash = rec.request_hash;
                for (i, &(s, body)) in requests.iter().enumerate() {
                    if s == *si && h(body) != winner_hash {
                        assert_ne!(answers[i], Some(Ok(keys[0].clone())), "seed {seed}");
                    }
                }
            }
        }
    }
}
