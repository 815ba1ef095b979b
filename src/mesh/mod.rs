//! Cross-core messages, and the doorbells that wake a parked core.
//!
//! A request for a key another core owns becomes a [`RedirectMsg::Lookup`] to the owner, which
//! answers with [`RedirectMsg::Answer`]. Messages are plain values (the key travels inline,
//! targets are table text checked by generation or a shared `Arc<str>`, see `crate::base::target`),
//! so forwarding allocates nothing.
//!
//! The mesh is one bounded lock-free queue (crossbeam `ArrayQueue`) per ordered pair of cores,
//! polled by the receiving core's loop every turn. It was first built on glommio's channel
//! mesh, and measured: glommio delivers a shared-channel message only when the receiving
//! executor's reactor runs, and a socket loop that is always runnable lets the reactor run only
//! at glommio's preempt timer (100 ms by default), so every forwarded request took 100 ms
//! (200 ms with the answer's hop); shrinking the preempt timer to tens of microseconds starved
//! the loop instead. Polling our own queues costs a few loads per turn and adds no latency.
//!
//! A parked core (sleeping in its socket ring, see `core_loop::Parking`) is woken by its doorbell:
//! an eventfd its ring always has a read armed on, plus a `parked` flag. A sender pushes its
//! message, then (after a SeqCst fence) rings the doorbell only if the peer is parked; the
//! peer sets `parked`, fences, and checks its queues once more before sleeping. One of the two
//! always sees the other (Dekker), so no message waits for a timeout.

pub mod router; // the one function that decides a key's core
pub mod service; // service threads' bounded outlets into the cores

use crate::api::roles::AuthorReach;
use crate::base::key::InlineKey;
use crossbeam::queue::ArrayQueue;
use shards::link::RedirectStatus;
use std::collections::VecDeque;
use std::sync::atomic::{fence, AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;

/// Capacity of each core-to-core queue. A full queue is not an error: the sender keeps the
/// message in its outbox and retries next loop turn.
pub const MESH_CHANNEL_CAPACITY: usize = 4096;

/// Messages one core may have waiting for one peer's full queue before it stops taking new
/// requests from its connections (they wait, unread, until the outbox drains). Answers to
/// other cores' requests still go out: their number is bounded by those cores' own requests.
pub const MAX_OUTBOX_MSGS: usize = MESH_CHANNEL_CAPACITY;

use crate::base::target::TableView;
pub use crate::base::target::Target;
use shards::behaviour::Behaviour;

/// What a shard answered for one page.
#[derive(Debug)]
pub struct ListedShard {
    pub items: Vec<LinkInfo>,
    /// No live link of the shard comes after the last item.
    pub complete: bool,
    /// The page stopped at its examination budget (`List::budget`) before it was full: the
    /// walk goes on after this key. `None` otherwise.
    pub resume: Option<InlineKey>,
}

/// What a redirect needs to know about a link.
#[derive(Clone, Debug)]
pub struct Answer {
    pub target: Target,
    pub status: RedirectStatus,
    /// The behaviour a visit needs, packed in one byte so the answer still fits a mesh slot
    /// beside its key (`MAX_MESH_MSG_BYTES`): bits 0-1 `forward_query` (0 the server's, 1 on,
    /// 2 off), bits 2-3 `disabled` (0 no, else `DisabledReason`'s number), bit 4 `limited`.
    bits: u8,
    /// Unix seconds before which the link answers as if expired; 0 = always valid. 32 bits
    /// (saturated: a time past 2106 stays in the future), for the same reason.
    pub valid_since_s: u32,
    /// Unix seconds after which the link answers 404; 0 = never.
    pub expires_at_s: u64,
    /// Its redirect rules (`shards::rules`), evaluated by the core that answers the visit:
    /// shared (a thin pointer), or `rules_at` bytes past a table target's end (0: none).
    rules: Option<Arc<Vec<u8>>>,
    rules_at: u8,
}

const LIMITED_BIT: u8 = 1 << 4;

impl Answer {
    /// A plain link's answer, or a link with behaviour `b` and rules `rules`'s.
    #[inline]
    pub fn new(
        target: Target,
        status: RedirectStatus,
        expires_at_s: u64,
        (b, rules): (&Behaviour, Option<crate::base::target::RulesText>),
    ) -> Answer {
        let forward = match b.forward_query {
            None => 0,
            Some(true) => 1,
            Some(false) => 2,
        };
        let disabled = b.disabled.map_or(0, |d| d.reason as u8);
        let limited = if b.max_visits != 0 { LIMITED_BIT } else { 0 };
        Answer {
            target,
            status,
            bits: forward | disabled << 2 | limited,
            valid_since_s: u32::try_from(b.valid_since_s).unwrap_or(u32::MAX),
            expires_at_s,
            rules_at: match &rules {
                Some(crate::base::target::RulesText::Table { at }) => *at,
                _ => 0,
            },
            rules: match rules {
                Some(crate::base::target::RulesText::Shared(p)) => Some(p),
                _ => None,
            },
        }
    }

    /// Whether the visitor's query is forwarded (`None`: the server's `--forward-query`).
    #[inline]
    pub fn forward_query(&self) -> Option<bool> {
        match self.bits & 3 {
            1 => Some(true),
            2 => Some(false),
            _ => None,
        }
    }

    /// Disabled by an admin: the visit gets this reason's status, not the redirect.
    #[inline]
    pub fn disabled(&self) -> Option<shards::behaviour::DisabledReason> {
        use shards::behaviour::DisabledReason;
        match self.bits >> 2 & 3 {
            1 => Some(DisabledReason::Abuse),
            2 => Some(DisabledReason::Legal),
            3 => Some(DisabledReason::Owner),
            _ => None,
        }
    }

    /// The link has a visit limit (`max_visits`): only its owner may answer a visit, counting
    /// it (`owner/visits.rs`), and no core caches the answer.
    #[inline]
    pub fn limited(&self) -> bool {
        self.bits & LIMITED_BIT != 0
    }

    /// Whether the link answers as gone at `now_s`: expired, or not valid yet.
    #[inline]
    pub fn expired(&self, now_s: u64) -> bool {
        (self.expires_at_s != 0 && now_s >= self.expires_at_s)
            || now_s < u64::from(self.valid_since_s)
    }

    /// What to answer a visit with, if this core may read the target (`Target::resolve`).
    #[inline]
    pub fn readable<'a>(&'a self, view: &'a TableView) -> Option<LiveLink<'a>> {
        let rules = match (&self.rules, &self.target) {
            (Some(p), _) => shards::rules::RuleSet::trusted(p),
            (None, Target::Table(t)) if self.rules_at != 0 => {
                // Parsed when its record was read (`shards::rules::RuleSet::parse`).
                shards::rules::RuleSet::trusted(t.rules_after(view, self.rules_at)?)
            }
            _ => shards::rules::RuleSet::EMPTY,
        };
        Some(LiveLink {
            status: self.status,
            target: self.target.resolve(view)?,
            forward_query: self.forward_query(),
            disabled: self.disabled(),
            rules,
        })
    }
}

/// A live link as a visit is answered: where it redirects and how.
#[derive(Clone, Copy, Debug)]
pub struct LiveLink<'a> {
    pub status: RedirectStatus,
    pub target: &'a [u8],
    pub forward_query: Option<bool>,
    pub disabled: Option<shards::behaviour::DisabledReason>,
    /// Its redirect rules (empty: none).
    pub rules: shards::rules::RuleSet<'a>,
}

/// Where an answer goes, echoed back with it: the core that waits for it, and what waits
/// there. (The core sits in each variant so the tag packs beside it: 16 bytes, which keeps
/// every mesh message within `MAX_MESH_MSG_BYTES`.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReplyTo {
    /// A request deferred in a connection's batch on core `core` (`conns`).
    Request { core: u16, place: RequestPlace },
    /// An idempotent create in progress on its scope's owner, core `core` (`flights.rs`).
    Flight { core: u16, flight: u32 },
}

/// A deferred request's place: its connection's slot and the slot's generation (an answer
/// for a connection since closed finds another generation), and its sequence number there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RequestPlace {
    pub slot: u32,
    pub gen: u32,
    pub seq: u32,
}

impl ReplyTo {
    /// An answer for a request deferred on core `core`.
    pub fn request(core: u16, slot: u32, gen: u32, seq: u32) -> ReplyTo {
        let place = RequestPlace { slot, gen, seq };
        ReplyTo::Request { core, place }
    }

    /// The core the answer goes to.
    pub fn core(&self) -> usize {
        match *self {
            ReplyTo::Request { core, .. } | ReplyTo::Flight { core, .. } => usize::from(core),
        }
    }

    /// The request place it addresses; `None` for a flight.
    pub fn place(&self) -> Option<RequestPlace> {
        match *self {
            ReplyTo::Request { place, .. } => Some(place),
            ReplyTo::Flight { .. } => None,
        }
    }
}

const _: () = assert!(std::mem::size_of::<ReplyTo>() == 16);

/// A link as the API sees it (owner's answer to reads and writes).
#[derive(Clone, Debug)]
pub struct LinkInfo {
    pub key: InlineKey,
    pub target: Arc<str>,
    pub status: RedirectStatus,
    pub created_at_s: u64,
    /// Which creation of the key within `created_at_s` this is
    /// (`shards::link::CREATION_TAG_MASK`); 0: unknown.
    pub created_tag: u32,
    /// 0 = never.
    pub expires_at_s: u64,
    /// The API key that created the link (`Author::NONE`: unknown).
    pub author: shards::link::Author,
    /// What the link does when visited.
    pub behaviour: Behaviour,
    /// Its redirect rules (`shards::rules`).
    pub rules: shards::rules::Rules,
    /// Its title and tags (`shards::labels`).
    pub labels: shards::labels::Labels,
}

impl LinkInfo {
    /// The link a table record holds under `key`.
    pub fn from_table(key: InlineKey, l: &shards::table::LinkRef<'_>) -> LinkInfo {
        LinkInfo {
            key,
            target: Arc::from(l.target),
            status: l.status,
            created_at_s: l.created_at_s,
            created_tag: shards::link::creation_tag(l.flags),
            expires_at_s: l.expires_at_s,
            author: l.author,
            behaviour: l.behaviour,
            rules: shards::rules::Rules::current(l.rules),
            labels: shards::labels::Labels::from_body(l.labels),
        }
    }

    /// The link a log record holds under `key`.
    pub fn from_log(key: InlineKey, l: &shards::log::LinkFields) -> LinkInfo {
        LinkInfo {
            key,
            target: Arc::from(l.target.as_str()),
            status: l.status,
            created_at_s: l.created_at_s,
            created_tag: shards::link::creation_tag(l.flags),
            expires_at_s: l.expires_at_s,
            author: l.author,
            behaviour: l.behaviour,
            rules: l.rules.clone(),
            labels: l.labels.clone(),
        }
    }

    /// The link as a log record holds it, with the generated ID behind its key (`id`, 0 for
    /// an alias).
    pub fn log_fields(&self, id: u64) -> shards::log::LinkFields<&str> {
        shards::log::LinkFields {
            key: self.key.as_str(),
            target: &self.target,
            status: self.status,
            expires_at_s: self.expires_at_s,
            created_at_s: self.created_at_s,
            flags: self.created_tag,
            id,
            author: self.author,
            behaviour: self.behaviour,
            rules: self.rules.clone(),
            labels: self.labels.clone(),
        }
    }
}

/// A change to a link, executed by the key's owner (in fleet mode, judged by the database).
#[derive(Debug)]
pub enum WriteReq {
    /// Insert if absent (the owner's conditional insert is the final judge of uniqueness).
    /// Boxed: the new link's fields do not fit a mesh slot beside the key.
    Create {
        key: InlineKey,
        new: Box<NewLink>,
    },
    /// A change to an existing link within `reach` (else `NotFound`: an author-only key's
    /// view of another author's link, `api::roles`).
    Patch {
        key: InlineKey,
        target: Option<Arc<str>>,
        expiry: crate::api::request::ExpiryUpdate,
        status: Option<RedirectStatus>,
        reach: AuthorReach,
        /// Boxed: rarely sent, and larger than the rest of the change.
        behaviour: Option<Box<crate::api::request::BehaviourUpdate>>,
    },
    Delete {
        key: InlineKey,
        reach: AuthorReach,
    },
    /// `DELETE /api/v1/urls/{key}/stats`: purge the link's click stats (it stays).
    ResetStats {
        key: InlineKey,
        reach: AuthorReach,
    },
}

impl WriteReq {
    /// The key the request is about (its owner executes it).
    pub fn key(&self) -> InlineKey {
        match self {
            WriteReq::Create { key, .. }
            | WriteReq::Patch { key, .. }
            | WriteReq::Delete { key, .. }
            | WriteReq::ResetStats { key, .. } => *key,
        }
    }

    /// Whose links the request may change (a create may make any key).
    pub fn reach(&self) -> AuthorReach {
        match self {
            WriteReq::Create { .. } => AuthorReach::ANY,
            WriteReq::Patch { reach, .. }
            | WriteReq::Delete { reach, .. }
            | WriteReq::ResetStats { reach, .. } => *reach,
        }
    }
}

/// The fields of a link a [`WriteReq::Create`] makes.
#[derive(Debug)]
pub struct NewLink {
    pub target: Arc<str>,
    pub status: RedirectStatus,
    pub expires_at_s: u64,
    pub created_at_s: u64,
    /// The generated ID behind the key; 0 for a custom alias.
    pub id: u64,
    /// For a create under an Idempotency-Key: the scope (`api::idempotency::scope_string`) and
    /// request hash, logged in the same record as the link (`LogOp::PutWithIdem`).
    pub idem: Option<Box<(String, [u8; 32])>>,
    /// The API key that created it.
    pub author: shards::link::Author,
    pub behaviour: Behaviour,
    pub rules: shards::rules::Rules,
    pub labels: shards::labels::Labels,
}

impl NewLink {
    /// The link this create makes under `key`, with creation tag `created_tag` (0: unknown,
    /// as in fleet mode, where the database's transaction decides).
    pub fn info(&self, key: InlineKey, created_tag: u32) -> LinkInfo {
        LinkInfo {
            key,
            target: self.target.clone(),
            status: self.status,
            created_at_s: self.created_at_s,
            created_tag,
            expires_at_s: self.expires_at_s,
            author: self.author,
            behaviour: self.behaviour,
            rules: self.rules.clone(),
            labels: self.labels.clone(),
        }
    }
}

/// An API read of one link, answered by the key's owner from what it holds (in fleet mode,
/// read through to the database when it holds nothing).
#[derive(Debug)]
pub enum ReadReq {
    /// The link, if it is within `reach` (`api::roles`).
    Get { key: InlineKey, reach: AuthorReach },
    /// `GET /api/v1/urls/{key}/stats`: does the link exist within `reach` (expired links too:
    /// their clicks stay readable)?
    StatsOf { key: InlineKey, reach: AuthorReach },
    /// An idempotent create's replay: the link, if it is the one created at `created_at_s`
    /// (else `NotFound`: it was deleted, and the key may now be someone else's).
    Replay {
        key: InlineKey,
        created_at_s: u64,
        /// The creation's tag (`shards::link::CREATION_TAG_MASK`); 0: unknown.
        created_tag: u32,
    },
}

impl ReadReq {
    /// The key the request is about (its owner answers it).
    pub fn key(&self) -> InlineKey {
        match self {
            ReadReq::Get { key, .. }
            | ReadReq::StatsOf { key, .. }
            | ReadReq::Replay { key, .. } => *key,
        }
    }

    /// Whose links the read may see (a replay is the scope's own create).
    pub fn reach(&self) -> AuthorReach {
        match self {
            ReadReq::Get { reach, .. } | ReadReq::StatsOf { reach, .. } => *reach,
            ReadReq::Replay { .. } => AuthorReach::ANY,
        }
    }
}

/// What the API asks of a key's owner: a read or a change.
#[derive(Debug)]
pub enum OwnerAsk {
    Read(ReadReq),
    Write(WriteReq),
}

impl OwnerAsk {
    /// The message carrying it, answered to `reply`.
    pub fn message(self, reply: ReplyTo) -> ApiMsg {
        match self {
            OwnerAsk::Read(req) => ApiMsg::Read { reply, req },
            OwnerAsk::Write(req) => ApiMsg::Write { reply, req },
        }
    }
}

/// Which links a list page holds: those of the given domains (`None`: every domain's) within
/// an author's reach (`api::roles`), and only crawlable ones for `robots.txt`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListFilter {
    /// Domain numbers, sorted.
    pub domains: Option<Vec<u32>>,
    pub author: AuthorReach,
    /// Only links marked `crawlable` (`api_front::robots`).
    pub crawlable_only: bool,
    /// Only links whose short code, target, title or a tag contains this, ASCII case
    /// ignored (Shlink's `searchTerm`; lowercase here).
    pub search: Option<Box<str>>,
    /// Only links with these tags (normalized): any of them, or all (Shlink's `tags[]` and
    /// `tagsMode`).
    pub tags: Option<TagFilter>,
    /// Only links with at least one tag (the tag lists, `api_front::tags`).
    pub tagged: bool,
    /// Not the links with these tags (any or all of them: Shlink's `excludeTags[]` and
    /// `excludeTagsMode`).
    pub exclude_tags: Option<TagFilter>,
    /// Not the links whose visit limit is used up (Shlink's `excludeMaxVisitsReached`).
    pub exclude_used_up: bool,
    /// Only links created within these seconds, both included (Shlink's `startDate`,
    /// `endDate`).
    pub created: Option<(u64, u64)>,
}

impl ListFilter {
    /// Whether the link of stored key `stored` created by `author` with behaviour `b`
    /// belongs on the page.
    pub fn admits(&self, stored: &[u8], author: shards::link::Author, b: &Behaviour) -> bool {
        let domain = shards::link::split_stored_key(stored).0;
        (b.crawlable || !self.crawlable_only)
            && !(self.exclude_used_up && b.max_visits != 0 && b.visits >= b.max_visits)
            && self
                .domains
                .as_ref()
                .is_none_or(|d| d.binary_search(&domain).is_ok())
            && self.author.admits(author)
    }

    /// Whether the link of stored key `stored`, to `target`, created at `created_at_s`,
    /// labelled `labels`, passes the content filters (search term, tags, creation dates).
    pub fn admits_content(
        &self,
        stored: &[u8],
        (target, created_at_s): (&str, u64),
        labels: shards::labels::LabelsRef<'_>,
    ) -> bool {
        let key = shards::link::split_stored_key(stored).1;
        self.created
            .is_none_or(|(from, to)| (from..=to).contains(&created_at_s))
            && self.tags.as_ref().is_none_or(|t| t.admits(labels))
            && (!self.tagged || labels.tags().next().is_some())
            && self.exclude_tags.as_ref().is_none_or(|t| !t.admits(labels))
            && self.search.as_deref().is_none_or(|needle| {
                let needle = needle.as_bytes();
                contains_ignore_ascii_case(key, needle)
                    || contains_ignore_ascii_case(target.as_bytes(), needle)
                    || labels
                        .title()
                        .is_some_and(|t| contains_ignore_ascii_case(t.as_bytes(), needle))
                    || labels
                        .tags()
                        .any(|t| contains_ignore_ascii_case(t.as_bytes(), needle))
            })
    }

    /// The content filters of `asked` (a list request's), over this filter's reach.
    pub fn take_content(&mut self, asked: &ListFilter) {
        self.search.clone_from(&asked.search);
        self.created = asked.created;
        self.tags.clone_from(&asked.tags);
        self.exclude_tags.clone_from(&asked.exclude_tags);
        self.exclude_used_up = asked.exclude_used_up;
    }

    /// Whether a walk with this filter must see every link (content filters can leave a
    /// page empty for a long stretch).
    pub fn scans(&self) -> bool {
        self.search.is_some()
            || self.created.is_some()
            || self.tags.is_some()
            || self.tagged
            || self.exclude_tags.is_some()
            || self.exclude_used_up
    }
}

/// A list's tag filter: links with any of `tags`, or with all of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TagFilter {
    /// Normalized (`shards::labels::normalize_tag`), not empty.
    pub tags: Vec<Box<str>>,
    pub all: bool,
}

impl TagFilter {
    fn admits(&self, labels: shards::labels::LabelsRef<'_>) -> bool {
        match self.all {
            true => self.tags.iter().all(|t| labels.has_tag(t)),
            false => self.tags.iter().any(|t| labels.has_tag(t)),
        }
    }
}

/// Whether `hay` contains `needle` (lowercase), ASCII letters compared case-insensitively.
fn contains_ignore_ascii_case(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty()
        || hay
            .windows(needle.len())
            .any(|w| w.eq_ignore_ascii_case(needle))
}

/// The owner's verdict on a [`WriteReq`] or [`ReadReq`].
#[derive(Debug)]
pub enum WriteOutcome {
    // Boxed: with its author a link's fields no longer fit a mesh slot beside a `ReplyTo`
    // (`MAX_MESH_MSG_BYTES`); API answers may allocate.
    Created(Box<LinkInfo>),
    Updated(Box<LinkInfo>),
    Found(Box<LinkInfo>),
    Deleted,
    /// Create: the key is taken.
    Exists,
    NotFound,
    /// Another write to this key is not yet durable; retry.
    WriteInProgress,
    /// The log cannot be written (failed write or fsync): nothing was acknowledged.
    StorageFailed,
    /// Fleet mode: the fleet database did not answer (down, hung, unreachable) or the queue to
    /// it is full. The write may or may not have been committed there.
    DatabaseUnavailable,
    /// Fleet mode: the database that answers failed the node's checks (`fleet_mode::follower`); nothing
    /// was sent to it.
    DatabaseRefused(fleet::DbRefusal),
    /// Idempotency-Key reused with a different request.
    IdemMismatch,
    /// Too many idempotent requests in flight.
    Busy,
    /// A page of one shard's links.
    Listed(Box<ListedShard>),
}

/// Largest a mesh message may be. The queues hold messages by value (no allocation per
/// forward), so every slot is this big: 152 bytes is an `Answer` with its inline key (a
/// stored key: up to 71 bytes with its domain's prefix) and where its redirect rules are (a
/// thin pointer and an offset: a forwarded visit evaluates the rules on the core that read
/// the request), under two and a half cache lines. A variant that grows past it must box its
/// payload; the build fails otherwise.
pub const MAX_MESH_MSG_BYTES: usize = 152;

/// List steps (`ApiMsg::List`: one owner step of a list walk, at most
/// `api_front::listing::SCAN_STEP_LINKS` links) a core takes per loop turn; more wait for
/// the next turn, after the ring's completions (redirects).
pub const MAX_LIST_STEPS_PER_TURN: u32 = 1;

const _: () = assert!(std::mem::size_of::<MeshMsg>() <= MAX_MESH_MSG_BYTES);

/// A message between cores, in three families: the redirect path, the API, and the LRU
/// upkeep that keeps cached answers honest.
#[derive(Debug)]
pub enum MeshMsg {
    Redirect(RedirectMsg),
    Api(ApiMsg),
    Cache(CacheMsg),
}

/// The redirect path: a lookup forwarded to a key's owner and its answer.
#[derive(Debug)]
pub enum RedirectMsg {
    /// "Who does `key` redirect to?", sent to the key's owner. `visit`: a GET, which a link
    /// with a visit limit counts (a HEAD is no visit).
    Lookup {
        reply: ReplyTo,
        key: InlineKey,
        visit: bool,
    },
    /// The owner's answer; `None` means no such (live) link. The key comes back so the
    /// asking core can cache the answer.
    Answer {
        reply: ReplyTo,
        key: InlineKey,
        answer: Option<Answer>,
    },
    /// Fleet mode: the owner's answer after reading through to the database (the key was not
    /// here). Never cached by the asking core: the change feed brings the link, and with it
    /// the invalidations that keep cached answers honest.
    Fetched {
        reply: ReplyTo,
        key: InlineKey,
        fetched: Fetched,
    },
}

/// A read-through's outcome.
#[derive(Clone, Debug)]
pub enum Fetched {
    Found(Answer),
    /// No live link (never written, deleted, or expired).
    Absent,
    /// The database did not answer in time: 503 with `Retry-After`, never a guessed 404.
    Unavailable,
}

/// The API: writes and reads executed by a key's owner, and idempotent creates decided by a
/// scope's owner.
#[derive(Debug)]
pub enum ApiMsg {
    /// Execute a change on the key's owner.
    Write { reply: ReplyTo, req: WriteReq },
    /// Answer a read on the key's owner.
    Read { reply: ReplyTo, req: ReadReq },
    /// Its result, back to the core that holds the HTTP request (or the flight).
    WriteDone {
        reply: ReplyTo,
        outcome: WriteOutcome,
    },
    /// One page of a shard's live links after `after`, sent to the shard's owner
    /// (`owner::listing`); answered with `WriteDone { outcome: Listed }`.
    List {
        reply: ReplyTo,
        shard: u32,
        after: Option<InlineKey>,
        limit: u32,
        /// Which links the page may hold (domains, author).
        filter: Arc<ListFilter>,
        /// At most this many links examined (`api_front::listing::SCAN_STEP_LINKS`); `None`:
        /// until the page is full or the shard done.
        budget: Option<u32>,
    },
    /// An idempotent create, sent to the owner of its idempotency scope.
    IdemCreate {
        reply: ReplyTo,
        scope: crate::api::idempotency::IdemScope,
        hash: crate::api::idempotency::RequestHash,
        req: Box<crate::api::request::CreateRequest>,
        created_at_s: u64,
    },
}

/// LRU upkeep: no core may serve an answer its owner has replaced.
#[derive(Debug)]
pub enum CacheMsg {
    /// Drop `key` from the LRU, then acknowledge: sent by an owner before it answers a PATCH or
    /// DELETE, so no core serves the old target afterwards.
    Invalidate {
        from: u16,
        token: u64,
        key: InlineKey,
        /// The link is deleted or its stats reset: also hand off the clicks counted so far
        /// and say up to which message they go (`Combiner::cut`).
        purge: bool,
    },
    InvalidateAck {
        token: u64,
        from: u16,
        /// With `purge`: the last click message of `from` that may hold the old link's clicks.
        clicks_seq: u64,
    },
    /// These tables are replaced (per shard: every generation up to the one given): raise
    /// the view past them, then acknowledge. Sent by an owner to every core, itself included,
    /// after a compaction; the old tables are freed after the last ack (`crate::base::target`).
    /// Queues are FIFO per pair, so every answer sent before this one is processed first.
    RetireTables {
        from: u16,
        token: u64,
        retired: Box<[(u32, u32)]>,
        /// Also drop every cached answer: a fleet regeneration (`owner/regen.rs`) replaced
        /// states the owner's memtable held, not only tables.
        forget_all: bool,
    },
    RetireAck {
        token: u64,
    },
}

impl From<RedirectMsg> for MeshMsg {
    fn from(m: RedirectMsg) -> MeshMsg {
        MeshMsg::Redirect(m)
    }
}

impl From<ApiMsg> for MeshMsg {
    fn from(m: ApiMsg) -> MeshMsg {
        MeshMsg::Api(m)
    }
}

impl From<CacheMsg> for MeshMsg {
    fn from(m: CacheMsg) -> MeshMsg {
        MeshMsg::Cache(m)
    }
}

/// One core's doorbell: an eventfd and whether that core is (about to be) asleep on it.
pub struct Doorbell {
    pub fd: i32,
    pub parked: AtomicBool,
    /// The CPU the core runs on (-1 until it started): service threads that share CPUs with
    /// cores read it with `parked` to step aside for a core that wants its CPU
    /// (`analytics::step_aside`).
    pub cpu: AtomicI32,
}

/// All cores' doorbells, shared by every core.
pub struct Doorbells(pub Vec<Doorbell>);

impl Doorbells {
    pub fn new(cores: usize) -> std::io::Result<Doorbells> {
        let mut v = Vec::with_capacity(cores);
        for _ in 0..cores {
            // SAFETY: eventfd has no memory preconditions.
            let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            v.push(Doorbell {
                fd,
                parked: AtomicBool::new(false),
                cpu: AtomicI32::new(-1),
            });
        }
        Ok(Doorbells(v))
    }

    /// Wakes `core` if it is parked. Called after a message to it was pushed.
    #[inline]
    pub fn ring(&self, core: usize) {
        fence(Ordering::SeqCst);
        let bell = &self.0[core];
        if bell.parked.load(Ordering::SeqCst) {
            let one: u64 = 1;
            // SAFETY: writing 8 bytes from a valid u64 to an eventfd we own. A non-blocking
            // eventfd write only fails if the counter would overflow, which still leaves the
            // fd readable, so the wake-up is not lost and the result can be ignored.
            unsafe { libc::write(bell.fd, (&one as *const u64).cast(), 8) };
        }
    }
}

impl Drop for Doorbells {
    fn drop(&mut self) {
        for b in &self.0 {
            // SAFETY: each fd was created in `new` and is closed once here.
            unsafe { libc::close(b.fd) };
        }
    }
}

/// The queues between every ordered pair of cores: `queues[from * cores + to]`.
pub struct MeshQueues {
    cores: usize,
    queues: Vec<ArrayQueue<MeshMsg>>,
}

impl MeshQueues {
    pub fn new(cores: usize) -> MeshQueues {
        MeshQueues {
            cores,
            queues: (0..cores * cores)
                .map(|_| ArrayQueue::new(MESH_CHANNEL_CAPACITY))
                .collect(),
        }
    }

    #[inline]
    fn queue(&self, from: usize, to: usize) -> &ArrayQueue<MeshMsg> {
        &self.queues[from * self.cores + to]
    }
}

/// A core's end of the mesh.
pub struct Mesh {
    me: usize,
    queues: Arc<MeshQueues>,
    /// Messages a full queue refused, retried next turn, in order, per peer.
    outbox: Vec<VecDeque<MeshMsg>>,
    doorbells: Arc<Doorbells>,
    /// The peer to poll first next time, so no peer's queue is always drained last.
    next_peer: usize,
    /// Messages this core sends itself (an API request whose owner is this core), popped
    /// before the peers' queues.
    local: VecDeque<MeshMsg>,
    /// How many of `local` this turn's drain may still pop: those queued before it began
    /// ([`Mesh::begin_turn`]). A chain of messages to itself (a list scan's owner step, the
    /// front's next ask, the next step...) so takes one link per loop turn, with the ring's
    /// completions (redirects) served between links, instead of running to its end.
    local_this_turn: usize,
    /// List steps ([`ApiMsg::List`]) popped this turn: past [`MAX_LIST_STEPS_PER_TURN`] a
    /// step waits in `local` for the next turn, so a walk whose owner is another core (its
    /// next ask arriving while this core still drains) takes one step per turn here too.
    list_steps_this_turn: u32,
    /// Messages that found their peer's queue full and waited in `outbox` (a gauge of mesh
    /// congestion for `/metrics`).
    pub deferred_sends: u64,
}

impl Mesh {
    pub fn new(me: usize, queues: Arc<MeshQueues>, doorbells: Arc<Doorbells>) -> Mesh {
        let cores = queues.cores;
        assert!(me < cores && doorbells.0.len() == cores);
        Mesh {
            me,
            queues,
            outbox: (0..cores).map(|_| VecDeque::new()).collect(),
            doorbells,
            next_peer: 0,
            local: VecDeque::new(),
            local_this_turn: 0,
            list_steps_this_turn: 0,
            deferred_sends: 0,
        }
    }

    /// A loop turn's drain begins: [`Mesh::pop`] takes the local messages queued so far and
    /// none sent during the drain (they wait for the next turn).
    #[inline]
    pub fn begin_turn(&mut self) {
        self.local_this_turn = self.local.len();
        self.list_steps_this_turn = 0;
    }

    /// Sends `msg` to `core`, which may be this one (it is then popped by this core's next
    /// [`Mesh::pop`], never handled re-entrantly).
    pub fn deliver(&mut self, core: usize, msg: impl Into<MeshMsg>) {
        let msg = msg.into();
        if core == self.me {
            self.local.push_back(msg);
        } else {
            self.send(core, msg);
        }
    }

    pub fn me(&self) -> usize {
        self.me
    }

    /// Sends `msg` to `core`, queueing it locally if the queue is full.
    pub fn send(&mut self, core: usize, msg: impl Into<MeshMsg>) {
        let msg = msg.into();
        debug_assert_ne!(core, self.me, "a core does not forward to itself");
        if !self.outbox[core].is_empty() {
            return self.defer(core, msg);
        }
        match self.queues.queue(self.me, core).push(msg) {
            Ok(()) => self.doorbells.ring(core),
            Err(msg) => self.defer(core, msg),
        }
    }

    fn defer(&mut self, core: usize, msg: MeshMsg) {
        self.outbox[core].push_back(msg);
        self.deferred_sends += 1;
    }

    /// Retries queued messages. Returns whether any remain.
    pub fn flush_outbox(&mut self) -> bool {
        let mut left = false;
        for core in 0..self.outbox.len() {
            let mut sent = false;
            while let Some(msg) = self.outbox[core].pop_front() {
                match self.queues.queue(self.me, core).push(msg) {
                    Ok(()) => sent = true,
                    Err(msg) => {
                        self.outbox[core].push_front(msg);
                        left = true;
                        break;
                    }
                }
            }
            if sent {
                self.doorbells.ring(core);
            }
        }
        left
    }

    /// Some peer's outbox holds [`MAX_OUTBOX_MSGS`] or more: take no new requests.
    pub fn congested(&self) -> bool {
        self.outbox.iter().any(|q| q.len() >= MAX_OUTBOX_MSGS)
    }

    /// Takes the next received message, visiting peers round-robin; a list step past this
    /// turn's [`MAX_LIST_STEPS_PER_TURN`] is kept for the next turn instead.
    #[inline]
    pub fn pop(&mut self) -> Option<MeshMsg> {
        loop {
            let m = self.pop_any()?;
            if matches!(m, MeshMsg::Api(ApiMsg::List { .. })) {
                if self.list_steps_this_turn >= MAX_LIST_STEPS_PER_TURN {
                    self.local.push_back(m);
                    continue;
                }
                self.list_steps_this_turn += 1;
            }
            return Some(m);
        }
    }

    #[inline]
    fn pop_any(&mut self) -> Option<MeshMsg> {
        if self.local_this_turn > 0 {
            self.local_this_turn -= 1;
            return self.local.pop_front();
        }
        let cores = self.queues.cores;
        for i in 0..cores {
            let peer = (self.next_peer + i) % cores;
            if peer == self.me {
                continue;
            }
            if let Some(m) = self.queues.queue(peer, self.me).pop() {
                self.next_peer = (peer + 1) % cores;
                return Some(m);
            }
        }
        None
    }

    /// Whether any peer (or this core) has sent us something not yet popped.
    pub fn inbox_is_empty(&self) -> bool {
        self.local.is_empty()
            && (0..self.queues.cores)
                .filter(|&p| p != self.me)
                .all(|p| self.queues.queue(p, self.me).is_empty())
    }

    /// This core's doorbell.
    pub fn my_doorbell(&self) -> &Doorbell {
        &self.doorbells.0[self.me]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(seq: u32) -> RedirectMsg {
        let reply = ReplyTo::request(0, 0, 0, seq);
        let key = InlineKey::new(b"k").unwrap();
        RedirectMsg::Lookup {
            reply,
            key,
            visit: true,
        }
    }

    #[test]
    fn a_full_queue_spills_into_the_outbox_in_order_and_congests_past_its_bound() {
        let queues = Arc::new(MeshQueues::new(2));
        let bells = Arc::new(Doorbells::new(2).unwrap());
        let mut a = Mesh::new(0, queues.clone(), bells.clone());
        let mut b = Mesh::new(1, queues, bells);
        let n = MESH_CHANNEL_CAPACITY + MAX_OUTBOX_MSGS;
        for i in 0..n as u32 {
            assert!(!a.congested(), "congested after {i} of {n}");
            a.send(1, lookup(i));
        }
        assert!(a.congested());
        assert_eq!(a.deferred_sends, MAX_OUTBOX_MSGS as u64);
        let mut next = 0u32;
        while (next as usize) < n {
            while let Some(m) = b.pop() {
                let MeshMsg::Redirect(RedirectMsg::Lookup { reply, .. }) = m else {
                    panic!("only lookups were sent");
                };
                assert_eq!(
                    reply.place().unwrap().seq,
                    next,
                    "FIFO through queue and outbox"
                );
                next += 1;
            }
            a.flush_outbox();
        }
        assert!(!a.congested());
    }

    #[test]
    fn a_core_takes_one_list_step_per_turn() {
        let queues = Arc::new(MeshQueues::new(2));
        let bells = Arc::new(Doorbells::new(2).unwrap());
        let mut a = Mesh::new(0, queues.clone(), bells.clone());
        let mut b = Mesh::new(1, queues, bells);
        let step = |seq| ApiMsg::List {
            reply: ReplyTo::request(1, 0, 0, seq),
            shard: 0,
            after: None,
            limit: 10,
            filter: Default::default(),
            budget: Some(256),
        };
        b.send(0, step(0));
        b.send(0, step(1));
        b.send(0, lookup(7));
        let seq_of = |m: Option<MeshMsg>| match m {
            Some(MeshMsg::Api(ApiMsg::List { reply, .. })) => reply.place().unwrap().seq,
            Some(MeshMsg::Redirect(RedirectMsg::Lookup { reply, .. })) => {
                100 + reply.place().unwrap().seq
            }
            other => panic!("{other:?}"),
        };
        a.begin_turn();
        // The first step, then the lookup behind the second step: the second waits.
        assert_eq!(seq_of(a.pop()), 0);
        assert_eq!(seq_of(a.pop()), 107);
        assert!(a.pop().is_none());
        assert!(!a.inbox_is_empty());
        a.begin_turn();
        assert_eq!(seq_of(a.pop()), 1);
        assert!(a.pop().is_none());
        assert!(a.inbox_is_empty());
    }

    #[test]
    fn a_core_delivers_to_itself_before_its_peers() {
        let queues = Arc::new(MeshQueues::new(2));
        let bells = Arc::new(Doorbells::new(2).unwrap());
        let mut a = Mesh::new(0, queues.clone(), bells.clone());
        let mut b = Mesh::new(1, queues, bells);
        b.send(0, lookup(1));
        a.deliver(0, lookup(0));
        assert!(!a.inbox_is_empty());
        a.begin_turn();
        let seq = |m: Option<MeshMsg>| match m {
            Some(MeshMsg::Redirect(RedirectMsg::Lookup { reply, .. })) => {
                reply.place().unwrap().seq
            }
            other => panic!("{other:?}"),
        };
        assert_eq!(seq(a.pop()), 0);
        // Sent to itself during the drain: not this turn's (a chain of local messages
        // yields to the ring between links), the peer's still is.
        a.deliver(0, lookup(2));
        assert_eq!(seq(a.pop()), 1);
        assert!(a.pop().is_none());
        assert!(!a.inbox_is_empty());
        a.begin_turn();
        assert_eq!(seq(a.pop()), 2);
        assert!(a.inbox_is_empty());
    }
}
