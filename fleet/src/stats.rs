//! What the fleet authority reports: allocation counts, failures by class, the transaction
//! latency histogram, waste inputs and whether it is fenced. Written by the allocator thread,
//! read by whichever core answers `/metrics` or `/readyz`: atomics only, no lock.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::time::Duration;

use crate::db::FailureClass;

/// Upper bounds (µs) of the allocation-latency histogram buckets; the last bucket is +Inf.
pub const LATENCY_BUCKETS_US: [u64; 12] = [
    250, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 500_000, 1_000_000, 2_000_000,
];

/// How often a database that failed the start's checks (another schema version, another
/// fleet's secret, no namespace) is checked again while the node serves what it holds.
pub const DB_REFUSED_RECHECK_MS: u64 = 1_000;

/// Why a node does not use the database that answers (it serves the links it holds and
/// refuses creates, edits and misses meanwhile; checked again while it lasts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum DbRefusal {
    /// The node started while the database did not answer and has not checked it since.
    Unchecked = 1,
    /// The database is at another schema version than this build's.
    Schema = 2,
    /// The database holds another fleet's key-space secret.
    Secret = 3,
    /// The node's namespace does not exist there.
    Namespace = 4,
}

impl DbRefusal {
    pub const ALL: [DbRefusal; 4] = [
        DbRefusal::Unchecked,
        DbRefusal::Schema,
        DbRefusal::Secret,
        DbRefusal::Namespace,
    ];

    /// The metric label and problem-type suffix.
    pub fn slug(self) -> &'static str {
        match self {
            DbRefusal::Unchecked => "unchecked",
            DbRefusal::Schema => "schema",
            DbRefusal::Secret => "secret",
            DbRefusal::Namespace => "namespace",
        }
    }

    /// What an operator reads in `/readyz?verbose` and a 503's detail.
    pub fn explain(self) -> &'static str {
        match self {
            DbRefusal::Unchecked => {
                "the fleet database has not been checked since this node started without it"
            }
            DbRefusal::Schema => {
                "the fleet database is at another schema version than this build's (a restore                  or a downgrade?); run `ricochet fleet init` or restore the right database"
            }
            DbRefusal::Secret => {
                "the fleet database holds another fleet's key-space secret: --fleet-pg points                  at another fleet's database"
            }
            DbRefusal::Namespace => {
                "this node's namespace does not exist in the fleet database; create it with                  `ricochet fleet namespace create`"
            }
        }
    }

    fn from_u8(v: u8) -> Option<DbRefusal> {
        DbRefusal::ALL.into_iter().find(|r| *r as u8 == v)
    }
}

/// Shared counters of one node's fleet authority.
#[derive(Default)]
pub struct FleetStats {
    allocations: AtomicU64,
    confirmed_ids: AtomicU64,
    failures: [AtomicU64; FailureClass::ALL.len()],
    /// Allocations whose COMMIT reply was lost and whose outcome could not be proven.
    unknown_outcomes: AtomicU64,
    latency_buckets: [AtomicU64; LATENCY_BUCKETS_US.len() + 1],
    latency_sum_us: AtomicU64,
    fenced: AtomicBool,
    /// Last `next_id` the node saw in the database (0 before the first allocation).
    next_id_seen: AtomicU64,
    /// End of the namespace (`hi`), once known.
    namespace_hi: AtomicU64,
    /// Link writes (`links.rs`): committed or judged by the database, and failed.
    link_writes: AtomicU64,
    link_write_failures: AtomicU64,
    /// Creates that shared a multi-row statement with others of their round.
    batched_creates: AtomicU64,
    /// The change feed: rows applied, polls or applies that failed, and the Unix ms of the
    /// last poll that found the node caught up (0 before the first).
    feed_rows: AtomicU64,
    feed_failures: AtomicU64,
    feed_caught_up_ms: AtomicU64,
    /// While an open transaction holds the feed back (rows committed after it wait): the pid
    /// of its backend (0: none) and how long it had been open when last seen, in seconds.
    feed_held_by_pid: AtomicU64,
    feed_held_for_s: AtomicU64,
    /// Feed rows that are not links a node can hold (not applied; counted, never silent).
    feed_rows_unusable: AtomicU64,
    /// Read-through: queries sent and keys asked for in them.
    read_queries: AtomicU64,
    read_keys: AtomicU64,
    /// Ceilings (`ceiling.rs`): raises this node started, allocations that waited for one to
    /// mature, and lookups answered 404 without a query because the key's ID is above every
    /// namespace's freshly read ceiling.
    ceiling_raises: AtomicU64,
    ceiling_waits: AtomicU64,
    shed_lookups: AtomicU64,
    /// The node is regenerating its links from a database snapshot (its feed cursor could
    /// not be continued: not past the tombstone horizon, or ahead of a restored database): it
    /// may serve links deleted elsewhere until the swap. Not ready meanwhile.
    regenerating: AtomicBool,
    /// Live regenerations finished since start.
    regenerations: AtomicU64,
    /// Tombstones this node removed (retention).
    tombstones_removed: AtomicU64,
    /// Why the database that answers is not used (`DbRefusal as u8`), 0 if it is.
    refused: AtomicU8,
    /// The database was found on another history (a failover, a restore) and this node's last
    /// confirmed allocation is not yet proven to be in it: no ID on hand is used meanwhile.
    ids_unproven: AtomicBool,
}

/// A copy of [`FleetStats`] for encoding.
#[derive(Clone, Debug, Default)]
pub struct FleetStatsSnapshot {
    pub allocations: u64,
    pub confirmed_ids: u64,
    pub failures: Vec<(&'static str, u64)>,
    pub unknown_outcomes: u64,
    /// `(upper bound in seconds, cumulative count)`, the last with `f64::INFINITY`.
    pub latency_buckets: Vec<(f64, u64)>,
    pub latency_sum_s: f64,
    pub latency_count: u64,
    pub fenced: bool,
    pub ids_unproven: bool,
    pub next_id_seen: u64,
    pub namespace_hi: u64,
    pub link_writes: u64,
    pub link_write_failures: u64,
    pub batched_creates: u64,
    pub feed_rows: u64,
    pub feed_failures: u64,
    pub feed_caught_up_ms: u64,
    pub feed_held_by_pid: u64,
    pub feed_held_for_s: u64,
    pub feed_rows_unusable: u64,
    pub read_queries: u64,
    pub read_keys: u64,
    pub ceiling_raises: u64,
    pub ceiling_waits: u64,
    pub shed_lookups: u64,
    pub regenerating: bool,
    pub regenerations: u64,
    pub tombstones_removed: u64,
    pub refused: Option<DbRefusal>,
}

impl FleetStats {
    pub(crate) fn allocation(&self, took: Duration, ids: u64) {
        self.allocations.fetch_add(1, Ordering::Relaxed);
        self.confirmed_ids.fetch_add(ids, Ordering::Relaxed);
        self.latency(took);
    }

    pub(crate) fn failure(&self, class: FailureClass, took: Duration) {
        self.failures[class.index()].fetch_add(1, Ordering::Relaxed);
        self.latency(took);
    }

    pub(crate) fn record_link_writes<T>(
        &self,
        results: &[Result<T, FailureClass>],
        _took: Duration,
    ) {
        let failed = results.iter().filter(|r| r.is_err()).count() as u64;
        // Release: a thread that reads the count (`link_writes_done`) and sees these writes
        // knows they committed before anything it sends next (the feed's history check).
        self.link_writes
            .fetch_add(results.len() as u64 - failed, Ordering::Release);
        self.link_write_failures
            .fetch_add(failed, Ordering::Relaxed);
    }

    /// Link writes the database committed or judged so far; counted before their answers
    /// reach the cores.
    pub fn link_writes_done(&self) -> u64 {
        self.link_writes.load(Ordering::Acquire)
    }

    pub(crate) fn read_query(&self, keys: usize) {
        self.read_queries.fetch_add(1, Ordering::Relaxed);
        self.read_keys.fetch_add(keys as u64, Ordering::Relaxed);
    }

    pub(crate) fn batched(&self, creates: usize) {
        self.batched_creates
            .fetch_add(creates as u64, Ordering::Relaxed);
    }

    /// The feed applied `rows` rows durably on every owner core.
    pub fn feed_applied(&self, rows: u64) {
        self.feed_rows.fetch_add(rows, Ordering::Relaxed);
    }

    /// A feed poll or apply failed (it is retried).
    pub fn feed_failed(&self) {
        self.feed_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// A poll found rows waiting behind the open transaction of backend `pid`, open `age_s`
    /// seconds: not caught up.
    pub fn feed_held_back(&self, pid: u64, age_s: u64) {
        self.feed_held_for_s.store(age_s, Ordering::Relaxed);
        self.feed_held_by_pid.store(pid, Ordering::Relaxed);
    }

    /// A feed row could not be applied (not a link this node can hold).
    pub fn feed_row_unusable(&self) {
        self.feed_rows_unusable.fetch_add(1, Ordering::Relaxed);
    }

    /// A poll found nothing new at Unix ms `now_ms`.
    pub fn feed_caught_up(&self, now_ms: u64) {
        self.feed_held_by_pid.store(0, Ordering::Relaxed);
        self.feed_caught_up_ms.store(now_ms, Ordering::Relaxed);
    }

    /// The follower cannot continue its cursor and regenerates the node's links: until
    /// [`FleetStats::regenerated`], the node may be serving links deleted elsewhere.
    pub fn regenerating(&self) {
        self.regenerating.store(true, Ordering::Relaxed);
    }

    /// A regeneration swapped its tables in on every core.
    pub fn regenerated(&self) {
        self.regenerations.fetch_add(1, Ordering::Relaxed);
        self.regenerating.store(false, Ordering::Relaxed);
    }

    pub fn tombstones_removed(&self, n: u64) {
        self.tombstones_removed.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn ceiling_raise(&self) {
        self.ceiling_raises.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn ceiling_wait(&self) {
        self.ceiling_waits.fetch_add(1, Ordering::Relaxed);
    }

    /// A lookup was answered 404 from a fresh ceiling read, without a query.
    pub fn shed(&self) {
        self.shed_lookups.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn unknown_outcome(&self) {
        self.unknown_outcomes.fetch_add(1, Ordering::Relaxed);
    }

    /// The authority lost this node's confirmed allocations: no generated key is made again.
    pub fn fence(&self) {
        self.fenced.store(true, Ordering::Release);
    }

    /// Stops the use of IDs on hand until [`FleetStats::ids_proven`] (or [`FleetStats::fence`]).
    pub fn suspect_ids(&self) {
        self.ids_unproven.store(true, Ordering::Release);
    }

    /// The database holds this node's last confirmed allocation again: IDs on hand are good.
    pub fn ids_proven(&self) {
        self.ids_unproven.store(false, Ordering::Release);
    }

    /// Whether the IDs on hand wait for proof ([`FleetStats::suspect_ids`]).
    pub fn ids_unproven(&self) -> bool {
        self.ids_unproven.load(Ordering::Acquire)
    }

    /// Whether IDs on hand must not be used now (unproven, or fenced).
    pub fn ids_on_hold(&self) -> bool {
        self.ids_unproven.load(Ordering::Acquire) || self.is_fenced()
    }

    pub(crate) fn saw(&self, next_id: u64, hi: u64) {
        self.next_id_seen.store(next_id, Ordering::Relaxed);
        self.namespace_hi.store(hi, Ordering::Relaxed);
    }

    /// Whether the authority refuses to allocate until an operator intervenes.
    pub fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::Acquire)
    }

    /// Marks the database refused for `why` (or, with `None`, usable again).
    pub fn set_refused(&self, why: Option<DbRefusal>) {
        self.refused
            .store(why.map_or(0, |r| r as u8), Ordering::SeqCst);
    }

    /// Why the database is not used now, if it is not.
    pub fn refused(&self) -> Option<DbRefusal> {
        DbRefusal::from_u8(self.refused.load(Ordering::SeqCst))
    }

    fn latency(&self, took: Duration) {
        let us = took.as_micros().min(u128::from(u64::MAX)) as u64;
        let i = LATENCY_BUCKETS_US
            .iter()
            .position(|&b| us <= b)
            .unwrap_or(LATENCY_BUCKETS_US.len());
        self.latency_buckets[i].fetch_add(1, Ordering::Relaxed);
        self.latency_sum_us.fetch_add(us, Ordering::Relaxed);
    }

    /// Reads every counter.
    pub fn snapshot(&self) -> FleetStatsSnapshot {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut cumulative = 0;
        let mut buckets = Vec::with_capacity(LATENCY_BUCKETS_US.len() + 1);
        for (i, b) in self.latency_buckets.iter().enumerate() {
            cumulative += load(b);
            let le = LATENCY_BUCKETS_US
                .get(i)
                .map_or(f64::INFINITY, |&us| us as f64 / 1e6);
            buckets.push((le, cumulative));
        }
        FleetStatsSnapshot {
            allocations: load(&self.allocations),
            confirmed_ids: load(&self.confirmed_ids),
            failures: FailureClass::ALL
                .iter()
                .map(|c| (c.label(), load(&self.failures[c.index()])))
                .collect(),
            unknown_outcomes: load(&self.unknown_outcomes),
            latency_buckets: buckets,
            latency_sum_s: load(&self.latency_sum_us) as f64 / 1e6,
            latency_count: cumulative,
            fenced: self.is_fenced(),
            ids_unproven: self.ids_unproven.load(Ordering::Acquire),
            next_id_seen: load(&self.next_id_seen),
            namespace_hi: load(&self.namespace_hi),
            link_writes: load(&self.link_writes),
            link_write_failures: load(&self.link_write_failures),
            batched_creates: load(&self.batched_creates),
            feed_rows: load(&self.feed_rows),
            feed_failures: load(&self.feed_failures),
            feed_caught_up_ms: load(&self.feed_caught_up_ms),
            feed_held_by_pid: load(&self.feed_held_by_pid),
            feed_held_for_s: load(&self.feed_held_for_s),
            feed_rows_unusable: load(&self.feed_rows_unusable),
            read_queries: load(&self.read_queries),
            read_keys: load(&self.read_keys),
            ceiling_raises: load(&self.ceiling_raises),
            ceiling_waits: load(&self.ceiling_waits),
            shed_lookups: load(&self.shed_lookups),
            regenerating: self.regenerating.load(Ordering::Relaxed),
            regenerations: load(&self.regenerations),
            tombstones_removed: load(&self.tombstones_removed),
            refused: self.refused(),
        }
    }
}
